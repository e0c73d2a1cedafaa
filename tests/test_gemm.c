/* test_gemm.c: the CPU backend's bf16 x bf16 -> FP32 GEMM with the section 7 epilogue, colsum and
 * transpose: against an FP64 reference (tight elementwise bound), bit for bit where the FP32
 * accumulation is exact (small-integer operands) with random epilogues emulated in binary32,
 * hand-derived epilogue cases (alpha = rn(ga * gb), row scale before the cast, bias after it), and
 * determinism: the same bits on repeated calls and with 1, 2 and 4 threads. */
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

static void gemm_plain(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
		       uint16_t *y)
{
	fos_err err = {0};
	int rc = ref_be_gemm(be, a, b, m, n, k, NULL, 1.0f, NULL, 1.0f, NULL, NULL, y, &err);
	if (rc != FOS_OK)
		print_message("gemm (%ld, %ld, %ld): %s\n", (long)m, (long)n, (long)k, err.msg);
	assert_int_equal(rc, FOS_OK);
}

/* |y - ref| <= 2^-8 |ref| (bf16 rounding: unit roundoff 2^-8) + K 2^-23 sum |a b| (FP32 accumulation, generous 2x) */
static int check_vs_f64(const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k, const uint16_t *y)
{
	double *ad = malloc(8 * (size_t)(m * k)), *bd = malloc(8 * (size_t)(n * k));
	assert_true(ad && bd);
	ref_bf16_to_f64_arr(a, ad, m * k);
	ref_bf16_to_f64_arr(b, bd, n * k);
	int bad = 0;
	double worst = 0;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0, sa = 0;
			for (int64_t l = 0; l < k; l++) {
				s += ad[i * k + l] * bd[j * k + l];
				sa += fabs(ad[i * k + l] * bd[j * k + l]);
			}
			double got = ref_bf16_f32(y[i * n + j]);
			double tol = ldexp(fabs(s), -8) + (double)k * ldexp(sa, -23);
			double e = fabs(got - s);
			if (tol > 0 && e / tol > worst)
				worst = e / tol;
			if (!(e <= tol)) {
				if (bad < 5)
					print_message("(%ld, %ld): %.9g vs f64 %.9g (tol %.3g)\n", (long)i, (long)j, got, s, tol);
				bad++;
			}
		}
	print_message("gemm (%ld, %ld, %ld): worst error / bound = %.3f\n", (long)m, (long)n, (long)k, worst);
	free(ad);
	free(bd);
	return bad;
}

static void test_gemm_vs_f64(void **state)
{
	(void)state;
	static const int64_t shapes[][3] = {{128, 256, 384}, {64, 512, 1024}, {256, 128, 128}, {16, 16, 4096}};
	ref_rng r;
	ref_rng_seed(&r, 1);
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(n * k)), *y = malloc(2 * (size_t)(m * n));
		assert_true(a && b && y);
		ref_randn_bf16(a, m * k, 1.0, &r);
		ref_randn_bf16(b, n * k, 0.05, &r);
		if (s == 3) /* a mean offset: cancellation-free large sums */
			for (int64_t i = 0; i < m * k; i++)
				a[i] = ref_f32_bf16(ref_bf16_f32(a[i]) + 3.0f);
		gemm_plain(g_be, a, b, m, n, k, y);
		assert_int_equal(check_vs_f64(a, b, m, n, k, y), 0);
		free(a);
		free(b);
		free(y);
	}
}

/* Small-integer operands: every partial sum is an integer below 2^24, so the FP32 accumulation is
 * exact in any order and the output is bf16(exact). */
static void int_operands(uint16_t *p, int64_t n, int range, ref_rng *r)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = ref_f32_bf16((float)((int)(ref_rng_u64(r) % (uint64_t)(2 * range + 1)) - range));
}

static double exact_dot(const uint16_t *a, const uint16_t *b, int64_t k)
{
	double s = 0;
	for (int64_t l = 0; l < k; l++)
		s += (double)ref_bf16_f32(a[l]) * (double)ref_bf16_f32(b[l]);
	return s;
}

