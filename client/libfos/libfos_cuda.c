/* libfos_cuda.c: device tensors (fos.h "device tensors"): the CUDA driver API, loaded with dlopen
 * on first use (libfos links and runs on hosts without CUDA); turning a tensor in CUDA memory into
 * a CudaRef (the IPC handle of its allocation's base, its offset there, its GPU's UUID); the
 * handle's cache of exported allocations and CloseDeviceMemory for stale and released ones;
 * checking device results in a reply; and small
 * device-memory helpers (fos_cuda_malloc, fos_cuda_free, fos_cuda_memcpy).
 *
 * Invariants: an allocation is exported at most once per handle while it lives: the cache is keyed
 * by (base, CU_POINTER_ATTRIBUTE_BUFFER_ID), which the driver never reuses in a process, so memory
 * freed and allocated again at the same address is exported anew and the old entry (and every
 * entry whose range overlaps the new allocation) is dropped and fosd told to close it. The cache
 * holds no driver object: a cached entry is only bytes (handle, UUID, range); at most
 * FOSC_DEV_CACHE_MAX of them, the least recently used going first. Every driver call
 * that needs a context pushes the pointer's own context and pops it again, so the caller's
 * current context is never changed. */
#include "libfos_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CUDA driver API values of libfos_internal.h checked against cuda.h where it is installed. */
#if defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
_Static_assert((int)FOSC_CU_PTR_CONTEXT == (int)CU_POINTER_ATTRIBUTE_CONTEXT &&
		       (int)FOSC_CU_PTR_MEMORY_TYPE == (int)CU_POINTER_ATTRIBUTE_MEMORY_TYPE &&
		       (int)FOSC_CU_PTR_BUFFER_ID == (int)CU_POINTER_ATTRIBUTE_BUFFER_ID &&
		       (int)FOSC_CU_PTR_IS_MANAGED == (int)CU_POINTER_ATTRIBUTE_IS_MANAGED &&
		       (int)FOSC_CU_PTR_DEVICE_ORDINAL == (int)CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
		       (int)FOSC_CU_PTR_IS_LEGACY_IPC == (int)CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE &&
		       (int)FOSC_CU_PTR_RANGE_START == (int)CU_POINTER_ATTRIBUTE_RANGE_START_ADDR &&
		       (int)FOSC_CU_PTR_RANGE_SIZE == (int)CU_POINTER_ATTRIBUTE_RANGE_SIZE &&
		       (int)FOSC_CU_MEMORYTYPE_DEVICE == (int)CU_MEMORYTYPE_DEVICE &&
		       (int)FOSC_CU_EVENT_DISABLE_TIMING == (int)CU_EVENT_DISABLE_TIMING &&
		       (int)FOSC_CU_EVENT_INTERPROCESS == (int)CU_EVENT_INTERPROCESS &&
		       (int)FOSC_CU_IPC_HANDLE_SIZE == (int)CU_IPC_HANDLE_SIZE && sizeof(CUdeviceptr) == sizeof(uint64_t) &&
		       sizeof(CUdevice) == sizeof(int) && sizeof(CUresult) == sizeof(int) &&
		       sizeof(CUuuid) == 16 && sizeof(CUipcMemHandle) == 64 && sizeof(CUipcEventHandle) == 64 &&
		       sizeof(fosc_cu_ipc_event_handle) == sizeof(CUipcEventHandle),
	       "libfos_cuda.c's driver constants differ from cuda.h");
#endif
#endif

/* Allocations the cache of one handle holds at most. */
#define FOSC_DEV_CACHE_MAX 1024

/* One exported allocation (fos_client.devs, most recently used first). */
typedef struct fosc_dev {
	uint64_t base, size, buffer_id;
	uint8_t handle[FOSC_CU_IPC_HANDLE_SIZE];
	uint8_t uuid[16];
	struct fosc_dev *next;
} fosc_dev;

/* ---- the driver ---------------------------------------------------------------------------- */

static pthread_mutex_t g_drv_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_drv_state; /* 0: not tried; 1: g_drv usable; -1: unusable, g_drv_why says why */
static fosc_cuda_api g_drv;
static char g_drv_why[300];

