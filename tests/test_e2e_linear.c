/* test_e2e_linear.c: a real fosd (CPU backend) on a temporary ipc socket, driven through libfos:
 * every result must equal the same computation called in-process (fos_linear_*, be->quantize,
 * be->dequantize) bit for bit: one-shot Linear, cached-weight Forward/Backward under every
 * override, Quantize/Dequantize, from several threads and several processes at once; expired
 * contexts recomputed from X; versions, eviction, pinning and listing of the weight cache; Stats'
 * queue and run split of executor ops and its message-pool counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"
#include "support_assert.h"

static tsrv g_srv;

static int setup_server(void **state)
{
	(void)state;
	const char *args[] = {"--workers", "2", "--context-ttl", "30s", NULL};
	return tsrv_start(&g_srv, args);
}

static int teardown_server(void **state)
{
	(void)state;
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

static fos_client *connect_or_fail(const tsrv *s)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(s->url, NULL, 20000, &c, &st);
	if (rc)
		fprintf(stderr, "connect: %s: %s\n", fos_code_name(rc), st.message);
	assert_int_equal(rc, FOS_CODE_OK);
	return c;
}

/* Index of the first differing bf16 element, or -1. */
static long first_diff(const uint16_t *a, const uint16_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (long)i;
	return -1;
}

#define ASSERT_SAME(a, b, n, what)                                                                              \
	do {                                                                                                     \
		long d_ = first_diff((const uint16_t *)(a), (const uint16_t *)(b), (n));                         \
		if (d_ >= 0)                                                                                     \
			fail_msg("%s differs at element %ld: 0x%04x vs reference 0x%04x", what, d_,               \
				 ((const uint16_t *)(a))[d_], ((const uint16_t *)(b))[d_]);                        \
	} while (0)

/* ---- health --------------------------------------------------------------------------------- */

static void test_health(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	fos_health_info h;
	fos_status st;
	ASSERT_OK(fos_health(c, &h, &st), st);
	if (strcmp(tsrv_backend_name(), "auto"))
		assert_string_equal(h.backend, tsrv_backend_name());
	assert_true(strlen(h.device) > 0);
	assert_int_equal(h.draining, 0);
	assert_int_equal(h.max_message_bytes, (uint64_t)1 << 30);
	char said[64];
	snprintf(said, sizeof said, "backend %s on", h.backend);
	assert_true(tsrv_log_contains(&g_srv, said));
	fos_close(c);
}

/* ---- one-shot linear ------------------------------------------------------------------------ */

static void check_linear(fos_client *c, int64_t m, int64_t n, int64_t k, int override, int row_scaled, int wblock,
			 int with_bias, uint64_t seed)
{
	uint16_t *x = malloc((size_t)(m * k) * 2), *w = malloc((size_t)(n * k) * 2), *b = malloc((size_t)n * 2);
	uint16_t *dy = malloc((size_t)(m * n) * 2);
	uint16_t *ry = malloc((size_t)(m * n) * 2), *rdx = malloc((size_t)(m * k) * 2), *rdw = malloc((size_t)(n * k) * 2);
	uint16_t *rdb = malloc((size_t)n * 2);
	tsrv_fill_bf16(x, (size_t)(m * k), seed, 1.0f);
	tsrv_fill_bf16(w, (size_t)(n * k), seed + 1, 0.05f);
	tsrv_fill_bf16(b, (size_t)n, seed + 2, 0.5f);
	tsrv_fill_bf16(dy, (size_t)(m * n), seed + 3, 0.01f);
	fos_linear_opts o = fos_linear_opts_default();
	o.override = override; /* the backend's and the wire's numbers are the same */
	o.row_scaled = row_scaled;
	o.weight_block = wblock == FOS_BLOCKS_1X16 ? FOS_BLOCK_1X16 : FOS_BLOCK_16X16;
	assert_int_equal(tsrv_ref_linear(x, w, with_bias ? b : NULL, dy, m, n, k, &o, ry, rdx, rdw, rdb), 0);

	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, m, k, x), tw = fos_tensor_2d(FOS_DTYPE_BF16, n, k, w);
	fos_tensor tb = fos_tensor_1d(FOS_DTYPE_BF16, n, b), tdy = fos_tensor_2d(FOS_DTYPE_BF16, m, n, dy);
	fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
	fos_linear_config cfg = {override, wblock, FOS_ERRMODE_MAE, 0, row_scaled, 0};
	fos_status st;
	ASSERT_OK(fos_linear(c, &tx, &tw, with_bias ? &tb : NULL, &tdy, &cfg, &y, &dx, &dw, &db, &st), st);
	assert_int_equal(y.ndim, 2);
	assert_int_equal(y.shape[0], m);
	assert_int_equal(y.shape[1], n);
	ASSERT_SAME(y.data, ry, (size_t)(m * n), "linear y");
	ASSERT_SAME(dx.data, rdx, (size_t)(m * k), "linear dx");
	ASSERT_SAME(dw.data, rdw, (size_t)(n * k), "linear dw");
	if (with_bias) {
		assert_int_equal(db.ndim, 1);
		ASSERT_SAME(db.data, rdb, (size_t)n, "linear db");
	} else {
		assert_int_equal(db.ndim, 0);
		assert_null(db.data);
	}
	/* forward only: caller-owned output buffer */
	uint16_t *y2 = malloc((size_t)(m * n) * 2);
	fos_tensor ty2 = fos_tensor_2d(FOS_DTYPE_BF16, m, n, y2);
	ASSERT_OK(fos_linear(c, &tx, &tw, with_bias ? &tb : NULL, NULL, &cfg, &ty2, NULL, NULL, NULL, &st), st);
	assert_ptr_equal(ty2.data, y2);
	ASSERT_SAME(y2, ry, (size_t)(m * n), "linear forward-only y");
	free(y2);
	free(y.data);
	free(dx.data);
	free(dw.data);
	free(db.data);
	free(x), free(w), free(b), free(dy), free(ry), free(rdx), free(rdw), free(rdb);
}

