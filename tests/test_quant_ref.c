/* test_quant_ref.c: the CPU backend's quantize (codes, scales, amax and the decoded GEMM operand)
 * bit for bit against the independent reference of support_ref.c: every config (4/6 1x16 and
 * 16x16, MAE / MSE, bound 256 / 448, per-tensor / row-scaled, the gradient recipe), the shapes of
 * NUMERICS.md section 9, every special kind, bf16 and fp32 inputs, given amax values (smaller and
 * far larger than the data), every bf16 bit pattern, random fp32 bit patterns, and the same bits
 * whatever the thread count. */
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

typedef struct qconf {
	const char *name;
	int recipe, block, err_mode, bound, row_scaled;
} qconf;

static const qconf k_confs[] = {
	{"4/6 1x16 mae 256", FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},
	{"4/6 1x16 mse 256", FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 256, 0},
	{"4/6 1x16 mae 448", FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
	{"4/6 1x16 mse 448", FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
	{"4/6 16x16 mae 256", FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0},
	{"4/6 16x16 mse 256", FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 256, 0},
	{"4/6 16x16 mae 448", FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 448, 0},
	{"4/6 row-scaled mae 256", FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1},
	{"4/6 row-scaled mse 448", FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 1},
	{"nvfp4 gradient", FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
};
#define NCONFS ((int)(sizeof k_confs / sizeof k_confs[0]))

static fos_qcfg to_cfg(const qconf *q)
{
	fos_qcfg c = fos_qcfg_default();
	c.recipe = q->recipe;
	c.block = q->block;
	c.err_mode = q->err_mode;
	c.bound = q->bound;
	c.row_scaled = q->row_scaled;
	return c;
}

static const int64_t k_shapes[][2] = {{128, 256}, {64, 1024}, {384, 256}, {100, 320}};

/* Runs backend and reference on one input; returns 0 when every output byte matches. */
static int check_one(const char *label, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		     const float *amax_in)
{
	int64_t n = rows * cols;
	int rs = cfg->row_scaled && cfg->recipe == FOS_RECIPE_4OVER6;
	int64_t na = rs ? rows : 1;
	float *xf = malloc(sizeof(float) * (size_t)n);
	uint8_t *cr = malloc((size_t)n / 2), *cb = malloc((size_t)n / 2);
	uint8_t *sr = malloc((size_t)n / 16), *sb = malloc((size_t)n / 16);
	float *ar = malloc(sizeof(float) * (size_t)na), *ab = malloc(sizeof(float) * (size_t)na);
	float *dr = malloc(sizeof(float) * (size_t)n);
	uint16_t *db = malloc(2 * (size_t)n), *drb = malloc(2 * (size_t)n);
	assert_true(xf && cr && cb && sr && sb && ar && ab && dr && db && drb);
	if (dtype == FOS_BF16)
		ref_bf16_to_f32_arr(x, xf, n);
	else
		memcpy(xf, x, sizeof(float) * (size_t)n);
	assert_int_equal(ref_quantize(xf, rows, cols, cfg, amax_in, cr, sr, ar, NULL), 0);
	ref_decode(cr, sr, rows, cols, dr);
	ref_f32_to_bf16_arr(dr, drb, n);
	fos_err err = {0};
	int rc = ref_be_quantize(g_be, x, dtype, rows, cols, cfg, amax_in, cb, sb, ab, db, &err);
	int bad = 0;
	if (rc != FOS_OK) {
		print_message("%s: quantize rc %d: %s\n", label, rc, err.msg);
		bad = 1;
	} else {
		int64_t i;
		if ((i = ref_cmp_f32(ab, ar, na)) >= 0) {
			print_message("%s: amax[%ld] %a, reference %a\n", label, (long)i, ab[i], ar[i]);
			bad = 1;
		} else if ((i = ref_cmp_u8(sb, sr, n / 16)) >= 0) {
			int64_t r = i / (cols / 16), b = i % (cols / 16);
			print_message("%s: scale (%ld, block %ld) 0x%02x, reference 0x%02x; x[0..3] %a %a %a %a\n", label,
				      (long)r, (long)b, sb[i], sr[i], xf[r * cols + b * 16], xf[r * cols + b * 16 + 1],
				      xf[r * cols + b * 16 + 2], xf[r * cols + b * 16 + 3]);
			bad = 1;
		} else if ((i = ref_cmp_u8(cb, cr, n / 2)) >= 0) {
			int64_t r = i / (cols / 2), c = (i % (cols / 2)) * 2;
			print_message("%s: codes (%ld, %ld) 0x%02x, reference 0x%02x (x %a %a, scale 0x%02x)\n", label,
				      (long)r, (long)c, cb[i], cr[i], xf[r * cols + c], xf[r * cols + c + 1],
				      sr[r * (cols / 16) + c / 16]);
			bad = 1;
		} else if ((i = ref_cmp_bf16(db, drb, n)) >= 0) {
			print_message("%s: decoded[%ld] 0x%04x, reference 0x%04x\n", label, (long)i, db[i], drb[i]);
			bad = 1;
		}
	}
	free(xf);
	free(cr);
	free(cb);
	free(sr);
	free(sb);
	free(ar);
	free(ab);
	free(dr);
	free(db);
	free(drb);
	return bad;
}

static int valid_for(const fos_qcfg *c, int64_t rows)
{
	return !(c->block == FOS_BLOCK_16X16 && c->recipe == FOS_RECIPE_4OVER6 && rows % 16 != 0);
}

static void run_kinds(int dtype)
{
	int bad = 0, runs = 0;
	char label[160];
	for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
		int64_t rows = k_shapes[s][0], cols = k_shapes[s][1], n = rows * cols;
		void *x = malloc((size_t)n * 4);
		assert_non_null(x);
		for (int kind = 0; kind < REF_NKINDS; kind++) {
			uint64_t seed = 1000 + 17 * s + (uint64_t)kind;
			if (dtype == FOS_BF16)
				ref_gen_bf16(kind, rows, cols, seed, x);
			else
				ref_gen_f32(kind, rows, cols, seed, x);
			for (int q = 0; q < NCONFS; q++) {
				fos_qcfg c = to_cfg(&k_confs[q]);
				if (!valid_for(&c, rows))
					continue;
				snprintf(label, sizeof label, "%s %s (%ld, %ld) %s", dtype == FOS_BF16 ? "bf16" : "f32",
					 ref_kind_name(kind), (long)rows, (long)cols, k_confs[q].name);
				bad += check_one(label, x, dtype, rows, cols, &c, NULL);
				runs++;
			}
		}
		free(x);
	}
	print_message("%d quantize runs, %d mismatching\n", runs, bad);
	assert_int_equal(bad, 0);
}

static void test_bitwise_kinds_bf16(void **state)
{
	(void)state;
	run_kinds(FOS_BF16);
}

static void test_bitwise_kinds_f32(void **state)
{
	(void)state;
	run_kinds(FOS_F32);
}

/* Given amax values: far below the data (scales saturate at 448, codes at 6), far above (scales
 * underflow to 0), and odd values; per tensor and per row. */
static void test_bitwise_given_amax(void **state)
{
	(void)state;
	const int64_t rows = 64, cols = 256, n = rows * cols;
	uint16_t *x = malloc(2 * (size_t)n);
	float *xf = malloc(4 * (size_t)n);
	float amr[64];
	assert_true(x && xf);
	static const float factors[] = {0.001f, 0.3f, 1.0f, 1.7f, 1e3f, 1e30f, 0x1p-120f};
	int bad = 0;
	char label[160];
	for (int kind = 0; kind < REF_NKINDS; kind++) {
		ref_gen_bf16(kind, rows, cols, 77 + (uint64_t)kind, x);
		ref_bf16_to_f32_arr(x, xf, n);
		float am = ref_amax(xf, n);
		if (am == 0 || isinf(am))
			am = 3.0f;
		for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++)
			for (int q = 0; q < NCONFS; q++) {
				fos_qcfg c = to_cfg(&k_confs[q]);
				int rs = c.row_scaled;
				for (int r = 0; r < rows; r++)
					amr[r] = am * factors[f] * (rs ? (float)(1 + r % 5) * 0.37f : 1.0f);
				snprintf(label, sizeof label, "given amax x%g %s %s", factors[f], ref_kind_name(kind),
					 k_confs[q].name);
				bad += check_one(label, x, FOS_BF16, rows, cols, &c, amr);
			}
	}
	free(x);
	free(xf);
	assert_int_equal(bad, 0);
}

/* Every bf16 bit pattern, as a 256 x 256 tensor: as is (amax inf), finite only, and sorted by
 * magnitude (rows of like magnitude, row-scaled and with given per-tensor amax values). */
static int cmp_mag(const void *a, const void *b)
{
	uint16_t x = *(const uint16_t *)a & 0x7FFFu, y = *(const uint16_t *)b & 0x7FFFu;
	return (x > y) - (x < y);
}

static void test_bitwise_every_bf16_pattern(void **state)
{
	(void)state;
	uint16_t *all = malloc(2 * 65536), *fin = malloc(2 * 65536), *srt = malloc(2 * 65536), *mix = malloc(2 * 65536);
	assert_true(all && fin && srt && mix);
	for (uint32_t i = 0; i < 65536; i++) {
		all[i] = (uint16_t)i;
		fin[i] = ((i & 0x7F80u) == 0x7F80u) ? 0 : (uint16_t)i;
	}
	/* a permutation (odd multiplier) so each block holds a spread of patterns */
	for (uint32_t i = 0; i < 65536; i++)
		mix[i] = fin[(i * 40503u) & 0xFFFFu];
	memcpy(srt, fin, 2 * 65536);
	qsort(srt, 65536, 2, cmp_mag);
	int bad = 0;
	char label[160];
	for (int q = 0; q < NCONFS; q++) {
		fos_qcfg c = to_cfg(&k_confs[q]);
		snprintf(label, sizeof label, "all patterns %s", k_confs[q].name);
		bad += check_one(label, all, FOS_BF16, 256, 256, &c, NULL);
		snprintf(label, sizeof label, "finite patterns %s", k_confs[q].name);
		bad += check_one(label, fin, FOS_BF16, 256, 256, &c, NULL);
		snprintf(label, sizeof label, "sorted patterns %s", k_confs[q].name);
		bad += check_one(label, srt, FOS_BF16, 256, 256, &c, NULL);
		snprintf(label, sizeof label, "mixed patterns %s", k_confs[q].name);
		bad += check_one(label, mix, FOS_BF16, 256, 256, &c, NULL);
	}
	/* sorted, per-tensor amax given at several magnitudes so every scale range is reached */
	fos_qcfg c = to_cfg(&k_confs[0]);
	for (int e = -130; e <= 127; e += 11) {
		float a = ldexpf(1.5f, e);
		snprintf(label, sizeof label, "sorted patterns amax 2^%d", e);
		bad += check_one(label, srt, FOS_BF16, 256, 256, &c, &a);
		fos_qcfg t = to_cfg(&k_confs[4]);
		bad += check_one(label, srt, FOS_BF16, 256, 256, &t, &a);
	}
	free(all);
	free(fin);
	free(srt);
	free(mix);
	assert_int_equal(bad, 0);
}

static void test_bitwise_random_f32_patterns(void **state)
{
	(void)state;
	const int64_t rows = 128, cols = 256, n = rows * cols;
	float *x = malloc(4 * (size_t)n);
	assert_non_null(x);
	ref_rng r;
	ref_rng_seed(&r, 99);
	int bad = 0;
	char label[160];
	for (int round = 0; round < 2; round++) {
		for (int64_t i = 0; i < n; i++) {
			uint32_t u = (uint32_t)ref_rng_u64(&r);
			if (round == 1) /* exponents within ~2^-40 .. 2^40 */
				u = (u & 0x807FFFFFu) | ((uint32_t)(87 + ref_rng_u64(&r) % 80) << 23);
			else if ((u & 0x7F800000u) == 0x7F800000u)
				u &= 0xBFFFFFFFu; /* finite */
			x[i] = ref_u2f(u);
		}
		for (int q = 0; q < NCONFS; q++) {
			fos_qcfg c = to_cfg(&k_confs[q]);
			snprintf(label, sizeof label, "random f32 bits round %d %s", round, k_confs[q].name);
			bad += check_one(label, x, FOS_F32, rows, cols, &c, NULL);
		}
	}
	free(x);
	assert_int_equal(bad, 0);
}

/* Same bits with 1, 2 and 4 threads (and fos_backend_open("cpu")), and on a repeated call. */
static void test_same_bits_any_thread_count(void **state)
{
	(void)state;
	const int64_t rows = 384, cols = 512, n = rows * cols;
	uint16_t *x = malloc(2 * (size_t)n);
	assert_non_null(x);
	ref_gen_bf16(REF_HEAVY, rows, cols, 5, x);
	int threads[3] = {1, 2, 4};
	uint8_t *c0 = malloc((size_t)n / 2), *c1 = malloc((size_t)n / 2), *s0 = malloc((size_t)n / 16),
		*s1 = malloc((size_t)n / 16);
	float a0[384], a1[384];
	assert_true(c0 && c1 && s0 && s1);
	for (int q = 0; q < NCONFS; q++) {
		fos_qcfg c = to_cfg(&k_confs[q]);
		fos_err err = {0};
		assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, rows, cols, &c, NULL, c0, s0, a0, NULL, &err), FOS_OK);
		for (int t = 0; t < 4; t++) {
			/* 1, 2, 4 threads, and the default backend fos_backend_open("cpu") */
			fos_err e = {0};
			fos_backend *be = t < 3 ? ref_cpu(threads[t]) : fos_backend_open("cpu", &e);
			assert_non_null(be);
			assert_string_equal(be->name, "cpu");
			for (int rep = 0; rep < 2; rep++) {
				assert_int_equal(ref_be_quantize(be, x, FOS_BF16, rows, cols, &c, NULL, c1, s1, a1, NULL, &err),
						 FOS_OK);
				assert_true(ref_cmp_u8(c0, c1, n / 2) < 0);
				assert_true(ref_cmp_u8(s0, s1, n / 16) < 0);
				assert_true(ref_cmp_f32(a0, a1, c.row_scaled ? rows : 1) < 0);
			}
			be->destroy(be);
		}
	}
	free(x);
	free(c0);
	free(c1);
	free(s0);
	free(s1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bitwise_kinds_bf16),
		cmocka_unit_test(test_bitwise_kinds_f32),
		cmocka_unit_test(test_bitwise_given_amax),
		cmocka_unit_test(test_bitwise_every_bf16_pattern),
		cmocka_unit_test(test_bitwise_random_f32_patterns),
		cmocka_unit_test(test_same_bits_any_thread_count),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
