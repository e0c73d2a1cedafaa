/* gpu_e2e_devmem.c: device tensors against a real cuda fosd, at the protocol level (raw requests
 * over a REQ socket; the libfos side is tests/gpu_device_tensors.c). This process allocates with
 * cudaMalloc, fills, and names its memory by CUDA IPC handle in every op: PutWeight's W, Forward's
 * X and Y (a small forward through the lane's buffers and a large one in place, and X at an
 * unaligned address), Forward with a saved context and Backward's dY, dX, dW, Quantize's X, codes,
 * scales and amax, Dequantize's inputs and output, Linear's X, W, dY, Y, dX, dW; each result is
 * bit-identical to the same op through host memory (libfos). Also: a wrong GPU UUID and a range
 * past the allocation are refused; CloseDeviceMemory unmaps; a freed and reallocated buffer at the
 * same address gets a new mapping (the new bytes are read); a client process that exits with its
 * mappings open leaves none behind (Stats, and the GPU's free memory back where it was). Skips
 * cleanly without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nng/nng.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_assert.h"
#include "support_raw.h"
#include "support_server.h"
#include "support_trust.h"

extern char **environ;

#ifdef FOS_HAVE_CUDA
/* The CUDA runtime calls used here, by their C ABI (cudaError_t is an int-sized enum). */
extern int cudaMalloc(void **p, size_t n);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
extern int cudaIpcGetMemHandle(void *handle64, void *p);
extern int cudaMemGetInfo(size_t *free_b, size_t *total_b);
extern int cudaGetDeviceCount(int *n);
extern int cudaDeviceSynchronize(void);
#define H2D 1
#define D2H 2
#else
static int cudaGetDeviceCount(int *n)
{
	*n = 0;
	return 1;
}
#endif

#define K 256
#define N 512
#define MBIG 8192 /* X of the large forwards: 4 MiB, past the small forwards' 2 MiB */
#define MSMALL 16

static tsrv g_srv;
static int g_have;
static nng_socket g_sock;
static uint8_t g_uuid[16];

static uint16_t g_w[N * K], g_x[MBIG * K], g_dy[MBIG * N], g_b[N];

/* ---- device memory ------------------------------------------------------------------------------ */

typedef struct dbuf {
	uint8_t *base; /* the allocation's base */
	size_t size;
	uint8_t handle[64];
} dbuf;

static void dbuf_alloc(dbuf *d, size_t size)
{
#ifdef FOS_HAVE_CUDA
	assert_int_equal(cudaMalloc((void **)&d->base, size), 0);
	d->size = size;
	assert_int_equal(cudaIpcGetMemHandle(d->handle, d->base), 0);
#else
	(void)d;
	(void)size;
#endif
}

static void dbuf_free(dbuf *d)
{
#ifdef FOS_HAVE_CUDA
	cudaFree(d->base);
#endif
	memset(d, 0, sizeof *d);
}

static void put(dbuf *d, size_t off, const void *src, size_t n)
{
#ifdef FOS_HAVE_CUDA
	assert_int_equal(cudaMemcpy(d->base + off, src, n, H2D), 0);
#else
	(void)d, (void)off, (void)src, (void)n;
#endif
}

static void get(void *dst, dbuf *d, size_t off, size_t n)
{
#ifdef FOS_HAVE_CUDA
	assert_int_equal(cudaMemcpy(dst, d->base + off, n, D2H), 0);
#else
	(void)d, (void)off, (void)dst, (void)n;
#endif
}

/* ---- raw requests ------------------------------------------------------------------------------- */

/* Up to 8 device tensors and 8 device outputs for one request. */
typedef struct req {
	Fos__Tensor t[8];
	Fos__CudaRef ref[16];
	int64_t shape[8][2];
	int nt, nr;
	Fos__ShmOutput so[8];
	Fos__ShmOutput *sop[8];
	int nso;
} req;

static Fos__CudaRef *ref_at(req *r, dbuf *d, size_t off)
{
	Fos__CudaRef *c = &r->ref[r->nr++];
	fos__cuda_ref__init(c);
	c->ipc_handle.data = d->handle;
	c->ipc_handle.len = 64;
	c->gpu_uuid.data = g_uuid;
	c->gpu_uuid.len = 16;
	c->offset = off;
	return c;
}