static int drv_sym(void *dl, const char *name, const char *alt, void *fp)
{
	void *p = dlsym(dl, name);
	if (!p && alt)
		p = dlsym(dl, alt);
	memcpy(fp, &p, sizeof p); /* object pointer to function pointer (POSIX dlsym) */
	return p != NULL;
}

/* g_drv_mu held. */
static void drv_load(void)
{
	const char *name = getenv("FOS_CUDA_DRIVER");
	if (!name || !*name)
		name = "libcuda.so.1";
	g_drv_state = -1;
	void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		snprintf(g_drv_why, sizeof g_drv_why, "no CUDA driver (%s)", e ? e : name);
		return;
	}
	fosc_cuda_api a;
	memset(&a, 0, sizeof a);
	const char *missing = NULL;
#define SYM(field, nm, alt)                                                                                    \
	do {                                                                                                   \
		if (!drv_sym(dl, nm, alt, &a.field) && !missing)                                               \
			missing = nm;                                                                          \
	} while (0)
	SYM(Init, "cuInit", NULL);
	SYM(DeviceGet, "cuDeviceGet", NULL);
	SYM(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
	SYM(PointerGetAttributes, "cuPointerGetAttributes", NULL);
	SYM(MemGetAddressRange, "cuMemGetAddressRange_v2", NULL);
	SYM(IpcGetMemHandle, "cuIpcGetMemHandle", NULL);
	SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", NULL);
	SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", NULL);
	SYM(CtxSynchronize, "cuCtxSynchronize", NULL);
	SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
	SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM(MemAlloc, "cuMemAlloc_v2", NULL);
	SYM(MemFree, "cuMemFree_v2", NULL);
	SYM(Memcpy, "cuMemcpy", NULL);
	SYM(StreamGetCtx, "cuStreamGetCtx", NULL);
	SYM(EventCreate, "cuEventCreate", NULL);
	SYM(EventRecord, "cuEventRecord", NULL);
	SYM(EventDestroy, "cuEventDestroy_v2", NULL);
	SYM(IpcGetEventHandle, "cuIpcGetEventHandle", NULL);
#undef SYM
	drv_sym(dl, "cuGetErrorName", NULL, &a.GetErrorName); /* optional: messages name the code */
	drv_sym(dl, "cuIpcOpenEventHandle", NULL, &a.IpcOpenEventHandle);     /* optional: FOS_CUDA_ORDER_OUTPUTS */
	drv_sym(dl, "cuStreamWaitEvent", NULL, &a.StreamWaitEvent);
	/* optional: FOS_CUDA_ORDER_ASYNC (libfos_async.c) */
	drv_sym(dl, "cuStreamWaitValue32_v2", "cuStreamWaitValue32", &a.StreamWaitValue32);
	drv_sym(dl, "cuStreamWriteValue32_v2", "cuStreamWriteValue32", &a.StreamWriteValue32);
	drv_sym(dl, "cuStreamCreate", NULL, &a.StreamCreate);
	drv_sym(dl, "cuStreamDestroy_v2", "cuStreamDestroy", &a.StreamDestroy);
	drv_sym(dl, "cuMemsetD32_v2", "cuMemsetD32", &a.MemsetD32);
	if (missing) {
		snprintf(g_drv_why, sizeof g_drv_why, "the CUDA driver %s has no %s", name, missing);
		dlclose(dl);
		return;
	}
	int rc = a.Init(0);
	if (rc) {
		const char *en = NULL;
		if (a.GetErrorName)
			a.GetErrorName(rc, &en);
		snprintf(g_drv_why, sizeof g_drv_why, "no CUDA device (cuInit: %s)", en ? en : "error");
		dlclose(dl);
		return;
	}
	g_drv = a;
	g_drv_state = 1; /* the library stays loaded for the process */
}

/* The driver, or NULL with st FAILED_PRECONDITION saying why there is none. */
const fosc_cuda_api *fosc_cuda_drv(fos_status *st)
{
	pthread_mutex_lock(&g_drv_mu);
	if (!g_drv_state)
		drv_load();
	int s = g_drv_state;
	pthread_mutex_unlock(&g_drv_mu);
	if (s < 0) {
		fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "%s", g_drv_why);
		return NULL;
	}
	return &g_drv;
}