static void test_linear_bitwise(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	check_linear(c, 128, 256, 128, FOS_OVERRIDE_DEFAULT, 0, FOS_BLOCKS_DEFAULT, 1, 11);
	check_linear(c, 256, 128, 256, FOS_OVERRIDE_QUANTIZED, 0, FOS_BLOCKS_1X16, 0, 12);
	check_linear(c, 128, 128, 256, FOS_OVERRIDE_HIGH_PRECISION, 0, FOS_BLOCKS_16X16, 1, 13);
	check_linear(c, 256, 256, 128, FOS_OVERRIDE_DEQUANTIZED, 0, FOS_BLOCKS_16X16, 1, 14);
	check_linear(c, 128, 256, 256, FOS_OVERRIDE_DEFAULT, 1, FOS_BLOCKS_1X16, 1, 15);
	check_linear(c, 128, 128, 128, FOS_OVERRIDE_DEQUANTIZED, 1, FOS_BLOCKS_16X16, 0, 16);
	fos_close(c);
}

/* ---- cached weight: forward / backward ------------------------------------------------------ */

typedef struct fb_case {
	int64_t m, n, k;
	int override, row_scaled, bias;
	uint64_t seed;
	/* inputs and reference outputs */
	uint16_t *x, *w, *b, *dy, *ry, *rdx, *rdw, *rdb;
} fb_case;

static fb_case fb_init(int64_t m, int64_t n, int64_t k, int override, int row_scaled, int bias, uint64_t seed)
{
	fb_case t;
	memset(&t, 0, sizeof t);
	t.m = m, t.n = n, t.k = k;
	t.override = override, t.row_scaled = row_scaled, t.bias = bias, t.seed = seed;
	return t;
}

static void fb_make(fb_case *t, const uint16_t *w_shared)
{
	size_t mk = (size_t)(t->m * t->k), nk = (size_t)(t->n * t->k), mn = (size_t)(t->m * t->n);
	t->x = malloc(mk * 2);
	t->w = malloc(nk * 2);
	t->b = malloc((size_t)t->n * 2);
	t->dy = malloc(mn * 2);
	t->ry = malloc(mn * 2);
	t->rdx = malloc(mk * 2);
	t->rdw = malloc(nk * 2);
	t->rdb = malloc((size_t)t->n * 2);
	tsrv_fill_bf16(t->x, mk, t->seed, 1.0f);
	if (w_shared)
		memcpy(t->w, w_shared, nk * 2);
	else
		tsrv_fill_bf16(t->w, nk, t->seed + 1, 0.05f);
	tsrv_fill_bf16(t->b, (size_t)t->n, t->seed + 2, 0.5f);
	tsrv_fill_bf16(t->dy, mn, t->seed + 3, 0.01f);
	fos_linear_opts o = fos_linear_opts_default();
	o.override = t->override;
	o.row_scaled = t->row_scaled;
	assert_int_equal(tsrv_ref_linear(t->x, t->w, t->bias ? t->b : NULL, t->dy, t->m, t->n, t->k, &o, t->ry,
					 t->rdx, t->rdw, t->rdb),
			 0);
}

static void fb_free(fb_case *t)
{
	free(t->x), free(t->w), free(t->b), free(t->dy), free(t->ry), free(t->rdx), free(t->rdw), free(t->rdb);
}

/* Forward (saving a context) then backward through the daemon; 0 when every output matches. */
static int fb_run(fos_client *c, const char *weight, fb_case *t, char *why, size_t whysz)
{
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, t->m, t->k, t->x);
	fos_tensor tb = fos_tensor_1d(FOS_DTYPE_BF16, t->n, t->b);
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, t->m, t->n, t->dy);
	fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
	fos_forward_opts fo = {0, t->override, t->row_scaled, 1, 0};
	fos_context ctx;
	fos_status st;
	int bad = 0;
	int rc = fos_forward(c, weight, &tx, t->bias ? &tb : NULL, &fo, &y, &ctx, &st);
	if (rc) {
		snprintf(why, whysz, "forward: %s: %s", fos_code_name(rc), st.message);
		return -1;
	}
	if (first_diff(y.data, t->ry, (size_t)(t->m * t->n)) >= 0) {
		snprintf(why, whysz, "forward y differs from the reference");
		bad = 1;
	}
	rc = fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, &db, &st);
	if (rc) {
		snprintf(why, whysz, "backward: %s: %s", fos_code_name(rc), st.message);
		free(y.data);
		return -1;
	}
	if (ctx.id != 0) {
		snprintf(why, whysz, "the context was not consumed");
		bad = 1;
	}
	if (first_diff(dx.data, t->rdx, (size_t)(t->m * t->k)) >= 0 ||
	    first_diff(dw.data, t->rdw, (size_t)(t->n * t->k)) >= 0 ||
	    (t->bias && first_diff(db.data, t->rdb, (size_t)t->n) >= 0) || (!t->bias && db.ndim != 0)) {
		snprintf(why, whysz, "backward outputs differ from the reference");
		bad = 1;
	}
	free(y.data);
	free(dx.data);
	free(dw.data);
	free(db.data);
	return bad ? -1 : 0;
}

