/* cuda_async.cu: the cuda backend's part of asynchronous requests (backend.h write_u32, mark_*):
 * a 32-bit store into a client's mapped word in stream order, which the client's stream waits on
 * (cuStreamWaitValue32), and plain events that tell fosd when a request's queued work is done, so
 * that its held sources can be freed without synchronizing the stream, and that another lane's
 * stream waits on before it reads what that work made.
 *
 * The store is the driver's cuStreamWriteValue32 (reached through cudaGetDriverEntryPointByVersion,
 * so nothing links libcuda; its default flags put a system-wide fence before the write, so the
 * client's stream sees the outputs the work before it wrote); a driver without it gets a
 * one-thread kernel that fences and stores. Both run after everything queued before them. */
#include "cuda_internal.cuh"

#include <cuda.h>

typedef CUresult (*fcu_write32_fn)(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned flags);

static fcu_write32_fn fcu_write32(void)
{
	static fcu_write32_fn fn;
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct L {
		static void look()
		{
			void *p = 0;
			cudaDriverEntryPointQueryResult q;
			if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &p, 12000, cudaEnableDefault, &q) ==
				    cudaSuccess &&
			    q == cudaDriverEntryPointSuccess)
				fn = (fcu_write32_fn)p;
			else
				cudaGetLastError();
		}
	};
	pthread_once(&once, L::look);
	return fn;
}

__global__ void fcu_store_u32(unsigned *dst, unsigned v)
{
	__threadfence_system();
	*(volatile unsigned *)dst = v;
	__threadfence_system();
}

static int fcu_write_u32(fos_backend *be, void *dst, uint32_t v, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	fcu_write32_fn w = fcu_write32();
	if (w) {
		CUresult r = w((CUstream)fcu(be)->st, (CUdeviceptr)(uintptr_t)dst, v, CU_STREAM_WRITE_VALUE_DEFAULT);
		if (r == CUDA_SUCCESS)
			return FOS_OK;
		return fos_seterr(err, FOS_EINTERNAL, "cuStreamWriteValue32 of the client's done word: CUresult %d", (int)r);
	}
	fcu_store_u32<<<1, 1, 0, fcu(be)->st>>>((unsigned *)dst, v);
	return fcu_check(cudaGetLastError(), err, "the done word's store kernel");
}

static int fcu_mark_record(fos_backend *be, void **ev, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	if (!*ev) {
		cudaEvent_t e = 0;
		if ((rc = fcu_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), err, "cudaEventCreateWithFlags")))
			return rc;
		*ev = (void *)e;
	}
	return fcu_check(cudaEventRecord((cudaEvent_t)*ev, fcu(be)->st), err, "cudaEventRecord (a request's end)");
}

static int fcu_mark_done(fos_backend *be, void *ev)
{
	(void)be;
	cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
	if (e == cudaSuccess)
		return 1;
	if (e == cudaErrorNotReady) {
		cudaGetLastError();
		return 0;
	}
	cudaGetLastError();
	return -1;
}

static int fcu_mark_wait(fos_backend *be, void *ev, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	return fcu_check(cudaStreamWaitEvent(fcu(be)->st, (cudaEvent_t)ev, 0), err,
			 "cudaStreamWaitEvent (another lane's work)");
}

static void fcu_mark_free(fos_backend *be, void *ev)
{
	fos_err e;
	if (ev && (fcu_enter(be, &e) || cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess))
		cudaGetLastError();
}

void fcu_async_install(fos_backend *be)
{
	be->write_u32 = fcu_write_u32;
	be->mark_record = fcu_mark_record;
	be->mark_done = fcu_mark_done;
	be->mark_free = fcu_mark_free;
	be->mark_wait = fcu_mark_wait;
}
