/* gpu_wcache.c: what a cached weight keeps for its declared uses (issue 17) on the CUDA backend,
 * the GPU side of test_wcache_uses:
 *  - the bytes of every use set, and which parts exist;
 *  - be->decode of the kept rowwise and columnwise codes is bit for bit the `decoded` output of
 *    the quantize that made them (the operand the old cache kept), and the CPU backend's decode;
 *  - the forward of every use set, with a buffer per call, a reused scratch (also replayed from a
 *    CUDA graph) or a caller's decoded copy, equals the old path (quantize W and X with their
 *    decoded outputs, then the GEMM) bit for bit, at M = 1, 17, 128, 1000;
 *  - every override's forward and backward on a weight made for just that use equals the same on
 *    a weight made for every use (Y, dX, dW, db), and without the use is refused naming it;
 *  - the weight cache's decoded tier on CUDA: a copy is the decode's bits, a second weight's copy
 *    drops the first when the tier has room for one, a put needing the room drops the copy before
 *    any weight is evicted, and a copy in use is never dropped.
 * Skips cleanly (exit 0) when there is no usable GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support_gpu.h"
#include "backend.h"
#include "support_ref.h"
#include "wcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dput(fos_backend *be, const void *h, size_t n)
{
	void *d = ref_dev_put(be, h, n);
	assert_non_null(d);
	return d;
}

static void *dget(fos_backend *be, const void *d, size_t n)
{
	void *h = malloc(n);
	assert_non_null(h);
	assert_int_equal(ref_dev_get(be, h, d, n), FOS_OK);
	return h;
}

static const int one_use[3] = {FOS_USE_QUANTIZED, FOS_USE_HIGH_PRECISION, FOS_USE_DEQUANTIZED};
static const int overrides[3] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
static const char *const use_names[3] = {"quantized", "high_precision", "dequantized"};

static void test_bytes_per_use(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 512, k = 1024;
	uint16_t *w = malloc((size_t)(n * k) * 2);
	assert_non_null(w);
	ref_gen_bf16(REF_RANDN, n, k, 5, w);
	void *wd = dput(g_gpu, w, (size_t)(n * k) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	for (int uses = 1; uses <= FOS_USES_ALL; uses++) {
		size_t codes = (size_t)(n * k / 2 + n * k / 16 + 4);
		size_t col = (uses & FOS_USE_QUANTIZED) ? codes : 0;
		size_t master = (uses & FOS_USE_HIGH_PRECISION) ? (size_t)(2 * n * k) : 0;
		fos_qweight qw;
		fos_err e;
		assert_int_equal(fos_qweight_make_uses(g_gpu, wd, n, k, &o, uses, &qw, &e), FOS_OK);
		assert_int_equal(fos_qweight_bytes(&qw), codes + col + master);
		assert_int_equal(qw.qcol.codes != NULL, col != 0);
		assert_int_equal(qw.master != NULL, master != 0);
		fos_qweight_free(g_gpu, &qw);
	}
	g_gpu->free(g_gpu, wd);
	free(w);
}

/* The old cache's operands of w on be: rowwise decoded, columnwise decoded, and the rowwise q. */
static void old_operands(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
			 uint16_t **rowdec, uint16_t **coldec, fos_qtensor *qrow)
{
	fos_err e;
	fos_qcfg c = {FOS_RECIPE_4OVER6, o->weight_block, o->err_mode, o->bound, 0};
	uint16_t *wt = malloc((size_t)(n * k) * 2);
	assert_non_null(wt);
	ref_transpose_u16(w, wt, n, k);
	void *wd = dput(be, w, (size_t)(n * k) * 2), *wtd = dput(be, wt, (size_t)(n * k) * 2);
	fos_qtensor qcol;
	assert_int_equal(fos_qtensor_alloc(be, qrow, n, k, 0, &e), FOS_OK);
	assert_int_equal(fos_qtensor_alloc(be, &qcol, k, n, 0, &e), FOS_OK);
	*rowdec = be->alloc(be, (size_t)(n * k) * 2);
	*coldec = be->alloc(be, (size_t)(n * k) * 2);
	assert_true(*rowdec && *coldec);
	assert_int_equal(be->quantize(be, wd, FOS_BF16, n, k, &c, NULL, qrow, *rowdec, &e), FOS_OK);
	assert_int_equal(be->quantize(be, wtd, FOS_BF16, k, n, &c, qrow->amax, &qcol, *coldec, &e), FOS_OK);
	assert_int_equal(be->sync(be, &e), FOS_OK);
	fos_qtensor_free(be, &qcol);
	be->free(be, wd);
	be->free(be, wtd);
	free(wt);
}

