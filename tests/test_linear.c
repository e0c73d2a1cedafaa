/* test_linear.c: the linear layer (linear.c on the CPU backend), NUMERICS.md sections 7 and 8:
 * forward and backward under every override (default resolved, quantized, high_precision,
 * dequantized), 16x16 and 1x16 weight blocks, per-tensor and row-scaled X, MAE / MSE, bound 256 /
 * 448, with and without bias. Each output is checked
 *  - bit for bit against the backend's own bf16 GEMM applied to the operands NUMERICS.md defines
 *    (built with the independent reference quantizer): the forward NVFP4 GEMM and its epilogue,
 *    the quantized backward GEMMs, and high_precision / dequantized (section 8's bitwise rule);
 *  - against the FP64 reference of the same math (support_ref.c): SQNR > 14 dB, and > 30 dB as a
 *    tighter sanity bound (only FP32 accumulation and bf16 output rounding differ);
 *  - grad bias = sum over M of dY;
 * plus determinism over thread counts and every bad-input rejection. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_ref.h"

static fos_backend *g_be;

static int setup(void **state)
{
	(void)state;
	g_be = ref_cpu(2);
	return g_be ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (g_be)
		g_be->destroy(g_be);
	return 0;
}

typedef struct lcase {
	const char *name;
	int override, weight_block, err_mode, bound, row_scaled, bias;
	int keep_master, want_col; /* how the weight is made */
} lcase;

static const lcase k_cases[] = {
	{"default (quantized) 16x16 mae 256 bias", FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, 1, 0, 1},
	{"default (high_precision) row-scaled 16x16", FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 1, 0, 1, 0},
	{"quantized 16x16 mse 448", FOS_OVR_QUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0, 0, 1, 0},
	{"quantized 1x16 mae 256 bias", FOS_OVR_QUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0, 1, 0, 1},
	{"quantized 1x16 mse 448 (col made lazily)", FOS_OVR_QUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0, 0, 1, 0},
	{"high_precision 16x16 bias", FOS_OVR_HIGH_PRECISION, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, 1, 1, 0},
	{"high_precision 1x16 row-scaled mse 448", FOS_OVR_HIGH_PRECISION, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 1, 0, 1, 0},
	{"dequantized 16x16", FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, 0, 0, 0},
	{"dequantized 1x16 bias", FOS_OVR_DEQUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0, 1, 0, 0},
	{"dequantized 16x16 row-scaled bias", FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 1, 1, 0, 0},
	{"dequantized 1x16 row-scaled", FOS_OVR_DEQUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1, 0, 0, 0},
};
#define NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

static fos_linear_opts opts_of(const lcase *c)
{
	fos_linear_opts o = fos_linear_opts_default();
	o.override = c->override;
	o.weight_block = c->weight_block;
	o.err_mode = c->err_mode;
	o.bound = c->bound;
	o.row_scaled = c->row_scaled;
	return o;
}

static int resolved(const lcase *c)
{
	if (c->override != FOS_OVR_DEFAULT)
		return c->override;
	return c->row_scaled ? FOS_OVR_HIGH_PRECISION : FOS_OVR_QUANTIZED;
}

typedef struct lio {
	int64_t m, n, k;
	uint16_t *x, *w, *dy, *bias;    /* inputs */
	uint16_t *y, *dx, *dw, *db;     /* backend outputs */
} lio;

static void lio_init(lio *t, int64_t m, int64_t n, int64_t k, uint64_t seed)
{
	t->m = m;
	t->n = n;
	t->k = k;
	t->x = malloc(2 * (size_t)(m * k));
	t->w = malloc(2 * (size_t)(n * k));
	t->dy = malloc(2 * (size_t)(m * n));
	t->bias = malloc(2 * (size_t)n);
	t->y = malloc(2 * (size_t)(m * n));
	t->dx = malloc(2 * (size_t)(m * k));
	t->dw = malloc(2 * (size_t)(n * k));
	t->db = malloc(2 * (size_t)n);
	assert_true(t->x && t->w && t->dy && t->bias && t->y && t->dx && t->dw && t->db);
	ref_rng r;
	ref_rng_seed(&r, seed);
	ref_randn_bf16(t->x, m * k, 1.0, &r);
	ref_randn_bf16(t->w, n * k, 0.05, &r);
	ref_randn_bf16(t->dy, m * n, 0.1, &r);
	ref_randn_bf16(t->bias, n, 0.5, &r);
	/* rows of X with very different magnitudes, so row scaling matters */
	for (int64_t i = 0; i < m; i += 7)
		for (int64_t j = 0; j < k; j++)
			t->x[i * k + j] = ref_f32_bf16(ref_bf16_f32(t->x[i * k + j]) * 40.0f);
}

