/* test_e2e_async.c: calls that return before fosd has read them (fos.h FOS_CUDA_ORDER_ASYNC,
 * PROTOCOL.md "Asynchronous requests") on a machine without a GPU, through libfos against a fosd
 * run in this process whose cpu backend stands in for a GPU, as test_e2e_early does: the fake
 * driver's allocations (support_fake_cuda.c) are host buffers fosd reads and writes in place, its
 * cuMemAlloc gives the done words host memory too, its cuStreamWaitValue32 logs (address, value)
 * and the stand-in backend's write_u32 stores the word and logs it.
 *
 * What it shows: an asynchronous PutWeight, Forward saving a context, Backward of that context and
 * Linear each return before fosd starts its op (the stand-in's op start waits until the client
 * says the call returned; a call that waited for fosd would make it wait 3 s and count late); they
 * give the CPU reference's bits; every stream wait ends (its word reaches its value) and fosd wrote
 * the words in call order. Failures: one surfaces at the next call (which does not run) or at
 * fos_sync with the op's name, what it named and its request id, once; a request fosd refuses
 * before running still has its word written (by libfos); a client-chosen context id that is live
 * is ALREADY_EXISTS; a call never answered in time fails at fos_sync and its word is written by
 * libfos; fosd refuses a done word on an op that cannot run so, on a result that would come back
 * in the reply, or outside the allocation, and keeps serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fos.h"
#include "libfos_internal.h"
#include "server.h"
#include "support_assert.h"
#include "support_fake_cuda.h"
#include "support_server.h"
#include "support_standin.h"

#define M 48
#define K 64
#define N 32

static fosd_server g_srv;
static fosd_config g_cfg;
static char g_url[128];
static fos_backend g_cpu;

/* ---- the stand-in backend (under g_mu) ----------------------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_gate;        /* 1: an op starts only once the client has returned from one more call */
static int g_returned;    /* asynchronous calls the client has returned from (set by the test) */
static int g_started;     /* ops started while gated */
static int g_late;        /* gated ops that waited 3 s for the client: the call had waited for fosd */
static int g_block_ms;    /* every op start sleeps this long (a call never answered in time) */
static int g_marks, g_maps_open;
static uint64_t g_wl_addr[4096];
static uint32_t g_wl_val[4096];
static int g_wl_n;

static void client_returned(void)
{
	pthread_mutex_lock(&g_mu);
	g_returned++;
	pthread_cond_broadcast(&g_cv);
	pthread_mutex_unlock(&g_mu);
}

/* Every ordered call's op begins by making its lane wait for the client's input event. */
static int s_ev_wait(fos_backend *be, void *ev, fos_err *e)
{
	(void)be, (void)ev, (void)e;
	pthread_mutex_lock(&g_mu);
	if (g_gate) {
		int need = ++g_started;
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 3;
		while (g_returned < need)
			if (pthread_cond_timedwait(&g_cv, &g_mu, &t) == ETIMEDOUT)
				break;
		g_late += g_returned < need;
	}
	int block = g_block_ms;
	pthread_mutex_unlock(&g_mu);
	if (block)
		usleep((useconds_t)block * 1000);
	return FOS_OK;
}

