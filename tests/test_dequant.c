/* test_dequant.c: the CPU backend's dequantize (NUMERICS.md section 6) and decode (value * scale,
 * the exact GEMM operand of section 7): hand-derived outputs for bound 256 and 448, bf16 and fp32;
 * bit for bit against the reference on the quantized special kinds and on arbitrary codes / scales
 * / amax values (per tensor and per row); a zeroed scale byte decodes to exactly 0 whatever the
 * amax; decode is exact in bf16; same bits with any thread count. */
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

static void deq(const uint8_t *codes, const uint8_t *sc, const float *amax, int64_t rows, int64_t cols, int bound,
		int rs, int dtype, void *out)
{
	fos_err err = {0};
	int rc = ref_be_dequantize(g_be, codes, sc, amax, rows, cols, bound, rs, dtype, out, &err);
	if (rc != FOS_OK)
		print_message("dequantize: %s\n", err.msg);
	assert_int_equal(rc, FOS_OK);
}

static void test_dequant_hand_values(void **state)
{
	(void)state;
	/* one row, 4 blocks; codes 0x1 (.5), 0x3 (1.5), 0x5 (3), 0x7 (6), 0xF (-6), 0x8 (-0) */
	uint8_t codes[32] = {0};
	for (int b = 0; b < 4; b++) {
		codes[b * 8 + 0] = 0x31; /* .5, 1.5 */
		codes[b * 8 + 1] = 0x75; /* 3, 6 */
		codes[b * 8 + 2] = 0x8F; /* -6, -0 */
	}
	uint8_t sc[4] = {0x38, 0x7E, 0x7E, 0x01};
	float amax = 1536.0f;
	uint16_t o[64];
	float of[64];
	/* bound 256, amax 1536: fp32(1/1536) = 0x3A2AAAAB = 11184811 * 2^-34.
	 * block 0: dec = rn(rn(1 * 1536) * 11184811 * 2^-34) = rn(33554433 * 2^-25) = 1: outputs .5 1.5 3 6 -6 -0 */
	deq(codes, sc, &amax, 1, 64, 256, 0, FOS_BF16, o);
	deq(codes, sc, &amax, 1, 64, 256, 0, FOS_F32, of);
	static const float b0[6] = {0.5f, 1.5f, 3, 6, -6, -0.0f};
	for (int i = 0; i < 6; i++) {
		assert_int_equal(o[i], ref_f32_bf16(b0[i]));
		assert_int_equal(ref_f2u(of[i]), ref_f2u(b0[i]));
	}
	/* block 1 with amax 1: dec = rn(448 * 11184811 * 2^-34) = 78293677 * 2^-28 -> 24 bits:
	 * 78293680 * 2^-28 = 0x3E955556. .5 dec = 0x3E155556 -> bf16 0x3E15; 1.5 dec = 0x3EE00001 ->
	 * 0x3EE0; 3 dec = 0x3F600001 -> 0x3F60; 6 dec = 0x3FE00001 -> 0x3FE0. */
	float one = 1.0f;
	deq(codes, sc, &one, 1, 64, 256, 0, FOS_BF16, o);
	deq(codes, sc, &one, 1, 64, 256, 0, FOS_F32, of);
	static const uint32_t f1[4] = {0x3E155556u, 0x3EE00001u, 0x3F600001u, 0x3FE00001u};
	static const uint16_t h1[4] = {0x3E15, 0x3EE0, 0x3F60, 0x3FE0};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(ref_f2u(of[16 + i]), f1[i]);
		assert_int_equal(o[16 + i], h1[i]);
	}
	assert_int_equal(ref_f2u(of[20]), 0xBFE00001u);
	assert_int_equal(o[20], 0xBFE0);
	/* bound 448, amax 1: dec = rn(448 * fp32(1/2688) = 0x39C30C31) = fp32(1/6) = 0x3E2AAAAB;
	 * .5 dec = 0x3DAAAAAB -> bf16 0x3DAB (rounds up); 1.5 dec = .25; 3 dec = .5; 6 dec =
	 * rn(1 + 2^-25 ...) = 1. */
	deq(codes, sc, &one, 1, 64, 448, 0, FOS_BF16, o);
	deq(codes, sc, &one, 1, 64, 448, 0, FOS_F32, of);
	static const uint32_t f2[4] = {0x3DAAAAABu, 0x3E800000u, 0x3F000000u, 0x3F800000u};
	static const uint16_t h2[4] = {0x3DAB, 0x3E80, 0x3F00, 0x3F80};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(ref_f2u(of[32 + i]), f2[i]);
		assert_int_equal(o[32 + i], h2[i]);
	}
	/* block 3, scale 2^-9, amax 3, bound 256: dec = rn(rn(2^-9 * 3) * fp32(1/1536)) =
	 * 3 * 2^-9 * 11184811 * 2^-34 = 33554433 * 2^-43 -> 2^-18 (0x36800000); 6 dec = 1.5 * 2^-16. */
	float three = 3.0f;
	deq(codes, sc, &three, 1, 64, 256, 0, FOS_F32, of);
	assert_int_equal(ref_f2u(of[48]), 0x36000000u);
	assert_int_equal(ref_f2u(of[51]), 0x37C00000u);
}

