/* test_cli_quantize.c: `fos quantize` and `fos dequantize` end to end (build/fos run as a
 * subprocess): tiny blocks whose codes, scale and amax are derived by hand from NUMERICS.md, and
 * every option against calling the backend API directly on the same input (same bits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend.h"
#include "support_ref.h"
#include "test_cli_harness.h"

/* ---- the hand-derived block ---------------------------------------------------------------------
 * x = [4, 3, 2, 1, 0.5, 0, -0, -1, -1.5, -2, -3, -4, 1.5, 2, 0.5, -0.5] as one (1, 16) tensor.
 *
 * 4over6, bound 256 (D = 1536), amax 4:
 *   S_enc = rn(1536 / 4) = 384;  S_dec = rn(1/384) = rn(1/3) * 2^-7
 *   base = rn(rn(4/6) * 384) = rn(0.666666687 * 384) = rn(256.0000076) = 256
 *   sf6 = e4m3(256) = 0x78, sf4 = e4m3(rn(256 * 1.5) = 384) = 0x7C (1.5 * 2^8)
 *   inv6 = rn(1 / rn(256 * S_dec)) = rn(1 / 0.666666687) = 1.5; inv4 = rn(1 / rn(384 * S_dec)) =
 *   rn(1 / rn(1.0000000298)) = 1
 *   map-to-4 codes are x itself (all on the E2M1 grid) and decode exactly:
 *   v = rn(rn(rn(q * 384) * 4) / 1536) = q, so err4 = 0; map-to-6 maps 3 to 4.5 -> code 4 (ties in
 *   [3.5, 5] go to 4), v = 2.67 != 3, so err6 > 0 and pick4 = (err4 < err6) holds.
 *   codes: 4->6 3->5 2->4 1->2 0.5->1 0->0 -0->8 -1->A -1.5->B -2->C -3->D -4->E 1.5->3 2->4 0.5->1
 *   -0.5->9; packed low nibble first: 56 24 01 A8 CB ED 43 91; scale 0x7C; amax 4.
 *   dequantize: dec = rn(rn(384 * 4) * rn(1/1536)) = rn(1536 * rn(1/3) * 2^-9) = rn(1.0000000298) = 1,
 *   so out = e2m1 value = x, bit for bit (-0 included).
 *
 * --amax 8 (override): S_enc = 192, base = rn(rn(4/6) * 192) = rn(128.0000038) = 128, sf6 = 0x70,
 *   sf4 = e4m3(192) = 0x74; inv6 = 1.5, inv4 = 1 as above (the same rn(1/3) products), err4 = 0 <
 *   err6: the same codes, scale 0x74, amax 8; dequantize dec = rn(rn(192 * 8) * rn(1/1536)) = 1.
 *
 * nvfp4 (section 5, bound 448, D = 2688), amax 4:
 *   S_enc = rn(2688 / 4) = 672; rn(672 * fp32(1/6) = 0x3E2AAAAB) = rn(112.0000033) = 112;
 *   sf = e4m3(min(rn(4 * 112), 448)) = e4m3(448) = 0x7E
 *   rn(1/672) = 0x3AC30C31; rn(448 * that) = 0.666666687; inv = rn(1 / 0.666666687) = 1.5
 *   q = e2m1(x * 1.5): 6->7 4.5->6 3->5 1.5->3 0.75->2 (tie, to 1) 0->0 -0->8 -1.5->B -2.25->C
 *   -3->D -4.5->E -6->F 2.25->4 3->5 0.75->2 -0.75->A; packed: 67 35 02 B8 DC FE 54 A2.
 *   dequantize (bound 448): rn(1/2688) = 0x39C30C31, dec = rn(rn(448 * 4) * 0x39C30C31) = 0x3F2AAAAB
 *   (0.666666687); out = rn(e2m1 * dec), listed below in f32 and bf16. */

static const float hand_x[16] = {4, 3, 2, 1, 0.5f, 0, -0.0f, -1, -1.5f, -2, -3, -4, 1.5f, 2, 0.5f, -0.5f};
static const uint16_t hand_x_bf16[16] = {0x4080, 0x4040, 0x4000, 0x3F80, 0x3F00, 0x0000, 0x8000, 0xBF80,
					 0xBFC0, 0xC000, 0xC040, 0xC080, 0x3FC0, 0x4000, 0x3F00, 0xBF00};
