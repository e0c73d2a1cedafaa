/* test_libfos_cuda.c: libfos's device tensors on the client side (client/libfos/libfos_cuda.c),
 * on machines without a GPU: with no CUDA driver ($FOS_CUDA_DRIVER naming a missing library)
 * every device tensor, input or output, and every device helper fails FAILED_PRECONDITION "no CUDA
 * driver" before anything is sent, and fosd keeps serving; with a fake driver (support_fake_cuda.c,
 * fosc_cuda_override: a table of fake allocations, never dereferenced) the request names the allocation's base by its
 * IPC handle, the tensor's offset and the GPU's UUID with no bytes inline; a handle is exported
 * once per allocation, and memory freed and allocated again at the same address (a new buffer
 * id), or overlapping a cached allocation, is exported anew while fosd is told to close the old
 * one, and the cache keeps the 1024 most recently used allocations; fos_cuda_malloc, _memcpy and
 * _free retain and release the primary context and synchronize device copies; VMM (expandable_segments) and managed memory are refused FAILED_PRECONDITION saying so, host
 * pointers, tensors past the end of their allocation and device outputs without memory
 * INVALID_ARGUMENT; a tensor on another GPU than fosd's is refused by libfos; a device result in a
 * reply must name the output's own buffer; fos_set_cuda_stream sends a recorded interprocess
 * event's handle; a cpu fosd (CPU backend unless $FOS_TEST_BACKEND) answers device tensors
 * FAILED_PRECONDITION, over the socket and through a request channel, and keeps serving; Stats
 * has the device counters by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "libfos_internal.h"
#include "support_server.h"
#include "support_stats.h"
#include "support_trust.h"
#include "support_assert.h"
#include "support_fake_cuda.h"

#define M 32
#define K 64
#define N 48

static tsrv g_srv;
static uint16_t g_w[N * K], g_x[M * K];

/* ---- fixtures -------------------------------------------------------------------------------- */

static fos_client *conn(void)
{
	return tt_connect(g_srv.url, NULL);
}

static int setup(void **state)
{
	(void)state;
	tsrv_fill_bf16(g_w, N * K, 31, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 32, 1.0f);
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	return tsrv_put_weight_bf16(&g_srv, "w", N, K, g_w);
}

static int teardown(void **state)
{
	(void)state;
	fosc_cuda_override(NULL);
	tsrv_stop(&g_srv, SIGTERM, 10000);
	tsrv_cleanup(&g_srv);
	return 0;
}

/* A host forward still works (fosd keeps serving). */
static void host_forward_ok(fos_client *c)
{
	fos_status st;
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_tensor y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), st);
	assert_int_equal(y.shape[0], M);
	assert_int_equal(y.shape[1], N);
	free(y.data);
}

/* A handle for the fake driver's tests: fosd's GPU taken to be the fake device 0 (a cuda fosd
 * reports its real GPU, a cpu fosd none: either way the fake tensors are then sent). */
static fos_client *conn_fake(void)
{
	fos_client *c = conn();
	uint8_t u[16];
	f_uuid(u, 0);
	Fos__HealthResult hr = FOS__HEALTH_RESULT__INIT;
	hr.gpu_uuid = (ProtobufCBinaryData){16, u};
	fosc_cuda_health(c, &hr);
	return c;
}

#define ASSERT_MSG(st, needle)                                                                          \
	do {                                                                                            \
		if (!strstr((st).message, (needle)))                                                    \
			fail_msg("message '%s' does not say '%s'", (st).message, (needle));             \
	} while (0)

/* ---- no driver ------------------------------------------------------------------------------- */

