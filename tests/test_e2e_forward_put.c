/* test_e2e_forward_put.c: a forward carrying the put of its weight (ForwardRequest.put, libfos's
 * fos_forward_put; PROTOCOL.md "A put inside a forward"), against a cpu fosd. The fused call gives
 * the bits of a put followed by a forward (and of the in-process reference), its context serves a
 * backward with the reference's gradients, a second fused call with a new version forwards with
 * the new weight, and it is one request (Stats: one forward, no put_weight). Bad fused input gets
 * a clear status naming the field and fosd keeps serving: a put naming another weight, a put
 * without a version or with a placement, a weight_version other than the put's, W of a shape fosd
 * refuses, a version already cached (the forward does not run); a forward that fails after its
 * put succeeded (x's K against the new W) leaves the put cached. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "support_assert.h"
#include "support_raw.h"
#include "support_server.h"
#include "support_trust.h"

#define M 40
#define N 48
#define K 64

static tsrv g_srv;
static nng_socket g_sock;
static fos_client *g_c;
static uint16_t g_w[N * K], g_w2[N * K], g_x[M * K], g_dy[M * N], g_b[N];

static int setup(void **state)
{
	(void)state;
	tsrv_fill_bf16(g_w, N * K, 91, 0.05f);
	tsrv_fill_bf16(g_w2, N * K, 92, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 93, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 94, 0.01f);
	tsrv_fill_bf16(g_b, N, 95, 0.5f);
	if (tsrv_start(&g_srv, NULL) || traw_open(&g_sock, g_srv.url))
		return -1;
	g_c = tt_connect(g_srv.url, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fos_close(g_c);
	nng_close(g_sock);
	int rc = tsrv_stop(&g_srv, SIGTERM, 15000);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

/* Requests of op so far (fosd's Stats). */
static uint64_t requests_of(const char *op)
{
	static fos_stats_info s;
	fos_status st;
	ASSERT_OK(fos_stats(g_c, &s, &st), st);
	for (int i = 0; i < s.n_ops; i++)
		if (!strcmp(s.ops[i].op, op))
			return s.ops[i].requests;
	return 0;
}

/* The cached version of name (0: not cached). */
static uint64_t cached_version(const char *name)
{
	fos_weight_info *l;
	size_t n;
	fos_status st;
	uint64_t v = 0;
	ASSERT_OK(fos_list_weights(g_c, &l, &n, &st), st);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			v = l[i].version;
	free(l);
	return v;
}

static void test_same_bits_as_put_then_forward(void **state)
{
	(void)state;
	static uint16_t ry[M * N], rdx[M * K], rdw[N * K], rdb[N], ry2[M * N];
	fos_linear_opts lo = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, g_b, g_dy, M, N, K, &lo, ry, rdx, rdw, rdb), 0);
	assert_int_equal(tsrv_ref_linear(g_x, g_w2, g_b, NULL, M, N, K, &lo, ry2, NULL, NULL, NULL), 0);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), tw2 = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w2);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), tb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_status st;
	/* the two requests: put, then forward */
	ASSERT_OK(fos_put_weight(g_c, "fp.two", 1, &tw, NULL, NULL, &st), st);
	fos_tensor y2 = fos_tensor_out();
	ASSERT_OK(fos_forward(g_c, "fp.two", &tx, &tb, NULL, &y2, NULL, &st), st);
	/* the one: a forward saving a context, carrying the put */
	uint64_t fwd0 = requests_of("forward"), put0 = requests_of("put_weight");
	fos_forward_opts fo = {.save_context = 1};
	fos_tensor y = fos_tensor_out();
	fos_context ctx;
	ASSERT_OK(fos_forward_put(g_c, "fp.one", 1, &tw, NULL, &tx, &tb, &fo, &y, &ctx, &st), st);
	assert_int_equal(requests_of("forward"), fwd0 + 1);
	assert_int_equal(requests_of("put_weight"), put0);
	assert_int_equal(y.ndim, 2);
	assert_int_equal(y.shape[0], M);
	assert_int_equal(y.shape[1], N);
	assert_memory_equal(y.data, y2.data, sizeof ry);
	assert_memory_equal(y.data, ry, sizeof ry);
	assert_int_equal(ctx.weight_version, 1);
	assert_int_equal(cached_version("fp.one"), 1);
	/* its context: the reference's gradients */
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy), dx = fos_tensor_out(), dw = fos_tensor_out(),
		   db = fos_tensor_out();
	ASSERT_OK(fos_backward(g_c, &ctx, &tdy, NULL, &dx, &dw, &db, &st), st);
	assert_memory_equal(dx.data, rdx, sizeof rdx);
	assert_memory_equal(dw.data, rdw, sizeof rdw);
	assert_memory_equal(db.data, rdb, sizeof rdb);
	/* the next step: a new version, its bits */
	fos_tensor y3 = fos_tensor_out();
	ASSERT_OK(fos_forward_put(g_c, "fp.one", 2, &tw2, NULL, &tx, &tb, NULL, &y3, NULL, &st), st);
	assert_memory_equal(y3.data, ry2, sizeof ry2);
	assert_int_equal(cached_version("fp.one"), 2);
	void *bufs[] = {y.data, y2.data, y3.data, dx.data, dw.data, db.data};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
	ASSERT_OK(fos_drop_weight(g_c, "fp.one", &st), st);
	ASSERT_OK(fos_drop_weight(g_c, "fp.two", &st), st);
}