/* Bitwise vs the reference on quantized special kinds (the backend's own codes). */
static void test_dequant_bitwise_kinds(void **state)
{
	(void)state;
	const int64_t rows = 128, cols = 256, n = rows * cols;
	uint16_t *x = malloc(2 * (size_t)n), *ob = malloc(2 * (size_t)n), *rb = malloc(2 * (size_t)n);
	float *of = malloc(4 * (size_t)n), *rf = malloc(4 * (size_t)n);
	uint8_t *codes = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16);
	float am[128];
	assert_true(x && ob && rb && of && rf && codes && sc);
	int bad = 0;
	for (int kind = 0; kind < REF_NKINDS; kind++) {
		ref_gen_bf16(kind, rows, cols, 500 + (uint64_t)kind, x);
		for (int cfgi = 0; cfgi < 4; cfgi++) {
			fos_qcfg c = fos_qcfg_default();
			c.bound = (cfgi & 1) ? 448 : 256;
			c.row_scaled = cfgi == 2;
			c.block = cfgi == 3 ? FOS_BLOCK_16X16 : FOS_BLOCK_1X16;
			fos_err err = {0};
			assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, rows, cols, &c, NULL, codes, sc, am, NULL, &err),
					 FOS_OK);
			deq(codes, sc, am, rows, cols, c.bound, c.row_scaled, FOS_BF16, ob);
			deq(codes, sc, am, rows, cols, c.bound, c.row_scaled, FOS_F32, of);
			ref_dequantize(codes, sc, am, rows, cols, c.bound, c.row_scaled, rf);
			ref_f32_to_bf16_arr(rf, rb, n);
			int64_t i = ref_cmp_f32(of, rf, n), j = ref_cmp_bf16(ob, rb, n);
			if (i >= 0 || j >= 0) {
				print_message("%s cfg %d: f32 mismatch at %ld, bf16 mismatch at %ld\n", ref_kind_name(kind), cfgi,
					      (long)i, (long)j);
				bad++;
			}
		}
	}
	assert_int_equal(bad, 0);
	free(x);
	free(ob);
	free(rb);
	free(of);
	free(rf);
	free(codes);
	free(sc);
}

