/* gpu_linear.c: the CUDA backend's GEMM, gemm_ex, column sum and the linear layer (kernels/linear.c
 * on CUDA) against the CPU backend: quantized operands (weights, columnwise copies, saved X) bit for
 * bit; GEMM outputs (forward Y, dX, dW, grad-bias) with SQNR > 60 dB; the dequantized and
 * high_precision backward bit for bit against the CUDA gemm_ex applied to the defined operands (the
 * call linear.c makes), and against gemm on explicitly transposed copies (bit for bit reported,
 * SQNR > 60 dB asserted); the GEMM epilogue bit for bit against the CPU's on data whose FP32
 * accumulation is exact in any order (so only the epilogue can differ), through both epilogue paths
 * (cuBLASLt alpha, own FP32 epilogue) and every gemm_ex layout; gemm_ex on every layout against
 * gemm on transposed copies (identical bytes reported, SQNR > 60 dB asserted); determinism over
 * repeated runs; a report of batch invariance (rows 0..15 of Y for M = 16 against M = 8192); and
 * the quantized forward / backward with the backend's quantize_t (columnwise X, the weight's
 * columnwise copy, dY^T read in place) bit for bit equal to the same calls with quantize_t
 * switched off (linear.c's transpose-then-quantize path), to the same calls with every quantize
 * launch on one CTA, and to the same calls with grad_pair switched off (the two gradient quantizes
 * of dY, rowwise and through quantize_t); the linear cases under each four_over_six scope
 * (NUMERICS.md section 11: plain operands, their columnwise copies, each operand's own D).
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
#include "cuda_backend.h"
#include "support_cuda_hooks.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static uint64_t g_rng = 0x13198A2E03707344ull;
static uint32_t rnd32(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return (uint32_t)(g_rng >> 32);
}
static float urand(void)
{
	return (float)(rnd32() >> 8) / 8388608.0f - 1.0f;
}

static uint16_t *rand_bf16(int64_t n, float scale)
{
	uint16_t *p = malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		p[i] = fos_f32_to_bf16((urand() + urand() + urand()) * scale);
	return p;
}

static void *dev_copy(fos_backend *be, const void *h, size_t n)
{
	void *d = be->alloc(be, n);
	fos_err e;
	assert_non_null(d);
	assert_int_equal(be->h2d(be, d, h, n, &e), FOS_OK);
	return d;
}

static void *host_copy(fos_backend *be, const void *d, size_t n)
{
	void *h = malloc(n);
	fos_err e;
	assert_non_null(h);
	int rc = be->d2h(be, h, d, n, &e);
	if (rc)
		fprintf(stderr, "d2h: %s\n", e.msg);
	assert_int_equal(rc, FOS_OK);
	return h;
}

static double sqnr_db(const uint16_t *ref, const uint16_t *x, int64_t n)
{
	double s = 0, e = 0;
	for (int64_t i = 0; i < n; i++) {
		double r = fos_bf16_to_f32(ref[i]), v = fos_bf16_to_f32(x[i]);
		s += r * r;
		e += (r - v) * (r - v);
	}
	if (e == 0)
		return 999.0;
	return 10.0 * log10(s / e);
}

static int64_t diff_bytes(const void *a, const void *b, size_t n)
{
	const uint8_t *p = a, *q = b;
	int64_t d = 0;
	for (size_t i = 0; i < n; i++)
		d += p[i] != q[i];
	return d;
}

/* ---- GEMM epilogue, bit for bit --------------------------------------------------------------- */

/* Operands of small integers times 2^e per row: every partial sum is an integer multiple of the
 * row's 2^e below 2^24 of it, exact in FP32 whatever the order; so GPU and CPU accumulators are
 * equal and the outputs can differ only through the epilogue. */
static uint16_t *exact_operand(int64_t rows, int64_t k)
{
	uint16_t *p = malloc((size_t)(rows * k) * 2);
	for (int64_t r = 0; r < rows; r++) {
		int e = (int)(rnd32() % 9) - 4;
		for (int64_t c = 0; c < k; c++)
			p[r * k + c] = fos_f32_to_bf16(ldexpf((float)((int)(rnd32() % 15) - 7), e));
	}
	return p;
}

static void gemm_both(const uint16_t *ah, const uint16_t *bh, int64_t m, int64_t n, int64_t k, const float *a_amax,
		      const float *b_amax, float dinv_a, float dinv_b, const float *rs, const uint16_t *bias,
		      uint16_t **yc, uint16_t **yg)
{
	fos_err e;
	fos_backend *bes[2] = {g_cpu, g_gpu};
	uint16_t **outs[2] = {yc, yg};
	for (int w = 0; w < 2; w++) {
		fos_backend *be = bes[w];
		uint16_t *a = dev_copy(be, ah, (size_t)(m * k) * 2), *b = dev_copy(be, bh, (size_t)(n * k) * 2);
		uint16_t *y = be->alloc(be, (size_t)(m * n) * 2);
		float *aa = a_amax ? dev_copy(be, a_amax, 4) : NULL, *ba = b_amax ? dev_copy(be, b_amax, 4) : NULL;
		float *r = rs ? dev_copy(be, rs, (size_t)m * 4) : NULL;
		uint16_t *bi = bias ? dev_copy(be, bias, (size_t)n * 2) : NULL;
		fos_gemm_epi epi = {aa, dinv_a, ba, dinv_b, r, bi};
		int rc = be->gemm(be, a, b, m, n, k, &epi, y, &e);
		if (rc)
			fprintf(stderr, "%s gemm: %s\n", be->name, e.msg);
		assert_int_equal(rc, FOS_OK);
		*outs[w] = host_copy(be, y, (size_t)(m * n) * 2);
		be->free(be, a);
		be->free(be, b);
		be->free(be, y);
		if (aa)
			be->free(be, aa);
		if (ba)
			be->free(be, ba);
		if (r)
			be->free(be, r);
		if (bi)
			be->free(be, bi);
	}
}