/* A raw Forward of weight "fp.raw" (x (M, K)) carrying a put of name put_name, version, W (N, wk),
 * weight_version fwd_version and replicas; expects code and needle. */
static void raw_forward_put(const char *put_name, uint64_t version, int64_t wk, uint64_t fwd_version, uint32_t replicas,
			    int code, const char *needle)
{
	static uint8_t data[(M * K + N * 2 * K) * 2 + 1024];
	Fos__Tensor tx, tw;
	int64_t sx[2], sw[2];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&tx, sx, &pl, FOS__DTYPE__DTYPE_BF16, 2, (int64_t[]){M, K});
	fosw_tensor_init(&tw, sw, &pl, FOS__DTYPE__DTYPE_BF16, 2, (int64_t[]){N, wk});
	assert_true(pl.cursor <= sizeof data);
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	pw.name = (char *)put_name;
	pw.version = version;
	pw.w = &tw;
	pw.replicas = replicas;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = "fp.raw";
	fr.weight_version = fwd_version;
	fr.x = &tx;
	fr.put = &pw;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	traw_check(traw_call(g_sock, &rq, &pl, data, (size_t)pl.cursor), code, needle);
}

static void test_bad_fused_input(void **state)
{
	(void)state;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_status st;
	/* refused before anything runs */
	raw_forward_put("fp.other", 1, K, 0, 0, FOS__CODE__INVALID_ARGUMENT,
			"forward.put.name is 'fp.other' but forward.weight is 'fp.raw'");
	raw_forward_put("fp.raw", 0, K, 0, 0, FOS__CODE__INVALID_ARGUMENT, "forward.put.version is 0");
	raw_forward_put("fp.raw", 3, K, 2, 0, FOS__CODE__INVALID_ARGUMENT,
			"forward.weight_version is 2 but forward.put.version is 3");
	raw_forward_put("fp.raw", 1, K, 0, 1, FOS__CODE__INVALID_ARGUMENT, "forward.put has a placement");
	raw_forward_put("fp.raw", 1, K + 8, 0, 0, FOS__CODE__INVALID_ARGUMENT, "w (48, 72)");
	assert_int_equal(cached_version("fp.raw"), 0);
	/* libfos's own checks */
	fos_tensor y = fos_tensor_out();
	ASSERT_CODE(fos_forward_put(g_c, "fp.lib", 0, &tw, NULL, &tx, NULL, NULL, &y, NULL, &st),
		    FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "version 0"));
	fos_forward_opts fo = {.weight_version = 4};
	ASSERT_CODE(fos_forward_put(g_c, "fp.lib", 5, &tw, NULL, &tx, NULL, &fo, &y, NULL, &st),
		    FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "o->weight_version is 4"));
	/* a version already cached: the put fails, the forward does not run */
	ASSERT_OK(fos_put_weight(g_c, "fp.lib", 1, &tw, NULL, NULL, &st), st);
	uint64_t fwd0 = requests_of("forward");
	ASSERT_CODE(fos_forward_put(g_c, "fp.lib", 1, &tw, NULL, &tx, NULL, NULL, &y, NULL, &st),
		    FOS_CODE_ALREADY_EXISTS, st);
	assert_non_null(strstr(st.message, "put: weight 'fp.lib' version 1 is already cached"));
	assert_null(y.data);
	assert_int_equal(requests_of("forward"), fwd0 + 1);
	/* the put succeeds, the forward then fails (x's K is not the new W's): the put stays */
	static uint16_t wide[N * 2 * K];
	tsrv_fill_bf16(wide, N * 2 * K, 96, 0.05f);
	fos_tensor twide = fos_tensor_2d(FOS_DTYPE_BF16, N, 2 * K, wide);
	ASSERT_CODE(fos_forward_put(g_c, "fp.lib", 2, &twide, NULL, &tx, NULL, NULL, &y, NULL, &st),
		    FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "x has K = 64 but weight 'fp.lib' is (48, 128)"));
	assert_int_equal(cached_version("fp.lib"), 2);
	/* fosd keeps serving */
	ASSERT_OK(fos_forward_put(g_c, "fp.lib", 3, &tw, NULL, &tx, NULL, NULL, &y, NULL, &st), st);
	assert_int_equal(y.shape[1], N);
	free(y.data);
	ASSERT_OK(fos_drop_weight(g_c, "fp.lib", &st), st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_bits_as_put_then_forward),
		cmocka_unit_test(test_bad_fused_input),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