static void test_decode_exact(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 256, k = 512;
	size_t nb = (size_t)(n * k) * 2;
	uint16_t *w = malloc(nb);
	assert_non_null(w);
	for (int kind = 0; kind < 3; kind++) {
		ref_gen_bf16(kind == 0 ? REF_RANDN : kind == 1 ? REF_HEAVY : REF_NEGZERO, n, k, 11 + (uint64_t)kind, w);
		for (int wb = 0; wb < 2; wb++) {
			fos_linear_opts o = fos_linear_opts_default();
			o.weight_block = wb ? FOS_BLOCK_1X16 : FOS_BLOCK_16X16;
			o.err_mode = kind == 2 ? FOS_ERR_MSE : FOS_ERR_MAE;
			o.bound = kind == 1 ? 448 : 256;
			uint16_t *rd, *cd;
			fos_qtensor qrow;
			old_operands(g_gpu, w, n, k, &o, &rd, &cd, &qrow);
			uint16_t *hrd = dget(g_gpu, rd, nb), *hcd = dget(g_gpu, cd, nb);
			void *wd = dput(g_gpu, w, nb), *wc = dput(g_cpu, w, nb);
			fos_qweight qw, qc;
			fos_err e;
			assert_int_equal(fos_qweight_make_uses(g_gpu, wd, n, k, &o, FOS_USES_ALL, &qw, &e), FOS_OK);
			assert_int_equal(fos_qweight_make_uses(g_cpu, wc, n, k, &o, FOS_USES_ALL, &qc, &e), FOS_OK);
			uint16_t *d = g_gpu->alloc(g_gpu, nb), *dc = g_cpu->alloc(g_cpu, nb);
			for (int col = 0; col < 2; col++) {
				assert_int_equal(fos_qweight_decode(g_gpu, &qw, col, d, &e), FOS_OK);
				assert_int_equal(fos_qweight_decode(g_cpu, &qc, col, dc, &e), FOS_OK);
				uint16_t *h = dget(g_gpu, d, nb);
				assert_memory_equal(h, col ? hcd : hrd, nb);
				assert_memory_equal(h, dc, nb); /* the CPU's decode of the CPU's codes */
				free(h);
			}
			fos_qweight_free(g_gpu, &qw);
			fos_qweight_free(g_cpu, &qc);
			g_gpu->free(g_gpu, d);
			g_cpu->free(g_cpu, dc);
			g_gpu->free(g_gpu, rd);
			g_gpu->free(g_gpu, cd);
			g_gpu->free(g_gpu, wd);
			g_cpu->free(g_cpu, wc);
			fos_qtensor_free(g_gpu, &qrow);
			free(hrd), free(hcd);
		}
	}
	free(w);
}

/* y of the old path on CUDA: X quantized with its decoded output, the GEMM against rowdec. */
static uint16_t *old_forward(const void *xd, int64_t m, int64_t n, int64_t k, const fos_linear_opts *o,
			     const fos_qtensor *qrow, const uint16_t *rowdec, const uint16_t *bias)
{
	fos_err e;
	fos_qcfg c = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, o->err_mode, o->bound, o->row_scaled};
	fos_qtensor xq;
	assert_int_equal(fos_qtensor_alloc(g_gpu, &xq, m, k, o->row_scaled, &e), FOS_OK);
	uint16_t *xdec = g_gpu->alloc(g_gpu, (size_t)(m * k) * 2), *y = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
	assert_int_equal(g_gpu->quantize(g_gpu, xd, FOS_BF16, m, k, &c, NULL, &xq, xdec, &e), FOS_OK);
	float dinv = 1.0f / (6.0f * (float)o->bound);
	fos_gemm_epi epi = {xq.amax, dinv, qrow->amax, dinv, 0, bias};
	if (o->row_scaled) {
		epi.a_amax = 0;
		epi.row_scale = xq.amax;
	}
	assert_int_equal(g_gpu->gemm(g_gpu, xdec, rowdec, m, n, k, &epi, y, &e), FOS_OK);
	uint16_t *h = dget(g_gpu, y, (size_t)(m * n) * 2);
	fos_qtensor_free(g_gpu, &xq);
	g_gpu->free(g_gpu, xdec);
	g_gpu->free(g_gpu, y);
	return h;
}