static const uint8_t hand_codes46[8] = {0x56, 0x24, 0x01, 0xA8, 0xCB, 0xED, 0x43, 0x91};
static const uint8_t hand_codes_nv[8] = {0x67, 0x35, 0x02, 0xB8, 0xDC, 0xFE, 0x54, 0xA2};
static const uint32_t hand_deq_nv_f32[16] = {0x40800000, 0x402AAAAB, 0x40000000, 0x3F800000, 0x3F2AAAAB, 0x00000000,
					     0x80000000, 0xBF800000, 0xBFAAAAAB, 0xC0000000, 0xC02AAAAB, 0xC0800000,
					     0x3FAAAAAB, 0x40000000, 0x3F2AAAAB, 0xBF2AAAAB};
static const uint16_t hand_deq_nv_bf16[16] = {0x4080, 0x402B, 0x4000, 0x3F80, 0x3F2B, 0x0000, 0x8000, 0xBF80,
					      0xBFAB, 0xC000, 0xC02B, 0xC080, 0x3FAB, 0x4000, 0x3F2B, 0xBF2B};

static void check_quantized(const char *dir, int64_t rows, int64_t cols, const void *codes, const void *scales,
			    int amax_ndim, const float *amax)
{
	char p[600];
	snprintf(p, sizeof p, "%s/codes.npy", dir);
	th_check_file(p, NPY_U1, 2, rows, cols / 2, codes);
	snprintf(p, sizeof p, "%s/scales.npy", dir);
	th_check_file(p, NPY_U1, 2, rows, cols / 16, scales);
	snprintf(p, sizeof p, "%s/amax.npy", dir);
	th_check_file(p, NPY_F4, amax_ndim, rows, 0, amax);
}

static void test_hand_block_4over6(void **state)
{
	(void)state;
	th_result r;
	const uint8_t sc = 0x7C;
	const float amax = 4.0f;
	th_save(th_p("hand_f32.npy"), NPY_F4, 2, 1, 16, hand_x);
	th_save(th_p("hand_bf16.npy"), NPY_U2, 2, 1, 16, hand_x_bf16);
	th_run(&r, "quantize", th_p("hand_f32.npy"), "--out", th_p("h46f"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r);
	check_quantized(th_p("h46f"), 1, 16, hand_codes46, &sc, 0, &amax);
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out", th_p("h46b"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r);
	check_quantized(th_p("h46b"), 1, 16, hand_codes46, &sc, 0, &amax);
	/* explicit defaults give the same; row-scaled with one row too, amax then has shape (1,) */
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out", th_p("h46d"), "--local", "--recipe", "4over6", "--block",
	       "1x16", "--err", "mae", "--bound", "256", NULL);
	th_expect_ok(&r);
	check_quantized(th_p("h46d"), 1, 16, hand_codes46, &sc, 0, &amax);
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out", th_p("h46r"), "--local", "--row-scaled", NULL);
	th_expect_ok(&r);
	check_quantized(th_p("h46r"), 1, 16, hand_codes46, &sc, 1, &amax);

	/* dequantize: exactly x again, in f32 and in bf16 (-0 stays -0) */
	char c[600], s[600], a[600];
	snprintf(c, sizeof c, "%s/codes.npy", th_p("h46f"));
	snprintf(s, sizeof s, "%s/scales.npy", th_p("h46f"));
	snprintf(a, sizeof a, "%s/amax.npy", th_p("h46f"));
	th_run(&r, "dequantize", "--codes", c, "--scales", s, "--amax", a, "--out", th_p("deq/h46.npy"), "--local",
	       "--dtype", "f32", NULL);
	th_expect_ok(&r);
	th_check_file(th_p("deq/h46.npy"), NPY_F4, 2, 1, 16, hand_x);
	th_run(&r, "dequantize", "--codes", c, "--scales", s, "--amax", a, "--out", th_p("deq/h46b.npy"), "--local", NULL);
	th_expect_ok(&r);
	th_check_file(th_p("deq/h46b.npy"), NPY_U2, 2, 1, 16, hand_x_bf16);
	/* row-scaled amax file (shape (1,)) is inferred from its shape */
	snprintf(a, sizeof a, "%s/amax.npy", th_p("h46r"));
	th_run(&r, "dequantize", "--codes", c, "--scales", s, "--amax", a, "--out", th_p("deq/h46r.npy"), "--local",
	       "--dtype", "bf16", NULL);
	th_expect_ok(&r);
	th_check_file(th_p("deq/h46r.npy"), NPY_U2, 2, 1, 16, hand_x_bf16);
}