/* The epilogue of backend.h / NUMERICS.md section 7, one binary32 operation per statement. */
static uint16_t epilogue(float acc, const float *a_amax, float a_dinv, const float *b_amax, float b_dinv,
			 const float *rs, const uint16_t *bias)
{
	float ga = a_amax ? a_amax[0] * a_dinv : a_dinv;
	float gb = b_amax ? b_amax[0] * b_dinv : b_dinv;
	float alpha = ga * gb;
	float t = acc * alpha;
	if (rs)
		t = t * rs[0];
	uint16_t y = ref_f32_bf16(t);
	if (bias) {
		float s = ref_bf16_f32(y) + ref_bf16_f32(bias[0]);
		y = ref_f32_bf16(s);
	}
	return y;
}

static void test_gemm_exact_accumulation_bitwise(void **state)
{
	(void)state;
	static const int64_t shapes[][3] = {{128, 128, 256}, {64, 96, 1024}, {384, 256, 128}};
	ref_rng r;
	ref_rng_seed(&r, 2);
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(n * k)), *y = malloc(2 * (size_t)(m * n));
		assert_true(a && b && y);
		int_operands(a, m * k, 8, &r);
		int_operands(b, n * k, 8, &r);
		gemm_plain(g_be, a, b, m, n, k, y);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double e = exact_dot(a + i * k, b + j * k, k);
				assert_true(fabs(e) < 16777216.0);
				assert_int_equal(y[i * n + j], ref_f32_bf16((float)e));
			}
		free(a);
		free(b);
		free(y);
	}
}

static void test_gemm_epilogue_random_bitwise(void **state)
{
	(void)state;
	const int64_t m = 64, n = 48, k = 64;
	uint16_t a[64 * 64], b[48 * 64], y[64 * 48], bias[48];
	float rs[64];
	ref_rng r;
	ref_rng_seed(&r, 3);
	int bad = 0;
	for (int round = 0; round < 48; round++) {
		int_operands(a, m * k, 16, &r);
		int_operands(b, n * k, 16, &r);
		float aa = (float)ldexp(1.0 + ref_rng_uniform(&r), (int)(ref_rng_u64(&r) % 24) - 4);
		float ba = (float)ldexp(1.0 + ref_rng_uniform(&r), (int)(ref_rng_u64(&r) % 24) - 4);
		static const float dinvs[4] = {0.0f, 0.0f, 0.25f, 3.0f}; /* [0], [1] unused */
		float ad = (round % 4 == 0) ? 1.0f / 1536.0f : (round % 4 == 1 ? 1.0f / 2688.0f : dinvs[round % 4]);
		float bd = (round % 3 == 0) ? 1.0f / 1536.0f : (float)(0.5 + ref_rng_uniform(&r));
		for (int i = 0; i < m; i++)
			rs[i] = (float)ldexp(1.0 + ref_rng_uniform(&r), (int)(ref_rng_u64(&r) % 10) - 5);
		for (int j = 0; j < n; j++)
			bias[j] = ref_f32_bf16((float)(100.0 * ref_rng_normal(&r)));
		const float *pa = (round & 1) ? &aa : NULL, *pb = (round & 2) ? &ba : NULL;
		const float *prs = (round & 4) ? rs : NULL;
		const uint16_t *pbias = (round & 8) ? bias : NULL;
		fos_err err = {0};
		assert_int_equal(ref_be_gemm(g_be, a, b, m, n, k, pa, ad, pb, bd, prs, pbias, y, &err), FOS_OK);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				float acc = (float)exact_dot(a + i * k, b + j * k, k);
				uint16_t want = epilogue(acc, pa, ad, pb, bd, prs ? prs + i : NULL, pbias ? pbias + j : NULL);
				if (y[i * n + j] != want) {
					if (bad < 5)
						print_message("round %d (%ld, %ld): 0x%04x, want 0x%04x (acc %g)\n", round, (long)i,
							      (long)j, y[i * n + j], want, acc);
					bad++;
				}
			}
	}
	assert_int_equal(bad, 0);
}

