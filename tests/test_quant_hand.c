/* test_quant_hand.c: the CPU backend's quantize on small blocks whose every output byte is derived
 * by hand from NUMERICS.md sections 2, 3 and 5 (derivations in the comments; float roundings
 * double-checked with an independent binary32 emulation): 4/6 candidate choice (strict <, ties to
 * map-to-6), MAE vs MSE, bound 448, the e2m1 and e4m3 ties, zero / -0 / NaN / inf / underflowing
 * blocks, global-scale edges, the gradient quantizer's multiply association, the 16x16 tree-sum
 * order, and the amax op (NaN-dropping, bf16 cast of fp32 inputs). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
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

static fos_qcfg cfg_make(int recipe, int block, int err_mode, int bound, int row_scaled)
{
	fos_qcfg c = fos_qcfg_default();
	c.recipe = recipe;
	c.block = block;
	c.err_mode = err_mode;
	c.bound = bound;
	c.row_scaled = row_scaled;
	return c;
}

static fos_qcfg cfg46(int err_mode, int bound)
{
	return cfg_make(FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, err_mode, bound, 0);
}

/* Quantizes one row of n (<= 64) bf16-exact values (asserted) with the backend. */
static void quant_row(const float *v, int n, const fos_qcfg *cfg, const float *amax_in, uint8_t *codes,
		      uint8_t *scales, float *amax_out)
{
	uint16_t x[64];
	assert_true(n <= 64 && n % 16 == 0);
	for (int i = 0; i < n; i++) {
		x[i] = ref_f32_bf16(v[i]);
		if (!isnan(v[i]))
			assert_int_equal(ref_f2u(ref_bf16_f32(x[i])), ref_f2u(v[i]));
		else
			x[i] = (uint16_t)(ref_f2u(v[i]) >> 16);
	}
	fos_err err = {0};
	int rc = ref_be_quantize(g_be, x, FOS_BF16, 1, n, cfg, amax_in, codes, scales, amax_out, NULL, &err);
	if (rc != FOS_OK)
		print_message("quantize: %s\n", err.msg);
	assert_int_equal(rc, FOS_OK);
}

static void expect_bytes(const uint8_t *got, const uint8_t *want, int n)
{
	for (int i = 0; i < n; i++) {
		if (got[i] != want[i])
			print_message("byte %d: got 0x%02x want 0x%02x\n", i, got[i], want[i]);
		assert_int_equal(got[i], want[i]);
	}
}

/* Block A: amax given as 1536 = D, so S_enc = rn(1536/1536) = 1, S_dec = 1.
 * bamax = 6: base = rn(rn(6/6) * 1) = 1; sf6 = e4m3(1) = 0x38; sf4 = e4m3(1.5) = 0x3C.
 * inv6 = 1; inv4 = rn(1/1.5) = fp32(2/3) = 0x3F2AAAAB (2/3 * (1 + 2^-25 ...)).
 * With A = D the candidate values are v = q * sf exactly.
 * map-to-6 codes: 6->6 (0x7), 4.5->[3.5,5]->4 (0x6, err .5), 2.25->2 (0x4, .25), 0.75 tie->1 (0x2, .25),
 *   -4.5->0xE (.5), -2.25->0xC (.25), 0->0, 3->0x5, 1.5->0x3, -0.75->0xA (.25), 6->7, -6->0xF,
 *   4.5->6 (.5), 2.25->4 (.25), 0.75->2 (.25), -3->0xD: err6 = 3 (MAE), 1.125 (MSE).
 * map-to-4: x * fp32(2/3) lands within half an ulp of x*2/3 (e.g. 6*0x3F2AAAAB = 4 + 1.2e-7 -> 4),
 *   so every element is exact on the 1.5 * e2m1 grid {0,.75,1.5,2.25,3,4.5,6}: err4 = 0 -> pick 4.
 *   codes 6->4 (0x6), 4.5->3 (0x5), 2.25->1.5 (0x3), .75->.5 (0x1), -4.5->0xD, -2.25->0xB, 0->0,
 *   3->2 (0x4), 1.5->1 (0x2), -.75->0x9, 6->0x6, -6->0xE, 4.5->0x5, 2.25->0x3, .75->0x1, -3->0xC.
 * Packed (low nibble = even element): 56 13 BD 40 92 E6 35 C1. */
static const float k_block_a[16] = {6, 4.5f, 2.25f, 0.75f, -4.5f, -2.25f, 0, 3, 1.5f, -0.75f, 6, -6, 4.5f, 2.25f, 0.75f, -3};
static const uint8_t k_block_a_codes4[8] = {0x56, 0x13, 0xBD, 0x40, 0x92, 0xE6, 0x35, 0xC1};

static void test_block_a_given_amax_picks_4(void **state)
{
	(void)state;
	uint8_t codes[8], sc[1];
	float amax = 1536.0f, aout = 0;
	for (int mode = 0; mode < 2; mode++) { /* both MAE and MSE: err4 = 0 < err6 */
		fos_qcfg c = cfg46(mode, 256);
		quant_row(k_block_a, 16, &c, &amax, codes, sc, &aout);
		assert_int_equal(sc[0], 0x3C);
		expect_bytes(codes, k_block_a_codes4, 8);
		assert_true(aout == 1536.0f);
	}
}

