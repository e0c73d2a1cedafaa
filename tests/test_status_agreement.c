/* test_status_agreement.c: requests whose statuses disagreed with proto/PROTOCOL.md or with each
 * other (issue 25 point 8), against a real cpu fosd over a bare socket:
 *   - PutWeight's w naming device memory with a data-section offset or an shm reference is
 *     INVALID_ARGUMENT (the device tensors table), as Forward's x is, before the cpu fosd says it
 *     cannot map device memory (FAILED_PRECONDITION, which a well-formed one still gets);
 *   - a Backward shm_outputs entry for db when the forward had no bias is refused, as one for a
 *     skipped dX or dW is, and the context stays usable;
 *   - Forward with expect and a y shm output (and with skip_output and one) is refused, naming
 *     both;
 *   - shm_outputs targets that overlap in one region (dX over dW) are refused, naming both;
 *     adjacent ones are fine and give the reference's bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fos.h"
#include "support_assert.h"
#include "support_raw.h"
#include "support_server.h"
#include "support_trust.h"

#define M 32
#define N 48
#define K 64
#define REGION_BYTES (1 << 20)

static tsrv g_srv;
static nng_socket g_sock;
static fos_client *g_c;
static uint16_t g_w[N * K], g_x[M * K], g_dy[M * N];
static int g_fd;
static uint8_t *g_map;

static int setup(void **state)
{
	(void)state;
	tsrv_fill_bf16(g_w, N * K, 31, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 32, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 33, 0.01f);
	if (tsrv_start(&g_srv, NULL) || traw_open(&g_sock, g_srv.url))
		return -1;
	g_c = tt_connect(g_srv.url, NULL);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_status st;
	if (fos_put_weight(g_c, "w", 1, &tw, NULL, NULL, &st))
		return -1;
	/* a region of the raw socket's connection for the results */
	g_fd = memfd_create("fos-test-status", MFD_CLOEXEC);
	if (g_fd < 0 || ftruncate(g_fd, REGION_BYTES))
		return -1;
	g_map = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
	if (g_map == MAP_FAILED)
		return -1;
	char key[32];
	snprintf(key, sizeof key, "fd:%d", g_fd);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__RegisterRegionRequest rr = FOS__REGISTER_REGION_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_REGISTER_REGION;
	rq.register_region = &rr;
	rr.name = (char *)"r";
	rr.key = key;
	rr.size = REGION_BYTES;
	traw_expect(g_sock, &rq, 0, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fos_close(g_c);
	nng_close(g_sock);
	munmap(g_map, REGION_BYTES);
	close(g_fd);
	int rc = tsrv_stop(&g_srv, SIGTERM, 15000);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

/* ---- device tensors: the form first ---- */

typedef struct dev {
	Fos__Tensor t;
	Fos__CudaRef ref;
	int64_t shape[2];
	uint8_t handle[64], uuid[16];
} dev;

static Fos__Tensor *dev_tensor(dev *d, int64_t d0, int64_t d1)
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
	d->shape[0] = d0;
	d->shape[1] = d1;
	d->t.dtype = FOS__DTYPE__DTYPE_BF16;
	d->t.n_shape = 2;
	d->t.shape = d->shape;
	d->t.length = (uint64_t)(d0 * d1 * 2);
	d->t.cuda = &d->ref;
	return &d->t;
}

static nng_socket *g_dev_sock = &g_sock; /* the fosd the device-tensor checks go to */

static void put_with(Fos__Tensor *w, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	pw.name = (char *)"dev.w";
	pw.version = 1;
	pw.w = w;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	traw_expect(*g_dev_sock, &rq, code, needle);
}

static void forward_x_with(Fos__Tensor *x, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)"w";
	fr.x = x;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	traw_expect(*g_dev_sock, &rq, code, needle);
}