static void test_no_driver(void **state)
{
	(void)state;
	setenv("FOS_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
	fosc_cuda_override(NULL); /* the next use loads $FOS_CUDA_DRIVER */
	fos_client *c = conn();
	fos_status st;
	uint8_t dev[256];
	void *p = NULL;
	ASSERT_CODE(fos_cuda_malloc(0, 1024, &p, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "no CUDA driver");
	assert_null(p);
	uint8_t u[16];
	ASSERT_CODE(fos_cuda_ptr_uuid(dev, u, &st), FOS_CODE_FAILED_PRECONDITION, st);
	if (!strcmp(tsrv_backend_name(), "cpu"))
		ASSERT_CODE(fos_server_gpu_uuid(c, u, &st), FOS_CODE_FAILED_PRECONDITION, st);

	uint64_t before = tstat_or0(c, "ops.forward.requests");
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dev);
	assert_int_equal(tx.mem, FOS_MEM_CUDA);
	assert_int_equal(tx.size, (size_t)M * K * 2);
	fos_tensor y = fos_tensor_out();
	ASSERT_CODE(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "tensor x");
	ASSERT_MSG(st, "no CUDA driver");
	assert_null(y.data);
	/* a device output of a host input */
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_tensor yd = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dev);
	ASSERT_CODE(fos_forward(c, "w", &hx, NULL, NULL, &yd, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "tensor y");
	assert_int_equal(tstat_or0(c, "ops.forward.requests"), before); /* nothing was sent */
	ASSERT_CODE(fos_cuda_release(c, dev, &st), FOS_CODE_NOT_FOUND, st);
	host_forward_ok(c);
	fos_close(c);
	unsetenv("FOS_CUDA_DRIVER");
	fosc_cuda_override(NULL);
}

/* ---- the request form -------------------------------------------------------------------------- */

static void test_request_form(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	uint8_t *base = fake_alloc_at(0, FAKE_BASE, 1 << 20, 7);
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, base + 4096);
	Fos__Tensor t;
	int64_t shape[2];
	Fos__CudaRef cref;
	fosc_dev_ref r;
	ASSERT_OK(fosc_cuda_in(c, &tx, "x", &t, shape, &cref, &r, &st), st);
	assert_ptr_equal(t.cuda, &cref);
	assert_null(t.shm);
	assert_int_equal(t.offset, 0);
	assert_int_equal(t.length, M * K * 2);
	assert_int_equal(t.dtype, FOS_DTYPE_BF16);
	assert_int_equal(t.n_shape, 2);
	assert_int_equal(t.shape[0], M);
	assert_int_equal(t.shape[1], K);
	assert_int_equal(cref.ipc_handle.len, 64);
	uint64_t hb, hid;
	memcpy(&hb, cref.ipc_handle.data, 8);
	memcpy(&hid, cref.ipc_handle.data + 8, 8);
	assert_true(hb == FAKE_BASE); /* the handle of the allocation's base */
	assert_int_equal(hid, 7);
	assert_int_equal(cref.offset, 4096);
	assert_int_equal(cref.gpu_uuid.len, 16);
	for (int i = 0; i < 16; i++)
		assert_int_equal(cref.gpu_uuid.data[i], 0xA0 + i);
	assert_int_equal(r.avail, (1 << 20) - 4096);

	/* outputs: a ShmOutput with cuda set, capacity the tensor's bytes */
	Fos__Request rq = FOS__REQUEST__INIT;
	fosc_shm_outs so;
	static const char *const names[] = {"dx", "dw", "db"};
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, base + 8192);
	fos_tensor dw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w); /* host, not a region: inline */
	fos_tensor *outs[] = {&dx, &dw, NULL};
	fosc_shm_outputs(c, &rq, &so, names, outs, 3);
	ASSERT_OK(fosc_cuda_outputs(c, &rq, &so, names, outs, 3, &st), st);
	assert_int_equal(rq.n_shm_outputs, 1);
	assert_string_equal(rq.shm_outputs[0]->result, "dx");
	assert_null(rq.shm_outputs[0]->shm);
	assert_non_null(rq.shm_outputs[0]->cuda);
	assert_int_equal(rq.shm_outputs[0]->cuda->offset, 8192);
	assert_int_equal(rq.shm_outputs[0]->capacity, M * K * 2);
	assert_int_equal(g_exports, 1); /* one allocation: one export */
	fos_close(c);
}

/* ---- the cache ----------------------------------------------------------------------------------- */

