/* test_four_over_six.c: four_over_six per operand (NUMERICS.md section 11) on the CPU backend:
 *  - the plain NVFP4 quantizer in the shapes section 11 adds (16x16 tiles, row-scaled 1x16; bf16
 *    and fp32 inputs, the special kinds) bit for bit against the independent reference written from
 *    NUMERICS.md (support_ref.c), and the per-tensor 1x16 one still equal to it;
 *  - for each scope, W and X quantized as the scope says: each plain operand bit for bit equal to
 *    Quantize(recipe = nvfp4) of it with the same block shape (and each 4/6 one to the 4/6
 *    quantize); the weight's columnwise copy the operand's recipe on W^T;
 *  - for each scope the forward bit for bit against the backend's GEMM on the reference operands
 *    with each operand's own D, and against the FP64 product of the operands so quantized
 *    (SQNR > 40 dB); every backward override against its FP64 reference (SQNR > 14 dB);
 *  - `all` equals the default options' results bit for bit; a weight quantized for one W form
 *    refused by a scope needing the other (naming both scopes); bad scope values and names. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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

static const int k_scopes[] = {FOS_SCOPE_ALL, FOS_SCOPE_WEIGHTS, FOS_SCOPE_ACTIVATIONS, FOS_SCOPE_NONE};

static fos_qcfg plain(int block, int row_scaled)
{
	fos_qcfg c = {FOS_RECIPE_NVFP4, block, FOS_ERR_MAE, 448, row_scaled};
	return c;
}

/* ---- the plain quantizer against the reference ----------------------------------------------- */

static void check_plain_vs_ref(int64_t rows, int64_t cols, int block, int rs, int dtype, int kind)
{
	int64_t n = rows * cols;
	fos_qcfg c = plain(block, rs);
	void *x = malloc((size_t)n * 4);
	float *xf = malloc((size_t)n * 4);
	uint8_t *codes = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16), *rcodes = malloc((size_t)n / 2),
		*rsc = malloc((size_t)n / 16);
	float *am = malloc((size_t)rows * 4), *ram = malloc((size_t)rows * 4);
	uint16_t *dec = malloc((size_t)n * 2);
	float *rdec = malloc((size_t)n * 4);
	assert_true(x && xf && codes && sc && rcodes && rsc && am && ram && dec && rdec);
	uint64_t seed = (uint64_t)(rows * 131 + cols * 7 + block * 3 + rs + dtype * 11 + kind * 1009);
	if (dtype == FOS_F32) {
		ref_gen_f32(kind, rows, cols, seed, x);
		memcpy(xf, x, (size_t)n * 4);
	} else {
		ref_gen_bf16(kind, rows, cols, seed, x);
		ref_bf16_to_f32_arr(x, xf, n);
	}
	fos_err err = {0, ""};
	assert_int_equal(ref_be_quantize(g_be, x, dtype, rows, cols, &c, NULL, codes, sc, am, dec, &err), FOS_OK);
	assert_int_equal(ref_quantize(xf, rows, cols, &c, NULL, rcodes, rsc, ram, NULL), 0);
	int64_t na = rs ? rows : 1, at;
	if ((at = ref_cmp_u8(rsc, sc, n / 16)) >= 0 || (at = ref_cmp_u8(rcodes, codes, n / 2)) >= 0 ||
	    (at = ref_cmp_f32(ram, am, na)) >= 0)
		fail_msg("plain %s%s (%lld, %lld) %s %s: differs from the reference at %lld",
			 block == FOS_BLOCK_16X16 ? "16x16" : "1x16", rs ? " row-scaled" : "", (long long)rows,
			 (long long)cols, dtype == FOS_F32 ? "f32" : "bf16", ref_kind_name(kind), (long long)at);
	/* the decoded operand: value * scale, exact */
	ref_decode(rcodes, rsc, rows, cols, rdec);
	for (int64_t i = 0; i < n; i++)
		if (ref_f32_bf16(rdec[i]) != dec[i])
			fail_msg("plain decode differs at %lld", (long long)i);
	/* 16x16: the one scale byte on each of the tile's 16 rows */
	if (block == FOS_BLOCK_16X16)
		for (int64_t r = 0; r < rows; r++)
			for (int64_t b = 0; b < cols / 16; b++)
				assert_int_equal(sc[r * (cols / 16) + b], sc[(r / 16 * 16) * (cols / 16) + b]);
	free(x);
	free(xf);
	free(codes);
	free(sc);
	free(rcodes);
	free(rsc);
	free(am);
	free(ram);
	free(dec);
	free(rdec);
}