static int s_write_u32(fos_backend *be, void *dst, uint32_t v, fos_err *e)
{
	(void)be, (void)e;
	__atomic_store_n((uint32_t *)dst, v, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&g_mu);
	if (g_wl_n < 4096) {
		g_wl_addr[g_wl_n] = (uint64_t)(uintptr_t)dst;
		g_wl_val[g_wl_n++] = v;
	}
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

static int g_mark_token;
static int s_mark_record(fos_backend *be, void **ev, fos_err *e)
{
	(void)be, (void)e;
	*ev = &g_mark_token;
	__atomic_fetch_add(&g_marks, 1, __ATOMIC_SEQ_CST);
	return FOS_OK;
}

static int g_marks_stuck; /* 1: marks never complete (only settles release what is pending) */
static int g_lane_syncs;       /* lane syncs (settles) */
static int s_mark_done(fos_backend *be, void *ev)
{
	(void)be;
	return ev == &g_mark_token && !__atomic_load_n(&g_marks_stuck, __ATOMIC_SEQ_CST); /* the cpu's work is done */
}

static int s_sync(fos_backend *be, fos_err *e)
{
	__atomic_fetch_add(&g_lane_syncs, 1, __ATOMIC_SEQ_CST);
	return g_cpu.sync(be, e);
}

static void s_mark_free(fos_backend *be, void *ev)
{
	(void)be, (void)ev;
}

static int s_ipc_open(fos_backend *be, const unsigned char h[64], void **base, size_t *size, fos_err *e)
{
	(void)be;
	uint64_t b;
	memcpy(&b, h, 8);
	fake_alloc *a = fake_find(b);
	if (!a || a->base != b)
		return fos_seterr(e, FOS_EINVAL, "cudaIpcOpenMemHandle: invalid resource handle");
	*base = (void *)(uintptr_t)a->base;
	*size = (size_t)a->size;
	__atomic_fetch_add(&g_maps_open, 1, __ATOMIC_SEQ_CST);
	return FOS_OK;
}

static void s_ipc_close(fos_backend *be, void *base)
{
	(void)be, (void)base;
	__atomic_fetch_sub(&g_maps_open, 1, __ATOMIC_SEQ_CST);
}

/* ---- fixtures ---------------------------------------------------------------------------------- */

/* The stand-in backend's hooks over support_standin.c's (which starts the fosd around them). */
static void hooks(fos_backend *be)
{
	be->sync = s_sync;
	be->ipc_open = s_ipc_open;
	be->ipc_close = s_ipc_close;
	be->ipc_event_wait = s_ev_wait;
	be->write_u32 = s_write_u32;
	be->mark_record = s_mark_record;
	be->mark_done = s_mark_done;
	be->mark_free = s_mark_free;
}

static int setup(void **state)
{
	(void)state;
	return standin_start(&g_srv, &g_cfg, "async", g_url, sizeof g_url, &g_cpu, hooks);
}

static int teardown(void **state)
{
	(void)state;
	standin_stop(&g_srv, &g_cfg);
	return 0;
}

/* ---- helpers ----------------------------------------------------------------------------------- */

/* The fake driver with FOS_CUDA_ORDER_ASYNC's calls, its cuMemAlloc in host memory. */
static void fake_async_driver(void)
{
	fake_reset();
	static fosc_cuda_api drv;
	drv = g_fake;
	drv.IpcOpenEventHandle = f_open_event;
	drv.StreamWaitEvent = f_wait_event;
	fosc_cuda_override(&drv);
	g_alloc_host = 1;
}

static fos_client *connect_async(void *stream)
{
	fos_client *c = NULL;
	fos_status st;
	ASSERT_OK(fos_connect(g_url, NULL, 20000, &c, &st), st);
	fos_health_info hi;
	ASSERT_OK(fos_health(c, &hi, &st), st); /* fosd's GPU: the fake driver's */
	ASSERT_OK(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS | FOS_CUDA_ORDER_ASYNC, &st),
		  st);
	return c;
}

/* Every stream wait queued so far has its word at (or past) its value. */
static void expect_words_written(const char *what)
{
	for (int i = 0; i < g_wv_n; i++) {
		uint32_t now = __atomic_load_n((uint32_t *)(uintptr_t)g_wv_addr[i], __ATOMIC_SEQ_CST);
		if ((int32_t)(now - g_wv_val[i]) < 0)
			fail_msg("%s: wait %d on word %#llx for %u still waits (the word is %u)", what, i,
				 (unsigned long long)g_wv_addr[i], g_wv_val[i], now);
	}
}

