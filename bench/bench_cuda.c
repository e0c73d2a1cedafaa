/* bench_cuda.c: CUDA backend timings for bench/BENCHMARKS.md, each against a baseline timed in
 * the same run with CUDA events (median of 11 timed runs after warm-ups; the memory-bound rows run
 * each op back to back, the GEMM rows alternate op and baseline run by run so both see the same
 * clock and power state):
 *   - 4/6 quantize (amax pass included) of bf16 8192x5120 and 8192x8192: 1x16 per-tensor (with and
 *     without the fused bf16 decoding), MSE, 16x16, row-scaled and the NVFP4 gradient quantizer;
 *     baseline: a device-to-device copy of the input;
 *   - amax, dequantize, transpose alone;
 *   - forward (quantize X + GEMM with the cached quantized W) at 8192^3 and 8192x4096x4096;
 *     baseline: a plain cuBLASLt bf16 GEMM of the same shape (heuristic's first choice, 32 MiB
 *     workspace), and the backend's own deterministic GEMM (no workspace, split-K 1);
 *   - each backward mode at the same shapes; baseline: the two bf16 GEMMs it contains (plain
 *     cuBLASLt on untransposed operands); the bf16 backwards also with gemm_ex switched off
 *     (explicit transposes, the path before gemm_ex), and gemm_ex alone on the backward's two
 *     layouts against the plain GEMM of the same shape;
 *   - quantize_t (an input stored transposed, read in place) against transpose + quantize of the
 *     same tensor: the gradient recipe on the quantized backward's dY^T (logical 4096x8192 from a
 *     stored 8192x4096 dY), the forward's columnwise X (4/6 1x16) and the weight's columnwise copy
 *     (4/6 16x16); the quantized backward and the forward with its saved context (quantized
 *     override) also with quantize_t switched off (linear.c then transposes first);
 *   - grad_pair (both decoded operands of the quantized backward's gradient from one read of dY) at
 *     8192x4096: against a device-to-device copy of dY, and against the rowwise + quantize_t
 *     gradient quantizes it replaces (with and without the amax pass), alternated in the same run;
 *     the quantized backward with be->grad_pair switched off (linear.c then quantizes dY rowwise
 *     and through quantize_t) next to its default row;
 *   - small M (the shape rule: any M >= 1): the forward with a cached 4096x4096 weight (16x16) at
 *     M = 1, 16, 64, 128, with no saved context (replayed from a CUDA graph) and with one (quantized
 *     override: columnwise X, M padded to 16), and the quantized backward; baseline: the plain
 *     cuBLASLt bf16 GEMM of the same shape, alternated in the same run.
 *   - the weight cache (issue 17): cached bytes per element of each use set against the old entry;
 *     the forward and every backward at 8192x4096x4096 and 8192^3 with W decoded on demand into a
 *     reused scratch against the cached decoded operands, alternated in the same run; the forward
 *     at M = 128 with the decoded tier's copy and without; 512 forward-only puts of a (4096, 14336)
 *     weight (a 30B model's 30e9 elements) and a forward on each, every Y compared bit for bit with
 *     the cached decoded path's.
 *   - the small-M forward reading W's codes (issue 28): bench_smallm.h.
 * Prints markdown table rows. Usage: bench_cuda [quick | qt | small | smallm [variants] [first] | wcache [NW]]; qt: only the
 * quick quantize_t rows (for a profiler: one k_quant_t launch early); small: only the small-M
 * rows; wcache: only the weight cache rows (NW puts in the 30B row, default 512). */
#include "backend.h"
#include "bench_util.h"
#include "fos_format.h"
#ifdef FOS_HAVE_CUDA
#include "cuda_backend.h"
#include "support_cuda_baseline.h"
#include "../tests/support_smallm_variants.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FOS_HAVE_CUDA
int main(void)
{
	printf("bench_cuda: built without CUDA: nothing to measure\n");
	return 0;
}
#else

static fos_backend *be;
static fos_err err;