static void test_plain_quantizer_vs_reference(void **state)
{
	(void)state;
	static const int64_t shapes[][2] = {{128, 256}, {64, 1024}, {384, 256}, {16, 16}};
	for (int kind = 0; kind < REF_NKINDS; kind++)
		for (int dt = 0; dt < 2; dt++) {
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
				check_plain_vs_ref(shapes[s][0], shapes[s][1], FOS_BLOCK_16X16, 0, dt, kind);
				check_plain_vs_ref(shapes[s][0], shapes[s][1], FOS_BLOCK_1X16, 1, dt, kind);
				check_plain_vs_ref(shapes[s][0], shapes[s][1], FOS_BLOCK_1X16, 0, dt, kind);
			}
			check_plain_vs_ref(100, 320, FOS_BLOCK_1X16, 1, dt, kind);
			check_plain_vs_ref(1, 64, FOS_BLOCK_1X16, 1, dt, kind);
		}
}

/* A hand-made case of section 11's 16x16 rule: the tile's scale comes from the tile's amax, not a
 * row's. Tile (16, 16) of ones, with one element 6: amax 6, S_enc = 2688 / 6 = 448,
 * sf = e4m3(6 * rn(448 * fp32(1/6))) = e4m3(448.00003) -> 448 (0x7E), so inv = 1 / (448 / 448) = 1:
 * the 6 encodes as code 7 (6), every 1 as code 2 (1.0). Row-scaled 1x16 of the same rows: each
 * row has its own amax; a row of ones has amax 1, S_enc 2688, sf = e4m3(2688 / 6) = 448. */
static void test_plain_by_hand(void **state)
{
	(void)state;
	uint16_t x[256];
	for (int i = 0; i < 256; i++)
		x[i] = 0x3F80; /* 1.0 */
	x[5 * 16 + 3] = 0x40C0; /* 6.0 */
	uint8_t codes[128], sc[16];
	float am[16];
	fos_err err = {0, ""};
	fos_qcfg t = plain(FOS_BLOCK_16X16, 0);
	assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, 16, 16, &t, NULL, codes, sc, am, NULL, &err), FOS_OK);
	assert_true(am[0] == 6.0f);
	for (int r = 0; r < 16; r++)
		assert_int_equal(sc[r], 0x7E);
	for (int r = 0; r < 16; r++)
		for (int j = 0; j < 8; j++)
			assert_int_equal(codes[r * 8 + j], (r == 5 && j == 1) ? 0x72 : 0x22);
	/* row-scaled: row 5 has amax 6 (scale 448, codes as above), the others amax 1 */
	fos_qcfg rs = plain(FOS_BLOCK_1X16, 1);
	assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, 16, 16, &rs, NULL, codes, sc, am, NULL, &err), FOS_OK);
	for (int r = 0; r < 16; r++) {
		assert_true(am[r] == (r == 5 ? 6.0f : 1.0f));
		assert_int_equal(sc[r], 0x7E);
	}
	/* per tensor 1x16 (the gradient's): amax 6, so rows without the 6 get sf = e4m3(1 * 448 / 6) =
	 * e4m3(74.67) = 72 (0x69: 2^6 * 1.125), inv = 1 / (72 / 448) = 6.222..., 1 -> 6.22 -> code 7 */
	fos_qcfg pt = plain(FOS_BLOCK_1X16, 0);
	assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, 16, 16, &pt, NULL, codes, sc, am, NULL, &err), FOS_OK);
	assert_int_equal(sc[0], 0x69);
	assert_int_equal(sc[5], 0x7E);
	assert_int_equal(codes[0], 0x77);
}

/* ---- the layer under each scope --------------------------------------------------------------- */

typedef struct scase {
	int override, weight_block, row_scaled, bound;
} scase;

static const scase k_cases[] = {
	{FOS_OVR_QUANTIZED, FOS_BLOCK_16X16, 0, 256},
	{FOS_OVR_QUANTIZED, FOS_BLOCK_1X16, 0, 448},
	{FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, 1, 256},
	{FOS_OVR_DEQUANTIZED, FOS_BLOCK_1X16, 0, 256},
	{FOS_OVR_HIGH_PRECISION, FOS_BLOCK_16X16, 1, 448},
};