static void test_cache_realloc(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	uint8_t *p = fake_alloc_at(0, FAKE_BASE, 1 << 20, 1);
	Fos__Tensor t;
	int64_t shape[2];
	Fos__CudaRef cref;
	fosc_dev_ref r;
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, p);
	ASSERT_OK(fosc_cuda_in(c, &tx, "x", &t, shape, &cref, &r, &st), st);
	tx.data = p + 65536;
	ASSERT_OK(fosc_cuda_in(c, &tx, "x", &t, shape, &cref, &r, &st), st);
	uint64_t exports, closes;
	size_t cached;
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(exports, 1);
	assert_int_equal(closes, 0);
	assert_int_equal(cached, 1);
	assert_int_equal(g_exports, 1);

	/* freed and allocated again at the same address: a new buffer id, a new handle */
	uint8_t old[64];
	memcpy(old, r.handle, 64);
	fake_alloc_at(0, FAKE_BASE, 1 << 20, 2);
	ASSERT_OK(fosc_cuda_in(c, &tx, "x", &t, shape, &cref, &r, &st), st);
	assert_memory_not_equal(old, r.handle, 64);
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(exports, 2);
	assert_int_equal(closes, 1); /* fosd was told to close the stale one */
	assert_int_equal(cached, 1);

	/* a smaller allocation inside the old range at another base: the old entry is stale too */
	g_fa[0].live = 0;
	uint8_t *q = fake_alloc_at(1, FAKE_BASE + 4096, 8192, 3);
	fos_tensor tq = fos_tensor_cuda(FOS_DTYPE_BF16, 8, 16, q);
	ASSERT_OK(fosc_cuda_in(c, &tq, "x", &t, shape, &cref, &r, &st), st);
	assert_int_equal(r.offset, 0);
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(exports, 3);
	assert_int_equal(closes, 2);
	assert_int_equal(cached, 1);

	/* an unrelated allocation is cached beside it */
	uint8_t *z = fake_alloc_at(2, FAKE_BASE + (1ull << 30), 4096, 4);
	fos_tensor tz = fos_tensor_cuda(FOS_DTYPE_U8, 4096, 0, z);
	assert_int_equal(tz.ndim, 1);
	ASSERT_OK(fosc_cuda_in(c, &tz, "x", &t, shape, &cref, &r, &st), st);
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(cached, 2);
	assert_int_equal(closes, 2);

	/* release: CloseDeviceMemory sent, the entry gone; again: NOT_FOUND */
	fos_cuda_release(c, z + 100, &st);
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(closes, 3);
	assert_int_equal(cached, 1);
	ASSERT_CODE(fos_cuda_release(c, z, &st), FOS_CODE_NOT_FOUND, st);
	fos_close(c);
}

/* The cache holds at most 1024 allocations (libfos_cuda.c FOSC_DEV_CACHE_MAX), the least
 * recently used going first. */
static void test_cache_bound(void **state)
{
	(void)state;
	fake_reset();
	g_many = 1;
	fos_client *c = conn_fake();
	fos_status st;
	Fos__Tensor t;
	int64_t shape[2];
	Fos__CudaRef cref;
	fosc_dev_ref r;
	uint64_t exports, closes;
	size_t cached;
	for (uint64_t i = 0; i <= 1024; i++) {
		fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_U8, 64, 0, (void *)(uintptr_t)(MANY_BASE + (i << 20)));
		ASSERT_OK(fosc_cuda_in(c, &tx, "x", &t, shape, &cref, &r, &st), st);
		if (i == 1) { /* allocation 0 used again: allocation 1 is now the least recently used */
			tx.data = (void *)(uintptr_t)(MANY_BASE + 4096);
			ASSERT_OK(fosc_cuda_in(c, &tx, "x", &t, shape, &cref, &r, &st), st);
		}
	}
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(exports, 1025);
	assert_int_equal(closes, 1);
	assert_int_equal(cached, 1024);
	/* allocation 0 is still cached, allocation 1 was evicted: exported again */
	fos_tensor t0 = fos_tensor_cuda(FOS_DTYPE_U8, 64, 0, (void *)(uintptr_t)MANY_BASE);
	ASSERT_OK(fosc_cuda_in(c, &t0, "x", &t, shape, &cref, &r, &st), st);
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(exports, 1025);
	fos_tensor t1 = fos_tensor_cuda(FOS_DTYPE_U8, 64, 0, (void *)(uintptr_t)(MANY_BASE + (1 << 20)));
	ASSERT_OK(fosc_cuda_in(c, &t1, "x", &t, shape, &cref, &r, &st), st);
	fosc_cuda_counts(c, &exports, &closes, &cached);
	assert_int_equal(exports, 1026);
	assert_int_equal(closes, 2);
	assert_int_equal(cached, 1024);
	fos_close(c);
}