void fosc_cuda_override(const fosc_cuda_api *api)
{
	pthread_mutex_lock(&g_drv_mu);
	if (api) {
		g_drv = *api;
		g_drv_state = 1;
	} else {
		memset(&g_drv, 0, sizeof g_drv);
		g_drv_state = 0;
	}
	pthread_mutex_unlock(&g_drv_mu);
}

/* "CUDA_ERROR_X" for rc (a buffer of the calling thread). */
const char *fosc_cuda_err(const fosc_cuda_api *a, int rc)
{
	static _Thread_local char buf[48];
	const char *n = NULL;
	if (a->GetErrorName && !a->GetErrorName(rc, &n) && n)
		return n;
	snprintf(buf, sizeof buf, "CUDA error %d", rc);
	return buf;
}

char *fos_gpu_uuid_str(const uint8_t u[16], char out[41])
{
	static const char hx[] = "0123456789abcdef";
	int j = 0;
	out[j++] = 'G', out[j++] = 'P', out[j++] = 'U', out[j++] = '-';
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[j++] = '-';
		out[j++] = hx[u[i] >> 4];
		out[j++] = hx[u[i] & 15];
	}
	out[j] = 0;
	return out;
}

/* ---- what a pointer is --------------------------------------------------------------------- */

typedef struct devinfo {
	void *ctx;
	unsigned memtype, managed, ipc_ok;
	int ordinal;
	uint64_t buffer_id, base, size;
} devinfo;

/* Fills d for p; what names the tensor in messages. INVALID_ARGUMENT for memory that is not CUDA
 * device memory, FAILED_PRECONDITION for memory that CUDA IPC cannot share. */
static int dev_query(const fosc_cuda_api *a, const void *p, devinfo *d, const char *what, fos_status *st)
{
	memset(d, 0, sizeof *d);
	d->ordinal = -1;
	d->ipc_ok = 1;
	int attrs[8] = {FOSC_CU_PTR_CONTEXT,        FOSC_CU_PTR_MEMORY_TYPE, FOSC_CU_PTR_BUFFER_ID,
			FOSC_CU_PTR_IS_MANAGED,     FOSC_CU_PTR_DEVICE_ORDINAL, FOSC_CU_PTR_RANGE_START,
			FOSC_CU_PTR_RANGE_SIZE,     FOSC_CU_PTR_IS_LEGACY_IPC};
	void *data[8] = {&d->ctx, &d->memtype, &d->buffer_id, &d->managed, &d->ordinal, &d->base, &d->size, &d->ipc_ok};
	uint64_t ptr = (uint64_t)(uintptr_t)p;
	int rc = a->PointerGetAttributes(8, attrs, data, ptr);
	int ranged = rc == 0;
	if (rc) { /* a driver without the range and IPC attributes: the first five, then the range */
		memset(d, 0, sizeof *d);
		d->ordinal = -1;
		d->ipc_ok = 1;
		rc = a->PointerGetAttributes(5, attrs, data, ptr);
	}
	if (rc)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: cuPointerGetAttributes(%p): %s", what, p,
				   fosc_cuda_err(a, rc));
	if (d->memtype != FOSC_CU_MEMORYTYPE_DEVICE || !d->ctx || d->ordinal < 0)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: %p is not CUDA device memory", what, p);
	if (d->managed)
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
				   "tensor %s: %p is CUDA managed memory, which CUDA IPC cannot share (use cudaMalloc)",
				   what, p);
	if (!d->ipc_ok)
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
				   "tensor %s: the allocation at %p cannot be exported as a legacy CUDA IPC handle "
				   "(cuMemCreate / virtual memory management, e.g. PyTorch's expandable_segments "
				   "allocator, or a cudaMallocAsync pool): allocate it with cudaMalloc",
				   what, p);
	if (!ranged || !d->size) {
		size_t sz = 0;
		if ((rc = a->CtxPushCurrent(d->ctx)))
			return fosc_status(st, FOS_CODE_INTERNAL, "tensor %s: cuCtxPushCurrent: %s", what, fosc_cuda_err(a, rc));
		rc = a->MemGetAddressRange(&d->base, &sz, ptr);
		void *prev;
		a->CtxPopCurrent(&prev);
		if (rc)
			return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: cuMemGetAddressRange(%p): %s", what,
					   p, fosc_cuda_err(a, rc));
		d->size = sz;
	}
	if (ptr < d->base || ptr - d->base >= d->size)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: %p is outside the allocation the driver "
				   "reports for it", what, p);
	return FOS_CODE_OK;
}

