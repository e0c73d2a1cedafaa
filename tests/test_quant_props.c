/* test_quant_props.c: the properties NUMERICS.md section 9 lists for quantize, checked on the CPU
 * backend's output with the test's own loops: each stored scale byte is one of the two candidates,
 * the stored error is min(err4, err6), both candidates win on random data, 4/6 is never worse than
 * map-to-6 only, row-scaled == per-row with a scalar amax, 16x16 scales repeated on the tile's 16
 * rows, dequantize(quantize(x)) SQNR > 14 dB, the columnwise copies equal quantizing the
 * transpose with the given amax, and every bad input rejected with a message naming the value. */
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

static fos_qcfg mk(int recipe, int block, int err_mode, int bound, int row_scaled)
{
	fos_qcfg c = fos_qcfg_default();
	c.recipe = recipe;
	c.block = block;
	c.err_mode = err_mode;
	c.bound = bound;
	c.row_scaled = row_scaled;
	return c;
}

/* the 4/6 configs */
static const struct {
	const char *name;
	int block, err_mode, bound, row_scaled;
} k46[] = {
	{"1x16 mae 256", FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},   {"1x16 mse 256", FOS_BLOCK_1X16, FOS_ERR_MSE, 256, 0},
	{"1x16 mae 448", FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},   {"1x16 mse 448", FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
	{"16x16 mae 256", FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0}, {"16x16 mse 448", FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0},
	{"row-scaled mae 256", FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1},
	{"row-scaled mse 448", FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 1},
};
#define N46 ((int)(sizeof k46 / sizeof k46[0]))

static const int64_t k_shapes[][2] = {{128, 256}, {64, 1024}, {384, 256}, {100, 320}};

typedef struct qout {
	int64_t rows, cols;
	uint8_t *codes, *scales;
	float *amax;
} qout;

static void qout_alloc(qout *q, int64_t rows, int64_t cols)
{
	q->rows = rows;
	q->cols = cols;
	q->codes = malloc((size_t)(rows * cols / 2));
	q->scales = malloc((size_t)(rows * cols / 16));
	q->amax = malloc(sizeof(float) * (size_t)rows);
	assert_true(q->codes && q->scales && q->amax);
}

static void qout_free(qout *q)
{
	free(q->codes);
	free(q->scales);
	free(q->amax);
}

static void be_quant(const uint16_t *x, int64_t rows, int64_t cols, const fos_qcfg *c, const float *amax_in, qout *q)
{
	fos_err err = {0};
	int rc = ref_be_quantize(g_be, x, FOS_BF16, rows, cols, c, amax_in, q->codes, q->scales, q->amax, NULL, &err);
	if (rc != FOS_OK)
		print_message("quantize: %s\n", err.msg);
	assert_int_equal(rc, FOS_OK);
}

/* The error (section 3) of the backend's stored encoding of scale entry (r, b): one row-group for
 * 1x16, the tree sum of the tile's 16 row-groups for 16x16. */
static float stored_error(const qout *q, const float *xf, const fos_qcfg *c, int64_t r, int64_t b)
{
	int tile = c->block == FOS_BLOCK_16X16;
	int64_t nb = q->cols / 16;
	float d = ref_d(c->bound);
	float e[16];
	int64_t r0 = tile ? (r / 16) * 16 : r;
	for (int i = 0; i < (tile ? 16 : 1); i++) {
		uint8_t codes[16];
		for (int j = 0; j < 16; j++)
			codes[j] = (uint8_t)ref_code_at(q->codes, q->cols, r0 + i, b * 16 + j);
		float a = q->amax[c->row_scaled ? r0 + i : 0];
		e[i] = ref_group_err(codes, q->scales[(r0 + i) * nb + b], a, d, xf + (r0 + i) * q->cols + b * 16,
				     c->err_mode == FOS_ERR_MSE);
	}
	return tile ? ref_tree16(e) : e[0];
}

static int same_f(float a, float b)
{
	return (isnan(a) && isnan(b)) || ref_f2u(a) == ref_f2u(b);
}

/* Stored scale is a candidate; stored error == min(err4, err6) (strict <: ties / NaN keep
 * map-to-6); never worse than map-to-6. Counts the wins of each candidate. */
static void check_choice(const char *label, const uint16_t *x, int64_t rows, int64_t cols, const fos_qcfg *c,
			 long *win4, long *win6, int *bad)
{
	int64_t n = rows * cols, nb = cols / 16;
	float *xf = malloc(4 * (size_t)n);
	ref_qblock *info = malloc(sizeof(ref_qblock) * (size_t)(n / 16));
	qout rq, bq;
	assert_true(xf && info);
	qout_alloc(&rq, rows, cols);
	qout_alloc(&bq, rows, cols);
	ref_bf16_to_f32_arr(x, xf, n);
	assert_int_equal(ref_quantize(xf, rows, cols, c, NULL, rq.codes, rq.scales, rq.amax, info), 0);
	be_quant(x, rows, cols, c, NULL, &bq);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t b = 0; b < nb; b++) {
			const ref_qblock *qb = &info[r * nb + b];
			uint8_t s = bq.scales[r * nb + b];
			float es = stored_error(&bq, xf, c, r, b);
			float want = (qb->err4 < qb->err6) ? qb->err4 : qb->err6;
			int ok = (s == qb->sf4 || s == qb->sf6) && same_f(es, want);
			if (ok && qb->sf4 != qb->sf6)
				ok = (s == qb->sf4) == (qb->err4 < qb->err6);
			/* never worse than map-to-6 (in the selection metric) */
			if (ok && !isnan(qb->err6) && !isnan(es))
				ok = es <= qb->err6;
			if (!ok) {
				if (*bad < 5)
					print_message("%s (%ld, %ld): scale 0x%02x (sf6 0x%02x sf4 0x%02x) err %a "
						      "(err6 %a err4 %a)\n",
						      label, (long)r, (long)b, s, qb->sf6, qb->sf4, es, qb->err6, qb->err4);
				(*bad)++;
			}
			if (qb->sf4 != qb->sf6) {
				if (s == qb->sf4)
					(*win4)++;
				else
					(*win6)++;
			}
		}
	free(xf);
	free(info);
	qout_free(&rq);
	qout_free(&bq);
}

