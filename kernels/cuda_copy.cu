/* cuda_copy.cu: host<->device copies done by the GPU's SMs instead of a copy engine (an opt-in
 * experiment for small requests, fos_cuda_set_copy_kernels): a kernel reads (h2d) or writes (d2h)
 * host memory that is pinned and mapped for the device (cudaHostRegister: fosd's message pool and
 * shared-memory regions) through its device address. Every lane's copy then runs on SMs in
 * parallel instead of queueing on the one copy engine per direction. Anything else (pageable
 * memory, small or odd sizes, misaligned pointers) falls back to cudaMemcpyAsync. Same bytes. */
#include "cuda_internal.cuh"

#include <stdint.h>

#define FCU_COPY_MIN ((size_t)64 << 10)
#define FCU_COPY_MAX ((size_t)64 << 20)

/* 16 bytes a thread and step; four steps' loads are issued before their stores. */
__global__ void __launch_bounds__(256) k_copy16(uint4 *__restrict__ d, const uint4 *__restrict__ s, size_t n16)
{
	const size_t st = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	for (; i + 3 * st < n16; i += 4 * st) {
		const uint4 a = s[i], b = s[i + st], c = s[i + 2 * st], e = s[i + 3 * st];
		d[i] = a;
		d[i + st] = b;
		d[i + 2 * st] = c;
		d[i + 3 * st] = e;
	}
	for (; i < n16; i += st)
		d[i] = s[i];
}

/* The device address of pinned, mapped host memory p, or NULL. */
static void *fcu_mapped(const void *p)
{
	cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	return a.type == cudaMemoryTypeHost ? a.devicePointer : NULL;
}

int fcu_copy_sm(fos_backend *be, void *dst, const void *src, size_t n, int to_device, fos_err *err, int *done)
{
	struct fcu_impl *im = fcu(be);
	*done = 0;
	if (!im->copy_kernels || n < FCU_COPY_MIN || n > FCU_COPY_MAX || n % 16 || (uintptr_t)dst % 16 ||
	    (uintptr_t)src % 16)
		return FOS_OK;
	void *hd = fcu_mapped(to_device ? src : dst);
	if (!hd)
		return FOS_OK;
	const size_t n16 = n / 16;
	unsigned grid = (unsigned)((n16 + 1023) / 1024); /* 4 steps of 256 threads */
	if (grid > (unsigned)im->sms)
		grid = (unsigned)im->sms;
	if (to_device)
		k_copy16<<<grid, 256, 0, im->st>>>((uint4 *)dst, (const uint4 *)hd, n16);
	else
		k_copy16<<<grid, 256, 0, im->st>>>((uint4 *)hd, (const uint4 *)src, n16);
	int rc = fcu_launched(err, to_device ? "copy kernel launch (h2d)" : "copy kernel launch (d2h)");
	*done = !rc;
	return rc;
}
