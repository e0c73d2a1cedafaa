/* test_linear_shapes.c: the shape rule of NUMERICS.md section 8 on the CPU backend: M any value
 * >= 1, N and K any multiple of 16, the outputs (Y, dX, dW, db) bit for bit the slices of the same
 * layer run by the test itself on inputs zero-padded to multiples of 128 (the 128-multiple path):
 *  - in process (kernels/linear.c): every M in {1, 2, 15, 17, 100, 129, 1000} and every N and K in
 *    {16, 48, 144, 272, 1040} (support_shapes.c's shape list), each under every option of the list
 *    (overrides default / quantized / high_precision / dequantized, 16x16 / 1x16 weights,
 *    row-scaled, bias, MAE / MSE, bound 256 / 448), also with inf and NaN in X, W or dY, and the
 *    dequantized backward under an infinite amax (the padding's zero blocks dequantize to NaN);
 *  - the saved columnwise X of an M = 17 forward against the independent reference quantizer on X^T
 *    with zero columns up to 32, and against the first 32 columns of the padded layer's;
 *  - batch invariance: Y's first rows for M = 1, 17, 100 equal those for M = 1024 (per-tensor amax
 *    held equal by putting X's largest element in row 0; row-scaled needs nothing);
 *  - through a real fosd: Linear, and PutWeight + Forward (with and without a saved context) +
 *    Backward, on a few shapes, against the in-process padded layer;
 *  - the CLI: `fos linear --local`, `fos put-weight` + `forward --context-out` + `backward` and
 *    `fos load --op forward|backward|linear` on shapes with M = 17 or 1;
 *  - bad shapes (K = 8, N = 24, M = 0, K = 0) rejected naming the value, in process and by fosd,
 *    which keeps serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "test_cli_harness.h"
#include "support_assert.h"
#include "support_ref.h"
#include "support_server.h"
#include "support_shapes.h"

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

/* ---- the rule itself ------------------------------------------------------------------------ */

static void expect_bad(int64_t m, int64_t n, int64_t k, const char *value, const char *rule)
{
	fos_linear_opts o = fos_linear_opts_default();
	fos_err e = {0, ""};
	int res;
	assert_int_equal(fos_linear_check(&o, m, n, k, &res, &e), FOS_EINVAL);
	if (!strstr(e.msg, value) || !strstr(e.msg, rule))
		fail_msg("(%lld, %lld, %lld): message '%s' does not name '%s' and '%s'", (long long)m, (long long)n,
			 (long long)k, e.msg, value, rule);
}

static void test_check_rule(void **state)
{
	(void)state;
	fos_linear_opts o = fos_linear_opts_default();
	fos_err e = {0, ""};
	int res;
	const int64_t ms[] = {1, 2, 15, 17, 100, 129, 1000, 128, 8192};
	const int64_t nk[] = {16, 48, 144, 272, 1040, 128, 11008};
	for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
		for (size_t j = 0; j < sizeof nk / sizeof nk[0]; j++)
			if (fos_linear_check(&o, ms[i], nk[j], nk[(j + 3) % 7], &res, &e))
				fail_msg("M=%lld N=%lld K=%lld refused: %s", (long long)ms[i], (long long)nk[j],
					 (long long)nk[(j + 3) % 7], e.msg);
	expect_bad(4, 16, 8, "K = 8", "multiple of 16");
	expect_bad(4, 24, 16, "N = 24", "multiple of 16");
	expect_bad(0, 16, 16, "M = 0", "at least 1");
	expect_bad(4, 16, 0, "K = 0", "multiple of 16");
	expect_bad(-3, 16, 16, "M = -3", "at least 1");
	expect_bad(4, -16, 16, "N = -16", "multiple of 16");
	expect_bad(1, 16, 100, "K = 100", "multiple of 16");
	/* quantize keeps its own rule: columns a multiple of 16, rows any (1x16) */
	fos_qcfg q = fos_qcfg_default();
	assert_int_equal(fos_qcfg_check(&q, 17, 48, &e), FOS_OK);
	q.block = FOS_BLOCK_16X16;
	assert_int_equal(fos_qcfg_check(&q, 17, 48, &e), FOS_EINVAL);
}

/* ---- bit for bit against the padded layer ---------------------------------------------------- */