static void lio_free(lio *t)
{
	free(t->x);
	free(t->w);
	free(t->dy);
	free(t->bias);
	free(t->y);
	free(t->dx);
	free(t->dw);
	free(t->db);
}

/* Forward + backward through the backend; returns rc (err filled). */
static int run_linear(fos_backend *be, const lcase *c, lio *t, fos_err *err)
{
	fos_linear_opts o = opts_of(c);
	int64_t m = t->m, n = t->n, k = t->k;
	void *dx_in = ref_dev_put(be, t->x, 2 * (size_t)(m * k)), *dw_in = ref_dev_put(be, t->w, 2 * (size_t)(n * k));
	void *ddy = ref_dev_put(be, t->dy, 2 * (size_t)(m * n));
	void *dbias = c->bias ? ref_dev_put(be, t->bias, 2 * (size_t)n) : NULL;
	void *dy_out = ref_dev_put(be, NULL, 2 * (size_t)(m * n)), *ddx = ref_dev_put(be, NULL, 2 * (size_t)(m * k));
	void *ddw = ref_dev_put(be, NULL, 2 * (size_t)(n * k)), *ddb = ref_dev_put(be, NULL, 2 * (size_t)n);
	assert_true(dx_in && dw_in && ddy && (dbias || !c->bias) && dy_out && ddx && ddw && ddb);
	fos_qweight qw;
	fos_saved sv;
	memset(&qw, 0, sizeof qw);
	memset(&sv, 0, sizeof sv);
	int rc = fos_qweight_make(be, dw_in, n, k, &o, c->keep_master, c->want_col, &qw, err);
	if (rc == FOS_OK)
		rc = fos_linear_forward(be, dx_in, m, &qw, &o, dbias, dy_out, &sv, err);
	if (rc == FOS_OK) {
		assert_int_equal(sv.override, resolved(c));
		rc = fos_linear_backward(be, &sv, &qw, ddy, ddx, ddw, c->bias ? ddb : NULL, err);
	}
	if (rc == FOS_OK) {
		assert_int_equal(ref_dev_get(be, t->y, dy_out, 2 * (size_t)(m * n)), FOS_OK);
		assert_int_equal(ref_dev_get(be, t->dx, ddx, 2 * (size_t)(m * k)), FOS_OK);
		assert_int_equal(ref_dev_get(be, t->dw, ddw, 2 * (size_t)(n * k)), FOS_OK);
		if (c->bias)
			assert_int_equal(ref_dev_get(be, t->db, ddb, 2 * (size_t)n), FOS_OK);
		fos_saved_free(be, &sv);
	}
	fos_qweight_free(be, &qw);
	void *ptrs[8] = {dx_in, dw_in, ddy, dbias, dy_out, ddx, ddw, ddb};
	for (int i = 0; i < 8; i++)
		if (ptrs[i])
			be->free(be, ptrs[i]);
	return rc;
}

/* ---- operands for the bitwise checks, from the reference quantizer ---- */

/* bf16 value*scale of a reference quantize; amax_out 1 or rows floats. */
static void q_decoded(const uint16_t *x, int64_t rows, int64_t cols, const fos_qcfg *c, const float *amax_in,
		      uint16_t *dec, float *amax_out, uint8_t *codes, uint8_t *scales)
{
	float *xf = malloc(4 * (size_t)(rows * cols)), *df = malloc(4 * (size_t)(rows * cols));
	assert_true(xf && df);
	ref_bf16_to_f32_arr(x, xf, rows * cols);
	assert_int_equal(ref_quantize(xf, rows, cols, c, amax_in, codes, scales, amax_out, NULL), 0);
	ref_decode(codes, scales, rows, cols, df);
	ref_f32_to_bf16_arr(df, dec, rows * cols);
	free(xf);
	free(df);
}