static void test_gemm_epilogue_exact(void **state)
{
	(void)state;
	NEED_GPU();
	fos_err e;
	const int64_t m = 256, n = 384, k = 512;
	int64_t total = 0, bad[2] = {0, 0};
	for (int path = 0; path < 2; path++) { /* 0: cuBLASLt alpha epilogue, 1: FP32 + own epilogue */
#ifdef FOS_HAVE_CUDA
		assert_int_equal(fos_cuda_set_gemm_f32(g_gpu, path, &e), FOS_OK);
#endif
		for (int trial = 0; trial < 24; trial++) {
			uint16_t *a = exact_operand(m, k), *b = exact_operand(n, k);
			/* amaxes / dinvs spread over many exponents so alpha rounds everywhere */
			float aa = ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 40) - 20);
			float ba = ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 40) - 20);
			float dinv_a = trial % 3 ? 1.0f / 2688.0f : 1.0f / 1536.0f, dinv_b = 1.0f / 1536.0f;
			float *rs = NULL;
			uint16_t *bias = NULL;
			int mode = trial % 4; /* 0 plain alpha from host, 1 device alpha, 2 + row scale, 3 + bias */
			if (mode == 0) {
				dinv_a = ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 20) - 10);
				dinv_b = 1.0f;
			}
			if (mode == 2) {
				rs = malloc((size_t)m * 4);
				for (int64_t i = 0; i < m; i++)
					rs[i] = ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 30) - 15);
			}
			if (mode == 3 || trial % 5 == 0)
				bias = rand_bf16(n, 50.0f);
			uint16_t *yc, *yg;
			gemm_both(a, b, m, n, k, mode ? &aa : NULL, mode ? &ba : NULL, dinv_a, dinv_b, rs, bias, &yc, &yg);
			int64_t d = diff_bytes(yc, yg, (size_t)(m * n) * 2);
			bad[path] += d;
			total += m * n;
			if (d)
				fprintf(stderr, "epilogue path %d trial %d mode %d: %lld bytes differ\n", path, trial, mode,
					(long long)d);
			free(a);
			free(b);
			free(rs);
			free(bias);
			free(yc);
			free(yg);
		}
	}
#ifdef FOS_HAVE_CUDA
	assert_int_equal(fos_cuda_set_gemm_f32(g_gpu, 0, &e), FOS_OK);
#endif
	(void)e;
	printf("GEMM epilogue on exactly accumulated data: cuBLASLt-alpha path %lld, FP32+own path %lld differing "
	       "bytes of %lld outputs\n",
	       (long long)bad[0], (long long)bad[1], (long long)total);
	assert_true(bad[0] == 0 && bad[1] == 0);
}

/* The bias pass over more 8-wide vectors than its grid has threads (each thread walks several
 * rows' worth), n a multiple of 8 that does not divide the grid's stride: the CPU's bytes. */
static void test_gemm_bias_grid_stride(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t m = 24000, n = 104, k = 64;
	uint16_t *a = exact_operand(m, k), *b = exact_operand(n, k), *bias = rand_bf16(n, 50.0f), *yc, *yg;
	gemm_both(a, b, m, n, k, NULL, NULL, 1.0f, 1.0f, NULL, bias, &yc, &yg);
	assert_memory_equal(yc, yg, (size_t)(m * n) * 2);
	free(a);
	free(b);
	free(bias);
	free(yc);
	free(yg);
}

/* Random data: SQNR against the CPU, repeat runs identical, both epilogue paths close. */
static void test_gemm_random(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t m = 512, n = 256, k = 1024;
	uint16_t *a = rand_bf16(m * k, 1.0f), *b = rand_bf16(n * k, 0.05f), *bias = rand_bf16(n, 1.0f);
	float aa = 3.5f, ba = 0.25f, *rs = malloc((size_t)m * 4);
	for (int64_t i = 0; i < m; i++)
		rs[i] = 0.5f + (float)i / (float)m;
	for (int mode = 0; mode < 3; mode++) {
		uint16_t *yc, *yg, *yc2, *yg2;
		gemm_both(a, b, m, n, k, mode ? &aa : NULL, mode ? &ba : NULL, 1.0f / 1536, 1.0f / 1536,
			  mode == 2 ? rs : NULL, mode ? bias : NULL, &yc, &yg);
		gemm_both(a, b, m, n, k, mode ? &aa : NULL, mode ? &ba : NULL, 1.0f / 1536, 1.0f / 1536,
			  mode == 2 ? rs : NULL, mode ? bias : NULL, &yc2, &yg2);
		double s = sqnr_db(yc, yg, m * n);
		printf("gemm random mode %d: SQNR %.1f dB vs CPU\n", mode, s);
		assert_true(s > 60.0);
		assert_memory_equal(yg, yg2, (size_t)(m * n) * 2);
		assert_memory_equal(yc, yc2, (size_t)(m * n) * 2);
		free(yc);
		free(yg);
		free(yc2);
		free(yg2);
	}
	free(a);
	free(b);
	free(bias);
	free(rs);
}

/* ---- gemm_ex ---------------------------------------------------------------------------------- */

/* The stored form of a (rows, cols) device operand: itself, or its (cols, rows) transpose. */
static uint16_t *stored(fos_backend *be, const uint16_t *d, int64_t rows, int64_t cols, int trans)
{
	fos_err e;
	uint16_t *t = be->alloc(be, (size_t)(rows * cols) * 2);
	assert_non_null(t);
	if (trans)
		assert_int_equal(be->transpose(be, d, t, rows, cols, 2, &e), FOS_OK);
	else
		assert_int_equal(be->d2d(be, t, d, (size_t)(rows * cols) * 2, &e), FOS_OK);
	return t;
}

/* An epilogue of the given mode in backend memory: 0 plain, 1 alpha from device amaxes, 2 + row
 * scale (FP32 path), 3 + bias. Freed with epi_free. */
static fos_gemm_epi epi_make(fos_backend *be, int mode, int64_t m, int64_t n)
{
	fos_gemm_epi epi = fos_gemm_epi_plain();
	if (mode == 0)
		return epi;
	float am[2] = {ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 20) - 10),
		       ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 20) - 10)};
	float *d = dev_copy(be, am, sizeof am);
	epi.a_amax = d;
	epi.b_amax = d + 1;
	epi.a_dinv = 1.0f / 2688.0f;
	epi.b_dinv = 1.0f / 1536.0f;
	if (mode == 2) {
		float *rs = malloc((size_t)m * 4);
		for (int64_t i = 0; i < m; i++)
			rs[i] = ldexpf(1.0f + urand() * 0.99f, (int)(rnd32() % 30) - 15);
		epi.row_scale = dev_copy(be, rs, (size_t)m * 4);
		free(rs);
	}
	if (mode == 3) {
		uint16_t *b = rand_bf16(n, 2.0f);
		epi.bias = dev_copy(be, b, (size_t)n * 2);
		free(b);
	}
	return epi;
}

static void epi_free(fos_backend *be, fos_gemm_epi *epi)
{
	if (epi->a_amax)
		be->free(be, (void *)epi->a_amax);
	if (epi->row_scale)
		be->free(be, (void *)epi->row_scale);
	if (epi->bias)
		be->free(be, (void *)epi->bias);
}

/* gemm_ex bit for bit against the CPU's gemm_ex on exactly accumulated data, every layout and
 * epilogue mode: proves the layouts (which element is A[m, k]) and the shared epilogue. */