/* fos_cuda_malloc / fos_cuda_memcpy / fos_cuda_free through the driver: the primary context
 * retained while the allocation lives, a copy with a device side synchronized, a host-only copy
 * a plain memcpy, and the failures named. */
static void test_memory_helpers(void **state)
{
	(void)state;
	fake_reset();
	fos_status st;
	void *p = NULL;
	ASSERT_OK(fos_cuda_malloc(0, 4096, &p, &st), st);
	assert_true((uint64_t)(uintptr_t)p == FAKE_BASE + (4ull << 30));
	assert_int_equal(g_retained, 1);
	uint8_t h[64], h2[64];
	memset(h, 7, sizeof h);
	ASSERT_OK(fos_cuda_memcpy(p, h, sizeof h, &st), st);
	ASSERT_OK(fos_cuda_memcpy(h2, p, sizeof h2, &st), st);
	assert_int_equal(g_copies, 2);
	assert_int_equal(g_syncs, 2); /* complete before the call returns */
	memset(h2, 0, sizeof h2);
	ASSERT_OK(fos_cuda_memcpy(h2, h, sizeof h, &st), st); /* host to host */
	assert_memory_equal(h, h2, sizeof h);
	assert_int_equal(g_copies, 2);
	uint8_t u[16];
	ASSERT_OK(fos_cuda_ptr_uuid(p, u, &st), st);
	assert_int_equal(u[0], 0xA0);
	ASSERT_OK(fos_cuda_free(p, &st), st);
	assert_int_equal(g_freed, 1);
	assert_int_equal(g_retained, 0);
	ASSERT_CODE(fos_cuda_free(h, &st), FOS_CODE_INVALID_ARGUMENT, st); /* not device memory */
	ASSERT_CODE(fos_cuda_malloc(0, (size_t)2 << 30, &p, &st), FOS_CODE_RESOURCE_EXHAUSTED, st);
	ASSERT_MSG(st, "cuMemAlloc");
	assert_null(p);
	assert_int_equal(g_retained, 0); /* released again after the failure */
	ASSERT_CODE(fos_cuda_malloc(0, 0, &p, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_CODE(fos_cuda_ptr_uuid(h, u, &st), FOS_CODE_INVALID_ARGUMENT, st);
}

/* ---- refusals ------------------------------------------------------------------------------------- */

static void test_refusals(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	uint64_t before = tstat_or0(c, "ops.forward.requests");
	fos_tensor y = fos_tensor_out();

	uint8_t *vmm = fake_alloc_at(0, FAKE_BASE, 1 << 20, 1);
	g_fa[0].ipc_ok = 0; /* cuMemCreate memory */
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, vmm);
	ASSERT_CODE(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "legacy CUDA IPC");
	ASSERT_MSG(st, "expandable_segments");

	g_fa[0].ipc_ok = 1;
	g_fa[0].managed = 1;
	ASSERT_CODE(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "managed");
	g_fa[0].managed = 0;

	/* host memory named a device tensor */
	fos_tensor th = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, g_x);
	ASSERT_CODE(fos_forward(c, "w", &th, NULL, NULL, &y, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_MSG(st, "not CUDA device memory");

	/* past the end of the allocation */
	fos_tensor tp = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, vmm + (1 << 20) - 100);
	ASSERT_CODE(fos_forward(c, "w", &tp, NULL, NULL, &y, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_MSG(st, "past the end");

	/* a device output without memory, and one past the end */
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_tensor yn = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, NULL);
	ASSERT_CODE(fos_forward(c, "w", &hx, NULL, NULL, &yn, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_MSG(st, "output y");
	fos_tensor yp = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, vmm + (1 << 20) - 64);
	ASSERT_CODE(fos_forward(c, "w", &hx, NULL, NULL, &yp, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_MSG(st, "tensor y");

	/* an unknown placement */
	fos_tensor tb = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	tb.mem = 7;
	ASSERT_CODE(fos_forward(c, "w", &tb, NULL, NULL, &y, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_MSG(st, "mem 7");

	assert_int_equal(tstat_or0(c, "ops.forward.requests"), before); /* all refused before sending */
	assert_null(y.data);
	host_forward_ok(c);
	fos_close(c);
}

static void test_other_gpu(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn();
	fos_status st;
	uint8_t other[16];
	memset(other, 0x5A, sizeof other);
	Fos__HealthResult hr = FOS__HEALTH_RESULT__INIT;
	hr.gpu_uuid = (ProtobufCBinaryData){16, other};
	fosc_cuda_health(c, &hr); /* as if fosd ran on another GPU */
	uint8_t got[16];
	ASSERT_OK(fos_server_gpu_uuid(c, got, &st), st);
	assert_memory_equal(got, other, 16);
	uint8_t *p = fake_alloc_at(0, FAKE_BASE, 1 << 20, 1);
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, p);
	fos_tensor y = fos_tensor_out();
	ASSERT_CODE(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "fosd runs on GPU-5a5a5a5a-5a5a");
	ASSERT_MSG(st, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
	char text[41];
	assert_string_equal(fos_gpu_uuid_str(other, text), "GPU-5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a");
	/* a fresh Health says what fosd runs on again: a cpu fosd no GPU */
	fos_health_info h;
	ASSERT_OK(fos_health(c, &h, &st), st);
	memset(got, 0, sizeof got);
	if (!strcmp(tsrv_backend_name(), "cpu"))
		ASSERT_CODE(fos_server_gpu_uuid(c, got, &st), FOS_CODE_FAILED_PRECONDITION, st);
	else
		ASSERT_OK(fos_server_gpu_uuid(c, got, &st), st);
	assert_memory_not_equal(got, other, 16);
	fos_close(c);
}

/* A fosd over several GPUs (Health.devices): a tensor on any of them is sent as a device tensor,
 * one on none of them refused by libfos naming fosd's first GPU. */
static void test_several_gpus(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn();
	fos_status st;
	uint8_t other[16], mine[16];
	memset(other, 0x5A, sizeof other);
	f_uuid(mine, 0);
	Fos__DeviceInfo d0 = FOS__DEVICE_INFO__INIT, d1 = FOS__DEVICE_INFO__INIT, *dp[2] = {&d0, &d1};
	d0.gpu_uuid = (ProtobufCBinaryData){16, other};
	d1.index = 1;
	d1.gpu_uuid = (ProtobufCBinaryData){16, mine};
	Fos__HealthResult hr = FOS__HEALTH_RESULT__INIT;
	hr.gpu_uuid = d0.gpu_uuid;
	hr.n_devices = 2;
	hr.devices = dp;
	fosc_cuda_health(c, &hr);
	uint8_t *p = fake_alloc_at(0, FAKE_BASE, 1 << 20, 1);
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, p), y = fos_tensor_out();
	int code = fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st);
	if (strstr(st.message, "device tensors must be on one of fosd's GPUs")) /* libfos's refusal, not fosd's */
		fail_msg("a tensor on fosd's second GPU refused by libfos: %s", st.message);
	assert_true(code != FOS_CODE_OK || y.data);
	free(y.data);
	hr.n_devices = 1; /* the tensor's GPU not among them: refused before sending */
	fosc_cuda_health(c, &hr);
	ASSERT_CODE(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "fosd runs on GPU-5a5a5a5a-5a5a");
	ASSERT_MSG(st, "device tensors must be on one of fosd's GPUs");
	fos_close(c);
}

/* ---- the reply's device results ------------------------------------------------------------------ */

static void test_reply_check(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	uint8_t *p = fake_alloc_at(0, FAKE_BASE, 1 << 20, 1);
	fos_tensor yd = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, p + 512);
	Fos__Request rq = FOS__REQUEST__INIT;
	fosc_shm_outs so;
	static const char *const names[] = {"y"};
	fos_tensor *outs[] = {&yd};
	fosc_shm_outputs(c, &rq, &so, names, outs, 1);
	ASSERT_OK(fosc_cuda_outputs(c, &rq, &so, names, outs, 1, &st), st);

	int64_t shape[2] = {M, N};
	Fos__CudaRef cr = *rq.shm_outputs[0]->cuda;
	Fos__Tensor t = FOS__TENSOR__INIT;
	t.dtype = FOS__DTYPE__DTYPE_BF16;
	t.n_shape = 2;
	t.shape = shape;
	t.length = M * N * 2;
	t.cuda = &cr;
	fosc_reply r;
	memset(&r, 0, sizeof r);
	r.c = c;
	yd.size = 1 << 19; /* a larger buffer: size becomes the result's bytes */
	ASSERT_OK(fosc_out(&r, &t, "y", FOS_DTYPE_BF16, M, N, &yd, &st), st);
	assert_int_equal(yd.size, M * N * 2);
	assert_int_equal(yd.shape[1], N);
	assert_ptr_equal(yd.data, p + 512);

	cr.offset = 1024; /* not where the output is */
	ASSERT_CODE(fosc_out(&r, &t, "y", FOS_DTYPE_BF16, M, N, &yd, &st), FOS_CODE_DATA_LOSS, st);
	cr.offset = 512;
	uint8_t bad[64];
	memset(bad, 0x77, sizeof bad);
	cr.ipc_handle.data = bad; /* another allocation's handle */
	ASSERT_CODE(fosc_out(&r, &t, "y", FOS_DTYPE_BF16, M, N, &yd, &st), FOS_CODE_DATA_LOSS, st);
	cr = *rq.shm_outputs[0]->cuda;
	fos_tensor yh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_x); /* a host output named by a device result */
	ASSERT_CODE(fosc_out(&r, &t, "y", FOS_DTYPE_BF16, M, N, &yh, &st), FOS_CODE_DATA_LOSS, st);
	fos_tensor ys = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, p + 512);
	ys.size = 100; /* too small */
	ASSERT_CODE(fosc_out(&r, &t, "y", FOS_DTYPE_BF16, M, N, &ys, &st), FOS_CODE_OUT_OF_RANGE, st);
	/* the result inline for a device output */
	uint8_t inline_bytes[M * N * 2];
	memset(inline_bytes, 0, sizeof inline_bytes);
	r.data = inline_bytes;
	r.dlen = sizeof inline_bytes;
	t.cuda = NULL;
	ASSERT_CODE(fosc_out(&r, &t, "y", FOS_DTYPE_BF16, M, N, &yd, &st), FOS_CODE_DATA_LOSS, st);
	ASSERT_MSG(st, "inline");
	fos_close(c);
}

/* ---- events ------------------------------------------------------------------------------------------ */

static void test_event_path(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	Fos__Request rq = FOS__REQUEST__INIT;
	struct fosc_devev *ev = NULL;
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
	assert_null(ev); /* off by default */
	assert_int_equal(rq.cuda_wait_event.len, 0);
	ASSERT_OK(fos_set_cuda_stream(c, (void *)(uintptr_t)0x5, &st), st);
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
		assert_non_null(ev);
		assert_int_equal(rq.cuda_wait_event.len, 64);
		assert_int_equal(rq.cuda_wait_event.data[0], 0xEE);
		fosc_cuda_event_done(c, ev);
	}
	assert_int_equal(g_records, 3);
	assert_int_equal(g_events_made, 1); /* pooled */
	/* two at once: two events */
	struct fosc_devev *e1, *e2;
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &e1, &st), st);
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &e2, &st), st);
	assert_ptr_not_equal(e1, e2);
	fosc_cuda_event_done(c, e1);
	fosc_cuda_event_done(c, e2);
	assert_int_equal(g_events_made, 2);
	ASSERT_OK(fos_set_cuda_stream(c, NULL, &st), st);
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
	assert_null(ev);
	fos_close(c);
}