static void test_scale_is_candidate_and_error_is_min(void **state)
{
	(void)state;
	int bad = 0;
	char label[160];
	for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
		int64_t rows = k_shapes[s][0], cols = k_shapes[s][1];
		uint16_t *x = malloc(2 * (size_t)(rows * cols));
		assert_non_null(x);
		for (int kind = 0; kind < REF_NKINDS; kind++) {
			ref_gen_bf16(kind, rows, cols, 300 + 13 * s + (uint64_t)kind, x);
			for (int q = 0; q < N46; q++) {
				if (k46[q].block == FOS_BLOCK_16X16 && rows % 16)
					continue;
				fos_qcfg c = mk(FOS_RECIPE_4OVER6, k46[q].block, k46[q].err_mode, k46[q].bound, k46[q].row_scaled);
				long w4 = 0, w6 = 0;
				snprintf(label, sizeof label, "%s (%ld,%ld) %s", ref_kind_name(kind), (long)rows, (long)cols,
					 k46[q].name);
				check_choice(label, x, rows, cols, &c, &w4, &w6, &bad);
			}
		}
		free(x);
	}
	assert_int_equal(bad, 0);
}

/* On gaussian data map-to-4 wins a share of 1x16 blocks but (with 256 elements and their outliers
 * per tile) no 16x16 tile; on uniform data it wins 16x16 tiles too. Per config, each candidate must
 * win somewhere over the three random sets. */
