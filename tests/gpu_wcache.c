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
#include "support_wcache.h"
#include "wcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_bytes_per_use(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 512, k = 1024;
	uint16_t *w = malloc((size_t)(n * k) * 2);
	assert_non_null(w);
	ref_gen_bf16(REF_RANDN, n, k, 5, w);
	void *wd = twc_put(g_gpu, w, (size_t)(n * k) * 2);
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

static void test_decode_exact(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 256, k = 512;
	size_t nb = (size_t)(n * k) * 2;
	uint16_t *w = malloc(nb);
	assert_non_null(w);
	for (int cs = 0; cs < 6; cs++) {
		fos_linear_opts o;
		twc_decode_case(cs, n, k, w, &o);
		uint16_t *rd, *cd;
		fos_qtensor qrow;
		twc_old_operands(g_gpu, w, n, k, &o, &rd, &cd, &qrow);
		uint16_t *hrd = twc_get(g_gpu, rd, nb), *hcd = twc_get(g_gpu, cd, nb);
		void *wd = twc_put(g_gpu, w, nb), *wc = twc_put(g_cpu, w, nb);
		fos_qweight qw, qc;
		fos_err e;
		assert_int_equal(fos_qweight_make_uses(g_gpu, wd, n, k, &o, FOS_USES_ALL, &qw, &e), FOS_OK);
		assert_int_equal(fos_qweight_make_uses(g_cpu, wc, n, k, &o, FOS_USES_ALL, &qc, &e), FOS_OK);
		uint16_t *d = g_gpu->alloc(g_gpu, nb), *dc = g_cpu->alloc(g_cpu, nb);
		for (int col = 0; col < 2; col++) {
			assert_int_equal(fos_qweight_decode(g_gpu, &qw, col, d, &e), FOS_OK);
			assert_int_equal(fos_qweight_decode(g_cpu, &qc, col, dc, &e), FOS_OK);
			uint16_t *h = twc_get(g_gpu, d, nb);
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
	free(w);
}

static void test_forward_old_path(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t n = 512, k = 1024, ms[4] = {1, 17, 128, 1000};
	static const int use_sets[4] = {FOS_USE_FORWARD, FOS_USE_FORWARD | FOS_USE_QUANTIZED,
					FOS_USE_FORWARD | FOS_USE_HIGH_PRECISION, FOS_USES_ALL};
	fos_wscratch ws = {0, 0};
	twc_check_forward_old_path(g_gpu, n, k, ms, 4, use_sets, 4, 3, &ws);
	assert_int_equal(ws.cap, (size_t)(n * k) * 2);
	fos_wscratch_free(g_gpu, &ws);
}

static void test_overrides_by_use(void **state)
{
	(void)state;
	NEED_GPU();
	const int64_t ms[2] = {100, 256};
	twc_check_overrides_at(g_gpu, 512, 1024, ms);
}

/* A cache entry of a (n, k) weight made for the forward use on the GPU. */
static fosd_weight *gpu_entry(const char *name, const uint16_t *w, int64_t n, int64_t k, int uses)
{
	fosd_weight *e = calloc(1, sizeof *e);
	assert_non_null(e);
	snprintf(e->name, sizeof e->name, "%s", name);
	e->version = 1;
	void *wd = twc_put(g_gpu, w, (size_t)(n * k) * 2);
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
	uint16_t *h1 = twc_get(g_gpu, d, copy), *h2 = twc_get(g_gpu, ca, copy);
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
	void *xd = twc_put(g_gpu, x, (size_t)(m * k) * 2);
	uint16_t *y1 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2), *y2 = g_gpu->alloc(g_gpu, (size_t)(m * n) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	const uint16_t *cb2 = fosd_wcache_tier_get(&wc, b, g_gpu);
	assert_non_null(cb2);
	fos_wops wo = {NULL, cb2, NULL};
	assert_int_equal(fos_linear_forward_w(g_gpu, xd, m, &b->qw, &wo, &o, NULL, y1, NULL, &e), FOS_OK);
	assert_int_equal(fos_linear_forward(g_gpu, xd, m, &b->qw, &o, NULL, y2, NULL, &e), FOS_OK);
	h1 = twc_get(g_gpu, y1, (size_t)(m * n) * 2);
	h2 = twc_get(g_gpu, y2, (size_t)(m * n) * 2);
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
