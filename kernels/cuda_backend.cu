/* cuda_backend.cu: the CUDA backend's constructor (fos_backend_cuda), its memory ops and the
 * CUDA-only extras of cuda_backend.h that are not kernels (events, switches). One stream per
 * instance; every op is queued on it. Device memory comes from the device's stream-ordered pool
 * (cudaMallocAsync, kept cached), so the per-request allocations of linear.c cost no device sync,
 * through a host-side cache of freed blocks (cuda_blocks.cu) that spares most of them the driver.
 *
 * Several instances may live in one process (fosd runs one per executor lane): each has its own
 * stream, cuBLASLt handle, plans and scratch, and they share the device's primary context and its
 * default memory pool, so memory allocated through one is valid for all. The pool does not let an
 * allocation on one stream wait for a free on another (no internal dependencies): freed blocks are
 * reused on their own stream, or once the free has completed, so streams never wait on each other
 * through the allocator. */
#include "cuda_internal.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *fcu_alloc(fos_backend *be, size_t bytes)
{
	struct fcu_impl *im = fcu(be);
	if (cudaSetDevice(im->dev) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	void *p = 0;
	size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
	if (im->recording) /* being recorded into a graph: memory the graph keeps (cuda_graph.cu) */
		return fcu_graph_alloc(be, n);
	if (im->blocks)
		return fcu_blocks_alloc(be, n);
	cudaError_t e = im->pools ? cudaMallocAsync(&p, n, im->st) : cudaMalloc(&p, n);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* an out-of-memory is not sticky: clear it */
		return 0;
	}
	if ((uintptr_t)p % 64) { /* never seen; the interface promises 64-byte alignment */
		if (im->pools)
			cudaFreeAsync(p, im->st);
		else
			cudaFree(p);
		return 0;
	}
	return p;
}

static void fcu_free(fos_backend *be, void *p)
{
	struct fcu_impl *im = fcu(be);
	if (!p || (im->recording && fcu_graph_owns(be, p)))
		return;
	cudaSetDevice(im->dev);
	if (im->blocks)
		fcu_blocks_free(be, p);
	else if (im->pools)
		cudaFreeAsync(p, im->st); /* stream-ordered: after every queued use */
	else
		cudaFree(p);
}

static int fcu_h2d(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	if (!n)
		return FOS_OK;
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, fcu(be)->st), err, "cudaMemcpyAsync (h2d)");
	/* The caller may reuse src as soon as we return, unless it asked for no wait (it then keeps src
	 * until its next d2h or sync: fos_cuda_set_h2d_nowait). */
	if (!rc && !fcu(be)->h2d_nowait)
		rc = fcu_check(cudaStreamSynchronize(fcu(be)->st), err, "cudaStreamSynchronize (h2d)");
	return rc;
}

static int fcu_d2h(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	if (!n)
		return FOS_OK;
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, fcu(be)->st), err, "cudaMemcpyAsync (d2h)");
	if (!rc)
		rc = fcu_check(cudaStreamSynchronize(fcu(be)->st), err, "cudaStreamSynchronize (d2h)");
	return rc;
}

static int fcu_d2d(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	if (!n || dst == src)
		return FOS_OK;
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, fcu(be)->st), err, "cudaMemcpyAsync (d2d)");
	return rc;
}

static int fcu_zero(fos_backend *be, void *dst, size_t n, fos_err *err)
{
	if (!n)
		return FOS_OK;
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaMemsetAsync(dst, 0, n, fcu(be)->st), err, "cudaMemsetAsync (zero)");
	return rc;
}

static int fcu_sync(fos_backend *be, fos_err *err)
{
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaStreamSynchronize(fcu(be)->st), err, "cudaStreamSynchronize");
	return rc;
}

/* backend.h side_begin / side_end / side_join: st points at the side stream while side work is
 * queued, so every op queues there unchanged; fork and join are events between the two. */
static int fcu_side_begin(fos_backend *be, fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	if (im->main_st)
		return fos_seterr(err, FOS_EINVAL, "side_begin: side work is already being queued");
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaEventRecord(im->fork_ev, im->st), err, "cudaEventRecord (fork)");
	if (!rc)
		rc = fcu_check(cudaStreamWaitEvent(im->side, im->fork_ev, 0), err, "cudaStreamWaitEvent (fork)");
	if (!rc) {
		im->main_st = im->st;
		im->st = im->side;
	}
	return rc;
}

static int fcu_side_end(fos_backend *be, fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	if (!im->main_st)
		return fos_seterr(err, FOS_EINVAL, "side_end without side_begin");
	int rc = fcu_check(cudaEventRecord(im->join_ev, im->side), err, "cudaEventRecord (join)");
	im->st = im->main_st;
	im->main_st = 0;
	return rc;
}