static void test_gemm_ex_exact(void **state)
{
	(void)state;
	NEED_GPU();
	assert_non_null(g_gpu->gemm_ex);
	assert_non_null(g_cpu->gemm_ex);
	const int64_t sh[][3] = {{256, 384, 512}, {136, 200, 72}, {100, 60, 40}};
	fos_err e;
	int64_t total = 0, bad = 0;
	for (int s = 0; s < 3; s++) {
		int64_t m = sh[s][0], n = sh[s][1], k = sh[s][2];
		for (int lay = 0; lay < 4; lay++) {
			int ta = lay & 1, tb = lay >> 1;
			for (int mode = 0; mode < 4; mode++) {
				uint16_t *ah = exact_operand(m, k), *bh = exact_operand(n, k);
				uint16_t *yh[2];
				fos_backend *bes[2] = {g_cpu, g_gpu};
				uint64_t keep = g_rng;
				for (int w = 0; w < 2; w++) {
					fos_backend *be = bes[w];
					g_rng = keep; /* the same epilogue values on both */
					uint16_t *a0 = dev_copy(be, ah, (size_t)(m * k) * 2), *b0 = dev_copy(be, bh, (size_t)(n * k) * 2);
					uint16_t *a = stored(be, a0, m, k, ta), *b = stored(be, b0, n, k, tb);
					uint16_t *y = be->alloc(be, (size_t)(m * n) * 2);
					fos_gemm_epi epi = epi_make(be, mode, m, n);
					int rc = be->gemm_ex(be, a, ta, b, tb, m, n, k, &epi, y, &e);
					if (rc)
						fprintf(stderr, "%s gemm_ex: %s\n", be->name, e.msg);
					assert_int_equal(rc, FOS_OK);
					yh[w] = host_copy(be, y, (size_t)(m * n) * 2);
					epi_free(be, &epi);
					uint16_t *bufs[] = {a0, b0, a, b, y};
					for (int i = 0; i < 5; i++)
						be->free(be, bufs[i]);
				}
				int64_t d = diff_bytes(yh[0], yh[1], (size_t)(m * n) * 2);
				if (d)
					fprintf(stderr, "gemm_ex exact M=%lld N=%lld K=%lld ta %d tb %d mode %d: %lld bytes differ\n",
						(long long)m, (long long)n, (long long)k, ta, tb, mode, (long long)d);
				bad += d;
				total += m * n;
				free(yh[0]);
				free(yh[1]);
				free(ah);
				free(bh);
			}
		}
	}
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
	printf("gemm_ex on exactly accumulated data, 4 layouts x 4 epilogues x 3 shapes: %lld differing bytes of "
	       "%lld outputs vs the CPU's gemm_ex\n",
	       (long long)bad, (long long)total);
	assert_true(bad == 0);
}

/* gemm_ex on each stored-transposed layout against gemm on the (M, K) / (N, K) operands, random
 * data, including the backward's shapes. Identical bytes are reported (cuBLASLt may choose another
 * kernel for another layout, so only FP32 accumulation order may differ); SQNR > 60 dB is asserted.
 * Repeat calls give the same bytes. */
static void test_gemm_ex_layouts(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t sh[][3] = {{512, 256, 1024}, {256, 384, 512}, {100, 60, 40},
				 {8192, 4096, 4096}, {4096, 4096, 8192}, {2048, 14336, 4096}};
	fos_err e;
	int64_t bad_all = 0, outs = 0;
	for (int s = 0; s < 6; s++) {
		int64_t m = sh[s][0], n = sh[s][1], k = sh[s][2];
		int big = m * n * k > ((int64_t)1 << 30);
		uint16_t *ah = rand_bf16(m * k, 1.0f), *bh = rand_bf16(n * k, 0.05f);
		uint16_t *a0 = dev_copy(g_gpu, ah, (size_t)(m * k) * 2), *b0 = dev_copy(g_gpu, bh, (size_t)(n * k) * 2);
		uint16_t *y = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2), *y2 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
		for (int mode = 0; mode < (big ? 1 : 4); mode++) {
			fos_gemm_epi epi = epi_make(g_gpu, mode, m, n);
			assert_int_equal(g_gpu->gemm(g_gpu, a0, b0, m, n, k, &epi, y, &e), FOS_OK);
			uint16_t *ref = host_copy(g_gpu, y, (size_t)(m * n) * 2);
			for (int lay = 0; lay < 4; lay++) {
				int ta = lay & 1, tb = lay >> 1;
				uint16_t *a = stored(g_gpu, a0, m, k, ta), *b = stored(g_gpu, b0, n, k, tb);
				int rc = g_gpu->gemm_ex(g_gpu, a, ta, b, tb, m, n, k, &epi, y, &e);
				if (rc)
					fprintf(stderr, "gemm_ex: %s\n", e.msg);
				assert_int_equal(rc, FOS_OK);
				assert_int_equal(g_gpu->gemm_ex(g_gpu, a, ta, b, tb, m, n, k, &epi, y2, &e), FOS_OK);
				uint16_t *got = host_copy(g_gpu, y, (size_t)(m * n) * 2), *got2 = host_copy(g_gpu, y2, (size_t)(m * n) * 2);
				assert_memory_equal(got, got2, (size_t)(m * n) * 2);
				int64_t d = diff_bytes(ref, got, (size_t)(m * n) * 2);
				double q = sqnr_db(ref, got, m * n);
				char a1[160] = "?", a2[160] = "?";
#ifdef FOS_HAVE_CUDA
				fos_cuda_gemm_ex_describe(g_gpu, 0, 0, m, n, k, a1, sizeof a1, &e);
				fos_cuda_gemm_ex_describe(g_gpu, ta, tb, m, n, k, a2, sizeof a2, &e);
#endif
				printf("gemm_ex M=%lld N=%lld K=%lld ta %d tb %d epilogue %d: %s (%lld bytes differ, SQNR %.1f dB) "
				       "vs gemm on transposed copies; algos [%s] vs [%s]\n",
				       (long long)m, (long long)n, (long long)k, ta, tb, mode, d ? "DIFFER" : "identical",
				       (long long)d, q, a2, a1);
				assert_true(q > 60.0);
				bad_all += d;
				outs += m * n;
				free(got);
				free(got2);
				g_gpu->free(g_gpu, a);
				g_gpu->free(g_gpu, b);
			}
			free(ref);
			epi_free(g_gpu, &epi);
		}
		uint16_t *bufs[] = {a0, b0, y, y2};
		for (int i = 0; i < 4; i++)
			g_gpu->free(g_gpu, bufs[i]);
		free(ah);
		free(bh);
	}
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
	printf("gemm_ex vs gemm on transposed copies, all layouts and shapes: %s (%lld differing bytes of %lld "
	       "outputs)\n",
	       bad_all ? "NOT bit for bit (SQNR > 60 dB holds)" : "BIT FOR BIT identical", (long long)bad_all,
	       (long long)outs);
}

