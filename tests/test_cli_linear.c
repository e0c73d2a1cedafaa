/* test_cli_linear.c: `fos linear` end to end (build/fos as a subprocess): a small layer whose Y, dX,
 * dW and db are derived by hand from NUMERICS.md, and every option against the backend API called
 * directly (fos_qweight_make + fos_linear_forward + fos_linear_backward) on the same inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend.h"
#include "support_ref.h"
#include "test_cli_harness.h"

static const char *outp(const char *dir, const char *name)
{
	static char buf[4][1200];
	static int i;
	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
	return buf[i];
}

/* ---- by hand --------------------------------------------------------------------------------------
 * M = N = K = 128.  X[m, k] = 6 where k % 16 == 0, s(m) = m % 5 where k % 16 == 1, else 0.
 * W[n, k] = 6 where n % 16 == 0 and k % 16 == 0, t(n) = 0.5 * (n % 4) where k % 16 == 1, else 0.
 * Every X block and every W 16x16 tile holds a 6, so both amaxes are 6, S_enc = rn(1536 / 6) = 256,
 * each block's base = rn(rn(6/6) * 256) = 256: sf6 = 256, inv6 = rn(1 / rn(256 * rn(1/256))) = 1 and
 * all values are on the E2M1 grid, so map-to-6 decodes exactly (err6 = 0) and err4 < err6 can never
 * hold: X and W are represented exactly, decoded operands 256 * x and 256 * w.
 * GEMM epilogue: g = rn(6 * rn(1/1536)) = rn(2.0000000596 * 2^-8) = 2^-8 for both, alpha = 2^-16, so
 * Y = bf16(sum_k x w) exactly = 288 [n % 16 == 0] + 8 s(m) t(n)  (8 blocks of 16 along K), plus
 * bias[n] = 2 (n % 3) - 2: all even integers below 512, exact in bf16.
 * dY[m, n] = 2 [m == n] + [n == 0].  high_precision (and dequantized, since deq(X) = X and
 * deq(W) = W: dec = rn(rn(256 * 6) * rn(1/1536)) = 1):
 *   dX[m, k] = 2 W[m, k] + W[0, k] = 2 W[m, k] + 6 [k % 16 == 0]
 *   dW[n, k] = 2 X[n, k] + [n == 0] sum_m X[m, k]; sum_m X[m, k] = 768 (k % 16 == 0), 253 (k % 16
 *   == 1: sum of m % 5 over 0..127 = 25 * 10 + 0 + 1 + 2)
 *   db[n] = 2 + 128 [n == 0]
 * 780 = 4 * 195 and 253 are exact in bf16 (spacing 4 in [512, 1024), 1 in [128, 256)). */

#define HN 128

static uint16_t bf(float v)
{
	return ref_f32_bf16(v);
}

static void hand_inputs(uint16_t *x, uint16_t *w, uint16_t *bias, uint16_t *dy)
{
	for (int m = 0; m < HN; m++)
		for (int k = 0; k < HN; k++)
			x[m * HN + k] = bf(k % 16 == 0 ? 6.0f : (k % 16 == 1 ? (float)(m % 5) : 0.0f));
	for (int n = 0; n < HN; n++)
		for (int k = 0; k < HN; k++)
			w[n * HN + k] = bf((k % 16 == 0 && n % 16 == 0) ? 6.0f : (k % 16 == 1 ? 0.5f * (float)(n % 4) : 0.0f));
	for (int n = 0; n < HN; n++)
		bias[n] = bf((float)(2 * (n % 3) - 2));
	for (int m = 0; m < HN; m++)
		for (int n = 0; n < HN; n++)
			dy[m * HN + n] = bf((float)(2 * (m == n) + (n == 0)));
}