static void test_block_a_computed_amax(void **state)
{
	(void)state;
	/* amax = 6 -> S_enc = 1536/6 = 256, S_dec = 2^-8; base = rn(1 * 256) = 256: sf6 = 0x78 (256),
	 * sf4 = e4m3(384) = 0x7C. inv6 = 1/(256 * 2^-8) = 1, inv4 = 1/1.5: the same codes as above;
	 * v = q*sf*6/1536 = q (or 1.5 q) exactly, so again err4 = 0 -> scale 0x7C. */
	uint8_t codes[8], sc[1];
	float aout = 0;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(k_block_a, 16, &c, NULL, codes, sc, &aout);
	assert_true(aout == 6.0f);
	assert_int_equal(sc[0], 0x7C);
	expect_bytes(codes, k_block_a_codes4, 8);
}

static void test_block_a_bound_448(void **state)
{
	(void)state;
	uint8_t codes[8], sc[1];
	float aout = 0;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 448);
	/* amax 2688 = D(448): S_enc = 1, same derivation as bound 256 with amax 1536 -> 0x3C */
	float a1 = 2688.0f;
	quant_row(k_block_a, 16, &c, &a1, codes, sc, &aout);
	assert_int_equal(sc[0], 0x3C);
	expect_bytes(codes, k_block_a_codes4, 8);
	/* amax 1536, bound 448: S_enc = 2688/1536 = 1.75 exactly; base = 1 * 1.75 = 1.75: sf6 = 0x3E;
	 * sf4 = e4m3(2.625): tie 2.5 (mantissa 2, 0x42) / 2.75 (0x43) -> 0x42. S_dec = fp32(4/7);
	 * inv4 = rn(1/rn(2.5 * fp32(4/7))) = fp32(0.7). Codes: 6*.7=4.2->4 (0x6), 4.5*.7=3.15->3,
	 * 2.25*.7=1.575->1.5, .75*.7=.525->.5, 3*.7=2.1->2, 1.5*.7=1.05->1: the same codes as above.
	 * err4 (v = q*2.5*1536/2688) = 2.2857 < err6 (v = q*1.75*1536/2688 = q) = 3 -> pick 4: 0x42. */
	float a2 = 1536.0f;
	quant_row(k_block_a, 16, &c, &a2, codes, sc, &aout);
	assert_int_equal(sc[0], 0x42);
	expect_bytes(codes, k_block_a_codes4, 8);
}

static void test_equal_errors_pick_map_to_6(void **state)
{
	(void)state;
	/* [6, 1.25, 0 x14], amax 1536: map-to-6: 1.25 tie -> 1 (0x2), err .25; map-to-4: 1.25*2/3 =
	 * .833 -> 1 -> v 1.5, err .25; 6 exact in both. err4 == err6 (MAE .25, MSE .0625): the strict
	 * comparison keeps map-to-6: scale 0x38, codes 7 2 -> 0x27. */
	float v[16] = {6, 1.25f};
	uint8_t codes[8], sc[1], want[8] = {0x27};
	float amax = 1536.0f, aout;
	for (int mode = 0; mode < 2; mode++) {
		fos_qcfg c = cfg46(mode, 256);
		quant_row(v, 16, &c, &amax, codes, sc, &aout);
		assert_int_equal(sc[0], 0x38);
		expect_bytes(codes, want, 8);
	}
	/* all errors 0 in both ([6, 0...]) is a tie as well */
	float w[16] = {6};
	uint8_t want2[8] = {0x07};
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(w, 16, &c, &amax, codes, sc, &aout);
	assert_int_equal(sc[0], 0x38);
	expect_bytes(codes, want2, 8);
}

static void test_mae_and_mse_pick_differently(void **state)
{
	(void)state;
	/* [6, 5, 4, 2, 0 x12], amax 1536 (v = q * sf):
	 * map-to-6: 5 tie -> 4 (0x6, err 1), 4 (0x6), 2 (0x4): MAE 1, MSE 1.
	 * map-to-4: 5*2/3 = 3.33 -> 3 (0x5) v 4.5 err .5; 4*2/3 = 2.67 -> 3 (0x5) v 4.5 err .5;
	 *           2*2/3 = 1.33 -> 1.5 (0x3) v 2.25 err .25: MAE 1.25, MSE .5625.
	 * MAE: 1.25 < 1 false -> map-to-6, scale 0x38, codes 7 6 6 4 -> 67 46.
	 * MSE: .5625 < 1 -> map-to-4, scale 0x3C, codes 6 5 5 3 -> 56 35. */
	float v[16] = {6, 5, 4, 2};
	uint8_t codes[8], sc[1];
	uint8_t want_mae[8] = {0x67, 0x46}, want_mse[8] = {0x56, 0x35};
	float amax = 1536.0f, aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 16, &c, &amax, codes, sc, &aout);
	assert_int_equal(sc[0], 0x38);
	expect_bytes(codes, want_mae, 8);
	c = cfg46(FOS_ERR_MSE, 256);
	quant_row(v, 16, &c, &amax, codes, sc, &aout);
	assert_int_equal(sc[0], 0x3C);
	expect_bytes(codes, want_mse, 8);
}

