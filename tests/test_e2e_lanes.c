/* test_e2e_lanes.c: fosd with several executor lanes (--streams N: backend instances that run
 * requests at the same time, one stream each on cuda). From several threads at once, forwards of a
 * cached weight (inline and through shared memory), Quantize and one-shot Linear (which run side
 * by side on different lanes) interleave with PutWeight and Forward+Backward pairs (which run
 * alone) and with requests that fail; every result must equal the in-process reference bit for
 * bit, whichever lane ran it. A request that waits for a lane past its deadline is answered
 * DEADLINE_EXCEEDED before the requests holding the lanes finish (cpu only: it needs slow ones). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

enum { LM = 128, LK = 256, LN = 256, NX = 4, THREADS = 5, ITERS = 16 };

/* Inputs and in-process references (computed before the threads start). */
static uint16_t *g_w, *g_w2, *g_x[NX], *g_dy[NX];
static uint16_t *g_ry[NX];                /* forward of x[i] by the cached g_w */
static uint16_t *g_rdx[NX], *g_rdw[NX];   /* its backward with dy[i] (default override: quantized) */
static uint16_t *g_ly[NX], *g_ldx[NX], *g_ldw[NX]; /* one-shot Linear of x[i], g_w2, dy[i] */
static uint8_t *g_qc[NX], *g_qs[NX];
static float g_qa[NX];

static void refs_make(void)
{
	if (g_w) /* made once, for every test of this file */
		return;
	size_t mk = (size_t)LM * LK, nk = (size_t)LN * LK, mn = (size_t)LM * LN;
	g_w = malloc(nk * 2);
	g_w2 = malloc(nk * 2);
	tsrv_fill_bf16(g_w, nk, 901, 0.05f);
	tsrv_fill_bf16(g_w2, nk, 902, 0.05f);
	fos_linear_opts o = fos_linear_opts_default();
	fos_qcfg q = fos_qcfg_default();
	for (int i = 0; i < NX; i++) {
		g_x[i] = malloc(mk * 2), g_dy[i] = malloc(mn * 2);
		g_ry[i] = malloc(mn * 2), g_rdx[i] = malloc(mk * 2), g_rdw[i] = malloc(nk * 2);
		g_ly[i] = malloc(mn * 2), g_ldx[i] = malloc(mk * 2), g_ldw[i] = malloc(nk * 2);
		g_qc[i] = malloc(mk / 2), g_qs[i] = malloc(mk / 16);
		tsrv_fill_bf16(g_x[i], mk, 910 + (uint64_t)i, 1.0f);
		tsrv_fill_bf16(g_dy[i], mn, 920 + (uint64_t)i, 0.01f);
		assert_int_equal(tsrv_ref_linear(g_x[i], g_w, NULL, g_dy[i], LM, LN, LK, &o, g_ry[i], g_rdx[i], g_rdw[i], NULL),
				 0);
		assert_int_equal(
			tsrv_ref_linear(g_x[i], g_w2, NULL, g_dy[i], LM, LN, LK, &o, g_ly[i], g_ldx[i], g_ldw[i], NULL), 0);
		assert_int_equal(tsrv_ref_quantize(g_x[i], FOS_BF16, LM, LK, &q, NULL, g_qc[i], g_qs[i], &g_qa[i]), 0);
	}
}

typedef struct lane_arg {
	const char *url;
	int t;
	int failures, done;
	char why[600];
} lane_arg;

static int differs(const void *a, const void *b, size_t n)
{
	return memcmp(a, b, n) != 0;
}

#define BAD(...)                                                                                                \
	do {                                                                                                     \
		snprintf(a->why, sizeof a->why, __VA_ARGS__);                                                    \
		a->failures++;                                                                                   \
	} while (0)