static void test_hand_layer(void **state)
{
	(void)state;
	size_t nn = HN * HN;
	uint16_t *x = malloc(nn * 2), *w = malloc(nn * 2), *dy = malloc(nn * 2), bias[HN];
	uint16_t *y = malloc(nn * 2), *dx = malloc(nn * 2), *dw = malloc(nn * 2), db[HN];
	assert_true(x && w && dy && y && dx && dw);
	hand_inputs(x, w, bias, dy);
	for (int m = 0; m < HN; m++)
		for (int n = 0; n < HN; n++)
			y[m * HN + n] = bf((float)(288 * (n % 16 == 0)) + 8.0f * (float)(m % 5) * 0.5f * (float)(n % 4) +
					   (float)(2 * (n % 3) - 2));
	for (int m = 0; m < HN; m++)
		for (int k = 0; k < HN; k++)
			dx[m * HN + k] = bf(2.0f * ref_bf16_f32(w[m * HN + k]) + (k % 16 == 0 ? 6.0f : 0.0f));
	for (int n = 0; n < HN; n++)
		for (int k = 0; k < HN; k++) {
			float col = k % 16 == 0 ? 768.0f : (k % 16 == 1 ? 253.0f : 0.0f);
			dw[n * HN + k] = bf(2.0f * ref_bf16_f32(x[n * HN + k]) + (n == 0 ? col : 0.0f));
		}
	for (int n = 0; n < HN; n++)
		db[n] = bf(n == 0 ? 130.0f : 2.0f);
	th_save(th_p("hx.npy"), NPY_U2, 2, HN, HN, x);
	th_save(th_p("hw.npy"), NPY_U2, 2, HN, HN, w);
	th_save(th_p("hb.npy"), NPY_U2, 1, HN, 0, bias);
	th_save(th_p("hdy.npy"), NPY_U2, 2, HN, HN, dy);

	const char *modes[2] = {"high_precision", "dequantized"};
	for (int i = 0; i < 2; i++) {
		const char *dir = th_p(modes[i]);
		th_result r;
		th_run(&r, "linear", th_p("hx.npy"), th_p("hw.npy"), "--bias", th_p("hb.npy"), "--dy", th_p("hdy.npy"),
		       "--out", dir, "--local", "--backend", "cpu", "--override", modes[i], NULL);
		th_expect_ok(&r);
		th_check_file(outp(dir, "y.npy"), NPY_U2, 2, HN, HN, y);
		th_check_file(outp(dir, "dx.npy"), NPY_U2, 2, HN, HN, dx);
		th_check_file(outp(dir, "dw.npy"), NPY_U2, 2, HN, HN, dw);
		th_check_file(outp(dir, "db.npy"), NPY_U2, 1, HN, 0, db);
	}
	/* default options, forward only: the same Y, and no gradient files */
	th_result r;
	th_run(&r, "linear", th_p("hx.npy"), th_p("hw.npy"), "--bias", th_p("hb.npy"), "--out", th_p("hfwd"), "--local",
	       NULL);
	th_expect_ok(&r);
	th_check_file(outp(th_p("hfwd"), "y.npy"), NPY_U2, 2, HN, HN, y);
	assert_false(th_exists(outp(th_p("hfwd"), "dx.npy")));
	assert_false(th_exists(outp(th_p("hfwd"), "dw.npy")));
	assert_false(th_exists(outp(th_p("hfwd"), "db.npy")));
	/* the gradient is never 4/6 and the quantized backward's db is still the plain column sum */
	th_run(&r, "linear", th_p("hx.npy"), th_p("hw.npy"), "--bias", th_p("hb.npy"), "--dy", th_p("hdy.npy"), "--out",
	       th_p("hq"), "--local", NULL);
	th_expect_ok(&r);
	th_check_file(outp(th_p("hq"), "db.npy"), NPY_U2, 1, HN, 0, db);
	free(x);
	free(w);
	free(dy);
	free(y);
	free(dx);
	free(dw);
}

/* ---- against the API ---------------------------------------------------------------------------- */

typedef struct lcase {
	const char *args[8];
	fos_linear_opts o;
	int bias, dy;
	int64_t m, n, k;
} lcase;

typedef struct lres {
	uint16_t *y, *dx, *dw, *db;
} lres;

/* The layer through the API, written independently of the CLI (weight kept with both its master and
 * its columnwise copy, whatever the override). */
