/* test_e2e_device.c: device tensors (PROTOCOL.md "Device tensors") against a real cpu fosd, over a
 * bare REQ socket: every form of a device tensor is refused with a clear status (a cpu fosd has no
 * GPU memory to map: FAILED_PRECONDITION; malformed handles and UUIDs, a data-section offset or a
 * shm reference beside it, a length that does not match or overflows the shape, a result asked
 * into device memory and a region at once, a wait event, CloseDeviceMemory of a handle never
 * mapped), Health names no GPU, Stats counts nothing, and fosd keeps serving bit-exact results; a
 * request that allows an early answer (Request.cuda_done_event) is answered the usual way, with
 * its result and no done event. The
 * paths that map memory run on the GPU (tests/gpu_device_tensors.c); the table's checks with a
 * stand-in backend are tests/test_server_devmem.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_assert.h"
#include "support_raw.h"
#include "support_server.h"

#define M 32
#define K 64
#define N 48

static tsrv g_srv;
static uint16_t g_w[N * K], g_x[M * K];
static nng_socket g_sock;

static int setup(void **state)
{
	(void)state;
	if (tsrv_start(&g_srv, NULL))
		return -1;
	tsrv_fill_bf16(g_w, N * K, 21, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 22, 1.0f);
	if (tsrv_put_weight_bf16(&g_srv, "w", N, K, g_w) || traw_open(&g_sock, g_srv.url))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	nng_close(g_sock);
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc ? -1 : 0;
}

static Fos__Response *call(Fos__Request *rq)
{
	return traw_call(g_sock, rq, NULL, NULL, 0);
}

static void expect(Fos__Request *rq, int code, const char *needle)
{
	traw_expect(g_sock, rq, code, needle);
}

typedef struct dev {
	Fos__Tensor t;
	Fos__CudaRef ref;
	int64_t shape[2];
	uint8_t handle[64], uuid[16];
} dev;

static Fos__Tensor *dev_x(dev *d)
{
	memset(d, 0, sizeof *d);
	fos__tensor__init(&d->t);
	fos__cuda_ref__init(&d->ref);
	memset(d->handle, 0x5a, sizeof d->handle);
	memset(d->uuid, 0xa5, sizeof d->uuid);
	d->ref.ipc_handle.data = d->handle;
	d->ref.ipc_handle.len = 64;
	d->ref.gpu_uuid.data = d->uuid;
	d->ref.gpu_uuid.len = 16;
	d->shape[0] = M;
	d->shape[1] = K;
	d->t.dtype = FOS__DTYPE__DTYPE_BF16;
	d->t.n_shape = 2;
	d->t.shape = d->shape;
	d->t.length = M * K * 2;
	d->t.cuda = &d->ref;
	return &d->t;
}

static void forward_with(Fos__Tensor *x, Fos__ShmOutput *so, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)"w";
	fr.x = x;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	if (so) {
		rq.n_shm_outputs = 1;
		rq.shm_outputs = &so;
	}
	Fos__Tensor xin = FOS__TENSOR__INIT;
	int64_t shape[2] = {M, K};
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	if (!x) { /* g_x inline, so that only the result target is in question */
		fosw_tensor_init(&xin, shape, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape);
		fr.x = &xin;
	}
	traw_check(traw_call(g_sock, &rq, x ? NULL : &pl, g_x, sizeof g_x), code, needle);
}

/* The inline forward still gives the in-process reference's bytes. */
static void check_still_serving(void)
{
	fos_client *c;
	fos_status st;
	ASSERT_OK(fos_connect(g_srv.url, NULL, 20000, &c, &st), st);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "w", &x, NULL, NULL, &y, NULL, &st), st);
	uint16_t ref[M * N];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, ref, NULL, NULL, NULL), 0);
	assert_memory_equal(y.data, ref, sizeof ref);
	free(y.data);
	fos_close(c);
}