static void test_padded_every_shape_and_option(void **state)
{
	(void)state;
	char msg[800];
	int runs = 0;
	for (int s = 0; s < shp_nshapes; s++)
		for (int o = 0; o < shp_nopts; o++) {
			const int64_t *d = shp_shapes[s];
			if (shp_check_padded(g_be, d[0], d[1], d[2], &shp_opts[o], 0, 1000 + (uint64_t)(s * 37 + o), msg,
					     sizeof msg))
				fail_msg("%s", msg);
			runs++;
		}
	assert_int_equal(runs, shp_nshapes * shp_nopts);
}

static void test_padded_inf_nan(void **state)
{
	(void)state;
	char msg[800];
	const int64_t shapes[][3] = {{17, 48, 144}, {1, 272, 16}, {100, 16, 272}, {128, 144, 48}};
	for (int sp = 1; sp <= 3; sp++)
		for (int s = 0; s < 4; s++)
			for (int o = 0; o < shp_nopts; o++)
				if (shp_check_padded(g_be, shapes[s][0], shapes[s][1], shapes[s][2], &shp_opts[o], sp,
						     77 + (uint64_t)(s * 100 + o), msg, sizeof msg))
					fail_msg("%s", msg);
}

/* The dequantized backward when a per-tensor amax is +inf: in the padded layer the padding's zero
 * blocks dequantize to 0 * inf = NaN (section 6), so every dW (M not a multiple of 128) or dX (N not
 * a multiple of 128) element is NaN, whatever the real rows give. The data make the real sums +inf
 * (all ones, one +inf), so a layer that treated the padding as zeros would give +inf there. */
static void test_dequantized_infinite_amax(void **state)
{
	(void)state;
	const shp_opt *opt = &shp_opts[7]; /* dequantized 16x16 */
	assert_int_equal(opt->override, FOS_OVR_DEQUANTIZED);
	for (int which = 0; which < 2; which++) {
		shp_layer l, p;
		int64_t m = 17, n = 16, k = 32;
		shp_inputs(&l, m, n, k, 0, 1, 0, 5);
		for (int64_t i = 0; i < m * k; i++)
			l.x[i] = 0x3F80; /* 1.0 */
		for (int64_t i = 0; i < n * k; i++)
			l.w[i] = 0x3F80;
		for (int64_t i = 0; i < m * n; i++)
			l.dy[i] = 0x3F80;
		if (which == 0)
			l.x[0] = 0x7F80; /* X's amax +inf */
		else
			l.w[0] = 0x7F80; /* W's */
		shp_pad(&l, &p);
		fos_linear_opts o = shp_opts_of(opt);
		fos_err e = {0, ""};
		assert_int_equal(shp_run(g_be, &o, 0, 0, &l, &e), FOS_OK);
		assert_int_equal(shp_run(g_be, &o, 0, 0, &p, &e), FOS_OK);
		const uint16_t *g = which == 0 ? l.dw : l.dx;
		int64_t cnt = which == 0 ? n * k : m * k;
		for (int64_t i = 0; i < cnt; i++)
			if (!ref_isnan_bf16(g[i]))
				fail_msg("%s[%lld] = 0x%04x, NaN expected (amax +inf, padded blocks 0 * inf)",
					 which == 0 ? "dw" : "dx", (long long)i, g[i]);
		char msg[400];
		if (shp_cmp_sliced(&l, &p, 1, msg, sizeof msg))
			fail_msg("%s", msg);
		shp_free(&l);
		shp_free(&p);
	}
}

/* The columnwise X an M = 17 forward saves (quantized backward): (K, 32), its second block of each
 * row holding X's row 16 and 15 zero rows. It must be the reference 4/6 quantize of X^T with zero
 * columns up to 32 (the padded definition: zero codes, and the real element's code, scale and pick
 * as if the zeros were not there), and the first 32 columns of the 128-padded layer's. */