/* One asynchronous call: it returns OK, then the stand-in's op may start. */
#define ASYNC(call, what)                                                    \
	do {                                                                 \
		fos_status st_;                                              \
		int rc_ = (call);                                            \
		client_returned();                                           \
		if (rc_ != FOS_CODE_OK)                                      \
			fail_msg("%s: %s", what, st_.message);               \
	} while (0)

/* ---- tests ------------------------------------------------------------------------------------- */

static void test_async_calls(void **state)
{
	(void)state;
	fake_async_driver();
	static uint16_t w[N * K], x[M * K], dy[M * N], b[N];
	tsrv_fill_bf16(w, N * K, 51, 0.05f);
	tsrv_fill_bf16(x, M * K, 52, 1.0f);
	tsrv_fill_bf16(dy, M * N, 53, 0.1f);
	tsrv_fill_bf16(b, N, 54, 0.5f);
	static uint16_t ref_y[M * N], ref_dx[M * K], ref_dw[N * K], ref_db[N];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(x, w, b, dy, M, N, K, &o, ref_y, ref_dx, ref_dw, ref_db), 0);

	void *stream = (void *)(uintptr_t)0x5;
	fos_client *c = connect_async(stream);
	fos_status st;
	uint16_t *dW = standin_dev_buf(0, sizeof w, w), *dX = standin_dev_buf(1, sizeof x, x),
		 *dDY = standin_dev_buf(2, sizeof dy, dy), *dB = standin_dev_buf(3, sizeof b, b),
		 *dY = standin_dev_buf(4, sizeof ref_y, NULL), *dGX = standin_dev_buf(5, sizeof ref_dx, NULL),
		 *dGW = standin_dev_buf(6, sizeof ref_dw, NULL), *dGB = standin_dev_buf(7, sizeof ref_db, NULL);
	/* Linear's results, at 4 KiB steps in one allocation */
	uint8_t *dL = standin_dev_buf(8, 4 * 8192, NULL);
	uint16_t *lY = (uint16_t *)dL, *lGX = (uint16_t *)(dL + 8192), *lGW = (uint16_t *)(dL + 16384),
		 *lGB = (uint16_t *)(dL + 24576);
	fos_tensor tw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW), tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX),
		   tdy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dDY), tb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dB),
		   ty = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY), tgx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dGX),
		   tgw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dGW), tgb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dGB),
		   ly = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, lY), lgx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, lGX),
		   lgw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, lGW), lgb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, lGB);

	pthread_mutex_lock(&g_mu);
	g_gate = 1;
	g_returned = g_started = g_late = 0;
	g_wl_n = 0;
	pthread_mutex_unlock(&g_mu);
	int waits0 = g_wv_n;
	fos_weight_info wi;
	ASYNC(fos_put_weight(c, "w", 1, &tw, NULL, &wi, &st_), "PutWeight");
	assert_string_equal(wi.name, "w");
	assert_int_equal(wi.n, N);
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	ASYNC(fos_forward(c, "w", &tx, &tb, &fo, &ty, &ctx, &st_), "Forward saving a context");
	assert_true(ctx.id != 0); /* chosen by libfos, at once */
	assert_int_equal(ctx.m, M);
	assert_int_equal(ctx.n, N);
	assert_int_equal(ctx.k, K);
	assert_int_equal(ctx.has_bias, 1);
	ASYNC(fos_backward(c, &ctx, &tdy, NULL, &tgx, &tgw, &tgb, &st_), "Backward");
	assert_int_equal(ctx.id, 0); /* consumed */
	ASYNC(fos_linear(c, &tx, &tw, &tb, &tdy, NULL, &ly, &lgx, &lgw, &lgb, &st_), "Linear");
	assert_int_equal(fos_async_count(c), 4);
	assert_int_equal(g_wv_n - waits0, 4); /* each call made the stream wait on a word */
	for (int i = waits0; i < g_wv_n; i++)
		assert_ptr_equal(g_wv_stream[i], stream);
	ASSERT_OK(fos_sync(c, &st), st);
	pthread_mutex_lock(&g_mu);
	g_gate = 0;
	int late = g_late, started = g_started;
	pthread_mutex_unlock(&g_mu);
	if (late)
		fail_msg("%d of %d asynchronous calls returned only after fosd ran them", late, started);
	assert_int_equal(started, 4);

	assert_memory_equal(dY, ref_y, sizeof ref_y);
	assert_memory_equal(dGX, ref_dx, sizeof ref_dx);
	assert_memory_equal(dGW, ref_dw, sizeof ref_dw);
	assert_memory_equal(dGB, ref_db, sizeof ref_db);
	assert_memory_equal(lY, ref_y, sizeof ref_y);
	assert_memory_equal(lGX, ref_dx, sizeof ref_dx);
	assert_memory_equal(lGW, ref_dw, sizeof ref_dw);
	assert_memory_equal(lGB, ref_db, sizeof ref_db);
	/* fosd wrote each call's word, in call order, and no stream wait is left */
	expect_words_written("the calls");
	assert_int_equal(g_wl_n, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(g_wl_addr[i], g_wv_addr[waits0 + i]);
		assert_int_equal(g_wl_val[i], g_wv_val[waits0 + i]);
	}
	assert_int_equal(g_self_writes, 0);
	assert_true(g_marks >= 4); /* answered before their work's end: held until their marks */

	/* more calls than there are done words (1024) and pending places (64): slots are reused with a
	 * larger value each time, fosd settles a full pending list, and every word is written */
	/* a Forward of M2 > FOSD_TIER_MAX_M rows without a context: no sync of its own in the op */
	enum { M2 = 272 };
	static uint16_t x2[M2 * K], ref_y2[M2 * N];
	tsrv_fill_bf16(x2, M2 * K, 55, 1.0f);
	assert_int_equal(tsrv_ref_linear(x2, w, b, NULL, M2, N, K, &o, ref_y2, NULL, NULL, NULL), 0);
	uint16_t *dX2 = standin_dev_buf(9, sizeof x2, x2), *dY2 = standin_dev_buf(10, sizeof ref_y2, NULL);
	fos_tensor tx2 = fos_tensor_cuda(FOS_DTYPE_BF16, M2, K, dX2), ty2 = fos_tensor_cuda(FOS_DTYPE_BF16, M2, N, dY2);
	int w0 = g_wv_n;
	__atomic_store_n(&g_marks_stuck, 1, __ATOMIC_SEQ_CST);
	int syncs0 = __atomic_load_n(&g_lane_syncs, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 1100; i++) {
		fos_status s2;
		if (fos_forward(c, "w", &tx2, &tb, NULL, &ty2, NULL, &s2))
			fail_msg("forward %d: %s", i, s2.message);
	}
	ASSERT_OK(fos_sync(c, &st), st);
	int settles = __atomic_load_n(&g_lane_syncs, __ATOMIC_SEQ_CST) - syncs0;
	__atomic_store_n(&g_marks_stuck, 0, __ATOMIC_SEQ_CST);
	assert_true(settles >= 1100 / 64);      /* a full pending list settled ... */
	assert_true(settles <= 1100 / 64 + 2); /* ... and nothing else synchronized lane 0 */
	assert_int_equal(g_wv_n - w0, 1100);
	int reused = 0;
	for (int i = w0; i < g_wv_n; i++)
		reused += g_wv_val[i] > 1;
	assert_true(reused >= 1100 - 1024);
	expect_words_written("1100 calls");
	assert_int_equal(g_self_writes, 0);
	assert_memory_equal(dY2, ref_y2, sizeof ref_y2);

	/* 100 Forwards saving a context and their Backwards: fosd does not synchronize for them either
	 * (linear.c's syncs for other lanes are left to the settle: fos_backend.defer_sync) */
	__atomic_store_n(&g_marks_stuck, 1, __ATOMIC_SEQ_CST);
	syncs0 = __atomic_load_n(&g_lane_syncs, __ATOMIC_SEQ_CST);
	memset(dGW, 0, sizeof ref_dw);
	for (int i = 0; i < 100; i++) {
		fos_status s2;
		fos_context cx;
		if (fos_forward(c, "w", &tx, &tb, &fo, &ty, &cx, &s2) ||
		    fos_backward(c, &cx, &tdy, NULL, &tgx, &tgw, &tgb, &s2))
			fail_msg("forward/backward %d: %s", i, s2.message);
	}
	ASSERT_OK(fos_sync(c, &st), st);
	settles = __atomic_load_n(&g_lane_syncs, __ATOMIC_SEQ_CST) - syncs0;
	__atomic_store_n(&g_marks_stuck, 0, __ATOMIC_SEQ_CST);
	assert_true(settles <= 200 / 64 + 2);
	assert_memory_equal(dGW, ref_dw, sizeof ref_dw);
	assert_memory_equal(dGB, ref_db, sizeof ref_db);
	expect_words_written("forwards and backwards");

	/* a synchronous call (Y inline) after them gives the same bits */
	uint16_t y_host[M * N];
	fos_tensor yh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_host);
	ASSERT_OK(fos_forward(c, "w", &tx, &tb, NULL, &yh, NULL, &st), st);
	assert_memory_equal(y_host, ref_y, sizeof ref_y);
	assert_int_equal(fos_async_count(c), 4 + 1100 + 200);

	void *bufs[] = {dW, dX, dDY, dB, dY, dGX, dGW, dGB, dL, dX2, dY2};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		ASSERT_OK(fos_cuda_release(c, bufs[i], &st), st);
	ASSERT_OK(fos_drop_weight(c, "w", &st), st);
	fos_close(c);
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
	assert_int_equal(g_maps_open, 0); /* the words' mapping too: released before their memory */
}