/* The config an operand gets under scope (W when w, else X), as section 11 defines it. */
static fos_qcfg cfg_for(int scope, int w, const scase *c)
{
	int is46 = w ? (scope == FOS_SCOPE_ALL || scope == FOS_SCOPE_WEIGHTS)
		     : (scope == FOS_SCOPE_ALL || scope == FOS_SCOPE_ACTIVATIONS);
	fos_qcfg q = {FOS_RECIPE_4OVER6, w ? c->weight_block : FOS_BLOCK_1X16, FOS_ERR_MAE, c->bound,
		      w ? 0 : c->row_scaled};
	if (!is46) {
		q.recipe = FOS_RECIPE_NVFP4;
		q.bound = 448;
	}
	return q;
}

static void check_scope(const scase *c, int scope, int64_t m, int64_t n, int64_t k)
{
	char what[160];
	snprintf(what, sizeof what, "scope %s override %d block %s row_scaled %d bound %d (%lld, %lld, %lld)",
		 fos_scope_name(scope), c->override, c->weight_block ? "16x16" : "1x16", c->row_scaled, c->bound,
		 (long long)m, (long long)n, (long long)k);
	uint16_t *x = malloc((size_t)(m * k) * 2), *w = malloc((size_t)(n * k) * 2), *dy = malloc((size_t)(m * n) * 2);
	uint16_t *y = malloc((size_t)(m * n) * 2), *yref = malloc((size_t)(m * n) * 2);
	uint16_t *dx = malloc((size_t)(m * k) * 2), *dw = malloc((size_t)(n * k) * 2);
	double *fy = malloc(sizeof(double) * (size_t)(m * n)), *fdx = malloc(sizeof(double) * (size_t)(m * k)),
	       *fdw = malloc(sizeof(double) * (size_t)(n * k));
	assert_true(x && w && dy && y && yref && dx && dw && fy && fdx && fdw);
	ref_rng rng;
	ref_rng_seed(&rng, (uint64_t)(scope * 7 + c->override * 31 + c->weight_block * 5 + c->row_scaled + m));
	ref_randn_bf16(x, m * k, 1.0, &rng);
	ref_randn_bf16(w, n * k, 0.05, &rng);
	ref_randn_bf16(dy, m * n, 0.1, &rng);
	fos_linear_opts o = fos_linear_opts_default();
	o.override = c->override;
	o.weight_block = c->weight_block;
	o.row_scaled = c->row_scaled;
	o.bound = c->bound;
	o.four_over_six = scope;
	fos_err err = {0, ""};

	/* W, device side */
	void *dwt = ref_dev_put(g_be, w, (size_t)(n * k) * 2), *dxt = ref_dev_put(g_be, x, (size_t)(m * k) * 2);
	void *ddy = ref_dev_put(g_be, dy, (size_t)(m * n) * 2), *dy_out = ref_dev_put(g_be, NULL, (size_t)(m * n) * 2);
	void *ddx = ref_dev_put(g_be, NULL, (size_t)(m * k) * 2), *ddw = ref_dev_put(g_be, NULL, (size_t)(n * k) * 2);
	assert_true(dwt && dxt && ddy && dy_out && ddx && ddw);
	fos_qweight qw;
	assert_int_equal(fos_qweight_make_uses(g_be, dwt, n, k, &o, FOS_USES_ALL, &qw, &err), FOS_OK);

	/* each operand: plain ones equal Quantize(nvfp4) with the same block shape, 4/6 ones the 4/6 quantize */
	fos_qcfg cw = cfg_for(scope, 1, c), cx = cfg_for(scope, 0, c);
	uint8_t *codes = malloc((size_t)(n * k) / 2 + (size_t)(m * k) / 2), *sc = malloc((size_t)(n * k + m * k) / 16);
	uint8_t *qc = malloc((size_t)(n * k) / 2 + (size_t)(m * k) / 2), *qs = malloc((size_t)(n * k + m * k) / 16);
	float *am = malloc(sizeof(float) * (size_t)(m + 1)), *qam = malloc(sizeof(float) * (size_t)(m + 1));
	assert_true(codes && sc && qc && qs && am && qam);
	assert_int_equal(ref_be_quantize(g_be, w, FOS_BF16, n, k, &cw, NULL, codes, sc, am, NULL, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, qc, qw.q.codes, (size_t)(n * k) / 2), 0);
	assert_int_equal(ref_dev_get(g_be, qs, qw.q.scales, (size_t)(n * k) / 16), 0);
	assert_int_equal(ref_dev_get(g_be, qam, qw.q.amax, 4), 0);
	if (memcmp(codes, qc, (size_t)(n * k) / 2) || memcmp(sc, qs, (size_t)(n * k) / 16) || am[0] != qam[0])
		fail_msg("%s: the weight is not Quantize(%s) of W", what, cw.recipe ? "nvfp4" : "4over6");
	assert_int_equal(qw.q.bound, cw.bound);
	/* its columnwise copy: the same recipe on W^T, with W's amax */
	uint16_t *wt = malloc((size_t)(n * k) * 2);
	assert_non_null(wt);
	ref_transpose_u16(w, wt, n, k);
	assert_int_equal(ref_be_quantize(g_be, wt, FOS_BF16, k, n, &cw, qam, codes, sc, am, NULL, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, qc, qw.qcol.codes, (size_t)(n * k) / 2), 0);
	assert_int_equal(ref_dev_get(g_be, qs, qw.qcol.scales, (size_t)(n * k) / 16), 0);
	if (memcmp(codes, qc, (size_t)(n * k) / 2) || memcmp(sc, qs, (size_t)(n * k) / 16))
		fail_msg("%s: the columnwise W is not the operand's recipe on W^T", what);

	/* forward, saving the context */
	fos_saved sv;
	assert_int_equal(fos_linear_forward(g_be, dxt, m, &qw, &o, NULL, dy_out, &sv, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, y, dy_out, (size_t)(m * n) * 2), 0);
	assert_int_equal(sv.four_over_six, scope);
	if (sv.xq.codes) { /* dequantized: the saved X is the operand as quantized */
		int64_t na = c->row_scaled ? m : 1;
		assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, m, k, &cx, NULL, codes, sc, am, NULL, &err), FOS_OK);
		assert_int_equal(ref_dev_get(g_be, qc, sv.xq.codes, (size_t)(m * k) / 2), 0);
		assert_int_equal(ref_dev_get(g_be, qs, sv.xq.scales, (size_t)(m * k) / 16), 0);
		assert_int_equal(ref_dev_get(g_be, qam, sv.xq.amax, sizeof(float) * (size_t)na), 0);
		if (memcmp(codes, qc, (size_t)(m * k) / 2) || memcmp(sc, qs, (size_t)(m * k) / 16) ||
		    memcmp(am, qam, sizeof(float) * (size_t)na))
			fail_msg("%s: the saved X is not Quantize(%s) of X", what, cx.recipe ? "nvfp4" : "4over6");
		assert_int_equal(sv.xq.bound, cx.bound);
	}
	/* bit for bit: the backend's GEMM on the reference operands, each scale with its own D */
	{
		float *xf = malloc(sizeof(float) * (size_t)(m * k)), *wf = malloc(sizeof(float) * (size_t)(n * k));
		uint16_t *xb = malloc((size_t)(m * k) * 2), *wb = malloc((size_t)(n * k) * 2);
		float xa[1024], wa;
		assert_true(xf && wf && xb && wb && m <= 1024);
		ref_bf16_to_f32_arr(x, xf, m * k);
		ref_bf16_to_f32_arr(w, wf, n * k);
		assert_int_equal(ref_quantize(xf, m, k, &cx, NULL, codes, sc, xa, NULL), 0);
		ref_decode(codes, sc, m, k, xf);
		ref_f32_to_bf16_arr(xf, xb, m * k);
		assert_int_equal(ref_quantize(wf, n, k, &cw, NULL, codes, sc, &wa, NULL), 0);
		ref_decode(codes, sc, n, k, wf);
		ref_f32_to_bf16_arr(wf, wb, n * k);
		float dx_inv = 1.0f / ref_d(cx.bound), dw_inv = 1.0f / ref_d(cw.bound);
		assert_int_equal(ref_be_gemm(g_be, xb, wb, m, n, k, c->row_scaled ? NULL : xa, dx_inv, &wa, dw_inv,
					     c->row_scaled ? xa : NULL, NULL, yref, &err),
				 FOS_OK);
		int64_t at = ref_cmp_bf16(yref, y, m * n);
		if (at >= 0)
			fail_msg("%s: Y differs from the GEMM of the quantized operands at %lld", what, (long long)at);
		free(xf);
		free(wf);
		free(xb);
		free(wb);
	}
	/* against the FP64 product of the operands so quantized, and the backward against its reference */
	int ovr;
	assert_int_equal(fos_linear_check(&o, m, n, k, &ovr, &err), FOS_OK);
	/* (the FP64 reference's backward needs M a multiple of 16; the shape rule is test_linear_shapes') */
	int ref_bwd = m % 16 == 0;
	assert_int_equal(ref_linear_f64(x, w, NULL, ref_bwd ? dy : NULL, m, n, k, &o, ovr, fy, fdx, fdw, NULL), 0);
	double s = ref_sqnr_db_bf16(fy, y, m * n);
	if (!(s > 40.0))
		fail_msg("%s: forward SQNR %.1f dB against the FP64 product", what, s);
	assert_int_equal(fos_linear_backward(g_be, &sv, &qw, ddy, ddx, ddw, NULL, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, dx, ddx, (size_t)(m * k) * 2), 0);
	assert_int_equal(ref_dev_get(g_be, dw, ddw, (size_t)(n * k) * 2), 0);
	double sx = ref_bwd ? ref_sqnr_db_bf16(fdx, dx, m * k) : 0, sw = ref_bwd ? ref_sqnr_db_bf16(fdw, dw, n * k) : 0;
	double need = ovr == FOS_OVR_QUANTIZED ? 14.0 : 30.0;
	if (ref_bwd && (!(sx > need) || !(sw > need)))
		fail_msg("%s: backward SQNR dX %.1f dB, dW %.1f dB (need > %.0f)", what, sx, sw, need);

	fos_saved_free(g_be, &sv);
	fos_qweight_free(g_be, &qw);
	void *bufs[] = {dwt, dxt, ddy, dy_out, ddx, ddw};
	for (int i = 0; i < 6; i++)
		g_be->free(g_be, bufs[i]);
	free(x);
	free(w);
	free(wt);
	free(dy);
	free(y);
	free(yref);
	free(dx);
	free(dw);
	free(fy);
	free(fdx);
	free(fdw);
	free(codes);
	free(sc);
	free(qc);
	free(qs);
	free(am);
	free(qam);
}

