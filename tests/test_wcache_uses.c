/* test_wcache_uses.c: what a cached weight keeps for its declared uses (issue 17), on the CPU
 * backend and on a real fosd.
 *
 * Layer level: the bytes of every use set, counted independently from the formats (rowwise codes
 * n k / 2 + scales n k / 16 + one amax; the same columnwise with quantized; 2 n k master with
 * high_precision); be->decode of the kept codes is bit for bit the `decoded` output of the
 * quantize that made them (the operand the old cache kept); the forward of every use set, with no
 * scratch, a reused scratch or a caller's decoded copy, equals the old path (quantize W and X with
 * their decoded outputs, then the GEMM) bit for bit; every override's forward and backward on a
 * weight made for just that use equals the same on a weight made for every use, and on a weight
 * made without it is refused naming the use.
 *
 * fosd: PutWeight's uses, the bytes by part in ListWeights, FAILED_PRECONDITION naming the missing
 * use for each override and for a plain forward, bad uses, results against the reference, the
 * decoded tier (one copy per small forward's weight, bounded, its copies dropped least recently
 * used first and before any weight is evicted, in no tenant's quota), and quota and budget
 * arithmetic in the new sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fos.h"
#include "support_assert.h"
#include "support_ref.h"
#include "support_server.h"
#include "support_stats.h"
#include "support_trust.h"
#include "support_wcache.h"

static fos_backend *g_be;

/* n bf16 values at a and b have the same bits */
#define ASSERT_SAME(a, b, n, what)                                                                              \
	do {                                                                                                     \
		if (memcmp((a), (b), (size_t)(n) * 2))                                                           \
			fail_msg("%s differs from the reference", (what));                                      \
	} while (0)

static int setup(void **state)
{
	(void)state;
	fos_err e;
	g_be = fos_backend_cpu(2, &e);
	return g_be ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	g_be->destroy(g_be);
	return 0;
}

static void *dput(const void *h, size_t n)
{
	return twc_put(g_be, h, n);
}

/* ---- layer level ----------------------------------------------------------------------------- */

static void test_bytes_per_use(void **state)
{
	(void)state;
	const int64_t n = 48, k = 144;
	uint16_t *w = malloc((size_t)(n * k) * 2);
	assert_non_null(w);
	ref_gen_bf16(REF_RANDN, n, k, 5, w);
	void *wd = dput(w, (size_t)(n * k) * 2);
	fos_linear_opts o = fos_linear_opts_default();
	for (int uses = 1; uses <= FOS_USES_ALL; uses++) {
		size_t codes = (size_t)(n * k / 2 + n * k / 16 + 4);
		size_t col = (uses & FOS_USE_QUANTIZED) ? codes : 0, master = (uses & FOS_USE_HIGH_PRECISION) ? (size_t)(2 * n * k) : 0;
		fos_qweight_parts p;
		assert_int_equal(fos_qweight_bytes_for(n, k, uses, &p), codes + col + master);
		assert_int_equal(p.codes, codes);
		assert_int_equal(p.columnwise, col);
		assert_int_equal(p.master, master);
		fos_qweight qw;
		fos_err e;
		assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, uses, &qw, &e), FOS_OK);
		assert_int_equal(qw.uses, uses);
		assert_int_equal(fos_qweight_bytes(&qw), codes + col + master);
		assert_true(qw.q.codes && qw.q.scales && qw.q.amax);
		assert_int_equal(qw.qcol.codes != NULL, col != 0);
		assert_int_equal(qw.master != NULL, master != 0);
		fos_qweight_free(g_be, &qw);
	}
	/* the per-element targets of the issue, for a 4096 x 14336 weight */
	const double nk = 4096.0 * 14336.0;
	assert_true(fos_qweight_bytes_for(4096, 14336, FOS_USE_FORWARD, NULL) == (size_t)(nk * 0.5625) + 4);
	assert_true(fos_qweight_bytes_for(4096, 14336, FOS_USE_FORWARD | FOS_USE_QUANTIZED, NULL) ==
		    (size_t)(nk * 1.125) + 8);
	assert_true(fos_qweight_bytes_for(4096, 14336, FOS_USE_FORWARD | FOS_USE_HIGH_PRECISION, NULL) ==
		    (size_t)(nk * 2.5625) + 4);
	/* no use, or an unknown bit: refused */
	fos_qweight qw;
	fos_err e;
	assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, 0, &qw, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "uses"));
	assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, 16, &qw, &e), FOS_EINVAL);
	char buf[80];
	assert_string_equal(fos_uses_str(FOS_USES_ALL, buf, sizeof buf), "forward,quantized,high_precision,dequantized");
	assert_string_equal(fos_uses_str(FOS_USE_DEQUANTIZED | FOS_USE_FORWARD, buf, sizeof buf), "forward,dequantized");
	g_be->free(g_be, wd);
	free(w);
}