static Fos__Tensor *dt(req *r, dbuf *d, size_t off, int dtype, int64_t d0, int64_t d1)
{
	int i = r->nt++;
	Fos__Tensor *t = &r->t[i];
	fos__tensor__init(t);
	t->dtype = dtype;
	r->shape[i][0] = d0;
	r->shape[i][1] = d1;
	t->shape = r->shape[i];
	t->n_shape = d1 > 0 ? 2 : 1;
	t->length = fosw_shape_bytes(dtype, (int)t->n_shape, r->shape[i]);
	t->cuda = ref_at(r, d, off);
	return t;
}

static void out_to(req *r, const char *result, dbuf *d, size_t off, uint64_t cap)
{
	Fos__ShmOutput *so = &r->so[r->nso];
	fos__shm_output__init(so);
	so->result = (char *)result;
	so->cuda = ref_at(r, d, off);
	so->capacity = cap;
	r->sop[r->nso] = so;
	r->nso++;
}

static Fos__Response *call(Fos__Request *rq, req *r)
{
	if (r && r->nso) {
		rq->n_shm_outputs = (size_t)r->nso;
		rq->shm_outputs = r->sop;
	}
	return traw_call(g_sock, rq, NULL, NULL, 0);
}

static Fos__Response *call_ok(Fos__Request *rq, req *r)
{
	Fos__Response *resp = call(rq, r);
	if (resp->status && resp->status->code)
		fail_msg("%s: %s", fos_code_name(resp->status->code), resp->status->message);
	return resp;
}

static void expect_code(Fos__Request *rq, req *r, int code, const char *needle)
{
	traw_check(call(rq, r), code, needle);
}


/* Stats' device counters (over the same connection). */
static void dev_stats(uint64_t *mappings, uint64_t *bytes, uint64_t *staged)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_STATS;
	rq.stats = &sr;
	Fos__Response *r = call_ok(&rq, NULL);
	if (mappings)
		*mappings = r->stats->device_mappings;
	if (bytes)
		*bytes = r->stats->device_mapped_bytes;
	if (staged)
		*staged = r->stats->device_staged;
	fos__response__free_unpacked(r, NULL);
}

static fos_client *lib(void)
{
	return tt_connect_ms(g_srv.url, NULL, 60000);
}

/* ---- setup ---------------------------------------------------------------------------------------- */

static int setup(void **state)
{
	(void)state;
	int n = 0;
	if (cudaGetDeviceCount(&n) || n <= 0) {
		printf("gpu_e2e_devmem: no usable GPU, skipping\n");
		return 0;
	}
	setenv("FOS_TEST_BACKEND", "cuda", 1);
	if (tsrv_start(&g_srv, NULL))
		return -1;
	if (traw_open(&g_sock, g_srv.url))
		return -1;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &hr;
	Fos__Response *r = call(&rq, NULL);
	if (!r->health || r->health->gpu_uuid.len != 16) {
		printf("gpu_e2e_devmem: fosd names no GPU UUID (backend %s)\n", r->health ? r->health->backend : "?");
		fos__response__free_unpacked(r, NULL);
		return -1;
	}
	memcpy(g_uuid, r->health->gpu_uuid.data, 16);
	fos__response__free_unpacked(r, NULL);
	tsrv_fill_bf16(g_w, N * K, 31, 0.05f);
	tsrv_fill_bf16(g_x, MBIG * K, 32, 1.0f);
	tsrv_fill_bf16(g_dy, MBIG * N, 33, 0.1f);
	tsrv_fill_bf16(g_b, N, 34, 0.5f);
	fos_client *c = lib();
	fos_status st;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	ASSERT_OK(fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st), st);
	fos_close(c);
	g_have = 1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (!g_have)
		return 0;
	nng_close(g_sock);
	int rc = tsrv_stop(&g_srv, SIGTERM, 20000);
	if (rc)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc ? -1 : 0;
}

#define NEED() \
	do {   \
		if (!g_have) \
			skip(); \
	} while (0)

/* ---- forward ---------------------------------------------------------------------------------------- */

/* Forward of "w" on the first m rows of g_x placed at xoff (Y at yoff), device in and out; the
 * bits must be libfos's host forward's. */
