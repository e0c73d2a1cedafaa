/* gpu_quant.c: the CUDA backend's amax / quantize / dequantize / decode / transpose against the
 * CPU reference, bit for bit (NUMERICS.md section 9): every quantize config (4/6 1x16 and 16x16,
 * MAE and MSE, bound 256 and 448, per-tensor and row-scaled, given or computed amax, the NVFP4
 * gradient recipe), bf16 and f32 inputs, on the special data kinds (a -12..12 linspace with
 * +-1e-3 nudges, bf16 subnormals, -0, all-zero blocks, +-inf, NaN, dtype max) and random data, at
 * the shapes (128, 256), (64, 1024), (384, 256), (100, 320) and large ones; repeated runs give the
 * same bytes; the exhaustive self-tests of every fast replacement of an exact operation pass;
 * dequantize / decode of hand-made tensors holding every scale byte (the sign-bit bytes 0x80..0xFF,
 * which no quantizer writes, and the NaN bytes 0x7F / 0xFF) with every code, against the CPU;
 * quantize_t (an input stored transposed, read in place) against the CPU's quantize_t and against
 * CUDA quantize on a GPU-transposed copy, bit for bit, for every per-tensor config, bf16 and f32,
 * given and computed amax, with and without the decoded output, on support_ref.h's data kinds at
 * odd, non-square and large shapes (logical 4096x8192), on grids sized by occupancy and on one
 * CTA; row-scaled refused; the quantize kernels (rowwise and the transposed cp.async ring) on one
 * CTA, so every ring buffer is reused many times, against the CPU. Skips cleanly (exit 0) when there is no
 * usable GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support_gpu.h"
#include "backend.h"
#include "fos_format.h"
#include "support_ref.h"
#ifdef FOS_HAVE_CUDA
#include "cuda_backend.h"
#include "support_cuda_hooks.h"
#include "support_cuda_selftest.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- data ------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rnd32(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return (uint32_t)(g_rng >> 32);
}
static float urand(void) /* [-1, 1) */
{
	return (float)(rnd32() >> 8) / 8388608.0f - 1.0f;
}
static float nrand(void) /* roughly normal */
{
	return (urand() + urand() + urand() + urand()) * 0.8660254f;
}

enum kind {
	K_LINSPACE,
	K_SUBNORMAL,
	K_NEGZERO,
	K_ZEROBLOCKS,
	K_INF,
	K_NAN,
	K_MAX,
	K_RANDOM,
	K_WIDE, /* random exponents over the whole bf16 range */
	K_COUNT
};
static const char *kind_name[K_COUNT] = {"linspace", "subnormal", "negzero", "zeroblocks", "inf",
					 "nan",	     "dtypemax",  "random",  "wide"};

/* Fills n values (f32 before any cast) of the given kind for a (rows, cols) tensor. */
static void fill(float *v, int64_t rows, int64_t cols, int kind, int f32)
{
	int64_t n = rows * cols;
	float big = f32 ? FOS_FLT_MAX : fos_bf16_to_f32(0x7F7F);
	for (int64_t i = 0; i < n; i++) {
		float x = nrand() * 3.0f;
		switch (kind) {
		case K_LINSPACE:
			x = -12.0f + 24.0f * (float)i / (float)(n - 1);
			x += (i % 3 == 0) ? 1e-3f : (i % 3 == 1 ? -1e-3f : 0.0f);
			break;
		case K_SUBNORMAL:
			x = fos_bf16_to_f32((uint16_t)((rnd32() & 0x8000u) | (1u + rnd32() % 127u)));
			if (f32 && (i & 1))
				x = fos_u2f((rnd32() & 0x80000000u) | (1u + rnd32() % 0x7FFFFFu));
			break;
		case K_NEGZERO:
			if (rnd32() % 4 == 0)
				x = -0.0f;
			else if (rnd32() % 8 == 0)
				x = 0.0f;
			break;
		case K_ZEROBLOCKS:
			if (((i % cols) / 16 + (i / cols) / 16) % 3 == 0)
				x = (rnd32() & 1) ? -0.0f : 0.0f;
			break;
		case K_INF:
			if (rnd32() % 97 == 0)
				x = (rnd32() & 1) ? -INFINITY : INFINITY;
			break;
		case K_NAN:
			if (rnd32() % 89 == 0)
				x = NAN;
			if (i == 5)
				x = -NAN;
			break;
		case K_MAX:
			if (rnd32() % 7 == 0)
				x = (rnd32() & 1) ? -big : big;
			else
				x = urand() * big;
			break;
		case K_WIDE:
			x = ldexpf(urand(), (int)(rnd32() % 250) - 125);
			break;
		default:
			x = nrand() * ldexpf(1.0f, (int)((i / cols) % 13) - 6);
			break;
		}
		v[i] = x;
	}
}

/* The input in its dtype's bytes. */
static void *to_dtype(const float *v, int64_t n, int f32)
{
	if (f32) {
		float *p = malloc((size_t)n * 4);
		memcpy(p, v, (size_t)n * 4);
		return p;
	}
	uint16_t *p = malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		p[i] = fos_f32_to_bf16(v[i]);
	return p;
}

/* ---- running one quantize on a backend --------------------------------------------------------- */

typedef struct {
	uint8_t *codes, *scales;
	float *amax;
	uint16_t *dec;  /* fused decoded output */
	uint16_t *deq16; /* dequantize bf16 */
	float *deq32;   /* dequantize f32 */
	uint16_t *decode; /* decode op */
} qres;