static void test_both_candidates_win_on_random_data(void **state)
{
	(void)state;
	const int64_t rows = 128, cols = 256, n = rows * cols;
	uint16_t *x = malloc(2 * (size_t)n);
	assert_non_null(x);
	int bad = 0;
	long w4[N46] = {0}, w6[N46] = {0};
	ref_rng r;
	ref_rng_seed(&r, 4242);
	for (int set = 0; set < 3; set++) {
		if (set == 2)
			for (int64_t i = 0; i < n; i++)
				x[i] = ref_f32_bf16((float)(2.0 * ref_rng_uniform(&r) - 1.0));
		else
			ref_gen_bf16(set == 0 ? REF_RANDN : REF_HEAVY, rows, cols, 42, x);
		for (int q = 0; q < N46; q++) {
			fos_qcfg c = mk(FOS_RECIPE_4OVER6, k46[q].block, k46[q].err_mode, k46[q].bound, k46[q].row_scaled);
			long a4 = 0, a6 = 0;
			check_choice(k46[q].name, x, rows, cols, &c, &a4, &a6, &bad);
			print_message("%s %s: map-to-4 wins %ld blocks, map-to-6 %ld\n",
				      set == 0 ? "randn" : (set == 1 ? "heavy" : "uniform"), k46[q].name, a4, a6);
			w4[q] += a4;
			w6[q] += a6;
		}
	}
	assert_int_equal(bad, 0);
	for (int q = 0; q < N46; q++) {
		assert_true(w4[q] > 0);
		assert_true(w6[q] > 0);
	}
	free(x);
}

/* Summed over a tensor, the 4/6 MSE-mode error is never above map-to-6 only; and the SQNR of
 * the dequantized 4/6 tensor is at least that of map-to-6 only (a sanity margin of 0.01 dB for the
 * bf16 rounding of the dequantized output). */
static void test_46_not_worse_than_map_to_6(void **state)
{
	(void)state;
	const int64_t rows = 128, cols = 256, n = rows * cols, nb = cols / 16;
	uint16_t *x = malloc(2 * (size_t)n);
	float *xf = malloc(4 * (size_t)n), *o6 = malloc(4 * (size_t)n);
	double *xd = malloc(8 * (size_t)n), *d46 = malloc(8 * (size_t)n), *d6 = malloc(8 * (size_t)n);
	uint16_t *deq = malloc(2 * (size_t)n);
	ref_qblock *info = malloc(sizeof(ref_qblock) * (size_t)(n / 16));
	uint8_t *c6 = malloc((size_t)n / 2), *s6 = malloc((size_t)n / 16);
	assert_true(x && xf && o6 && xd && d46 && d6 && deq && info && c6 && s6);
	qout bq, rq;
	qout_alloc(&bq, rows, cols);
	qout_alloc(&rq, rows, cols);
	for (int kind = 0; kind < 3; kind++) {
		int k = kind == 0 ? REF_RANDN : (kind == 1 ? REF_HEAVY : REF_LINSPACE);
		ref_gen_bf16(k, rows, cols, 7, x);
		ref_bf16_to_f32_arr(x, xf, n);
		for (int64_t i = 0; i < n; i++)
			xd[i] = xf[i];
		for (int tile = 0; tile < 2; tile++) {
			fos_qcfg c = mk(FOS_RECIPE_4OVER6, tile ? FOS_BLOCK_16X16 : FOS_BLOCK_1X16, FOS_ERR_MSE, 256, 0);
			be_quant(x, rows, cols, &c, NULL, &bq);
			assert_int_equal(ref_quantize(xf, rows, cols, &c, NULL, rq.codes, rq.scales, rq.amax, info), 0);
			double e46 = 0, e6 = 0;
			for (int64_t r = 0; r < rows; r += tile ? 16 : 1)
				for (int64_t b = 0; b < nb; b++) {
					e46 += stored_error(&bq, xf, &c, r, b);
					e6 += info[r * nb + b].err6;
				}
			assert_true(e46 <= e6);
			/* the map-to-6-only encoding: every block with its sf6 */
			for (int64_t r = 0; r < rows; r++)
				for (int64_t b = 0; b < nb; b++)
					s6[r * nb + b] = info[r * nb + b].sf6;
			/* codes of map-to-6: e2m1(x * inv6) */
			float s = ref_s_enc(bq.amax[0], 256), sdec = 1.0f / s;
			memset(c6, 0, (size_t)n / 2);
			for (int64_t r = 0; r < rows; r++)
				for (int64_t col = 0; col < cols; col++) {
					unsigned sf = s6[r * nb + col / 16];
					float inv = sf ? fminf(1.0f / ((float)ref_e4m3_val(sf) * sdec), FLT_MAX) : FLT_MAX;
					unsigned code = ref_e2m1_enc(xf[r * cols + col] * inv);
					c6[r * (cols / 2) + col / 2] |= (uint8_t)(code << (4 * (col & 1)));
				}
			ref_dequantize(c6, s6, bq.amax, rows, cols, 256, 0, o6);
			fos_err err = {0};
			assert_int_equal(ref_be_dequantize(g_be, bq.codes, bq.scales, bq.amax, rows, cols, 256, 0, FOS_BF16, deq, &err),
					 FOS_OK);
			for (int64_t i = 0; i < n; i++) {
				d46[i] = ref_bf16_f32(deq[i]);
				d6[i] = ref_bf16_f32(ref_f32_bf16(o6[i]));
			}
			double q46 = ref_sqnr_db(xd, d46, n), q6 = ref_sqnr_db(xd, d6, n);
			print_message("%s %s: SQNR 4/6 %.2f dB, map-to-6 only %.2f dB (MSE sums %.6g <= %.6g)\n",
				      ref_kind_name(k), tile ? "16x16" : "1x16", q46, q6, e46, e6);
			assert_true(q46 >= q6 - 0.01);
		}
	}
	qout_free(&bq);
	qout_free(&rq);
	free(x);
	free(xf);
	free(o6);
	free(xd);
	free(d46);
	free(d6);
	free(deq);
	free(info);
	free(c6);
	free(s6);
}