static void test_scopes_layer(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
		for (int s = 0; s < 4; s++) {
			check_scope(&k_cases[i], k_scopes[s], 64, 48, 128);
			check_scope(&k_cases[i], k_scopes[s], 17, 32, 64); /* M not a multiple of 16 */
		}
}

/* `all` is today's recipe: the same bits as options that never name a scope. */
static void test_all_is_default(void **state)
{
	(void)state;
	int64_t m = 40, n = 32, k = 96;
	uint16_t *x = malloc((size_t)(m * k) * 2), *w = malloc((size_t)(n * k) * 2);
	uint16_t *y0 = malloc((size_t)(m * n) * 2), *y1 = malloc((size_t)(m * n) * 2), *y2 = malloc((size_t)(m * n) * 2);
	assert_true(x && w && y0 && y1 && y2);
	ref_rng rng;
	ref_rng_seed(&rng, 46);
	ref_randn_bf16(x, m * k, 1.0, &rng);
	ref_randn_bf16(w, n * k, 0.05, &rng);
	fos_err err = {0, ""};
	void *dxt = ref_dev_put(g_be, x, (size_t)(m * k) * 2), *dwt = ref_dev_put(g_be, w, (size_t)(n * k) * 2);
	void *dy = ref_dev_put(g_be, NULL, (size_t)(m * n) * 2);
	fos_linear_opts o = fos_linear_opts_default(), on = o;
	assert_int_equal(o.four_over_six, FOS_SCOPE_ALL);
	on.four_over_six = FOS_SCOPE_NONE;
	fos_qweight qw, qn;
	assert_int_equal(fos_qweight_make(g_be, dwt, n, k, &o, 0, 0, &qw, &err), FOS_OK);
	assert_int_equal(fos_qweight_make(g_be, dwt, n, k, &on, 0, 0, &qn, &err), FOS_OK);
	assert_int_equal(fos_linear_forward(g_be, dxt, m, &qw, &o, NULL, dy, NULL, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, y0, dy, (size_t)(m * n) * 2), 0);
	/* the reference of today's recipe (4/6 on both, bound 256) */
	double *fy = malloc(sizeof(double) * (size_t)(m * n));
	assert_non_null(fy);
	assert_int_equal(ref_linear_f64(x, w, NULL, NULL, m, n, k, &o, FOS_OVR_QUANTIZED, fy, NULL, NULL, NULL), 0);
	assert_true(ref_sqnr_db_bf16(fy, y0, m * n) > 40.0);
	/* `weights` reads a 4/6 weight too: the same W, X plain, so another Y */
	fos_linear_opts ow = o;
	ow.four_over_six = FOS_SCOPE_WEIGHTS;
	assert_int_equal(fos_linear_forward(g_be, dxt, m, &qw, &ow, NULL, dy, NULL, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, y1, dy, (size_t)(m * n) * 2), 0);
	assert_true(ref_cmp_bf16(y0, y1, m * n) >= 0);
	/* none against a 4/6 weight, all against a plain one: refused, naming both scopes */
	assert_int_equal(fos_linear_forward(g_be, dxt, m, &qw, &on, NULL, dy, NULL, &err), FOS_EINVAL);
	assert_non_null(strstr(err.msg, "'none'"));
	assert_non_null(strstr(err.msg, "'all'"));
	assert_int_equal(fos_linear_forward(g_be, dxt, m, &qn, &o, NULL, dy, NULL, &err), FOS_EINVAL);
	assert_non_null(strstr(err.msg, "four_over_six"));
	/* activations reads the plain weight made for none */
	fos_linear_opts oa = o;
	oa.four_over_six = FOS_SCOPE_ACTIVATIONS;
	assert_int_equal(fos_linear_forward(g_be, dxt, m, &qn, &oa, NULL, dy, NULL, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, y2, dy, (size_t)(m * n) * 2), 0);
	assert_true(ref_cmp_bf16(y0, y2, m * n) >= 0);
	fos_qweight_free(g_be, &qw);
	fos_qweight_free(g_be, &qn);
	g_be->free(g_be, dxt);
	g_be->free(g_be, dwt);
	g_be->free(g_be, dy);
	free(x);
	free(w);
	free(y0);
	free(y1);
	free(y2);
	free(fy);
}