static void test_forward_old_path(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 512, k = 1024, ms[4] = {1, 17, 128, 1000};
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(1000 * k) * 2), *b = malloc((size_t)n * 2);
	assert_true(w && x && b);
	ref_gen_bf16(REF_RANDN, n, k, 21, w);
	ref_gen_bf16(REF_RANDN, 1000, k, 22, x);
	ref_gen_bf16(REF_RANDN, 1, n, 23, b);
	void *wd = dput(g_gpu, w, (size_t)(n * k) * 2), *bd = dput(g_gpu, b, (size_t)n * 2);
	fos_wscratch ws = {0, 0};
	static const int use_sets[4] = {FOS_USE_FORWARD, FOS_USE_FORWARD | FOS_USE_QUANTIZED,
					FOS_USE_FORWARD | FOS_USE_HIGH_PRECISION, FOS_USES_ALL};
	for (int rs = 0; rs < 2; rs++) {
		fos_linear_opts o = fos_linear_opts_default();
		o.row_scaled = rs;
		uint16_t *rd, *cd;
		fos_qtensor qrow;
		old_operands(g_gpu, w, n, k, &o, &rd, &cd, &qrow);
		for (int mi = 0; mi < 4; mi++) {
			int64_t m = ms[mi];
			void *xd = dput(g_gpu, x, (size_t)(m * k) * 2);
			uint16_t *yo = old_forward(xd, m, n, k, &o, &qrow, rd, bd);
			uint16_t *yd = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
			for (int ui = 0; ui < 4; ui++) {
				fos_qweight qw;
				fos_err e;
				assert_int_equal(fos_qweight_make_uses(g_gpu, wd, n, k, &o, use_sets[ui], &qw, &e), FOS_OK);
				for (int how = 0; how < 3; how++) /* a buffer per call, the scratch, a decoded copy */
					for (int rep = 0; rep < 3; rep++) { /* the small forwards: recorded, then replayed */
						fos_wops wo = {how == 1 ? &ws : NULL, how == 2 ? rd : NULL, NULL};
						assert_int_equal(g_gpu->zero(g_gpu, yd, (size_t)(m * n) * 2, &e), FOS_OK);
						assert_int_equal(
							fos_linear_forward_w(g_gpu, xd, m, &qw, how ? &wo : NULL, &o, bd, yd, NULL, &e),
							FOS_OK);
						uint16_t *y = dget(g_gpu, yd, (size_t)(m * n) * 2);
						if (memcmp(y, yo, (size_t)(m * n) * 2))
							fail_msg("M=%lld row_scaled=%d uses=%d way %d run %d: Y differs from the old path",
								 (long long)m, rs, use_sets[ui], how, rep);
						free(y);
					}
				fos_qweight_free(g_gpu, &qw);
			}
			g_gpu->free(g_gpu, yd);
			g_gpu->free(g_gpu, xd);
			free(yo);
		}
		g_gpu->free(g_gpu, rd);
		g_gpu->free(g_gpu, cd);
		fos_qtensor_free(g_gpu, &qrow);
	}
	assert_int_equal(ws.cap, (size_t)(n * k) * 2);
	fos_wscratch_free(g_gpu, &ws);
	g_gpu->free(g_gpu, wd);
	g_gpu->free(g_gpu, bd);
	free(w), free(x), free(b);
}

typedef struct lres {
	uint16_t *y, *dx, *dw, *db;
} lres;

static int run_layer(const uint16_t *w, const uint16_t *x, const uint16_t *dy, const uint16_t *b, int64_t m,
		     int64_t n, int64_t k, int ovr, int rs, int uses, int with_ws, lres *r, fos_err *e)
{
	fos_backend *be = g_gpu;
	fos_linear_opts o = fos_linear_opts_default();
	o.override = ovr;
	o.row_scaled = rs;
	void *wd = dput(be, w, (size_t)(n * k) * 2), *xd = dput(be, x, (size_t)(m * k) * 2);
	void *dyd = dput(be, dy, (size_t)(m * n) * 2), *bd = dput(be, b, (size_t)n * 2);
	uint16_t *yd = be->alloc(be, (size_t)(m * n) * 2), *dxd = be->alloc(be, (size_t)(m * k) * 2);
	uint16_t *dwd = be->alloc(be, (size_t)(n * k) * 2), *dbd = be->alloc(be, (size_t)n * 2);
	fos_wscratch ws = {0, 0};
	fos_wops wo = {&ws, NULL, NULL};
	fos_qweight qw;
	fos_saved sv;
	memset(&sv, 0, sizeof sv);
	int rc = fos_qweight_make_uses(be, wd, n, k, &o, uses, &qw, e);
	if (!rc) {
		rc = fos_linear_forward_w(be, xd, m, &qw, with_ws ? &wo : NULL, &o, bd, yd, &sv, e);
		if (!rc)
			rc = fos_linear_backward_w(be, &sv, &qw, with_ws ? &wo : NULL, dyd, dxd, dwd, dbd, e);
		if (!rc) {
			r->y = dget(be, yd, (size_t)(m * n) * 2);
			r->dx = dget(be, dxd, (size_t)(m * k) * 2);
			r->dw = dget(be, dwd, (size_t)(n * k) * 2);
			r->db = dget(be, dbd, (size_t)n * 2);
		}
		fos_saved_free(be, &sv);
		fos_qweight_free(be, &qw);
	}
	fos_wscratch_free(be, &ws);
	void *bufs[] = {wd, xd, dyd, bd, yd, dxd, dwd, dbd};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->free(be, bufs[i]);
	return rc;
}

