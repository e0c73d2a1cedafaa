/* gpu_smallm.c: the small-M GEMM that reads W's NVFP4 codes itself (be->gemm_w4,
 * kernels/cuda_smallm.cu) and its use by the forward (kernels/linear.c, M <= 128), against the
 * cuBLASLt path (be->decode + be->gemm), bit for bit:
 *   - gemm_w4 at M = 1, 16, 64, 128 for every epilogue option set (plain, alpha from both amaxes,
 *     row-scaled, bias, row-scaled + bias) and every kernel variant (support_smallm_variants.h, which
 *     swaps the instance's gemm_w4 entries; -1: the backend's own) equals be->gemm on the decoded W
 *     at the same M and rows 0..M-1 of be->gemm at M = 8192; be->gemm at M = 129 and 1024 equals
 *     the same rows too (the two kernels meet at the switch);
 *   - the forward at M = 1, 16, 64, 128, 129, 1024, 8192 for every option set (per-tensor and
 *     row-scaled X, bias or not, 16x16 / MAE / 256 and 1x16 / MSE / 448 weights, no context and a
 *     saved context of each override) gives rows 0..M-1 of the M = 8192 forward (X's largest
 *     element sits in row 0, so the per-tensor amax is the same for every M), and at M <= 128 the
 *     same bits with gemm_w4 wherever it runs and with gemm_w4 switched off;
 *   - shapes the kernel cannot run (K % 128, M > 128) are refused by gemm_w4 and never taken;
 *     gemm_w4_takes answers 1 at M = 1.
 * Skips cleanly (exit 0) when there is no usable GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support_gpu.h"
#include "backend.h"
#include "fos_format.h"
#ifdef FOS_HAVE_CUDA
#include "support_smallm_variants.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static float urand(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return (float)((uint32_t)(g_rng >> 32) >> 8) / 8388608.0f - 1.0f;
}

static uint16_t *rand_bf16(int64_t n, float scale)
{
	uint16_t *p = malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		p[i] = fos_f32_to_bf16((urand() + urand() + urand()) * scale);
	return p;
}

static void *dev_copy(const void *h, size_t n)
{
	void *d = g_gpu->alloc(g_gpu, n);
	fos_err e;
	assert_non_null(d);
	assert_int_equal(g_gpu->h2d(g_gpu, d, h, n, &e), FOS_OK);
	return d;
}

static void *host_copy(const void *d, size_t n)
{
	void *h = malloc(n);
	fos_err e;
	assert_int_equal(g_gpu->d2h(g_gpu, h, d, n, &e), FOS_OK);
	return h;
}

/* Asserts y (device, rows 0..m-1 of width n) equals ref (host) bit for bit; what names the case. */
static void same_rows(const uint16_t *y, const uint16_t *ref, int64_t m, int64_t n, const char *what)
{
	uint16_t *h = host_copy(y, (size_t)(m * n) * 2);
	int64_t d = 0, first = -1;
	for (int64_t i = 0; i < m * n; i++)
		if (h[i] != ref[i]) {
			if (first < 0)
				first = i;
			d++;
		}
	if (d)
		fprintf(stderr, "%s: %lld of %lld elements differ (first at row %lld col %lld: %04x vs %04x)\n", what,
			(long long)d, (long long)(m * n), (long long)(first / n), (long long)(first % n), h[first],
			ref[first]);
	free(h);
	assert_true(d == 0);
}

static const int64_t g_shapes[][2] = {{4096, 4096}, {208, 384}}; /* N, K */
#define MMAX 8192

/* ---- the GEMM ---------------------------------------------------------------------------------- */