static void test_hand_block_amax_override(void **state)
{
	(void)state;
	th_result r;
	const uint8_t sc = 0x74;
	const float amax = 8.0f;
	th_save(th_p("hand_bf16.npy"), NPY_U2, 2, 1, 16, hand_x_bf16);
	th_save(th_p("amax8.npy"), NPY_F4, 0, 0, 0, &amax);
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out", th_p("h8"), "--local", "--amax", th_p("amax8.npy"), NULL);
	th_expect_ok(&r);
	check_quantized(th_p("h8"), 1, 16, hand_codes46, &sc, 0, &amax);
	char c[600], s[600], a[600];
	snprintf(c, sizeof c, "%s/codes.npy", th_p("h8"));
	snprintf(s, sizeof s, "%s/scales.npy", th_p("h8"));
	snprintf(a, sizeof a, "%s/amax.npy", th_p("h8"));
	th_run(&r, "dequantize", "--codes", c, "--scales", s, "--amax", a, "--out", th_p("h8.npy"), "--local", "--dtype",
	       "f32", NULL);
	th_expect_ok(&r);
	th_check_file(th_p("h8.npy"), NPY_F4, 2, 1, 16, hand_x);
}

static void test_hand_block_nvfp4(void **state)
{
	(void)state;
	th_result r;
	const uint8_t sc = 0x7E;
	const float amax = 4.0f;
	th_save(th_p("hand_f32.npy"), NPY_F4, 2, 1, 16, hand_x);
	th_run(&r, "quantize", th_p("hand_f32.npy"), "--out", th_p("hnv"), "--local", "--recipe", "nvfp4", NULL);
	th_expect_ok(&r);
	check_quantized(th_p("hnv"), 1, 16, hand_codes_nv, &sc, 0, &amax);
	/* explicit --bound 448 and --block 1x16 are the recipe's own values: accepted, same result */
	th_run(&r, "quantize", th_p("hand_f32.npy"), "--out", th_p("hnv2"), "--local", "--recipe", "nvfp4", "--bound",
	       "448", "--block", "1x16", NULL);
	th_expect_ok(&r);
	check_quantized(th_p("hnv2"), 1, 16, hand_codes_nv, &sc, 0, &amax);
	char c[600], s[600], a[600];
	snprintf(c, sizeof c, "%s/codes.npy", th_p("hnv"));
	snprintf(s, sizeof s, "%s/scales.npy", th_p("hnv"));
	snprintf(a, sizeof a, "%s/amax.npy", th_p("hnv"));
	th_run(&r, "dequantize", "--codes", c, "--scales", s, "--amax", a, "--out", th_p("hnv.npy"), "--local", "--bound",
	       "448", "--dtype", "f32", NULL);
	th_expect_ok(&r);
	th_check_file(th_p("hnv.npy"), NPY_F4, 2, 1, 16, hand_deq_nv_f32);
	th_run(&r, "dequantize", "--codes", c, "--scales", s, "--amax", a, "--out", th_p("hnvb.npy"), "--local", "--bound",
	       "448", NULL);
	th_expect_ok(&r);
	th_check_file(th_p("hnvb.npy"), NPY_U2, 2, 1, 16, hand_deq_nv_bf16);
}

/* ---- every option against the backend API ------------------------------------------------------ */

typedef struct qcase {
	const char *args[8];
	fos_qcfg cfg;
	int amax_kind; /* 0 none, 1 per-tensor override, 2 per-row override */
} qcase;