/* Arbitrary codes, scale bytes 0x00..0x7E and amax values (tiny, huge, subnormal, 0, inf). */
static void test_dequant_bitwise_arbitrary(void **state)
{
	(void)state;
	const int64_t rows = 96, cols = 320, n = rows * cols;
	uint8_t *codes = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16);
	uint16_t *ob = malloc(2 * (size_t)n), *rb = malloc(2 * (size_t)n);
	float *of = malloc(4 * (size_t)n), *rf = malloc(4 * (size_t)n);
	float am[96];
	assert_true(codes && sc && ob && rb && of && rf);
	ref_rng r;
	ref_rng_seed(&r, 8);
	static const float specials[] = {0.0f, 1.0f, 1536.0f, 2688.0f, 3.0f, 0x1p-133f, 0x1p-126f, FLT_MAX,
					 3.3895314e38f, 1e-20f, 7.0f, INFINITY};
	int bad = 0;
	for (int round = 0; round < 8; round++) {
		for (int64_t i = 0; i < n / 2; i++)
			codes[i] = (uint8_t)ref_rng_u64(&r);
		for (int64_t i = 0; i < n / 16; i++)
			sc[i] = (uint8_t)(ref_rng_u64(&r) % 0x7F);
		for (int i = 0; i < rows; i++)
			am[i] = (i % 3 == 0) ? specials[(size_t)(i / 3 + round) % (sizeof specials / sizeof specials[0])]
					     : (float)ldexp(1.0 + ref_rng_uniform(&r), -60 + (int)(ref_rng_u64(&r) % 120));
		for (int v = 0; v < 4; v++) {
			int bound = (v & 1) ? 448 : 256, rs = v >> 1;
			float a0 = am[(size_t)round % 96];
			const float *ap = rs ? am : &a0;
			deq(codes, sc, ap, rows, cols, bound, rs, FOS_BF16, ob);
			deq(codes, sc, ap, rows, cols, bound, rs, FOS_F32, of);
			ref_dequantize(codes, sc, ap, rows, cols, bound, rs, rf);
			ref_f32_to_bf16_arr(rf, rb, n);
			int64_t i = ref_cmp_f32(of, rf, n), j = ref_cmp_bf16(ob, rb, n);
			if (i >= 0 || j >= 0) {
				if (i >= 0)
					print_message("round %d v %d: f32[%ld] %a, reference %a\n", round, v, (long)i, of[i], rf[i]);
				if (j >= 0)
					print_message("round %d v %d: bf16[%ld] 0x%04x, reference 0x%04x\n", round, v, (long)j,
						      ob[j], rb[j]);
				bad++;
			}
		}
	}
	assert_int_equal(bad, 0);
	free(codes);
	free(sc);
	free(ob);
	free(rb);
	free(of);
	free(rf);
}

/* A zero scale byte decodes to exactly 0 whatever the amax (finite), codes nonzero. */
static void test_zeroed_block_is_exactly_zero(void **state)
{
	(void)state;
	const int64_t rows = 64, cols = 256, n = rows * cols, nb = cols / 16;
	uint16_t *x = malloc(2 * (size_t)n), *ob = malloc(2 * (size_t)n);
	float *of = malloc(4 * (size_t)n);
	uint8_t *codes = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16);
	float am[64];
	assert_true(x && ob && of && codes && sc);
	ref_gen_bf16(REF_RANDN, rows, cols, 3, x);
	static const float amaxes[] = {1.0f, 3.0f, 1e30f, FLT_MAX, 0x1p-133f, 0.0f};
	for (int rs = 0; rs < 2; rs++) {
		fos_qcfg c = fos_qcfg_default();
		c.row_scaled = rs;
		fos_err err = {0};
		assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, rows, cols, &c, NULL, codes, sc, am, NULL, &err), FOS_OK);
		for (int64_t i = 0; i < n / 16; i += 3)
			sc[i] = 0;
		for (int64_t i = 0; i < n / 2; i += 5)
			codes[i] = 0xF7; /* +-6 in zeroed blocks too */
		for (size_t a = 0; a < sizeof amaxes / sizeof amaxes[0]; a++) {
			for (int r = 0; r < rows; r++)
				am[r] = amaxes[(a + (size_t)r) % (sizeof amaxes / sizeof amaxes[0])];
			for (int bound = 256; bound <= 448; bound += 192) {
				deq(codes, sc, am, rows, cols, bound, rs, FOS_BF16, ob);
				deq(codes, sc, am, rows, cols, bound, rs, FOS_F32, of);
				for (int64_t r = 0; r < rows; r++)
					for (int64_t col = 0; col < cols; col++)
						if (sc[r * nb + col / 16] == 0) {
							assert_true(of[r * cols + col] == 0.0f);
							assert_int_equal(ob[r * cols + col] & 0x7FFFu, 0);
						}
			}
		}
	}
	free(x);
	free(ob);
	free(of);
	free(codes);
	free(sc);
}