static void test_row_scaled_equals_per_row(void **state)
{
	(void)state;
	static const int kinds[] = {REF_RANDN, REF_NEGZERO, REF_NAN, REF_INF, REF_WIDE, REF_DTYPE_MAX, REF_MIXED_SUB};
	for (int sh = 0; sh < 2; sh++) {
		int64_t rows = sh ? 100 : 128, cols = sh ? 320 : 256;
		uint16_t *x = malloc(2 * (size_t)(rows * cols));
		float *xf = malloc(4 * (size_t)(rows * cols));
		assert_true(x && xf);
		qout m, one;
		qout_alloc(&m, rows, cols);
		qout_alloc(&one, 1, cols);
		for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
			ref_gen_bf16(kinds[k], rows, cols, 55 + k, x);
			ref_bf16_to_f32_arr(x, xf, rows * cols);
			/* make one row entirely zero (amax 0) */
			memset(x + 3 * cols, 0, 2 * (size_t)cols);
			memset(xf + 3 * cols, 0, 4 * (size_t)cols);
			for (int mode = 0; mode < 2; mode++) {
				fos_qcfg c = mk(FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, mode, mode ? 448 : 256, 1);
				be_quant(x, rows, cols, &c, NULL, &m);
				fos_qcfg c1 = c;
				c1.row_scaled = 0;
				for (int64_t r = 0; r < rows; r++) {
					float ra = ref_amax(xf + r * cols, cols);
					assert_true(same_f(m.amax[r], ra));
					be_quant(x + r * cols, 1, cols, &c1, &m.amax[r], &one);
					assert_true(same_f(one.amax[0], ra));
					assert_memory_equal(one.codes, m.codes + r * (cols / 2), (size_t)cols / 2);
					assert_memory_equal(one.scales, m.scales + r * (cols / 16), (size_t)cols / 16);
					/* and with the row's amax computed by the per-tensor path itself */
					be_quant(x + r * cols, 1, cols, &c1, NULL, &one);
					assert_memory_equal(one.codes, m.codes + r * (cols / 2), (size_t)cols / 2);
					assert_memory_equal(one.scales, m.scales + r * (cols / 16), (size_t)cols / 16);
				}
			}
		}
		qout_free(&m);
		qout_free(&one);
		free(x);
		free(xf);
	}
}