static void be_gemm(const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k, const float *aa, float ad,
		    const float *ba, float bd, const float *rs, const uint16_t *bias, uint16_t *y)
{
	fos_err err = {0};
	int rc = ref_be_gemm(g_be, a, b, m, n, k, aa, ad, ba, bd, rs, bias, y, &err);
	if (rc != FOS_OK)
		print_message("gemm: %s\n", err.msg);
	assert_int_equal(rc, FOS_OK);
}

static int same_bits(const char *what, const uint16_t *got, const uint16_t *want, int64_t n)
{
	int64_t i = ref_cmp_bf16(got, want, n);
	if (i >= 0)
		print_message("  %s differs at %ld: 0x%04x vs 0x%04x\n", what, (long)i, got[i], want[i]);
	return i < 0;
}

/* Expected outputs bit for bit: the backend's gemm on the operands NUMERICS.md defines. */
static void expect_bitwise(const lcase *c, const lio *t)
{
	int64_t m = t->m, n = t->n, k = t->k;
	int ovr = resolved(c);
	float dinv = 1.0f / ref_d(c->bound), g2688 = 1.0f / 2688.0f;
	fos_qcfg cx = fos_qcfg_default(), cw = fos_qcfg_default(), cg = fos_qcfg_default();
	cx.err_mode = cw.err_mode = c->err_mode;
	cx.bound = cw.bound = c->bound;
	cx.row_scaled = c->row_scaled;
	cw.block = c->weight_block;
	cg.recipe = FOS_RECIPE_NVFP4;
	cg.bound = 448;
	int64_t big = m * k > n * k ? m * k : n * k;
	if (m * n > big)
		big = m * n;
	uint16_t *xdec = malloc(2 * (size_t)(m * k)), *wdec = malloc(2 * (size_t)(n * k));
	uint16_t *a = malloc(2 * (size_t)big), *b = malloc(2 * (size_t)big), *e = malloc(2 * (size_t)big);
	uint8_t *xc = malloc((size_t)(m * k) / 2), *xs = malloc((size_t)(m * k) / 16);
	uint8_t *wc = malloc((size_t)(n * k) / 2), *wsc = malloc((size_t)(n * k) / 16);
	uint8_t *codes = malloc((size_t)big / 2), *scales = malloc((size_t)big / 16);
	float *xa = malloc(4 * (size_t)m), *tmp = malloc(4 * (size_t)big), wa, dya;
	assert_true(xdec && wdec && a && b && e && xc && xs && wc && wsc && codes && scales && xa && tmp);
	q_decoded(t->x, m, k, &cx, NULL, xdec, xa, xc, xs);
	q_decoded(t->w, n, k, &cw, NULL, wdec, &wa, wc, wsc);
	/* forward: the NVFP4 GEMM on the decoded operands with the section 7 epilogue */
	if (c->row_scaled)
		be_gemm(xdec, wdec, m, n, k, NULL, dinv, &wa, dinv, xa, c->bias ? t->bias : NULL, e);
	else
		be_gemm(xdec, wdec, m, n, k, xa, dinv, &wa, dinv, NULL, c->bias ? t->bias : NULL, e);
	int ok = same_bits("y", t->y, e, m * n);
	if (ovr == FOS_OVR_QUANTIZED) {
		/* dX = [std-q(dY) (m, n)] x [w_col = 4/6(W^T, w_amax) (k, n)]^T */
		q_decoded(t->dy, m, n, &cg, NULL, a, &dya, codes, scales);
		ref_transpose_u16(t->w, e, n, k);
		q_decoded(e, k, n, &cw, &wa, b, tmp, codes, scales);
		be_gemm(a, b, m, k, n, &dya, g2688, &wa, dinv, NULL, NULL, e);
		ok &= same_bits("dx", t->dx, e, m * k);
		/* dW = [std-q(dY^T, dy_amax) (n, m)] x [x_col = 4/6(X^T, x_amax, 1x16) (k, m)]^T */
		ref_transpose_u16(t->dy, e, m, n);
		q_decoded(e, n, m, &cg, &dya, a, tmp, codes, scales);
		ref_transpose_u16(t->x, e, m, k);
		fos_qcfg cxc = cx;
		cxc.row_scaled = 0;
		q_decoded(e, k, m, &cxc, xa, b, tmp, codes, scales);
		be_gemm(a, b, n, k, m, &dya, g2688, xa, dinv, NULL, NULL, e);
		ok &= same_bits("dw", t->dw, e, n * k);
	} else {
		/* dX = dY (m, n) x [B (n, k)]^T-as-(k, n); dW = dY^T (n, m) x [A (m, k)] as (k, m) */
		const uint16_t *wsrc = t->w, *xsrc = t->x;
		uint16_t *wdq = NULL, *xdq = NULL;
		if (ovr == FOS_OVR_DEQUANTIZED) {
			wdq = malloc(2 * (size_t)(n * k));
			xdq = malloc(2 * (size_t)(m * k));
			assert_true(wdq && xdq);
			ref_dequantize(wc, wsc, &wa, n, k, c->bound, 0, tmp);
			ref_f32_to_bf16_arr(tmp, wdq, n * k);
			ref_dequantize(xc, xs, xa, m, k, c->bound, c->row_scaled, tmp);
			ref_f32_to_bf16_arr(tmp, xdq, m * k);
			wsrc = wdq;
			xsrc = xdq;
		}
		ref_transpose_u16(wsrc, b, n, k);
		be_gemm(t->dy, b, m, k, n, NULL, 1.0f, NULL, 1.0f, NULL, NULL, e);
		ok &= same_bits("dx", t->dx, e, m * k);
		ref_transpose_u16(t->dy, a, m, n);
		ref_transpose_u16(xsrc, b, m, k);
		be_gemm(a, b, n, k, m, NULL, 1.0f, NULL, 1.0f, NULL, NULL, e);
		ok &= same_bits("dw", t->dw, e, n * k);
		free(wdq);
		free(xdq);
	}
	if (c->bias) {
		fos_err err = {0};
		assert_int_equal(ref_be_colsum(g_be, t->dy, m, n, e, &err), FOS_OK);
		ok &= same_bits("db vs colsum", t->db, e, n);
	}
	if (!ok)
		print_message("%s: not bitwise equal to the gemm on the defined operands\n", c->name);
	assert_true(ok);
	free(xdec);
	free(wdec);
	free(a);
	free(b);
	free(e);
	free(xc);
	free(xs);
	free(wc);
	free(wsc);
	free(codes);
	free(scales);
	free(xa);
	free(tmp);
}