/* st's code is code and its message holds every string of want (NULL-terminated). */
static void expect_failure(int rc, const fos_status *st, int code, const char *const *want)
{
	if (rc != code)
		fail_msg("code %d (%s), expected %d: %s", rc, fos_code_name(rc), code, st->message);
	for (int i = 0; want[i]; i++)
		if (!strstr(st->message, want[i]))
			fail_msg("message \"%s\" lacks \"%s\"", st->message, want[i]);
}

static void test_async_failures(void **state)
{
	(void)state;
	fake_async_driver();
	static uint16_t w[N * K], x[M * K], dy[M * N];
	tsrv_fill_bf16(w, N * K, 61, 0.05f);
	tsrv_fill_bf16(x, M * K, 62, 1.0f);
	tsrv_fill_bf16(dy, M * N, 63, 0.1f);
	fos_client *c = connect_async((void *)(uintptr_t)0x6);
	fos_status st;
	uint16_t *dW = standin_dev_buf(0, sizeof w, w), *dX = standin_dev_buf(1, sizeof x, x),
		 *dDY = standin_dev_buf(2, sizeof dy, dy), *dY = standin_dev_buf(3, sizeof(uint16_t) * M * N, NULL),
		 *dGX = standin_dev_buf(4, sizeof x, NULL), *dGW = standin_dev_buf(5, sizeof w, NULL);
	fos_tensor tw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW), tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX),
		   tdy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dDY), ty = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY),
		   tgx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dGX), tgw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dGW);
	ASYNC(fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st_), "PutWeight");

	/* an unknown weight: reported by the next call, which does not run (one that does not go
	 * asynchronously waits for the answers first; an asynchronous one reports what is known) */
	ASYNC(fos_forward(c, "nope", &tx, NULL, NULL, &ty, NULL, &st_), "Forward of an unknown weight");
	static uint16_t yh[M * N];
	memset(yh, 0x5A, sizeof yh);
	fos_tensor tyh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, yh);
	int rc = fos_linear(c, &tx, &tw, NULL, NULL, NULL, &tyh, NULL, NULL, NULL, &st);
	const char *nope[] = {"asynchronous Forward of weight 'nope' (request ", ") failed: ", "nope", NULL};
	expect_failure(rc, &st, FOS_CODE_NOT_FOUND, nope);
	assert_int_equal(yh[0], 0x5A5A);  /* the Linear did not run */
	ASSERT_OK(fos_sync(c, &st), st); /* reported once */
	expect_words_written("a failed Forward");
	ASYNC(fos_forward(c, "nope", &tx, NULL, NULL, &ty, NULL, &st_), "Forward of an unknown weight");
	for (int i = 0; i < 500 && fosc_async_inflight(c); i++) /* answered (the sender records it) */
		usleep(10 * 1000);
	uint64_t n0 = fos_async_count(c);
	memset(dY, 0x5A, sizeof(uint16_t) * M * N);
	rc = fos_linear(c, &tx, &tw, NULL, NULL, NULL, &ty, NULL, NULL, NULL, &st);
	expect_failure(rc, &st, FOS_CODE_NOT_FOUND, nope);
	assert_int_equal(fos_async_count(c), n0);  /* not queued */
	assert_int_equal(((uint8_t *)dY)[0], 0x5A); /* nor run */
	ASSERT_OK(fos_sync(c, &st), st);

	/* a context that does not exist: reported by fos_sync */
	fos_context bogus;
	memset(&bogus, 0, sizeof bogus);
	bogus.id = 0x3039;
	ASYNC(fos_backward(c, &bogus, &tdy, NULL, &tgx, &tgw, NULL, &st_), "Backward of an unknown context");
	rc = fos_sync(c, &st);
	const char *ctxw[] = {"asynchronous Backward of context 0000000000003039 (request ", NULL};
	expect_failure(rc, &st, FOS_CODE_NOT_FOUND, ctxw);
	ASSERT_OK(fos_sync(c, &st), st);

	/* a bad shape, refused before fosd runs it: its word is written by libfos */
	int self0 = g_self_writes;
	fos_tensor bad_dy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N - 16, dDY); /* not (M, N) */
	ASYNC(fos_linear(c, &tx, &tw, NULL, &bad_dy, NULL, &ty, &tgx, &tgw, NULL, &st_), "Linear with a bad dy");
	rc = fos_sync(c, &st);
	const char *linw[] = {"asynchronous Linear (request ", "dy", NULL};
	expect_failure(rc, &st, FOS_CODE_INVALID_ARGUMENT, linw);
	assert_int_equal(g_self_writes, self0 + 1);
	expect_words_written("a refused Linear");

	/* two failures: the first is reported, with the count of the others */
	/* two failures: the first is reported, with the count of the others; the first fails in its
	 * op (Y's buffer too small), after fosd began it: fosd writes its word */
	pthread_mutex_lock(&g_mu);
	g_block_ms = 200; /* the second is queued before the first is answered */
	int wl0 = g_wl_n;
	pthread_mutex_unlock(&g_mu);
	fos_tensor ty_small = fos_tensor_cuda(FOS_DTYPE_BF16, M, N / 2, dY);
	ASYNC(fos_forward(c, "w", &tx, NULL, NULL, &ty_small, NULL, &st_), "Forward 1");
	ASYNC(fos_forward(c, "nope2", &tx, NULL, NULL, &ty, NULL, &st_), "Forward 2");
	rc = fos_sync(c, &st);
	pthread_mutex_lock(&g_mu);
	g_block_ms = 0;
	int wl1 = g_wl_n;
	pthread_mutex_unlock(&g_mu);
	const char *two[] = {"asynchronous Forward of weight 'w' (request ", "and 1 later asynchronous call failed too", NULL};
	expect_failure(rc, &st, FOS_CODE_OUT_OF_RANGE, two);
	assert_true(wl1 >= wl0 + 1); /* fosd wrote the failed op's word (and the NOT_FOUND one's: its op ran) */
	expect_words_written("two failures");

	/* a context id the client chose that is live: ALREADY_EXISTS */
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	ASYNC(fos_forward(c, "w", &tx, NULL, &fo, &ty, &ctx, &st_), "Forward saving a context");
	ASSERT_OK(fos_sync(c, &st), st);
	{
		static uint16_t yh[M * N];
		Fos__Request rq = FOS__REQUEST__INIT;
		Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
		Fos__Tensor txw;
		rq.op_case = FOS__REQUEST__OP_FORWARD;
		rq.forward = &fr;
		fr.weight = "w";
		fr.x = &txw;
		fr.save_context = 1;
		fr.context_id = ctx.id;
		fos_tensor xh = fos_tensor_2d(FOS_DTYPE_BF16, M, K, x);
		fosc_in ins[1] = {{&txw, &xh, "x"}};
		fosc_reply r;
		(void)yh;
		rc = fosc_call(c, &rq, ins, 1, &r, &st);
		const char *inuse[] = {"already in use", NULL};
		expect_failure(rc, &st, FOS_CODE_ALREADY_EXISTS, inuse);
		fr.save_context = 0;
		rc = fosc_call(c, &rq, ins, 1, &r, &st);
		const char *nosave[] = {"context_id", "without save_context", NULL};
		expect_failure(rc, &st, FOS_CODE_INVALID_ARGUMENT, nosave);
	}
	ASSERT_OK(fos_release(c, &ctx, &st), st);

	/* never answered in time: fos_sync fails naming it, and libfos wrote its word */
	self0 = g_self_writes;
	fos_set_timeout(c, 300);
	pthread_mutex_lock(&g_mu);
	g_block_ms = 900;
	pthread_mutex_unlock(&g_mu);
	ASYNC(fos_forward(c, "w", &tx, NULL, NULL, &ty, NULL, &st_), "Forward fosd is slow to run");
	rc = fos_sync(c, &st);
	const char *slow[] = {"asynchronous Forward of weight 'w' (request ", NULL};
	expect_failure(rc, &st, FOS_CODE_DEADLINE_EXCEEDED, slow);
	assert_int_equal(g_self_writes, self0 + 1);
	expect_words_written("a call never answered");
	pthread_mutex_lock(&g_mu);
	g_block_ms = 0;
	pthread_mutex_unlock(&g_mu);
	usleep(1200 * 1000); /* fosd ends that op */
	fos_set_timeout(c, 20000);

	fos_health_info hi;
	ASSERT_OK(fos_health(c, &hi, &st), st);
	void *bufs[] = {dW, dX, dDY, dY, dGX, dGW};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		(void)fos_cuda_release(c, bufs[i], &st);
	fos_close(c);
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
}