static void test_two_blocks_amax_from_other_block(void **state)
{
	(void)state;
	/* 1x32, amax computed = 12. S_enc = 1536/12 = 128, S_dec = 2^-7.
	 * Block 0 [12, -12, 6, 3, 0..]: base = rn(2 * 128) = 256: sf6 0x78, sf4 0x7C (384).
	 *   inv6 = 1/(256/128) = .5: 12->6 (0x7), -12->0xF, 6->3 (0x5), 3->1.5 (0x3); v = q*256*12/1536
	 *   = 2q: exact, err6 = 0. inv4 = fp32(1/3): 12/3 -> 4 (err 0), 6 -> 2, 3 -> 1: err4 = 0.
	 *   tie -> map-to-6: 0x78, codes F7 35 00...
	 * Block 1 [1, .5, .25, .125, .75, -1, -.375, .375, 0..]: bamax 1: base = rn(fp32(1/6) * 128) =
	 *   21.333334: sf6 = e4m3 -> 22 (0x5B); sf4 = e4m3(rn(21.333334 * 1.5) = 32.0) = 0x60.
	 *   map-to-4: inv4 = 1/(32/128) = 4: 1->4 (0x6), .5->2 (0x4), .25->1 (0x2), .125->.5 (0x1),
	 *   .75->3 (0x5), -1->0xE, -.375->-1.5 (0xB), .375->0x3; v = q*32*12/1536 = q/4 = x: err4 = 0.
	 *   map-to-6 (grid 22/128 * e2m1) cannot hit 1 exactly: err6 > 0 -> pick 4: 0x60,
	 *   codes 46 12 E5 3B 00... */
	float v[32] = {12, -12, 6, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		       1, 0.5f, 0.25f, 0.125f, 0.75f, -1, -0.375f, 0.375f};
	uint8_t codes[16], sc[2], want[16] = {0xF7, 0x35, 0, 0, 0, 0, 0, 0, 0x46, 0x12, 0xE5, 0x3B, 0, 0, 0, 0};
	float aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 32, &c, NULL, codes, sc, &aout);
	assert_true(aout == 12.0f);
	assert_int_equal(sc[0], 0x78);
	assert_int_equal(sc[1], 0x60);
	expect_bytes(codes, want, 16);
	/* Dequantize (section 6): factor = fp32(1/1536) = 11184811 * 2^-34.
	 * dec0 = rn(rn(256*12) * factor) = rn(3072 * factor) = rn(2 + 2^-24) = 2; dec1 = rn(384 * factor)
	 * = rn(.25 + 2^-27) = .25. Outputs 2q and q/4: exactly the input. */
	uint16_t out[32];
	float outf[32];
	fos_err err = {0};
	assert_int_equal(ref_be_dequantize(g_be, codes, sc, &aout, 1, 32, 256, 0, FOS_BF16, out, &err), FOS_OK);
	assert_int_equal(ref_be_dequantize(g_be, codes, sc, &aout, 1, 32, 256, 0, FOS_F32, outf, &err), FOS_OK);
	for (int i = 0; i < 32; i++) {
		assert_true(ref_bf16_f32(out[i]) == v[i]);
		assert_true(outf[i] == v[i]);
	}
}

static void test_e2m1_ties_through_quantize(void **state)
{
	(void)state;
	/* amax 1536: S_enc 1, bamax 6 -> sf6 = 0x38 and inv6 = 1, so map-to-6 codes are e2m1(x). A NaN
	 * element makes both errors NaN, and NaN < NaN is false: map-to-6 is kept, so these blocks
	 * expose the e2m1 rounding of the backend directly (NaN codes as +6, 0x7, either sign).
	 * B0 ties: .25->0, .75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4 (even codes), and negated.
	 * B1 one bf16 step above / below each tie.
	 * B2 -NaN, -6, -0, 0, -2^-20 (-> -0 = 0x8), 2^-20, 5.5 (-> 6), -5.5. */
	float nan = NAN, mnan = ref_u2f(0xFFC00000u);
	float v[48] = {
		nan, 6, .25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -.25f, -.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5,
		nan, 6, .25f + 0x1p-9f, .75f + 0x1p-8f, 1.25f + 0x1p-7f, 1.75f + 0x1p-7f, 2.5f + 0x1p-6f,
		3.5f + 0x1p-6f, 5 + 0x1p-5f, .25f - 0x1p-10f, .75f - 0x1p-8f, 1.25f - 0x1p-7f, 1.75f - 0x1p-7f,
		2.5f - 0x1p-6f, 3.5f - 0x1p-6f, 5 - 0x1p-5f,
		mnan, -6, -0.0f, 0, -0x1p-20f, 0x1p-20f, 5.5f, -5.5f, 0, 0, 0, 0, 0, 0, 0, 0,
	};
	/* B0 codes 7 7 0 2 2 4 4 6 | 6 8 A A C C E E
	 * B1 codes 7 7 1 2 3 4 5 6 | 7 0 1 2 3 4 5 6
	 * B2 codes 7 F 8 0 8 0 7 F | 0 ... */
	static const uint8_t want[24] = {0x77, 0x20, 0x42, 0x64, 0x86, 0xAA, 0xCC, 0xEE, 0x77, 0x21, 0x43, 0x65,
					 0x07, 0x21, 0x43, 0x65, 0xF7, 0x08, 0x08, 0xF7, 0, 0, 0, 0};
	uint8_t codes[24], sc[3];
	float amax = 1536.0f, aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 48, &c, &amax, codes, sc, &aout);
	for (int b = 0; b < 3; b++)
		assert_int_equal(sc[b], 0x38);
	expect_bytes(codes, want, 24);
	/* computed amax = 6 (NaN dropped): S_enc 256, sf6 = 0x78, inv6 = 1: same codes */
	quant_row(v, 48, &c, NULL, codes, sc, &aout);
	assert_true(aout == 6.0f);
	for (int b = 0; b < 3; b++)
		assert_int_equal(sc[b], 0x78);
	expect_bytes(codes, want, 24);
}