static void test_colsum(void **state)
{
	(void)state;
	NEED_GPU();
	/* one chunk and a part, several chunks with a partial last one (both tiles used), a partial
	 * block of columns, the scalar kernel (n % 8 != 0), a layer of the small GPT's shape */
	const int64_t sh[][2] = {{1024, 512}, {300, 72}, {129, 13}, {1000, 40}, {257, 8}, {4096, 1536}};
	fos_err e;
	for (int s = 0; s < (int)(sizeof sh / sizeof sh[0]); s++) {
		int64_t m = sh[s][0], n = sh[s][1];
		uint16_t *dy = rand_bf16(m * n, 2.0f), *dbc = malloc((size_t)n * 2);
		assert_non_null(dbc);
		assert_int_equal(g_cpu->colsum(g_cpu, dy, m, n, dbc, &e), FOS_OK);
		uint16_t *d = dev_copy(g_gpu, dy, (size_t)(m * n) * 2), *db = g_gpu->alloc(g_gpu, (size_t)n * 2);
		assert_int_equal(g_gpu->colsum(g_gpu, d, m, n, db, &e), FOS_OK);
		uint16_t *dbg = host_copy(g_gpu, db, (size_t)n * 2);
		assert_memory_equal(dbc, dbg, (size_t)n * 2); /* same strict row order */
		free(dbg);
		free(dbc);
		free(dy);
		g_gpu->free(g_gpu, d);
		g_gpu->free(g_gpu, db);
	}
}

/* Rows 0..15 of Y = X W^T for M = 16 (and 128, 1024) against M = 8192: reported, not asserted. */
static void test_batch_invariance(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t shp[][2] = {{4096, 4096}, {8192, 8192}, {14336, 4096}};
	fos_err e;
	for (int s = 0; s < 3; s++) {
		int64_t n = shp[s][0], k = shp[s][1], mmax = 8192;
		uint16_t *xh = rand_bf16(mmax * k, 1.0f), *wh = rand_bf16(n * k, 0.02f);
		uint16_t *x = dev_copy(g_gpu, xh, (size_t)(mmax * k) * 2), *w = dev_copy(g_gpu, wh, (size_t)(n * k) * 2);
		uint16_t *y = g_gpu->alloc(g_gpu, (size_t)(mmax * n) * 2);
		fos_gemm_epi epi = fos_gemm_epi_plain();
		assert_int_equal(g_gpu->gemm(g_gpu, x, w, mmax, n, k, &epi, y, &e), FOS_OK);
		uint16_t *full = host_copy(g_gpu, y, (size_t)(16 * n) * 2);
		const int64_t ms[] = {16, 128, 1024};
		for (int i = 0; i < 3; i++) {
			assert_int_equal(g_gpu->gemm(g_gpu, x, w, ms[i], n, k, &epi, y, &e), FOS_OK);
			uint16_t *part = host_copy(g_gpu, y, (size_t)(16 * n) * 2);
			int64_t d = diff_bytes(full, part, (size_t)(16 * n) * 2);
			char a1[160] = "?", a2[160] = "?";
#ifdef FOS_HAVE_CUDA
			fos_cuda_gemm_describe(g_gpu, ms[i], n, k, a1, sizeof a1, &e);
			fos_cuda_gemm_describe(g_gpu, mmax, n, k, a2, sizeof a2, &e);
#endif
			printf("batch invariance N=%lld K=%lld: rows 0..15 for M=%lld vs M=%lld: %s (%lld bytes differ); "
			       "algos [%s] vs [%s]\n",
			       (long long)n, (long long)k, (long long)ms[i], (long long)mmax, d ? "DIFFER" : "identical",
			       (long long)d, a1, a2);
			free(part);
		}
		free(full);
		free(xh);
		free(wh);
		g_gpu->free(g_gpu, x);
		g_gpu->free(g_gpu, w);
		g_gpu->free(g_gpu, y);
	}
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
}

/* ---- the linear layer -------------------------------------------------------------------------- */

static void cmp_q(fos_backend *bc, const fos_qtensor *qc, const fos_qtensor *qg, const char *what)
{
	if (!qc->codes) {
		assert_null(qg->codes);
		return;
	}
	assert_non_null(qg->codes);
	size_t n = (size_t)(qc->rows * qc->cols);
	size_t na = qc->row_scaled ? (size_t)qc->rows : 1;
	uint8_t *c = host_copy(g_gpu, qg->codes, n / 2), *s = host_copy(g_gpu, qg->scales, n / 16);
	float *a = host_copy(g_gpu, qg->amax, na * 4);
	(void)bc;
	int64_t d = diff_bytes(qc->codes, c, n / 2) + diff_bytes(qc->scales, s, n / 16) + diff_bytes(qc->amax, a, na * 4);
	if (d)
		fprintf(stderr, "%s: %lld bytes differ\n", what, (long long)d);
	assert_true(d == 0);
	free(c);
	free(s);
	free(a);
}

static void cmp_bf16(const uint16_t *hc, const uint16_t *dg, int64_t n, const char *what)
{
	if (!hc) {
		assert_null(dg);
		return;
	}
	uint16_t *g = host_copy(g_gpu, dg, (size_t)n * 2);
	int64_t d = diff_bytes(hc, g, (size_t)n * 2);
	if (d)
		fprintf(stderr, "%s: %lld bytes differ\n", what, (long long)d);
	assert_true(d == 0);
	free(g);
}

/* The weights' decoded GEMM operands (rowwise, or columnwise when col), CPU's against CUDA's. */
static void cmp_wdec(const fos_qweight *wc, const fos_qweight *wg, int col, const char *what)
{
	size_t bytes = (size_t)(wc->n * wc->k) * 2;
	uint16_t *hc = malloc(bytes), *dg = g_gpu->alloc(g_gpu, bytes);
	fos_err e;
	assert_true(hc && dg);
	assert_int_equal(fos_qweight_decode(g_cpu, wc, col, hc, &e), FOS_OK);
	assert_int_equal(fos_qweight_decode(g_gpu, wg, col, dg, &e), FOS_OK);
	cmp_bf16(hc, dg, wc->n * wc->k, what);
	g_gpu->free(g_gpu, dg);
	free(hc);
}

static int64_t g_lin_cases, g_lin_transposed_diff;