static int fcu_side_join(fos_backend *be, fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	return fcu_check(cudaStreamWaitEvent(im->st, im->join_ev, 0), err, "cudaStreamWaitEvent (join)");
}

static void fcu_destroy(fos_backend *be)
{
	if (!be)
		return;
	struct fcu_impl *im = fcu(be);
	if (im) {
		cudaSetDevice(im->dev);
		if (im->st)
			cudaStreamSynchronize(im->st);
		fcu_graph_release(be);
		fcu_gemm_release(be);
		fcu_blocks_close(be);
		for (int i = 0; i < FCU_NEVENTS; i++)
			if (im->ev[i])
				cudaEventDestroy(im->ev[i]);
		if (im->lt)
			cublasLtDestroy(im->lt);
		if (im->main_st) /* side work never ended: st is the side stream */
			im->st = im->main_st;
		if (im->side) {
			cudaStreamSynchronize(im->side);
			cudaStreamDestroy(im->side);
		}
		if (im->fork_ev)
			cudaEventDestroy(im->fork_ev);
		if (im->join_ev)
			cudaEventDestroy(im->join_ev);
		if (im->done_ev)
			cudaEventDestroy(im->done_ev);
		if (im->st)
			cudaStreamDestroy(im->st);
		pthread_mutex_destroy(&im->mu);
		cudaGetLastError();
		free(im);
	}
	free(be);
}

extern "C" fos_backend *fos_backend_cuda(int device, fos_err *err)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count <= 0) {
		cudaGetLastError();
		fos_seterr(err, FOS_EUNSUPPORTED, "no usable CUDA GPU: %s",
			   e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports no device");
		return 0;
	}
	if (device < 0 || device >= count) {
		fos_seterr(err, FOS_EINVAL, "CUDA device %d does not exist (%d device%s)", device, count,
			   count == 1 ? "" : "s");
		return 0;
	}
	cudaDeviceProp prop;
	if (fcu_check(cudaGetDeviceProperties(&prop, device), err, "cudaGetDeviceProperties"))
		return 0;
	if (prop.major != 9) {
		fos_seterr(err, FOS_EUNSUPPORTED,
			   "CUDA device %d (%s) is sm_%d%d; this build has kernels for sm_90 (Hopper) only", device,
			   prop.name, prop.major, prop.minor);
		return 0;
	}
	fos_backend *be = (fos_backend *)calloc(1, sizeof *be);
	struct fcu_impl *im = (struct fcu_impl *)calloc(1, sizeof *im);
	if (!be || !im) {
		free(be);
		free(im);
		fos_seterr(err, FOS_ENOMEM, "out of memory creating the cuda backend");
		return 0;
	}
	be->impl = im;
	im->dev = device;
	im->sms = prop.multiProcessorCount;
	pthread_mutex_init(&im->mu, 0);
	const char *gr = getenv("FOS_CUDA_GRAPHS");
	im->use_graphs = gr ? atoi(gr) != 0 : 1;
	be->name = "cuda";
	snprintf(be->device, sizeof be->device, "%.80s (sm_%d%d, %d SMs, device %d)", prop.name, prop.major, prop.minor,
		 prop.multiProcessorCount, device);
	be->destroy = fcu_destroy;
	be->alloc = fcu_alloc;
	be->free = fcu_free;
	be->h2d = fcu_h2d;
	be->d2h = fcu_d2h;
	be->d2d = fcu_d2d;
	be->sync = fcu_sync;
	be->zero = fcu_zero;
	be->amax = fcu_amax;
	be->transpose = fcu_transpose;
	be->quantize = fcu_quantize;
	be->quantize_t = fcu_quantize_t;
	be->dequantize = fcu_dequantize;
	be->decode = fcu_decode;
	be->gemm = fcu_gemm;
	be->gemm_ex = fcu_gemm_ex;
	be->colsum = fcu_colsum;
	be->replay = fcu_replay;
	be->grad_pair = fcu_grad_pair;
	be->side_begin = fcu_side_begin;
	be->side_end = fcu_side_end;
	be->side_join = fcu_side_join;
	fcu_ipc_install(be, (const unsigned char *)prop.uuid.bytes);
	fcu_smallm_install(be);

	int rc = fcu_check(cudaSetDevice(device), err, "cudaSetDevice");
	if (!rc)
		rc = fcu_check(cudaStreamCreateWithFlags(&im->st, cudaStreamNonBlocking), err, "cudaStreamCreate");
	if (!rc)
		rc = fcu_check(cudaStreamCreateWithFlags(&im->side, cudaStreamNonBlocking), err, "cudaStreamCreate (side)");
	if (!rc)
		rc = fcu_check(cudaEventCreateWithFlags(&im->fork_ev, cudaEventDisableTiming), err, "cudaEventCreate");
	if (!rc)
		rc = fcu_check(cudaEventCreateWithFlags(&im->join_ev, cudaEventDisableTiming), err, "cudaEventCreate");
	if (!rc)
		rc = fcu_lt_check(cublasLtCreate(&im->lt), err, "cublasLtCreate");
	for (int i = 0; !rc && i < FCU_NEVENTS; i++)
		rc = fcu_check(cudaEventCreate(&im->ev[i]), err, "cudaEventCreate");
	if (!rc) {
		int pools = 0;
		rc = fcu_check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device), err,
			       "cudaDeviceGetAttribute (memory pools)");
		im->pools = pools;
	}
	if (!rc && im->pools) {
		/* Keep freed memory in the pool instead of returning it at every sync. */
		cudaMemPool_t pool;
		uint64_t keep = UINT64_MAX;
		int no = 0;
		rc = fcu_check(cudaDeviceGetDefaultMemPool(&pool, device), err, "cudaDeviceGetDefaultMemPool");
		if (!rc)
			rc = fcu_check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), err,
				       "cudaMemPoolSetAttribute");
		/* Instances on other streams never wait for each other's frees (see the top of the file). */
		if (!rc)
			rc = fcu_check(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no), err,
				       "cudaMemPoolSetAttribute (internal dependencies)");
	}
	if (!rc) {
		im->scal = (float *)fcu_alloc(be, 2 * sizeof(float));
		if (!im->scal)
			rc = fos_seterr(err, FOS_ENOMEM, "out of device memory for the GEMM scalars");
		else
			rc = fcu_check(cudaMemsetAsync(im->scal, 0, 2 * sizeof(float), im->st), err, "cudaMemsetAsync");
	}
	/* after the scalars: fcu_gemm_release gives them straight back to the pool */
	if (!rc && im->pools)
		rc = fcu_blocks_open(be, err);
	if (!rc)
		rc = fcu_check(cudaStreamSynchronize(im->st), err, "cudaStreamSynchronize");
	if (rc) {
		fcu_destroy(be);
		return 0;
	}
	return be;
}

