/* test_quant_trans.c: quantize_t (an input stored transposed, read in place) gives bit for bit
 * the codes, scales, amax and decoded operand of quantize on an explicit transposed copy, for
 * every recipe, block mode, error mode and bound, bf16 and fp32 input, given and computed amax,
 * on the special data kinds; and it refuses row-scaled. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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

/* Quantizes the logical (rows, cols) tensor whose storage src is (cols, rows): once through
 * quantize_t, once through quantize of the transposed copy; compares every output byte. */
static void check_one(int dtype, const void *src, int64_t rows, int64_t cols, const fos_qcfg *cfg, const float *amax)
{
	size_t es = dtype == FOS_F32 ? 4 : 2, n = (size_t)(rows * cols);
	uint8_t *copy = malloc(n * es);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			memcpy(copy + (r * cols + c) * es, (const uint8_t *)src + (c * rows + r) * es, es);
	fos_qtensor q1, q2;
	fos_err err = {0};
	uint16_t *d1 = malloc(n * 2), *d2 = malloc(n * 2);
	assert_int_equal(fos_qtensor_alloc(g_be, &q1, rows, cols, 0, &err), FOS_OK);
	assert_int_equal(fos_qtensor_alloc(g_be, &q2, rows, cols, 0, &err), FOS_OK);
	assert_int_equal(g_be->quantize_t(g_be, src, dtype, rows, cols, cfg, amax, &q1, d1, &err), FOS_OK);
	assert_int_equal(g_be->quantize(g_be, copy, dtype, rows, cols, cfg, amax, &q2, d2, &err), FOS_OK);
	assert_memory_equal(q1.codes, q2.codes, n / 2);
	assert_memory_equal(q1.scales, q2.scales, n / 16);
	assert_memory_equal(q1.amax, q2.amax, sizeof(float));
	assert_memory_equal(d1, d2, n * 2);
	fos_qtensor_free(g_be, &q1);
	fos_qtensor_free(g_be, &q2);
	free(d1);
	free(d2);
	free(copy);
}

static void test_quantize_t_matches_transposed_copy(void **state)
{
	(void)state;
	assert_non_null(g_be->quantize_t);
	static const fos_qcfg cfgs[] = {
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0},
		{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
	};
	const int64_t rows = 96, cols = 160; /* logical shape; storage is (160, 96) */
	uint16_t *xb = malloc((size_t)(rows * cols) * 2);
	float *xf = malloc((size_t)(rows * cols) * 4);
	float given = 5.0f;
	for (int kind = 0; kind < REF_NKINDS; kind++) {
		ref_gen_bf16(kind, cols, rows, 100 + kind, xb);
		ref_gen_f32(kind, cols, rows, 200 + kind, xf);
		for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
			check_one(FOS_BF16, xb, rows, cols, &cfgs[c], NULL);
			check_one(FOS_F32, xf, rows, cols, &cfgs[c], NULL);
			check_one(FOS_BF16, xb, rows, cols, &cfgs[c], &given);
		}
	}
	free(xb);
	free(xf);
}

static void test_quantize_t_refuses_row_scaled(void **state)
{
	(void)state;
	fos_qcfg cfg = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1};
	uint16_t x[32 * 16] = {0};
	fos_qtensor q;
	fos_err err = {0};
	assert_int_equal(fos_qtensor_alloc(g_be, &q, 16, 32, 1, &err), FOS_OK);
	assert_int_equal(g_be->quantize_t(g_be, x, FOS_BF16, 16, 32, &cfg, NULL, &q, NULL, &err), FOS_EINVAL);
	assert_non_null(strstr(err.msg, "row-scaled"));
	fos_qtensor_free(g_be, &q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quantize_t_matches_transposed_copy),
		cmocka_unit_test(test_quantize_t_refuses_row_scaled),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