static void test_16x16_scale_repeated_on_tile_rows(void **state)
{
	(void)state;
	const int64_t rows = 384, cols = 256, nb = cols / 16;
	uint16_t *x = malloc(2 * (size_t)(rows * cols));
	assert_non_null(x);
	qout q;
	qout_alloc(&q, rows, cols);
	for (int kind = 0; kind < REF_NKINDS; kind++) {
		ref_gen_bf16(kind, rows, cols, 900 + (uint64_t)kind, x);
		for (int mode = 0; mode < 2; mode++) {
			fos_qcfg c = mk(FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, mode, 256, 0);
			be_quant(x, rows, cols, &c, NULL, &q);
			for (int64_t r = 0; r < rows; r++)
				for (int64_t b = 0; b < nb; b++)
					assert_int_equal(q.scales[r * nb + b], q.scales[(r / 16) * 16 * nb + b]);
		}
	}
	qout_free(&q);
	free(x);
}

static void test_dequantize_quantize_sqnr(void **state)
{
	(void)state;
	static const int kinds[] = {REF_RANDN, REF_LINSPACE, REF_HEAVY, REF_NEGZERO};
	const int64_t rows = 128, cols = 256, n = rows * cols;
	uint16_t *x = malloc(2 * (size_t)n), *y = malloc(2 * (size_t)n);
	float *yf = malloc(4 * (size_t)n);
	double *xd = malloc(8 * (size_t)n), *yd = malloc(8 * (size_t)n);
	assert_true(x && y && yf && xd && yd);
	qout q;
	qout_alloc(&q, rows, cols);
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		ref_gen_bf16(kinds[k], rows, cols, 21 + k, x);
		ref_bf16_to_f64_arr(x, xd, n);
		for (int q46 = 0; q46 <= N46; q46++) {
			fos_qcfg c = q46 < N46 ? mk(FOS_RECIPE_4OVER6, k46[q46].block, k46[q46].err_mode, k46[q46].bound,
						    k46[q46].row_scaled)
					       : mk(FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0);
			be_quant(x, rows, cols, &c, NULL, &q);
			int bound = c.recipe == FOS_RECIPE_NVFP4 ? 448 : c.bound;
			fos_err err = {0};
			assert_int_equal(ref_be_dequantize(g_be, q.codes, q.scales, q.amax, rows, cols, bound, c.row_scaled,
							   FOS_BF16, y, &err),
					 FOS_OK);
			assert_int_equal(ref_be_dequantize(g_be, q.codes, q.scales, q.amax, rows, cols, bound, c.row_scaled,
							   FOS_F32, yf, &err),
					 FOS_OK);
			double sb = ref_sqnr_db_bf16(xd, y, n);
			for (int64_t i = 0; i < n; i++)
				yd[i] = yf[i];
			double sf = ref_sqnr_db(xd, yd, n);
			print_message("%s %s: SQNR bf16 %.2f dB, f32 %.2f dB\n", ref_kind_name(kinds[k]),
				      q46 < N46 ? k46[q46].name : "nvfp4 gradient", sb, sf);
			assert_true(sb > 14.0);
			assert_true(sf > 14.0);
		}
	}
	qout_free(&q);
	free(x);
	free(y);
	free(yf);
	free(xd);
	free(yd);
}

/* ---- columnwise copies (section 4) ---------------------------------------------------------- */

