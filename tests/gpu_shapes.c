/* gpu_shapes.c: the shape rule of NUMERICS.md section 8 on the CUDA backend (kernels/linear.c on
 * CUDA), the GPU side of test_linear_shapes:
 *  - every shape of support_shapes.c's list (every M in {1, 2, 15, 17, 100, 129, 1000}, every N and
 *    K in {16, 48, 144, 272, 1040}) under every option of its list, also with inf and NaN in X, W or
 *    dY: Y, dX, dW, db bit for bit the slices of the same layer on CUDA on inputs zero-padded to
 *    multiples of 128 (the 128-multiple path);
 *  - CUDA against the CPU backend on the same shapes: on data whose every GEMM sum is exact in FP32
 *    in any order (entries 0, +-1, +-2, +-4 with a 4 in each tensor: each decoded operand is the
 *    entry times one power-of-two-times-3 constant), Y, dX, dW and db bit for bit for the forward
 *    and the quantized and high_precision backwards (Y and db for dequantized, whose operands carry
 *    the amax); on random data SQNR > 60 dB (GEMM accumulation order may differ) and db bit for bit,
 *    with the count of differing elements reported;
 *  - batch invariance: Y's first rows for M = 1, 17, 100 against M = 1024, bit for bit, at N x K =
 *    272 x 144, 1040 x 1040 and 4096 x 4096, per-tensor (the largest element in row 0) and row-scaled;
 *  - the small forward replayed from a CUDA graph (same buffers a third time) at M = 1 and 17 gives
 *    the bits of its first run.
 * Skips cleanly (exit 0) when there is no usable GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support_gpu.h"
#include "backend.h"
#include "support_ref.h"
#include "support_shapes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void test_padded_every_shape_and_option(void **state)
{
	(void)state;
	NEED_GPU();
	char msg[800];
	for (int s = 0; s < shp_nshapes; s++)
		for (int o = 0; o < shp_nopts; o++) {
			const int64_t *d = shp_shapes[s];
			if (shp_check_padded(g_gpu, d[0], d[1], d[2], &shp_opts[o], 0, 1000 + (uint64_t)(s * 37 + o), msg,
					     sizeof msg))
				fail_msg("cuda: %s", msg);
		}
	printf("gpu_shapes: %d shapes x %d options bit for bit equal to the padded layer\n", shp_nshapes, shp_nopts);
}

static void test_padded_inf_nan(void **state)
{
	(void)state;
	NEED_GPU();
	char msg[800];
	const int64_t shapes[][3] = {{17, 48, 144}, {1, 272, 16}, {100, 16, 272}, {128, 144, 48}};
	for (int sp = 1; sp <= 3; sp++)
		for (int s = 0; s < 4; s++)
			for (int o = 0; o < shp_nopts; o++)
				if (shp_check_padded(g_gpu, shapes[s][0], shapes[s][1], shapes[s][2], &shp_opts[o], sp,
						     77 + (uint64_t)(s * 100 + o), msg, sizeof msg))
					fail_msg("cuda: %s", msg);
}

/* ---- CUDA against the CPU ------------------------------------------------------------------- */

/* Entries in {0, +-1, +-2, +-4}, one 4 at the front: see the top. */
static void exact_fill(uint16_t *p, int64_t n, ref_rng *r)
{
	static const float v[7] = {0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 4.0f, -4.0f};
	for (int64_t i = 0; i < n; i++)
		p[i] = ref_f32_bf16(v[ref_rng_u64(r) % 7]);
	p[0] = ref_f32_bf16(4.0f);
}

static double sqnr(const uint16_t *ref, const uint16_t *x, int64_t n)
{
	double s = 0, e = 0;
	for (int64_t i = 0; i < n; i++) {
		double a = ref_bf16_f32(ref[i]), b = ref_bf16_f32(x[i]);
		s += a * a;
		e += (a - b) * (a - b);
	}
	return e == 0 ? 999.0 : 10.0 * log10(s / e);
}

static int64_t ndiff(const uint16_t *a, const uint16_t *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		d += a[i] != b[i];
	return d;
}