static void test_nan_forces_map_to_6(void **state)
{
	(void)state;
	/* [0, 6, 4.5, 0..] amax 1536: err6 = .5 (MAE) / .25 (MSE) (4.5 -> 4), err4 = 0 (4.5 -> 3 * 1.5)
	 * -> 0x3C, codes 0 6 5 -> 60 05. The same block with a NaN first: errors NaN -> map-to-6: 0x38,
	 * codes 7 7 6 -> 77 06. */
	float a[16] = {0, 6, 4.5f}, b[16] = {NAN, 6, 4.5f};
	uint8_t codes[8], sc[1], wa[8] = {0x60, 0x05}, wb[8] = {0x77, 0x06};
	float amax = 1536.0f, aout;
	for (int mode = 0; mode < 2; mode++) {
		fos_qcfg c = cfg46(mode, 256);
		quant_row(a, 16, &c, &amax, codes, sc, &aout);
		assert_int_equal(sc[0], 0x3C);
		expect_bytes(codes, wa, 8);
		quant_row(b, 16, &c, &amax, codes, sc, &aout);
		assert_int_equal(sc[0], 0x38);
		expect_bytes(codes, wb, 8);
	}
}

static void test_e4m3_scale_ties_through_quantize(void **state)
{
	(void)state;
	/* amax 1536 (S_enc 1), so base = rn(bamax / 6).
	 * B0 [6.375, 1, 1, 1]: base = 1.0625, tie 1 / 1.125 -> 1.0 (0x38); sf4 = e4m3(1.59375) -> 1.625
	 *   (0x3D). map-to-6 (inv 1): 6.375 -> 6 (err .375), 1 -> 1: err6 .375. map-to-4 (inv 8/13):
	 *   6.375 -> 4 (v 6.5, .125), 1 -> .5 (v .8125, .1875 x3): err4 .6875 -> map-to-6: 0x38, 27 22.
	 * B1 [7.125, 1.25, 2.5, 5]: base = 1.1875, tie 1.125 / 1.25 -> 1.25 (0x3A); sf4 = e4m3(1.78125)
	 *   -> 1.75 (0x3E). map-to-6 (inv fp32(.8)): 7.125 -> 6 (v 7.5, .375), 1.25 -> 1, 2.5 -> 2,
	 *   5 -> 4 (exact): err6 .375; map-to-4 (inv 4/7): err4 .875 -> 0x3A, codes 7 2 4 6 -> 27 64.
	 * B2 [NaN, 6*2^-10]: base = 2^-10 exactly: tie 0 / 2^-9 -> 0 (sf6 = 0x00); NaN -> map-to-6:
	 *   scale 0x00, inv = FLT_MAX: both elements code 0x7 -> 77.
	 * B3 [6*2^-10]: sf6 = 0, sf4 = e4m3(1.5*2^-10) = 2^-9 (0x01). map-to-4: inv 512, 3 -> 0x5, v =
	 *   3*2^-9 = x, err 0; map-to-6 (scale 0) err = x > 0 -> pick 4: 0x01, codes 05. */
	float v[64] = {6.375f, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		       7.125f, 1.25f, 2.5f, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		       NAN, 6 * 0x1p-10f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		       6 * 0x1p-10f};
	uint8_t codes[32], sc[4];
	static const uint8_t want[32] = {0x27, 0x22, 0, 0, 0, 0, 0, 0, 0x27, 0x64, 0, 0, 0, 0, 0, 0,
					 0x77, 0, 0, 0, 0, 0, 0, 0, 0x05, 0, 0, 0, 0, 0, 0, 0};
	float amax = 1536.0f, aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 64, &c, &amax, codes, sc, &aout);
	assert_int_equal(sc[0], 0x38);
	assert_int_equal(sc[1], 0x3A);
	assert_int_equal(sc[2], 0x00);
	assert_int_equal(sc[3], 0x01);
	expect_bytes(codes, want, 32);
}

