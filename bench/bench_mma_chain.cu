/* bench_mma_chain.cu: issue 28's floor question, a standalone microbenchmark (not used by fosd):
 * how long one step of a DEPENDENT chain of tensor-core multiply-adds takes on this GPU, the
 * accumulator of step s + 1 being the output of step s, as in gemm_w4's one chain of k16 steps per
 * output (kernels/cuda_smallm.cu). Kinds measured (bf16 in, FP32 accumulate):
 *   - mma.sync m16n8k16 and m16n8k8: CH independent chains per warp, W warps per CTA, one CTA per SM;
 *   - wgmma m64n8k16 and m64n16k16, A from registers (W's decoded rows would be A, x the B operand
 *     in shared memory), one chain per warpgroup: either wgmma.fence / mma_async / commit_group /
 *     wait_group 0 around every step, or B steps issued back to back on the same accumulator (ordered
 *     by the hardware, PTX ISA: wgmma.mma_async of one shape on the same accumulator registers need no
 *     fence between them) and one commit + wait per B steps; CH chains per warpgroup, WG warpgroups.
 * Output per configuration: clock64 cycles per step (median over the warps) and ns per step (CUDA
 * events over the whole launch / steps, launch included, so an upper bound), and 256 steps (K = 4096)
 * in us. Build: make CUDA=1 BUILD=B B/bench/bench_mma_chain (sm_90a). Usage: bench_mma_chain [steps]. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "bench_mma_chain: %s: %s\n", #x, cudaGetErrorString(e_));          \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

enum { K_M16N8K16 = 0, K_M16N8K8 = 1, K_WG_N8 = 2, K_WG_N16 = 3 };

__device__ __forceinline__ void mma16(float *c, const uint32_t *a, const uint32_t *b)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
		     "{%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma8(float *c, const uint32_t *a, const uint32_t *b)
{
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
		     "{%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(b[0]));
}

/* Descriptor of a K-major shared-memory tile, no swizzle: start >> 4, leading byte offset 128 >> 4,
 * stride byte offset 256 >> 4 (the values only place the operand; its data does not matter here). */
__device__ __forceinline__ uint64_t desc_of(uint32_t addr)
{
	return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}