static void *lane_main(void *p)
{
	lane_arg *a = p;
	fos_client *c;
	fos_status st;
	fos_region *r = NULL;
	size_t mk = (size_t)LM * LK, nk = (size_t)LN * LK, mn = (size_t)LM * LN;
	if (fos_connect(a->url, NULL, 60000, &c, &st)) {
		BAD("connect: %s", st.message);
		return NULL;
	}
	if (fos_region_create(c, NULL, mk * 2 + mn * 2, FOS_REGION_MEMFD, &r, &st)) {
		BAD("region: %s", st.message);
		fos_close(c);
		return NULL;
	}
	uint8_t *rp = fos_region_data(r);
	for (int i = 0; i < ITERS; i++) {
		int j = (a->t + i) % NX, kind = (a->t + i) % 5;
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, LM, LK, g_x[j]);
		fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, LM, LN, g_dy[j]);
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
		int rc = 0;
		if (kind == 0) { /* forward, inline (a lane of its own) */
			rc = fos_forward(c, "lanes.w", &tx, NULL, NULL, &y, NULL, &st);
			if (!rc && differs(y.data, g_ry[j], mn * 2))
				BAD("thread %d iter %d: inline forward of x%d differs", a->t, i, j);
		} else if (kind == 1) { /* forward through shared memory */
			memcpy(rp, g_x[j], mk * 2);
			memset(rp + mk * 2, 0xEE, mn * 2);
			fos_tensor sx = fos_tensor_shm(r, 0, FOS_DTYPE_BF16, LM, LK);
			fos_tensor sy = fos_tensor_shm(r, mk * 2, FOS_DTYPE_BF16, LM, LN);
			rc = fos_forward(c, "lanes.w", &sx, NULL, NULL, &sy, NULL, &st);
			if (!rc && differs(rp + mk * 2, g_ry[j], mn * 2))
				BAD("thread %d iter %d: shm forward of x%d differs", a->t, i, j);
		} else if (kind == 2) { /* one-shot Linear with its backward, on a lane */
			fos_tensor tw2 = fos_tensor_2d(FOS_DTYPE_BF16, LN, LK, g_w2);
			rc = fos_linear(c, &tx, &tw2, NULL, &tdy, NULL, &y, &dx, &dw,
					&db, &st);
			if (!rc && (differs(y.data, g_ly[j], mn * 2) || differs(dx.data, g_ldx[j], mk * 2) ||
				    differs(dw.data, g_ldw[j], nk * 2)))
				BAD("thread %d iter %d: linear of x%d differs", a->t, i, j);
		} else if (kind == 3) { /* forward saving a context + backward: both run alone */
			fos_forward_opts fo = {0, FOS_OVERRIDE_DEFAULT, 0, 1, 0};
			fos_context ctx;
			rc = fos_forward(c, "lanes.w", &tx, NULL, &fo, &y, &ctx, &st);
			if (!rc && differs(y.data, g_ry[j], mn * 2))
				BAD("thread %d iter %d: saving forward of x%d differs", a->t, i, j);
			if (!rc)
				rc = fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, &db, &st);
			if (!rc && (differs(dx.data, g_rdx[j], mk * 2) || differs(dw.data, g_rdw[j], nk * 2)))
				BAD("thread %d iter %d: backward of x%d differs", a->t, i, j);
		} else { /* Quantize on a lane */
			fos_tensor codes = fos_tensor_out(), scales = fos_tensor_out(), amax = fos_tensor_out();
			rc = fos_quantize(c, &tx, NULL, NULL, &codes, &scales, &amax, &st);
			if (!rc && (differs(codes.data, g_qc[j], mk / 2) || differs(scales.data, g_qs[j], mk / 16) ||
				    differs(amax.data, &g_qa[j], 4)))
				BAD("thread %d iter %d: quantize of x%d differs", a->t, i, j);
			free(codes.data), free(scales.data), free(amax.data);
		}
		if (rc)
			BAD("thread %d iter %d kind %d: %s: %s", a->t, i, kind, fos_code_name(rc), st.message);
		free(y.data), free(dx.data), free(dw.data), free(db.data);
		/* a request that fails on its lane leaves the others alone */
		fos_forward_opts bad = {999, FOS_OVERRIDE_DEFAULT, 0, 0, 0};
		fos_tensor y2 = fos_tensor_out();
		if (fos_forward(c, "lanes.w", &tx, NULL, &bad, &y2, NULL, &st) != FOS_CODE_FAILED_PRECONDITION)
			BAD("thread %d: a forward asking for version 999 did not fail FAILED_PRECONDITION", a->t);
		free(y2.data);
		if (a->t == 0) { /* PutWeight runs alone, between the others */
			fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, LN, LK, g_w2);
			if (fos_put_weight(c, "lanes.other", (uint64_t)i + 1, &tw, NULL, NULL, &st))
				BAD("put: %s", st.message);
		}
		a->done++;
	}
	fos_region_destroy(r, &st);
	fos_close(c);
	return NULL;
}