static void linear_case(int64_t m, int64_t n, int64_t k, const fos_linear_opts *o, int with_bias)
{
	fos_err e;
	int ovr;
	assert_int_equal(fos_linear_check(o, m, n, k, &ovr, &e), FOS_OK);
	uint16_t *xh = rand_bf16(m * k, 1.0f), *wh = rand_bf16(n * k, 0.05f), *dyh = rand_bf16(m * n, 0.1f);
	uint16_t *bh = with_bias ? rand_bf16(n, 0.5f) : NULL;
	for (int64_t i = 0; i < m * k; i += 61) /* some outliers, -0 and a zero block */
		xh[i] = (i % 2) ? fos_f32_to_bf16(40.0f * urand()) : 0x8000;
	memset(xh + 16 * 7, 0, 32);
	/* CPU */
	fos_qweight wc, wg;
	fos_saved sc, sg;
	uint16_t *yc = malloc((size_t)(m * n) * 2), *dxc = malloc((size_t)(m * k) * 2), *dwc = malloc((size_t)(n * k) * 2);
	uint16_t dbc[1024];
	assert_int_equal(fos_qweight_make(g_cpu, wh, n, k, o, 1, 1, &wc, &e), FOS_OK);
	assert_int_equal(fos_linear_forward(g_cpu, xh, m, &wc, o, bh, yc, &sc, &e), FOS_OK);
	assert_int_equal(fos_linear_backward(g_cpu, &sc, &wc, dyh, dxc, dwc, bh ? dbc : NULL, &e), FOS_OK);
	/* GPU */
	uint16_t *x = dev_copy(g_gpu, xh, (size_t)(m * k) * 2), *w = dev_copy(g_gpu, wh, (size_t)(n * k) * 2);
	uint16_t *dy = dev_copy(g_gpu, dyh, (size_t)(m * n) * 2), *b = bh ? dev_copy(g_gpu, bh, (size_t)n * 2) : NULL;
	uint16_t *y = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2), *dx = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2);
	uint16_t *dw = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2), *db = g_gpu->alloc(g_gpu, (size_t)n * 2);
	int rc = fos_qweight_make(g_gpu, w, n, k, o, 1, 1, &wg, &e);
	if (rc)
		fprintf(stderr, "qweight_make: %s\n", e.msg);
	assert_int_equal(rc, FOS_OK);
	rc = fos_linear_forward(g_gpu, x, m, &wg, o, b, y, &sg, &e);
	if (rc)
		fprintf(stderr, "forward: %s\n", e.msg);
	assert_int_equal(rc, FOS_OK);
	rc = fos_linear_backward(g_gpu, &sg, &wg, dy, dx, dw, b ? db : NULL, &e);
	if (rc)
		fprintf(stderr, "backward: %s\n", e.msg);
	assert_int_equal(rc, FOS_OK);
	/* quantized operands, bit for bit */
	cmp_q(g_cpu, &wc.q, &wg.q, "weight rowwise");
	cmp_wdec(&wc, &wg, 0, "weight decoded");
	cmp_q(g_cpu, &wc.qcol, &wg.qcol, "weight columnwise");
	cmp_wdec(&wc, &wg, 1, "weight columnwise decoded");
	cmp_q(g_cpu, &sc.xq, &sg.xq, "saved x rowwise");
	cmp_q(g_cpu, &sc.xcol, &sg.xcol, "saved x columnwise");
	cmp_bf16(sc.xcol_decoded, sg.xcol_decoded, m * k, "saved x columnwise decoded");
	/* GEMM outputs */
	uint16_t *yg = host_copy(g_gpu, y, (size_t)(m * n) * 2), *dxg = host_copy(g_gpu, dx, (size_t)(m * k) * 2);
	uint16_t *dwg = host_copy(g_gpu, dw, (size_t)(n * k) * 2);
	/* one gradient skipped (BackwardRequest.skip_dx / skip_dw): the other's bits unchanged */
	for (int skip = 0; skip < 2; skip++) {
		uint16_t *g1 = g_gpu->alloc(g_gpu, skip ? (size_t)(m * k) * 2 : (size_t)(n * k) * 2);
		rc = fos_linear_backward(g_gpu, &sg, &wg, dy, skip ? g1 : NULL, skip ? NULL : g1, NULL, &e);
		if (rc)
			fprintf(stderr, "backward skipping d%s: %s\n", skip ? "W" : "X", e.msg);
		assert_int_equal(rc, FOS_OK);
		uint16_t *h1 = host_copy(g_gpu, g1, skip ? (size_t)(m * k) * 2 : (size_t)(n * k) * 2);
		assert_memory_equal(h1, skip ? dxg : dwg, skip ? (size_t)(m * k) * 2 : (size_t)(n * k) * 2);
		free(h1);
		g_gpu->free(g_gpu, g1);
	}
	double s_y = sqnr_db(yc, yg, m * n), s_dx = sqnr_db(dxc, dxg, m * k), s_dw = sqnr_db(dwc, dwg, n * k);
	double s_db = 999.0;
	if (bh) {
		uint16_t *dbg = host_copy(g_gpu, db, (size_t)n * 2);
		s_db = sqnr_db(dbc, dbg, n);
		assert_memory_equal(dbc, dbg, (size_t)n * 2);
		free(dbg);
	}
	printf("linear M=%lld N=%lld K=%lld ovr %d block %s err %s bound %d rs %d bias %d: SQNR Y %.1f dX %.1f dW %.1f "
	       "db %.1f dB\n",
	       (long long)m, (long long)n, (long long)k, ovr, o->weight_block ? "16x16" : "1x16",
	       o->err_mode ? "mse" : "mae", o->bound, o->row_scaled, with_bias, s_y, s_dx, s_dw, s_db);
	assert_true(s_y > 60.0 && s_dx > 60.0 && s_dw > 60.0);
	/* high_precision / dequantized: bitwise the CUDA bf16 GEMM on the defined operands: gemm_ex with
	 * the layouts linear.c uses (asserted), and gemm on explicitly transposed copies (reported;
	 * SQNR > 60 dB asserted) */
	if (ovr != FOS_OVR_QUANTIZED) {
		fos_gemm_epi plain = fos_gemm_epi_plain();
		uint16_t *wop = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2), *xop = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2);
		uint16_t *t1 = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2), *t2 = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2);
		uint16_t *t3 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
		uint16_t *rdx = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2), *rdw = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2);
		if (ovr == FOS_OVR_HIGH_PRECISION) {
			assert_int_equal(g_gpu->d2d(g_gpu, wop, w, (size_t)(n * k) * 2, &e), FOS_OK);
			assert_int_equal(g_gpu->d2d(g_gpu, xop, x, (size_t)(m * k) * 2, &e), FOS_OK);
		} else { /* dequantize(quantize(.)) with the backend's own ops */
			fos_qtensor qx;
			/* each operand as its scope says: 4/6 with the bound, or plain NVFP4 (bound 448) */
			int x46 = o->four_over_six == FOS_SCOPE_ALL || o->four_over_six == FOS_SCOPE_ACTIVATIONS;
			int w46 = o->four_over_six == FOS_SCOPE_ALL || o->four_over_six == FOS_SCOPE_WEIGHTS;
			fos_qcfg cx = {x46 ? FOS_RECIPE_4OVER6 : FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, o->err_mode,
				       x46 ? o->bound : 448, o->row_scaled};
			fos_qcfg cw = {w46 ? FOS_RECIPE_4OVER6 : FOS_RECIPE_NVFP4, o->weight_block, o->err_mode,
				       w46 ? o->bound : 448, 0};
			assert_int_equal(fos_qtensor_alloc(g_gpu, &qx, m, k, o->row_scaled, &e), FOS_OK);
			assert_int_equal(g_gpu->quantize(g_gpu, x, FOS_BF16, m, k, &cx, NULL, &qx, NULL, &e), FOS_OK);
			assert_int_equal(g_gpu->dequantize(g_gpu, &qx, FOS_BF16, xop, &e), FOS_OK);
			fos_qtensor_free(g_gpu, &qx);
			assert_int_equal(fos_qtensor_alloc(g_gpu, &qx, n, k, 0, &e), FOS_OK);
			assert_int_equal(g_gpu->quantize(g_gpu, w, FOS_BF16, n, k, &cw, NULL, &qx, NULL, &e), FOS_OK);
			assert_int_equal(g_gpu->dequantize(g_gpu, &qx, FOS_BF16, wop, &e), FOS_OK);
			fos_qtensor_free(g_gpu, &qx);
		}
		if (g_gpu->gemm_ex) {
			assert_int_equal(g_gpu->gemm_ex(g_gpu, dy, 0, wop, 1, m, k, n, &plain, rdx, &e), FOS_OK);
			assert_int_equal(g_gpu->gemm_ex(g_gpu, dy, 1, xop, 1, n, k, m, &plain, rdw, &e), FOS_OK);
			uint16_t *h1 = host_copy(g_gpu, rdx, (size_t)(m * k) * 2), *h2 = host_copy(g_gpu, rdw, (size_t)(n * k) * 2);
			assert_memory_equal(h1, dxg, (size_t)(m * k) * 2);
			assert_memory_equal(h2, dwg, (size_t)(n * k) * 2);
			free(h1);
			free(h2);
		}
		assert_int_equal(g_gpu->transpose(g_gpu, wop, t1, n, k, 2, &e), FOS_OK);
		assert_int_equal(g_gpu->gemm(g_gpu, dy, t1, m, k, n, &plain, rdx, &e), FOS_OK);
		assert_int_equal(g_gpu->transpose(g_gpu, dy, t3, m, n, 2, &e), FOS_OK);
		assert_int_equal(g_gpu->transpose(g_gpu, xop, t2, m, k, 2, &e), FOS_OK);
		assert_int_equal(g_gpu->gemm(g_gpu, t3, t2, n, k, m, &plain, rdw, &e), FOS_OK);
		uint16_t *h1 = host_copy(g_gpu, rdx, (size_t)(m * k) * 2), *h2 = host_copy(g_gpu, rdw, (size_t)(n * k) * 2);
		int64_t d1 = diff_bytes(h1, dxg, (size_t)(m * k) * 2), d2 = diff_bytes(h2, dwg, (size_t)(n * k) * 2);
		double q1 = sqnr_db(h1, dxg, m * k), q2 = sqnr_db(h2, dwg, n * k);
		printf("  backward ovr %d vs gemm on transposed copies: dX %s (%lld bytes, %.1f dB), dW %s (%lld bytes, "
		       "%.1f dB)\n",
		       ovr, d1 ? "DIFFERS" : "identical", (long long)d1, q1, d2 ? "DIFFERS" : "identical", (long long)d2, q2);
		g_lin_transposed_diff += d1 + d2;
		if (!g_gpu->gemm_ex) { /* the explicit-transpose path is then what linear.c ran */
			assert_memory_equal(h1, dxg, (size_t)(m * k) * 2);
			assert_memory_equal(h2, dwg, (size_t)(n * k) * 2);
		}
		assert_true(q1 > 60.0 && q2 > 60.0);
		free(h1);
		free(h2);
		uint16_t *bufs[] = {wop, xop, t1, t2, t3, rdx, rdw};
		for (int i = 0; i < 7; i++)
			g_gpu->free(g_gpu, bufs[i]);
	}
	/* determinism: the same forward again gives the same bytes */
	uint16_t *y2 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
	assert_int_equal(fos_linear_forward(g_gpu, x, m, &wg, o, b, y2, NULL, &e), FOS_OK);
	uint16_t *y2h = host_copy(g_gpu, y2, (size_t)(m * n) * 2);
	assert_memory_equal(y2h, yg, (size_t)(m * n) * 2);
	free(y2h);
	g_gpu->free(g_gpu, y2);
	free(yg);
	free(dxg);
	free(dwg);
	fos_saved_free(g_cpu, &sc);
	fos_saved_free(g_gpu, &sg);
	fos_qweight_free(g_cpu, &wc);
	fos_qweight_free(g_gpu, &wg);
	uint16_t *gb[] = {x, w, dy, y, dx, dw, db};
	for (int i = 0; i < 7; i++)
		g_gpu->free(g_gpu, gb[i]);
	if (b)
		g_gpu->free(g_gpu, b);
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
	free(xh);
	free(wh);
	free(dyh);
	free(bh);
	free(yc);
	free(dxc);
	free(dwc);
	g_lin_cases++;
}