static void forward_case(dbuf *d, int64_t m, size_t xoff, size_t yoff)
{
	put(d, xoff, g_x, (size_t)m * K * 2);
	req r;
	memset(&r, 0, sizeof r);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)"w";
	fr.x = dt(&r, d, xoff, FOS__DTYPE__DTYPE_BF16, m, K);
	out_to(&r, "y", d, yoff, (uint64_t)m * N * 2);
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	Fos__Response *resp = call_ok(&rq, &r);
	assert_non_null(resp->forward->y);
	assert_non_null(resp->forward->y->cuda); /* the reply names where Y went */
	assert_int_equal(resp->forward->y->length, (uint64_t)m * N * 2);
	fos__response__free_unpacked(resp, NULL);
	uint16_t *y = malloc((size_t)m * N * 2);
	get(y, d, yoff, (size_t)m * N * 2);
	fos_client *c = lib();
	fos_status st;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, m, K, g_x), yh = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "w", &x, NULL, NULL, &yh, NULL, &st), st);
	assert_memory_equal(y, yh.data, (size_t)m * N * 2);
	free(yh.data);
	free(y);
	fos_close(c);
}

static void test_forward(void **state)
{
	(void)state;
	NEED();
	dbuf d;
	dbuf_alloc(&d, 32 << 20);
	uint64_t staged0, staged1, maps;
	dev_stats(NULL, NULL, &staged0);
	forward_case(&d, MBIG, 0, 8 << 20); /* large: read and written in place */
	dev_stats(&maps, NULL, &staged1);
	assert_int_equal(maps, 1);
	assert_int_equal(staged1, staged0);
	forward_case(&d, MSMALL, 20 << 20, 22 << 20); /* small: through the lane's buffers */
	forward_case(&d, MBIG, 2, (8 << 20) + 16);     /* unaligned: staged, same bits */
	dev_stats(NULL, NULL, &staged1);
	assert_true(staged1 >= staged0 + 2);

	/* refused: another GPU's UUID, a range past the allocation */
	req r;
	memset(&r, 0, sizeof r);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)"w";
	fr.x = dt(&r, &d, 0, FOS__DTYPE__DTYPE_BF16, MBIG, K);
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	uint8_t other[16];
	memcpy(other, g_uuid, 16);
	other[0] ^= 0xff;
	fr.x->cuda->gpu_uuid.data = other;
	expect_code(&rq, &r, FOS__CODE__FAILED_PRECONDITION, "but fosd runs on GPU");
	fr.x->cuda->gpu_uuid.data = g_uuid;
	fr.x->cuda->offset = (32 << 20) - 1024;
	expect_code(&rq, &r, FOS__CODE__INVALID_ARGUMENT, "lie outside the client's GPU allocation");

	/* CloseDeviceMemory unmaps; a second close finds nothing */
	Fos__Request cr = FOS__REQUEST__INIT;
	Fos__CloseDeviceMemoryRequest cd = FOS__CLOSE_DEVICE_MEMORY_REQUEST__INIT;
	cd.ipc_handle.data = d.handle;
	cd.ipc_handle.len = 64;
	cr.op_case = FOS__REQUEST__OP_CLOSE_DEVICE_MEMORY;
	cr.close_device_memory = &cd;
	expect_code(&cr, NULL, 0, NULL);
	dev_stats(&maps, NULL, NULL);
	assert_int_equal(maps, 0);
	expect_code(&cr, NULL, FOS__CODE__NOT_FOUND, NULL);

	/* freed and allocated again (often at the same address): a new handle, a new mapping, the new
	 * bytes */
	uint8_t *old = d.base;
	forward_case(&d, MBIG, 0, 8 << 20);
	dbuf_free(&d);
	dbuf_alloc(&d, 32 << 20);
	printf("gpu_e2e_devmem: reallocated at %s address\n", d.base == old ? "the same" : "another");
	uint16_t keep = g_x[0];
	g_x[0] = (uint16_t)(g_x[0] ^ 0x4000); /* different X: different Y row 0 */
	forward_case(&d, MBIG, 0, 8 << 20);
	g_x[0] = keep;
	dev_stats(&maps, NULL, NULL);
	assert_int_equal(maps, 2); /* the stale one stays until closed or the connection goes */
	dbuf_free(&d);
}

/* ---- backward, linear, put_weight, quantize, dequantize ----------------------------------------------- */