static void test_columnwise_weight_is_requantized_transpose(void **state)
{
	(void)state;
	const int64_t n = 256, k = 384;
	uint16_t *w = malloc(2 * (size_t)(n * k)), *wt = malloc(2 * (size_t)(n * k));
	uint16_t *dec = malloc(2 * (size_t)(n * k)), *decb = malloc(2 * (size_t)(n * k));
	assert_true(w && wt && dec && decb);
	qout rw, cw, hw;
	qout_alloc(&rw, n, k);
	qout_alloc(&cw, k, n);
	qout_alloc(&hw, k, n);
	int differ = 0;
	for (int kind = 0; kind < 3; kind++) {
		ref_gen_bf16(kind == 0 ? REF_RANDN : (kind == 1 ? REF_HEAVY : REF_NEGZERO), n, k, 31 + (uint64_t)kind, w);
		ref_transpose_u16(w, wt, n, k);
		for (int wb = 0; wb < 2; wb++) {
			fos_linear_opts o = fos_linear_opts_default();
			o.weight_block = wb ? FOS_BLOCK_1X16 : FOS_BLOCK_16X16;
			o.err_mode = kind == 2 ? FOS_ERR_MSE : FOS_ERR_MAE;
			o.bound = kind == 1 ? 448 : 256;
			fos_err err = {0};
			void *dw = ref_dev_put(g_be, w, 2 * (size_t)(n * k));
			assert_non_null(dw);
			fos_qweight qw;
			memset(&qw, 0, sizeof qw);
			int rc = fos_qweight_make(g_be, dw, n, k, &o, 0, 1, &qw, &err);
			if (rc != FOS_OK)
				print_message("qweight_make: %s\n", err.msg);
			assert_int_equal(rc, FOS_OK);
			assert_non_null(qw.qcol.codes);
			assert_int_equal(qw.qcol.rows, k);
			assert_int_equal(qw.qcol.cols, n);
			assert_int_equal(ref_dev_get(g_be, rw.codes, qw.q.codes, (size_t)(n * k / 2)), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, rw.scales, qw.q.scales, (size_t)(n * k / 16)), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, rw.amax, qw.q.amax, 4), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, cw.codes, qw.qcol.codes, (size_t)(n * k / 2)), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, cw.scales, qw.qcol.scales, (size_t)(n * k / 16)), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, cw.amax, qw.qcol.amax, 4), FOS_OK);
			uint16_t *cdec = g_be->alloc(g_be, 2 * (size_t)(n * k)); /* the columnwise GEMM operand */
			assert_non_null(cdec);
			assert_int_equal(fos_qweight_decode(g_be, &qw, 1, cdec, &err), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, dec, cdec, 2 * (size_t)(n * k)), FOS_OK);
			g_be->free(g_be, cdec);
			/* the columnwise copy: 4/6(W^T, w_amax, weight_block) */
			assert_true(same_f(cw.amax[0], rw.amax[0]));
			fos_qcfg c = mk(FOS_RECIPE_4OVER6, o.weight_block, o.err_mode, o.bound, 0);
			be_quant(wt, k, n, &c, rw.amax, &hw);
			assert_memory_equal(cw.codes, hw.codes, (size_t)(n * k / 2));
			assert_memory_equal(cw.scales, hw.scales, (size_t)(n * k / 16));
			/* and the reference agrees */
			float *wtf = malloc(4 * (size_t)(n * k)), *decf = malloc(4 * (size_t)(n * k));
			assert_true(wtf && decf);
			ref_bf16_to_f32_arr(wt, wtf, n * k);
			assert_int_equal(ref_quantize(wtf, k, n, &c, rw.amax, hw.codes, hw.scales, hw.amax, NULL), 0);
			assert_memory_equal(cw.codes, hw.codes, (size_t)(n * k / 2));
			assert_memory_equal(cw.scales, hw.scales, (size_t)(n * k / 16));
			ref_decode(hw.codes, hw.scales, k, n, decf);
			ref_f32_to_bf16_arr(decf, decb, n * k);
			assert_true(ref_cmp_bf16(dec, decb, n * k) < 0);
			/* 16x16: the candidates equal the rowwise tile's; the pick may differ */
			if (wb == 0)
				for (int64_t t = 0; t < k / 16; t++)
					for (int64_t u = 0; u < n / 16; u++) {
						uint8_t sc = cw.scales[(t * 16) * (n / 16) + u], sr = rw.scales[(u * 16) * (k / 16) + t];
						differ += sc != sr;
					}
			free(wtf);
			free(decf);
			fos_qweight_free(g_be, &qw);
			g_be->free(g_be, dw);
		}
	}
	print_message("16x16 tiles whose columnwise pick differs from the rowwise one: %d\n", differ);
	qout_free(&rw);
	qout_free(&cw);
	qout_free(&hw);
	free(w);
	free(wt);
	free(dec);
	free(decb);
}