static void test_gemm_epilogue_hand(void **state)
{
	(void)state;
	/* a (2, 16): [256, 1, 0..], [1, 1, 0..]; b (2, 16): [1, 1, 0..], [1, 3, 0..].
	 * acc = [[257, 259], [2, 4]] (exact). */
	uint16_t a[32] = {0}, b[32] = {0}, y[4];
	a[0] = ref_f32_bf16(256);
	a[1] = a[16] = a[17] = ref_f32_bf16(1);
	b[0] = b[1] = b[16] = ref_f32_bf16(1);
	b[17] = ref_f32_bf16(3);
	fos_err err = {0};
	/* plain: bf16(257) = tie 256 / 258 -> 256 (0x4380); bf16(259) = tie 258 / 260 -> 260 (0x4382) */
	assert_int_equal(ref_be_gemm(g_be, a, b, 2, 2, 16, NULL, 1.0f, NULL, 1.0f, NULL, NULL, y, &err), FOS_OK);
	assert_int_equal(y[0], 0x4380);
	assert_int_equal(y[1], 0x4382);
	assert_int_equal(y[2], 0x4000);
	assert_int_equal(y[3], 0x4080);
	/* bias [1, -1] is added after the cast: bf16(256 + 1) = 256, bf16(260 - 1) = 260, 3, 3.
	 * (Adding it to the FP32 accumulator first would give bf16(258) = 0x4381 twice.) */
	uint16_t bias[2] = {0x3F80, 0xBF80};
	assert_int_equal(ref_be_gemm(g_be, a, b, 2, 2, 16, NULL, 1.0f, NULL, 1.0f, NULL, bias, y, &err), FOS_OK);
	assert_int_equal(y[0], 0x4380);
	assert_int_equal(y[1], 0x4382);
	assert_int_equal(y[2], 0x4040);
	assert_int_equal(y[3], 0x4040);
	/* alpha = rn(rn(2 * .25) * 1) = .5; row scale [3, 1] applied before the cast:
	 * 257 * .5 = 128.5, * 3 = 385.5 -> bf16 386 (0x43C1); 259 * .5 * 3 = 388.5 -> 388 (0x43C2);
	 * row 1: 1, 2. (Casting 128.5 first would give 128 -> 384.) */
	float a_amax = 2.0f, rs[2] = {3.0f, 1.0f};
	assert_int_equal(ref_be_gemm(g_be, a, b, 2, 2, 16, &a_amax, 0.25f, NULL, 1.0f, rs, NULL, y, &err), FOS_OK);
	assert_int_equal(y[0], 0x43C1);
	assert_int_equal(y[1], 0x43C2);
	assert_int_equal(y[2], 0x3F80);
	assert_int_equal(y[3], 0x4000);
	/* per-tensor NVFP4 alpha: a_amax 3, b_amax 1536, both dinv fp32(1/1536) = 11184811 * 2^-34.
	 * ga = rn(3 * 11184811 * 2^-34) = rn((2^25 + 1) * 2^-34) = 2^-9; gb = rn((2^25 + 1) * 2^-25) = 1;
	 * alpha = 2^-9. 257 * 2^-9 = 0.501953125: tie 0x3F00 / 0x3F01 -> 0x3F00; 259 * 2^-9 -> tie
	 * 0x3F01 / 0x3F02 -> 0x3F02. (alpha = rn(rn(3 * 1536) * rn(dinv * dinv)) would be 2^-9 + 2^-32,
	 * pushing 257 alpha above the tie to 0x3F01.) */
	float a3 = 3.0f, b1536 = 1536.0f, dinv = 1.0f / 1536.0f;
	assert_int_equal(ref_f2u(dinv), 0x3A2AAAABu);
	assert_int_equal(ref_be_gemm(g_be, a, b, 2, 2, 16, &a3, dinv, &b1536, dinv, NULL, NULL, y, &err), FOS_OK);
	assert_int_equal(y[0], 0x3F00);
	assert_int_equal(y[1], 0x3F02);
	assert_int_equal(y[2], 0x3B80); /* 2 * 2^-9 = 2^-8 */
	assert_int_equal(y[3], 0x3C00); /* 2^-7 */
}

static void test_gemm_odd_shapes(void **state)
{
	(void)state;
	/* backend.h puts no divisibility constraint on the GEMM: any positive m, n, k */
	static const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 13}, {130, 3, 259}, {3, 130, 17}, {33, 65, 129}};
	ref_rng r;
	ref_rng_seed(&r, 4);
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(n * k)), *y = malloc(2 * (size_t)(m * n));
		assert_true(a && b && y);
		int_operands(a, m * k, 8, &r);
		int_operands(b, n * k, 8, &r);
		gemm_plain(g_be, a, b, m, n, k, y);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				assert_int_equal(y[i * n + j], ref_f32_bf16((float)exact_dot(a + i * k, b + j * k, k)));
		ref_randn_bf16(a, m * k, 1.0, &r);
		ref_randn_bf16(b, n * k, 1.0, &r);
		gemm_plain(g_be, a, b, m, n, k, y);
		assert_int_equal(check_vs_f64(a, b, m, n, k, y), 0);
		free(a);
		free(b);
		free(y);
	}
}