static void lres_free(lres *r)
{
	free(r->y), free(r->dx), free(r->dw), free(r->db);
	memset(r, 0, sizeof *r);
}

static void test_overrides_by_use(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 512, k = 1024, ms[2] = {100, 256};
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(256 * k) * 2), *dy = malloc((size_t)(256 * n) * 2);
	uint16_t *b = malloc((size_t)n * 2);
	assert_true(w && x && dy && b);
	ref_gen_bf16(REF_RANDN, n, k, 31, w);
	ref_gen_bf16(REF_RANDN, 256, k, 32, x);
	ref_gen_bf16(REF_RANDN, 256, n, 33, dy);
	ref_gen_bf16(REF_RANDN, 1, n, 34, b);
	for (int mi = 0; mi < 2; mi++)
		for (int i = 0; i < 3; i++) {
			int64_t m = ms[mi];
			int rs = overrides[i] == FOS_OVR_HIGH_PRECISION && mi == 1;
			lres full = {0}, just = {0}, ws = {0}, none = {0};
			fos_err e;
			assert_int_equal(run_layer(w, x, dy, b, m, n, k, overrides[i], rs, FOS_USES_ALL, 0, &full, &e), FOS_OK);
			assert_int_equal(run_layer(w, x, dy, b, m, n, k, overrides[i], rs, one_use[i], 0, &just, &e), FOS_OK);
			assert_int_equal(run_layer(w, x, dy, b, m, n, k, overrides[i], rs, one_use[i], 1, &ws, &e), FOS_OK);
			lres *rr[2] = {&just, &ws};
			for (int j = 0; j < 2; j++) {
				assert_memory_equal(rr[j]->y, full.y, (size_t)(m * n) * 2);
				assert_memory_equal(rr[j]->dx, full.dx, (size_t)(m * k) * 2);
				assert_memory_equal(rr[j]->dw, full.dw, (size_t)(n * k) * 2);
				assert_memory_equal(rr[j]->db, full.db, (size_t)n * 2);
			}
			int rc = run_layer(w, x, dy, b, m, n, k, overrides[i], rs, FOS_USES_ALL & ~one_use[i], 0, &none, &e);
			assert_int_equal(rc, FOS_EINVAL);
			char want[64];
			snprintf(want, sizeof want, "use '%s'", use_names[i]);
			if (!strstr(e.msg, want))
				fail_msg("'%s' does not name %s", e.msg, want);
			lres_free(&full), lres_free(&just), lres_free(&ws);
		}
	free(w), free(x), free(dy), free(b);
}