static void expect_f64(const lcase *c, const lio *t)
{
	int64_t m = t->m, n = t->n, k = t->k;
	double *y = malloc(8 * (size_t)(m * n)), *dx = malloc(8 * (size_t)(m * k)), *dw = malloc(8 * (size_t)(n * k));
	double *db = malloc(8 * (size_t)n);
	double *xd = malloc(8 * (size_t)(m * k)), *wd = malloc(8 * (size_t)(n * k)), *yt = malloc(8 * (size_t)(m * n));
	assert_true(y && dx && dw && db && xd && wd && yt);
	fos_linear_opts o = opts_of(c);
	assert_int_equal(ref_linear_f64(t->x, t->w, c->bias ? t->bias : NULL, t->dy, m, n, k, &o, resolved(c), y, dx, dw,
					db),
			 0);
	double sy = ref_sqnr_db_bf16(y, t->y, m * n), sx = ref_sqnr_db_bf16(dx, t->dx, m * k);
	double sw = ref_sqnr_db_bf16(dw, t->dw, n * k);
	/* the unquantized product, for information */
	ref_bf16_to_f64_arr(t->x, xd, m * k);
	ref_bf16_to_f64_arr(t->w, wd, n * k);
	ref_gemm_nt_f64(xd, wd, m, n, k, yt);
	if (c->bias)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				yt[i * n + j] += ref_bf16_f32(t->bias[j]);
	double st = ref_sqnr_db_bf16(yt, t->y, m * n);
	/* unquantized gradients: dX = dY W, dW = dY^T X */
	int64_t big = m * n;
	if (n * k > big)
		big = n * k;
	if (m * k > big)
		big = m * k;
	double *dyd = malloc(8 * (size_t)(m * n)), *tb = malloc(8 * (size_t)big);
	double *gx = malloc(8 * (size_t)(m * k)), *gw = malloc(8 * (size_t)(n * k)), *dyt = malloc(8 * (size_t)(m * n));
	assert_true(dyd && tb && gx && gw && dyt);
	ref_bf16_to_f64_arr(t->dy, dyd, m * n);
	ref_transpose_f64(wd, tb, n, k);
	ref_gemm_nt_f64(dyd, tb, m, k, n, gx);
	ref_transpose_f64(dyd, dyt, m, n);
	ref_transpose_f64(xd, tb, m, k);
	ref_gemm_nt_f64(dyt, tb, n, k, m, gw);
	double tx = ref_sqnr_db_bf16(gx, t->dx, m * k), tw = ref_sqnr_db_bf16(gw, t->dw, n * k);
	print_message("%s: SQNR vs FP64 same math: y %.1f dx %.1f dw %.1f dB; vs unquantized: y %.1f dx %.1f dw %.1f dB\n",
		      c->name, sy, sx, sw, st, tx, tw);
	assert_true(sy > 14.0 && sx > 14.0 && sw > 14.0);
	assert_true(sy > 30.0 && sx > 30.0 && sw > 30.0);
	assert_true(st > 14.0 && tx > 14.0 && tw > 14.0);
	free(dyd);
	free(tb);
	free(gx);
	free(gw);
	free(dyt);
	if (c->bias)
		for (int64_t j = 0; j < n; j++) {
			double got = ref_bf16_f32(t->db[j]), ea = 0;
			for (int64_t i = 0; i < m; i++)
				ea += fabs(ref_bf16_f32(t->dy[i * n + j]));
			assert_true(fabs(got - db[j]) <= ldexp(fabs(db[j]), -8) + (double)m * ldexp(ea, -23));
		}
	free(y);
	free(dx);
	free(dw);
	free(db);
	free(xd);
	free(wd);
	free(yt);
}