static int dev_uuid(const fosc_cuda_api *a, int ordinal, uint8_t uuid[16], const char *what, fos_status *st)
{
	int dev = 0, rc = a->DeviceGet(&dev, ordinal);
	if (!rc)
		rc = a->DeviceGetUuid(uuid, dev);
	if (rc)
		return fosc_status(st, FOS_CODE_INTERNAL, "tensor %s: the UUID of CUDA device %d: %s", what, ordinal,
				   fosc_cuda_err(a, rc));
	return FOS_CODE_OK;
}

/* ---- the cache ------------------------------------------------------------------------------ */

static int fosc_dev_close(fos_client *c, const uint8_t handle[FOSC_CU_IPC_HANDLE_SIZE], fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__CloseDeviceMemoryRequest cr = FOS__CLOSE_DEVICE_MEMORY_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_CLOSE_DEVICE_MEMORY;
	rq.close_device_memory = &cr;
	cr.ipc_handle.len = FOSC_CU_IPC_HANDLE_SIZE;
	cr.ipc_handle.data = (uint8_t *)handle;
	atomic_fetch_add(&c->dev_closes, 1);
	fosc_reply r;
	int code = fosc_call_cleanup(c, &rq, &r, st);
	if (!code)
		fosc_reply_free(&r);
	return code;
}

/* Closes and frees a list of entries unlinked from the cache (their allocations are gone). */
static void fosc_dev_drop(fos_client *c, fosc_dev *list)
{
	while (list) {
		fosc_dev *n = list->next;
		fos_status ist;
		fosc_async_quiet(1); /* an asynchronous call's failure stays for the caller's next call */
		fosc_dev_close(c, list->handle, &ist); /* fosd may have let it go already: any answer will do */
		fosc_async_quiet(0);
		free(list);
		list = n;
	}
}