static void run_case(const qcase *qc, const void *x, int x_dtype, int64_t R, int64_t C, const char *tag)
{
	const char *xp = th_p("in.npy");
	th_save(xp, x_dtype == FOS_F32 ? NPY_F4 : NPY_U2, 2, R, C, x);
	float amax_in[256];
	assert_true(R <= 256);
	for (int i = 0; i < R; i++)
		amax_in[i] = 0.75f * (float)(i + 1);
	if (qc->amax_kind == 1)
		th_save(th_p("amax_in.npy"), NPY_F4, 0, 0, 0, amax_in);
	if (qc->amax_kind == 2)
		th_save(th_p("amax_in.npy"), NPY_F4, 1, R, 0, amax_in);

	const char *args[24];
	int n = 0;
	args[n++] = "quantize";
	args[n++] = xp;
	args[n++] = "--out";
	args[n++] = th_p("qout");
	args[n++] = "--local";
	args[n++] = "--backend";
	args[n++] = "cpu";
	if (qc->amax_kind) {
		args[n++] = "--amax";
		args[n++] = th_p("amax_in.npy");
	}
	for (int i = 0; i < 8 && qc->args[i]; i++)
		args[n++] = qc->args[i];
	args[n] = NULL;
	th_result r;
	th_runv(&r, args);
	if (r.status)
		fail_msg("%s: fos exited %d: %s", tag, r.status, r.err);

	fos_backend *be = ref_cpu(2);
	assert_non_null(be);
	size_t nq = (size_t)(R * C);
	uint8_t *codes = malloc(nq / 2), *scales = malloc(nq / 16);
	float amax[256];
	assert_non_null(codes);
	assert_non_null(scales);
	fos_err e = {0, ""};
	if (ref_be_quantize(be, x, x_dtype, R, C, &qc->cfg, qc->amax_kind ? amax_in : NULL, codes, scales, amax, NULL, &e))
		fail_msg("%s: backend quantize: %s", tag, e.msg);
	be->destroy(be);
	char p[600];
	snprintf(p, sizeof p, "%s/codes.npy", th_p("qout"));
	th_check_file(p, NPY_U1, 2, R, C / 2, codes);
	snprintf(p, sizeof p, "%s/scales.npy", th_p("qout"));
	th_check_file(p, NPY_U1, 2, R, C / 16, scales);
	snprintf(p, sizeof p, "%s/amax.npy", th_p("qout"));
	th_check_file(p, NPY_F4, qc->cfg.row_scaled ? 1 : 0, R, 0, amax);
	free(codes);
	free(scales);
}

static fos_qcfg mkcfg(int recipe, int block, int err_mode, int bound, int row_scaled)
{
	fos_qcfg c = {recipe, block, err_mode, bound, row_scaled};
	return c;
}

static const qcase qcases[] = {
	{{NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0}, 0},
	{{"--block", "16x16", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0}, 0},
	{{"--err", "mse", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 256, 0}, 0},
	{{"--bound", "448", "--block", "16x16", "--err", "mse", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0}, 0},
	{{"--row-scaled", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1}, 0},
	{{"--row-scaled", "--bound", "448", "--err", "mse", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 1}, 0},
	{{"--recipe", "nvfp4", NULL}, {FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0}, 0},
	{{NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0}, 1},
	{{"--block", "16x16", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0}, 1},
	{{"--row-scaled", NULL}, {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1}, 2},
	{{"--recipe", "nvfp4", NULL}, {FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0}, 1},
};

static void test_options_match_api_bf16(void **state)
{
	(void)state;
	const int kinds[] = {REF_RANDN, REF_NEGZERO, REF_INF, REF_NAN, REF_SUBNORMAL, REF_WIDE};
	const int64_t R = 32, C = 64;
	uint16_t *x = malloc((size_t)(R * C) * 2);
	assert_non_null(x);
	for (size_t c = 0; c < sizeof qcases / sizeof qcases[0]; c++) {
		for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
			/* every case on two kinds, rotating, to stay fast */
			if ((c + k) % 3)
				continue;
			ref_gen_bf16(kinds[k], R, C, 1000 + c * 17 + k, x);
			char tag[96];
			snprintf(tag, sizeof tag, "bf16 case %zu kind %s", c, ref_kind_name(kinds[k]));
			run_case(&qcases[c], x, FOS_BF16, R, C, tag);
		}
	}
	free(x);
}