static void put_weight(fos_client *c, const char *name, uint64_t version, const uint16_t *w, int64_t n, int64_t k,
		       const fos_weight_config *cfg)
{
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, n, k, w);
	fos_weight_info info;
	fos_status st;
	ASSERT_OK(fos_put_weight(c, name, version, &tw, cfg, &info, &st), st);
	assert_string_equal(info.name, name);
	assert_int_equal(info.version, version);
	assert_int_equal(info.n, n);
	assert_int_equal(info.k, k);
	assert_true(info.bytes > 0);
}

static void test_forward_backward_bitwise(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	const int overrides[] = {FOS_OVERRIDE_QUANTIZED, FOS_OVERRIDE_HIGH_PRECISION, FOS_OVERRIDE_DEQUANTIZED,
				 FOS_OVERRIDE_DEFAULT, FOS_OVERRIDE_DEFAULT};
	const int rows[] = {0, 0, 1, 0, 1};
	for (int i = 0; i < 5; i++) {
		fb_case t = fb_init(256, 128, 256, overrides[i], rows[i], i % 2 == 0, 100 + (uint64_t)i);
		fb_make(&t, NULL);
		char name[32];
		snprintf(name, sizeof name, "layer.%d", i);
		put_weight(c, name, 1, t.w, t.n, t.k, NULL);
		char why[600];
		if (fb_run(c, name, &t, why, sizeof why))
			fail_msg("override %d row_scaled %d: %s", t.override, t.row_scaled, why);
		/* a second forward/backward on the same cached entry (columnwise copy now cached) */
		if (fb_run(c, name, &t, why, sizeof why))
			fail_msg("second run, override %d: %s", t.override, why);
		fb_free(&t);
	}
	fos_close(c);
}

/* ---- several threads and processes at once -------------------------------------------------- */

#define MT_THREADS 4
#define MT_ITERS 6

typedef struct mt_arg {
	const char *url;
	const char *weight;
	fb_case *cases; /* MT_ITERS cases for this thread */
	fos_client *shared;  /* non-NULL: use this handle (several requests in flight on one handle) */
	int failures;
	char why[600];
} mt_arg;

static void *mt_main(void *p)
{
	mt_arg *a = p;
	fos_client *c = a->shared;
	fos_status st;
	if (!c && fos_connect(a->url, NULL, 30000, &c, &st)) {
		snprintf(a->why, sizeof a->why, "connect: %s", st.message);
		a->failures++;
		return NULL;
	}
	for (int i = 0; i < MT_ITERS; i++)
		if (fb_run(c, a->weight, &a->cases[i], a->why, sizeof a->why))
			a->failures++;
	if (!a->shared)
		fos_close(c);
	return NULL;
}

static void make_mt_cases(fb_case *cases, int n, const uint16_t *w, uint64_t seed)
{
	for (int i = 0; i < n; i++) {
		fb_case t = fb_init(128 * (1 + i % 2), 256, 128, i % 3 == 0 ? FOS_OVERRIDE_QUANTIZED : (i % 3 == 1 ? FOS_OVERRIDE_DEQUANTIZED : FOS_OVERRIDE_HIGH_PRECISION),
			     0, i % 2, seed + (uint64_t)i * 10);
		cases[i] = t;
		fb_make(&cases[i], w);
	}
}

static void test_threads(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	uint16_t *w = malloc(256 * 128 * 2);
	tsrv_fill_bf16(w, 256 * 128, 777, 0.05f);
	put_weight(c, "shared.w", 7, w, 256, 128, NULL);
	fb_case *cases = calloc(MT_THREADS * MT_ITERS, sizeof *cases);
	make_mt_cases(cases, MT_THREADS * MT_ITERS, w, 1000);
	/* round 1: a handle per thread; round 2: one handle shared by all threads */
	for (int round = 0; round < 2; round++) {
		pthread_t th[MT_THREADS];
		mt_arg args[MT_THREADS];
		for (int i = 0; i < MT_THREADS; i++) {
			args[i] = (mt_arg){g_srv.url, "shared.w", cases + i * MT_ITERS, round ? c : NULL, 0, ""};
			assert_int_equal(pthread_create(&th[i], NULL, mt_main, &args[i]), 0);
		}
		for (int i = 0; i < MT_THREADS; i++) {
			pthread_join(th[i], NULL);
			if (args[i].failures)
				fail_msg("round %d thread %d: %d failures, last: %s", round, i, args[i].failures, args[i].why);
		}
	}
	for (int i = 0; i < MT_THREADS * MT_ITERS; i++)
		fb_free(&cases[i]);
	free(cases);
	free(w);
	fos_close(c);
}