/* The CudaRef for len bytes at p (exported now or found in the cache). */
static int fosc_dev_resolve(fos_client *c, const void *p, size_t len, const char *what, fosc_dev_ref *r,
			    fos_status *st)
{
	if (!c->cuda_mu_ok)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "tensor %s: the handle has no device-tensor state", what);
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a) {
		char m[sizeof st->message];
		snprintf(m, sizeof m, "%s", st ? st->message : "");
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "tensor %s is in device memory, but there is %s", what,
				   m[0] ? m : "no CUDA driver");
	}
	devinfo d;
	int code = dev_query(a, p, &d, what, st);
	if (code)
		return code;
	uint64_t ptr = (uint64_t)(uintptr_t)p, off = ptr - d.base, avail = d.size - off;
	if (len > avail)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: %zu bytes at %p run past the end of its "
				   "allocation (%llu bytes at 0x%llx)", what, len, p, (unsigned long long)d.size,
				   (unsigned long long)d.base);
	fosc_dev *hit = NULL, *stale = NULL;
	pthread_mutex_lock(&c->cuda_mu);
	for (fosc_dev **pp = &c->devs; *pp;) {
		fosc_dev *e = *pp;
		if (e->base == d.base && e->buffer_id == d.buffer_id && e->size == d.size) {
			hit = e;
			*pp = e->next; /* to the front: the list is in order of last use */
			e->next = c->devs;
			c->devs = e;
			break;
		}
		if (e->base < d.base + d.size && d.base < e->base + e->size) { /* freed: another allocation there now */
			*pp = e->next;
			e->next = stale;
			stale = e;
			continue;
		}
		pp = &e->next;
	}
	if (hit) {
		memcpy(r->handle, hit->handle, sizeof r->handle);
		memcpy(r->uuid, hit->uuid, sizeof r->uuid);
	}
	pthread_mutex_unlock(&c->cuda_mu);
	fosc_dev_drop(c, stale);
	if (!hit) {
		fosc_dev *e = calloc(1, sizeof *e);
		if (!e)
			return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
		e->base = d.base;
		e->size = d.size;
		e->buffer_id = d.buffer_id;
		int rc = a->CtxPushCurrent(d.ctx);
		if (rc) {
			free(e);
			return fosc_status(st, FOS_CODE_INTERNAL, "tensor %s: cuCtxPushCurrent: %s", what, fosc_cuda_err(a, rc));
		}
		rc = a->IpcGetMemHandle(e->handle, d.base);
		void *prev;
		a->CtxPopCurrent(&prev);
		if (rc) {
			free(e);
			return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
					   "tensor %s: cuIpcGetMemHandle of the allocation at 0x%llx: %s (only cudaMalloc "
					   "memory can be shared)", what, (unsigned long long)d.base, fosc_cuda_err(a, rc));
		}
		if ((code = dev_uuid(a, d.ordinal, e->uuid, what, st))) {
			free(e);
			return code;
		}
		atomic_fetch_add(&c->dev_exports, 1);
		memcpy(r->handle, e->handle, sizeof r->handle);
		memcpy(r->uuid, e->uuid, sizeof r->uuid);
		pthread_mutex_lock(&c->cuda_mu);
		fosc_dev *dup = NULL;
		for (fosc_dev *g = c->devs; g; g = g->next)
			if (g->base == e->base && g->buffer_id == e->buffer_id && g->size == e->size)
				dup = g; /* another thread exported it meanwhile: the same allocation, the same handle */
		fosc_dev *evicted = NULL;
		if (!dup) {
			e->next = c->devs;
			c->devs = e;
			/* past FOSC_DEV_CACHE_MAX allocations the least recently used one goes (fosd closes
			 * it; used again, it is exported and mapped again) */
			size_t n = 0;
			for (fosc_dev **pp = &c->devs; *pp; pp = &(*pp)->next)
				if (++n > FOSC_DEV_CACHE_MAX) {
					evicted = *pp;
					*pp = NULL;
					break;
				}
		}
		pthread_mutex_unlock(&c->cuda_mu);
		if (dup)
			free(e);
		fosc_dev_drop(c, evicted);
	}
	r->offset = off;
	r->avail = avail;
	pthread_mutex_lock(&c->cuda_mu);
	int known = c->srv_gpu_len == 16, same = 0;
	for (int i = 0; i < c->n_srv_gpus && !same; i++)
		same = !memcmp(c->srv_gpus[i], r->uuid, 16);
	uint8_t srv[16];
	memcpy(srv, c->srv_gpu, sizeof srv);
	int nsrv = c->n_srv_gpus;
	pthread_mutex_unlock(&c->cuda_mu);
	if (known && !same) {
		char a1[41], a2[41];
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "tensor %s is in memory of %s; fosd runs on %s%s "
				   "(device tensors must be on one of fosd's GPUs)", what, fos_gpu_uuid_str(r->uuid, a1),
				   fos_gpu_uuid_str(srv, a2), nsrv > 1 ? " and its other devices" : "");
	}
	return FOS_CODE_OK;
}

static void cref_fill(Fos__CudaRef *cref, fosc_dev_ref *r)
{
	fos__cuda_ref__init(cref);
	cref->ipc_handle.len = sizeof r->handle;
	cref->ipc_handle.data = r->handle;
	cref->offset = r->offset;
	cref->gpu_uuid.len = sizeof r->uuid;
	cref->gpu_uuid.data = r->uuid;
}

int fosc_cuda_in(fos_client *c, const fos_tensor *in, const char *what, Fos__Tensor *t, int64_t *shape_store,
		 Fos__CudaRef *cref, fosc_dev_ref *r, fos_status *st)
{
	int code = fosc_dev_resolve(c, in->data, fos_tensor_bytes(in), what, r, st);
	if (code)
		return code;
	fosw_placer none;
	memset(&none, 0, sizeof none);
	fosw_tensor_init(t, shape_store, &none, in->dtype, in->ndim, in->shape);
	t->offset = 0;
	cref_fill(cref, r);
	t->cuda = cref;
	return FOS_CODE_OK;
}