static void qres_free(qres *r)
{
	free(r->codes);
	free(r->scales);
	free(r->amax);
	free(r->dec);
	free(r->deq16);
	free(r->deq32);
	free(r->decode);
	memset(r, 0, sizeof *r);
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

/* An amax pass over a scratch buffer: the CUDA quantize kernels walk an input from its end only
 * when the backend's last amax pass read that input (its tail is then in L2), so after this a
 * quantize with a given amax walks from the start. Run before every quantize with a given amax, so
 * both walks are tested: computed amax from the end, given amax from the start. */
static void walk_from_start(fos_backend *be)
{
	fos_err e;
	uint16_t *s = be->alloc(be, 64);
	float *a = be->alloc(be, 4);
	assert_true(s && a);
	assert_int_equal(be->zero(be, s, 64, &e), FOS_OK);
	assert_int_equal(be->amax(be, s, FOS_BF16, 1, 32, 0, a, &e), FOS_OK);
	be->free(be, s);
	be->free(be, a);
}

static void run_quant(fos_backend *be, const void *xh, int f32, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		      const float *amax_in_h, int full, qres *r)
{
	fos_err e;
	size_t n = (size_t)(rows * cols), es = f32 ? 4 : 2;
	int64_t na = cfg->row_scaled ? rows : 1;
	void *x = dev_copy(be, xh, n * es);
	float *ain = amax_in_h ? dev_copy(be, amax_in_h, (size_t)na * 4) : NULL;
	fos_qtensor q;
	assert_int_equal(fos_qtensor_alloc(be, &q, rows, cols, cfg->row_scaled, &e), FOS_OK);
	uint16_t *dec = be->alloc(be, n * 2);
	assert_non_null(dec);
	if (ain)
		walk_from_start(be);
	int rc = be->quantize(be, x, f32 ? FOS_F32 : FOS_BF16, rows, cols, cfg, ain, &q, dec, &e);
	if (rc)
		fprintf(stderr, "%s quantize: %s\n", be->name, e.msg);
	assert_int_equal(rc, FOS_OK);
	r->codes = host_copy(be, q.codes, n / 2);
	r->scales = host_copy(be, q.scales, n / 16);
	r->amax = host_copy(be, q.amax, (size_t)na * 4);
	r->dec = host_copy(be, dec, n * 2);
	if (full) {
		uint16_t *o16 = be->alloc(be, n * 2);
		float *o32 = be->alloc(be, n * 4);
		assert_int_equal(be->dequantize(be, &q, FOS_BF16, o16, &e), FOS_OK);
		r->deq16 = host_copy(be, o16, n * 2);
		assert_int_equal(be->dequantize(be, &q, FOS_F32, o32, &e), FOS_OK);
		r->deq32 = host_copy(be, o32, n * 4);
		assert_int_equal(be->decode(be, &q, o16, &e), FOS_OK);
		r->decode = host_copy(be, o16, n * 2);
		be->free(be, o16);
		be->free(be, o32);
	}
	be->free(be, dec);
	fos_qtensor_free(be, &q);
	be->free(be, x);
	if (ain)
		be->free(be, ain);
	assert_int_equal(be->sync(be, &e), FOS_OK);
}

/* Bitwise, except that two NaNs are equal (NaN payloads are free, NUMERICS.md section 6). */
static int64_t diff16(const uint16_t *a, const uint16_t *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++) {
		int na = (a[i] & 0x7FFF) > 0x7F80, nb = (b[i] & 0x7FFF) > 0x7F80;
		if (a[i] != b[i] && !(na && nb))
			d++;
	}
	return d;
}
static int64_t diff32(const float *a, const float *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		if (fos_f2u(a[i]) != fos_f2u(b[i]) && !(a[i] != a[i] && b[i] != b[i]))
			d++;
	return d;
}
static int64_t diff8(const uint8_t *a, const uint8_t *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		d += a[i] != b[i];
	return d;
}

static int64_t g_cases;