/* A child process (started by test_processes through exec, since nng cannot be used across a
 * fork): connects on its own, computes its references and runs MT_ITERS forward/backward pairs.
 * argv: test_e2e_linear --child URL WEIGHT_SEED INDEX */
static int child_main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	const char *url = argv[2];
	uint64_t wseed = strtoull(argv[3], NULL, 10);
	int idx = atoi(argv[4]);
	uint16_t *w = malloc(256 * 128 * 2);
	tsrv_fill_bf16(w, 256 * 128, wseed, 0.05f);
	fb_case *cases = calloc(MT_ITERS, sizeof *cases);
	make_mt_cases(cases, MT_ITERS, w, 5000 + (uint64_t)idx * 100);
	mt_arg a = {url, "proc.w", cases, NULL, 0, ""};
	mt_main(&a);
	if (a.failures)
		fprintf(stderr, "child %d: %d failures, last: %s\n", idx, a.failures, a.why);
	for (int i = 0; i < MT_ITERS; i++)
		fb_free(&cases[i]);
	free(cases);
	free(w);
	return a.failures ? 1 : 0;
}

static void test_processes(void **state)
{
	(void)state;
	enum { NPROC = 3 };
	fos_client *c = connect_or_fail(&g_srv);
	uint16_t *w = malloc(256 * 128 * 2);
	tsrv_fill_bf16(w, 256 * 128, 4242, 0.05f);
	put_weight(c, "proc.w", 1, w, 256, 128, NULL);
	fos_close(c);
	free(w);
	pid_t pids[NPROC];
	for (int p = 0; p < NPROC; p++) {
		char idx[16];
		snprintf(idx, sizeof idx, "%d", p);
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			char *args[] = {(char *)"test_e2e_linear", (char *)"--child", g_srv.url, (char *)"4242", idx, NULL};
			execv("/proc/self/exe", args);
			_exit(127);
		}
	}
	for (int p = 0; p < NPROC; p++) {
		int status;
		assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
}

/* ---- quantize / dequantize ------------------------------------------------------------------ */

static void check_quantize(fos_client *c, int64_t rows, int64_t cols, int dtype_f32, const fos_quant_config *cfg,
			   const fos_qcfg *ref_cfg, int with_amax, uint64_t seed)
{
	size_t n = (size_t)(rows * cols);
	uint16_t *xb = malloc(n * 2);
	float *xf = malloc(n * 4);
	tsrv_fill_bf16(xb, n, seed, 3.0f);
	for (size_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)xb[i] << 16;
		memcpy(&xf[i], &u, 4);
		xf[i] *= 1.0f + (float)(i % 7) * 1e-3f; /* not bf16-representable */
	}
	int64_t na = ref_cfg->row_scaled ? rows : 1;
	float *amax_in = malloc((size_t)na * 4);
	for (int64_t i = 0; i < na; i++)
		amax_in[i] = 5.0f + (float)i;
	uint8_t *rc_ = malloc(n / 2), *rs = malloc(n / 16);
	float *ra = malloc((size_t)na * 4);
	const void *x = dtype_f32 ? (const void *)xf : (const void *)xb;
	assert_int_equal(tsrv_ref_quantize(x, dtype_f32 ? FOS_F32 : FOS_BF16, rows, cols, ref_cfg,
					   with_amax ? amax_in : NULL, rc_, rs, ra),
			 0);
	fos_tensor tx = fos_tensor_2d(dtype_f32 ? FOS_DTYPE_F32 : FOS_DTYPE_BF16, rows, cols, x);
	fos_tensor ta = fos_tensor_1d(FOS_DTYPE_F32, na, amax_in);
	fos_tensor codes = fos_tensor_out(), scales = fos_tensor_out(), amax = fos_tensor_out();
	fos_status st;
	ASSERT_OK(fos_quantize(c, &tx, cfg, with_amax ? &ta : NULL, &codes, &scales, &amax, &st), st);
	assert_int_equal(codes.shape[0], rows);
	assert_int_equal(codes.shape[1], cols / 2);
	assert_int_equal(scales.shape[1], cols / 16);
	assert_int_equal(amax.shape[0], na);
	assert_memory_equal(codes.data, rc_, n / 2);
	assert_memory_equal(scales.data, rs, n / 16);
	assert_memory_equal(amax.data, ra, (size_t)na * 4);

	/* dequantize what came back, both output dtypes */
	for (int od = 0; od < 2; od++) {
		size_t es = od ? 4 : 2;
		void *ref = malloc(n * es);
		assert_int_equal(tsrv_ref_dequantize(rc_, rs, ra, rows, cols, ref_cfg->bound, ref_cfg->row_scaled,
						     od ? FOS_F32 : FOS_BF16, ref),
				 0);
		fos_tensor out = fos_tensor_out();
		ASSERT_OK(fos_dequantize(c, &codes, &scales, &amax, ref_cfg->bound, ref_cfg->row_scaled,
					 od ? FOS_DTYPE_F32 : FOS_DTYPE_BF16, &out, &st),
			  st);
		assert_int_equal(out.size, n * es);
		assert_memory_equal(out.data, ref, n * es);
		free(out.data);
		free(ref);
	}
	free(codes.data), free(scales.data), free(amax.data);
	free(xb), free(xf), free(amax_in), free(rc_), free(rs), free(ra);
}