static void test_lanes_bitwise(void **state)
{
	(void)state;
	refs_make();
	tsrv s;
	const char *args[] = {"--workers", "6", "--streams", "3", "--context-ttl", "30s", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	if (!tsrv_log_contains(&s, "executor: 3 lanes")) {
		tsrv_dump_log(&s);
		fail_msg("fosd did not open 3 lanes");
	}
	fos_client *c = tt_connect(s.url, NULL);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, LN, LK, g_w);
	fos_status st;
	ASSERT_OK(fos_put_weight(c, "lanes.w", 1, &tw, NULL, NULL, &st), st);
	pthread_t th[THREADS];
	lane_arg args_[THREADS];
	for (int t = 0; t < THREADS; t++) {
		args_[t] = (lane_arg){s.url, t, 0, 0, ""};
		assert_int_equal(pthread_create(&th[t], NULL, lane_main, &args_[t]), 0);
	}
	int failures = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		if (args_[t].failures) {
			fprintf(stderr, "thread %d: %d failures, last: %s\n", t, args_[t].failures, args_[t].why);
			failures += args_[t].failures;
		}
		assert_int_equal(args_[t].done, ITERS);
	}
	/* the daemon is still healthy, holds no region, and its weight still gives the same bytes */
	fos_health_info h;
	ASSERT_OK(fos_health(c, &h, &st), st);
	uint64_t nreg = 1;
	ASSERT_OK(fos_region_stats(c, &nreg, NULL, NULL, &st), st);
	assert_int_equal(nreg, 0);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, LM, LK, g_x[0]), y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "lanes.w", &tx, NULL, NULL, &y, NULL, &st), st);
	assert_memory_equal(y.data, g_ry[0], (size_t)LM * LN * 2);
	free(y.data);
	fos_close(c);
	if (failures)
		tsrv_dump_log(&s);
	assert_int_equal(failures, 0);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

/* ---- waiting for a lane past the deadline (cpu: slow requests hold the lanes) ----------------- */

enum { SLOW = 2048 };

static void slow_start(tt_async *as, const char *url, const uint16_t *big, uint64_t id)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
	Fos__Tensor tx, tw, tdy;
	lr.x = &tx, lr.w = &tw, lr.dy = &tdy;
	rq.op_case = FOS__REQUEST__OP_LINEAR;
	rq.linear = &lr;
	rq.id = id;
	tt_tensor ts[3] = {{&tx, FOS__DTYPE__DTYPE_BF16, 2, {SLOW, SLOW}, big},
			   {&tw, FOS__DTYPE__DTYPE_BF16, 2, {SLOW, SLOW}, big},
			   {&tdy, FOS__DTYPE__DTYPE_BF16, 2, {SLOW, SLOW}, big}};
	assert_int_equal(tt_async_start(as, url, &rq, ts, 3, 120000), 0);
}

static void test_lane_wait_past_deadline(void **state)
{
	(void)state;
	if (!strcmp(tsrv_backend_name(), "cuda")) {
		skip(); /* the slow requests would not be slow */
		return;
	}
	uint16_t *big = malloc((size_t)SLOW * SLOW * 2);
	static uint16_t small[128 * 128];
	tsrv_fill_bf16(big, (size_t)SLOW * SLOW, 1, 0.1f);
	tsrv_fill_bf16(small, 128 * 128, 2, 0.05f);
	tsrv s;
	const char *args[] = {"--workers", "3", "--streams", "2", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	tt_async s1, s2;
	slow_start(&s1, s.url, big, 1);
	slow_start(&s2, s.url, big, 2);
	/* both slow ones on a lane each, nothing queued */
	if (tt_wait_lanes_busy(s.url, 2, 10000))
		fail_msg("the slow requests did not start");
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	/* a Linear (side by side) finds no free lane; a PutWeight (alone) finds lanes running */
	char msg[600];
	for (int which = 0; which < 2; which++) {
		Fos__Request rq = FOS__REQUEST__INIT;
		Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
		Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
		Fos__Tensor t1, t2;
		tt_tensor ts[2] = {{&t1, FOS__DTYPE__DTYPE_BF16, 2, {128, 128}, small},
				   {&t2, FOS__DTYPE__DTYPE_BF16, 2, {128, 128}, small}};
		rq.id = 10 + (uint64_t)which;
		rq.deadline_ms = 150;
		if (which == 0) {
			lr.x = &t1, lr.w = &t2;
			rq.op_case = FOS__REQUEST__OP_LINEAR;
			rq.linear = &lr;
		} else {
			pw.name = (char *)"late";
			pw.version = 1;
			pw.w = &t1;
			rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
			rq.put_weight = &pw;
		}
		int code = tt_raw_call(s.url, &rq, ts, which == 0 ? 2 : 1, 60000, msg, sizeof msg, NULL);
		uint64_t answered = tsrv_now_ms();
		if (code != FOS_CODE_DEADLINE_EXCEEDED)
			fail_msg("%s with a 150 ms deadline while both lanes run: code %d (%s)",
				 which ? "PutWeight" : "Linear", code, msg);
		if (answered >= s1.t_start_ms + 60000)
			fail_msg("answered too late");
	}
	uint64_t before = tsrv_now_ms();
	assert_int_equal(tt_async_wait(&s1, NULL, 0), 0);
	assert_int_equal(tt_async_wait(&s2, NULL, 0), 0);
	fprintf(stderr, "slow requests took %llu and %llu ms\n", (unsigned long long)(s1.t_done_ms - s1.t_start_ms),
		(unsigned long long)(s2.t_done_ms - s2.t_start_ms));
	/* both were answered while the slow requests still ran */
	assert_true(s1.t_done_ms >= before || s2.t_done_ms >= before);
	fos_weight_info *l;
	size_t n;
	ASSERT_OK(fos_list_weights(c, &l, &n, &st), st);
	assert_int_equal(n, 0); /* the late put never ran */
	free(l);
	fos_close(c);
	free(big);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 30000), 0);
	tsrv_cleanup(&s);
}

