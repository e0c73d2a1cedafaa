/* test_e2e_backward_skip.c: BackwardRequest.skip_dx and skip_dw (a frozen weight, an input that
 * needs no gradient). For every override, with and without a bias, at a shape whose M and N are
 * not multiples of 128 (the padded paths): the gradients asked for have the reference's bits (the
 * in-process backward computing all of them) and the skipped ones are absent from the reply; a
 * shm_outputs entry for a skipped gradient is INVALID_ARGUMENT; the context, kept, serves a full
 * backward after; libfos asks for the skip when fos_backward's dx or dw is NULL. */
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
static uint16_t g_w[N * K], g_x[M * K], g_dy[M * N], g_b[N];

static int setup(void **state)
{
	(void)state;
	tsrv_fill_bf16(g_w, N * K, 81, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 82, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 83, 0.01f);
	tsrv_fill_bf16(g_b, N, 84, 0.5f);
	if (tsrv_start(&g_srv, NULL) || traw_open(&g_sock, g_srv.url))
		return -1;
	g_c = tt_connect(g_srv.url, NULL);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_status st;
	return fos_put_weight(g_c, "skip.w", 1, &tw, NULL, NULL, &st) ? -1 : 0;
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

/* A raw Backward of ctx keeping it, with the skip flags; the reply and its data section. */
static Fos__Response *backward(uint64_t ctx, int skip_dx, int skip_dw, const char *shm_result, uint8_t **data)
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
	br.skip_dx = skip_dx;
	br.skip_dw = skip_dw;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_BACKWARD;
	rq.backward = &br;
	Fos__ShmOutput so = FOS__SHM_OUTPUT__INIT;
	Fos__ShmRef sr = FOS__SHM_REF__INIT;
	Fos__ShmOutput *sop = &so;
	if (shm_result) {
		so.result = (char *)shm_result;
		sr.region = "nowhere";
		so.shm = &sr;
		so.capacity = 1 << 20;
		rq.n_shm_outputs = 1;
		rq.shm_outputs = &sop;
	}
	size_t dlen;
	return traw_call_data(g_sock, &rq, &pl, g_dy, sizeof g_dy, data, &dlen);
}

static void same_bits(const Fos__Tensor *t, const uint8_t *data, const uint16_t *want, size_t n, const char *what)
{
	if (!t)
		fail_msg("%s missing", what);
	assert_int_equal(t->length, n * 2);
	if (memcmp(data + t->offset, want, n * 2))
		fail_msg("%s: not the reference's bits", what);
}

static void test_skips(void **state)
{
	(void)state;
	static const int ovr[] = {FOS_OVERRIDE_QUANTIZED, FOS_OVERRIDE_HIGH_PRECISION, FOS_OVERRIDE_DEQUANTIZED};
	static const int lov[] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
	static uint16_t ry[M * N], rdx[M * K], rdw[N * K], rdb[N];
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), tb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_status st;
	for (int o = 0; o < 3; o++)
		for (int bias = 0; bias < 2; bias++) {
			fos_linear_opts lo = fos_linear_opts_default();
			lo.override = lov[o];
			assert_int_equal(tsrv_ref_linear(g_x, g_w, bias ? g_b : NULL, g_dy, M, N, K, &lo, ry, rdx, rdw,
							 bias ? rdb : NULL),
					 0);
			fos_forward_opts fo = {.override = ovr[o], .save_context = 1};
			fos_tensor y = fos_tensor_out();
			fos_context ctx;
			ASSERT_OK(fos_forward(g_c, "skip.w", &tx, bias ? &tb : NULL, &fo, &y, &ctx, &st), st);
			free(y.data);
			for (int mode = 0; mode < 4; mode++) { /* skip dX, skip dW, both, neither */
				int sx = mode == 0 || mode == 2, sw = mode == 1 || mode == 2;
				uint8_t *data;
				Fos__Response *r = backward(ctx.id, sx, sw, NULL, &data);
				if (r->status && r->status->code)
					fail_msg("override %d bias %d mode %d: %s", o, bias, mode, r->status->message);
				const Fos__BackwardResult *b = r->backward;
				if (sx)
					assert_null(b->dx);
				else
					same_bits(b->dx, data, rdx, M * K, "dx");
				if (sw)
					assert_null(b->dw);
				else
					same_bits(b->dw, data, rdw, N * K, "dw");
				if (bias)
					same_bits(b->db, data, rdb, N, "db");
				else
					assert_null(b->db);
				free(data);
				fos__response__free_unpacked(r, NULL);
			}
			ASSERT_OK(fos_release(g_c, &ctx, &st), st);
		}
}

static void test_skipped_output_refused(void **state)
{
	(void)state;
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), y = fos_tensor_out();
	fos_forward_opts fo = {.save_context = 1};
	fos_context ctx;
	fos_status st;
	ASSERT_OK(fos_forward(g_c, "skip.w", &tx, NULL, &fo, &y, &ctx, &st), st);
	free(y.data);
	uint8_t *data;
	traw_check(backward(ctx.id, 1, 0, "dx", &data), FOS__CODE__INVALID_ARGUMENT,
		   "shm_outputs[0] names dx, which backward.skip_dx leaves out");
	free(data);
	traw_check(backward(ctx.id, 0, 1, "dw", &data), FOS__CODE__INVALID_ARGUMENT, "backward.skip_dw");
	free(data);
	/* the context is still there: a full backward */
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy), dx = fos_tensor_out(), dw = fos_tensor_out();
	ASSERT_OK(fos_backward(g_c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
	free(dx.data);
	free(dw.data);
}

/* libfos: a NULL dx or dw asks fosd to skip it; the other has the reference's bits. */
static void test_libfos_null_gradient(void **state)
{
	(void)state;
	static uint16_t ry[M * N], rdx[M * K], rdw[N * K];
	fos_linear_opts lo = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, g_dy, M, N, K, &lo, ry, rdx, rdw, NULL), 0);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), y = fos_tensor_out();
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy), dx = fos_tensor_out(), dw = fos_tensor_out();
	fos_forward_opts fo = {.save_context = 1};
	fos_backward_opts bo = {.keep_context = 1};
	fos_context ctx;
	fos_status st;
	ASSERT_OK(fos_forward(g_c, "skip.w", &tx, NULL, &fo, &y, &ctx, &st), st);
	free(y.data);
	ASSERT_OK(fos_backward(g_c, &ctx, &tdy, &bo, NULL, &dw, NULL, &st), st);
	assert_memory_equal(dw.data, rdw, sizeof rdw);
	ASSERT_OK(fos_backward(g_c, &ctx, &tdy, NULL, &dx, NULL, NULL, &st), st);
	assert_memory_equal(dx.data, rdx, sizeof rdx);
	assert_int_equal(ctx.id, 0); /* consumed by the second */
	free(dx.data);
	free(dw.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_skips),
		cmocka_unit_test(test_skipped_output_refused),
		cmocka_unit_test(test_libfos_null_gradient),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