static void test_quantize_bitwise(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	fos_qcfg r = fos_qcfg_default();
	fos_quant_config q = {0, 0, 0, 0, 0};
	check_quantize(c, 128, 256, 0, &q, &r, 0, 1);
	check_quantize(c, 64, 1024, 1, &q, &r, 0, 2);
	check_quantize(c, 100, 320, 0, &q, &r, 1, 3);
	fos_quant_config q16 = {FOS_QRECIPE_4OVER6, FOS_BLOCKS_16X16, FOS_ERRMODE_MSE, 448, 0};
	fos_qcfg r16 = {FOS_RECIPE_4OVER6, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0};
	check_quantize(c, 384, 256, 0, &q16, &r16, 0, 4);
	fos_quant_config qrs = {FOS_QRECIPE_4OVER6, FOS_BLOCKS_1X16, FOS_ERRMODE_MAE, 256, 1};
	fos_qcfg rrs = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 1};
	check_quantize(c, 128, 256, 1, &qrs, &rrs, 0, 5);
	check_quantize(c, 128, 256, 0, &qrs, &rrs, 1, 6);
	fos_quant_config qnv = {FOS_QRECIPE_NVFP4, 0, 0, 0, 0};
	fos_qcfg rnv = {FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0};
	check_quantize(c, 128, 128, 0, &qnv, &rnv, 0, 7);
	fos_close(c);
}

/* fos_set_spin: a caller polling for its reply gets the same bytes, and stops polling when the reply
 * comes (a 20 s spin on calls answered in milliseconds must not make them take 20 s). */
static void test_spin(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	fos_set_spin(c, 20 * 1000 * 1000);
	fos_qcfg r = fos_qcfg_default();
	fos_quant_config q = {0, 0, 0, 0, 0};
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	check_quantize(c, 128, 256, 0, &q, &r, 0, 11);
	check_quantize(c, 64, 1024, 1, &q, &r, 0, 12);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	assert_true(secs < 10.0);
	fos_set_spin(c, 0);
	check_quantize(c, 128, 256, 0, &q, &r, 0, 13);
	fos_close(c);
}

/* ---- contexts: expiry and recompute --------------------------------------------------------- */

static void test_expired_context_recompute(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--context-ttl", "150ms", "--sweep-interval", "50ms", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *c = connect_or_fail(&s);
	fb_case t = fb_init(128, 256, 128, FOS_OVERRIDE_QUANTIZED, 0, 1, 31);
	fb_make(&t, NULL);
	put_weight(c, "ttl.w", 3, t.w, t.n, t.k, NULL);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, t.m, t.k, t.x), tb = fos_tensor_1d(FOS_DTYPE_BF16, t.n, t.b);
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, t.m, t.n, t.dy);
	fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
	fos_forward_opts fo = {0, t.override, 0, 1, 0};
	fos_context ctx;
	fos_status st;
	ASSERT_OK(fos_forward(c, "ttl.w", &tx, &tb, &fo, &y, &ctx, &st), st);
	assert_int_equal(ctx.weight_version, 3);
	assert_int_equal(ctx.resolved_override, FOS_OVERRIDE_QUANTIZED);
	usleep(400 * 1000);
	/* without X: NOT_FOUND, saying it expired */
	fos_context gone = ctx;
	assert_int_equal(fos_backward(c, &gone, &tdy, NULL, &dx, &dw, &db, &st), FOS_CODE_NOT_FOUND);
	assert_non_null(strstr(st.message, "expired"));
	assert_null(dx.data);
	/* with X: recomputed, bit-identical */
	fos_backward_opts bo = {0, &tx, &tb};
	ASSERT_OK(fos_backward(c, &ctx, &tdy, &bo, &dx, &dw, &db, &st), st);
	assert_int_equal(ctx.recomputed, 1);
	ASSERT_SAME(dx.data, t.rdx, (size_t)(t.m * t.k), "recomputed dx");
	ASSERT_SAME(dw.data, t.rdw, (size_t)(t.n * t.k), "recomputed dw");
	ASSERT_SAME(db.data, t.rdb, (size_t)t.n, "recomputed db");
	free(y.data), free(dx.data), free(dw.data), free(db.data);
	y = dx = dw = db = fos_tensor_out();
	/* the weight replaced by another version: the recompute refuses */
	ASSERT_OK(fos_forward(c, "ttl.w", &tx, &tb, &fo, &y, &ctx, &st), st);
	free(y.data);
	y = fos_tensor_out();
	put_weight(c, "ttl.w", 4, t.w, t.n, t.k, NULL);
	usleep(400 * 1000);
	assert_int_equal(fos_backward(c, &ctx, &tdy, &bo, &dx, &dw, &db, &st), FOS_CODE_FAILED_PRECONDITION);
	fos_stats_info si;
	ASSERT_OK(fos_stats(c, &si, &st), st);
	assert_true(si.contexts_expired >= 2);
	assert_int_equal(si.contexts, 0);
	fos_close(c);
	fb_free(&t);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