int fosc_cuda_outputs(fos_client *c, Fos__Request *rq, fosc_shm_outs *so, const char *const *names,
		      fos_tensor *const *outs, int n, fos_status *st)
{
	rq->shm_outputs = so->p;
	for (int i = 0; i < n; i++) {
		fos_tensor *o = outs[i];
		if (!o || o->mem != FOS_MEM_CUDA || !names[i])
			continue;
		if (!o->data || !o->size)
			return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "output %s is a device tensor without its memory "
					   "(fos_tensor_cuda needs a device pointer and a shape)", names[i]);
		if (rq->n_shm_outputs >= FOSW_MAX_TENSORS)
			return fosc_status(st, FOS_CODE_INTERNAL, "too many outputs");
		size_t k = rq->n_shm_outputs;
		int code = fosc_dev_resolve(c, o->data, o->size, names[i], &so->dev[k], st);
		if (code)
			return code;
		rq->n_shm_outputs++;
		fos__shm_output__init(&so->o[k]);
		cref_fill(&so->cref[k], &so->dev[k]);
		so->o[k].result = (char *)names[i];
		so->o[k].cuda = &so->cref[k];
		so->o[k].capacity = o->size;
		so->p[k] = &so->o[k];
	}
	return FOS_CODE_OK;
}

int fosc_cuda_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0,
		  int64_t exp_d1, fos_tensor *out, fos_status *st)
{
	fosw_tensor v;
	int code = fosc_out_ref_check(t, what, dtype, exp_d0, exp_d1,
				      t->offset || t->shm ? "a device result with an offset or a region" : NULL, &v, st);
	if (code)
		return code;
	if (!out || out->mem != FOS_MEM_CUDA)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's %s names device memory, but its output is not a "
				   "device tensor", what);
	const Fos__CudaRef *cr = t->cuda;
	fos_client *c = r->c;
	uint64_t p = 0;
	int found = 0;
	if (c && c->cuda_mu_ok && cr->ipc_handle.len == FOSC_CU_IPC_HANDLE_SIZE) {
		pthread_mutex_lock(&c->cuda_mu);
		for (fosc_dev *e = c->devs; e && !found; e = e->next)
			if (!memcmp(e->handle, cr->ipc_handle.data, FOSC_CU_IPC_HANDLE_SIZE) && cr->offset <= e->size &&
			    v.len <= e->size - cr->offset) {
				p = e->base + cr->offset;
				found = 1;
			}
		pthread_mutex_unlock(&c->cuda_mu);
	}
	if (!found || p != (uint64_t)(uintptr_t)out->data)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's %s names device memory at offset %llu of an "
				   "allocation, not its output buffer", what, (unsigned long long)cr->offset);
	return fosc_out_fits(out, &v, what, st);
}

void fosc_cuda_health(fos_client *c, const Fos__HealthResult *hr)
{
	if (!c->cuda_mu_ok)
		return;
	pthread_mutex_lock(&c->cuda_mu);
	const ProtobufCBinaryData *uuid = &hr->gpu_uuid;
	if (uuid->len == 16) {
		memcpy(c->srv_gpu, uuid->data, 16);
		c->srv_gpu_len = 16;
	} else {
		c->srv_gpu_len = 0;
	}
	/* every GPU of a fosd over several (--devices): device tensors on any of them go in place */
	c->n_srv_gpus = 0;
	for (size_t i = 0; i < hr->n_devices && c->n_srv_gpus < 16; i++)
		if (hr->devices[i] && hr->devices[i]->gpu_uuid.len == 16)
			memcpy(c->srv_gpus[c->n_srv_gpus++], hr->devices[i]->gpu_uuid.data, 16);
	if (!c->n_srv_gpus && c->srv_gpu_len == 16)
		memcpy(c->srv_gpus[c->n_srv_gpus++], c->srv_gpu, 16);
	c->srv_devices = hr->n_devices;
	int mps = (int)hr->mps; /* a value of a newer fosd: unknown */
	c->srv_mps = mps >= (int)FOS_MPS_UNKNOWN && mps <= (int)FOS_MPS_ON ? mps : (int)FOS_MPS_UNKNOWN;
	pthread_mutex_unlock(&c->cuda_mu);
}