__device__ __forceinline__ void wg_n8(float *d, const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, "
		     "1, 1, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wg_n16(float *d, const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, "
		     "%10, %11}, %12, p, 1, 1, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void wg_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0(void)
{
	asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/* One CTA per SM; each warp (mma.sync) or warpgroup (wgmma) runs CH chains of `steps` dependent
 * steps; wgmma waits every B steps (B = 1: fence, mma, commit, wait around each step). */
template <int KIND, int CH, int B>
__global__ void k_chain(int steps, const uint32_t *in, float *out, long long *cyc)
{
	__shared__ __align__(1024) uint16_t bs[64 * 16 * 2];
	const int tid = threadIdx.x;
	for (int i = tid; i < 64 * 16 * 2; i += blockDim.x)
		bs[i] = (uint16_t)(0x3F80u + (i & 7)); /* bf16 1.0 .. 1.05 */
	__syncthreads();
	uint32_t a[4], b[2];
	for (int i = 0; i < 4; i++)
		a[i] = in[(tid + i) & 63];
	for (int i = 0; i < 2; i++)
		b[i] = in[(tid + 7 + i) & 63];
	const uint64_t db = desc_of((uint32_t)__cvta_generic_to_shared(bs));
	float acc[CH][8];
	for (int c = 0; c < CH; c++)
		for (int r = 0; r < 8; r++)
			acc[c][r] = 0.0f;
	const long long t0 = clock64();
	if (KIND == K_M16N8K16 || KIND == K_M16N8K8) {
#pragma unroll 8
		for (int s = 0; s < steps; s++)
#pragma unroll
			for (int c = 0; c < CH; c++) {
				if (KIND == K_M16N8K16)
					mma16(acc[c], a, b);
				else
					mma8(acc[c], a, b);
			}
	} else {
		for (int s = 0; s < steps; s += B) {
			wg_fence();
#pragma unroll
			for (int j = 0; j < B; j++)
#pragma unroll
				for (int c = 0; c < CH; c++) {
					if (KIND == K_WG_N8)
						wg_n8(acc[c], a, db);
					else
						wg_n16(acc[c], a, db);
				}
			wg_commit();
			wg_wait0();
		}
	}
	float sum = 0.0f;
	for (int c = 0; c < CH; c++)
		for (int r = 0; r < 8; r++)
			sum += acc[c][r];
	const long long t1 = clock64();
	out[blockIdx.x * blockDim.x + tid] = sum;
	if ((tid & 31) == 0)
		cyc[blockIdx.x * (blockDim.x / 32) + tid / 32] = t1 - t0;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? -1 : x > y;
}

typedef void (*kfn)(int, const uint32_t *, float *, long long *);

static void run(const char *name, kfn f, int ch, int b, int warps, int steps, int sms, double ghz,
		const uint32_t *in, float *out, long long *cyc)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	f<<<sms, 32 * warps>>>(steps, in, out, cyc); /* warm-up */
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	float best = 1e30f;
	for (int r = 0; r < 5; r++) {
		CK(cudaEventRecord(e0));
		f<<<sms, 32 * warps>>>(steps, in, out, cyc);
		CK(cudaEventRecord(e1));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		best = ms < best ? ms : best;
	}
	const int nw = sms * warps;
	long long *h = (long long *)malloc(sizeof(long long) * (size_t)nw);
	CK(cudaMemcpy(h, cyc, sizeof(long long) * (size_t)nw, cudaMemcpyDeviceToHost));
	qsort(h, (size_t)nw, sizeof h[0], cmp_ll);
	const double cps = (double)h[nw / 2] / steps, nsps = best * 1e6 / steps;
	printf("%-22s CH %d B %2d warps/SM %d: %6.1f cycles/step (%5.1f ns at %.2f GHz), launch %6.1f ns/step; "
	       "256 steps %5.2f us\n",
	       name, ch, b, warps, cps, cps / ghz, ghz, nsps, 256.0 * nsps / 1e3);
	free(h);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 8192;
	if (steps < 64 || steps % 64) {
		fprintf(stderr, "usage: bench_mma_chain [steps, a multiple of 64, default 8192]\n");
		return 2;
	}
	int dev = 0, n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("bench_mma_chain: no GPU: nothing to measure\n");
		return 0;
	}
	cudaDeviceProp pr;
	CK(cudaGetDeviceProperties(&pr, dev));
	if (pr.major != 9) {
		printf("bench_mma_chain: %s is sm_%d%d, this program is built for sm_90a\n", pr.name, pr.major, pr.minor);
		return 0;
	}
	int khz = 0;
	CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
	const double ghz = khz / 1e6;
	const int sms = pr.multiProcessorCount;
	printf("bench_mma_chain on %s (%d SMs, clock rate attribute %.2f GHz), %d steps per chain\n", pr.name, sms, ghz,
	       steps);
	uint32_t hin[64];
	for (int i = 0; i < 64; i++)
		hin[i] = 0x3C003C00u + (uint32_t)i; /* bf16 pairs near 2^-7 */
	uint32_t *in;
	float *out;
	long long *cyc;
	CK(cudaMalloc(&in, sizeof hin));
	CK(cudaMemcpy(in, hin, sizeof hin, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&out, sizeof(float) * (size_t)sms * 1024));
	CK(cudaMalloc(&cyc, sizeof(long long) * (size_t)sms * 32));
	const int wl[4] = {1, 2, 4, 8};
	for (int wi = 0; wi < 4; wi++) {
		const int w = wl[wi];
		run("mma.sync m16n8k16", k_chain<K_M16N8K16, 1, 1>, 1, 1, w, steps, sms, ghz, in, out, cyc);
		run("mma.sync m16n8k16", k_chain<K_M16N8K16, 2, 1>, 2, 1, w, steps, sms, ghz, in, out, cyc);
		run("mma.sync m16n8k16", k_chain<K_M16N8K16, 4, 1>, 4, 1, w, steps, sms, ghz, in, out, cyc);
		run("mma.sync m16n8k16", k_chain<K_M16N8K16, 8, 1>, 8, 1, w, steps, sms, ghz, in, out, cyc);
		run("mma.sync m16n8k8", k_chain<K_M16N8K8, 1, 1>, 1, 1, w, steps, sms, ghz, in, out, cyc);
		run("mma.sync m16n8k8", k_chain<K_M16N8K8, 4, 1>, 4, 1, w, steps, sms, ghz, in, out, cyc);
	}
	/* wgmma: warpgroups of 4 warps, 1 or 2 per SM */
	for (int wg = 1; wg <= 2; wg++) {
		const int w = 4 * wg;
		run("wgmma m64n8k16 RS", k_chain<K_WG_N8, 1, 1>, 1, 1, w, steps, sms, ghz, in, out, cyc);
		run("wgmma m64n8k16 RS", k_chain<K_WG_N8, 2, 1>, 2, 1, w, steps, sms, ghz, in, out, cyc);
		run("wgmma m64n8k16 RS", k_chain<K_WG_N8, 1, 4>, 1, 4, w, steps, sms, ghz, in, out, cyc);
		run("wgmma m64n8k16 RS", k_chain<K_WG_N8, 1, 16>, 1, 16, w, steps, sms, ghz, in, out, cyc);
		run("wgmma m64n8k16 RS", k_chain<K_WG_N8, 2, 16>, 2, 16, w, steps, sms, ghz, in, out, cyc);
		run("wgmma m64n16k16 RS", k_chain<K_WG_N16, 1, 1>, 1, 1, w, steps, sms, ghz, in, out, cyc);
		run("wgmma m64n16k16 RS", k_chain<K_WG_N16, 1, 16>, 1, 16, w, steps, sms, ghz, in, out, cyc);
	}
	CK(cudaFree(in));
	CK(cudaFree(out));
	CK(cudaFree(cyc));
	return 0;
}