/* One output of the two backends: bit for bit when exact, else SQNR > 60 dB; returns the number
 * of differing elements. */
static int64_t cmp_out(const char *what, const uint16_t *c, const uint16_t *g, int64_t n, int exact, const char *ctx)
{
	int64_t d = ndiff(c, g, n);
	if (exact && d) {
		int64_t i = ref_cmp_bf16(g, c, n);
		fail_msg("%s: %s differs between cuda and cpu at %lld: 0x%04x vs 0x%04x (%lld elements differ)", ctx, what,
			 (long long)i, g[i], c[i], (long long)d);
	}
	double q = sqnr(c, g, n);
	if (q < 60.0)
		fail_msg("%s: %s cuda vs cpu SQNR %.1f dB (%lld elements differ)", ctx, what, q, (long long)d);
	return d;
}

static void test_cuda_vs_cpu(void **state)
{
	(void)state;
	NEED_GPU();
	int64_t differ = 0, total = 0;
	for (int exact = 1; exact >= 0; exact--)
		for (int s = 0; s < shp_nshapes; s++)
			for (int t = 0; t < 4; t++) {
				const shp_opt *opt = &shp_opts[(s * 5 + t * 3) % shp_nopts];
				const int64_t *d = shp_shapes[s];
				shp_layer lc, lg;
				shp_inputs(&lc, d[0], d[1], d[2], opt->bias, 1, 0, 300 + (uint64_t)(s * 4 + t));
				if (exact) {
					ref_rng r;
					ref_rng_seed(&r, 17 + (uint64_t)s);
					exact_fill(lc.x, lc.m * lc.k, &r);
					exact_fill(lc.w, lc.n * lc.k, &r);
					exact_fill(lc.dy, lc.m * lc.n, &r);
				}
				lg = lc;
				lg.y = lg.dx = lg.dw = lg.db = NULL;
				fos_linear_opts o = shp_opts_of(opt);
				fos_err e = {0, ""};
				if (shp_run(g_cpu, &o, opt->keep_master, opt->want_col, &lc, &e))
					fail_msg("cpu: %s", e.msg);
				if (shp_run(g_gpu, &o, opt->keep_master, opt->want_col, &lg, &e))
					fail_msg("cuda: %s", e.msg);
				char ctx[200];
				snprintf(ctx, sizeof ctx, "M=%lld N=%lld K=%lld %s%s", (long long)d[0], (long long)d[1],
					 (long long)d[2], opt->name, exact ? " (exact data)" : "");
				int deq = opt->override == FOS_OVR_DEQUANTIZED;
				differ += cmp_out("y", lc.y, lg.y, lc.m * lc.n, exact, ctx);
				differ += cmp_out("dx", lc.dx, lg.dx, lc.m * lc.k, exact && !deq, ctx);
				differ += cmp_out("dw", lc.dw, lg.dw, lc.n * lc.k, exact && !deq, ctx);
				total += lc.m * lc.n + lc.m * lc.k + lc.n * lc.k;
				if (opt->bias) {
					cmp_out("db", lc.db, lg.db, lc.n, 1, ctx);
					total += lc.n;
				}
				free(lg.y);
				free(lg.dx);
				free(lg.dw);
				free(lg.db);
				shp_free(&lc);
			}
	printf("gpu_shapes: cuda vs cpu on %d shapes: %lld of %lld output elements differ (random data, "
	       "accumulation order); exact data bit for bit\n",
	       shp_nshapes, (long long)differ, (long long)total);
}

/* ---- batch invariance ----------------------------------------------------------------------- */