static void test_backward_and_linear(void **state)
{
	(void)state;
	NEED();
	const int64_t m = MBIG;
	dbuf d;
	dbuf_alloc(&d, 32 << 20);
	const size_t ox = 0, oy = 4 << 20, ody = 12 << 20, odx = 20 << 20, odw = 24 << 20, ow = 25 << 20,
		     ob = 26 << 20, odb = (26 << 20) + 4096;
	put(&d, ox, g_x, (size_t)m * K * 2);
	put(&d, ody, g_dy, (size_t)m * N * 2);
	put(&d, ow, g_w, (size_t)N * K * 2);
	put(&d, ob, g_b, (size_t)N * 2);

	/* forward with a saved context, then backward: all device */
	req r;
	memset(&r, 0, sizeof r);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)"w";
	fr.x = dt(&r, &d, ox, FOS__DTYPE__DTYPE_BF16, m, K);
	fr.save_context = 1;
	out_to(&r, "y", &d, oy, (uint64_t)m * N * 2);
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	Fos__Response *resp = call_ok(&rq, &r);
	uint64_t ctx = resp->forward->context_id;
	fos__response__free_unpacked(resp, NULL);
	memset(&r, 0, sizeof r);
	Fos__Request bq = FOS__REQUEST__INIT;
	Fos__BackwardRequest br = FOS__BACKWARD_REQUEST__INIT;
	br.context_id = ctx;
	br.dy = dt(&r, &d, ody, FOS__DTYPE__DTYPE_BF16, m, N);
	out_to(&r, "dx", &d, odx, (uint64_t)m * K * 2);
	out_to(&r, "dw", &d, odw, (uint64_t)N * K * 2);
	bq.op_case = FOS__REQUEST__OP_BACKWARD;
	bq.backward = &br;
	resp = call_ok(&bq, &r);
	fos__response__free_unpacked(resp, NULL);
	uint16_t *dx = malloc((size_t)m * K * 2), *dw = malloc((size_t)N * K * 2), *y = malloc((size_t)m * N * 2);
	get(dx, &d, odx, (size_t)m * K * 2);
	get(dw, &d, odw, (size_t)N * K * 2);
	get(y, &d, oy, (size_t)m * N * 2);
	fos_client *c = lib();
	fos_status st;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, m, K, g_x), yh = fos_tensor_out();
	fos_context hc;
	fos_forward_opts fo;
	memset(&fo, 0, sizeof fo);
	fo.save_context = 1;
	ASSERT_OK(fos_forward(c, "w", &x, NULL, &fo, &yh, &hc, &st), st);
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, m, N, g_dy), hdx = fos_tensor_out(), hdw = fos_tensor_out(),
		   hdb = fos_tensor_out();
	ASSERT_OK(fos_backward(c, &hc, &tdy, NULL, &hdx, &hdw, &hdb, &st), st);
	assert_memory_equal(y, yh.data, (size_t)m * N * 2);
	assert_memory_equal(dx, hdx.data, (size_t)m * K * 2);
	assert_memory_equal(dw, hdw.data, (size_t)N * K * 2);
	free(yh.data);
	free(hdx.data);
	free(hdw.data);
	free(hdb.data);

	/* linear with bias and dY: every tensor device */
	memset(&r, 0, sizeof r);
	Fos__Request lq = FOS__REQUEST__INIT;
	Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
	lr.x = dt(&r, &d, ox, FOS__DTYPE__DTYPE_BF16, m, K);
	lr.w = dt(&r, &d, ow, FOS__DTYPE__DTYPE_BF16, N, K);
	lr.bias = dt(&r, &d, ob, FOS__DTYPE__DTYPE_BF16, N, 0);
	lr.dy = dt(&r, &d, ody, FOS__DTYPE__DTYPE_BF16, m, N);
	out_to(&r, "y", &d, oy, (uint64_t)m * N * 2);
	out_to(&r, "dx", &d, odx, (uint64_t)m * K * 2);
	out_to(&r, "dw", &d, odw, (uint64_t)N * K * 2);
	out_to(&r, "db", &d, odb, (uint64_t)N * 2);
	lq.op_case = FOS__REQUEST__OP_LINEAR;
	lq.linear = &lr;
	resp = call_ok(&lq, &r);
	fos__response__free_unpacked(resp, NULL);
	uint16_t db[N];
	get(y, &d, oy, (size_t)m * N * 2);
	get(dx, &d, odx, (size_t)m * K * 2);
	get(dw, &d, odw, (size_t)N * K * 2);
	get(db, &d, odb, sizeof db);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), tb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	yh = fos_tensor_out();
	hdx = fos_tensor_out();
	hdw = fos_tensor_out();
	hdb = fos_tensor_out();
	ASSERT_OK(fos_linear(c, &x, &tw, &tb, &tdy, NULL, &yh, &hdx, &hdw, &hdb, &st), st);
	assert_memory_equal(y, yh.data, (size_t)m * N * 2);
	assert_memory_equal(dx, hdx.data, (size_t)m * K * 2);
	assert_memory_equal(dw, hdw.data, (size_t)N * K * 2);
	assert_memory_equal(db, hdb.data, sizeof db);
	free(yh.data);
	free(hdx.data);
	free(hdw.data);
	free(hdb.data);

	/* put_weight from device memory, then a host forward: the weight inline's bits */
	memset(&r, 0, sizeof r);
	Fos__Request pq = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	pw.name = (char *)"wd";
	pw.version = 1;
	pw.w = dt(&r, &d, ow, FOS__DTYPE__DTYPE_BF16, N, K);
	pq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	pq.put_weight = &pw;
	resp = call_ok(&pq, &r);
	fos__response__free_unpacked(resp, NULL);
	fos_tensor y1 = fos_tensor_out(), y2 = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "w", &x, NULL, NULL, &y1, NULL, &st), st);
	ASSERT_OK(fos_forward(c, "wd", &x, NULL, NULL, &y2, NULL, &st), st);
	assert_memory_equal(y1.data, y2.data, (size_t)m * N * 2);
	free(y1.data);
	free(y2.data);
	fos_close(c);
	free(dx);
	free(dw);
	free(y);
	dbuf_free(&d);
}