static void test_saved_columnwise_m17(void **state)
{
	(void)state;
	const int64_t m = 17, n = 48, k = 144, mp = 32, m128 = 128;
	const int errs[2] = {FOS_ERR_MAE, FOS_ERR_MSE};
	for (int t = 0; t < 2; t++) {
		shp_layer l;
		shp_inputs(&l, m, n, k, 0, 0, 0, 4242 + (uint64_t)t);
		fos_linear_opts o = fos_linear_opts_default();
		o.override = FOS_OVR_QUANTIZED;
		o.err_mode = errs[t];
		o.bound = t ? 448 : 256;
		fos_err e = {0, ""};
		uint16_t *xpad = calloc((size_t)(m128 * k), 2);
		memcpy(xpad, l.x, (size_t)(m * k) * 2);
		uint16_t *wd = ref_dev_put(g_be, l.w, (size_t)(n * k) * 2);
		uint16_t *xd = ref_dev_put(g_be, l.x, (size_t)(m * k) * 2);
		uint16_t *xpd = ref_dev_put(g_be, xpad, (size_t)(m128 * k) * 2);
		uint16_t *yd = ref_dev_put(g_be, NULL, (size_t)(m128 * n) * 2);
		fos_qweight qw;
		fos_saved sv, svp;
		assert_int_equal(fos_qweight_make(g_be, wd, n, k, &o, 1, 0, &qw, &e), FOS_OK);
		assert_int_equal(fos_linear_forward(g_be, xd, m, &qw, &o, NULL, yd, &sv, &e), FOS_OK);
		assert_int_equal(fos_linear_forward(g_be, xpd, m128, &qw, &o, NULL, yd, &svp, &e), FOS_OK);
		assert_int_equal(sv.xcol.rows, k);
		assert_int_equal(sv.xcol.cols, mp);
		assert_int_equal(sv.m, m);
		/* the reference: X^T (K, 32) with zero columns 17..31 */
		float *xt = calloc((size_t)(k * mp), sizeof(float));
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < k; j++)
				xt[j * mp + i] = ref_bf16_f32(l.x[i * k + j]);
		fos_qcfg c = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, o.err_mode, o.bound, 0};
		uint8_t *rc = malloc((size_t)(k * mp / 2)), *rs = malloc((size_t)(k * mp / 16));
		float ra;
		assert_int_equal(ref_quantize(xt, k, mp, &c, NULL, rc, rs, &ra, NULL), 0);
		assert_int_equal(ref_cmp_u8(sv.xcol.codes, rc, k * mp / 2), -1);
		assert_int_equal(ref_cmp_u8(sv.xcol.scales, rs, k * mp / 16), -1);
		assert_memory_equal(sv.xcol.amax, &ra, 4);
		/* the padded columns' codes are 0 (+0): bytes 9..15 of a row hold columns 18..31, and the
		 * high nibble of byte 8 column 17 */
		for (int64_t r = 0; r < k; r++) {
			assert_int_equal(sv.xcol.codes[r * 16 + 8] >> 4, 0);
			for (int b = 9; b < 16; b++)
				assert_int_equal(sv.xcol.codes[r * 16 + b], 0);
		}
		/* and the 128-padded layer's first 32 columns */
		for (int64_t r = 0; r < k; r++) {
			assert_memory_equal(sv.xcol.codes + r * (mp / 2), svp.xcol.codes + r * (m128 / 2), (size_t)(mp / 2));
			assert_memory_equal(sv.xcol.scales + r * (mp / 16), svp.xcol.scales + r * (m128 / 16),
					    (size_t)(mp / 16));
			assert_memory_equal(sv.xcol_decoded + r * mp, svp.xcol_decoded + r * m128, (size_t)mp * 2);
		}
		assert_true(fos_saved_bytes(&sv) < fos_saved_bytes(&svp));
		fos_saved_free(g_be, &sv);
		fos_saved_free(g_be, &svp);
		fos_qweight_free(g_be, &qw);
		void *b[] = {wd, xd, xpd, yd};
		for (int i = 0; i < 4; i++)
			g_be->free(g_be, b[i]);
		free(xpad);
		free(xt);
		free(rc);
		free(rs);
		shp_free(&l);
	}
}

/* ---- batch invariance ----------------------------------------------------------------------- */