static void api_linear(const lcase *c, const uint16_t *x, const uint16_t *w, const uint16_t *bias, const uint16_t *dy,
		       lres *out)
{
	fos_backend *be = ref_cpu(2);
	assert_non_null(be);
	fos_err e = {0, ""};
	size_t M = (size_t)c->m, N = (size_t)c->n, K = (size_t)c->k;
	void *dw_in = ref_dev_put(be, w, N * K * 2), *dx_in = ref_dev_put(be, x, M * K * 2);
	void *db_in = bias ? ref_dev_put(be, bias, N * 2) : NULL, *ddy = dy ? ref_dev_put(be, dy, M * N * 2) : NULL;
	void *dyo = ref_dev_put(be, NULL, M * N * 2), *ddx = ref_dev_put(be, NULL, M * K * 2),
	     *ddw = ref_dev_put(be, NULL, N * K * 2), *ddb = ref_dev_put(be, NULL, N * 2);
	assert_true(dw_in && dx_in && dyo && ddx && ddw && ddb && (!bias || db_in) && (!dy || ddy));
	fos_qweight qw;
	if (fos_qweight_make(be, dw_in, c->n, c->k, &c->o, 1, 1, &qw, &e))
		fail_msg("qweight_make: %s", e.msg);
	fos_saved sv;
	memset(&sv, 0, sizeof sv);
	if (fos_linear_forward(be, dx_in, c->m, &qw, &c->o, db_in, dyo, dy ? &sv : NULL, &e))
		fail_msg("forward: %s", e.msg);
	assert_int_equal(ref_dev_get(be, out->y, dyo, M * N * 2), 0);
	if (dy) {
		if (fos_linear_backward(be, &sv, &qw, ddy, ddx, ddw, bias ? ddb : NULL, &e))
			fail_msg("backward: %s", e.msg);
		assert_int_equal(ref_dev_get(be, out->dx, ddx, M * K * 2), 0);
		assert_int_equal(ref_dev_get(be, out->dw, ddw, N * K * 2), 0);
		if (bias)
			assert_int_equal(ref_dev_get(be, out->db, ddb, N * 2), 0);
		fos_saved_free(be, &sv);
	}
	fos_qweight_free(be, &qw);
	void *all[8] = {dw_in, dx_in, db_in, ddy, dyo, ddx, ddw, ddb};
	for (int i = 0; i < 8; i++)
		if (all[i])
			be->free(be, all[i]);
	be->destroy(be);
}

/* Runs the case through fos with inputs saved as bf16 (f32 = 0) or as float32 (f32 = 1, values
 * generated in fp32; the API gets them rounded to bf16 by the independent reference rounding). */
static void run_lcase(const lcase *c, int f32, uint64_t seed)
{
	size_t M = (size_t)c->m, N = (size_t)c->n, K = (size_t)c->k;
	float *fx = malloc(M * K * 4), *fw = malloc(N * K * 4), *fb = malloc(N * 4), *fdy = malloc(M * N * 4);
	uint16_t *x = malloc(M * K * 2), *w = malloc(N * K * 2), *b = malloc(N * 2), *dy = malloc(M * N * 2);
	lres want = {malloc(M * N * 2), malloc(M * K * 2), malloc(N * K * 2), malloc(N * 2)};
	assert_true(fx && fw && fb && fdy && x && w && b && dy && want.y && want.dx && want.dw && want.db);
	ref_gen_f32(REF_RANDN, (int64_t)M, (int64_t)K, seed, fx);
	ref_gen_f32(REF_HEAVY, (int64_t)N, (int64_t)K, seed + 1, fw);
	ref_gen_f32(REF_RANDN, 1, (int64_t)N, seed + 2, fb);
	ref_gen_f32(REF_RANDN, (int64_t)M, (int64_t)N, seed + 3, fdy);
	ref_f32_to_bf16_arr(fx, x, (int64_t)(M * K));
	ref_f32_to_bf16_arr(fw, w, (int64_t)(N * K));
	ref_f32_to_bf16_arr(fb, b, (int64_t)N);
	ref_f32_to_bf16_arr(fdy, dy, (int64_t)(M * N));
	int dt = f32 ? NPY_F4 : NPY_U2;
	th_save(th_p("lx.npy"), dt, 2, c->m, c->k, f32 ? (void *)fx : (void *)x);
	th_save(th_p("lw.npy"), dt, 2, c->n, c->k, f32 ? (void *)fw : (void *)w);
	th_save(th_p("lb.npy"), dt, 1, c->n, 0, f32 ? (void *)fb : (void *)b);
	th_save(th_p("ldy.npy"), dt, 2, c->m, c->n, f32 ? (void *)fdy : (void *)dy);
	api_linear(c, x, w, c->bias ? b : NULL, c->dy ? dy : NULL, &want);

	char dir[600];
	snprintf(dir, sizeof dir, "%s", th_p("lout"));
	char rm[700];
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	assert_int_equal(system(rm), 0);
	const char *args[32];
	int n = 0;
	args[n++] = "linear";
	args[n++] = th_p("lx.npy");
	args[n++] = th_p("lw.npy");
	args[n++] = "--out";
	args[n++] = dir;
	args[n++] = "--local";
	args[n++] = "--backend";
	args[n++] = "cpu";
	if (c->bias) {
		args[n++] = "--bias";
		args[n++] = th_p("lb.npy");
	}
	if (c->dy) {
		args[n++] = "--dy";
		args[n++] = th_p("ldy.npy");
	}
	for (int i = 0; i < 8 && c->args[i]; i++)
		args[n++] = c->args[i];
	args[n] = NULL;
	th_result r;
	th_runv(&r, args);
	th_expect_ok(&r);
	th_check_file(outp(dir, "y.npy"), NPY_U2, 2, c->m, c->n, want.y);
	assert_int_equal(th_exists(outp(dir, "dx.npy")), c->dy);
	assert_int_equal(th_exists(outp(dir, "dw.npy")), c->dy);
	assert_int_equal(th_exists(outp(dir, "db.npy")), c->dy && c->bias);
	if (c->dy) {
		th_check_file(outp(dir, "dx.npy"), NPY_U2, 2, c->m, c->k, want.dx);
		th_check_file(outp(dir, "dw.npy"), NPY_U2, 2, c->n, c->k, want.dw);
		if (c->bias)
			th_check_file(outp(dir, "db.npy"), NPY_U2, 1, c->n, 0, want.db);
	}
	free(fx);
	free(fw);
	free(fb);
	free(fdy);
	free(x);
	free(w);
	free(b);
	free(dy);
	free(want.y);
	free(want.dx);
	free(want.dw);
	free(want.db);
}