static void run_cases(int64_t m, int64_t n, int64_t k, uint64_t seed)
{
	for (int i = 0; i < NCASES; i++) {
		lio t;
		lio_init(&t, m, n, k, seed + (uint64_t)i);
		fos_err err = {0};
		int rc = run_linear(g_be, &k_cases[i], &t, &err);
		if (rc != FOS_OK)
			print_message("%s: rc %d: %s\n", k_cases[i].name, rc, err.msg);
		assert_int_equal(rc, FOS_OK);
		expect_bitwise(&k_cases[i], &t);
		expect_f64(&k_cases[i], &t);
		lio_free(&t);
	}
}

static void test_linear_all_modes_128x256x384(void **state)
{
	(void)state;
	run_cases(128, 256, 384, 100);
}

static void test_linear_all_modes_256x128x128(void **state)
{
	(void)state;
	run_cases(256, 128, 128, 200);
}

/* The dequantized backward equals the bf16 GEMM on the backend's own dequantize(quantize(.)). */
static void test_dequantized_uses_backend_dequantize(void **state)
{
	(void)state;
	const int64_t m = 128, n = 128, k = 256;
	for (int rs = 0; rs < 2; rs++) {
		lcase c = {"dequantized", FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, rs, 0, 0, 0};
		lio t;
		lio_init(&t, m, n, k, 300 + (uint64_t)rs);
		fos_err err = {0};
		assert_int_equal(run_linear(g_be, &c, &t, &err), FOS_OK);
		uint8_t *codes = malloc((size_t)(m * k) / 2), *sc = malloc((size_t)(m * k) / 16);
		uint16_t *dq = malloc(2 * (size_t)(m * k)), *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(m * k));
		uint16_t *e = malloc(2 * (size_t)(m * k));
		float am[128];
		assert_true(codes && sc && dq && a && b && e);
		/* W: 16x16 per tensor */
		fos_qcfg cw = fos_qcfg_default();
		cw.block = FOS_BLOCK_16X16;
		assert_int_equal(ref_be_quantize(g_be, t.w, FOS_BF16, n, k, &cw, NULL, codes, sc, am, NULL, &err), FOS_OK);
		assert_int_equal(ref_be_dequantize(g_be, codes, sc, am, n, k, 256, 0, FOS_BF16, dq, &err), FOS_OK);
		ref_transpose_u16(dq, b, n, k);
		be_gemm(t.dy, b, m, k, n, NULL, 1.0f, NULL, 1.0f, NULL, NULL, e);
		assert_memory_equal(t.dx, e, 2 * (size_t)(m * k));
		/* X: 1x16, per tensor or row-scaled */
		fos_qcfg cx = fos_qcfg_default();
		cx.row_scaled = rs;
		assert_int_equal(ref_be_quantize(g_be, t.x, FOS_BF16, m, k, &cx, NULL, codes, sc, am, NULL, &err), FOS_OK);
		assert_int_equal(ref_be_dequantize(g_be, codes, sc, am, m, k, 256, rs, FOS_BF16, dq, &err), FOS_OK);
		ref_transpose_u16(t.dy, a, m, n);
		ref_transpose_u16(dq, b, m, k);
		be_gemm(a, b, n, k, m, NULL, 1.0f, NULL, 1.0f, NULL, NULL, e);
		assert_memory_equal(t.dw, e, 2 * (size_t)(n * k));
		free(codes);
		free(sc);
		free(dq);
		free(a);
		free(b);
		free(e);
		lio_free(&t);
	}
}