static void device_tensor_forms(void)
{
	dev d;
	Fos__ShmRef sr = FOS__SHM_REF__INIT;
	sr.region = (char *)"r";
	/* Forward's x and PutWeight's w alike: INVALID_ARGUMENT for the form */
	dev_tensor(&d, M, K)->offset = 64;
	forward_x_with(&d.t, FOS__CODE__INVALID_ARGUMENT, "tensor x names device memory, so it can have no data-section offset");
	dev_tensor(&d, N, K)->offset = 64;
	put_with(&d.t, FOS__CODE__INVALID_ARGUMENT, "tensor w names device memory, so it can have no data-section offset");
	dev_tensor(&d, M, K)->shm = &sr;
	forward_x_with(&d.t, FOS__CODE__INVALID_ARGUMENT, "no shm reference");
	dev_tensor(&d, N, K)->shm = &sr;
	put_with(&d.t, FOS__CODE__INVALID_ARGUMENT, "tensor w names device memory, so it can have no data-section offset and no shm reference");
	/* well-formed: a cpu fosd cannot map it, for both */
	forward_x_with(dev_tensor(&d, M, K), FOS__CODE__FAILED_PRECONDITION, "device tensors need a cuda fosd");
	put_with(dev_tensor(&d, N, K), FOS__CODE__FAILED_PRECONDITION, "device tensors need a cuda fosd");
}

static void test_device_tensor_forms(void **state)
{
	(void)state;
	device_tensor_forms();
	/* the same on a fosd of two (cpu stand-in) devices, where placement looks at the tensors */
	tsrv s2;
	const char *args[] = {"--devices", "2", NULL};
	assert_int_equal(tsrv_start(&s2, args), 0);
	nng_socket sock2;
	assert_int_equal(traw_open(&sock2, s2.url), 0);
	assert_int_equal(tsrv_put_weight_bf16(&s2, "w", N, K, g_w), 0);
	g_dev_sock = &sock2;
	device_tensor_forms();
	g_dev_sock = &g_sock;
	nng_close(sock2);
	assert_int_equal(tsrv_stop(&s2, SIGTERM, 15000), 0);
	tsrv_cleanup(&s2);
}

/* ---- shm outputs ---- */

static Fos__ShmOutput *out_at(Fos__ShmOutput *so, Fos__ShmRef *ref, const char *result, uint64_t off, uint64_t cap)
{
	fos__shm_output__init(so);
	fos__shm_ref__init(ref);
	ref->region = (char *)"r";
	ref->offset = off;
	so->result = (char *)result;
	so->shm = ref;
	so->capacity = cap;
	return so;
}

/* A raw Backward of ctx (kept) with dy inline and the given outputs. */
static Fos__Response *backward(uint64_t ctx, Fos__ShmOutput **outs, size_t n)
{
	Fos__BackwardRequest br = FOS__BACKWARD_REQUEST__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	int64_t shape_store[2];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&t, shape_store, &pl, FOS__DTYPE__DTYPE_BF16, 2, (int64_t[]){M, N});
	br.context_id = ctx;
	br.dy = &t;
	br.keep_context = 1;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_BACKWARD;
	rq.backward = &br;
	rq.n_shm_outputs = n;
	rq.shm_outputs = outs;
	return traw_call(g_sock, &rq, &pl, g_dy, sizeof g_dy);
}

static uint64_t save_context(void)
{
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), y = fos_tensor_out();
	fos_forward_opts fo = {.save_context = 1};
	fos_context ctx;
	fos_status st;
	ASSERT_OK(fos_forward(g_c, "w", &tx, NULL, &fo, &y, &ctx, &st), st);
	free(y.data);
	return ctx.id;
}