static void test_batch_invariance(void **state)
{
	(void)state;
	const int64_t mmax = 1024, n = 272, k = 144, ms[] = {1, 17, 100};
	shp_layer big;
	shp_inputs(&big, mmax, n, k, 1, 0, 0, 99);
	/* X's largest magnitude in row 0, so every M's per-tensor amax is the same */
	for (int64_t i = 0; i < mmax * k; i++) {
		float v = ref_bf16_f32(big.x[i]);
		if (v > 100.0f || v < -100.0f)
			big.x[i] = ref_f32_bf16(v > 0 ? 100.0f : -100.0f);
	}
	big.x[3] = ref_f32_bf16(-250.0f);
	const struct {
		int block, row_scaled, bias;
	} v[] = {{FOS_BLOCK_16X16, 0, 1}, {FOS_BLOCK_1X16, 0, 0}, {FOS_BLOCK_16X16, 1, 0}, {FOS_BLOCK_1X16, 1, 1}};
	for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
		fos_linear_opts o = fos_linear_opts_default();
		o.weight_block = v[t].block;
		o.row_scaled = v[t].row_scaled;
		fos_err e = {0, ""};
		shp_layer full = big;
		full.bias = v[t].bias ? big.bias : NULL;
		full.dy = NULL;
		full.y = full.dx = full.dw = full.db = NULL;
		assert_int_equal(shp_run(g_be, &o, 0, 0, &full, &e), FOS_OK);
		for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
			shp_layer part = full;
			part.m = ms[i];
			part.y = NULL;
			assert_int_equal(shp_run(g_be, &o, 0, 0, &part, &e), FOS_OK);
			int64_t d = ref_cmp_bf16(part.y, full.y, ms[i] * n);
			if (d >= 0)
				fail_msg("%s%s%s: Y[%lld, %lld] for M = %lld is 0x%04x, for M = 1024 0x%04x",
					 v[t].block ? "16x16" : "1x16", v[t].row_scaled ? " row-scaled" : "",
					 v[t].bias ? " bias" : "", (long long)(d / n), (long long)(d % n), (long long)ms[i],
					 part.y[d], full.y[d]);
			free(part.y);
		}
		free(full.y);
	}
	shp_free(&big);
}

/* ---- through a real fosd -------------------------------------------------------------------- */

static tsrv g_srv;

static int setup_server(void **state)
{
	(void)state;
	const char *args[] = {"--workers", "2", NULL};
	return tsrv_start(&g_srv, args);
}

static int teardown_server(void **state)
{
	(void)state;
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

static fos_client *connect_or_fail(void)
{
	fos_client *c = NULL;
	fos_status st;
	ASSERT_OK(fos_connect(g_srv.url, NULL, 30000, &c, &st), st);
	return c;
}

static int block_opt(int b)
{
	return b == FOS_BLOCK_1X16 ? FOS_BLOCKS_1X16 : FOS_BLOCKS_16X16;
}

/* The in-process padded layer for l's inputs on the backend fosd uses (its slices are the
 * reference). */
static void padded_reference(const shp_layer *l, const shp_opt *opt, shp_layer *p)
{
	shp_pad(l, p);
	fos_linear_opts o = shp_opts_of(opt);
	fos_err e = {0, ""};
	if (shp_run(tsrv_ref_backend(), &o, 1, 0, p, &e))
		fail_msg("padded reference: %s", e.msg);
}

/* Got (from fosd) against the padded reference, element by element. */
static void expect_slice(const char *what, const fos_tensor *t, const uint16_t *ref, int64_t r, int64_t c,
			 int64_t ldr, const char *ctx)
{
	if (t->ndim < 1 || t->shape[0] != (t->ndim == 1 ? c : r) || (t->ndim == 2 && t->shape[1] != c))
		fail_msg("%s: %s has the wrong shape", ctx, what);
	const uint16_t *g = t->data;
	for (int64_t i = 0; i < r; i++)
		for (int64_t j = 0; j < c; j++)
			if (g[i * c + j] != ref[i * ldr + j])
				fail_msg("%s: %s[%lld, %lld] = 0x%04x, the padded layer's 0x%04x", ctx, what, (long long)i,
					 (long long)j, g[i * c + j], ref[i * ldr + j]);
}

static void test_fosd_linear(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	const int64_t shapes[][3] = {{1, 48, 144}, {17, 272, 48}, {100, 16, 1040}, {129, 144, 16}};
	const int opts[] = {0, 6, 4, 9};
	for (int s = 0; s < 4; s++) {
		const shp_opt *opt = &shp_opts[opts[s]];
		shp_layer l, p;
		shp_inputs(&l, shapes[s][0], shapes[s][1], shapes[s][2], opt->bias, 1, 0, 500 + (uint64_t)s);
		padded_reference(&l, opt, &p);
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, l.m, l.k, l.x), tw = fos_tensor_2d(FOS_DTYPE_BF16, l.n, l.k, l.w);
		fos_tensor tb = fos_tensor_1d(FOS_DTYPE_BF16, l.n, l.bias), tdy = fos_tensor_2d(FOS_DTYPE_BF16, l.m, l.n, l.dy);
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
		fos_linear_config cfg = {opt->override, block_opt(opt->weight_block), opt->err_mode, opt->bound,
					 opt->row_scaled, 0};
		fos_status st;
		ASSERT_OK(fos_linear(c, &tx, &tw, opt->bias ? &tb : NULL, &tdy, &cfg, &y, &dx, &dw, &db, &st), st);
		char ctx[200];
		snprintf(ctx, sizeof ctx, "Linear M=%lld N=%lld K=%lld %s", (long long)l.m, (long long)l.n, (long long)l.k,
			 opt->name);
		expect_slice("y", &y, p.y, l.m, l.n, p.n, ctx);
		expect_slice("dx", &dx, p.dx, l.m, l.k, p.k, ctx);
		expect_slice("dw", &dw, p.dw, l.n, l.k, p.k, ctx);
		if (opt->bias)
			expect_slice("db", &db, p.db, 1, l.n, p.n, ctx);
		free(y.data);
		free(dx.data);
		free(dw.data);
		free(db.data);
		shp_free(&l);
		shp_free(&p);
	}
	fos_close(c);
}