static void test_linear_all_overrides(void **state)
{
	(void)state;
	NEED_GPU();
	const int ovrs[] = {FOS_OVR_DEFAULT, FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
	for (int sc = FOS_SCOPE_ALL; sc <= FOS_SCOPE_NONE; sc++) /* four_over_six per operand (section 11) */
	for (int oi = 0; oi < 4; oi++)
		for (int wb = 0; wb < 2; wb++)
			for (int rs = 0; rs < 2; rs++) {
				fos_linear_opts o = fos_linear_opts_default();
				o.four_over_six = sc;
				o.override = ovrs[oi];
				o.weight_block = wb ? FOS_BLOCK_16X16 : FOS_BLOCK_1X16;
				o.row_scaled = rs;
				o.err_mode = (oi + wb) % 2 ? FOS_ERR_MSE : FOS_ERR_MAE;
				o.bound = rs ? 448 : 256;
				fos_err e;
				if (fos_linear_check(&o, 128, 128, 128, NULL, &e))
					continue;
				linear_case(256, 384, 512, &o, (oi + rs) % 2);
			}
	fos_linear_opts o = fos_linear_opts_default();
	linear_case(128, 128, 128, &o, 1);
	linear_case(512, 256, 1024, &o, 0);
	printf("linear: %lld cases; bf16 backward (gemm_ex) vs gemm on transposed copies: %lld differing bytes in "
	       "total\n",
	       (long long)g_lin_cases, (long long)g_lin_transposed_diff);
}

/* The quantized override through quantize_t against the same calls with be->quantize_t switched
 * off (linear.c then transposes and quantizes), and against the same calls through other kernels
 * (every quantize launch on one CTA, so each cp.async ring buffer of quantize_t is refilled many
 * times; and be->grad_pair switched off, so dY goes through the rowwise gradient quantizer and
 * quantize_t instead of the fused kernel): saved columnwise X, the
 * weight's columnwise copy (made eagerly and lazily from the master), dX and dW, bit for bit. */
static void test_linear_quantize_t(void **state)
{
	(void)state;
	NEED_GPU();
	assert_non_null(g_gpu->quantize_t);
	const int64_t sh[][3] = {{256, 384, 512}, {2048, 1024, 1536}, {1024, 4096, 512}};
	int64_t cases = 0;
	for (int s = 0; s < 3; s++)
		for (int v = 0; v < 8; v++) {
			int64_t m = sh[s][0], n = sh[s][1], k = sh[s][2];
			fos_linear_opts o = fos_linear_opts_default();
			o.override = FOS_OVR_QUANTIZED;
			o.four_over_six = v < 4 ? FOS_SCOPE_ALL : v - 4; /* v 4..7: every scope (section 11) */
			o.weight_block = v & 1 ? FOS_BLOCK_1X16 : FOS_BLOCK_16X16;
			o.err_mode = v & 2 ? FOS_ERR_MSE : FOS_ERR_MAE;
			o.bound = v & 2 ? 448 : 256;
			const int eager = (v + s) % 2; /* build the columnwise weight now, or lazily in backward */
			fos_err e;
			uint16_t *xh = rand_bf16(m * k, 1.0f), *wh = rand_bf16(n * k, 0.05f), *dyh = rand_bf16(m * n, 0.1f);
			uint16_t *x = dev_copy(g_gpu, xh, (size_t)(m * k) * 2), *w = dev_copy(g_gpu, wh, (size_t)(n * k) * 2);
			uint16_t *dy = dev_copy(g_gpu, dyh, (size_t)(m * n) * 2);
			uint16_t *y = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
			void *res[4][8];
			/* pass 0: default; 1: quantize_t off; 2: one CTA; 3: grad_pair off */
			static const char *pass_name[4] = {"default", "quantize_t off", "one CTA", "grad_pair off"};
			int (*keep)(fos_backend *, const void *, int, int64_t, int64_t, const fos_qcfg *, const float *,
				    fos_qtensor *, uint16_t *, fos_err *) = g_gpu->quantize_t;
			int (*keep_pair)(fos_backend *, const uint16_t *, int64_t, int64_t, const float *, uint16_t *,
					 uint16_t *, fos_err *) = g_gpu->grad_pair;
			for (int pass = 0; pass < 4; pass++) {
				g_gpu->quantize_t = pass == 1 ? NULL : keep;
				g_gpu->grad_pair = pass == 3 ? NULL : keep_pair;
#ifdef FOS_HAVE_CUDA
				assert_int_equal(fos_cuda_set_one_cta(g_gpu, pass == 2, &e), FOS_OK);
#endif
				fos_qweight qw;
				fos_saved sv;
				uint16_t *dx = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2), *dw = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2);
				int rc = fos_qweight_make(g_gpu, w, n, k, &o, 1, eager, &qw, &e);
				if (!rc)
					rc = fos_linear_forward(g_gpu, x, m, &qw, &o, NULL, y, &sv, &e);
				if (!rc)
					rc = fos_linear_backward(g_gpu, &sv, &qw, dy, dx, dw, NULL, &e);
				g_gpu->quantize_t = keep;
				g_gpu->grad_pair = keep_pair;
#ifdef FOS_HAVE_CUDA
				assert_int_equal(fos_cuda_set_one_cta(g_gpu, 0, &e), FOS_OK);
#endif
				if (rc)
					fprintf(stderr, "quantized linear (%s): %s\n", pass_name[pass], e.msg);
				assert_int_equal(rc, FOS_OK);
				assert_non_null(qw.qcol.codes);
				assert_non_null(sv.xcol.codes);
				res[pass][0] = host_copy(g_gpu, sv.xcol.codes, (size_t)(m * k) / 2);
				res[pass][1] = host_copy(g_gpu, sv.xcol.scales, (size_t)(m * k) / 16);
				res[pass][2] = host_copy(g_gpu, sv.xcol_decoded, (size_t)(m * k) * 2);
				res[pass][3] = host_copy(g_gpu, qw.qcol.codes, (size_t)(n * k) / 2);
				res[pass][4] = host_copy(g_gpu, qw.qcol.scales, (size_t)(n * k) / 16);
				uint16_t *cdec = g_gpu->alloc(g_gpu, (size_t)(n * k) * 2);
				assert_non_null(cdec);
				assert_int_equal(fos_qweight_decode(g_gpu, &qw, 1, cdec, &e), FOS_OK);
				res[pass][5] = host_copy(g_gpu, cdec, (size_t)(n * k) * 2);
				g_gpu->free(g_gpu, cdec);
				res[pass][6] = host_copy(g_gpu, dx, (size_t)(m * k) * 2);
				res[pass][7] = host_copy(g_gpu, dw, (size_t)(n * k) * 2);
				fos_saved_free(g_gpu, &sv);
				fos_qweight_free(g_gpu, &qw);
				g_gpu->free(g_gpu, dx);
				g_gpu->free(g_gpu, dw);
			}
			const size_t bytes[8] = {(size_t)(m * k) / 2, (size_t)(m * k) / 16, (size_t)(m * k) * 2,
						 (size_t)(n * k) / 2, (size_t)(n * k) / 16, (size_t)(n * k) * 2,
						 (size_t)(m * k) * 2, (size_t)(n * k) * 2};
			static const char *what[8] = {"saved x columnwise codes", "saved x columnwise scales",
						      "saved x columnwise decoded", "weight columnwise codes",
						      "weight columnwise scales", "weight columnwise decoded", "dX", "dW"};
			int64_t d = 0;
			for (int i = 0; i < 8; i++) {
				int64_t di = diff_bytes(res[0][i], res[1][i], bytes[i]);
				int64_t dv = diff_bytes(res[0][i], res[2][i], bytes[i]) + diff_bytes(res[0][i], res[3][i], bytes[i]);
				if (di)
					fprintf(stderr, "M=%lld N=%lld K=%lld config %d: %s: %lld bytes differ with quantize_t\n",
						(long long)m, (long long)n, (long long)k, v, what[i], (long long)di);
				if (dv)
					fprintf(stderr, "M=%lld N=%lld K=%lld config %d: %s: %lld bytes differ on one CTA / without grad_pair\n",
						(long long)m, (long long)n, (long long)k, v, what[i], (long long)dv);
				d += di + dv;
				free(res[0][i]);
				free(res[1][i]);
				free(res[2][i]);
				free(res[3][i]);
			}
			assert_true(d == 0);
			cases++;
			g_gpu->free(g_gpu, x);
			g_gpu->free(g_gpu, w);
			g_gpu->free(g_gpu, dy);
			g_gpu->free(g_gpu, y);
			assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
			free(xh);
			free(wh);
			free(dyh);
		}
	printf("quantized linear with quantize_t vs transpose + quantize, on one CTA and without grad_pair: %lld cases, "
	       "identical\n",
	       (long long)cases);
}