static void test_db_without_bias(void **state)
{
	(void)state;
	uint64_t ctx = save_context();
	Fos__ShmOutput so;
	Fos__ShmRef ref;
	Fos__ShmOutput *outs[] = {out_at(&so, &ref, "db", 0, N * 2)};
	traw_check(backward(ctx, outs, 1), FOS__CODE__INVALID_ARGUMENT,
		   "shm_outputs[0] names db, but the forward of this context had no bias");
	/* the context is still there: a backward with dx into the region */
	outs[0] = out_at(&so, &ref, "dx", 0, M * K * 2);
	traw_check(backward(ctx, outs, 1), 0, NULL);
	static uint16_t rdx[M * K], rdw[N * K], ry[M * N];
	fos_linear_opts lo = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, g_dy, M, N, K, &lo, ry, rdx, rdw, NULL), 0);
	assert_memory_equal(g_map, rdx, sizeof rdx);
}

static void test_overlapping_targets(void **state)
{
	(void)state;
	uint64_t ctx = save_context();
	Fos__ShmOutput sx, sw;
	Fos__ShmRef rx, rw;
	/* dW starts 64 bytes before dX's end */
	Fos__ShmOutput *outs[] = {out_at(&sx, &rx, "dx", 0, M * K * 2), out_at(&sw, &rw, "dw", M * K * 2 - 64, N * K * 2)};
	traw_check(backward(ctx, outs, 2), FOS__CODE__INVALID_ARGUMENT,
		   "shm_outputs[1] ('dw', 6144 bytes at offset 4032) overlaps shm_outputs[0] ('dx', 4096 bytes at offset 0) "
		   "in shm region 'r'");
	/* one inside the other, the other order */
	out_at(&sx, &rx, "dx", 4096, 64);
	out_at(&sw, &rw, "dw", 0, N * K * 2);
	traw_check(backward(ctx, outs, 2), FOS__CODE__INVALID_ARGUMENT, "overlaps");
	/* adjacent: fine, and the reference's bits */
	memset(g_map, 0, REGION_BYTES);
	out_at(&sx, &rx, "dx", 0, M * K * 2);
	out_at(&sw, &rw, "dw", M * K * 2, N * K * 2);
	traw_check(backward(ctx, outs, 2), 0, NULL);
	static uint16_t rdx[M * K], rdw[N * K], ry[M * N];
	fos_linear_opts lo = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, g_dy, M, N, K, &lo, ry, rdx, rdw, NULL), 0);
	assert_memory_equal(g_map, rdx, sizeof rdx);
	assert_memory_equal(g_map + M * K * 2, rdw, sizeof rdw);
}

static void forward_with_y_out(int with_expect, int skip_output, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor x = FOS__TENSOR__INIT, e = FOS__TENSOR__INIT;
	int64_t xs[2], es[2];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	static uint8_t data[(M * K + M * N) * 2];
	fosw_tensor_init(&x, xs, &pl, FOS__DTYPE__DTYPE_BF16, 2, (int64_t[]){M, K});
	memcpy(data, g_x, sizeof g_x);
	if (with_expect) {
		fosw_tensor_init(&e, es, &pl, FOS__DTYPE__DTYPE_BF16, 2, (int64_t[]){M, N});
		fr.expect = &e;
	}
	fr.weight = (char *)"w";
	fr.x = &x;
	fr.skip_output = skip_output;
	Fos__ShmOutput so;
	Fos__ShmRef ref;
	Fos__ShmOutput *outs[] = {out_at(&so, &ref, "y", 0, M * N * 2)};
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	rq.n_shm_outputs = 1;
	rq.shm_outputs = outs;
	traw_check(traw_call(g_sock, &rq, &pl, data, pl.cursor), code, needle);
}

static void test_forward_y_target_conflicts(void **state)
{
	(void)state;
	forward_with_y_out(1, 0, FOS__CODE__INVALID_ARGUMENT, "shm_outputs[0] names y, but expect is set");
	forward_with_y_out(0, 1, FOS__CODE__INVALID_ARGUMENT, "shm_outputs[0] names y, but skip_output is set");
	forward_with_y_out(0, 0, 0, NULL); /* alone: fine */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_tensor_forms),
		cmocka_unit_test(test_db_without_bias),
		cmocka_unit_test(test_overlapping_targets),
		cmocka_unit_test(test_forward_y_target_conflicts),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