/* A context keeps the weight version of its forward even after a new version is put. */
static void test_context_keeps_version(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	fb_case t = fb_init(128, 128, 256, FOS_OVERRIDE_HIGH_PRECISION, 0, 0, 61);
	fb_make(&t, NULL);
	put_weight(c, "ver.w", 1, t.w, t.n, t.k, NULL);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, t.m, t.k, t.x), tdy = fos_tensor_2d(FOS_DTYPE_BF16, t.m, t.n, t.dy);
	fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
	fos_forward_opts fo = {1, t.override, 0, 1, 0};
	fos_context ctx;
	fos_status st;
	ASSERT_OK(fos_forward(c, "ver.w", &tx, NULL, &fo, &y, &ctx, &st), st);
	uint16_t *w2 = malloc((size_t)(t.n * t.k) * 2);
	tsrv_fill_bf16(w2, (size_t)(t.n * t.k), 999, 0.05f);
	put_weight(c, "ver.w", 2, w2, t.n, t.k, NULL);
	/* same version again: ALREADY_EXISTS */
	fos_tensor tw2 = fos_tensor_2d(FOS_DTYPE_BF16, t.n, t.k, w2);
	assert_int_equal(fos_put_weight(c, "ver.w", 2, &tw2, NULL, NULL, &st), FOS_CODE_ALREADY_EXISTS);
	/* asking for version 1 now: FAILED_PRECONDITION */
	fos_tensor y2 = fos_tensor_out();
	assert_int_equal(fos_forward(c, "ver.w", &tx, NULL, &fo, &y2, NULL, &st), FOS_CODE_INVALID_ARGUMENT);
	fos_forward_opts fo1 = {1, t.override, 0, 0, 0};
	assert_int_equal(fos_forward(c, "ver.w", &tx, NULL, &fo1, &y2, NULL, &st), FOS_CODE_FAILED_PRECONDITION);
	ASSERT_OK(fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
	ASSERT_SAME(dx.data, t.rdx, (size_t)(t.m * t.k), "dx of the old version");
	ASSERT_SAME(dw.data, t.rdw, (size_t)(t.n * t.k), "dw of the old version");
	free(y.data), free(dx.data), free(dw.data), free(w2);
	fb_free(&t);
	fos_close(c);
}

/* ---- the cache: list, drop, LRU eviction, pinning ------------------------------------------- */

static void test_cache_eviction(void **state)
{
	(void)state;
	tsrv s;
	/* one 256x256 weight put for every use is 256*256*(0.5625 + 0.5625 + 2) + 8 = 204808 bytes:
	 * room for 2 */
	const char *args[] = {"--cache-bytes", "500000", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *c = connect_or_fail(&s);
	uint16_t *w = malloc(256 * 256 * 2);
	tsrv_fill_bf16(w, 256 * 256, 5, 0.05f);
	fos_weight_config pin = {0, 0, 0, 1, 0, 0, 0, 0};
	put_weight(c, "a", 1, w, 256, 256, &pin);
	put_weight(c, "b", 1, w, 256, 256, NULL);
	fos_weight_info *list;
	size_t n;
	fos_status st;
	ASSERT_OK(fos_list_weights(c, &list, &n, &st), st);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].name, "a"); /* in name order */
	assert_string_equal(list[1].name, "b");
	assert_true(list[0].pinned);
	assert_true(list[0].has_master);
	free(list);
	/* c evicts b (a is pinned) */
	put_weight(c, "c", 1, w, 256, 256, NULL);
	ASSERT_OK(fos_list_weights(c, &list, &n, &st), st);
	assert_int_equal(n, 2);
	int have_a = 0, have_c = 0;
	for (size_t i = 0; i < n; i++) {
		have_a |= !strcmp(list[i].name, "a");
		have_c |= !strcmp(list[i].name, "c");
	}
	assert_true(have_a && have_c);
	free(list);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, 128, 256, w), y = fos_tensor_out();
	assert_int_equal(fos_forward(c, "b", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_NOT_FOUND);
	/* pin c too: nothing evictable, a third weight does not fit */
	ASSERT_OK(fos_drop_weight(c, "c", &st), st);
	assert_int_equal(fos_drop_weight(c, "c", &st), FOS_CODE_NOT_FOUND);
	put_weight(c, "c", 2, w, 256, 256, &pin);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, 256, 256, w);
	assert_int_equal(fos_put_weight(c, "d", 1, &tw, NULL, NULL, &st), FOS_CODE_RESOURCE_EXHAUSTED);
	/* the cached weights still answer */
	ASSERT_OK(fos_forward(c, "a", &tx, NULL, NULL, &y, NULL, &st), st);
	free(y.data);
	fos_stats_info si;
	ASSERT_OK(fos_stats(c, &si, &st), st);
	assert_int_equal(si.cache_entries, 2);
	assert_true(si.cache_evictions >= 1);
	assert_true(si.cache_bytes <= si.cache_budget);
	assert_int_equal(si.cache_budget, 500000);
	fos_close(c);
	free(w);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