static void test_batch_invariance(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t nk[][2] = {{272, 144}, {1040, 1040}, {4096, 4096}}, mmax = 1024, ms[] = {1, 17, 100};
	for (int s = 0; s < 3; s++) {
		int64_t n = nk[s][0], k = nk[s][1];
		shp_layer big;
		shp_inputs(&big, mmax, n, k, 1, 0, 0, 99 + (uint64_t)s);
		for (int64_t i = 0; i < mmax * k; i++) {
			float v = ref_bf16_f32(big.x[i]);
			if (v > 100.0f || v < -100.0f)
				big.x[i] = ref_f32_bf16(v > 0 ? 100.0f : -100.0f);
		}
		big.x[3] = ref_f32_bf16(-250.0f); /* the largest, in row 0 */
		for (int rs = 0; rs < 2; rs++) {
			fos_linear_opts o = fos_linear_opts_default();
			o.row_scaled = rs;
			o.weight_block = rs ? FOS_BLOCK_1X16 : FOS_BLOCK_16X16;
			fos_err e = {0, ""};
			shp_layer full = big;
			full.dy = NULL;
			full.bias = rs ? NULL : big.bias;
			full.y = full.dx = full.dw = full.db = NULL;
			if (shp_run(g_gpu, &o, 0, 0, &full, &e))
				fail_msg("cuda: %s", e.msg);
			for (int i = 0; i < 3; i++) {
				shp_layer part = full;
				part.m = ms[i];
				part.y = NULL;
				if (shp_run(g_gpu, &o, 0, 0, &part, &e))
					fail_msg("cuda: %s", e.msg);
				int64_t d = ref_cmp_bf16(part.y, full.y, ms[i] * n);
				if (d >= 0)
					fail_msg("N=%lld K=%lld%s: Y[%lld, %lld] for M = %lld is 0x%04x, for M = 1024 0x%04x",
						 (long long)n, (long long)k, rs ? " row-scaled" : "", (long long)(d / n),
						 (long long)(d % n), (long long)ms[i], part.y[d], full.y[d]);
				free(part.y);
			}
			free(full.y);
		}
		shp_free(&big);
	}
}

/* ---- the replayed small forward ------------------------------------------------------------- */

static void test_forward_replay(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t ms[] = {1, 17}, n = 272, k = 144;
	for (int i = 0; i < 2; i++) {
		int64_t m = ms[i];
		shp_layer l;
		shp_inputs(&l, m, n, k, 1, 0, 0, 7 + (uint64_t)i);
		fos_linear_opts o = fos_linear_opts_default();
		fos_err e = {0, ""};
		void *xd = ref_dev_put(g_gpu, l.x, (size_t)(m * k) * 2), *wd = ref_dev_put(g_gpu, l.w, (size_t)(n * k) * 2);
		void *bd = ref_dev_put(g_gpu, l.bias, (size_t)n * 2), *yd = ref_dev_put(g_gpu, NULL, (size_t)(m * n) * 2);
		assert_true(xd && wd && bd && yd);
		fos_qweight qw;
		assert_int_equal(fos_qweight_make(g_gpu, wd, n, k, &o, 0, 0, &qw, &e), FOS_OK);
		uint16_t *first = malloc((size_t)(m * n) * 2), *again = malloc((size_t)(m * n) * 2);
		for (int run = 0; run < 4; run++) {
			assert_int_equal(g_gpu->zero(g_gpu, yd, (size_t)(m * n) * 2, &e), FOS_OK);
			assert_int_equal(fos_linear_forward(g_gpu, xd, m, &qw, &o, bd, yd, NULL, &e), FOS_OK);
			assert_int_equal(g_gpu->d2h(g_gpu, run ? again : first, yd, (size_t)(m * n) * 2, &e), FOS_OK);
			if (run && ref_cmp_bf16(again, first, m * n) >= 0)
				fail_msg("M=%lld: run %d of the forward differs from the first", (long long)m, run + 1);
		}
		fos_qweight_free(g_gpu, &qw);
		void *b[] = {xd, wd, bd, yd};
		for (int j = 0; j < 4; j++)
			g_gpu->free(g_gpu, b[j]);
		free(first);
		free(again);
		shp_free(&l);
	}
}

static int setup(void **state)
{
	(void)state;
	return tgpu_open("gpu_shapes");
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_padded_every_shape_and_option),
		cmocka_unit_test(test_padded_inf_nan),
		cmocka_unit_test(test_cuda_vs_cpu),
		cmocka_unit_test(test_batch_invariance),
		cmocka_unit_test(test_forward_replay),
	};
	return cmocka_run_group_tests(tests, setup, tgpu_close);
}