static void test_fosd_cached_forward_backward(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	const int64_t shapes[][3] = {{1, 272, 48}, {15, 48, 272}, {17, 1040, 16}, {1000, 16, 144}, {2, 144, 1040}};
	const int opts[] = {0, 1, 4, 8, 9};
	for (int s = 0; s < 5; s++) {
		const shp_opt *opt = &shp_opts[opts[s]];
		shp_layer l, p;
		shp_inputs(&l, shapes[s][0], shapes[s][1], shapes[s][2], opt->bias, 1, 0, 900 + (uint64_t)s);
		padded_reference(&l, opt, &p);
		char name[32], ctxs[200];
		snprintf(name, sizeof name, "shapes.%d", s);
		snprintf(ctxs, sizeof ctxs, "cached M=%lld N=%lld K=%lld %s", (long long)l.m, (long long)l.n,
			 (long long)l.k, opt->name);
		fos_status st;
		fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, l.n, l.k, l.w);
		fos_weight_config wc = {block_opt(opt->weight_block), opt->err_mode, opt->bound, 0, 0, s % 2, 0, 0};
		fos_weight_info info;
		ASSERT_OK(fos_put_weight(c, name, 1, &tw, &wc, &info, &st), st);
		assert_int_equal(info.n, l.n);
		assert_int_equal(info.k, l.k);
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, l.m, l.k, l.x), tb = fos_tensor_1d(FOS_DTYPE_BF16, l.n, l.bias);
		fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, l.m, l.n, l.dy);
		/* a plain forward (the small-forward path) */
		fos_tensor y0 = fos_tensor_out();
		fos_forward_opts f0 = {0, opt->override, opt->row_scaled, 0, 0};
		ASSERT_OK(fos_forward(c, name, &tx, opt->bias ? &tb : NULL, &f0, &y0, NULL, &st), st);
		expect_slice("y (no context)", &y0, p.y, l.m, l.n, p.n, ctxs);
		/* with a saved context, then the backward */
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
		fos_forward_opts fo = {0, opt->override, opt->row_scaled, 1, 0};
		fos_context ctx;
		ASSERT_OK(fos_forward(c, name, &tx, opt->bias ? &tb : NULL, &fo, &y, &ctx, &st), st);
		expect_slice("y", &y, p.y, l.m, l.n, p.n, ctxs);
		ASSERT_OK(fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, &db, &st), st);
		expect_slice("dx", &dx, p.dx, l.m, l.k, p.k, ctxs);
		expect_slice("dw", &dw, p.dw, l.n, l.k, p.k, ctxs);
		if (opt->bias)
			expect_slice("db", &db, p.db, 1, l.n, p.n, ctxs);
		ASSERT_OK(fos_drop_weight(c, name, &st), st);
		free(y0.data);
		free(y.data);
		free(dx.data);
		free(dw.data);
		free(db.data);
		shp_free(&l);
		shp_free(&p);
	}
	fos_close(c);
}