static void test_columnwise_activation_is_requantized_transpose(void **state)
{
	(void)state;
	const int64_t m = 128, n = 128, k = 256;
	uint16_t *x = malloc(2 * (size_t)(m * k)), *xt = malloc(2 * (size_t)(m * k)), *w = malloc(2 * (size_t)(n * k));
	uint16_t *dec = malloc(2 * (size_t)(m * k));
	assert_true(x && xt && w && dec);
	ref_gen_bf16(REF_HEAVY, m, k, 61, x);
	ref_gen_bf16(REF_RANDN, n, k, 62, w);
	ref_transpose_u16(x, xt, m, k);
	fos_linear_opts o = fos_linear_opts_default();
	o.override = FOS_OVR_QUANTIZED;
	fos_err err = {0};
	void *dx = ref_dev_put(g_be, x, 2 * (size_t)(m * k)), *dw = ref_dev_put(g_be, w, 2 * (size_t)(n * k));
	void *dy = ref_dev_put(g_be, NULL, 2 * (size_t)(m * n));
	assert_true(dx && dw && dy);
	fos_qweight qw;
	memset(&qw, 0, sizeof qw);
	assert_int_equal(fos_qweight_make(g_be, dw, n, k, &o, 0, 1, &qw, &err), FOS_OK); /* for the quantized use */
	fos_saved sv;
	memset(&sv, 0, sizeof sv);
	int rc = fos_linear_forward(g_be, dx, m, &qw, &o, NULL, dy, &sv, &err);
	if (rc != FOS_OK)
		print_message("forward: %s\n", err.msg);
	assert_int_equal(rc, FOS_OK);
	assert_int_equal(sv.override, FOS_OVR_QUANTIZED);
	qout cx, hx;
	qout_alloc(&cx, k, m);
	qout_alloc(&hx, k, m);
	float xa;
	assert_int_equal(ref_dev_get(g_be, cx.codes, sv.xcol.codes, (size_t)(m * k / 2)), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, cx.scales, sv.xcol.scales, (size_t)(m * k / 16)), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, &xa, sv.x_amax, 4), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, dec, sv.xcol_decoded, 2 * (size_t)(m * k)), FOS_OK);
	float *xf = malloc(4 * (size_t)(m * k));
	assert_non_null(xf);
	ref_bf16_to_f32_arr(x, xf, m * k);
	assert_true(same_f(xa, ref_amax(xf, m * k)));
	fos_qcfg c = mk(FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, o.err_mode, o.bound, 0);
	be_quant(xt, k, m, &c, &xa, &hx);
	assert_memory_equal(cx.codes, hx.codes, (size_t)(m * k / 2));
	assert_memory_equal(cx.scales, hx.scales, (size_t)(m * k / 16));
	float *decf = malloc(4 * (size_t)(m * k));
	uint16_t *decb = malloc(2 * (size_t)(m * k));
	assert_true(decf && decb);
	ref_decode(hx.codes, hx.scales, k, m, decf);
	ref_f32_to_bf16_arr(decf, decb, m * k);
	assert_true(ref_cmp_bf16(dec, decb, m * k) < 0);
	fos_saved_free(g_be, &sv);
	fos_qweight_free(g_be, &qw);
	g_be->free(g_be, dx);
	g_be->free(g_be, dw);
	g_be->free(g_be, dy);
	qout_free(&cx);
	qout_free(&hx);
	free(x);
	free(xt);
	free(w);
	free(dec);
	free(xf);
	free(decf);
	free(decb);
}

/* ---- bad inputs ------------------------------------------------------------------------------ */

static void expect_einval(int rc, const fos_err *err, const char *needle)
{
	if (rc != FOS_EINVAL || (needle && !strstr(err->msg, needle)))
		print_message("rc %d, message \"%s\", expected EINVAL naming \"%s\"\n", rc, err->msg, needle ? needle : "");
	assert_int_equal(rc, FOS_EINVAL);
	assert_true(err->msg[0] != 0);
	if (needle)
		assert_non_null(strstr(err->msg, needle));
}