/* A small forward without a saved context, and a small quantize, run at once on the thread that
 * received them when nothing is queued and a lane is free (Stats: ran_at_once); a forward that saves
 * a context runs alone and a Linear goes through the queue, so they never do. Bits unchanged. */
static const fos_op_stats *lane_op(const fos_stats_info *si, const char *op)
{
	for (int i = 0; i < si->n_ops; i++)
		if (!strcmp(si->ops[i].op, op))
			return &si->ops[i];
	fail_msg("no stats for %s", op);
	return NULL;
}

static void test_run_at_once(void **state)
{
	(void)state;
	refs_make();
	tsrv s;
	/* no context sweep meanwhile: a request that arrives while one is pending or running waits in
	 * the queue (arrival order), and would not run at once (seen once in CI on a loaded 2-core VM) */
	const char *args[] = {"--workers", "2", "--streams", "2", "--sweep-interval", "10m", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, LN, LK, g_w);
	ASSERT_OK(fos_put_weight(c, "once.w", 1, &tw, NULL, NULL, &st), st);
	enum { N_FWD = 6 };
	for (int i = 0; i < N_FWD; i++) { /* one at a time: every lane free, nothing queued */
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, LM, LK, g_x[i % NX]), y = fos_tensor_out();
		ASSERT_OK(fos_forward(c, "once.w", &tx, NULL, NULL, &y, NULL, &st), st);
		assert_memory_equal(y.data, g_ry[i % NX], (size_t)LM * LN * 2);
		free(y.data);
	}
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, LM, LK, g_x[0]), y = fos_tensor_out();
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	ASSERT_OK(fos_forward(c, "once.w", &tx, NULL, &fo, &y, &ctx, &st), st);
	assert_memory_equal(y.data, g_ry[0], (size_t)LM * LN * 2);
	free(y.data);
	ASSERT_OK(fos_release(c, &ctx, &st), st);
	fos_tensor codes = fos_tensor_out(), scales = fos_tensor_out(), amax = fos_tensor_out();
	ASSERT_OK(fos_quantize(c, &tx, NULL, NULL, &codes, &scales, &amax, &st), st);
	assert_memory_equal(codes.data, g_qc[0], (size_t)LM * LK / 2);
	free(codes.data);
	free(scales.data);
	free(amax.data);
	fos_tensor tw2 = fos_tensor_2d(FOS_DTYPE_BF16, LN, LK, g_w2), ly = fos_tensor_out();
	ASSERT_OK(fos_linear(c, &tx, &tw2, NULL, NULL, NULL, &ly, NULL, NULL, NULL, &st), st);
	assert_memory_equal(ly.data, g_ly[0], (size_t)LM * LN * 2);
	free(ly.data);
	fos_stats_info *si = malloc(sizeof *si);
	ASSERT_OK(fos_stats(c, si, &st), st);
	const fos_op_stats *f = lane_op(si, "forward"), *q = lane_op(si, "quantize"), *l = lane_op(si, "linear");
	assert_int_equal(f->run_count, N_FWD + 1);
	assert_int_equal(f->ran_at_once, N_FWD); /* not the one that saved a context */
	assert_int_equal(q->ran_at_once, 1);
	assert_int_equal(l->run_count, 1);
	assert_int_equal(l->ran_at_once, 0);
	assert_int_equal(lane_op(si, "put_weight")->ran_at_once, 0);
	free(si);
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lanes_bitwise),
		cmocka_unit_test(test_lane_wait_past_deadline),
		cmocka_unit_test(test_run_at_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