static void test_zero_blocks_and_negative_zero(void **state)
{
	(void)state;
	/* 1x32, amax 3. Block 0 [3, -1.5]: S_enc 512, base = .5 * 512 = 256: 0x78 / 0x7C; both
	 * candidates exact (v = 2 * 1.5 ... ) -> tie -> 0x78, codes 7 D -> D7.
	 * Block 1 all zero, -0 at odd positions: bamax 0 -> base 0 -> scale 0x00, inv FLT_MAX,
	 * 0 * FLT_MAX = +-0 -> codes 0 / 0x8: bytes 0x80. */
	float v[32] = {3, -1.5f};
	for (int i = 16; i < 32; i++)
		v[i] = (i & 1) ? -0.0f : 0.0f;
	uint8_t codes[16], sc[2], want[16] = {0xD7, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
	float aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 32, &c, NULL, codes, sc, &aout);
	assert_true(aout == 3.0f);
	assert_int_equal(sc[0], 0x78);
	assert_int_equal(sc[1], 0x00);
	expect_bytes(codes, want, 16);
	/* an all-zero tensor: amax 0 -> S_enc 1, all scales 0, codes 0 / 0x8 */
	float z[32];
	for (int i = 0; i < 32; i++)
		z[i] = (i % 3 == 0) ? -0.0f : 0.0f;
	quant_row(z, 32, &c, NULL, codes, sc, &aout);
	assert_true(aout == 0.0f);
	assert_int_equal(sc[0], 0);
	assert_int_equal(sc[1], 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(ref_code_at(codes, 32, 0, i), (i % 3 == 0) ? 0x8u : 0x0u);
	/* the gradient quantizer too */
	fos_qcfg g = cfg_make(FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0);
	quant_row(z, 32, &g, NULL, codes, sc, &aout);
	assert_true(aout == 0.0f);
	assert_int_equal(sc[0], 0);
	assert_int_equal(sc[1], 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(ref_code_at(codes, 32, 0, i), (i % 3 == 0) ? 0x8u : 0x0u);
}

static void test_infinities(void **state)
{
	(void)state;
	/* 1x32 [inf, -inf, 1, 0..] [2, -3, 0..]; computed amax = inf -> S_enc = 1 (D/inf = 0).
	 * Block 0: base = inf -> capped 448 -> sf6 = sf4 = 0x7E; inv = fp32(1/448): +-inf -> +-6,
	 *   1/448 -> 0. Block 1: base = .5 -> sf6 0x30, inv6 2: 2 -> 4 (0x6), -3 -> -6 (0xF).
	 *   With A = inf every v is +-inf or NaN: both errors inf/NaN -> map-to-6 everywhere. */
	float v[32] = {INFINITY, -INFINITY, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, -3};
	uint8_t codes[16], sc[2], want[16] = {0xF7, 0, 0, 0, 0, 0, 0, 0, 0xF6, 0, 0, 0, 0, 0, 0, 0};
	float aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 32, &c, NULL, codes, sc, &aout);
	assert_true(isinf(aout) && aout > 0);
	assert_int_equal(sc[0], 0x7E);
	assert_int_equal(sc[1], 0x30);
	expect_bytes(codes, want, 16);
	/* finite amax given (1536): block 0 still base inf -> 0x7E, codes +-6; errors inf -> map-to-6 */
	float amax = 1536.0f;
	quant_row(v, 16, &c, &amax, codes, sc, &aout);
	assert_int_equal(sc[0], 0x7E);
	assert_int_equal(codes[0], 0xF7);
	assert_int_equal(codes[1], 0x00);
}

static void test_scale_underflow_codes_6_decode_0(void **state)
{
	(void)state;
	/* 1x32, amax = 1536 (in block 0): S_enc 1. Block 0 [1536]: base 256 -> 0x78 (tie with 0x7C,
	 * both exact) -> codes 7. Block 1 [2^-12, -2^-12, 2^-13, 0, -0]: base = rn(2^-12/6) = 4.07e-5,
	 * *1.5 = 6.1e-5, both below 2^-10 -> sf6 = sf4 = 0: inv FLT_MAX -> codes 7 F 7 0 8 -> F7 07 08.
	 * Dequantize: dec1 = rn(0 * 1536) * f = 0: outputs +0, -0, +0, +0, -0 (value * +0). */
	float v[32] = {1536, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1p-12f, -0x1p-12f, 0x1p-13f, 0, -0.0f};
	uint8_t codes[16], sc[2], want[16] = {0x07, 0, 0, 0, 0, 0, 0, 0, 0xF7, 0x07, 0x08, 0, 0, 0, 0, 0};
	float aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 32, &c, NULL, codes, sc, &aout);
	assert_true(aout == 1536.0f);
	assert_int_equal(sc[0], 0x78);
	assert_int_equal(sc[1], 0x00);
	expect_bytes(codes, want, 16);
	uint16_t out[32];
	fos_err err = {0};
	assert_int_equal(ref_be_dequantize(g_be, codes, sc, &aout, 1, 32, 256, 0, FOS_BF16, out, &err), FOS_OK);
	/* block 0: dec0 = rn(rn(256 * 1536) * fp32(1/1536)) = rn(256 + 2^-17) = 256: 6 * 256 = 1536 */
	assert_int_equal(out[0], 0x44C0); /* 1536 */
	static const uint16_t w1[5] = {0x0000, 0x8000, 0x0000, 0x0000, 0x8000};
	for (int i = 0; i < 5; i++)
		assert_int_equal(out[16 + i], w1[i]);
	for (int i = 21; i < 32; i++)
		assert_int_equal(out[i], 0);
}