static void test_stats_and_release(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail(&g_srv);
	uint16_t *w = malloc(128 * 128 * 2), *x = malloc(128 * 128 * 2);
	tsrv_fill_bf16(w, 128 * 128, 8, 0.05f);
	tsrv_fill_bf16(x, 128 * 128, 9, 1.0f);
	put_weight(c, "st.w", 1, w, 128, 128, NULL);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, 128, 128, x), y = fos_tensor_out();
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	fos_status st;
	ASSERT_OK(fos_forward(c, "st.w", &tx, NULL, &fo, &y, &ctx, &st), st);
	fos_stats_info si;
	ASSERT_OK(fos_stats(c, &si, &st), st);
	assert_true(si.contexts >= 1);
	assert_true(si.context_bytes > 0);
	uint64_t id = ctx.id;
	ASSERT_OK(fos_release(c, &ctx, &st), st);
	assert_int_equal(ctx.id, 0);
	ctx.id = id;
	assert_int_equal(fos_release(c, &ctx, &st), FOS_CODE_NOT_FOUND);
	assert_non_null(strstr(st.message, "released"));
	ASSERT_OK(fos_stats(c, &si, &st), st);
	int found = 0;
	for (int i = 0; i < si.n_ops; i++)
		if (!strcmp(si.ops[i].op, "forward")) {
			found = 1;
			assert_true(si.ops[i].requests >= 1);
			assert_true(si.ops[i].by_code[FOS_CODE_OK] >= 1);
			assert_true(si.ops[i].lat_count >= 1);
			assert_true(si.ops[i].lat_max_us >= si.ops[i].lat_p50_us);
			assert_true(si.ops[i].bytes_in >= 128 * 128 * 2);
		} else if (!strcmp(si.ops[i].op, "release_context")) {
			assert_true(si.ops[i].by_code[FOS_CODE_NOT_FOUND] >= 1);
		}
	assert_true(found);
	if (strcmp(tsrv_backend_name(), "auto"))
		assert_string_equal(si.backend, tsrv_backend_name());
	free(y.data), free(w), free(x);
	fos_close(c);
}

static const fos_op_stats *find_op_stats(const fos_stats_info *si, const char *op)
{
	for (int i = 0; i < si->n_ops; i++)
		if (!strcmp(si->ops[i].op, op))
			return &si->ops[i];
	fail_msg("stats have no op '%s'", op);
	return NULL;
}

/* Where the time goes: a fresh fosd, so the counts are exact. Every OK forward and put_weight ran
 * on an executor lane: its queue and run counts equal its OK count, and per request queue <= run +
 * queue <= receipt-to-reply, so their quantiles and means are bounded by the latency's. Health and
 * Stats (answered without the executor) have none. Requests of 1 MiB and more come from the
 * message pool. */