static void test_gemm_same_bits_any_thread_count(void **state)
{
	(void)state;
	static const int64_t shapes[][3] = {{256, 384, 1024}, {1, 512, 2048}, {512, 2, 1536}, {128, 128, 4096}};
	ref_rng r;
	ref_rng_seed(&r, 5);
	int threads[3] = {1, 2, 4};
	fos_backend *bes[3];
	for (int t = 0; t < 3; t++) {
		bes[t] = ref_cpu(threads[t]);
		assert_non_null(bes[t]);
	}
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(n * k));
		uint16_t *y0 = malloc(2 * (size_t)(m * n)), *y1 = malloc(2 * (size_t)(m * n)), bias[512];
		float *rs = malloc(4 * (size_t)m);
		assert_true(a && b && y0 && y1 && rs);
		ref_randn_bf16(a, m * k, 1.0, &r);
		ref_randn_bf16(b, n * k, 1.0, &r);
		ref_randn_bf16(bias, n, 1.0, &r);
		for (int64_t i = 0; i < m; i++)
			rs[i] = (float)(1.0 + ref_rng_uniform(&r));
		float aa = 3.7f, ba = 0.3f;
		fos_err err = {0};
		assert_int_equal(ref_be_gemm(bes[0], a, b, m, n, k, &aa, 1.0f / 1536.0f, &ba, 1.0f / 2688.0f, rs, bias, y0, &err),
				 FOS_OK);
		for (int t = 0; t < 3; t++)
			for (int rep = 0; rep < 2; rep++) {
				assert_int_equal(
					ref_be_gemm(bes[t], a, b, m, n, k, &aa, 1.0f / 1536.0f, &ba, 1.0f / 2688.0f, rs, bias, y1, &err),
					FOS_OK);
				assert_memory_equal(y0, y1, 2 * (size_t)(m * n));
			}
		free(a);
		free(b);
		free(y0);
		free(y1);
		free(rs);
	}
	for (int t = 0; t < 3; t++)
		bes[t]->destroy(bes[t]);
}

static void test_colsum(void **state)
{
	(void)state;
	ref_rng r;
	ref_rng_seed(&r, 6);
	static const int64_t shapes[][2] = {{128, 256}, {1024, 128}, {1, 64}, {37, 5}};
	int threads[3] = {1, 2, 4};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t m = shapes[s][0], n = shapes[s][1];
		uint16_t *dy = malloc(2 * (size_t)(m * n)), *db = malloc(2 * (size_t)n), *db2 = malloc(2 * (size_t)n);
		assert_true(dy && db && db2);
		fos_err err = {0};
		/* integers: exact sums in any order -> bf16(exact) */
		int_operands(dy, m * n, 100, &r);
		assert_int_equal(ref_be_colsum(g_be, dy, m, n, db, &err), FOS_OK);
		for (int64_t j = 0; j < n; j++) {
			double e = 0;
			for (int64_t i = 0; i < m; i++)
				e += ref_bf16_f32(dy[i * n + j]);
			assert_int_equal(db[j], ref_f32_bf16((float)e));
		}
		/* random: within FP32-accumulation + bf16 rounding of the FP64 sum; same bits any threads */
		ref_randn_bf16(dy, m * n, 1.0, &r);
		assert_int_equal(ref_be_colsum(g_be, dy, m, n, db, &err), FOS_OK);
		for (int64_t j = 0; j < n; j++) {
			double e = 0, ea = 0;
			for (int64_t i = 0; i < m; i++) {
				e += ref_bf16_f32(dy[i * n + j]);
				ea += fabs(ref_bf16_f32(dy[i * n + j]));
			}
			double got = ref_bf16_f32(db[j]);
			assert_true(fabs(got - e) <= ldexp(fabs(e), -8) + (double)m * ldexp(ea, -23));
		}
		for (int t = 0; t < 3; t++) {
			fos_backend *be = ref_cpu(threads[t]);
			assert_non_null(be);
			assert_int_equal(ref_be_colsum(be, dy, m, n, db2, &err), FOS_OK);
			assert_memory_equal(db, db2, 2 * (size_t)n);
			be->destroy(be);
		}
		free(dy);
		free(db);
		free(db2);
	}
}