static void test_options_match_api_f32(void **state)
{
	(void)state;
	const int64_t R = 48, C = 32;
	float *x = malloc((size_t)(R * C) * 4);
	assert_non_null(x);
	for (size_t c = 0; c < sizeof qcases / sizeof qcases[0]; c++) {
		ref_gen_f32(c % 2 ? REF_HEAVY : REF_RANDN, R, C, 77 + c, x);
		char tag[64];
		snprintf(tag, sizeof tag, "f32 case %zu", c);
		run_case(&qcases[c], x, FOS_F32, R, C, tag);
	}
	free(x);
}

/* Shapes of NUMERICS.md section 9 that are cheap enough here: (128, 256) 16x16 and (100, 320) 1x16. */
static void test_spec_shapes(void **state)
{
	(void)state;
	uint16_t *x = malloc(128 * 320 * 2);
	assert_non_null(x);
	ref_gen_bf16(REF_LINSPACE, 128, 256, 5, x);
	qcase q16 = {{"--block", "16x16", NULL}, mkcfg(FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0), 0};
	run_case(&q16, x, FOS_BF16, 128, 256, "(128, 256) 16x16");
	ref_gen_bf16(REF_DTYPE_MAX, 100, 320, 6, x);
	qcase q1 = {{NULL}, mkcfg(FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0), 0};
	run_case(&q1, x, FOS_BF16, 100, 320, "(100, 320) 1x16");
	qcase qr = {{"--row-scaled", NULL}, mkcfg(FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1), 0};
	run_case(&qr, x, FOS_BF16, 100, 320, "(100, 320) row-scaled");
	free(x);
}

/* Without --backend the CLI uses auto; the bits are the same as the CPU's (CUDA, where present, must
 * agree bit for bit on quantize). */