static void test_subnormal_amax_global_scale(void **state)
{
	(void)state;
	/* A tensor whose amax is the bf16 subnormal 2^-130: S_enc = rn(1536 / 2^-130) = inf -> FLT_MAX.
	 * base = rn(rn(2^-130 / 6) * FLT_MAX) = 87381 * 2^-149 * FLT_MAX -> 0.0416665: e4m3 -> 11 * 2^-8
	 * (0x13); sf4 = e4m3(0.0624998) = 2^-4 (0x18). S_dec = rn(1 / FLT_MAX) = 2^-128 (subnormal).
	 * inv6 = 1 / (11 * 2^-136) = 2^136 / 11 -> inf -> FLT_MAX (same for sf4): 2^-130 * FLT_MAX =
	 * 0.25 - 2^-26 -> code 0. Both errors equal 2^-130 -> map-to-6: scale 0x13, all codes 0. */
	float v[16] = {0x1p-130f};
	uint8_t codes[8], sc[1], want[8] = {0};
	float aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 16, &c, NULL, codes, sc, &aout);
	assert_true(aout == 0x1p-130f);
	assert_int_equal(sc[0], 0x13);
	expect_bytes(codes, want, 8);
}

static void test_gradient_quantizer_association(void **state)
{
	(void)state;
	/* Gradient recipe (section 5), bf16 [3, -1.5, .75, 0..] [.5625, -.28125, .125, -0, bf16(.05)].
	 * amax 3 -> S_enc = 2688/3 = 896; m = rn(896 * fp32(1/6)) = 149.33334350585938.
	 * Block 0: rn(3 * m) = 448.00003 -> capped 448 -> 0x7E; inv = rn(1/rn(448 * rn(1/896))) = 2:
	 *   3 -> 6 (0x7), -1.5 -> -3 (0xD), .75 -> 1.5 (0x3): D7 03.
	 * Block 1: rn(.5625 * m) = 84.00000763 -> above the 80/88 tie -> 88 (0x6B). (The 4/6 order,
	 *   rn(.5625/6) * 896 = 84 exactly, would tie down to 80 = 0x6A.) inv = 10.181818: .5625 ->
	 *   5.73 -> 6 (0x7), -.28125 -> -2.86 -> -3 (0xD), .125 -> 1.27 -> 1.5 (0x3), -0 -> 0x8,
	 *   .05004883 -> .51 -> .5 (0x1): D7 83 01. */
	float v[32] = {3, -1.5f, .75f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		       .5625f, -.28125f, .125f, -0.0f, ref_bf16_f32(0x3D4D)};
	uint8_t codes[16], sc[2], want[16] = {0xD7, 0x03, 0, 0, 0, 0, 0, 0, 0xD7, 0x83, 0x01, 0, 0, 0, 0, 0};
	float aout;
	fos_qcfg g = cfg_make(FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0);
	quant_row(v, 32, &g, NULL, codes, sc, &aout);
	assert_true(aout == 3.0f);
	assert_int_equal(sc[0], 0x7E);
	assert_int_equal(sc[1], 0x6B);
	expect_bytes(codes, want, 16);
	/* the gradient recipe is bound 448 only: cfg.bound 256 is either overridden (same bytes) or
	 * rejected with a message naming 256 (backend.h says "forces"; the CPU backend rejects) */
	g.bound = 256;
	{
		uint16_t xb[32];
		ref_f32_to_bf16_arr(v, xb, 32);
		fos_err err = {0};
		int rc = ref_be_quantize(g_be, xb, FOS_BF16, 1, 32, &g, NULL, codes, sc, &aout, NULL, &err);
		if (rc == FOS_OK) {
			assert_int_equal(sc[1], 0x6B);
			expect_bytes(codes, want, 16);
		} else {
			assert_int_equal(rc, FOS_EINVAL);
			assert_non_null(strstr(err.msg, "256"));
		}
	}
	/* 4/6 at bound 448 on the same block uses the divide-first association: candidates 0x6A
	 * (84 tie -> 80) and 0x70 (126 -> 128); never 0x6B */
	fos_qcfg c = cfg46(FOS_ERR_MAE, 448);
	quant_row(v, 32, &c, NULL, codes, sc, &aout);
	assert_true(sc[1] == 0x6A || sc[1] == 0x70);
}

static void test_46_divide_first_association(void **state)
{
	(void)state;
	/* 1x32 [5, 0..] [NaN, 0.1025390625 (105 * 2^-10), 0..]: amax 5 -> S_enc = rn(1536/5) =
	 * 307.20001220703125. Block 1: rn(0.1025390625 / 6) = 17.5 * 2^-10 exactly; * S_enc =
	 * 5.25000002 -> rn 5.25: the tie 5 (0x4A) / 5.5 (0x4B) -> 0x4A. (Multiplying first,
	 * rn(rn(b * S) / 6) = rn(31.500002 / 6) = 5.2500005 -> 0x4B; the gradient's association gives
	 * 0x4B as well.) sf4 = e4m3(7.875) = 0x50. The NaN keeps map-to-6: scale 0x4A; inv6 =
	 * rn(1 / rn(5 * rn(1/307.2))) = 61.44: NaN -> 0x7, 0.1025 * 61.44 = 6.3 -> 0x7.
	 * Block 0: base = rn(rn(5/6) * 307.2) = 256 -> 0x78 / 0x7C, both exact (v = 5): tie -> 0x78, 07. */
	float v[32] = {5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NAN, 0.1025390625f};
	uint8_t codes[16], sc[2], want[16] = {0x07, 0, 0, 0, 0, 0, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0};
	float aout;
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	quant_row(v, 32, &c, NULL, codes, sc, &aout);
	assert_true(aout == 5.0f);
	assert_int_equal(sc[0], 0x78);
	assert_int_equal(sc[1], 0x4A);
	expect_bytes(codes, want, 16);
}