static void test_quantize_dequantize(void **state)
{
	(void)state;
	NEED();
	const int64_t rows = 256, cols = 512;
	dbuf d;
	dbuf_alloc(&d, 4 << 20);
	const size_t ox = 0, oc = 1 << 20, os = (1 << 20) + (256 << 10), oa = (1 << 20) + (512 << 10), oo = 2 << 20;
	put(&d, ox, g_x, (size_t)(rows * cols * 2));
	req r;
	memset(&r, 0, sizeof r);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
	qr.x = dt(&r, &d, ox, FOS__DTYPE__DTYPE_BF16, rows, cols);
	out_to(&r, "codes", &d, oc, (uint64_t)(rows * cols / 2));
	out_to(&r, "scales", &d, os, (uint64_t)(rows * cols / 16));
	out_to(&r, "amax", &d, oa, 4);
	rq.op_case = FOS__REQUEST__OP_QUANTIZE;
	rq.quantize = &qr;
	Fos__Response *resp = call_ok(&rq, &r);
	fos__response__free_unpacked(resp, NULL);
	uint8_t *codes = malloc((size_t)(rows * cols / 2)), *scales = malloc((size_t)(rows * cols / 16));
	float amax;
	get(codes, &d, oc, (size_t)(rows * cols / 2));
	get(scales, &d, os, (size_t)(rows * cols / 16));
	get(&amax, &d, oa, 4);
	fos_client *c = lib();
	fos_status st;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, rows, cols, g_x), hc = fos_tensor_out(), hs = fos_tensor_out(),
		   ha = fos_tensor_out();
	ASSERT_OK(fos_quantize(c, &x, NULL, NULL, &hc, &hs, &ha, &st), st);
	assert_memory_equal(codes, hc.data, (size_t)(rows * cols / 2));
	assert_memory_equal(scales, hs.data, (size_t)(rows * cols / 16));
	assert_memory_equal(&amax, ha.data, 4);

	/* dequantize from the device parts into device memory (scales and amax are read by the checks
	 * first: the snapshot path) */
	memset(&r, 0, sizeof r);
	Fos__Request dq = FOS__REQUEST__INIT;
	Fos__DequantizeRequest dr = FOS__DEQUANTIZE_REQUEST__INIT;
	dr.codes = dt(&r, &d, oc, FOS__DTYPE__DTYPE_U8, rows, cols / 2);
	dr.scales = dt(&r, &d, os, FOS__DTYPE__DTYPE_E4M3, rows, cols / 16);
	dr.amax = dt(&r, &d, oa, FOS__DTYPE__DTYPE_F32, 1, 0);
	out_to(&r, "out", &d, oo, (uint64_t)(rows * cols * 2));
	dq.op_case = FOS__REQUEST__OP_DEQUANTIZE;
	dq.dequantize = &dr;
	resp = call_ok(&dq, &r);
	fos__response__free_unpacked(resp, NULL);
	uint16_t *out = malloc((size_t)(rows * cols * 2));
	get(out, &d, oo, (size_t)(rows * cols * 2));
	fos_tensor ho = fos_tensor_out();
	ASSERT_OK(fos_dequantize(c, &hc, &hs, &ha, 256, 0, FOS_DTYPE_BF16, &ho, &st), st);
	assert_memory_equal(out, ho.data, (size_t)(rows * cols * 2));
	free(ho.data);
	free(hc.data);
	free(hs.data);
	free(ha.data);
	free(out);
	free(codes);
	free(scales);
	fos_close(c);
	dbuf_free(&d);
}