static void test_refused_forms(void **state)
{
	(void)state;
	dev d;
	/* a well-formed device tensor: a cpu fosd cannot map GPU memory */
	forward_with(dev_x(&d), NULL, FOS__CODE__FAILED_PRECONDITION, "device tensors need a cuda fosd");
	/* malformed handles and UUIDs are named first */
	dev_x(&d)->cuda->ipc_handle.len = 63;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "cuda.ipc_handle is 63 bytes");
	dev_x(&d)->cuda->ipc_handle.len = 0;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "cuda.ipc_handle is 0 bytes");
	dev_x(&d)->cuda->gpu_uuid.len = 8;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "cuda.gpu_uuid is 8 bytes");
	/* a data-section offset or a region beside device memory */
	dev_x(&d)->offset = 64;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "no data-section offset");
	Fos__ShmRef sr = FOS__SHM_REF__INIT;
	sr.region = (char *)"r";
	dev_x(&d)->shm = &sr;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "no shm reference");
	/* lengths: not the shape's, or a shape whose bytes overflow */
	dev_x(&d)->length = M * K * 2 - 2;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "x");
	dev_x(&d);
	d.shape[0] = INT64_C(1) << 62;
	d.t.length = 0;
	forward_with(&d.t, NULL, FOS__CODE__INVALID_ARGUMENT, "x");

	/* a result asked into device memory */
	Fos__ShmOutput so = FOS__SHM_OUTPUT__INIT;
	dev yd;
	dev_x(&yd);
	so.result = (char *)"y";
	so.cuda = &yd.ref;
	so.capacity = M * N * 2;
	forward_with(NULL, &so, FOS__CODE__FAILED_PRECONDITION, "need a cuda fosd");
	so.shm = &sr;
	forward_with(NULL, &so, FOS__CODE__INVALID_ARGUMENT, "names both a region and device memory");
	so.shm = NULL;
	so.capacity = 0;
	forward_with(NULL, &so, FOS__CODE__INVALID_ARGUMENT, "capacity must be at least 1 byte");
	so.capacity = M * N * 2;
	yd.ref.ipc_handle.len = 5;
	forward_with(NULL, &so, FOS__CODE__INVALID_ARGUMENT, "cuda.ipc_handle is 5 bytes");

	/* a wait event on a cpu fosd */
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	uint8_t ev[64] = {1};
	fr.weight = (char *)"w";
	fr.x = dev_x(&d);
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	rq.cuda_wait_event.data = ev;
	rq.cuda_wait_event.len = 64;
	expect(&rq, FOS__CODE__FAILED_PRECONDITION, "cuda_wait_event");

	/* the other ops' device inputs: PutWeight's W, Quantize's X, Dequantize's codes */
	Fos__Request pr = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	pw.name = (char *)"dw";
	pw.version = 1;
	pw.w = dev_x(&d);
	pr.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	pr.put_weight = &pw;
	expect(&pr, FOS__CODE__FAILED_PRECONDITION, "tensor w is a device tensor");
	Fos__Request qr = FOS__REQUEST__INIT;
	Fos__QuantizeRequest qq = FOS__QUANTIZE_REQUEST__INIT;
	qq.x = dev_x(&d);
	qr.op_case = FOS__REQUEST__OP_QUANTIZE;
	qr.quantize = &qq;
	expect(&qr, FOS__CODE__FAILED_PRECONDITION, "tensor x is a device tensor");

	/* CloseDeviceMemory: the handle's form, then a handle this connection never mapped */
	Fos__Request cr = FOS__REQUEST__INIT;
	Fos__CloseDeviceMemoryRequest cd = FOS__CLOSE_DEVICE_MEMORY_REQUEST__INIT;
	uint8_t h[64] = {9};
	cd.ipc_handle.data = h;
	cd.ipc_handle.len = 7;
	cr.op_case = FOS__REQUEST__OP_CLOSE_DEVICE_MEMORY;
	cr.close_device_memory = &cd;
	expect(&cr, FOS__CODE__INVALID_ARGUMENT, "ipc_handle is 7 bytes");
	cd.ipc_handle.len = 64;
	expect(&cr, FOS__CODE__NOT_FOUND, "no mapping of that CUDA IPC handle");

	check_still_serving();
}

static void test_health_and_stats(void **state)
{
	(void)state;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &hr;
	Fos__Response *r = call(&rq);
	assert_non_null(r->health);
	assert_string_equal(r->health->backend, "cpu");
	assert_int_equal(r->health->gpu_uuid.len, 0); /* no GPU: device tensors cannot be on it */
	fos__response__free_unpacked(r, NULL);
	Fos__Request sq = FOS__REQUEST__INIT;
	Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
	sq.op_case = FOS__REQUEST__OP_STATS;
	sq.stats = &sr;
	r = call(&sq);
	assert_non_null(r->stats);
	assert_int_equal(r->stats->device_mappings, 0);
	assert_int_equal(r->stats->device_mapped_bytes, 0);
	assert_int_equal(r->stats->device_tensors, 0);
	fos__response__free_unpacked(r, NULL);
}

/* A cpu fosd has no GPU work to answer before: cuda_done_event is a permission, not an error. */
static void test_done_event_cpu(void **state)
{
	(void)state;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor xin = FOS__TENSOR__INIT;
	int64_t shape[2] = {M, K};
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&xin, shape, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape);
	fr.weight = (char *)"w";
	fr.x = &xin;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	rq.cuda_done_event = 1;
	uint8_t *data = NULL;
	size_t dlen = 0;
	Fos__Response *r = traw_call_data(g_sock, &rq, &pl, g_x, sizeof g_x, &data, &dlen);
	assert_non_null(r);
	assert_true(!r->status || r->status->code == FOS__CODE__OK);
	assert_int_equal(r->cuda_done_event.len, 0);
	assert_non_null(r->forward);
	assert_non_null(r->forward->y);
	uint16_t ref[M * N];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, ref, NULL, NULL, NULL), 0);
	assert_true(r->forward->y->offset + sizeof ref <= dlen);
	assert_memory_equal(data + r->forward->y->offset, ref, sizeof ref);
	free(data);
	fos__response__free_unpacked(r, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_forms),
		cmocka_unit_test(test_health_and_stats),
		cmocka_unit_test(test_done_event_cpu),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
