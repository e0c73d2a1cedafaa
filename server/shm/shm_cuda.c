/* shm_cuda.c: the pin hook of shm.h for the cuda backend: cudaHostRegister on a region's mapping,
 * so that copies between a client's shared memory and the GPU are direct DMA, with no staging
 * copy. The CUDA backend (kernels/cuda_*.cu) needs no change: its h2d/d2h are cudaMemcpyAsync,
 * which the driver turns into DMA for registered memory. Builds without CUDA have no hook. */
#include "shm.h"

#include <stdio.h>

#ifdef FOS_HAVE_CUDA
/* The few CUDA runtime calls used here, declared with their C ABI (cudaError_t is an int-sized
 * enum), so that server/ needs no CUDA include path; libcudart is linked in CUDA builds. */
extern int cudaHostRegister(void *ptr, size_t size, unsigned int flags);
extern int cudaHostUnregister(void *ptr);
extern int cudaGetLastError(void);
extern const char *cudaGetErrorString(int error);
#define FOSD_CUDA_HOST_REGISTER_PORTABLE 1u /* cudaHostRegisterPortable: every context */

static int fosd_cuda_pin(void *p, size_t n, char *msg, size_t msgsz)
{
	int e = cudaHostRegister(p, n, FOSD_CUDA_HOST_REGISTER_PORTABLE);
	if (e) {
		cudaGetLastError(); /* not sticky; clear it */
		snprintf(msg, msgsz, "cudaHostRegister: %s", cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

static void fosd_cuda_unpin(void *p)
{
	if (cudaHostUnregister(p))
		cudaGetLastError();
}

static const fosd_pin_hook fosd_cuda_hook = {"cuda", fosd_cuda_pin, fosd_cuda_unpin};

const fosd_pin_hook *fosd_shm_cuda_pin_hook(void)
{
	return &fosd_cuda_hook;
}
#else
const fosd_pin_hook *fosd_shm_cuda_pin_hook(void)
{
	return NULL;
}
#endif
