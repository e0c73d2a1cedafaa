/* cuda_ipc.cu: the cuda backend's access to memory and events of other processes on the same GPU
 * (backend.h ipc_*): CUDA IPC memory handles mapped with cudaIpcOpenMemHandle (the driver counts
 * repeated opens of one handle and returns the same address), the allocation's size asked from the
 * driver API (cuMemGetAddressRange, reached through cudaGetDriverEntryPointByVersion so nothing
 * links libcuda), IPC events that a stream waits on, the instance's own IPC event that clients
 * wait on (one per instance: its handle never changes, each record supersedes the last), and
 * small synchronous reads. */
#include "cuda_internal.cuh"

#include <cuda.h>
#include <stdio.h>

typedef CUresult (*fcu_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);

/* cuMemGetAddressRange of the driver (ABI of CUDA 12.0), looked up once. */
static fcu_range_fn fcu_range(void)
{
	static fcu_range_fn fn;
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct L {
		static void look()
		{
			void *p = 0;
			cudaDriverEntryPointQueryResult q;
			if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q) ==
				    cudaSuccess &&
			    q == cudaDriverEntryPointSuccess)
				fn = (fcu_range_fn)p;
			else
				cudaGetLastError();
		}
	};
	pthread_once(&once, L::look);
	return fn;
}

static int fcu_ipc_open(fos_backend *be, const unsigned char handle[64], void **base, size_t *size, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	cudaIpcMemHandle_t h;
	memcpy(&h, handle, sizeof h);
	void *p = 0;
	cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return fos_seterr(err, FOS_EINVAL, "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
	}
	fcu_range_fn range = fcu_range();
	CUdeviceptr b = 0;
	size_t n = 0;
	if (!range || range(&b, &n, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS || (void *)(uintptr_t)b != p) {
		cudaIpcCloseMemHandle(p);
		cudaGetLastError();
		return fos_seterr(err, FOS_EINTERNAL, "cannot ask the driver for the size of a mapped CUDA IPC allocation");
	}
	*base = p;
	*size = n;
	return FOS_OK;
}

static void fcu_ipc_close(fos_backend *be, void *base)
{
	fos_err e;
	if (fcu_enter(be, &e) || cudaIpcCloseMemHandle(base) != cudaSuccess)
		cudaGetLastError();
}

static int fcu_ipc_event_open(fos_backend *be, const unsigned char handle[64], void **ev, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	cudaIpcEventHandle_t h;
	memcpy(&h, handle, sizeof h);
	cudaEvent_t e = 0;
	cudaError_t st = cudaIpcOpenEventHandle(&e, h);
	if (st != cudaSuccess) {
		cudaGetLastError();
		return fos_seterr(err, FOS_EINVAL, "cudaIpcOpenEventHandle: %s", cudaGetErrorString(st));
	}
	*ev = (void *)e;
	return FOS_OK;
}

static void fcu_ipc_event_close(fos_backend *be, void *ev)
{
	fos_err e;
	if (fcu_enter(be, &e) || cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess)
		cudaGetLastError();
}

static int fcu_ipc_event_wait(fos_backend *be, void *ev, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	return fcu_check(cudaStreamWaitEvent(fcu(be)->st, (cudaEvent_t)ev, 0), err, "cudaStreamWaitEvent");
}

static int fcu_ipc_event_sync(fos_backend *be, void *ev, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	return fcu_check(cudaEventSynchronize((cudaEvent_t)ev), err, "cudaEventSynchronize");
}

static int fcu_done_event_handle(fos_backend *be, unsigned char handle[64], fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	if (!im->done_ev) {
		cudaEvent_t ev = 0;
		cudaIpcEventHandle_t h;
		rc = fcu_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess), err,
			       "cudaEventCreateWithFlags (interprocess)");
		if (!rc && (rc = fcu_check(cudaIpcGetEventHandle(&h, ev), err, "cudaIpcGetEventHandle")))
			cudaEventDestroy(ev);
		if (rc) {
			cudaGetLastError();
			return rc;
		}
		memcpy(im->done_handle, &h, sizeof im->done_handle);
		im->done_ev = ev;
	}
	memcpy(handle, im->done_handle, sizeof im->done_handle);
	return FOS_OK;
}

static int fcu_done_event_record(fos_backend *be, fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	if (!im->done_ev)
		return fos_seterr(err, FOS_EINVAL, "done_event_record before done_event_handle");
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	return fcu_check(cudaEventRecord(im->done_ev, im->st), err, "cudaEventRecord (done event)");
}

static int fcu_read_sync(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	return fcu_check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), err, "cudaMemcpy (device to host)");
}

void fcu_ipc_install(fos_backend *be, const unsigned char uuid[16])
{
	memcpy(be->uuid, uuid, 16);
	be->has_uuid = 1;
	be->ipc_open = fcu_ipc_open;
	be->ipc_close = fcu_ipc_close;
	be->ipc_event_open = fcu_ipc_event_open;
	be->ipc_event_close = fcu_ipc_event_close;
	be->ipc_event_wait = fcu_ipc_event_wait;
	be->ipc_event_sync = fcu_ipc_event_sync;
	be->done_event_handle = fcu_done_event_handle;
	be->done_event_record = fcu_done_event_record;
	be->read_sync = fcu_read_sync;
	fcu_async_install(be);
}