static void test_stats_queue_run_pool(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	fos_client *c = connect_or_fail(&s);
	fos_status st;
	fos_health_info h;
	fos_stats_info *s0 = calloc(1, sizeof *s0), *s1 = calloc(1, sizeof *s1);
	assert_non_null(s0);
	assert_non_null(s1);
	ASSERT_OK(fos_stats(c, s0, &st), st); /* after the Health of each connect */
	assert_int_equal(find_op_stats(s0, "forward")->requests, 0);
	ASSERT_OK(fos_health(c, &h, &st), st);
	/* W (512, 1024) and X (512, 1024) bf16: 1 MiB each, plus the header */
	const int64_t n = 512, k = 1024, m = 512;
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(m * k) * 2);
	assert_non_null(w);
	assert_non_null(x);
	tsrv_fill_bf16(w, (size_t)(n * k), 21, 0.05f);
	tsrv_fill_bf16(x, (size_t)(m * k), 22, 1.0f);
	put_weight(c, "qr.w", 1, w, n, k, NULL);
	const int ok_forwards = 5;
	for (int i = 0; i < ok_forwards; i++) {
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, m, k, x), y = fos_tensor_out();
		ASSERT_OK(fos_forward(c, "qr.w", &tx, NULL, NULL, &y, NULL, &st), st);
		free(y.data);
	}
	/* a forward that fails: counted as a request, not in any latency */
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, 128, k, x), y = fos_tensor_out();
	assert_int_equal(fos_forward(c, "qr.missing", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_NOT_FOUND);
	ASSERT_OK(fos_health(c, &h, &st), st);
	ASSERT_OK(fos_stats(c, s1, &st), st);

	const fos_op_stats *f = find_op_stats(s1, "forward");
	assert_int_equal(f->requests, ok_forwards + 1);
	assert_int_equal(f->by_code[FOS_CODE_OK], ok_forwards);
	assert_int_equal(f->by_code[FOS_CODE_NOT_FOUND], 1);
	assert_int_equal(f->lat_count, ok_forwards);
	assert_int_equal(f->queue_count, ok_forwards);
	assert_int_equal(f->run_count, ok_forwards);
	/* run at once on the receiving thread only where lanes run side by side (cuda's default 8; one
	 * lane on the cpu: everything goes through the queue) */
	if (!strcmp(s1->backend, "cpu"))
		assert_int_equal(f->ran_at_once, 0);
	assert_true(f->ran_at_once <= ok_forwards);
	assert_true(f->run_p50_us > 0); /* a 512x1024x512 GEMM takes more than a microsecond */
	assert_true(f->run_max_us > 0);
	assert_true(f->run_p50_us <= f->run_p99_us && f->run_p99_us <= f->run_max_us);
	assert_true(f->queue_p50_us <= f->queue_p99_us && f->queue_p99_us <= f->queue_max_us);
	assert_true(f->run_p50_us <= f->lat_p50_us && f->run_p99_us <= f->lat_p99_us);
	assert_true(f->queue_p50_us <= f->lat_p50_us && f->queue_p99_us <= f->lat_p99_us);
	assert_true(f->run_max_us <= f->lat_max_us && f->queue_max_us <= f->lat_max_us);
	/* per request floor(queue) + floor(run) <= floor(latency), so the sums (mean * count) too */
	double qs = f->queue_mean_us * ok_forwards, rs = f->run_mean_us * ok_forwards, ls = f->lat_mean_us * ok_forwards;
	assert_true(qs + rs <= ls + 1e-6 * ls + 1e-6);
	assert_true(f->run_mean_us > 0.0);
	/* one client, one request at a time: the queue is a thread hand-off (microseconds) while the
	 * CPU backend's 512x1024x512 forward takes milliseconds, so the two are not swapped */
	if (!strcmp(s1->backend, "cpu"))
		assert_true(f->run_p50_us > f->queue_p50_us);

	const fos_op_stats *pw = find_op_stats(s1, "put_weight");
	assert_int_equal(pw->by_code[FOS_CODE_OK], 1);
	assert_int_equal(pw->queue_count, 1);
	assert_int_equal(pw->run_count, 1);
	assert_int_equal(pw->ran_at_once, 0);
	assert_true(pw->run_max_us <= pw->lat_max_us);

	/* answered without the executor: latency, but no queue or run */
	const fos_op_stats *hs = find_op_stats(s1, "health");
	const fos_op_stats *hs0 = find_op_stats(s0, "health");
	assert_true(hs0->by_code[FOS_CODE_OK] >= 1);
	assert_int_equal(hs->by_code[FOS_CODE_OK], hs0->by_code[FOS_CODE_OK] + 2);
	assert_int_equal(hs->lat_count, hs0->lat_count + 2);
	assert_int_equal(hs->queue_count, 0);
	assert_int_equal(hs->run_count, 0);
	assert_int_equal(hs->run_p50_us, 0);
	assert_int_equal(hs->queue_max_us, 0);
	const fos_op_stats *ss = find_op_stats(s1, "stats");
	assert_int_equal(ss->lat_count, 1); /* s0's; this one is recorded after its reply was built */
	assert_int_equal(ss->queue_count, 0);
	assert_int_equal(ss->run_count, 0);

	/* the message pool: the put_weight and the forwards (1 MiB + header each) came from it, the
	 * later ones reusing the first's buffer (each freed before its reply was sent) */
	assert_true(s1->msg_pool_active);
	assert_true(s1->msg_pool_taken >= s0->msg_pool_taken + 2);
	assert_true(s1->msg_pool_reused >= s0->msg_pool_reused + 1);
	assert_int_equal(s1->msg_pool_taken, s1->msg_pool_reused + s1->msg_pool_mapped_new);
	assert_true(s1->msg_pool_bytes_free + s1->msg_pool_bytes_used >= ((uint64_t)1 << 20));
	assert_true(s1->msg_pool_bytes_pinned <= s1->msg_pool_bytes_free + s1->msg_pool_bytes_used);
	free(s0), free(s1), free(w), free(x);
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

/* fosd on ipc and tcp at once (an ephemeral loopback port, read from its log) */
static void test_tcp_listener(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--allow-insecure-tcp", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	/* tsrv_start's own --listen (ipc) came first; the extra --listen adds tcp */
	FILE *f = fopen(s.log, "r");
	assert_non_null(f);
	char line[1024];
	int port = 0;
	while (fgets(line, sizeof line, f)) {
		char *p = strstr(line, "listening on tcp://127.0.0.1:0 (port ");
		if (p)
			port = atoi(p + strlen("listening on tcp://127.0.0.1:0 (port "));
	}
	fclose(f);
	assert_true(port > 0);
	char url[64];
	snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
	fos_client *c = NULL;
	fos_status st;
	ASSERT_OK(fos_connect(url, NULL, 10000, &c, &st), st);
	check_linear(c, 128, 128, 128, FOS_OVERRIDE_DEFAULT, 0, FOS_BLOCKS_DEFAULT, 1, 91);
	fos_close(c);
	c = connect_or_fail(&s); /* and ipc */
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--child"))
		return child_main(argc, argv);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health),
		cmocka_unit_test(test_linear_bitwise),
		cmocka_unit_test(test_forward_backward_bitwise),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_processes),
		cmocka_unit_test(test_quantize_bitwise),
		cmocka_unit_test(test_spin),
		cmocka_unit_test(test_context_keeps_version),
		cmocka_unit_test(test_stats_and_release),
		cmocka_unit_test(test_stats_queue_run_pool),
		cmocka_unit_test(test_expired_context_recompute),
		cmocka_unit_test(test_cache_eviction),
		cmocka_unit_test(test_tcp_listener),
	};
	return cmocka_run_group_tests(tests, setup_server, teardown_server);
}