/* A cache entry of a (n, k) weight made for the forward use on the GPU. */
static fosd_weight *gpu_entry(const char *name, const uint16_t *w, int64_t n, int64_t k, int uses)
{
	fosd_weight *e = calloc(1, sizeof *e);
	assert_non_null(e);
	snprintf(e->name, sizeof e->name, "%s", name);
	e->version = 1;
	void *wd = dput(g_gpu, w, (size_t)(n * k) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	fos_err er;
	assert_int_equal(fos_qweight_make_uses(g_gpu, wd, n, k, &o, uses, &e->qw, &er), FOS_OK);
	g_gpu->free(g_gpu, wd);
	return e;
}

static void test_decoded_tier(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 1024, k = 2048;
	const uint64_t copy = (uint64_t)(n * k) * 2, fwd = fos_qweight_bytes_for(n, k, FOS_USE_FORWARD, NULL);
	uint16_t *w1 = malloc(copy), *w2 = malloc(copy);
	assert_true(w1 && w2);
	ref_gen_bf16(REF_RANDN, n, k, 41, w1);
	ref_gen_bf16(REF_HEAVY, n, k, 42, w2);
	/* the tier (budget / 8) holds one copy, not two */
	uint64_t budget = copy * 12;
	fosd_wcache wc;
	assert_int_equal(fosd_wcache_init(&wc, g_gpu, budget), 0);
	fosd_weight *a = gpu_entry("a", w1, n, k, FOS_USE_FORWARD), *b = gpu_entry("b", w2, n, k, FOS_USE_FORWARD);
	fosd_wcache_insert(&wc, a);
	fosd_wcache_insert(&wc, b);
	fosd_weight *got;
	char msg[256];
	assert_int_equal(fosd_wcache_acquire(&wc, "a", 0, &got, msg, sizeof msg), 0);
	const uint16_t *ca = fosd_wcache_tier_get(&wc, a, g_gpu);
	assert_non_null(ca);
	/* the copy is the decode's bits */
	fos_err e;
	uint16_t *d = g_gpu->alloc(g_gpu, copy);
	assert_int_equal(fos_qweight_decode(g_gpu, &a->qw, 0, d, &e), FOS_OK);
	uint16_t *h1 = dget(g_gpu, d, copy), *h2 = dget(g_gpu, ca, copy);
	assert_memory_equal(h1, h2, copy);
	free(h1), free(h2);
	/* while a's copy is read, b gets none (no room without dropping a copy in use) */
	assert_int_equal(fosd_wcache_acquire(&wc, "b", 0, &got, msg, sizeof msg), 0);
	assert_null(fosd_wcache_tier_get(&wc, b, g_gpu));
	fosd_wcache_tier_release(&wc, a);
	/* now a's copy goes for b's */
	const uint16_t *cb = fosd_wcache_tier_get(&wc, b, g_gpu);
	assert_non_null(cb);
	fosd_wcache_stats st;
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.tier_entries, 1);
	assert_int_equal(st.tier_bytes, copy);
	assert_int_equal(st.tier_drops, 1);
	assert_int_equal(st.bytes, 2 * fwd);
	fosd_wcache_tier_release(&wc, b);
	fosd_wcache_release(&wc, a);
	fosd_wcache_release(&wc, b);
	/* a put needing the tier's room: the copy goes, no entry is evicted */
	uint64_t need = budget - 2 * fwd - copy + copy / 2;
	assert_int_equal(fosd_wcache_reserve(&wc, need, NULL, msg, sizeof msg), 0);
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.tier_entries, 0);
	assert_int_equal(st.tier_bytes, 0);
	assert_int_equal(st.tier_drops, 2);
	assert_int_equal(st.evictions, 0);
	assert_int_equal(st.entries, 2);
	/* the forward on the copy equals the forward decoding on demand */
	const int64_t m = 64;
	uint16_t *x = malloc((size_t)(m * k) * 2);
	assert_non_null(x);
	ref_gen_bf16(REF_RANDN, m, k, 43, x);
	void *xd = dput(g_gpu, x, (size_t)(m * k) * 2);
	uint16_t *y1 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2), *y2 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	const uint16_t *cb2 = fosd_wcache_tier_get(&wc, b, g_gpu);
	assert_non_null(cb2);
	fos_wops wo = {NULL, cb2, NULL};
	assert_int_equal(fos_linear_forward_w(g_gpu, xd, m, &b->qw, &wo, &o, NULL, y1, NULL, &e), FOS_OK);
	assert_int_equal(fos_linear_forward(g_gpu, xd, m, &b->qw, &o, NULL, y2, NULL, &e), FOS_OK);
	h1 = dget(g_gpu, y1, (size_t)(m * n) * 2);
	h2 = dget(g_gpu, y2, (size_t)(m * n) * 2);
	assert_memory_equal(h1, h2, (size_t)(m * n) * 2);
	free(h1), free(h2);
	fosd_wcache_tier_release(&wc, b);
	assert_int_equal(fosd_wcache_tier_drop_all(&wc), copy);
	g_gpu->free(g_gpu, d);
	g_gpu->free(g_gpu, xd);
	g_gpu->free(g_gpu, y1);
	g_gpu->free(g_gpu, y2);
	fosd_wcache_destroy(&wc);
	free(w1), free(w2), free(x);
}

static int setup(void **state)
{
	(void)state;
	return tgpu_open("gpu_wcache");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes_per_use),
		cmocka_unit_test(test_decode_exact),
		cmocka_unit_test(test_forward_old_path),
		cmocka_unit_test(test_overrides_by_use),
		cmocka_unit_test(test_decoded_tier),
	};
	return cmocka_run_group_tests(tests, setup, tgpu_close);
}