/* A thread's view of c's stream order: whether a call from it would ask for an early answer, and
 * optionally setting its own order first. */
typedef struct order_probe {
	fos_client *c;
	int set;
	int asked, rc;
} order_probe;

static void *probe_thread(void *arg)
{
	order_probe *p = arg;
	fos_status st;
	if (p->set && (p->rc = fos_set_cuda_order(p->c, (void *)(uintptr_t)0x7,
						  FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS, &st)))
		return NULL;
	Fos__Request rq = FOS__REQUEST__INIT;
	struct fosc_devev *ev = NULL;
	p->rc = fosc_cuda_wait_event(p->c, &rq, &ev, &st);
	p->asked = rq.cuda_done_event;
	fosc_cuda_event_done(p->c, ev);
	return NULL;
}

static order_probe probe(fos_client *c, int set)
{
	order_probe p = {c, set, -1, -1};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, probe_thread, &p), 0);
	pthread_join(t, NULL);
	return p;
}

/* FOS_CUDA_ORDER_OUTPUTS: the request allows an early answer; an early answer's done event is
 * opened once per handle and the call's stream made to wait for it; a done event nobody asked for,
 * or one of the wrong size, is DATA_LOSS. */
static void test_early_reply(void **state)
{
	(void)state;
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	void *stream = (void *)(uintptr_t)0x5;
	/* a driver without cuIpcOpenEventHandle / cuStreamWaitEvent cannot order outputs */
	ASSERT_CODE(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS, &st),
		    FOS_CODE_FAILED_PRECONDITION, st);
	ASSERT_MSG(st, "cuIpcOpenEventHandle");
	fosc_cuda_api drv = g_fake;
	drv.IpcOpenEventHandle = f_open_event;
	drv.StreamWaitEvent = f_wait_event;
	fosc_cuda_override(&drv);
	ASSERT_CODE(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_OUTPUTS, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_CODE(fos_set_cuda_order(c, stream, 8, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_OK(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS, &st), st);

	Fos__Request rq = FOS__REQUEST__INIT;
	struct fosc_devev *ev = NULL;
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
	assert_non_null(ev);
	assert_int_equal(rq.cuda_done_event, 1);
	assert_int_equal(rq.cuda_wait_event.len, 64);
	uint8_t h1[64], h2[64];
	memset(h1, 0xD1, sizeof h1);
	memset(h2, 0xD2, sizeof h2);
	ProtobufCBinaryData b1 = {64, h1}, b2 = {64, h2}, bad = {5, h1};
	/* the order is this thread's: another thread's calls do not ask, nor does a thread made after
	 * one that set its own order exited */
	order_probe p = probe(c, 0);
	assert_int_equal(p.rc, 0);
	assert_int_equal(p.asked, 0);
	p = probe(c, 1);
	assert_int_equal(p.rc, 0);
	assert_int_equal(p.asked, 1);
	p = probe(c, 0);
	assert_int_equal(p.asked, 0);
	ASSERT_OK(fosc_cuda_done_wait(c, ev, &b1, &st), st);
	ASSERT_OK(fosc_cuda_done_wait(c, ev, &b1, &st), st);
	assert_int_equal(g_opened, 1); /* the same lane's event again: opened once */
	assert_int_equal(g_waits, 2);
	assert_ptr_equal(g_wait_stream, stream);
	assert_ptr_equal(g_wait_event, (void *)(uintptr_t)0xD0D1);
	ASSERT_OK(fosc_cuda_done_wait(c, ev, &b2, &st), st);
	assert_int_equal(g_opened, 2);
	assert_ptr_equal(g_wait_event, (void *)(uintptr_t)0xD0D2);
	ASSERT_CODE(fosc_cuda_done_wait(c, ev, &bad, &st), FOS_CODE_DATA_LOSS, st);
	ASSERT_MSG(st, "64");
	fosc_cuda_event_done(c, ev);
	/* more handles than are kept: the oldest are destroyed */
	for (int i = 0; i < 70; i++) {
		uint8_t h[64];
		memset(h, 0, sizeof h);
		h[0] = (uint8_t)i;
		h[1] = 0x77;
		ProtobufCBinaryData b = {64, h};
		ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
		ASSERT_OK(fosc_cuda_done_wait(c, ev, &b, &st), st);
		fosc_cuda_event_done(c, ev);
	}
	assert_int_equal(g_opened, 72);
	assert_int_equal(g_destroyed, 72 - 64);

	/* inputs only: no early answer asked, so a done event in a reply is refused */
	ASSERT_OK(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS, &st), st);
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
	assert_int_equal(rq.cuda_done_event, 0);
	ASSERT_CODE(fosc_cuda_done_wait(c, ev, &b1, &st), FOS_CODE_DATA_LOSS, st);
	ASSERT_MSG(st, "did not ask");
	fosc_cuda_event_done(c, ev);
	ASSERT_OK(fos_set_cuda_order(c, NULL, 0, &st), st);
	ASSERT_OK(fosc_cuda_wait_event(c, &rq, &ev, &st), st);
	assert_null(ev);
	assert_int_equal(rq.cuda_done_event, 0);
	int before = g_destroyed;
	fos_close(c); /* the 64 opened done events and the two pooled ones (the probe thread made one
		       * while this thread held the first) are destroyed */
	assert_int_equal(g_destroyed - before, 64 + 2);
	fosc_cuda_override(&g_fake);
}