static void test_decode_exact(void **state)
{
	(void)state;
	const int64_t n = 64, k = 128;
	uint16_t *w = malloc((size_t)(n * k) * 2);
	assert_non_null(w);
	for (int cs = 0; cs < 6; cs++) {
		fos_linear_opts o;
		twc_decode_case(cs, n, k, w, &o);
		uint16_t *rd, *cd;
		fos_qtensor qrow;
		twc_old_operands(g_be, w, n, k, &o, &rd, &cd, &qrow);
		void *wd = dput(w, (size_t)(n * k) * 2);
		fos_qweight qw;
		fos_err e;
		assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, FOS_USES_ALL, &qw, &e), FOS_OK);
		uint16_t *d = g_be->alloc(g_be, (size_t)(n * k) * 2);
		assert_int_equal(fos_qweight_decode(g_be, &qw, 0, d, &e), FOS_OK);
		assert_memory_equal(d, rd, (size_t)(n * k) * 2);
		assert_int_equal(fos_qweight_decode(g_be, &qw, 1, d, &e), FOS_OK);
		assert_memory_equal(d, cd, (size_t)(n * k) * 2);
		fos_qweight_free(g_be, &qw);
		/* without the quantized use there are no columnwise codes to decode */
		assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, FOS_USE_FORWARD, &qw, &e), FOS_OK);
		assert_int_equal(fos_qweight_decode(g_be, &qw, 1, d, &e), FOS_EINVAL);
		assert_int_equal(fos_qweight_decode(g_be, &qw, 0, d, &e), FOS_OK);
		assert_memory_equal(d, rd, (size_t)(n * k) * 2);
		fos_qweight_free(g_be, &qw);
		g_be->free(g_be, d);
		g_be->free(g_be, rd);
		g_be->free(g_be, cd);
		g_be->free(g_be, wd);
		fos_qtensor_free(g_be, &qrow);
	}
	free(w);
}

static void test_forward_old_path(void **state)
{
	(void)state;
	const int64_t n = 48, k = 160, ms[3] = {1, 17, 128};
	int use_sets[FOS_USES_ALL];
	for (int u = 1; u <= FOS_USES_ALL; u++) /* every use set */
		use_sets[u - 1] = u;
	fos_wscratch ws = {0, 0};
	twc_check_forward_old_path(g_be, n, k, ms, 3, use_sets, FOS_USES_ALL, 1, &ws);
	/* the scratch was sized once for the weight's operand and reused */
	assert_int_equal(ws.cap, (size_t)(n * k) * 2);
	void *p = ws.p;
	fos_err e;
	assert_ptr_equal(fos_wscratch_get(g_be, &ws, 16, &e), p);
	assert_non_null(fos_wscratch_get(g_be, &ws, (size_t)(n * k) * 4, &e));
	assert_int_equal(ws.cap, (size_t)(n * k) * 4);
	fos_wscratch_free(g_be, &ws);
	assert_null(ws.p);
}