#define O(ovr, wb, em, bd, rs) {ovr, wb, em, bd, rs, FOS_SCOPE_ALL}

static const lcase lcases[] = {
	{{NULL}, O(FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0), 0, 0, 128, 128, 128},
	{{NULL}, O(FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0), 1, 1, 128, 128, 128},
	{{"--override", "quantized", "--weight-block", "1x16", "--bound", "448", "--err", "mse"},
	 O(FOS_OVR_QUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0), 0, 1, 128, 128, 128},
	{{"--override", "high_precision"}, O(FOS_OVR_HIGH_PRECISION, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0), 1, 1, 128,
	 128, 128},
	{{"--override", "dequantized", "--weight-block", "1x16"}, O(FOS_OVR_DEQUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0),
	 1, 1, 128, 128, 128},
	{{"--row-scaled", "--err", "mse"}, O(FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MSE, 256, 1), 1, 1, 128, 128, 128},
	{{"--row-scaled", "--override", "dequantized", "--bound", "448"},
	 O(FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MAE, 448, 1), 0, 1, 128, 128, 128},
	{{"--row-scaled"}, O(FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 1), 1, 0, 128, 128, 128},
	{{"--override=default"}, O(FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0), 1, 1, 256, 128, 384},
};

static void test_options_match_api(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof lcases / sizeof lcases[0]; i++)
		run_lcase(&lcases[i], 0, 100 + 10 * i);
}

/* float32 inputs are rounded to bf16 (nearest even) before anything else. */
static void test_f32_inputs_round_to_bf16(void **state)
{
	(void)state;
	run_lcase(&lcases[1], 1, 900);
	run_lcase(&lcases[5], 1, 910);
}

/* Mixed: bf16 X with float32 W, bias and dY. */
static void test_mixed_dtypes(void **state)
{
	(void)state;
	const lcase *c = &lcases[3];
	run_lcase(c, 1, 950);
	/* replace X with its bf16 rounding as '<u2': the same outputs */
	npy_array a;
	th_load(th_p("lx.npy"), &a, NPY_F4, 2, c->m, c->k);
	uint16_t *xb = malloc(a.count * 2);
	assert_non_null(xb);
	ref_f32_to_bf16_arr((const float *)a.data, xb, (int64_t)a.count);
	th_save(th_p("lxb.npy"), NPY_U2, 2, c->m, c->k, xb);
	npy_free(&a);
	th_result r;
	th_run(&r, "linear", th_p("lxb.npy"), th_p("lw.npy"), "--bias", th_p("lb.npy"), "--dy", th_p("ldy.npy"), "--out",
	       th_p("lmix"), "--local", "--backend", "cpu", "--override", "high_precision", NULL);
	th_expect_ok(&r);
	const char *names[4] = {"y.npy", "dx.npy", "dw.npy", "db.npy"};
	for (int i = 0; i < 4; i++) {
		npy_array p, q;
		th_load(outp(th_p("lout"), names[i]), &p, NPY_U2, i == 3 ? 1 : 2, i == 3 ? c->n : (i == 2 ? c->n : c->m),
			i == 0 ? c->n : c->k);
		th_load(outp(th_p("lmix"), names[i]), &q, NPY_U2, i == 3 ? 1 : 2, i == 3 ? c->n : (i == 2 ? c->n : c->m),
			i == 0 ? c->n : c->k);
		assert_memory_equal(p.data, q.data, p.nbytes);
		npy_free(&p);
		npy_free(&q);
	}
	free(xb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_layer),
		cmocka_unit_test(test_options_match_api),
		cmocka_unit_test(test_f32_inputs_round_to_bf16),
		cmocka_unit_test(test_mixed_dtypes),
	};
	return cmocka_run_group_tests_name("cli_linear", tests, th_setup, th_teardown);
}