#define CK(x)                                                                                                  \
	do {                                                                                                   \
		if ((x) != FOS_OK) {                                                                           \
			fprintf(stderr, "bench_cuda: %s failed: %s\n", #x, err.msg);                           \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint16_t *dev_rand(int64_t n, float scale)
{
	uint16_t *h = malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		h[i] = fos_f32_to_bf16((bench_frand(&rng) + bench_frand(&rng) + bench_frand(&rng)) * scale);
	uint16_t *d = be->alloc(be, (size_t)n * 2);
	if (!d) {
		fprintf(stderr, "bench_cuda: out of device memory\n");
		exit(1);
	}
	CK(be->h2d(be, d, h, (size_t)n * 2, &err));
	free(h);
	return d;
}

static int cmpf(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

typedef void (*op_fn)(void *ctx);

/* Median microseconds of 11 timed runs of fn after 3 warm-ups. */
static double time_us(op_fn fn, void *ctx)
{
	for (int i = 0; i < 3; i++)
		fn(ctx);
	CK(be->sync(be, &err));
	float t[11];
	for (int i = 0; i < 11; i++) {
		CK(fos_cuda_mark(be, 0, &err));
		fn(ctx);
		CK(fos_cuda_mark(be, 1, &err));
		CK(fos_cuda_elapsed_ms(be, 0, 1, &t[i], &err));
	}
	qsort(t, 11, sizeof t[0], cmpf);
	return t[5] * 1000.0;
}

/* Medians of 11 alternating timed runs of a and b (after warm-ups of both), so that both see the
 * same clock and power state: a GEMM-heavy run drifts by several percent over seconds. flush (may
 * be NULL) runs before each timed op, outside its timing (bench_smallm.h: L2 flushed). */
static void time_pair_us_with(op_fn a, void *ca, op_fn b, void *cb, double *ta, double *tb, void (*flush)(void))
{
	for (int i = 0; i < 2; i++) {
		a(ca);
		b(cb);
	}
	CK(be->sync(be, &err));
	float x[11], y[11];
	for (int i = 0; i < 11; i++) {
		if (flush)
			flush();
		CK(fos_cuda_mark(be, 0, &err));
		a(ca);
		CK(fos_cuda_mark(be, 1, &err));
		if (flush)
			flush();
		CK(fos_cuda_mark(be, 2, &err));
		b(cb);
		CK(fos_cuda_mark(be, 3, &err));
		CK(fos_cuda_elapsed_ms(be, 0, 1, &x[i], &err));
		CK(fos_cuda_elapsed_ms(be, 2, 3, &y[i], &err));
	}
	qsort(x, 11, sizeof x[0], cmpf);
	qsort(y, 11, sizeof y[0], cmpf);
	*ta = x[5] * 1000.0;
	*tb = y[5] * 1000.0;
}

static void time_pair_us(op_fn a, void *ca, op_fn b, void *cb, double *ta, double *tb)
{
	time_pair_us_with(a, ca, b, cb, ta, tb, NULL);
}

/* ---- ops ------------------------------------------------------------------------------------- */

typedef struct {
	void *src, *dst;
	size_t n;
} copy_ctx;
static void op_copy(void *c)
{
	copy_ctx *x = c;
	CK(be->d2d(be, x->dst, x->src, x->n, &err));
}

typedef struct {
	const uint16_t *x;
	int64_t rows, cols;
	fos_qcfg cfg;
	fos_qtensor q;
	uint16_t *dec; /* NULL: no decoded output */
} q_ctx;
static void op_quant(void *c)
{
	q_ctx *x = c;
	CK(be->quantize(be, x->x, FOS_BF16, x->rows, x->cols, &x->cfg, NULL, &x->q, x->dec, &err));
}
static void op_amax(void *c)
{
	q_ctx *x = c;
	CK(be->amax(be, x->x, FOS_BF16, x->rows, x->cols, x->cfg.row_scaled, x->q.amax, &err));
}
static void op_deq(void *c)
{
	q_ctx *x = c;
	CK(be->dequantize(be, &x->q, FOS_BF16, x->dec, &err));
}
static void op_tr(void *c)
{
	q_ctx *x = c;
	CK(be->transpose(be, x->x, x->dec, x->rows, x->cols, 2, &err));
}

/* quantize_t of the logical (rows, cols) tensor stored (cols, rows) at x, and the path it replaces:
 * transpose into tmp, then quantize; amax: NULL (computed) or a device pointer (given). */
typedef struct {
	const uint16_t *x;
	uint16_t *tmp;
	int64_t rows, cols;
	fos_qcfg cfg;
	const float *amax;
	fos_qtensor q;
	uint16_t *dec;
} qt_ctx;
static void op_qt(void *c)
{
	qt_ctx *x = c;
	CK(be->quantize_t(be, x->x, FOS_BF16, x->rows, x->cols, &x->cfg, x->amax, &x->q, x->dec, &err));
}
static void op_tr_q(void *c)
{
	qt_ctx *x = c;
	CK(be->transpose(be, x->x, x->tmp, x->cols, x->rows, 2, &err));
	CK(be->quantize(be, x->tmp, FOS_BF16, x->rows, x->cols, &x->cfg, x->amax, &x->q, x->dec, &err));
}
static void op_q_rowwise(void *c) /* the same quantize on an untransposed tensor of the same shape */
{
	qt_ctx *x = c;
	CK(be->quantize(be, x->tmp, FOS_BF16, x->rows, x->cols, &x->cfg, x->amax, &x->q, x->dec, &err));
}

typedef struct {
	const uint16_t *a, *b;
	int64_t m, n, k;
	uint16_t *y;
	size_t ws;
	int own;		 /* 0 baseline, 1 backend gemm, 2 backend gemm_ex with ta, tb */
	const fos_gemm_epi *epi; /* own GEMM with this epilogue (NULL: plain) */
	int ta, tb;
} g_ctx;
static void op_gemm(void *c)
{
	g_ctx *x = c;
	if (x->own == 2) {
		fos_gemm_epi e = fos_gemm_epi_plain();
		CK(be->gemm_ex(be, x->a, x->ta, x->b, x->tb, x->m, x->n, x->k, &e, x->y, &err));
	} else if (x->own) {
		fos_gemm_epi e = x->epi ? *x->epi : fos_gemm_epi_plain();
		CK(be->gemm(be, x->a, x->b, x->m, x->n, x->k, &e, x->y, &err));
	} else {
		CK(fos_cuda_gemm_baseline(be, x->a, x->b, x->m, x->n, x->k, x->y, x->ws, &err));
	}
}

typedef struct {
	const uint16_t *x, *dy;
	int64_t m;
	fos_qweight *qw;
	fos_linear_opts o;
	uint16_t *y, *dx, *dw;
	fos_saved sv;
} l_ctx;
static void op_fwd(void *c)
{
	l_ctx *x = c;
	CK(fos_linear_forward(be, x->x, x->m, x->qw, &x->o, NULL, x->y, NULL, &err));
}
static void op_bwd(void *c)
{
	l_ctx *x = c;
	CK(fos_linear_backward(be, &x->sv, x->qw, x->dy, x->dx, x->dw, NULL, &err));
}
static void op_fwd_save(void *c) /* forward keeping what the backward of its override needs */
{
	l_ctx *x = c;
	fos_saved sv;
	CK(fos_linear_forward(be, x->x, x->m, x->qw, &x->o, NULL, x->y, &sv, &err));
	fos_saved_free(be, &sv);
}

typedef int (*quantize_t_fn)(fos_backend *, const void *, int, int64_t, int64_t, const fos_qcfg *, const float *,
			     fos_qtensor *, uint16_t *, fos_err *);

static void row(const char *what, const char *shape, double us, const char *base, double base_us)
{
	printf("| %s | %s | %.1f us | %s %.1f us | %.2fx |\n", what, shape, us, base, base_us, us / base_us);
	fflush(stdout);
}

static void row_pair(const char *what, const char *shape, op_fn f, void *c, const char *base, op_fn bf, void *bc)
{
	double t, tb;
	time_pair_us(f, c, bf, bc, &t, &tb);
	row(what, shape, t, base, tb);
}

/* op_bwd with be->grad_pair switched off: linear.c then quantizes dY rowwise and through
 * quantize_t. */
typedef int (*grad_pair_fn)(fos_backend *, const uint16_t *, int64_t, int64_t, const float *, uint16_t *, uint16_t *,
			    fos_err *);
static void op_bwd_nopair(void *c)
{
	grad_pair_fn keep = be->grad_pair;
	be->grad_pair = NULL;
	op_bwd(c);
	be->grad_pair = keep;
}

typedef struct {
	void *a, *b;
} two_ctx;
static void op_gemm(void *c);
static void op_two_gemms(void *c)
{
	two_ctx *t = c;
	op_gemm(t->a);
	op_gemm(t->b);
}

/* ---- sections -------------------------------------------------------------------------------- */

static void bench_quant(int64_t rows, int64_t cols, int quick)
{
	char shape[64];
	snprintf(shape, sizeof shape, "%lldx%lld bf16", (long long)rows, (long long)cols);
	int64_t n = rows * cols;
	uint16_t *x = dev_rand(n, 1.0f);
	copy_ctx cc = {x, be->alloc(be, (size_t)n * 2), (size_t)n * 2};
	double copy = time_us(op_copy, &cc);
	printf("| D2D copy of the input | %s | %.1f us | (%.0f GB/s read+write) | |\n", shape, copy,
	       2.0 * n * 2 / copy / 1e3);
	q_ctx q = {x, rows, cols, fos_qcfg_default(), {0}, NULL};
	CK(fos_qtensor_alloc(be, &q.q, rows, cols, 1, &err));
	uint16_t *dec = be->alloc(be, (size_t)n * 2);
	struct {
		const char *name;
		int recipe, block, em, rs, dec;
	} cases[] = {
		{"4/6 quantize 1x16 per-tensor MAE (amax pass incl.)", 0, 0, 0, 0, 0},
		{"4/6 quantize 1x16 per-tensor MAE + fused bf16 decoded", 0, 0, 0, 0, 1},
		{"4/6 quantize 1x16 per-tensor MSE", 0, 0, 1, 0, 0},
		{"4/6 quantize 16x16 per-tensor MAE", 0, 1, 0, 0, 0},
		{"4/6 quantize 1x16 row-scaled MAE", 0, 0, 0, 1, 0},
		{"4/6 quantize 1x16 row-scaled MAE + decoded", 0, 0, 0, 1, 1},
		{"NVFP4 gradient quantize 1x16 (bound 448)", 1, 0, 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (quick && i > 0)
			break;
		q.cfg.recipe = cases[i].recipe;
		q.cfg.block = cases[i].block;
		q.cfg.err_mode = cases[i].em;
		q.cfg.row_scaled = cases[i].rs;
		q.cfg.bound = cases[i].recipe ? 448 : 256;
		q.dec = cases[i].dec ? dec : NULL;
		row(cases[i].name, shape, time_us(op_quant, &q), "copy", copy);
	}
	q.dec = NULL;
	row("amax alone (per tensor)", shape, time_us(op_amax, &q), "copy", copy);
	q.cfg.row_scaled = 1;
	row("amax alone (per row)", shape, time_us(op_amax, &q), "copy", copy);
	q.cfg = fos_qcfg_default();
	q.dec = dec;
	op_quant(&q);
	row("dequantize to bf16", shape, time_us(op_deq, &q), "copy", copy);
	row("transpose bf16", shape, time_us(op_tr, &q), "copy", copy);
	fos_qtensor_free(be, &q.q);
	be->free(be, dec);
	be->free(be, cc.dst);
	be->free(be, x);
	CK(be->sync(be, &err));
}

/* quantize_t against transpose + quantize on a stored (cols, rows) bf16 tensor. */
static void bench_quant_t(int64_t rows, int64_t cols, int quick)
{
	if (!be->quantize_t) {
		printf("| quantize_t | | not offered by this backend | | |\n");
		return;
	}
	char shape[96];
	snprintf(shape, sizeof shape, "logical %lldx%lld from stored %lldx%lld bf16", (long long)rows, (long long)cols,
		 (long long)cols, (long long)rows);
	int64_t n = rows * cols;
	uint16_t *x = dev_rand(n, 0.01f), *tmp = dev_rand(n, 0.01f), *dec = be->alloc(be, (size_t)n * 2);
	copy_ctx cc = {x, tmp, (size_t)n * 2};
	double copy = time_us(op_copy, &cc);
	printf("| D2D copy of the input | %s | %.1f us | (%.0f GB/s read+write) | |\n", shape, copy, 2.0 * n * 2 / copy / 1e3);
	float amax = 0.05f, *dam = be->alloc(be, sizeof amax);
	CK(be->h2d(be, dam, &amax, sizeof amax, &err));
	qt_ctx q = {x, tmp, rows, cols, fos_qcfg_default(), NULL, {0}, dec};
	CK(fos_qtensor_alloc(be, &q.q, rows, cols, 0, &err));
	struct {
		const char *name;
		int recipe, block, given, dec;
	} cases[] = {
		{"NVFP4 gradient quantize_t, amax given, + decoded (the backward's dY^T)", 1, 0, 1, 1},
		{"NVFP4 gradient quantize_t, amax computed, + decoded", 1, 0, 0, 1},
		{"NVFP4 gradient quantize_t, amax given, no decoded", 1, 0, 1, 0},
		{"4/6 quantize_t 1x16 MAE, amax given, + decoded (the forward's saved X^T)", 0, 0, 1, 1},
		{"4/6 quantize_t 16x16 MAE, amax given, + decoded (the weight's columnwise copy)", 0, 1, 1, 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (quick && i > 0)
			break;
		q.cfg = fos_qcfg_default();
		q.cfg.recipe = cases[i].recipe;
		q.cfg.block = cases[i].block;
		q.cfg.bound = cases[i].recipe ? 448 : 256;
		q.amax = cases[i].given ? dam : NULL;
		q.dec = cases[i].dec ? dec : NULL;
		double t_qt, t_trq, t_row;
		time_pair_us(op_qt, &q, op_tr_q, &q, &t_qt, &t_trq);
		row(cases[i].name, shape, t_qt, "transpose + quantize", t_trq);
		t_row = time_us(op_q_rowwise, &q);
		row("  the same quantize on an untransposed tensor", shape, t_row, "copy", copy);
		printf("|   quantize_t over the untransposed quantize | %s | | | %.2fx |\n", shape, t_qt / t_row);
	}
	fos_qtensor_free(be, &q.q);
	be->free(be, dam);
	be->free(be, dec);
	be->free(be, tmp);
	be->free(be, x);
	CK(be->sync(be, &err));
}

/* grad_pair (both decoded operands of the quantized backward's gradient from one read of dY) and
 * the two quantizes it replaces (rowwise + quantize_t, decoded outputs, same amax). */
typedef struct {
	const uint16_t *dy;
	int64_t m, n;
	float *amax;
	int with_amax; /* run the amax pass over dY first, as the backward does */
	uint16_t *rows, *cols;
	fos_qtensor q1, q2;
} gp_ctx;
static void op_gp(void *c)
{
	gp_ctx *x = c;
	if (x->with_amax)
		CK(be->amax(be, x->dy, FOS_BF16, x->m, x->n, 0, x->amax, &err));
	CK(be->grad_pair(be, x->dy, x->m, x->n, x->amax, x->rows, x->cols, &err));
}
static void op_gp_two(void *c)
{
	gp_ctx *x = c;
	fos_qcfg g = {FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0};
	if (x->with_amax)
		CK(be->amax(be, x->dy, FOS_BF16, x->m, x->n, 0, x->amax, &err));
	CK(be->quantize(be, x->dy, FOS_BF16, x->m, x->n, &g, x->amax, &x->q1, x->rows, &err));
	CK(be->quantize_t(be, x->dy, FOS_BF16, x->n, x->m, &g, x->amax, &x->q2, x->cols, &err));
}

static void bench_grad_pair(int64_t m, int64_t n)
{
	if (!be->grad_pair || !be->quantize_t) {
		printf("| grad_pair | | not offered by this backend | | |\n");
		return;
	}
	char shape[64];
	snprintf(shape, sizeof shape, "dY %lldx%lld bf16", (long long)m, (long long)n);
	const int64_t e = m * n;
	uint16_t *dy = dev_rand(e, 0.01f);
	copy_ctx cc = {dy, be->alloc(be, (size_t)e * 2), (size_t)e * 2};
	double copy = time_us(op_copy, &cc);
	printf("| D2D copy of dY | %s | %.1f us | (%.0f GB/s read+write) | |\n", shape, copy, 2.0 * e * 2 / copy / 1e3);
	gp_ctx g = {dy, m, n, be->alloc(be, sizeof(float)), 0, be->alloc(be, (size_t)e * 2), be->alloc(be, (size_t)e * 2),
		    {0}, {0}};
	if (!cc.dst || !g.amax || !g.rows || !g.cols) {
		fprintf(stderr, "bench_cuda: out of device memory\n");
		exit(1);
	}
	CK(fos_qtensor_alloc(be, &g.q1, m, n, 0, &err));
	CK(fos_qtensor_alloc(be, &g.q2, n, m, 0, &err));
	CK(be->amax(be, dy, FOS_BF16, m, n, 0, g.amax, &err));
	double t_gp = time_us(op_gp, &g);
	row("grad_pair: both decoded gradient operands (dY rows + dY^T), amax given", shape, t_gp, "copy", copy);
	printf("|   its traffic | %s | %.0f GB/s (1 read + 2 writes of dY's bytes) | | |\n", shape, 3.0 * e * 2 / t_gp / 1e3);
	double t_two;
	time_pair_us(op_gp, &g, op_gp_two, &g, &t_gp, &t_two);
	row("  grad_pair vs the two quantizes it replaces (amax given)", shape, t_gp, "quantize + quantize_t (+ decoded)",
	    t_two);
	g.with_amax = 1;
	time_pair_us(op_gp, &g, op_gp_two, &g, &t_gp, &t_two);
	row("  amax + grad_pair (the backward's gradient work)", shape, t_gp, "amax + quantize + quantize_t", t_two);
	g.with_amax = 0;
	fos_qtensor_free(be, &g.q1);
	fos_qtensor_free(be, &g.q2);
	be->free(be, g.amax);
	be->free(be, g.rows);
	be->free(be, g.cols);
	be->free(be, cc.dst);
	be->free(be, dy);
	CK(be->sync(be, &err));
}

static void bench_linear(int64_t m, int64_t n, int64_t k, int quick)
{
	char shape[64];
	snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", (long long)m, (long long)n, (long long)k);
	uint16_t *x = dev_rand(m * k, 1.0f), *w = dev_rand(n * k, 0.02f), *dy = dev_rand(m * n, 0.01f);
	uint16_t *y = be->alloc(be, (size_t)(m * n) * 2), *dx = be->alloc(be, (size_t)(m * k) * 2);
	uint16_t *dw = be->alloc(be, (size_t)(n * k) * 2), *t = dev_rand((m > n ? m : n) * k, 0.02f);
	/* baselines: Y = X W^T, dX = dY W (m, k, n), dW = dY^T X (n, k, m), plain cuBLASLt, 32 MiB ws */
	g_ctx g = {x, w, m, n, k, y, 32u << 20, 0, NULL, 0, 0};
	g_ctx own = g;
	own.own = 1;
	double base_f, own_f;
	time_pair_us(op_gemm, &own, op_gemm, &g, &own_f, &base_f);
	char desc[160];
	CK(fos_cuda_gemm_describe(be, m, n, k, desc, sizeof desc, &err));
	printf("| plain cuBLASLt bf16 GEMM Y=XW^T (32 MiB ws) | %s | %.1f us | %.0f TFLOP/s | |\n", shape, base_f,
	       2.0 * m * n * k / base_f / 1e6);
	row("backend deterministic GEMM (ws 0, split-K 1)", shape, own_f, "plain", base_f);
	printf("|   its algorithm | %s | %s | | |\n", shape, desc);
	/* the forward's parts: its GEMM (alpha from two device amaxes) and the quantize of X */
	float amaxes[2] = {3.0f, 0.05f};
	float *dam = be->alloc(be, sizeof amaxes);
	CK(be->h2d(be, dam, amaxes, sizeof amaxes, &err));
	fos_gemm_epi epi = {dam, 1.0f / 1536, dam + 1, 1.0f / 1536, NULL, NULL};
	own.epi = &epi;
	row_pair("  forward's GEMM alone (alpha from amaxes)", shape, op_gemm, &own, "plain", op_gemm, &g);
	float *rs = be->alloc(be, (size_t)m * 4);
	CK(be->d2d(be, rs, x, (size_t)m * 4, &err)); /* any finite-ish floats: only the time matters */
	fos_gemm_epi epr = {NULL, 1.0f / 1536, dam + 1, 1.0f / 1536, rs, NULL};
	own.epi = &epr;
	row_pair("  row-scaled forward's GEMM alone (FP32 + epilogue)", shape, op_gemm, &own, "plain", op_gemm, &g);
	uint16_t *xdec = be->alloc(be, (size_t)(m * k) * 2);
	q_ctx qx = {x, m, k, fos_qcfg_default(), {0}, xdec};
	CK(fos_qtensor_alloc(be, &qx.q, m, k, 1, &err));
	row_pair("  forward's quantize of X alone (+ decoded)", shape, op_quant, &qx, "plain", op_gemm, &g);
	fos_qtensor_free(be, &qx.q);
	be->free(be, xdec);
	be->free(be, rs);
	g_ctx gx = {dy, t, m, k, n, dx, 32u << 20, 0, NULL, 0, 0}, gw = {dy, x, n, k, m, dw, 32u << 20, 0, NULL, 0, 0};
	two_ctx both = {&gx, &gw};
	/* the bf16 backward's GEMMs through gemm_ex: dX = dY W (W stored (N, K) = B^T), dW = dY^T X (both
	 * stored transposed) */
	g_ctx ex_dx = {dy, w, m, k, n, dx, 0, 2, NULL, 0, 1}, ex_dw = {dy, x, n, k, m, dw, 0, 2, NULL, 1, 1};
	if (be->gemm_ex && !quick) {
		row_pair("  gemm_ex dX = dY W (b stored (K, N))", shape, op_gemm, &ex_dx, "plain", op_gemm, &gx);
		CK(fos_cuda_gemm_ex_describe(be, 0, 1, m, k, n, desc, sizeof desc, &err));
		printf("|   its algorithm | %s | %s | | |\n", shape, desc);
		row_pair("  gemm_ex dW = dY^T X (a, b stored transposed)", shape, op_gemm, &ex_dw, "plain", op_gemm, &gw);
		CK(fos_cuda_gemm_ex_describe(be, 1, 1, n, k, m, desc, sizeof desc, &err));
		printf("|   its algorithm | %s | %s | | |\n", shape, desc);
	}
	fos_linear_opts o = fos_linear_opts_default();
	for (int wb = 1; wb >= 0; wb--) {
		if (quick && wb == 0)
			break;
		o.weight_block = wb;
		fos_qweight qw;
		CK(fos_qweight_make(be, w, n, k, &o, 1, 1, &qw, &err));
		l_ctx l = {x, dy, m, &qw, o, y, dx, dw, {0}};
		char name[96];
		snprintf(name, sizeof name, "forward (quantize X + GEMM, cached W %s)", wb ? "16x16" : "1x16");
		row_pair(name, shape, op_fwd, &l, "plain GEMM", op_gemm, &g);
		if (wb == 1) {
			l.o.row_scaled = 1;
			l.o.override = FOS_OVR_HIGH_PRECISION;
			row_pair("forward, row-scaled X", shape, op_fwd, &l, "plain GEMM", op_gemm, &g);
			l.o = o;
			l.o.override = FOS_OVR_QUANTIZED;
			row_pair("forward + saved context (quantized override: columnwise X)", shape, op_fwd_save, &l,
				 "plain GEMM", op_gemm, &g);
			if (be->quantize_t && !quick) {
				quantize_t_fn keep = be->quantize_t;
				be->quantize_t = NULL;
				row_pair("  same without quantize_t (transpose + quantize)", shape, op_fwd_save, &l, "plain GEMM",
					 op_gemm, &g);
				be->quantize_t = keep;
			}
			l.o = o;
			const int ovr[] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
			const char *on[] = {"quantized", "high_precision", "dequantized"};
			for (int i = 0; i < 3; i++) {
				l.o.override = ovr[i];
				CK(fos_linear_forward(be, x, m, &qw, &l.o, NULL, y, &l.sv, &err));
				snprintf(name, sizeof name, "backward %s (dX + dW)", on[i]);
				row_pair(name, shape, op_bwd, &l, "its 2 plain GEMMs", op_two_gemms, &both);
				if (i == 0 && be->grad_pair) { /* the two gradient quantizes instead of grad_pair */
					row_pair("  backward quantized, grad_pair off (quantize + quantize_t)", shape, op_bwd_nopair, &l,
						 "its 2 plain GEMMs", op_two_gemms, &both);
				}
				if (i == 0 && be->quantize_t && !quick) { /* dY^T through transpose + quantize */
					quantize_t_fn keep = be->quantize_t;
					be->quantize_t = NULL;
					row_pair("  backward quantized without quantize_t (transpose + quantize)", shape, op_bwd, &l,
						 "its 2 plain GEMMs", op_two_gemms, &both);
					be->quantize_t = keep;
				}
				if (i > 0 && be->gemm_ex && !quick) { /* the path before gemm_ex, for comparison */
					int (*keep)(fos_backend *, const uint16_t *, int, const uint16_t *, int, int64_t, int64_t,
						    int64_t, const struct fos_gemm_epi *, uint16_t *, fos_err *) = be->gemm_ex;
					be->gemm_ex = NULL;
					snprintf(name, sizeof name, "  backward %s without gemm_ex (3 transposes)", on[i]);
					row_pair(name, shape, op_bwd, &l, "its 2 plain GEMMs", op_two_gemms, &both);
					be->gemm_ex = keep;
				}
				fos_saved_free(be, &l.sv);
				if (quick)
					break;
			}
		}
		fos_qweight_free(be, &qw);
	}
	be->free(be, dam);
	uint16_t *bufs[] = {x, w, dy, y, dx, dw, t};
	for (int i = 0; i < 7; i++)
		be->free(be, bufs[i]);
	CK(be->sync(be, &err));
}

/* The forward at small M against the bf16 GEMM of the same shape (see the top). */
static void bench_small_m(void)
{
	const int64_t n = 4096, k = 4096, ms[] = {1, 16, 64, 128};
	uint16_t *w = dev_rand(n * k, 0.02f), *x = dev_rand(128 * k, 1.0f), *dy = dev_rand(128 * n, 0.01f);
	uint16_t *y = be->alloc(be, (size_t)(128 * n) * 2), *dx = be->alloc(be, (size_t)(128 * k) * 2);
	uint16_t *dw = be->alloc(be, (size_t)(n * k) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	fos_qweight qw;
	CK(fos_qweight_make(be, w, n, k, &o, 1, 1, &qw, &err));
	for (int i = 0; i < 4; i++) {
		int64_t m = ms[i];
		char shape[64];
		snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", (long long)m, (long long)n, (long long)k);
		g_ctx g = {x, w, m, n, k, y, 32u << 20, 0, NULL, 0, 0};
		l_ctx l = {x, dy, m, &qw, o, y, dx, dw, {0}};
		row_pair("small M: forward, cached W 16x16 (no context: graph replay)", shape, op_fwd, &l,
			 "plain bf16 GEMM", op_gemm, &g);
		l.o.override = FOS_OVR_QUANTIZED;
		row_pair("small M: forward + saved context (quantized: columnwise X)", shape, op_fwd_save, &l,
			 "plain bf16 GEMM", op_gemm, &g);
		CK(fos_linear_forward(be, x, m, &qw, &l.o, NULL, y, &l.sv, &err));
		g_ctx gx = {dy, w, m, k, n, dx, 32u << 20, 0, NULL, 0, 0}, gw = {dy, x, n, k, m, dw, 32u << 20, 0, NULL, 0, 0};
		two_ctx both = {&gx, &gw};
		row_pair("small M: backward quantized (dX + dW)", shape, op_bwd, &l, "its 2 plain GEMMs", op_two_gemms,
			 &both);
		fos_saved_free(be, &l.sv);
	}
	fos_qweight_free(be, &qw);
	uint16_t *bufs[] = {w, x, dy, y, dx, dw};
	for (int i = 0; i < 6; i++)
		be->free(be, bufs[i]);
	CK(be->sync(be, &err));
}

#include "bench_smallm.h"

/* ---- the weight cache's decode on demand (issue 17) ------------------------------------------ */

/* A layer call with explicit weight operands: wo as fosd's lanes pass it (scratch: decode on
 * demand; wdec / wcol_dec: the decoded copies the cache used to keep). */
typedef struct {
	l_ctx *l;
	fos_wops wo;
} lw_ctx;
static void op_fwd_w(void *c)
{
	lw_ctx *x = c;
	CK(fos_linear_forward_w(be, x->l->x, x->l->m, x->l->qw, &x->wo, &x->l->o, NULL, x->l->y, NULL, &err));
}
static void op_bwd_w(void *c)
{
	lw_ctx *x = c;
	CK(fos_linear_backward_w(be, &x->l->sv, x->l->qw, &x->wo, x->l->dy, x->l->dx, x->l->dw, NULL, &err));
}

/* Decode on demand (a lane's reused scratch) against the cached decoded operands, side by side in
 * one run, for the forward and every backward at (m, n, k). */
static void bench_wcache_linear(int64_t m, int64_t n, int64_t k)
{
	char shape[64];
	snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", (long long)m, (long long)n, (long long)k);
	uint16_t *x = dev_rand(m * k, 1.0f), *w = dev_rand(n * k, 0.02f), *dy = dev_rand(m * n, 0.01f);
	uint16_t *y = be->alloc(be, (size_t)(m * n) * 2), *dx = be->alloc(be, (size_t)(m * k) * 2);
	uint16_t *dw = be->alloc(be, (size_t)(n * k) * 2);
	uint16_t *wdec = be->alloc(be, (size_t)(n * k) * 2), *wcol = be->alloc(be, (size_t)(n * k) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	fos_qweight qw;
	CK(fos_qweight_make_uses(be, w, n, k, &o, FOS_USES_ALL, &qw, &err));
	CK(fos_qweight_decode(be, &qw, 0, wdec, &err));
	CK(fos_qweight_decode(be, &qw, 1, wcol, &err));
	fos_wscratch ws = {0, 0};
	l_ctx l = {x, dy, m, &qw, o, y, dx, dw, {0}};
	lw_ctx dem = {&l, {&ws, NULL, NULL}}, cached = {&l, {NULL, wdec, wcol}};
	row_pair("wcache: forward, W decoded on demand (lane scratch)", shape, op_fwd_w, &dem,
		 "cached decoded W", op_fwd_w, &cached);
	const int ovr[] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
	const char *on[] = {"quantized", "high_precision", "dequantized"};
	for (int i = 0; i < 3; i++) {
		l.o.override = ovr[i];
		CK(fos_linear_forward(be, x, m, &qw, &l.o, NULL, y, &l.sv, &err));
		char name[96];
		snprintf(name, sizeof name, "wcache: backward %s, W decoded on demand", on[i]);
		row_pair(name, shape, op_bwd_w, &dem, "cached decoded W", op_bwd_w, &cached);
		fos_saved_free(be, &l.sv);
	}
	fos_wscratch_free(be, &ws);
	fos_qweight_free(be, &qw);
	uint16_t *bufs[] = {x, w, dy, y, dx, dw, wdec, wcol};
	for (int i = 0; i < 8; i++)
		be->free(be, bufs[i]);
	CK(be->sync(be, &err));
}

/* Cached bytes per element of a 4096x4096 weight by use set, made here, and the old entry's. */
static void bench_wcache_bytes(void)
{
	const int64_t n = 4096, k = 4096;
	uint16_t *w = dev_rand(n * k, 0.02f);
	fos_linear_opts o = fos_linear_opts_default();
	static const int sets[] = {FOS_USE_FORWARD, FOS_USE_DEQUANTIZED, FOS_USE_FORWARD | FOS_USE_QUANTIZED,
				   FOS_USE_FORWARD | FOS_USE_HIGH_PRECISION, FOS_USES_ALL};
	for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
		fos_qweight qw;
		CK(fos_qweight_make_uses(be, w, n, k, &o, sets[i], &qw, &err));
		char us[80];
		printf("| wcache: cached bytes per element, uses %s | N=4096 K=4096 | %.4f B | old entry (+ decoded, + master) "
		       "%.4f B | %.2fx |\n",
		       fos_uses_str(sets[i], us, sizeof us), (double)fos_qweight_bytes(&qw) / (double)(n * k),
		       (double)(fos_qtensor_bytes(n, k, 0) + 4 * n * k) / (double)(n * k),
		       (double)fos_qweight_bytes(&qw) / (double)(fos_qtensor_bytes(n, k, 0) + 4 * n * k));
		fos_qweight_free(be, &qw);
	}
	be->free(be, w);
	CK(be->sync(be, &err));
}

/* Forward at M = 128 (graph replay) with the decoded tier's copy against decoding on demand. */
static void bench_wcache_tier(void)
{
	const int64_t m = 128, n = 4096, k = 4096;
	char shape[64];
	snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", (long long)m, (long long)n, (long long)k);
	uint16_t *x = dev_rand(m * k, 1.0f), *w = dev_rand(n * k, 0.02f), *y = be->alloc(be, (size_t)(m * n) * 2);
	uint16_t *wdec = be->alloc(be, (size_t)(n * k) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	fos_qweight qw;
	CK(fos_qweight_make_uses(be, w, n, k, &o, FOS_USE_FORWARD, &qw, &err));
	CK(fos_qweight_decode(be, &qw, 0, wdec, &err));
	fos_wscratch ws = {0, 0};
	l_ctx l = {x, NULL, m, &qw, o, y, NULL, NULL, {0}};
	lw_ctx dem = {&l, {&ws, NULL, NULL}}, tier = {&l, {NULL, wdec, NULL}};
	g_ctx g = {x, w, m, n, k, y, 32u << 20, 0, NULL, 0, 0};
	row_pair("wcache: small forward, decoded tier copy", shape, op_fwd_w, &tier, "plain bf16 GEMM", op_gemm, &g);
	row_pair("wcache: small forward, decoded on demand (no tier)", shape, op_fwd_w, &dem, "plain bf16 GEMM", op_gemm,
		 &g);
	row_pair("wcache: small forward, on demand against the tier", shape, op_fwd_w, &dem, "decoded tier", op_fwd_w,
		 &tier);
	fos_wscratch_free(be, &ws);
	fos_qweight_free(be, &qw);
	uint16_t *bufs[] = {x, w, y, wdec};
	for (int i = 0; i < 4; i++)
		be->free(be, bufs[i]);
	CK(be->sync(be, &err));
}

/* A 30B model's weights on one GPU: nw puts of one (4096, 14336) weight for the forward use only
 * (the same device buffer each time), then a forward (M = 128) on each decoded on demand, every Y
 * compared bit for bit with the old path's (the cached decoded operand). */
static void bench_wcache_30b(int nw)
{
	const int64_t n = 4096, k = 14336, m = 128;
	uint16_t *w = dev_rand(n * k, 0.02f), *x = dev_rand(m * k, 1.0f);
	uint16_t *y = be->alloc(be, (size_t)(m * n) * 2), *wdec = be->alloc(be, (size_t)(n * k) * 2);
	uint16_t *ref = malloc((size_t)(m * n) * 2), *got = malloc((size_t)(m * n) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	fos_qweight *qw = calloc((size_t)nw, sizeof *qw);
	if (!qw || !ref || !got || !y || !wdec) {
		fprintf(stderr, "bench_cuda: out of memory for the 30B run\n");
		exit(1);
	}
	CK(fos_cuda_mark(be, 0, &err));
	size_t total = 0;
	int made = 0;
	for (int i = 0; i < nw; i++) {
		if (fos_qweight_make_uses(be, w, n, k, &o, FOS_USE_FORWARD, &qw[i], &err)) {
			fprintf(stderr, "bench_cuda: put %d of %d: %s\n", i + 1, nw, err.msg);
			break;
		}
		total += fos_qweight_bytes(&qw[i]);
		made++;
	}
	CK(fos_cuda_mark(be, 1, &err));
	float put_ms;
	CK(fos_cuda_elapsed_ms(be, 0, 1, &put_ms, &err));
	/* the old path's Y: the decoded operand kept, as the cache did */
	CK(fos_qweight_decode(be, &qw[0], 0, wdec, &err));
	fos_wops cached = {NULL, wdec, NULL};
	CK(fos_linear_forward_w(be, x, m, &qw[0], &cached, &o, NULL, y, NULL, &err));
	CK(be->d2h(be, ref, y, (size_t)(m * n) * 2, &err));
	be->free(be, wdec);
	fos_wscratch ws = {0, 0};
	fos_wops dem = {&ws, NULL, NULL};
	int same = 0;
	CK(fos_cuda_mark(be, 0, &err));
	for (int i = 0; i < made; i++) {
		CK(fos_linear_forward_w(be, x, m, &qw[i], &dem, &o, NULL, y, NULL, &err));
		CK(be->d2h(be, got, y, (size_t)(m * n) * 2, &err));
		same += !memcmp(got, ref, (size_t)(m * n) * 2);
	}
	CK(fos_cuda_mark(be, 1, &err));
	float fwd_ms;
	CK(fos_cuda_elapsed_ms(be, 0, 1, &fwd_ms, &err));
	double elems = (double)made * (double)(n * k);
	printf("| wcache: %d of %d forward-only puts of (4096, 14336) (%.2fe9 elements) | %.3f GB cached, %.4f B/element | "
	       "%.1f ms | old entries would need %.1f GB | |\n",
	       made, nw, elems / 1e9, (double)total / 1e9, (double)total / elems, put_ms,
	       elems * (double)(fos_qtensor_bytes(n, k, 0) + 4 * n * k) / (double)(n * k) / 1e9);
	printf("| wcache: a forward (M=128) on each, decoded on demand | %d weights | %.1f ms | bit-identical to the "
	       "cached decoded path: %d of %d | |\n",
	       made, fwd_ms, same, made);
	fos_wscratch_free(be, &ws);
	for (int i = 0; i < made; i++)
		fos_qweight_free(be, &qw[i]);
	free(qw), free(ref), free(got);
	uint16_t *bufs[] = {w, x, y};
	for (int i = 0; i < 3; i++)
		be->free(be, bufs[i]);
	CK(be->sync(be, &err));
}

static void bench_wcache(int nw)
{
	bench_wcache_bytes();
	bench_wcache_linear(8192, 4096, 4096);
	bench_wcache_linear(8192, 8192, 8192);
	bench_wcache_tier();
	bench_wcache_30b(nw);
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "quick");
	int qt_only = argc > 1 && !strcmp(argv[1], "qt");
	int small_only = argc > 1 && !strcmp(argv[1], "small");
	int wcache_only = argc > 1 && !strcmp(argv[1], "wcache"); /* wcache [NW]: only the weight cache rows */
	be = fos_backend_cuda(0, &err);
	if (!be) {
		printf("bench_cuda: no CUDA backend (%s): nothing to measure\n", err.msg);
		return 0;
	}
	printf("bench_cuda on %s\n\n", be->device);
	printf("| what | shape | time (median of 11) | baseline | ratio |\n|---|---|---|---|---|\n");
	if (qt_only) {
		bench_quant_t(4096, 8192, 1);
		be->destroy(be);
		return 0;
	}
	if (small_only) {
		bench_small_m();
		be->destroy(be);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "smallm")) {
		const int var = argc > 2 && !strcmp(argv[2], "variants");
		bench_smallm(var, argc > 2 + var && !strcmp(argv[2 + var], "first"));
		be->destroy(be);
		return 0;
	}
	if (wcache_only) {
		bench_wcache(argc > 2 ? atoi(argv[2]) : 512);
		be->destroy(be);
		return 0;
	}
	bench_quant(8192, 5120, quick);
	bench_quant(8192, 8192, quick);
	bench_quant_t(4096, 8192, quick);
	bench_grad_pair(8192, 4096);
	bench_linear(8192, 8192, 8192, quick);
	bench_linear(8192, 4096, 4096, quick);
	bench_small_m();
	bench_smallm(0, 0);
	bench_wcache(quick ? 16 : 512);
	be->destroy(be);
	return 0;
}
#endif