/* fosd's checks of a done word, through raw requests. */
static void test_done_word_refused(void **state)
{
	(void)state;
	fake_async_driver();
	fos_client *c = connect_async((void *)(uintptr_t)0x7);
	fos_status st;
	/* the flag needs both others, and a driver with the stream memory operations */
	void *stream = (void *)(uintptr_t)0x7;
	ASSERT_CODE(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_ASYNC, &st),
		    FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "FOS_CUDA_ORDER_ASYNC needs both"));
	static fosc_cuda_api nowv;
	nowv = g_fake;
	nowv.IpcOpenEventHandle = f_open_event;
	nowv.StreamWaitEvent = f_wait_event;
	nowv.StreamWaitValue32 = NULL;
	fosc_cuda_override(&nowv);
	ASSERT_CODE(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS | FOS_CUDA_ORDER_ASYNC, &st),
		    FOS_CODE_FAILED_PRECONDITION, st);
	assert_non_null(strstr(st.message, "cuStreamWaitValue32"));
	fake_async_driver();
	ASSERT_OK(fos_set_cuda_order(c, NULL, 0, &st), st); /* raw requests: no events of libfos's */
	static uint16_t x[M * K];
	tsrv_fill_bf16(x, M * K, 71, 1.0f);
	uint32_t *words = standin_dev_buf(0, 4096, NULL);
	fos_tensor wt = fos_tensor_cuda(FOS_DTYPE_F32, 1024, 0, words);
	Fos__Tensor wire;
	int64_t shape[FOSW_MAX_DIMS];
	Fos__CudaRef word;
	fosc_dev_ref r;
	ASSERT_OK(fosc_cuda_in(c, &wt, "words", &wire, shape, &word, &r, &st), st);

	/* a Quantize cannot run asynchronously */
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
	Fos__QuantConfig qc = FOS__QUANT_CONFIG__INIT;
	Fos__Tensor tq;
	rq.op_case = FOS__REQUEST__OP_QUANTIZE;
	rq.quantize = &qr;
	qr.x = &tq;
	qr.config = &qc;
	rq.done_word = &word;
	rq.done_value = 1;
	fos_tensor xh = fos_tensor_2d(FOS_DTYPE_BF16, M, K, x);
	fosc_in ins[1] = {{&tq, &xh, "x"}};
	fosc_reply rep;
	int rc = fosc_call(c, &rq, ins, 1, &rep, &st);
	const char *q[] = {"done_word", "must be a PutWeight, Forward, Backward or Linear", NULL};
	expect_failure(rc, &st, FOS_CODE_FAILED_PRECONDITION, q);

	/* a Forward whose input is in host memory */
	Fos__Request fq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor tx;
	fq.op_case = FOS__REQUEST__OP_FORWARD;
	fq.forward = &fr;
	fr.weight = "w";
	fr.x = &tx;
	fq.done_word = &word;
	fq.done_value = 1;
	fosc_in fins[1] = {{&tx, &xh, "x"}};
	rc = fosc_call(c, &fq, fins, 1, &rep, &st);
	const char *h[] = {"tensor x is not in the client's GPU memory", NULL};
	expect_failure(rc, &st, FOS_CODE_FAILED_PRECONDITION, h);

	/* a word outside its allocation, a misaligned one, value 0 */
	uint16_t *dX = standin_dev_buf(1, sizeof x, x), *dY = standin_dev_buf(2, sizeof(uint16_t) * M * N, NULL);
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), dy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY);
	fos_tensor *outs[] = {&dy};
	static const char *const names[] = {"y"};
	fosc_shm_outs so;
	fins[0].in = &dx;
	struct {
		uint64_t off;
		uint32_t value;
		const char *want;
	} bad[] = {{4096, 1, "lie outside the client's GPU allocation"},
		   {6, 1, "done_word.offset 6 is not a multiple of 4"},
		   {8, 0, "done_value is 0"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		Fos__CudaRef wb = word;
		wb.offset = bad[i].off;
		fq.done_word = &wb;
		fq.done_value = bad[i].value;
		fq.n_shm_outputs = 0;
		ASSERT_OK(fosc_cuda_outputs(c, &fq, &so, names, outs, 1, &st), st);
		rc = fosc_call(c, &fq, fins, 1, &rep, &st);
		const char *want[] = {bad[i].want, NULL};
		expect_failure(rc, &st, FOS_CODE_INVALID_ARGUMENT, want);
	}
	fos_health_info hi;
	ASSERT_OK(fos_health(c, &hi, &st), st); /* still serving */
	void *bufs[] = {words, dX, dY};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		(void)fos_cuda_release(c, bufs[i], &st);
	fos_close(c);
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_async_calls),
		cmocka_unit_test(test_async_failures),
		cmocka_unit_test(test_done_word_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