static void test_overrides_by_use(void **state)
{
	(void)state;
	const int64_t n = 48, k = 144, ms[2] = {17, 128};
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(128 * k) * 2), *dy = malloc((size_t)(128 * n) * 2);
	uint16_t *b = malloc((size_t)n * 2);
	assert_true(w && x && dy && b);
	ref_gen_bf16(REF_RANDN, n, k, 31, w);
	ref_gen_bf16(REF_RANDN, 128, k, 32, x);
	ref_gen_bf16(REF_RANDN, 128, n, 33, dy);
	ref_gen_bf16(REF_RANDN, 1, n, 34, b);
	for (int mi = 0; mi < 2; mi++) /* at 128 rows, the high_precision override with row-scaled X */
		twc_check_overrides(g_be, w, x, dy, b, ms[mi], n, k, mi == 1);
	/* a backward on a weight without the context's use (the forward saved on a full weight) */
	fos_linear_opts o = fos_linear_opts_default();
	o.override = FOS_OVR_QUANTIZED;
	void *wd = dput(w, (size_t)(n * k) * 2), *xd = dput(x, (size_t)(16 * k) * 2), *dyd = dput(dy, (size_t)(16 * n) * 2);
	uint16_t *yd = g_be->alloc(g_be, (size_t)(16 * n) * 2), *dxd = g_be->alloc(g_be, (size_t)(16 * k) * 2);
	uint16_t *dwd = g_be->alloc(g_be, (size_t)(n * k) * 2);
	fos_qweight all, fwd;
	fos_saved sv;
	fos_err e;
	assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, FOS_USES_ALL, &all, &e), FOS_OK);
	assert_int_equal(fos_qweight_make_uses(g_be, wd, n, k, &o, FOS_USE_FORWARD | FOS_USE_DEQUANTIZED, &fwd, &e),
			 FOS_OK);
	assert_int_equal(fos_linear_forward(g_be, xd, 16, &all, &o, NULL, yd, &sv, &e), FOS_OK);
	assert_int_equal(fos_linear_backward(g_be, &sv, &fwd, dyd, dxd, dwd, NULL, &e), FOS_EINVAL);
	assert_non_null(strstr(e.msg, "use 'quantized'"));
	assert_int_equal(fos_linear_backward(g_be, &sv, &all, dyd, dxd, dwd, NULL, &e), FOS_OK);
	fos_saved_free(g_be, &sv);
	fos_qweight_free(g_be, &all);
	fos_qweight_free(g_be, &fwd);
	void *bufs[] = {wd, xd, dyd, yd, dxd, dwd};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		g_be->free(g_be, bufs[i]);
	free(w), free(x), free(dy), free(b);
}

/* ---- fosd ------------------------------------------------------------------------------------ */

enum { SN = 64, SK = 128, SM = 32 };

static int put_uses(fos_client *c, const char *name, const uint16_t *w, int64_t n, int64_t k, int uses,
		    fos_weight_info *info, fos_status *st)
{
	fos_weight_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.uses = uses;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, n, k, w);
	return fos_put_weight(c, name, 1, &tw, &cfg, info, st);
}

static const fos_weight_info *listed(const fos_weight_info *l, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			return &l[i];
	return NULL;
}