/* ---- a cpu fosd refuses device tensors ------------------------------------------------------------- */

static void refused_by_fosd(fos_client *c)
{
	fos_status st;
	uint8_t *p = fake_alloc_at(0, FAKE_BASE, 1 << 20, 1);
	uint64_t fp = tstat_or0(c, "ops.forward.codes.FAILED_PRECONDITION.count");
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, p);
	fos_tensor y = fos_tensor_out();
	ASSERT_CODE(fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	assert_null(y.data);
	/* a device output of host inputs */
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_tensor yd = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, p + 65536);
	ASSERT_CODE(fos_forward(c, "w", &hx, NULL, NULL, &yd, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	/* both answered by fosd */
	assert_int_equal(tstat_or0(c, "ops.forward.codes.FAILED_PRECONDITION.count"), fp + 2);
	/* quantize with device codes */
	fos_tensor codes = fos_tensor_cuda(FOS_DTYPE_U8, M, K / 2, p + 131072);
	fos_tensor scales = fos_tensor_out(), amax = fos_tensor_out();
	ASSERT_CODE(fos_quantize(c, &hx, NULL, NULL, &codes, &scales, &amax, &st), FOS_CODE_FAILED_PRECONDITION, st);
	assert_null(scales.data);
	assert_null(amax.data);
	host_forward_ok(c);
}

static void test_cpu_fosd_refuses(void **state)
{
	(void)state;
	if (strcmp(tsrv_backend_name(), "cpu"))
		skip(); /* a cuda fosd serves them (tests/gpu_device_tensors.c) */
	fake_reset();
	fos_client *c = conn_fake();
	refused_by_fosd(c);
	fos_close(c);
}

static void test_cpu_fosd_refuses_channel(void **state)
{
	(void)state;
	if (strcmp(tsrv_backend_name(), "cpu"))
		skip();
	fake_reset();
	fos_client *c = conn_fake();
	fos_status st;
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	uint64_t before = tstat_or0(c, "channel_requests");
	refused_by_fosd(c);
	/* the forwards, quantize, host forward and the Stats calls went through the channel */
	assert_true(tstat_or0(c, "channel_requests") >= before + 4);
	ASSERT_OK(fos_channel_close(c, &st), st);
	fos_close(c);
}

static void test_stats_names(void **state)
{
	(void)state;
	fos_client *c = conn();
	fos_stats_snapshot *s;
	fos_status st;
	ASSERT_OK(fos_stats_take(c, &s, &st), st);
	static const char *const names[] = {"device_mappings", "device_mapped_bytes", "device_tensors", "device_staged"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		uint64_t v = 99;
		if (fos_stats_get(s, names[i], &v) != FOS_CODE_OK)
			fail_msg("Stats has no %s", names[i]);
		if (!strcmp(tsrv_backend_name(), "cpu"))
			assert_int_equal(v, 0);
	}
	fos_stats_free(s);
	fos_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_driver),
		cmocka_unit_test(test_request_form),
		cmocka_unit_test(test_cache_realloc),
		cmocka_unit_test(test_cache_bound),
		cmocka_unit_test(test_memory_helpers),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_other_gpu),
		cmocka_unit_test(test_several_gpus),
		cmocka_unit_test(test_reply_check),
		cmocka_unit_test(test_event_path),
		cmocka_unit_test(test_early_reply),
		cmocka_unit_test(test_cpu_fosd_refuses),
		cmocka_unit_test(test_cpu_fosd_refuses_channel),
		cmocka_unit_test(test_stats_names),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