static void test_gemm_w4_bits(void **state)
{
	(void)state;
	NEED_GPU();
	fos_err e;
	assert_non_null(g_gpu->gemm_w4);
	for (int s = 0; s < 2; s++) {
		const int64_t n = g_shapes[s][0], k = g_shapes[s][1];
		uint16_t *xh = rand_bf16(MMAX * k, 1.0f), *wh = rand_bf16(n * k, 0.02f), *bh = rand_bf16(n, 0.5f);
		uint16_t *x = dev_copy(xh, (size_t)(MMAX * k) * 2), *w = dev_copy(wh, (size_t)(n * k) * 2);
		uint16_t *bias = dev_copy(bh, (size_t)n * 2);
		uint16_t *xdec = g_gpu->alloc(g_gpu, (size_t)(MMAX * k) * 2), *wdec = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2);
		uint16_t *y = g_gpu->alloc(g_gpu, (size_t)(MMAX * n) * 2);
		fos_qtensor xq;
		assert_int_equal(fos_qtensor_alloc(g_gpu, &xq, MMAX, k, 1, &e), FOS_OK);
		fos_qcfg qc = fos_qcfg_default();
		qc.row_scaled = 1; /* row amaxes: the row scale; the X operand is the decoded codes either way */
		assert_int_equal(g_gpu->quantize(g_gpu, x, FOS_BF16, MMAX, k, &qc, NULL, &xq, xdec, &e), FOS_OK);
		fos_linear_opts o = fos_linear_opts_default();
		fos_qweight qw;
		assert_int_equal(fos_qweight_make_uses(g_gpu, w, n, k, &o, FOS_USE_FORWARD, &qw, &e), FOS_OK);
		assert_int_equal(fos_qweight_decode(g_gpu, &qw, 0, wdec, &e), FOS_OK);
		const float dinv = 1.0f / 256.0f;
		const fos_gemm_epi epis[5] = {
			fos_gemm_epi_plain(),
			{xq.amax, dinv, qw.q.amax, dinv, 0, 0},	    /* alpha from both amaxes */
			{0, dinv, qw.q.amax, dinv, xq.amax, 0},	    /* row-scaled */
			{xq.amax, dinv, qw.q.amax, dinv, 0, bias},   /* bias */
			{0, dinv, qw.q.amax, dinv, xq.amax, bias},   /* row-scaled + bias */
		};
		const int64_t ms[] = {1, 16, 64, 128, 129, 1024};
		for (int ei = 0; ei < 5; ei++) {
			assert_int_equal(g_gpu->gemm(g_gpu, xdec, wdec, MMAX, n, k, &epis[ei], y, &e), FOS_OK);
			uint16_t *ref = host_copy(y, (size_t)(1024 * n) * 2);
			for (int mi = 0; mi < 6; mi++) {
				const int64_t m = ms[mi];
				char what[160];
				snprintf(what, sizeof what, "N=%lld K=%lld epilogue %d M=%lld: be->gemm", (long long)n,
					 (long long)k, ei, (long long)m);
				assert_int_equal(g_gpu->gemm(g_gpu, xdec, wdec, m, n, k, &epis[ei], y, &e), FOS_OK);
				same_rows(y, ref, m, n, what);
				if (m > 128)
					assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, m, n, k), 0);
				if (m > 128) {
					assert_int_equal(g_gpu->gemm_w4(g_gpu, xdec, &qw.q, m, &epis[ei], y, &e), FOS_EINVAL);
					continue;
				}
#ifdef FOS_HAVE_CUDA
				for (int v = -1; v < fos_cuda_smallm_variants(); v++) {
					char name[64];
					assert_int_equal(fos_cuda_smallm_variant(g_gpu, v, 0, name, sizeof name, &e), FOS_OK);
					assert_int_equal(g_gpu->zero(g_gpu, y, (size_t)(m * n) * 2, &e), FOS_OK);
					assert_int_equal(g_gpu->gemm_w4(g_gpu, xdec, &qw.q, m, &epis[ei], y, &e), FOS_OK);
					snprintf(what, sizeof what, "N=%lld K=%lld epilogue %d M=%lld: gemm_w4 %s",
						 (long long)n, (long long)k, ei, (long long)m, name);
					same_rows(y, ref, m, n, what);
				}
				assert_int_equal(fos_cuda_smallm_variant(g_gpu, -1, 0, NULL, 0, &e), FOS_OK);
#endif
			}
			free(ref);
		}
		fos_qweight_free(g_gpu, &qw);
		fos_qtensor_free(g_gpu, &xq);
		uint16_t *bufs[] = {x, w, bias, xdec, wdec, y};
		for (int i = 0; i < 6; i++)
			g_gpu->free(g_gpu, bufs[i]);
		free(xh);
		free(wh);
		free(bh);
	}
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
}

static void test_gemm_w4_refuses(void **state)
{
	(void)state;
	NEED_GPU();
	assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, 16, 4096, 4096 + 16), 0);
	assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, 16, 4096, 64), 0);
	assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, 0, 4096, 4096), 0);
	assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, 129, 4096, 4096), 0);
	assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, 1, 16, 128), 1);
	assert_int_equal(g_gpu->gemm_w4_takes(g_gpu, 1, 4096, 4096), 1);
	fos_qtensor q;
	fos_err e;
	assert_int_equal(fos_qtensor_alloc(g_gpu, &q, 16, 144, 0, &e), FOS_OK);
	uint16_t *a = g_gpu->alloc(g_gpu, 16 * 144 * 2), *y = g_gpu->alloc(g_gpu, 16 * 16 * 2);
	assert_int_equal(g_gpu->gemm_w4(g_gpu, a, &q, 16, NULL, y, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "K=144"));
	fos_qtensor_free(g_gpu, &q);
	g_gpu->free(g_gpu, a);
	g_gpu->free(g_gpu, y);
}

/* ---- the forward --------------------------------------------------------------------------------- */

typedef int (*w4_fn)(fos_backend *, const uint16_t *, const fos_qtensor *, int64_t, const fos_gemm_epi *, uint16_t *,
		     fos_err *);