/* be->replay (CUDA graphs, cuda_graph.cu): a small forward run again and again on the same buffers
 * with changing contents gives the same bits with graphs as without, the graph really is recorded
 * and launched (not silently skipped), and a new output buffer is a new key. */
static void test_forward_replay(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_err e;
	const int64_t n = 512, k = 1024;
	const int64_t ms[] = {128, 256};
	for (int mi = 0; mi < 2; mi++)
		for (int with_bias = 0; with_bias < 2; with_bias++) {
			int64_t m = ms[mi];
			fos_linear_opts o = fos_linear_opts_default();
			uint16_t *wh = rand_bf16(n * k, 0.05f), *x1 = rand_bf16(m * k, 1.0f), *x2 = rand_bf16(m * k, 3.0f);
			uint16_t *bh = with_bias ? rand_bf16(n, 0.5f) : NULL;
			uint16_t *wd = dev_copy(g_gpu, wh, (size_t)(n * k) * 2);
			uint16_t *bd = bh ? dev_copy(g_gpu, bh, (size_t)n * 2) : NULL;
			fos_qweight qw;
			assert_int_equal(fos_qweight_make(g_gpu, wd, n, k, &o, 0, 0, &qw, &e), FOS_OK);
			uint16_t *xd = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2), *yd = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
			uint16_t *yd2 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
			uint16_t *ref[2], *got = malloc((size_t)(m * n) * 2);
			const uint16_t *xs[2] = {x1, x2};
			/* references without graphs */
			assert_int_equal(fos_cuda_set_graphs(g_gpu, 0, &e), FOS_OK);
			for (int j = 0; j < 2; j++) {
				ref[j] = malloc((size_t)(m * n) * 2);
				assert_int_equal(g_gpu->h2d(g_gpu, xd, xs[j], (size_t)(m * k) * 2, &e), FOS_OK);
				assert_int_equal(fos_linear_forward(g_gpu, xd, m, &qw, &o, bd, yd, NULL, &e), FOS_OK);
				assert_int_equal(g_gpu->d2h(g_gpu, ref[j], yd, (size_t)(m * n) * 2, &e), FOS_OK);
			}
			assert_true(diff_bytes(ref[0], ref[1], (size_t)(m * n) * 2) != 0);
			assert_int_equal(fos_cuda_set_graphs(g_gpu, 1, &e), FOS_OK);
			unsigned long long r0, l0, f0, r1, l1, f1;
			assert_int_equal(fos_cuda_graph_stats(g_gpu, &r0, &l0, &f0, &e), FOS_OK);
			for (int i = 0; i < 8; i++) { /* run 1 plain, run 2 recorded, runs 3.. replayed */
				int j = i % 2;
				uint16_t *y = i == 7 ? yd2 : yd;
				assert_int_equal(g_gpu->h2d(g_gpu, xd, xs[j], (size_t)(m * k) * 2, &e), FOS_OK);
				assert_int_equal(fos_linear_forward(g_gpu, xd, m, &qw, &o, bd, y, NULL, &e), FOS_OK);
				assert_int_equal(g_gpu->d2h(g_gpu, got, y, (size_t)(m * n) * 2, &e), FOS_OK);
				int64_t d = diff_bytes(ref[j], got, (size_t)(m * n) * 2);
				if (d)
					fprintf(stderr, "replay m=%lld bias=%d call %d: %lld bytes differ\n", (long long)m,
						with_bias, i, (long long)d);
				assert_true(d == 0);
			}
			assert_int_equal(fos_cuda_graph_stats(g_gpu, &r1, &l1, &f1, &e), FOS_OK);
			printf("forward replay m=%lld bias=%d: %llu recorded, %llu launched, %llu failed; bit-identical\n",
			       (long long)m, with_bias, r1 - r0, l1 - l0, f1 - f0);
			assert_int_equal(f1 - f0, 0);
			assert_int_equal(r1 - r0, 1); /* yd2 (call 8) is a new key, seen once: not recorded */
			assert_int_equal(l1 - l0, 6); /* calls 2..7 */
			for (int j = 0; j < 2; j++)
				free(ref[j]);
			free(got);
			g_gpu->free(g_gpu, xd);
			g_gpu->free(g_gpu, yd);
			g_gpu->free(g_gpu, yd2);
			fos_qweight_free(g_gpu, &qw);
			g_gpu->free(g_gpu, wd);
			if (bd)
				g_gpu->free(g_gpu, bd);
			free(wh);
			free(x1);
			free(x2);
			free(bh);
		}
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
#endif
}

static int setup(void **state)
{
	(void)state;
	return tgpu_open("gpu_linear");
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gemm_epilogue_exact), cmocka_unit_test(test_gemm_bias_grid_stride),
		cmocka_unit_test(test_gemm_random),
		cmocka_unit_test(test_gemm_ex_exact),	    cmocka_unit_test(test_gemm_ex_layouts),
		cmocka_unit_test(test_colsum),		    cmocka_unit_test(test_linear_all_overrides),
		cmocka_unit_test(test_batch_invariance),    cmocka_unit_test(test_linear_quantize_t),
		cmocka_unit_test(test_forward_replay),
	};
	return cmocka_run_group_tests(tests, setup, tgpu_close);
}