static void test_fosd_uses(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	uint16_t *w = malloc(SN * SK * 2), *x = malloc(SM * SK * 2), *dy = malloc(SM * SN * 2);
	uint16_t *ry = malloc(SM * SN * 2), *rdx = malloc(SM * SK * 2), *rdw = malloc(SN * SK * 2);
	assert_true(w && x && dy && ry && rdx && rdw);
	tsrv_fill_bf16(w, SN * SK, 41, 1.0f);
	tsrv_fill_bf16(x, SM * SK, 42, 1.0f);
	tsrv_fill_bf16(dy, SM * SN, 43, 0.5f);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, SM, SK, x), tdy = fos_tensor_2d(FOS_DTYPE_BF16, SM, SN, dy);
	/* forward only: 0.5625 bytes per element + amax, and every saving forward refused by name */
	fos_weight_info info;
	ASSERT_OK(put_uses(c, "f", w, SN, SK, FOS_WEIGHT_USE_FORWARD, &info, &st), st);
	size_t codes = SN * SK / 2 + SN * SK / 16 + 4;
	assert_int_equal(info.bytes, codes);
	assert_int_equal(info.codes_bytes, codes);
	assert_int_equal(info.columnwise_bytes, 0);
	assert_int_equal(info.master_bytes, 0);
	assert_int_equal(info.weight_uses, FOS_WEIGHT_USE_FORWARD);
	assert_int_equal(info.has_master, 0);
	assert_int_equal(info.has_columnwise, 0);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(x, w, NULL, NULL, SM, SN, SK, &o, ry, NULL, NULL, NULL), 0);
	fos_tensor y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "f", &tx, NULL, NULL, &y, NULL, &st), st);
	ASSERT_SAME(y.data, ry, SM * SN, "forward-only y");
	free(y.data);
	static const int wire_ovr[3] = {FOS_OVERRIDE_QUANTIZED, FOS_OVERRIDE_HIGH_PRECISION, FOS_OVERRIDE_DEQUANTIZED};
	for (int i = 0; i < 3; i++) {
		fos_forward_opts fo = {0, wire_ovr[i], 0, 1, 0};
		fos_context ctx;
		y = fos_tensor_out();
		ASSERT_CODE(fos_forward(c, "f", &tx, NULL, &fo, &y, &ctx, &st), FOS_CODE_FAILED_PRECONDITION, st);
		char want[64];
		snprintf(want, sizeof want, "use '%s'", twc_use_names[i]);
		if (!strstr(st.message, want))
			fail_msg("'%s' does not name %s", st.message, want);
	}
	/* each backward's use alone: its override works bit-identically, a plain forward does not */
	for (int i = 0; i < 3; i++) {
		char name[16];
		snprintf(name, sizeof name, "u%d", i);
		int wu = i == 0 ? FOS_WEIGHT_USE_QUANTIZED : i == 1 ? FOS_WEIGHT_USE_HIGH_PRECISION : FOS_WEIGHT_USE_DEQUANTIZED;
		ASSERT_OK(put_uses(c, name, w, SN, SK, wu, &info, &st), st);
		size_t want = codes + (i == 0 ? codes : 0) + (i == 1 ? (size_t)SN * SK * 2 : 0);
		assert_int_equal(info.bytes, want);
		assert_int_equal(info.codes_bytes + info.columnwise_bytes + info.master_bytes, want);
		assert_int_equal(info.weight_uses, wu);
		y = fos_tensor_out();
		ASSERT_CODE(fos_forward(c, name, &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
		assert_non_null(strstr(st.message, "use 'forward'"));
		fos_forward_opts fo = {0, wire_ovr[i], 0, 1, 0};
		fos_context ctx;
		ASSERT_OK(fos_forward(c, name, &tx, NULL, &fo, &y, &ctx, &st), st);
		o.override = twc_overrides[i];
		assert_int_equal(tsrv_ref_linear(x, w, NULL, dy, SM, SN, SK, &o, ry, rdx, rdw, NULL), 0);
		ASSERT_SAME(y.data, ry, SM * SN, "y");
		fos_tensor dx = fos_tensor_out(), dw = fos_tensor_out();
		ASSERT_OK(fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
		ASSERT_SAME(dx.data, rdx, SM * SK, "dx");
		ASSERT_SAME(dw.data, rdw, SN * SK, "dw");
		free(y.data), free(dx.data), free(dw.data);
		/* the other overrides: refused */
		fos_forward_opts other = {0, wire_ovr[(i + 1) % 3], 0, 1, 0};
		y = fos_tensor_out();
		ASSERT_CODE(fos_forward(c, name, &tx, NULL, &other, &y, &ctx, &st), FOS_CODE_FAILED_PRECONDITION, st);
	}
	/* the default (all uses) and drop_master (all but high_precision) */
	ASSERT_OK(put_uses(c, "all", w, SN, SK, 0, &info, &st), st);
	assert_int_equal(info.bytes, 2 * codes + (size_t)SN * SK * 2);
	assert_int_equal(info.weight_uses, FOS_WEIGHT_USES_ALL);
	fos_weight_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.drop_master = 1;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, SN, SK, w);
	ASSERT_OK(fos_put_weight(c, "nomaster", 1, &tw, &cfg, &info, &st), st);
	assert_int_equal(info.bytes, 2 * codes);
	assert_int_equal(info.weight_uses, FOS_WEIGHT_USES_ALL & ~FOS_WEIGHT_USE_HIGH_PRECISION);
	/* bad uses */
	cfg.uses = FOS_WEIGHT_USE_HIGH_PRECISION;
	ASSERT_CODE(fos_put_weight(c, "bad", 1, &tw, &cfg, &info, &st), FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "drop_master"));
	cfg.drop_master = 0;
	cfg.uses = 0x10;
	ASSERT_CODE(fos_put_weight(c, "bad", 1, &tw, &cfg, &info, &st), FOS_CODE_INVALID_ARGUMENT, st);
	/* what libfos cannot send: an unknown use and a repeated one */
	for (int bad = 0; bad < 2; bad++) {
		Fos__Request rq = FOS__REQUEST__INIT;
		Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
		Fos__Tensor t1;
		Fos__WeightUse u[2] = {bad ? FOS__WEIGHT_USE__WEIGHT_USE_FORWARD : (Fos__WeightUse)9,
				       FOS__WEIGHT_USE__WEIGHT_USE_FORWARD};
		tt_tensor ts[1] = {{&t1, FOS__DTYPE__DTYPE_BF16, 2, {SN, SK}, w}};
		rq.id = 70 + (uint64_t)bad;
		pw.name = (char *)"raw";
		pw.version = 1;
		pw.w = &t1;
		pw.n_uses = 2;
		pw.uses = u;
		rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
		rq.put_weight = &pw;
		char msg[512];
		assert_int_equal(tt_raw_call(s.url, &rq, ts, 1, 20000, msg, sizeof msg, NULL), FOS_CODE_INVALID_ARGUMENT);
		if (!strstr(msg, bad ? "twice" : "uses[0] is 9"))
			fail_msg("bad uses %d: '%s'", bad, msg);
	}
	/* ListWeights shows the same parts */
	fos_weight_info *l;
	size_t nl;
	ASSERT_OK(fos_list_weights(c, &l, &nl, &st), st);
	const fos_weight_info *lf = listed(l, nl, "f"), *lu = listed(l, nl, "u1");
	assert_true(lf && lu);
	assert_int_equal(lf->codes_bytes, codes);
	assert_int_equal(lu->master_bytes, (size_t)SN * SK * 2);
	assert_int_equal(lu->weight_uses, FOS_WEIGHT_USE_HIGH_PRECISION);
	free(l);
	assert_int_equal(tstat(c, "cache_bytes"), codes * 9 + 2 * (size_t)SN * SK * 2);
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
	free(w), free(x), free(dy), free(ry), free(rdx), free(rdw);
}