/* ---- 16x16 tree order --------------------------------------------------------------------- */

/* A 16x16 tile built so the two candidates' tile errors are equal up to rounding: amax A =
 * 1536 + k 2^-13 (so S_enc < 1 by ~1e-7, sf6 = 1.0, sf4 = 1.5, and v carries rounding noise);
 * x[0] = 6; most elements in windows where both candidates pick the same grid value (|x| in
 * [0,.2], [1.3,1.7], [2.7,3.4], [5.3,5.9]); four 0.75s (map-to-6 error .25, map-to-4 ~0) and four
 * 1.0s (map-to-6 ~0, map-to-4 .25). Which candidate wins then depends on how the 16 row-group
 * errors are summed. */
static float tree_tile(uint64_t seed, uint16_t *x)
{
	ref_rng r;
	ref_rng_seed(&r, seed);
	float a = 1536.0f + (float)(1 + ref_rng_u64(&r) % 64) * 0x1p-13f;
	static const float lo[4] = {0.0f, 1.3f, 2.7f, 5.3f}, hi[4] = {0.2f, 1.7f, 3.4f, 5.9f};
	for (int i = 0; i < 256; i++) {
		int w = (int)(ref_rng_u64(&r) % 4);
		uint16_t b = ref_f32_bf16((float)(lo[w] + (hi[w] - lo[w]) * ref_rng_uniform(&r)));
		x[i] = (ref_rng_u64(&r) & 1) ? (uint16_t)(b | 0x8000u) : b;
	}
	x[0] = ref_f32_bf16(6.0f);
	for (int k = 0; k < 4; k++) {
		x[(int)(ref_rng_u64(&r) % 16) * 16 + 1 + k] = ref_f32_bf16(0.75f);
		x[(int)(ref_rng_u64(&r) % 16) * 16 + 5 + k] = ref_f32_bf16(1.0f);
	}
	return a;
}

/* Row-group errors of both candidates of a tile with sf6 = 0x38, sf4 = 0x3C (asserted). */
static void tile_group_errors(const uint16_t *x, float a, float *e6, float *e4)
{
	float xf[256];
	ref_bf16_to_f32_arr(x, xf, 256);
	float s = ref_s_enc(a, 256), sdec = 1.0f / s;
	float base = 6.0f / 6.0f;
	base = base * s;
	assert_int_equal(ref_e4m3_enc(base), 0x38);
	assert_int_equal(ref_e4m3_enc(base * 1.5f), 0x3C);
	float inv6 = 1.0f / (1.0f * sdec), inv4 = 1.0f / (1.5f * sdec);
	for (int i = 0; i < 16; i++) {
		uint8_t q6[16], q4[16];
		for (int j = 0; j < 16; j++) {
			float t6 = xf[i * 16 + j] * inv6, t4 = xf[i * 16 + j] * inv4;
			q6[j] = (uint8_t)ref_e2m1_enc(t6);
			q4[j] = (uint8_t)ref_e2m1_enc(t4);
		}
		e6[i] = ref_group_err(q6, 0x38, a, 1536.0f, xf + i * 16, 0);
		e4[i] = ref_group_err(q4, 0x3C, a, 1536.0f, xf + i * 16, 0);
	}
}

static uint8_t tile_scale(const uint16_t *x, float a)
{
	uint8_t codes[128], sc[16];
	float aout;
	fos_err err = {0};
	fos_qcfg c = cfg_make(FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0);
	int rc = ref_be_quantize(g_be, x, FOS_BF16, 16, 16, &c, &a, codes, sc, &aout, NULL, &err);
	if (rc != FOS_OK)
		print_message("quantize: %s\n", err.msg);
	assert_int_equal(rc, FOS_OK);
	for (int i = 1; i < 16; i++)
		assert_int_equal(sc[i], sc[0]);
	return sc[0];
}

static void test_tile_tree_order_fixed_cases(void **state)
{
	(void)state;
	uint16_t x[256];
	float e6[16], e4[16];
	/* seed 94: tree sums give E4 < E6 (pick 4, 0x3C); summing the row-groups in order 0..15, or
	 * pairwise (0+1, 2+3, ...), or all 256 element errors in row-major order gives map-to-6 */
	float a = tree_tile(94, x);
	tile_group_errors(x, a, e6, e4);
	assert_true(ref_tree16(e4) < ref_tree16(e6));
	assert_false(ref_seq16(e4) < ref_seq16(e6));
	assert_int_equal(tile_scale(x, a), 0x3C);
	/* seed 17: tree sums tie (map-to-6, 0x38) where the sequential order picks map-to-4 */
	a = tree_tile(17, x);
	tile_group_errors(x, a, e6, e4);
	assert_false(ref_tree16(e4) < ref_tree16(e6));
	assert_true(ref_seq16(e4) < ref_seq16(e6));
	assert_int_equal(tile_scale(x, a), 0x38);
}