static void test_transpose(void **state)
{
	(void)state;
	static const int64_t shapes[][2] = {{128, 256}, {1, 7}, {33, 65}, {256, 16}};
	ref_rng r;
	ref_rng_seed(&r, 7);
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
		for (size_t es = 2; es <= 4; es += 2) {
			uint8_t *src = malloc(es * (size_t)n), *dst = malloc(es * (size_t)n), *want = malloc(es * (size_t)n);
			assert_true(src && dst && want);
			for (int64_t i = 0; i < n * (int64_t)es; i++)
				src[i] = (uint8_t)ref_rng_u64(&r);
			for (int64_t i = 0; i < rows; i++)
				for (int64_t j = 0; j < cols; j++)
					memcpy(want + (j * rows + i) * (int64_t)es, src + (i * cols + j) * (int64_t)es, es);
			void *ds = ref_dev_put(g_be, src, es * (size_t)n), *dd = ref_dev_put(g_be, NULL, es * (size_t)n);
			assert_true(ds && dd);
			fos_err err = {0};
			assert_int_equal(g_be->transpose(g_be, ds, dd, rows, cols, es, &err), FOS_OK);
			assert_int_equal(ref_dev_get(g_be, dst, dd, es * (size_t)n), FOS_OK);
			assert_memory_equal(dst, want, es * (size_t)n);
			g_be->free(g_be, ds);
			g_be->free(g_be, dd);
			free(src);
			free(dst);
			free(want);
		}
	}
}

/* gemm_ex on stored-transposed operands gives the same bits as gemm on the transposed copies, for
 * every combination of trans_a / trans_b and an epilogue with alpha, row scale and bias. */
static void test_gemm_ex_transposed_operands(void **state)
{
	(void)state;
	if (!g_be->gemm_ex)
		skip();
	const int64_t m = 40, n = 70, k = 96;
	ref_rng r;
	ref_rng_seed(&r, 11);
	uint16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(n * k) * 2);
	uint16_t *at = malloc((size_t)(m * k) * 2), *bt = malloc((size_t)(n * k) * 2);
	uint16_t *want = malloc((size_t)(m * n) * 2), *got = malloc((size_t)(m * n) * 2), bias[70];
	float rs[40], amax = 3.5f;
	ref_randn_bf16(a, m * k, 1.0, &r);
	ref_randn_bf16(b, n * k, 0.5, &r);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < k; j++)
			at[j * m + i] = a[i * k + j];
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < k; j++)
			bt[j * n + i] = b[i * k + j];
	for (int i = 0; i < 40; i++)
		rs[i] = 0.25f * (float)(i + 1);
	for (int i = 0; i < 70; i++)
		bias[i] = ref_f32_bf16((float)i - 35.0f);
	fos_gemm_epi epi = {&amax, 0.5f, NULL, 1.0f / 1536.0f, rs, bias};
	fos_err err = {0};
	assert_int_equal(g_be->gemm(g_be, a, b, m, n, k, &epi, want, &err), FOS_OK);
	for (int t = 0; t < 4; t++) {
		memset(got, 0xAB, (size_t)(m * n) * 2);
		assert_int_equal(g_be->gemm_ex(g_be, (t & 1) ? at : a, t & 1, (t & 2) ? bt : b, (t & 2) != 0, m, n, k,
					       &epi, got, &err),
				 FOS_OK);
		assert_memory_equal(got, want, (size_t)(m * n) * 2);
	}
	free(a);
	free(b);
	free(at);
	free(bt);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_vs_f64),
		cmocka_unit_test(test_gemm_exact_accumulation_bitwise),
		cmocka_unit_test(test_gemm_epilogue_random_bitwise),
		cmocka_unit_test(test_gemm_epilogue_hand),
		cmocka_unit_test(test_gemm_odd_shapes),
		cmocka_unit_test(test_gemm_same_bits_any_thread_count),
		cmocka_unit_test(test_colsum),
		cmocka_unit_test(test_transpose),
		cmocka_unit_test(test_gemm_ex_transposed_operands),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