/* The decoded tier: the budget is 8 forward-only weights; the tier (an eighth) holds one copy. */
static void test_fosd_decoded_tier(void **state)
{
	(void)state;
	const uint64_t codes = SN * SK / 2 + SN * SK / 16 + 4, copy = SN * SK * 2;
	/* tier budget = budget / 8 must hold one copy, not two */
	uint64_t budget = copy * 8 + copy * 4;
	char bs[32];
	snprintf(bs, sizeof bs, "%llu", (unsigned long long)budget);
	const char *args[] = {"--cache-bytes", bs, NULL};
	tsrv s;
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	uint16_t *w1 = malloc(SN * SK * 2), *w2 = malloc(SN * SK * 2), *x = malloc(SM * SK * 2), *ry = malloc(SM * SN * 2);
	assert_true(w1 && w2 && x && ry);
	tsrv_fill_bf16(w1, SN * SK, 51, 1.0f);
	tsrv_fill_bf16(w2, SN * SK, 52, 1.0f);
	tsrv_fill_bf16(x, SM * SK, 53, 1.0f);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, SM, SK, x);
	fos_weight_info info;
	ASSERT_OK(put_uses(c, "t1", w1, SN, SK, FOS_WEIGHT_USE_FORWARD, &info, &st), st);
	ASSERT_OK(put_uses(c, "t2", w2, SN, SK, FOS_WEIGHT_USE_FORWARD, &info, &st), st);
	assert_int_equal(tstat(c, "decoded_tier_budget"), budget / 8);
	fos_linear_opts o = fos_linear_opts_default();
	const uint16_t *ws[2] = {w1, w2};
	const char *names[2] = {"t1", "t2"};
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 2; i++) {
			/* twice each: made, then read */
			for (int rep = 0; rep < 2; rep++) {
				fos_tensor y = fos_tensor_out();
				ASSERT_OK(fos_forward(c, names[i], &tx, NULL, NULL, &y, NULL, &st), st);
				assert_int_equal(tsrv_ref_linear(x, ws[i], NULL, NULL, SM, SN, SK, &o, ry, NULL, NULL, NULL), 0);
				ASSERT_SAME(y.data, ry, SM * SN, "tier y");
				free(y.data);
			}
			assert_int_equal(tstat(c, "decoded_tier_entries"), 1);
			assert_int_equal(tstat(c, "decoded_tier_bytes"), copy);
		}
	/* 6 copies made (each dropping the other's but the first), 6 reads */
	assert_int_equal(tstat(c, "decoded_tier_hits"), 6);
	assert_int_equal(tstat(c, "decoded_tier_drops"), 5);
	assert_int_equal(tstat(c, "cache_bytes"), 2 * codes); /* the tier is not in the cache's bytes */
	fos_weight_info *l;
	size_t nl;
	ASSERT_OK(fos_list_weights(c, &l, &nl, &st), st);
	assert_int_equal(listed(l, nl, "t2")->decoded_tier_bytes, copy);
	assert_int_equal(listed(l, nl, "t1")->decoded_tier_bytes, 0);
	free(l);
	/* a put that needs the tier's room: the copy goes first, no weight is evicted */
	uint64_t free_now = budget - 2 * codes - copy;
	/* a high_precision put (2.5625 bytes an element) of about free + copy / 2 */
	int64_t bn = 16 * (int64_t)((double)(free_now + copy / 2) / (2.5625 * SK) / 16);
	uint16_t *wb = malloc((size_t)(bn * SK) * 2);
	assert_non_null(wb);
	tsrv_fill_bf16(wb, (size_t)(bn * SK), 54, 1.0f);
	uint64_t need = fos_qweight_bytes_for(bn, SK, FOS_USE_HIGH_PRECISION, NULL);
	assert_true(need > free_now && need <= free_now + copy);
	ASSERT_OK(put_uses(c, "big", wb, bn, SK, FOS_WEIGHT_USE_HIGH_PRECISION, &info, &st), st);
	assert_int_equal(tstat(c, "decoded_tier_entries"), 0);
	assert_int_equal(tstat(c, "decoded_tier_drops"), 6);
	assert_int_equal(tstat(c, "cache_evictions"), 0);
	assert_int_equal(tstat(c, "cache_entries"), 3);
	/* no room for a copy now: the small forward decodes on demand, the same bits */
	fos_tensor y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "t1", &tx, NULL, NULL, &y, NULL, &st), st);
	assert_int_equal(tsrv_ref_linear(x, w1, NULL, NULL, SM, SN, SK, &o, ry, NULL, NULL, NULL), 0);
	ASSERT_SAME(y.data, ry, SM * SN, "on-demand y");
	free(y.data);
	assert_int_equal(tstat(c, "decoded_tier_entries"), 0);
	assert_true(tstat(c, "scratch_bytes") >= copy);
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
	free(w1), free(w2), free(x), free(ry), free(wb);
}