static void test_bad_scopes(void **state)
{
	(void)state;
	fos_err err = {0, ""};
	fos_linear_opts o = fos_linear_opts_default();
	for (int bad = -1; bad <= 4; bad += 5) {
		o.four_over_six = bad;
		assert_int_equal(fos_linear_check(&o, 16, 16, 16, NULL, &err), FOS_EINVAL);
		assert_non_null(strstr(err.msg, "four_over_six"));
	}
	assert_int_equal(fos_scope_parse("all"), FOS_SCOPE_ALL);
	assert_int_equal(fos_scope_parse("weights"), FOS_SCOPE_WEIGHTS);
	assert_int_equal(fos_scope_parse("activations"), FOS_SCOPE_ACTIVATIONS);
	assert_int_equal(fos_scope_parse("none"), FOS_SCOPE_NONE);
	assert_int_equal(fos_scope_parse("both"), -1);
	assert_int_equal(fos_scope_parse("ALL"), -1);
	/* the wire's numbers: 0 is the default, 1..4 the scopes, others refused */
	assert_int_equal(fos_scope_from_wire(FOS_FOUR_OVER_SIX_DEFAULT, FOS_SCOPE_ALL), FOS_SCOPE_ALL);
	assert_int_equal(fos_scope_from_wire(FOS_FOUR_OVER_SIX_NONE, FOS_SCOPE_ALL), FOS_SCOPE_NONE);
	assert_int_equal(fos_scope_from_wire(5, FOS_SCOPE_ALL), -1);
	assert_int_equal(fos_scope_to_wire(FOS_SCOPE_WEIGHTS), FOS_FOUR_OVER_SIX_WEIGHTS);
	/* plain NVFP4 keeps bound 448 only, and row scaling 1x16 only */
	fos_qcfg c = plain(FOS_BLOCK_16X16, 0);
	c.bound = 256;
	assert_int_equal(fos_qcfg_check(&c, 16, 16, &err), FOS_EINVAL);
	assert_non_null(strstr(err.msg, "448"));
	c = plain(FOS_BLOCK_16X16, 1);
	assert_int_equal(fos_qcfg_check(&c, 16, 16, &err), FOS_EINVAL);
	c = plain(FOS_BLOCK_16X16, 0);
	assert_int_equal(fos_qcfg_check(&c, 24, 16, &err), FOS_EINVAL);
	assert_int_equal(fos_qcfg_check(&c, 32, 16, &err), FOS_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_quantizer_vs_reference),
		cmocka_unit_test(test_plain_by_hand),
		cmocka_unit_test(test_scopes_layer),
		cmocka_unit_test(test_all_is_default),
		cmocka_unit_test(test_bad_scopes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