static void expect_refused(int rc, const fos_status *st, const char *value, const char *what)
{
	if (rc != FOS_CODE_INVALID_ARGUMENT)
		fail_msg("%s: %s (%s), INVALID_ARGUMENT expected", what, fos_code_name(rc), st->message);
	if (!strstr(st->message, value))
		fail_msg("%s: message '%s' does not name '%s'", what, st->message, value);
}

static void test_fosd_bad_shapes(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	uint16_t *buf = calloc(64 * 64, 2);
	fos_tensor y = fos_tensor_out();
	/* Linear: K = 8, N = 24 */
	fos_tensor x8 = fos_tensor_2d(FOS_DTYPE_BF16, 4, 8, buf), w8 = fos_tensor_2d(FOS_DTYPE_BF16, 16, 8, buf);
	expect_refused(fos_linear(c, &x8, &w8, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st), &st, "K = 8", "Linear K=8");
	fos_tensor x16 = fos_tensor_2d(FOS_DTYPE_BF16, 4, 16, buf), w24 = fos_tensor_2d(FOS_DTYPE_BF16, 24, 16, buf);
	expect_refused(fos_linear(c, &x16, &w24, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st), &st, "N = 24",
		       "Linear N=24");
	/* PutWeight: N = 24, K = 8 */
	expect_refused(fos_put_weight(c, "bad", 1, &w24, NULL, NULL, &st), &st, "N = 24", "PutWeight N=24");
	expect_refused(fos_put_weight(c, "bad", 1, &w8, NULL, NULL, &st), &st, "K = 8", "PutWeight K=8");
	/* Forward: x with K = 8 (refused before the weight is looked up), then M = 0 and K = 0 */
	fos_tensor w16 = fos_tensor_2d(FOS_DTYPE_BF16, 16, 16, buf);
	ASSERT_OK(fos_put_weight(c, "ok", 1, &w16, NULL, NULL, &st), st);
	expect_refused(fos_forward(c, "ok", &x8, NULL, NULL, &y, NULL, &st), &st,
		       "x (4, 8): K = 8 is not a positive multiple of 16 (N and K must be)", "Forward K=8");
	fos_tensor x0 = fos_tensor_2d(FOS_DTYPE_BF16, 0, 16, buf), xk0 = fos_tensor_2d(FOS_DTYPE_BF16, 4, 0, buf);
	expect_refused(fos_forward(c, "ok", &x0, NULL, NULL, &y, NULL, &st), &st, "dimension 0 is 0 (must be >= 1)",
		       "Forward M=0");
	expect_refused(fos_forward(c, "ok", &xk0, NULL, NULL, &y, NULL, &st), &st, "dimension 1 is 0 (must be >= 1)",
		       "Forward K=0");
	expect_refused(fos_linear(c, &x0, &w16, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st), &st,
		       "dimension 0 is 0 (must be >= 1)", "Linear M=0");
	/* K = 48 against the weight's K = 16 */
	fos_tensor x48 = fos_tensor_2d(FOS_DTYPE_BF16, 3, 48, buf);
	expect_refused(fos_forward(c, "ok", &x48, NULL, NULL, &y, NULL, &st), &st, "48", "Forward K=48 vs 16");
	/* still serving: health, and a forward of M = 3 */
	fos_health_info h;
	ASSERT_OK(fos_health(c, &h, &st), st);
	fos_tensor x3 = fos_tensor_2d(FOS_DTYPE_BF16, 3, 16, buf);
	ASSERT_OK(fos_forward(c, "ok", &x3, NULL, NULL, &y, NULL, &st), st);
	assert_int_equal(y.shape[0], 3);
	assert_int_equal(y.shape[1], 16);
	free(y.data);
	free(buf);
	fos_close(c);
}

/* Rows [0, r) and columns [0, c) of a (., ld) array, contiguous. */
static uint16_t *slice(const uint16_t *a, int64_t r, int64_t c, int64_t ld)
{
	uint16_t *o = malloc((size_t)(r * c) * 2);
	for (int64_t i = 0; i < r; i++)
		memcpy(o + i * c, a + i * ld, (size_t)c * 2);
	return o;
}