static void test_tile_tree_order_sweep(void **state)
{
	(void)state;
	uint16_t x[256];
	float e6[16], e4[16];
	int differ = 0, bad = 0;
	for (uint64_t seed = 1; seed <= 300; seed++) {
		float a = tree_tile(seed, x);
		tile_group_errors(x, a, e6, e4);
		int tree4 = ref_tree16(e4) < ref_tree16(e6), seq4 = ref_seq16(e4) < ref_seq16(e6);
		differ += tree4 != seq4;
		uint8_t s = tile_scale(x, a);
		if (s != (tree4 ? 0x3C : 0x38)) {
			if (bad < 5)
				print_message("seed %d: scale 0x%02x, tree order wants 0x%02x\n", (int)seed, s,
					      tree4 ? 0x3C : 0x38);
			bad++;
		}
	}
	assert_true(differ >= 10); /* the sweep does exercise the order */
	assert_int_equal(bad, 0);
}

/* ---- amax op ------------------------------------------------------------------------------- */

static void test_amax_op(void **state)
{
	(void)state;
	fos_err err = {0};
	/* bf16 (2, 16): row 0 has NaNs and -5; row 1 is all NaN (amax 0 per row) */
	uint16_t x[32];
	for (int i = 0; i < 32; i++)
		x[i] = (i < 16) ? ref_f32_bf16((float)(i % 5) * 0.25f) : (uint16_t)(i & 1 ? 0x7FC0u : 0xFFC1u);
	x[3] = 0x7FC0u;
	x[7] = ref_f32_bf16(-5.0f);
	void *d = ref_dev_put(g_be, x, sizeof x);
	float *o = ref_dev_put(g_be, NULL, 64);
	assert_non_null(d);
	assert_non_null(o);
	float h[2];
	assert_int_equal(g_be->amax(g_be, d, FOS_BF16, 2, 16, 0, o, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, h, o, 4), FOS_OK);
	assert_true(h[0] == 5.0f);
	assert_int_equal(g_be->amax(g_be, d, FOS_BF16, 2, 16, 1, o, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, h, o, 8), FOS_OK);
	assert_true(h[0] == 5.0f && h[1] == 0.0f);
	/* -inf counts as inf */
	x[5] = 0xFF80u;
	assert_int_equal(g_be->h2d(g_be, d, x, sizeof x, &err), FOS_OK);
	assert_int_equal(g_be->amax(g_be, d, FOS_BF16, 2, 16, 0, o, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, h, o, 4), FOS_OK);
	assert_true(isinf(h[0]) && h[0] > 0);
	g_be->free(g_be, d);
	/* fp32 input: amax is taken after the cast to bf16 (section 1): 1 + 3*2^-9 -> bf16 1 + 2^-7 */
	float f[32] = {0};
	f[4] = 1.0f + 3 * 0x1p-9f;
	f[9] = -0.5f;
	f[20] = -(1.0f + 0x1p-9f); /* -> bf16 -1.0 */
	d = ref_dev_put(g_be, f, sizeof f);
	assert_non_null(d);
	assert_int_equal(g_be->amax(g_be, d, FOS_F32, 2, 16, 1, o, &err), FOS_OK);
	assert_int_equal(ref_dev_get(g_be, h, o, 8), FOS_OK);
	assert_true(h[0] == 1.0078125f);
	assert_true(h[1] == 1.0f);
	g_be->free(g_be, d);
	g_be->free(g_be, o);
	/* and quantize of that fp32 tensor reports the same amax */
	uint8_t codes[16], sc[2];
	float aout[2];
	fos_qcfg c = cfg46(FOS_ERR_MAE, 256);
	assert_int_equal(ref_be_quantize(g_be, f, FOS_F32, 1, 32, &c, NULL, codes, sc, aout, NULL, &err), FOS_OK);
	assert_true(aout[0] == 1.0078125f);
	c.row_scaled = 1;
	assert_int_equal(ref_be_quantize(g_be, f, FOS_F32, 2, 16, &c, NULL, codes, sc, aout, NULL, &err), FOS_OK);
	assert_true(aout[0] == 1.0078125f && aout[1] == 1.0f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_block_a_given_amax_picks_4),
		cmocka_unit_test(test_block_a_computed_amax),
		cmocka_unit_test(test_block_a_bound_448),
		cmocka_unit_test(test_equal_errors_pick_map_to_6),
		cmocka_unit_test(test_mae_and_mse_pick_differently),
		cmocka_unit_test(test_two_blocks_amax_from_other_block),
		cmocka_unit_test(test_e2m1_ties_through_quantize),
		cmocka_unit_test(test_nan_forces_map_to_6),
		cmocka_unit_test(test_e4m3_scale_ties_through_quantize),
		cmocka_unit_test(test_zero_blocks_and_negative_zero),
		cmocka_unit_test(test_infinities),
		cmocka_unit_test(test_scale_underflow_codes_6_decode_0),
		cmocka_unit_test(test_subnormal_amax_global_scale),
		cmocka_unit_test(test_gradient_quantizer_association),
		cmocka_unit_test(test_46_divide_first_association),
		cmocka_unit_test(test_tile_tree_order_fixed_cases),
		cmocka_unit_test(test_tile_tree_order_sweep),
		cmocka_unit_test(test_amax_op),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