/* Quantizes on both backends and compares every output. Returns the number of differing items. */
static int64_t compare_quant(const void *xh, int f32, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			     const float *amax_in, int full, const char *what)
{
	qres c = {0}, g = {0};
	run_quant(g_cpu, xh, f32, rows, cols, cfg, amax_in, full, &c);
	run_quant(g_gpu, xh, f32, rows, cols, cfg, amax_in, full, &g);
	int64_t n = rows * cols, na = cfg->row_scaled ? rows : 1;
	int64_t dc = diff8(c.codes, g.codes, n / 2), ds = diff8(c.scales, g.scales, n / 16);
	int64_t da = diff32(c.amax, g.amax, na), dd = diff16(c.dec, g.dec, n);
	int64_t d16 = 0, d32 = 0, ddc = 0;
	if (full) {
		d16 = diff16(c.deq16, g.deq16, n);
		d32 = diff32(c.deq32, g.deq32, n);
		ddc = diff16(c.decode, g.decode, n);
	}
	int64_t bad = dc + ds + da + dd + d16 + d32 + ddc;
	if (bad) {
		fprintf(stderr,
			"MISMATCH %s (%lld, %lld) %s recipe %d block %d err %d bound %d rows %d amax_in %d: codes %lld "
			"scales %lld amax %lld decoded %lld deq16 %lld deq32 %lld decode %lld\n",
			what, (long long)rows, (long long)cols, f32 ? "f32" : "bf16", cfg->recipe, cfg->block,
			cfg->err_mode, cfg->bound, cfg->row_scaled, amax_in != NULL, (long long)dc, (long long)ds,
			(long long)da, (long long)dd, (long long)d16, (long long)d32, (long long)ddc);
		for (int64_t i = 0, shown = 0; i < n / 16 && shown < 3; i++) {
			if (c.scales[i] != g.scales[i] || memcmp(c.codes + 8 * i, g.codes + 8 * i, 8)) {
				fprintf(stderr, "  block %lld: cpu sf %02x codes", (long long)i, c.scales[i]);
				for (int j = 0; j < 8; j++)
					fprintf(stderr, " %02x", c.codes[8 * i + j]);
				fprintf(stderr, " | gpu sf %02x codes", g.scales[i]);
				for (int j = 0; j < 8; j++)
					fprintf(stderr, " %02x", g.codes[8 * i + j]);
				fprintf(stderr, "\n");
				shown++;
			}
		}
	}
	g_cases++;
	qres_free(&c);
	qres_free(&g);
	return bad;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_selftests(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	static const char *what[6] = {"x / D (D = 6, 1536, 2688) by reciprocal + 2 FMA", "e2m1 code by 3 comparisons",
				      "hardware e4m3x2 conversion",
				      "e2m1 code by one FMA (floats >= 0, NaNs, -0)",
				      "decode by byte permutes (128 scale bytes x 2^16 chunks x 2 layouts x 16 elements)",
				      "bf16 sign bits by byte permutes (2^16 patterns x 64 blocks)"};
	static const char *count[6] = {"3 x 2^32", "2^32", "2 x 2^32", "2^31 + 2^23", "2^28", "2^22"};
	for (int w = 0; w < 6; w++) {
		unsigned long long bad = 1;
		fos_err e;
		int rc = fos_cuda_selftest(g_gpu, w, &bad, &e);
		if (rc)
			fprintf(stderr, "selftest %d: %s\n", w, e.msg);
		assert_int_equal(rc, FOS_OK);
		printf("exhaustive self-test %d (%s): %llu of %s inputs differ\n", w, what[w], bad, count[w]);
		assert_true(bad == 0);
	}
#endif
}

static const int64_t shapes[][2] = {{128, 256}, {64, 1024}, {384, 256}, {100, 320}};

/* Every config x kind x shape x dtype, with full dequantize/decode comparison. */
static void test_special_kinds(void **state)
{
	(void)state;
	NEED_GPU();
	int64_t bad = 0, before = g_cases;
	for (int s = 0; s < 4; s++) {
		int64_t rows = shapes[s][0], cols = shapes[s][1];
		float *v = malloc((size_t)(rows * cols) * 4);
		for (int kind = 0; kind < K_COUNT; kind++) {
			for (int f32 = 0; f32 < 2; f32++) {
				fill(v, rows, cols, kind, f32);
				void *xh = to_dtype(v, rows * cols, f32);
				for (int recipe = 0; recipe < 2; recipe++)
					for (int block = 0; block < 2; block++)
						for (int em = 0; em < 2; em++)
							for (int bound = 0; bound < 2; bound++)
								for (int rs = 0; rs < 2; rs++) {
									fos_qcfg c = {recipe, block, em, bound ? 448 : 256, rs};
									fos_err e;
									if (fos_qcfg_check(&c, rows, cols, &e))
										continue;
									if (recipe == FOS_RECIPE_NVFP4 && em)
										continue;
									bad += compare_quant(xh, f32, rows, cols, &c, NULL, 1,
											     kind_name[kind]);
								}
				free(xh);
			}
		}
		free(v);
	}
	printf("special kinds: %lld cases, %lld differing items\n", (long long)(g_cases - before), (long long)bad);
	assert_true(bad == 0);
}

/* A given amax (the columnwise / gradient path), larger and smaller than the data's, and row amax. */
static void test_amax_in(void **state)
{
	(void)state;
	NEED_GPU();
	int64_t rows = 128, cols = 256, bad = 0;
	float *v = malloc((size_t)(rows * cols) * 4);
	float am[128];
	for (int kind = 0; kind < K_COUNT; kind++) {
		fill(v, rows, cols, kind, 0);
		void *xh = to_dtype(v, rows * cols, 0);
		for (int t = 0; t < 4; t++) {
			for (int r = 0; r < rows; r++)
				am[r] = t == 0 ? 1.0f : (t == 1 ? 1e-3f : (t == 2 ? 65504.0f * (r + 1) : 0.0f));
			for (int recipe = 0; recipe < 2; recipe++)
				for (int rs = 0; rs < 2; rs++) {
					fos_qcfg c = {recipe, FOS_BLOCK_1X16, FOS_ERR_MAE, recipe ? 448 : 256, rs};
					fos_err e;
					if (fos_qcfg_check(&c, rows, cols, &e))
						continue;
					bad += compare_quant(xh, 0, rows, cols, &c, am, 1, kind_name[kind]);
				}
			fos_qcfg c16 = {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0};
			bad += compare_quant(xh, 0, rows, cols, &c16, am, 1, kind_name[kind]);
		}
		free(xh);
	}
	free(v);
	assert_true(bad == 0);
}

/* Large random tensors, the shapes the benchmarks use, in every main config. */
static void test_large_random(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t sh[][2] = {{2048, 5120}, {1024, 8192}, {4096, 1536}};
	int64_t bad = 0;
	for (int s = 0; s < 3; s++) {
		int64_t rows = sh[s][0], cols = sh[s][1];
		float *v = malloc((size_t)(rows * cols) * 4);
		fill(v, rows, cols, s == 2 ? K_WIDE : K_RANDOM, 0);
		void *xh = to_dtype(v, rows * cols, 0);
		const fos_qcfg cfgs[] = {
			{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},
			{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
			{FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0},
			{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1},
			{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
			{FOS_RECIPE_NVFP4, FOS_BLOCK_16X16, FOS_ERR_MAE, 448, 0}, /* plain operands (section 11) */
			{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 1},
		};
		for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
			bad += compare_quant(xh, 0, rows, cols, &cfgs[c], NULL, c == 0, "large random");
		free(xh);
		free(v);
	}
	assert_true(bad == 0);
}

/* Repeated runs give the same bytes, on grids sized by occupancy and on one CTA (each persistent
 * CTA then walks every block or tile itself). */
static void test_determinism(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	int64_t rows = 1024, cols = 4096, n = rows * cols;
	float *v = malloc((size_t)n * 4);
	fill(v, rows, cols, K_RANDOM, 0);
	for (int64_t i = 0; i < n; i += 997)
		v[i] = (i % 3) ? -0.0f : 1e-30f;
	void *xh = to_dtype(v, n, 0);
	fos_err e;
	const fos_qcfg cfgs[] = {
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1},
		{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
		{FOS_RECIPE_NVFP4, FOS_BLOCK_16X16, FOS_ERR_MAE, 448, 0},
		{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 1},
	};
	for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
		qres ref = {0};
		assert_int_equal(fos_cuda_set_one_cta(g_gpu, 0, &e), FOS_OK);
		run_quant(g_gpu, xh, 0, rows, cols, &cfgs[c], NULL, 0, &ref);
		for (int pass = 0; pass < 3; pass++) { /* default again, one CTA, default again */
			const int one = pass == 1;
			qres r = {0};
			assert_int_equal(fos_cuda_set_one_cta(g_gpu, one, &e), FOS_OK);
			run_quant(g_gpu, xh, 0, rows, cols, &cfgs[c], NULL, 0, &r);
			int64_t d = diff8(ref.codes, r.codes, n / 2) + diff8(ref.scales, r.scales, n / 16) +
				    diff16(ref.dec, r.dec, n);
			if (d)
				fprintf(stderr, "pass %d (%s) config %zu differs in %lld items\n", pass, one ? "one CTA" : "default",
					c, (long long)d);
			assert_true(d == 0);
			qres_free(&r);
		}
		qres_free(&ref);
	}
	assert_int_equal(fos_cuda_set_one_cta(g_gpu, 0, &e), FOS_OK);
	free(xh);
	free(v);
#endif
}

static void test_transpose_amax(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t sh[][2] = {{128, 256}, {67, 45}, {1, 1000}, {1000, 3}, {256, 1024}};
	fos_err e;
	for (int s = 0; s < 5; s++) {
		int64_t rows = sh[s][0], cols = sh[s][1], n = rows * cols;
		for (int es = 1; es <= 4; es *= 2) {
			uint8_t *h = malloc((size_t)n * es);
			for (int64_t i = 0; i < n * es; i++)
				h[i] = (uint8_t)rnd32();
			void *d = dev_copy(g_gpu, h, (size_t)n * es), *t = g_gpu->alloc(g_gpu, (size_t)n * es);
			assert_int_equal(g_gpu->transpose(g_gpu, d, t, rows, cols, (size_t)es, &e), FOS_OK);
			uint8_t *th = host_copy(g_gpu, t, (size_t)n * es);
			for (int64_t r = 0; r < rows; r++)
				for (int64_t c = 0; c < cols; c++)
					assert_memory_equal(th + (c * rows + r) * es, h + (r * cols + c) * es, (size_t)es);
			free(th);
			free(h);
			g_gpu->free(g_gpu, d);
			g_gpu->free(g_gpu, t);
		}
		/* amax of odd shapes, both dtypes, both modes */
		for (int f32 = 0; f32 < 2; f32++) {
			float *v = malloc((size_t)n * 4);
			fill(v, rows, cols, s % 2 ? K_NAN : K_MAX, f32);
			void *xh = to_dtype(v, n, f32);
			for (int pr = 0; pr < 2; pr++) {
				int64_t na = pr ? rows : 1;
				float *oc = malloc((size_t)na * 4);
				void *dx = dev_copy(g_gpu, xh, (size_t)n * (f32 ? 4 : 2));
				float *og = g_gpu->alloc(g_gpu, (size_t)na * 4);
				assert_int_equal(g_cpu->amax(g_cpu, xh, f32, rows, cols, pr, oc, &e), FOS_OK);
				assert_int_equal(g_gpu->amax(g_gpu, dx, f32, rows, cols, pr, og, &e), FOS_OK);
				float *gh = host_copy(g_gpu, og, (size_t)na * 4);
				assert_true(diff32(oc, gh, na) == 0);
				free(gh);
				free(oc);
				g_gpu->free(g_gpu, dx);
				g_gpu->free(g_gpu, og);
			}
			free(xh);
			free(v);
		}
	}
}

/* Every scale byte 0x00..0xFF (0x80..0xFF: sign bit set, never written by a quantizer; 0x7F and
 * 0xFF: NaN) with every code 0..15, dequantized (bf16, f32; per tensor and row-scaled; bound 256 and
 * 448; amax normal, tiny, huge (overflowing to inf) and 0) and decoded, on both backends: bit for
 * bit, NaN outputs by NaN-ness only. Block b holds scale byte b % 256 and codes (j + b / 256) % 16,
 * so each of the 4096 (scale, code) pairs occurs. The GPU output is poisoned first. */
static void test_scale_bytes(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t rows = 64, cols = 256, n = rows * cols, nblk = n / 16; /* 1024 blocks */
	uint8_t *codes = malloc((size_t)n / 2), *scales = malloc((size_t)nblk);
	for (int64_t b = 0; b < nblk; b++) {
		scales[b] = (uint8_t)(b % 256);
		for (int j = 0; j < 8; j++) {
			uint32_t lo = (uint32_t)(2 * j + b / 256) % 16u, hi = (uint32_t)(2 * j + 1 + b / 256) % 16u;
			codes[8 * b + j] = (uint8_t)(lo | (hi << 4));
		}
	}
	const float amaxes[] = {3.5f, 1e-30f, 3e38f, 0.0f};
	float ra[64];
	fos_err e;
	int64_t bad = 0, compared = 0, high = 0, nan_outs = 0;
	for (int ai = 0; ai < 5; ai++) { /* 4 per-tensor amaxes, then per-row */
		int rs = ai == 4;
		for (int r = 0; r < rows; r++)
			ra[r] = rs ? ldexpf(1.0f + (float)r / 64.0f, r - 32) * (r % 5 ? 1.0f : -1.0f) : amaxes[ai];
		for (int bound = 256; bound <= 448; bound += 192) {
			for (int out = 0; out < 3; out++) { /* 0 bf16 dequantize, 1 f32 dequantize, 2 decode */
				if (out == 2 && bound != 256)
					continue; /* decode ignores amax and bound */
				void *res[2];
				fos_backend *bes[2] = {g_cpu, g_gpu};
				for (int w = 0; w < 2; w++) {
					fos_backend *be = bes[w];
					fos_qtensor q;
					assert_int_equal(fos_qtensor_alloc(be, &q, rows, cols, rs, &e), FOS_OK);
					q.bound = bound;
					assert_int_equal(be->h2d(be, q.codes, codes, (size_t)n / 2, &e), FOS_OK);
					assert_int_equal(be->h2d(be, q.scales, scales, (size_t)nblk, &e), FOS_OK);
					assert_int_equal(be->h2d(be, q.amax, ra, (size_t)(rs ? rows : 1) * 4, &e), FOS_OK);
					size_t ob = (size_t)n * (out == 1 ? 4 : 2);
					void *o = be->alloc(be, ob);
					assert_non_null(o);
					uint8_t *poison = malloc(ob);
					memset(poison, 0x5A, ob);
					assert_int_equal(be->h2d(be, o, poison, ob, &e), FOS_OK);
					free(poison);
					int rc = out == 2 ? be->decode(be, &q, o, &e)
							  : be->dequantize(be, &q, out == 1 ? FOS_F32 : FOS_BF16, o, &e);
					if (rc)
						fprintf(stderr, "%s dequantize: %s\n", be->name, e.msg);
					assert_int_equal(rc, FOS_OK);
					res[w] = host_copy(be, o, ob);
					be->free(be, o);
					fos_qtensor_free(be, &q);
				}
				int64_t d = 0;
				for (int64_t i = 0; i < n; i++) {
					int differ, isnan;
					if (out == 1) {
						const float *c = res[0], *g = res[1];
						isnan = c[i] != c[i];
						differ = (isnan || g[i] != g[i]) ? (c[i] != c[i]) != (g[i] != g[i])
										: fos_f2u(c[i]) != fos_f2u(g[i]);
					} else {
						const uint16_t *c = res[0], *g = res[1];
						int nc = (c[i] & 0x7FFF) > 0x7F80, ng = (g[i] & 0x7FFF) > 0x7F80;
						isnan = nc;
						differ = (nc || ng) ? nc != ng : c[i] != g[i];
					}
					if (differ && d < 4)
						fprintf(stderr, "scale byte %02x code %u amax case %d bound %d out %d: differ at %lld\n",
							scales[i / 16], (unsigned)((codes[i / 2] >> (4 * (i & 1))) & 15u), ai, bound,
							out, (long long)i);
					d += differ;
					high += scales[i / 16] >= 0x80;
					nan_outs += isnan;
				}
				bad += d;
				compared += n;
				free(res[0]);
				free(res[1]);
			}
		}
	}
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
	printf("every scale byte x every code: %lld outputs compared (%lld with a scale byte >= 0x80, %lld NaN on "
	       "the CPU), %lld differ from the CPU\n",
	       (long long)compared, (long long)high, (long long)nan_outs, (long long)bad);
	free(codes);
	free(scales);
	assert_true(bad == 0);
}

/* Bad inputs are refused with a message, like the CPU. */
static void test_errors(void **state)
{
	(void)state;
	NEED_GPU();
	fos_err e;
	fos_qtensor q;
	assert_int_equal(fos_qtensor_alloc(g_gpu, &q, 32, 32, 0, &e), FOS_OK);
	void *x = g_gpu->alloc(g_gpu, 32 * 48 * 2);
	fos_qcfg c = fos_qcfg_default();
	assert_int_equal(g_gpu->quantize(g_gpu, x, FOS_BF16, 32, 24, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "24"));
	c.bound = 300;
	assert_int_equal(g_gpu->quantize(g_gpu, x, FOS_BF16, 32, 32, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "300"));
	c = fos_qcfg_default();
	c.block = FOS_BLOCK_16X16;
	c.row_scaled = 1;
	assert_int_equal(g_gpu->quantize(g_gpu, x, FOS_BF16, 32, 32, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	g_gpu->free(g_gpu, x);
	fos_qtensor_free(g_gpu, &q);
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
}

/* ---- quantize_t ------------------------------------------------------------------------------ */

/* How one quantize_t case is run on a backend. */
enum { QT_OP = 0, QT_TRANSPOSE_THEN_QUANTIZE = 1 };

/* Quantizes the logical (rows, cols) tensor stored as xs (cols, rows) on be: through quantize_t, or
 * through be->transpose + be->quantize. Outputs are poisoned first, so an unwritten byte shows. */
static void run_quant_t(fos_backend *be, int how, const void *xs, int f32, int64_t rows, int64_t cols,
			const fos_qcfg *cfg, const float *amax_in_h, int with_dec, qres *r)
{
	fos_err e;
	size_t n = (size_t)(rows * cols), es = f32 ? 4 : 2;
	void *x = dev_copy(be, xs, n * es);
	float *ain = amax_in_h ? dev_copy(be, amax_in_h, 4) : NULL;
	fos_qtensor q;
	assert_int_equal(fos_qtensor_alloc(be, &q, rows, cols, 0, &e), FOS_OK);
	uint16_t *dec = with_dec ? be->alloc(be, n * 2) : NULL;
	uint8_t *poison = malloc(n * 2);
	memset(poison, 0xA5, n * 2);
	assert_int_equal(be->h2d(be, q.codes, poison, n / 2, &e), FOS_OK);
	assert_int_equal(be->h2d(be, q.scales, poison, n / 16, &e), FOS_OK);
	if (dec)
		assert_int_equal(be->h2d(be, dec, poison, n * 2, &e), FOS_OK);
	free(poison);
	int rc;
	if (ain)
		walk_from_start(be);
	if (how == QT_OP) {
		assert_non_null(be->quantize_t);
		rc = be->quantize_t(be, x, f32 ? FOS_F32 : FOS_BF16, rows, cols, cfg, ain, &q, dec, &e);
	} else {
		void *xt = be->alloc(be, n * es);
		assert_non_null(xt);
		rc = be->transpose(be, x, xt, cols, rows, es, &e);
		if (!rc)
			rc = be->quantize(be, xt, f32 ? FOS_F32 : FOS_BF16, rows, cols, cfg, ain, &q, dec, &e);
		if (!rc)
			rc = be->sync(be, &e);
		be->free(be, xt);
	}
	if (rc)
		fprintf(stderr, "%s quantize_t (how %d): %s\n", be->name, how, e.msg);
	assert_int_equal(rc, FOS_OK);
	r->codes = host_copy(be, q.codes, n / 2);
	r->scales = host_copy(be, q.scales, n / 16);
	r->amax = host_copy(be, q.amax, 4);
	if (dec)
		r->dec = host_copy(be, dec, n * 2);
	assert_true(q.rows == rows && q.cols == cols && q.bound == cfg->bound && q.row_scaled == 0);
	if (dec)
		be->free(be, dec);
	fos_qtensor_free(be, &q);
	be->free(be, x);
	if (ain)
		be->free(be, ain);
	assert_int_equal(be->sync(be, &e), FOS_OK);
}

static int64_t qres_diff(const qres *a, const qres *b, int64_t n, int with_dec, int64_t *dc, int64_t *ds, int64_t *da,
			 int64_t *dd)
{
	*dc = diff8(a->codes, b->codes, n / 2);
	*ds = diff8(a->scales, b->scales, n / 16);
	*da = diff32(a->amax, b->amax, 1);
	*dd = with_dec ? diff16(a->dec, b->dec, n) : 0;
	return *dc + *ds + *da + *dd;
}

static int64_t g_qt_cases;

/* One quantize_t case, three ways: CPU quantize_t (the reference), CUDA quantize_t, CUDA transpose
 * + quantize. Returns the number of differing items (both comparisons). */
static int64_t compare_quant_t(const void *xs, int f32, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			       const float *amax_in, int with_dec, const char *what)
{
	qres c = {0}, g = {0}, gt = {0};
	run_quant_t(g_cpu, QT_OP, xs, f32, rows, cols, cfg, amax_in, with_dec, &c);
	run_quant_t(g_gpu, QT_OP, xs, f32, rows, cols, cfg, amax_in, with_dec, &g);
	run_quant_t(g_gpu, QT_TRANSPOSE_THEN_QUANTIZE, xs, f32, rows, cols, cfg, amax_in, with_dec, &gt);
	int64_t n = rows * cols, dc, ds, da, dd, ec, es, ea, ed;
	int64_t bad = qres_diff(&c, &g, n, with_dec, &dc, &ds, &da, &dd);
	int64_t bad2 = qres_diff(&gt, &g, n, with_dec, &ec, &es, &ea, &ed);
	if (bad || bad2) {
		fprintf(stderr,
			"QUANTIZE_T MISMATCH %s logical (%lld, %lld) %s recipe %d block %d err %d bound %d amax_in %d dec %d: "
			"vs CPU quantize_t: codes %lld scales %lld amax %lld decoded %lld; vs CUDA transpose+quantize: "
			"codes %lld scales %lld amax %lld decoded %lld\n",
			what, (long long)rows, (long long)cols, f32 ? "f32" : "bf16", cfg->recipe, cfg->block, cfg->err_mode,
			cfg->bound, amax_in != NULL, with_dec, (long long)dc, (long long)ds, (long long)da, (long long)dd,
			(long long)ec, (long long)es, (long long)ea, (long long)ed);
		int64_t bpr = cols / 16;
		for (int64_t i = 0, shown = 0; i < n / 16 && shown < 3; i++) {
			if (c.scales[i] != g.scales[i] || memcmp(c.codes + 8 * i, g.codes + 8 * i, 8)) {
				fprintf(stderr, "  logical row %lld block %lld: cpu sf %02x codes", (long long)(i / bpr),
					(long long)(i % bpr), c.scales[i]);
				for (int j = 0; j < 8; j++)
					fprintf(stderr, " %02x", c.codes[8 * i + j]);
				fprintf(stderr, " | gpu sf %02x codes", g.scales[i]);
				for (int j = 0; j < 8; j++)
					fprintf(stderr, " %02x", g.codes[8 * i + j]);
				fprintf(stderr, "\n");
				shown++;
			}
		}
	}
	g_qt_cases++;
	qres_free(&c);
	qres_free(&g);
	qres_free(&gt);
	return bad + bad2;
}

/* The stored (cols, rows) form of a logical (rows, cols) tensor of kind `kind` (support_ref.h's
 * generators, which place their special blocks along the logical rows). */
static void *gen_stored(int kind, int64_t rows, int64_t cols, uint64_t seed, int f32)
{
	int64_t n = rows * cols;
	size_t es = f32 ? 4 : 2;
	uint8_t *logical = malloc((size_t)n * es), *stored = malloc((size_t)n * es);
	assert_non_null(logical);
	assert_non_null(stored);
	if (f32)
		ref_gen_f32(kind, rows, cols, seed, (float *)logical);
	else
		ref_gen_bf16(kind, rows, cols, seed, (uint16_t *)logical);
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			memcpy(stored + (c * rows + r) * es, logical + (r * cols + c) * es, es);
	free(logical);
	return stored;
}

/* The per-tensor configs quantize_t takes: 4/6 1x16 and 16x16 x MAE/MSE x bound 256/448, and plain
 * NVFP4 1x16 (the gradient's) and 16x16 (a plain weight's columnwise copy, section 11). */
static const fos_qcfg qt_cfgs[] = {
	{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},  {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
	{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 256, 0},  {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
	{FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0}, {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MAE, 448, 0},
	{FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 256, 0}, {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0},
	{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},  {FOS_RECIPE_NVFP4, FOS_BLOCK_16X16, FOS_ERR_MAE, 448, 0},
};
#define QT_NCFG ((int)(sizeof qt_cfgs / sizeof qt_cfgs[0]))

/* Every config x data kind x dtype at small shapes: square and not, partial tiles in both
 * directions (the kernel's tile is 64 x 64 logical), and stored rows that are not a multiple of 16
 * bytes (100 bf16: the element-load path). Given amax (1, 3e-3) or computed, decoded on or off. */
static void test_quantize_t_kinds(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t sh[][2] = {{128, 256}, {64, 1024}, {384, 256}, {100, 320}, {48, 80}, {72, 144}, {1040, 48}};
	const float given[2] = {1.0f, 3e-3f};
	int64_t bad = 0, before = g_qt_cases, skipped = 0;
	for (int s = 0; s < (int)(sizeof sh / sizeof sh[0]); s++) {
		int64_t rows = sh[s][0], cols = sh[s][1];
		for (int kind = 0; kind < REF_NKINDS; kind++)
			for (int f32 = 0; f32 < 2; f32++) {
				void *xs = gen_stored(kind, rows, cols, 1000u + 37u * (uint64_t)s + 3u * (uint64_t)kind + (uint64_t)f32,
						      f32);
				for (int ci = 0; ci < QT_NCFG; ci++) {
					fos_err e;
					if (fos_qcfg_check(&qt_cfgs[ci], rows, cols, &e)) {
						skipped++;
						continue;
					}
					int sel = (kind + ci + s) % 3; /* 0: computed amax, 1, 2: given */
					int with_dec = (kind + ci) % 4 != 3;
					bad += compare_quant_t(xs, f32, rows, cols, &qt_cfgs[ci], sel ? &given[sel - 1] : NULL,
							       with_dec, ref_kind_name(kind));
				}
				free(xs);
			}
	}
	printf("quantize_t, data kinds: %lld cases (%lld config/shape pairs refused by the config check), %lld "
	       "differing items\n",
	       (long long)(g_qt_cases - before), (long long)skipped, (long long)bad);
	assert_true(bad == 0);
}

/* Large and non-square: the quantized backward's dY^T (logical 4096 x 8192 from a stored 8192 x 4096
 * gradient, given and computed amax), the forward's X^T and the weight's 16x16 columnwise copy, the
 * other orientation, and f32. */
static void test_quantize_t_large(void **state)
{
	(void)state;
	NEED_GPU();
	static const struct {
		int64_t rows, cols;
		int f32, cfg, given, kind;
	} cases[] = {
		{4096, 8192, 0, 8, 1, REF_RANDN}, /* gradient recipe, amax given (as in the backward) */
		{4096, 8192, 0, 8, 0, REF_HEAVY},
		{4096, 8192, 0, 0, 0, REF_RANDN}, /* 4/6 1x16 MAE 256 */
		{4096, 8192, 0, 4, 1, REF_WIDE},  /* 16x16 MAE 256 */
		{8192, 4096, 0, 3, 0, REF_HEAVY}, /* 1x16 MSE 448 */
		{2048, 1536, 0, 7, 0, REF_NAN},   /* 16x16 MSE 448 */
		{1024, 3072, 1, 8, 0, REF_RANDN},
		{1024, 3072, 1, 1, 1, REF_MIXED_SUB},
		{1104, 2064, 1, 6, 0, REF_INF},   /* partial tiles both ways */
	};
	int64_t bad = 0;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		void *xs = gen_stored(cases[i].kind, cases[i].rows, cases[i].cols, 77u + i, cases[i].f32);
		float am = 2.5f;
		bad += compare_quant_t(xs, cases[i].f32, cases[i].rows, cases[i].cols, &qt_cfgs[cases[i].cfg],
				       cases[i].given ? &am : NULL, 1, "large");
		free(xs);
	}
	printf("quantize_t, large shapes: %zu cases, %lld differing items\n", sizeof cases / sizeof cases[0],
	       (long long)bad);
	assert_true(bad == 0);
}

/* quantize_t on one CTA gives the bytes of its default grid, and repeated runs give the same
 * bytes. */
static void test_quantize_t_determinism(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	const int64_t rows = 1024, cols = 4096, n = rows * cols;
	fos_err e;
	const int cfg_idx[] = {0, 3, 4, 8};
	void *xs = gen_stored(REF_MIXED_SUB, rows, cols, 4242, 0);
	for (size_t c = 0; c < sizeof cfg_idx / sizeof cfg_idx[0]; c++) {
		qres ref = {0};
		assert_int_equal(fos_cuda_set_one_cta(g_gpu, 0, &e), FOS_OK);
		run_quant_t(g_gpu, QT_OP, xs, 0, rows, cols, &qt_cfgs[cfg_idx[c]], NULL, 1, &ref);
		for (int pass = 0; pass < 3; pass++) { /* default again, one CTA, default again */
			const int one = pass == 1;
			qres r = {0};
			int64_t dc, ds, da, dd;
			assert_int_equal(fos_cuda_set_one_cta(g_gpu, one, &e), FOS_OK);
			run_quant_t(g_gpu, QT_OP, xs, 0, rows, cols, &qt_cfgs[cfg_idx[c]], NULL, 1, &r);
			int64_t d = qres_diff(&ref, &r, n, 1, &dc, &ds, &da, &dd);
			if (d)
				fprintf(stderr, "quantize_t pass %d (%s) config %d differs in %lld items\n", pass,
					one ? "one CTA" : "default", cfg_idx[c], (long long)d);
			assert_true(d == 0);
			qres_free(&r);
		}
		qres_free(&ref);
	}
	assert_int_equal(fos_cuda_set_one_cta(g_gpu, 0, &e), FOS_OK);
	free(xs);
#endif
}

/* The quantize kernels on one CTA against the CPU at small and odd shapes: the rowwise ones
 * (k_grad_1x16, k_q46_pt with their blocks prefetched in registers) and the cp.async ring of
 * k_quant_t, each then refilling every ring buffer many times within one launch, walking from either
 * end (amax computed or given), on chunks and tiles cut by the tensor's end: a ring buffer read
 * before its copy landed, or refilled while still in use, would show as differing bytes. bf16 (4
 * buffers) and f32 (2 buffers), every data kind. */
static void test_ring_kernels(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_err e;
	static const fos_qcfg rcfgs[] = {
		{FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0},
		{FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0},
	};
	/* rowwise: 2000, 240, 3120 and 4096 blocks */
	static const int64_t rsh[][2] = {{100, 320}, {48, 80}, {1040, 48}, {64, 1024}};
	const float given = 0.75f;
	int64_t bad = 0, before = g_cases;
	float *v = malloc((size_t)(1040 * 1024) * 4);
	assert_non_null(v);
	assert_int_equal(fos_cuda_set_one_cta(g_gpu, 1, &e), FOS_OK);
	for (int s = 0; s < 4; s++) {
		int64_t rows = rsh[s][0], cols = rsh[s][1];
		for (int kind = 0; kind < K_COUNT; kind++)
			for (int f32 = 0; f32 < 2; f32++) {
				fill(v, rows, cols, kind, f32);
				void *xh = to_dtype(v, rows * cols, f32);
				for (size_t c = 0; c < sizeof rcfgs / sizeof rcfgs[0]; c++)
					bad += compare_quant(xh, f32, rows, cols, &rcfgs[c],
							     (kind + (int)c + s) % 2 ? &given : NULL, 0, kind_name[kind]);
				free(xh);
			}
	}
	free(v);
	printf("rowwise kernels on one CTA: %lld cases, %lld differing items\n", (long long)(g_cases - before),
	       (long long)bad);
	/* quantize_t: 2 x 5, 2 x 3, 17 x 1 and 2 x 4 tiles, partial ones both ways */
	static const int64_t qsh[][2] = {{100, 320}, {72, 144}, {1040, 48}, {128, 256}};
	static const int qkinds[] = {REF_RANDN, REF_MIXED_SUB, REF_INF, REF_NAN, REF_WIDE};
	static const int qcfg[] = {0, 3, 4, 7, 8};
	int64_t qbad = 0, qbefore = g_qt_cases;
	for (int s = 0; s < 4; s++)
		for (size_t k = 0; k < sizeof qkinds / sizeof qkinds[0]; k++)
			for (int f32 = 0; f32 < 2; f32++) {
				int64_t rows = qsh[s][0], cols = qsh[s][1];
				void *xs = gen_stored(qkinds[k], rows, cols, 900u + 7u * (uint64_t)s + (uint64_t)k, f32);
				for (size_t c = 0; c < sizeof qcfg / sizeof qcfg[0]; c++) {
					if (fos_qcfg_check(&qt_cfgs[qcfg[c]], rows, cols, &e))
						continue;
					qbad += compare_quant_t(xs, f32, rows, cols, &qt_cfgs[qcfg[c]],
								(s + (int)k + (int)c) % 2 ? &given : NULL, 1, "ring");
				}
				free(xs);
			}
	assert_int_equal(fos_cuda_set_one_cta(g_gpu, 0, &e), FOS_OK);
	printf("ring kernels, quantize_t on one CTA: %lld cases, %lld differing items\n",
	       (long long)(g_qt_cases - qbefore), (long long)qbad);
	assert_true(bad == 0);
	assert_true(qbad == 0);
#endif
}

/* Row-scaled and bad shapes are refused with a message. */
static void test_quantize_t_errors(void **state)
{
	(void)state;
	NEED_GPU();
	fos_err e;
	fos_qtensor q;
	assert_non_null(g_gpu->quantize_t);
	assert_int_equal(fos_qtensor_alloc(g_gpu, &q, 64, 64, 1, &e), FOS_OK);
	void *x = g_gpu->alloc(g_gpu, 64 * 64 * 4);
	fos_qcfg c = fos_qcfg_default();
	c.row_scaled = 1;
	memset(&e, 0, sizeof e);
	assert_int_equal(g_gpu->quantize_t(g_gpu, x, FOS_BF16, 64, 64, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "row-scaled"));
	c = fos_qcfg_default();
	assert_int_equal(g_gpu->quantize_t(g_gpu, x, FOS_BF16, 64, 24, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "24"));
	c.block = FOS_BLOCK_16X16;
	assert_int_equal(g_gpu->quantize_t(g_gpu, x, FOS_BF16, 40, 64, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	c = fos_qcfg_default();
	assert_int_equal(g_gpu->quantize_t(g_gpu, x, 7, 64, 64, &c, NULL, &q, NULL, &e), FOS_EINVAL);
	g_gpu->free(g_gpu, x);
	fos_qtensor_free(g_gpu, &q);
	assert_int_equal(g_gpu->sync(g_gpu, &e), FOS_OK);
}

static int setup(void **state)
{
	(void)state;
	return tgpu_open("gpu_quant");
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_selftests),	 cmocka_unit_test(test_special_kinds),
		cmocka_unit_test(test_amax_in),		 cmocka_unit_test(test_large_random),
		cmocka_unit_test(test_determinism), cmocka_unit_test(test_transpose_amax),
		cmocka_unit_test(test_scale_bytes),	 cmocka_unit_test(test_errors),
		cmocka_unit_test(test_quantize_t_kinds), cmocka_unit_test(test_quantize_t_large),
		cmocka_unit_test(test_quantize_t_determinism), cmocka_unit_test(test_ring_kernels),
		cmocka_unit_test(test_quantize_t_errors),
	};
	return cmocka_run_group_tests(tests, setup, tgpu_close);
}