void fosc_cuda_close(fos_client *c)
{
	if (!c->cuda_mu_ok)
		return;
	pthread_mutex_lock(&c->cuda_mu);
	fosc_dev *d = c->devs;
	c->devs = NULL;
	pthread_mutex_unlock(&c->cuda_mu);
	while (d) {
		fosc_dev *n = d->next;
		free(d);
		d = n;
	}
	fosc_cuda_events_close(c);
	pthread_mutex_destroy(&c->cuda_mu);
	c->cuda_mu_ok = 0;
}

void fosc_cuda_counts(fos_client *c, uint64_t *exports, uint64_t *closes, size_t *cached)
{
	size_t n = 0;
	if (c->cuda_mu_ok) {
		pthread_mutex_lock(&c->cuda_mu);
		for (fosc_dev *d = c->devs; d; d = d->next)
			n++;
		pthread_mutex_unlock(&c->cuda_mu);
	}
	if (exports)
		*exports = atomic_load(&c->dev_exports);
	if (closes)
		*closes = atomic_load(&c->dev_closes);
	if (cached)
		*cached = n;
}

/* ---- the public calls ----------------------------------------------------------------------- */

fos_tensor fos_tensor_cuda(int dtype, int64_t rows, int64_t cols, void *dev_ptr)
{
	fos_tensor t = cols > 0 ? fos_tensor_2d(dtype, rows, cols, dev_ptr) : fos_tensor_1d(dtype, rows, dev_ptr);
	t.mem = FOS_MEM_CUDA;
	return t;
}

int fos_cuda_release(fos_client *c, const void *dev_ptr, fos_status *st)
{
	if (!c || !c->cuda_mu_ok)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	uint64_t p = (uint64_t)(uintptr_t)dev_ptr;
	fosc_dev *hit = NULL;
	pthread_mutex_lock(&c->cuda_mu);
	for (fosc_dev **pp = &c->devs; *pp; pp = &(*pp)->next)
		if (p >= (*pp)->base && p - (*pp)->base < (*pp)->size) {
			hit = *pp;
			*pp = hit->next;
			break;
		}
	pthread_mutex_unlock(&c->cuda_mu);
	if (!hit)
		return fosc_status(st, FOS_CODE_NOT_FOUND, "no device memory at %p was shared through this handle", dev_ptr);
	fos_status cst;
	int code = fosc_dev_close(c, hit->handle, &cst);
	unsigned long long base = hit->base;
	free(hit);
	/* fosd no longer has it: the connection was replaced, or fosd is gone */
	if (code == FOS_CODE_NOT_FOUND || code == FOS_CODE_UNAVAILABLE || code == FOS_CODE_DEADLINE_EXCEEDED)
		code = FOS_CODE_OK;
	if (code)
		return fosc_status(st, code, "closing fosd's mapping of the allocation at 0x%llx: %s", base, cst.message);
	return fosc_status(st, FOS_CODE_OK, "the allocation at 0x%llx is released", base);
}

int fos_cuda_check(fos_client *c, const void *dev_ptr, size_t bytes, fos_status *st)
{
	if (!c || !c->cuda_mu_ok)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	if (!dev_ptr || !bytes)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no device memory named");
	pthread_mutex_lock(&c->cuda_mu);
	int gpu = c->srv_gpu_len == 16;
	pthread_mutex_unlock(&c->cuda_mu);
	if (!gpu)
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "fosd reports no GPU (a cpu fosd)");
	fosc_dev_ref r;
	int code = fosc_dev_resolve(c, dev_ptr, bytes, "dev_ptr", &r, st);
	return code ? code : fosc_status(st, FOS_CODE_OK, "ok");
}

int fos_server_gpu_uuid(fos_client *c, uint8_t uuid[16], fos_status *st)
{
	if (!c || !c->cuda_mu_ok)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	pthread_mutex_lock(&c->cuda_mu);
	int ok = c->srv_gpu_len == 16;
	if (ok && uuid)
		memcpy(uuid, c->srv_gpu, 16);
	pthread_mutex_unlock(&c->cuda_mu);
	if (!ok)
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "fosd reports no GPU (a cpu fosd)");
	return fosc_status(st, FOS_CODE_OK, "ok");
}

int fos_server_mps(fos_client *c)
{
	if (!c || !c->cuda_mu_ok)
		return FOS_MPS_UNKNOWN;
	pthread_mutex_lock(&c->cuda_mu);
	int m = c->srv_mps;
	pthread_mutex_unlock(&c->cuda_mu);
	return m;
}