static void test_linear_same_bits_any_thread_count(void **state)
{
	(void)state;
	static const int which[] = {0, 3, 6, 9};
	int threads[3] = {1, 2, 4};
	for (size_t w = 0; w < sizeof which / sizeof which[0]; w++) {
		const lcase *c = &k_cases[which[w]];
		lio t0, t1;
		lio_init(&t0, 128, 256, 384, 400 + w);
		lio_init(&t1, 128, 256, 384, 400 + w);
		fos_err err = {0};
		assert_int_equal(run_linear(g_be, c, &t0, &err), FOS_OK);
		for (int th = 0; th < 3; th++) {
			fos_backend *be = ref_cpu(threads[th]);
			assert_non_null(be);
			assert_int_equal(run_linear(be, c, &t1, &err), FOS_OK);
			assert_memory_equal(t0.y, t1.y, 2 * (size_t)(128 * 256));
			assert_memory_equal(t0.dx, t1.dx, 2 * (size_t)(128 * 384));
			assert_memory_equal(t0.dw, t1.dw, 2 * (size_t)(256 * 384));
			if (c->bias)
				assert_memory_equal(t0.db, t1.db, 2 * 256);
			be->destroy(be);
		}
		lio_free(&t0);
		lio_free(&t1);
	}
}

/* ---- bad inputs ---------------------------------------------------------------------------- */

static void expect_einval(int rc, const fos_err *err, const char *needle)
{
	if (rc != FOS_EINVAL || (needle && !strstr(err->msg, needle)))
		print_message("rc %d, message \"%s\", expected EINVAL naming \"%s\"\n", rc, err->msg, needle ? needle : "");
	assert_int_equal(rc, FOS_EINVAL);
	assert_true(err->msg[0] != 0);
	if (needle)
		assert_non_null(strstr(err->msg, needle));
}