/* y = the forward of x's first m rows with o (saving a context when save), gemm_w4 on or off. */
static void forward(const uint16_t *x, int64_t m, const fos_qweight *qw, const fos_linear_opts *o, const uint16_t *bias,
		    int save, int w4_on, uint16_t *y)
{
	fos_err e;
	w4_fn keep = g_gpu->gemm_w4;
	if (!w4_on)
		g_gpu->gemm_w4 = NULL;
	fos_saved sv;
	int rc = fos_linear_forward(g_gpu, x, m, qw, o, bias, y, save ? &sv : NULL, &e);
	g_gpu->gemm_w4 = keep;
	if (rc)
		fprintf(stderr, "forward: %s\n", e.msg);
	assert_int_equal(rc, FOS_OK);
	if (save)
		fos_saved_free(g_gpu, &sv);
}

static void test_forward_batch_invariant(void **state)
{
	(void)state;
	NEED_GPU();
	fos_err e;
	const int wopts[2][3] = {{FOS_BLOCK_16X16, FOS_ERR_MAE, 256}, {FOS_BLOCK_1X16, FOS_ERR_MSE, 448}};
	const int saves[4] = {-1, FOS_OVR_DEFAULT, FOS_OVR_DEQUANTIZED, FOS_OVR_HIGH_PRECISION};
	const int64_t ms[] = {1, 16, 64, 128, 129, 1024};
	int cases = 0;
	for (int s = 0; s < 2; s++) {
		const int64_t n = g_shapes[s][0], k = g_shapes[s][1];
		uint16_t *xh = rand_bf16(MMAX * k, 1.0f), *wh = rand_bf16(n * k, 0.02f), *bh = rand_bf16(n, 0.5f);
		xh[3] = fos_f32_to_bf16(40.0f); /* the per-tensor amax, in row 0: the same for every M */
		uint16_t *x = dev_copy(xh, (size_t)(MMAX * k) * 2), *w = dev_copy(wh, (size_t)(n * k) * 2);
		uint16_t *bias = dev_copy(bh, (size_t)n * 2), *y = g_gpu->alloc(g_gpu, (size_t)(MMAX * n) * 2);
		for (int wi = 0; wi < 2; wi++) {
			fos_linear_opts o = fos_linear_opts_default();
			o.weight_block = wopts[wi][0];
			o.err_mode = wopts[wi][1];
			o.bound = wopts[wi][2];
			fos_qweight qw;
			assert_int_equal(fos_qweight_make_uses(g_gpu, w, n, k, &o, FOS_USES_ALL, &qw, &e), FOS_OK);
			for (int rs = 0; rs < 2; rs++)
				for (int hb = 0; hb < 2; hb++)
					for (int sv = 0; sv < 4; sv++) {
						o.row_scaled = rs;
						o.override = saves[sv] < 0 ? FOS_OVR_DEFAULT : saves[sv];
						const int save = saves[sv] >= 0;
						const uint16_t *b = hb ? bias : NULL;
						forward(x, MMAX, &qw, &o, b, save, 1, y);
						uint16_t *ref = host_copy(y, (size_t)(1024 * n) * 2);
						for (int mi = 0; mi < 6; mi++) {
							const int64_t m = ms[mi];
							char what[200];
							snprintf(what, sizeof what,
								 "forward N=%lld K=%lld weight %d row_scaled %d bias %d save %d M=%lld",
								 (long long)n, (long long)k, wi, rs, hb, saves[sv], (long long)m);
							forward(x, m, &qw, &o, b, save, 1, y);
							same_rows(y, ref, m, n, what);
							if (m <= 128) {
#ifdef FOS_HAVE_CUDA
								char w2[240];
								snprintf(w2, sizeof w2, "%s (gemm_w4 wherever it runs)", what);
								assert_int_equal(fos_cuda_smallm_variant(g_gpu, -2, 0, NULL, 0, &e), FOS_OK);
								forward(x, m, &qw, &o, b, save, 1, y);
								assert_int_equal(fos_cuda_smallm_variant(g_gpu, -1, 0, NULL, 0, &e), FOS_OK);
								same_rows(y, ref, m, n, w2);
#endif
								strcat(what, " (gemm_w4 off)");
								forward(x, m, &qw, &o, b, save, 0, y);
								same_rows(y, ref, m, n, what);
							}
							cases++;
						}
						free(ref);
					}
			fos_qweight_free(g_gpu, &qw);
		}
		uint16_t *bufs[] = {x, w, bias, y};
		for (int i = 0; i < 4; i++)
			g_gpu->free(g_gpu, bufs[i]);
		free(xh);
		free(wh);
		free(bh);
	}
	printf("gpu_smallm: %d forward cases bit-identical to the M = %d rows\n", cases, MMAX);
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
}

static int setup(void **state)
{
	(void)state;
	return tgpu_open("gpu_smallm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_w4_refuses),
		cmocka_unit_test(test_gemm_w4_bits),
		cmocka_unit_test(test_forward_batch_invariant),
	};
	return cmocka_run_group_tests(tests, setup, tgpu_close);
}