int fos_cuda_ptr_uuid(const void *dev_ptr, uint8_t uuid[16], fos_status *st)
{
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	devinfo d;
	int code = dev_query(a, dev_ptr, &d, "dev_ptr", st);
	if (code == FOS_CODE_FAILED_PRECONDITION && d.ordinal >= 0)
		code = FOS_CODE_OK; /* not shareable, but on a known GPU */
	if (code)
		return code;
	if ((code = dev_uuid(a, d.ordinal, uuid, "dev_ptr", st)))
		return code;
	return fosc_status(st, FOS_CODE_OK, "ok");
}

int fos_cuda_malloc(int device, size_t bytes, void **dev_ptr, fos_status *st)
{
	if (!dev_ptr)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no place for the pointer");
	*dev_ptr = NULL;
	if (!bytes)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "an allocation needs at least 1 byte");
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	int dev = 0, rc = a->DeviceGet(&dev, device);
	if (rc)
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "no CUDA device %d (%s)", device, fosc_cuda_err(a, rc));
	void *ctx = NULL;
	if ((rc = a->DevicePrimaryCtxRetain(&ctx, dev)))
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION, "the primary context of CUDA device %d: %s", device,
				   fosc_cuda_err(a, rc));
	uint64_t p = 0;
	if (!(rc = a->CtxPushCurrent(ctx))) {
		rc = a->MemAlloc(&p, bytes);
		void *prev;
		a->CtxPopCurrent(&prev);
	}
	if (rc) {
		a->DevicePrimaryCtxRelease(dev);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cuMemAlloc of %zu bytes on CUDA device %d: %s", bytes,
				   device, fosc_cuda_err(a, rc));
	}
	*dev_ptr = (void *)(uintptr_t)p;
	return fosc_status(st, FOS_CODE_OK, "ok"); /* the context stays retained until fos_cuda_free */
}

int fos_cuda_free(void *dev_ptr, fos_status *st)
{
	if (!dev_ptr)
		return fosc_status(st, FOS_CODE_OK, "nothing to free");
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	devinfo d;
	int code = dev_query(a, dev_ptr, &d, "dev_ptr", st);
	if (code && d.ordinal < 0)
		return code;
	int rc = a->CtxPushCurrent(d.ctx);
	if (!rc) {
		rc = a->MemFree((uint64_t)(uintptr_t)dev_ptr);
		void *prev;
		a->CtxPopCurrent(&prev);
	}
	if (rc)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "cuMemFree(%p): %s", dev_ptr, fosc_cuda_err(a, rc));
	int dev = 0;
	if (!a->DeviceGet(&dev, d.ordinal))
		a->DevicePrimaryCtxRelease(dev);
	return fosc_status(st, FOS_CODE_OK, "ok");
}

int fos_cuda_memcpy(void *dst, const void *src, size_t bytes, fos_status *st)
{
	if (!bytes)
		return fosc_status(st, FOS_CODE_OK, "nothing to copy");
	if (!dst || !src)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "a copy needs both pointers");
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	devinfo dd, ds;
	fos_status ignore;
	int dst_dev = dev_query(a, dst, &dd, "dst", &ignore) != FOS_CODE_INVALID_ARGUMENT && dd.ctx;
	int src_dev = dev_query(a, src, &ds, "src", &ignore) != FOS_CODE_INVALID_ARGUMENT && ds.ctx;
	if (!dst_dev && !src_dev) {
		memcpy(dst, src, bytes);
		return fosc_status(st, FOS_CODE_OK, "ok");
	}
	void *ctx = dst_dev ? dd.ctx : ds.ctx;
	int rc = a->CtxPushCurrent(ctx);
	if (!rc) {
		rc = a->Memcpy((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, bytes);
		if (!rc)
			rc = a->CtxSynchronize(); /* complete on the device before any other process reads it */
		void *prev;
		a->CtxPopCurrent(&prev);
	}
	if (rc)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "cuMemcpy of %zu bytes (%p to %p): %s", bytes, src, dst,
				   fosc_cuda_err(a, rc));
	return fosc_status(st, FOS_CODE_OK, "ok");
}