static void test_decode_exact(void **state)
{
	(void)state;
	const int64_t rows = 64, cols = 512, n = rows * cols;
	uint8_t *codes = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16);
	uint16_t *ob = malloc(2 * (size_t)n);
	float *rf = malloc(4 * (size_t)n);
	assert_true(codes && sc && ob && rf);
	ref_rng r;
	ref_rng_seed(&r, 9);
	for (int64_t i = 0; i < n / 2; i++)
		codes[i] = (uint8_t)ref_rng_u64(&r);
	for (int64_t i = 0; i < n / 16; i++)
		sc[i] = (uint8_t)(i % 0x7F); /* every scale byte */
	float am = 5.0f;
	fos_err err = {0};
	assert_int_equal(ref_be_decode(g_be, codes, sc, &am, rows, cols, 256, 0, ob, &err), FOS_OK);
	ref_decode(codes, sc, rows, cols, rf);
	for (int64_t i = 0; i < n; i++) {
		/* value * scale has at most 6 significant bits: exact in bf16 */
		assert_true(ref_bf16_f32(ref_f32_bf16(rf[i])) == rf[i]);
		assert_int_equal(ob[i], ref_f32_bf16(rf[i]));
	}
	free(codes);
	free(sc);
	free(ob);
	free(rf);
}

static void test_dequant_same_bits_any_thread_count(void **state)
{
	(void)state;
	const int64_t rows = 384, cols = 512, n = rows * cols;
	uint16_t *x = malloc(2 * (size_t)n), *o0 = malloc(2 * (size_t)n), *o1 = malloc(2 * (size_t)n);
	uint8_t *codes = malloc((size_t)n / 2), *sc = malloc((size_t)n / 16);
	float am[384];
	assert_true(x && o0 && o1 && codes && sc);
	ref_gen_bf16(REF_RANDN, rows, cols, 10, x);
	fos_qcfg c = fos_qcfg_default();
	c.row_scaled = 1;
	fos_err err = {0};
	assert_int_equal(ref_be_quantize(g_be, x, FOS_BF16, rows, cols, &c, NULL, codes, sc, am, NULL, &err), FOS_OK);
	deq(codes, sc, am, rows, cols, 256, 1, FOS_BF16, o0);
	int threads[3] = {1, 2, 4};
	for (int t = 0; t < 3; t++) {
		fos_backend *be = ref_cpu(threads[t]);
		assert_non_null(be);
		assert_int_equal(ref_be_dequantize(be, codes, sc, am, rows, cols, 256, 1, FOS_BF16, o1, &err), FOS_OK);
		assert_memory_equal(o0, o1, 2 * (size_t)n);
		be->destroy(be);
	}
	free(x);
	free(o0);
	free(o1);
	free(codes);
	free(sc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dequant_hand_values),
		cmocka_unit_test(test_dequant_bitwise_kinds),
		cmocka_unit_test(test_dequant_bitwise_arbitrary),
		cmocka_unit_test(test_zeroed_block_is_exactly_zero),
		cmocka_unit_test(test_decode_exact),
		cmocka_unit_test(test_dequant_same_bits_any_thread_count),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