/* Resident blocks per SM of each kernel, asked once per kernel (keyed by its address). max_smem:
 * first ask for the largest shared-memory carveout (the cp.async ring kernels, 3 or 4 CTAs of
 * about 42 KiB per SM; a preference, so a refusal is ignored). */
int fcu_occupancy(const void *kernel, int bs, int max_smem)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static const void *keys[256];
	static int vals[256], n;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < n; i++)
		if (keys[i] == kernel) {
			int v = vals[i];
			pthread_mutex_unlock(&mu);
			return v;
		}
	int v = 0;
	if (max_smem && cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
					     (int)cudaSharedmemCarveoutMaxShared) != cudaSuccess)
		cudaGetLastError();
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, bs, 0) != cudaSuccess || v < 1) {
		cudaGetLastError();
		v = 2;
	}
	if (n < 256) {
		keys[n] = kernel;
		vals[n++] = v;
	}
	pthread_mutex_unlock(&mu);
	return v;
}

/* ---- cuda_backend.h extras ------------------------------------------------------------------- */

extern "C" int fos_cuda_mark(fos_backend *be, int slot, fos_err *err)
{
	if (slot < 0 || slot >= FCU_NEVENTS)
		return fos_seterr(err, FOS_EINVAL, "event slot %d not in 0..%d", slot, FCU_NEVENTS - 1);
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaEventRecord(fcu(be)->ev[slot], fcu(be)->st), err, "cudaEventRecord");
	return rc;
}

extern "C" int fos_cuda_elapsed_ms(fos_backend *be, int a, int b, float *ms, fos_err *err)
{
	if (a < 0 || a >= FCU_NEVENTS || b < 0 || b >= FCU_NEVENTS)
		return fos_seterr(err, FOS_EINVAL, "event slots %d, %d not in 0..%d", a, b, FCU_NEVENTS - 1);
	int rc = fcu_enter(be, err);
	if (!rc)
		rc = fcu_check(cudaEventSynchronize(fcu(be)->ev[b]), err, "cudaEventSynchronize");
	if (!rc)
		rc = fcu_check(cudaEventElapsedTime(ms, fcu(be)->ev[a], fcu(be)->ev[b]), err, "cudaEventElapsedTime");
	return rc;
}

extern "C" int fos_cuda_set_h2d_nowait(fos_backend *be, int on, fos_err *err)
{
	return fcu_set_switch(be, &fcu_impl::h2d_nowait, on, err);
}