static void check_outputs(const char *dir, const shp_layer *l, const shp_layer *p, int grads)
{
	char path[700];
	uint16_t *y = slice(p->y, l->m, l->n, p->n);
	snprintf(path, sizeof path, "%s/y.npy", dir);
	th_check_file(path, NPY_U2, 2, l->m, l->n, y);
	free(y);
	if (!grads)
		return;
	uint16_t *dx = slice(p->dx, l->m, l->k, p->k), *dw = slice(p->dw, l->n, l->k, p->k);
	snprintf(path, sizeof path, "%s/dx.npy", dir);
	th_check_file(path, NPY_U2, 2, l->m, l->k, dx);
	snprintf(path, sizeof path, "%s/dw.npy", dir);
	th_check_file(path, NPY_U2, 2, l->n, l->k, dw);
	free(dx);
	free(dw);
}

static void test_cli_any_m(void **state)
{
	(void)state;
	assert_int_equal(th_setup(NULL), 0);
	const shp_opt *opt = &shp_opts[0]; /* default (quantized) 16x16, bias */
	shp_layer l, p;
	shp_inputs(&l, 17, 48, 144, 1, 1, 0, 31);
	padded_reference(&l, opt, &p);
	th_save(th_p("x.npy"), NPY_U2, 2, l.m, l.k, l.x);
	th_save(th_p("w.npy"), NPY_U2, 2, l.n, l.k, l.w);
	th_save(th_p("b.npy"), NPY_U2, 1, l.n, 0, l.bias);
	th_save(th_p("dy.npy"), NPY_U2, 2, l.m, l.n, l.dy);
	th_result r;
	/* fos linear --local */
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--bias", th_p("b.npy"), "--dy", th_p("dy.npy"), "--out",
	       th_p("lin"), "--local", "--backend", tsrv_backend_name(), NULL);
	th_expect_ok(&r);
	check_outputs(th_p("lin"), &l, &p, 1);
	/* put-weight, forward with a context file, backward */
	th_run(&r, "--server", g_srv.url, "put-weight", "w", th_p("w.npy"), NULL);
	th_expect_ok(&r);
	assert_int_equal(mkdir(th_p("fb"), 0700), 0);
	th_run(&r, "--server", g_srv.url, "forward", "w", th_p("x.npy"), "--bias", th_p("b.npy"), "--out",
	       th_p("fb/y.npy"), "--context-out", th_p("ctx.json"), NULL);
	th_expect_ok(&r);
	th_run(&r, "--server", g_srv.url, "backward", th_p("ctx.json"), th_p("dy.npy"), "--out", th_p("fb"), NULL);
	th_expect_ok(&r);
	check_outputs(th_p("fb"), &l, &p, 1);
	/* the load tester with M = 17 and M = 1 */
	static const char *const ops[] = {"forward", "backward", "linear"};
	static const char *const ms[] = {"17", "1", "17"};
	for (int i = 0; i < 3; i++) {
		th_run(&r, "--server", g_srv.url, "load", "--op", ops[i], "--m", ms[i], "--n", "48", "--k", "144",
		       "--requests", "3", "--warmup", "0", NULL);
		th_expect_ok(&r);
		if (!strstr(r.out, "measured: 3 ok, 0 failed"))
			fail_msg("load --op %s --m %s:\n%s", ops[i], ms[i], r.out);
	}
	th_run(&r, "load", "--m", "17", "--k", "24", NULL);
	th_expect_fail(&r, 2, "K = 24 is not a positive multiple of 16");
	shp_free(&l);
	shp_free(&p);
	assert_int_equal(th_teardown(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_rule),
		cmocka_unit_test(test_padded_every_shape_and_option),
		cmocka_unit_test(test_padded_inf_nan),
		cmocka_unit_test(test_dequantized_infinite_amax),
		cmocka_unit_test(test_saved_columnwise_m17),
		cmocka_unit_test(test_batch_invariance),
		cmocka_unit_test_setup_teardown(test_fosd_linear, setup_server, teardown_server),
		cmocka_unit_test_setup_teardown(test_fosd_cached_forward_backward, setup_server, teardown_server),
		cmocka_unit_test_setup_teardown(test_fosd_bad_shapes, setup_server, teardown_server),
		cmocka_unit_test_setup_teardown(test_cli_any_m, setup_server, teardown_server),
	};
	return cmocka_run_group_tests_name("linear shapes", tests, setup, teardown);
}
