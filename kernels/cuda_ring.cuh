/* cuda_ring.cuh: the cp.async ring that the pipelined kernels (k_quant_t of cuda_quantize_t.cu,
 * k_grad_pair of cuda_grad_pair.cu) stream their input through: a ring of S shared-memory buffers
 * (S = 2..4) filled by 16-byte cp.async (L2 only; zero-filled where off). A persistent CTA takes
 * work items i, i + G, i + 2G, ... (G = gridDim.x); its k-th item lands in buffer k % S, and S - 1
 * items are in flight while one is worked on. One commit group per item, committed even when empty
 * (past the end), so the group count stays in step; one barrier per item:
 *   prologue: issue the CTA's items 0 .. S - 2;
 *   item k:   wait until at most S - 2 groups are pending (item k landed, this thread's part);
 *             barrier (item k landed for every thread, and every thread is done with item k - 1's
 *             buffer); issue item k + S - 1 into item k - 1's buffer; work on item k.
 * S = fcu_ring<T>::NS: 4 buffers for 2-byte inputs, 2 for f32 (the same bytes), so a CTA stays
 * under 48 KiB of static shared memory and 3 or 4 CTAs fit on an SM. Device code only. */
#ifndef FOS_CUDA_RING_CUH
#define FOS_CUDA_RING_CUH

#include <stdint.h>

__device__ __forceinline__ void fcu_cp_async16(uint32_t dst, const void *src, bool on)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(on ? 16 : 0) : "memory");
}
__device__ __forceinline__ void fcu_cp_commit()
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most S - 2 commit groups of this thread are pending (S 2..4). */
__device__ __forceinline__ void fcu_cp_wait_ring(int S)
{
	if (S >= 4)
		asm volatile("cp.async.wait_group 2;\n" ::: "memory");
	else if (S == 3)
		asm volatile("cp.async.wait_group 1;\n" ::: "memory");
	else
		asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Ring depth in buffers for input type T. */
template <typename T> struct fcu_ring {
	static constexpr int NS = sizeof(T) == 2 ? 4 : 2;
};

/* The CTA's walk over nitems work items through a ring of S buffers (the protocol above), written
 * by each kernel as
 *   fcu_ring_start(nitems, S, issue);
 *   for (int i = blockIdx.x, buf = 0; i < nitems; i += gridDim.x, buf = fcu_ring_next(buf, S)) {
 *           fcu_ring_advance(i, buf, nitems, S, issue);
 *           ... work on item i in buffer buf ...
 *   }
 * where issue(i, buf) queues item i's 16-byte copies into buffer buf (no commit). */
template <class Issue>
__device__ __forceinline__ void fcu_ring_start(int nitems, int S, const Issue &issue)
{
	const int G = gridDim.x, i = blockIdx.x;
	for (int s = 0; s < S - 1; s++) { /* the CTA's first S - 1 items */
		if (i + s * G < nitems)
			issue(i + s * G, s);
		fcu_cp_commit();
	}
}

/* Before working on item i in buffer buf: waits until it landed, passes the item's barrier and
 * issues item i + S - 1 into the buffer of item i - 1. */
template <class Issue>
__device__ __forceinline__ void fcu_ring_advance(int i, int buf, int nitems, int S, const Issue &issue)
{
	fcu_cp_wait_ring(S);
	__syncthreads(); /* item i landed; every thread is done with the previous item's buffer */
	const int ahead = i + (S - 1) * (int)gridDim.x;
	if (ahead < nitems)
		issue(ahead, buf == 0 ? S - 1 : buf - 1);
	fcu_cp_commit();
}

__device__ __forceinline__ int fcu_ring_next(int buf, int S)
{
	return buf + 1 == S ? 0 : buf + 1;
}

#endif