/* ---- a client that exits holding mappings ------------------------------------------------------------- */

/* The child: maps 256 MiB, runs a forward on it over its own connection, exits without closing. */
static int child_main(const char *url)
{
	if (traw_open(&g_sock, url))
		return 2;
	Fos__Request hq = FOS__REQUEST__INIT;
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	hq.op_case = FOS__REQUEST__OP_HEALTH;
	hq.health = &hr;
	Fos__Response *h = call(&hq, NULL);
	memcpy(g_uuid, h->health->gpu_uuid.data, 16);
	fos__response__free_unpacked(h, NULL);
	dbuf d;
	dbuf_alloc(&d, 256 << 20);
	tsrv_fill_bf16(g_x, MBIG * K, 32, 1.0f);
	put(&d, 0, g_x, (size_t)MBIG * K * 2);
	req r;
	memset(&r, 0, sizeof r);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)"w";
	fr.x = dt(&r, &d, 0, FOS__DTYPE__DTYPE_BF16, MBIG, K);
	out_to(&r, "y", &d, 64 << 20, (uint64_t)MBIG * N * 2);
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	Fos__Response *resp = call(&rq, &r);
	int ok = !resp->status || !resp->status->code;
	fos__response__free_unpacked(resp, NULL);
	_exit(ok ? 0 : 3); /* with the mapping open in fosd */
}

static void test_client_exit(void **state)
{
	(void)state;
	NEED();
	uint64_t maps0, bytes0;
	dev_stats(&maps0, &bytes0, NULL);
	size_t free0 = 0, total = 0;
#ifdef FOS_HAVE_CUDA
	cudaDeviceSynchronize();
	assert_int_equal(cudaMemGetInfo(&free0, &total), 0);
#endif
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	assert_true(n > 0);
	self[n] = 0;
	char *argv[] = {self, (char *)"--child", (char *)g_srv.url, NULL};
	pid_t pid;
	assert_int_equal(posix_spawn(&pid, self, NULL, NULL, argv, environ), 0);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* fosd closes the child's mapping when its connection goes (shortly after the exit) */
	uint64_t maps = 0, bytes = 0;
	for (int i = 0; i < 200; i++) {
		dev_stats(&maps, &bytes, NULL);
		if (maps == maps0)
			break;
		usleep(20000);
	}
	assert_int_equal(maps, maps0);
	assert_int_equal(bytes, bytes0);
#ifdef FOS_HAVE_CUDA
	size_t free1 = 0;
	for (int i = 0; i < 100; i++) {
		assert_int_equal(cudaMemGetInfo(&free1, &total), 0);
		if (free1 + (16u << 20) >= free0)
			break;
		usleep(20000);
	}
	printf("gpu_e2e_devmem: GPU free memory %zu MiB before the child, %zu MiB after it exited\n", free0 >> 20,
	       free1 >> 20);
	assert_true(free1 + (16u << 20) >= free0); /* the child's 256 MiB came back */
#endif
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--child"))
		return child_main(argv[2]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward),
		cmocka_unit_test(test_backward_and_linear),
		cmocka_unit_test(test_quantize_dequantize),
		cmocka_unit_test(test_client_exit),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