static void test_backend_auto_default(void **state)
{
	(void)state;
	const int64_t R = 16, C = 32;
	uint16_t x[16 * 32];
	ref_gen_bf16(REF_RANDN, R, C, 9, x);
	th_save(th_p("auto.npy"), NPY_U2, 2, R, C, x);
	th_result r1, r2;
	th_run(&r1, "quantize", th_p("auto.npy"), "--out", th_p("qa"), "--local", NULL);
	th_expect_ok(&r1);
	th_run(&r2, "quantize", th_p("auto.npy"), "--out", th_p("qc"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r2);
	const char *files[3] = {"codes.npy", "scales.npy", "amax.npy"};
	for (int i = 0; i < 3; i++) {
		char a[600], b[600];
		snprintf(a, sizeof a, "%s/%s", th_p("qa"), files[i]);
		snprintf(b, sizeof b, "%s/%s", th_p("qc"), files[i]);
		npy_array x1, x2;
		fos_err e;
		assert_int_equal(npy_read(a, &x1, &e), 0);
		assert_int_equal(npy_read(b, &x2, &e), 0);
		assert_int_equal(x1.nbytes, x2.nbytes);
		assert_memory_equal(x1.data, x2.data, x1.nbytes);
		npy_free(&x1);
		npy_free(&x2);
	}
}

/* The output directory is created, nested levels included; an existing one is reused. */
static void test_output_dir_created(void **state)
{
	(void)state;
	th_save(th_p("hand_bf16.npy"), NPY_U2, 2, 1, 16, hand_x_bf16);
	th_result r;
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out", th_p("a/b/c"), "--local", NULL);
	th_expect_ok(&r);
	char p[600];
	snprintf(p, sizeof p, "%s/codes.npy", th_p("a/b/c"));
	assert_true(th_exists(p));
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out", th_p("a/b/c/"), "--local", NULL);
	th_expect_ok(&r);
	th_run(&r, "quantize", th_p("hand_bf16.npy"), "--out=" "/dev/null/x", "--local", NULL);
	th_expect_fail(&r, 1, "/dev/null");
}

/* ---- dequantize against the backend API ------------------------------------------------------------ */

static void deq_case(const fos_qcfg *cfg, int64_t R, int64_t C, int kind, uint64_t seed)
{
	uint16_t *x = malloc((size_t)(R * C) * 2);
	uint8_t *codes = malloc((size_t)(R * C) / 2), *scales = malloc((size_t)(R * C) / 16);
	float amax[256];
	uint16_t *want16 = malloc((size_t)(R * C) * 2);
	float *want32 = malloc((size_t)(R * C) * 4);
	assert_true(x && codes && scales && want16 && want32 && R <= 256);
	ref_gen_bf16(kind, R, C, seed, x);
	fos_backend *be = ref_cpu(2);
	assert_non_null(be);
	fos_err e = {0, ""};
	if (ref_be_quantize(be, x, FOS_BF16, R, C, cfg, NULL, codes, scales, amax, NULL, &e))
		fail_msg("quantize: %s", e.msg);
	if (ref_be_dequantize(be, codes, scales, amax, R, C, cfg->bound, cfg->row_scaled, FOS_BF16, want16, &e) ||
	    ref_be_dequantize(be, codes, scales, amax, R, C, cfg->bound, cfg->row_scaled, FOS_F32, want32, &e))
		fail_msg("dequantize: %s", e.msg);
	be->destroy(be);
	th_save(th_p("dq_codes.npy"), NPY_U1, 2, R, C / 2, codes);
	th_save(th_p("dq_scales.npy"), NPY_U1, 2, R, C / 16, scales);
	th_save(th_p("dq_amax.npy"), NPY_F4, cfg->row_scaled ? 1 : 0, R, 0, amax);
	const char *bound = cfg->bound == 448 ? "448" : "256";
	th_result r;
	th_run(&r, "dequantize", "--codes", th_p("dq_codes.npy"), "--scales", th_p("dq_scales.npy"), "--amax",
	       th_p("dq_amax.npy"), "--out", th_p("dq16.npy"), "--local", "--backend", "cpu", "--bound", bound, NULL);
	th_expect_ok(&r);
	th_check_file(th_p("dq16.npy"), NPY_U2, 2, R, C, want16);
	th_run(&r, "dequantize", "--codes", th_p("dq_codes.npy"), "--scales", th_p("dq_scales.npy"), "--amax",
	       th_p("dq_amax.npy"), "--out", th_p("dq32.npy"), "--local", "--bound", bound, "--dtype", "f32", NULL);
	th_expect_ok(&r);
	/* NaN outputs (inf amax times a zero scale) may carry any payload: compare with NaN == NaN */
	npy_array a;
	th_load(th_p("dq32.npy"), &a, NPY_F4, 2, R, C);
	int64_t bad = ref_cmp_f32((const float *)a.data, want32, R * C);
	if (bad >= 0)
		fail_msg("f32 dequantize differs at %lld", (long long)bad);
	npy_free(&a);
	free(x);
	free(codes);
	free(scales);
	free(want16);
	free(want32);
}

static void test_dequantize_matches_api(void **state)
{
	(void)state;
	fos_qcfg c = mkcfg(FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0);
	deq_case(&c, 32, 64, REF_RANDN, 1);
	deq_case(&c, 32, 64, REF_NEGZERO, 2);
	deq_case(&c, 32, 64, REF_INF, 6); /* amax inf: zero scales decode to NaN */
	c.row_scaled = 1;
	deq_case(&c, 48, 32, REF_WIDE, 3);
	c = mkcfg(FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0);
	deq_case(&c, 32, 64, REF_HEAVY, 4);
	c = mkcfg(FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0);
	deq_case(&c, 16, 128, REF_RANDN, 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_block_4over6),
		cmocka_unit_test(test_hand_block_amax_override),
		cmocka_unit_test(test_hand_block_nvfp4),
		cmocka_unit_test(test_options_match_api_bf16),
		cmocka_unit_test(test_options_match_api_f32),
		cmocka_unit_test(test_spec_shapes),
		cmocka_unit_test(test_backend_auto_default),
		cmocka_unit_test(test_output_dir_created),
		cmocka_unit_test(test_dequantize_matches_api),
	};
	return cmocka_run_group_tests_name("cli_quantize", tests, th_setup, th_teardown);
}