static void bad_quant(int64_t rows, int64_t cols, const fos_qcfg *c, const char *needle)
{
	fos_err err = {0};
	expect_einval(fos_qcfg_check(c, rows, cols, &err), &err, needle);
	uint16_t *x = calloc((size_t)(rows * cols), 2);
	uint8_t *codes = malloc((size_t)(rows * cols)), *sc = malloc((size_t)(rows * cols));
	float *am = malloc(4 * (size_t)rows);
	assert_true(x && codes && sc && am);
	memset(&err, 0, sizeof err);
	expect_einval(ref_be_quantize(g_be, x, FOS_BF16, rows, cols, c, NULL, codes, sc, am, NULL, &err), &err, needle);
	free(x);
	free(codes);
	free(sc);
	free(am);
}

static void test_bad_quantize_inputs(void **state)
{
	(void)state;
	fos_qcfg c = fos_qcfg_default();
	bad_quant(16, 40, &c, "40");   /* cols not divisible by 16 */
	bad_quant(32, 1000, &c, "1000");
	c.block = FOS_BLOCK_16X16;
	bad_quant(24, 64, &c, "24");   /* 16x16 with rows not divisible by 16 */
	bad_quant(100, 320, &c, "100");
	c.row_scaled = 1;              /* row-scaled with 16x16 */
	bad_quant(32, 64, &c, NULL);
	c = fos_qcfg_default();
	c.bound = 300;
	bad_quant(16, 64, &c, "300");  /* bound not in {256, 448} */
	c.bound = 0;
	bad_quant(16, 64, &c, NULL);
	c.bound = 512;
	bad_quant(16, 64, &c, "512");
	c = fos_qcfg_default();
	c.recipe = 7;                  /* out-of-range enums */
	bad_quant(16, 64, &c, NULL);
	c = fos_qcfg_default();
	c.block = 5;
	bad_quant(16, 64, &c, NULL);
	c = fos_qcfg_default();
	c.err_mode = 9;
	bad_quant(16, 64, &c, NULL);
	/* the defaults are 4over6, 1x16, MAE, bound 256, per tensor */
	c = fos_qcfg_default();
	assert_int_equal(c.recipe, FOS_RECIPE_4OVER6);
	assert_int_equal(c.block, FOS_BLOCK_1X16);
	assert_int_equal(c.err_mode, FOS_ERR_MAE);
	assert_int_equal(c.bound, 256);
	assert_int_equal(c.row_scaled, 0);
	fos_err err = {0};
	assert_int_equal(fos_qcfg_check(&c, 100, 320, &err), FOS_OK);
}

static void test_bad_dequantize_bound(void **state)
{
	(void)state;
	uint8_t codes[32] = {0}, sc[4] = {0};
	float am = 1.0f;
	uint16_t out[64];
	fos_err err = {0};
	expect_einval(ref_be_dequantize(g_be, codes, sc, &am, 1, 64, 300, 0, FOS_BF16, out, &err), &err, "300");
	memset(&err, 0, sizeof err);
	expect_einval(ref_be_dequantize(g_be, codes, sc, &am, 1, 64, 1024, 0, FOS_F32, out, &err), &err, "1024");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scale_is_candidate_and_error_is_min),
		cmocka_unit_test(test_both_candidates_win_on_random_data),
		cmocka_unit_test(test_46_not_worse_than_map_to_6),
		cmocka_unit_test(test_row_scaled_equals_per_row),
		cmocka_unit_test(test_16x16_scale_repeated_on_tile_rows),
		cmocka_unit_test(test_dequantize_quantize_sqnr),
		cmocka_unit_test(test_columnwise_weight_is_requantized_transpose),
		cmocka_unit_test(test_columnwise_activation_is_requantized_transpose),
		cmocka_unit_test(test_bad_quantize_inputs),
		cmocka_unit_test(test_bad_dequantize_bound),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