static void test_linear_check(void **state)
{
	(void)state;
	fos_linear_opts o = fos_linear_opts_default();
	/* defaults: 16x16 weights, MAE, bound 256, per tensor, override default */
	assert_int_equal(o.override, FOS_OVR_DEFAULT);
	assert_int_equal(o.weight_block, FOS_BLOCK_16X16);
	assert_int_equal(o.err_mode, FOS_ERR_MAE);
	assert_int_equal(o.bound, 256);
	assert_int_equal(o.row_scaled, 0);
	fos_err err = {0};
	int res = -1;
	assert_int_equal(fos_linear_check(&o, 128, 256, 384, &res, &err), FOS_OK);
	assert_int_equal(res, FOS_OVR_QUANTIZED);
	o.row_scaled = 1;
	assert_int_equal(fos_linear_check(&o, 128, 256, 384, &res, &err), FOS_OK);
	assert_int_equal(res, FOS_OVR_HIGH_PRECISION);
	static const int ovr[3] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
	for (int i = 0; i < 3; i++) {
		o = fos_linear_opts_default();
		o.override = ovr[i];
		assert_int_equal(fos_linear_check(&o, 128, 128, 128, &res, &err), FOS_OK);
		assert_int_equal(res, ovr[i]);
	}
	/* the shape rule: M >= 1, N and K multiples of 16 (test_linear_shapes has the rest) */
	o = fos_linear_opts_default();
	assert_int_equal(fos_linear_check(&o, 100, 256, 320, &res, &err), FOS_OK);
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 0, 256, 384, &res, &err), &err, "M = 0");
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 128, 200, 384, &res, &err), &err, "200");
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 128, 256, 328, &res, &err), &err, "328");
	/* quantized with row-scaled */
	o.override = FOS_OVR_QUANTIZED;
	o.row_scaled = 1;
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 128, 128, 128, &res, &err), &err, NULL);
	/* bound not in {256, 448} */
	o = fos_linear_opts_default();
	o.bound = 300;
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 128, 128, 128, &res, &err), &err, "300");
	/* out-of-range enums */
	o = fos_linear_opts_default();
	o.override = 9;
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 128, 128, 128, &res, &err), &err, NULL);
	o = fos_linear_opts_default();
	o.weight_block = 4;
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_check(&o, 128, 128, 128, &res, &err), &err, NULL);
}

/* The same rejections through the calls that do the work. */
static void test_linear_calls_reject_bad_inputs(void **state)
{
	(void)state;
	fos_err err = {0};
	uint16_t *buf = calloc(256 * 384, 2);
	assert_non_null(buf);
	void *d = ref_dev_put(g_be, buf, 2 * 256 * 384), *o = ref_dev_put(g_be, NULL, 2 * 256 * 384);
	assert_true(d && o);
	fos_linear_opts op = fos_linear_opts_default();
	fos_qweight qw;
	/* a weight with N = 136 or K = 200: rejected at make, or at the forward */
	static const int64_t nk[2][2] = {{136, 256}, {128, 200}};
	static const char *needles[2] = {"136", "200"};
	for (int i = 0; i < 2; i++) {
		memset(&qw, 0, sizeof qw);
		memset(&err, 0, sizeof err);
		int rc = fos_qweight_make(g_be, d, nk[i][0], nk[i][1], &op, 1, 1, &qw, &err);
		if (rc == FOS_OK) {
			rc = fos_linear_forward(g_be, d, 128, &qw, &op, NULL, o, NULL, &err);
			fos_qweight_free(g_be, &qw);
		}
		expect_einval(rc, &err, needles[i]);
	}
	/* M = 0 at the forward; row-scaled X with the quantized override; bound 300 */
	memset(&qw, 0, sizeof qw);
	assert_int_equal(fos_qweight_make(g_be, d, 128, 256, &op, 1, 0, &qw, &err), FOS_OK);
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_forward(g_be, d, 0, &qw, &op, NULL, o, NULL, &err), &err, "M = 0");
	fos_linear_opts bad = op;
	bad.override = FOS_OVR_QUANTIZED;
	bad.row_scaled = 1;
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_forward(g_be, d, 128, &qw, &bad, NULL, o, NULL, &err), &err, NULL);
	/* forward opts whose weight settings differ from the weight's */
	bad = op;
	bad.weight_block = FOS_BLOCK_1X16;
	memset(&err, 0, sizeof err);
	expect_einval(fos_linear_forward(g_be, d, 128, &qw, &bad, NULL, o, NULL, &err), &err, NULL);
	fos_qweight_free(g_be, &qw);
	bad = op;
	bad.bound = 300;
	memset(&qw, 0, sizeof qw);
	memset(&err, 0, sizeof err);
	expect_einval(fos_qweight_make(g_be, d, 128, 256, &bad, 1, 0, &qw, &err), &err, "300");
	g_be->free(g_be, d);
	g_be->free(g_be, o);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_all_modes_128x256x384),
		cmocka_unit_test(test_linear_all_modes_256x128x128),
		cmocka_unit_test(test_dequantized_uses_backend_dequantize),
		cmocka_unit_test(test_linear_same_bits_any_thread_count),
		cmocka_unit_test(test_linear_check),
		cmocka_unit_test(test_linear_calls_reject_bad_inputs),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