#define ALICE "alice-secret-0123456789abcdef"

/* A tenant's quota counts the new sizes and never the tier. */
static void test_fosd_quota_sizes(void **state)
{
	(void)state;
	const uint64_t fwd = SN * SK / 2 + SN * SK / 16 + 4;
	char dir[256], tokens[320], text[256];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	snprintf(text, sizeof text, "alice " ALICE " cache=%llu\n", (unsigned long long)(3 * fwd));
	assert_int_equal(tt_write_file(tokens, text, 0600), 0);
	const char *args[] = {"--tokens", tokens, NULL};
	tsrv s;
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *a = tt_connect(s.url, ALICE);
	fos_status st;
	uint16_t *w = malloc(SN * SK * 2), *x = malloc(SM * SK * 2);
	assert_true(w && x);
	tsrv_fill_bf16(w, SN * SK, 61, 1.0f);
	tsrv_fill_bf16(x, SM * SK, 62, 1.0f);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, SM, SK, x);
	fos_weight_info info;
	/* three forward-only weights fill the quota exactly; their tier copies are outside it */
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof name, "q%d", i);
		ASSERT_OK(put_uses(a, name, w, SN, SK, FOS_WEIGHT_USE_FORWARD, &info, &st), st);
		fos_tensor y = fos_tensor_out();
		ASSERT_OK(fos_forward(a, name, &tx, NULL, NULL, &y, NULL, &st), st);
		free(y.data);
	}
	assert_int_equal(tstat(a, "cache_evictions"), 0);
	assert_int_equal(tstat(a, "cache_bytes"), 3 * fwd);
	assert_int_equal(tstat(a, "decoded_tier_entries"), 3);
	/* a fourth evicts her least recently used one */
	ASSERT_OK(put_uses(a, "q3", w, SN, SK, FOS_WEIGHT_USE_FORWARD, &info, &st), st);
	assert_int_equal(tstat(a, "cache_evictions"), 1);
	assert_int_equal(tstat(a, "cache_bytes"), 3 * fwd);
	assert_int_equal(tt_weight_listed(a, "q0"), 0);
	assert_int_equal(tstat(a, "decoded_tier_entries"), 2); /* q0's copy went with it */
	/* one put for quantized too no longer fits beside two others: two go */
	ASSERT_OK(put_uses(a, "qq", w, SN, SK, FOS_WEIGHT_USE_FORWARD | FOS_WEIGHT_USE_QUANTIZED, &info, &st), st);
	assert_int_equal(info.bytes, 2 * fwd);
	assert_int_equal(tstat(a, "cache_evictions"), 3);
	assert_int_equal(tstat(a, "cache_bytes"), 3 * fwd);
	fos_close(a);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
	tt_tmpdir_remove(dir);
	free(w), free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes_per_use),      cmocka_unit_test(test_decode_exact),
		cmocka_unit_test(test_forward_old_path),   cmocka_unit_test(test_overrides_by_use),
		cmocka_unit_test(test_fosd_uses),          cmocka_unit_test(test_fosd_decoded_tier),
		cmocka_unit_test(test_fosd_quota_sizes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
