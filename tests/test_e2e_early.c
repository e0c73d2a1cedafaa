/* test_e2e_early.c: early answers (PROTOCOL.md "Early answers") on a machine without a GPU, through
 * libfos against a fosd run in this process whose cpu backend stands in for a GPU. Its "CUDA IPC
 * handles" are the fake driver's (support_fake_cuda.c), whose allocations here are host buffers,
 * so fosd reads and writes them in place; its events are counters; and its settle (the lane's sync
 * after a recorded done event) waits until the client has its reply. So: a call ordered on a
 * stream with FOS_CUDA_ORDER_OUTPUTS is answered before its lane settles (were it answered after,
 * that settle would wait for a reply that never comes first: a timeout, and the test fails); no
 * later request's op starts before that settle ends; the stream is made to wait for the lane's
 * done event; PutWeight, Forward with and without a context, Backward and Linear are answered early
 * and give the in-process reference's bits; a call with a result inline is answered the usual way;
 * and the request's device mappings are closed only after its settle. */
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

#define M 272 /* above FOSD_TIER_MAX_M: a small forward reading the decoded tier syncs before it answers */
#define K 128
#define N 96

static fosd_server g_srv;
static fosd_config g_cfg;
static char g_url[128];
static fos_backend g_cpu; /* the cpu backend's own functions, before the stand-ins */

/* ---- the stand-in backend's state (under g_mu) ----------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_replies;           /* calls the client saw answered (set by the test) */
static int g_armed = -1;        /* g_replies when the last done event was recorded, -1: none since */
static int g_in_settle;         /* a settle after a done event is in progress */
static int g_early_settles;     /* settles that found the reply already with the client */
static int g_late_settles;      /* settles that timed out waiting for it */
static int g_ops_during_settle; /* requests whose op began while a settle was in progress */
static int g_done_records, g_maps_open, g_closed_in_settle;

static void client_got_reply(void)
{
	pthread_mutex_lock(&g_mu);
	g_replies++;
	pthread_cond_broadcast(&g_cv);
	pthread_mutex_unlock(&g_mu);
}

/* The lane's settle: after a done event, it waits (up to 3 s) for the client to have the reply,
 * then stays 30 ms more, so that a request the client sends at once arrives meanwhile. */
static int s_sync(fos_backend *be, fos_err *e)
{
	int rc = g_cpu.sync(be, e);
	pthread_mutex_lock(&g_mu);
	if (g_armed >= 0) {
		int at = g_armed;
		g_armed = -1;
		g_in_settle = 1;
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 3;
		while (g_replies <= at)
			if (pthread_cond_timedwait(&g_cv, &g_mu, &t) == ETIMEDOUT)
				break;
		if (g_replies > at)
			g_early_settles++;
		else
			g_late_settles++;
		pthread_mutex_unlock(&g_mu);
		usleep(30 * 1000);
		pthread_mutex_lock(&g_mu);
		g_in_settle = 0;
	}
	pthread_mutex_unlock(&g_mu);
	return rc;
}

static int s_done_handle(fos_backend *be, unsigned char h[64], fos_err *e)
{
	(void)be, (void)e;
	memset(h, 0xD5, 64);
	return FOS_OK;
}

static int s_done_record(fos_backend *be, fos_err *e)
{
	(void)be, (void)e;
	pthread_mutex_lock(&g_mu);
	g_done_records++;
	g_armed = g_replies;
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

/* A handle names (base, buffer id) of one of the fake driver's allocations: host memory here. */
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
	pthread_mutex_lock(&g_mu);
	g_maps_open++;
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

static void s_ipc_close(fos_backend *be, void *base)
{
	(void)be, (void)base;
	pthread_mutex_lock(&g_mu);
	g_maps_open--;
	g_closed_in_settle += g_in_settle;
	pthread_mutex_unlock(&g_mu);
}

/* Every ordered call's op begins by making the lane wait for the client's event. */
static int s_ev_wait(fos_backend *be, void *ev, fos_err *e)
{
	(void)be, (void)ev, (void)e;
	pthread_mutex_lock(&g_mu);
	g_ops_during_settle += g_in_settle;
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

/* ---- fixtures ---------------------------------------------------------------------------------- */

/* The stand-in backend's hooks over support_standin.c's (which starts the fosd around them). */
static void hooks(fos_backend *be)
{
	be->sync = s_sync;
	be->done_event_handle = s_done_handle;
	be->done_event_record = s_done_record;
	be->ipc_open = s_ipc_open;
	be->ipc_close = s_ipc_close;
	be->ipc_event_wait = s_ev_wait;
}

static int setup(void **state)
{
	(void)state;
	return standin_start(&g_srv, &g_cfg, "early", g_url, sizeof g_url, &g_cpu, hooks);
}

static int teardown(void **state)
{
	(void)state;
	standin_stop(&g_srv, &g_cfg);
	return 0;
}

/* ---- checks -------------------------------------------------------------------------------------- */

static void expect_early(int before_settles, int before_waits, const char *what)
{
	pthread_mutex_lock(&g_mu);
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += 5;
	while (g_early_settles + g_late_settles == before_settles && !pthread_cond_timedwait(&g_cv, &g_mu, &t))
		;
	int late = g_late_settles, early = g_early_settles;
	pthread_mutex_unlock(&g_mu);
	if (late)
		fail_msg("%s: the lane settled before the client had its reply", what);
	if (early != before_settles + 1)
		fail_msg("%s: not answered early (%d settles after a done event)", what, early - before_settles);
	assert_int_equal(g_waits, before_waits + 1); /* the stream waited for fosd's event */
}

/* One ordered call: run it, tell the stand-in its reply came, check it was answered early. */
#define EARLY(call, what)                                                                    \
	do {                                                                                 \
		int s0_ = g_early_settles + g_late_settles, w0_ = g_waits;                   \
		fos_status st_;                                                              \
		int rc_ = (call);                                                            \
		client_got_reply();                                                          \
		if (rc_ != FOS_CODE_OK)                                                      \
			fail_msg("%s: %s", what, st_.message);                               \
		expect_early(s0_, w0_, what);                                                \
	} while (0)

static void test_early_answers(void **state)
{
	(void)state;
	fake_reset();
	fosc_cuda_api drv = g_fake;
	drv.IpcOpenEventHandle = f_open_event;
	drv.StreamWaitEvent = f_wait_event;
	fosc_cuda_override(&drv);
	static uint16_t w[N * K], x[M * K], dy[M * N], b[N];
	tsrv_fill_bf16(w, N * K, 41, 0.05f);
	tsrv_fill_bf16(x, M * K, 42, 1.0f);
	tsrv_fill_bf16(dy, M * N, 43, 0.1f);
	tsrv_fill_bf16(b, N, 44, 0.5f);
	uint16_t ref_y[M * N], ref_dx[M * K], ref_dw[N * K], ref_db[N];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(x, w, b, dy, M, N, K, &o, ref_y, ref_dx, ref_dw, ref_db), 0);

	fos_client *c = NULL;
	fos_status st;
	ASSERT_OK(fos_connect(g_url, NULL, 20000, &c, &st), st);
	fos_health_info hi;
	ASSERT_OK(fos_health(c, &hi, &st), st); /* fosd's GPU: the fake driver's */
	void *stream = (void *)(uintptr_t)0x5;
	ASSERT_OK(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS, &st), st);
	uint16_t *dW = standin_dev_buf(0, sizeof w, w), *dX = standin_dev_buf(1, sizeof x, x),
		 *dDY = standin_dev_buf(2, sizeof dy, dy), *dB = standin_dev_buf(3, sizeof b, b),
		 *dY = standin_dev_buf(4, sizeof ref_y, NULL), *dGX = standin_dev_buf(5, sizeof ref_dx, NULL),
		 *dGW = standin_dev_buf(6, sizeof ref_dw, NULL), *dGB = standin_dev_buf(7, sizeof ref_db, NULL);
	fos_tensor tw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW), tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX),
		   tdy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dDY), tb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dB),
		   ty = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY), tgx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dGX),
		   tgw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dGW), tgb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dGB);

	EARLY(fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st_), "PutWeight of a device W");
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	EARLY(fos_forward(c, "w", &tx, &tb, &fo, &ty, &ctx, &st_), "Forward saving a context");
	assert_memory_equal(dY, ref_y, sizeof ref_y);
	EARLY(fos_backward(c, &ctx, &tdy, NULL, &tgx, &tgw, &tgb, &st_), "Backward");
	assert_memory_equal(dGX, ref_dx, sizeof ref_dx);
	assert_memory_equal(dGW, ref_dw, sizeof ref_dw);
	assert_memory_equal(dGB, ref_db, sizeof ref_db);
	memset(dY, 0, sizeof ref_y);
	EARLY(fos_forward(c, "w", &tx, &tb, NULL, &ty, NULL, &st_), "Forward");
	assert_memory_equal(dY, ref_y, sizeof ref_y);
	memset(dGW, 0, sizeof ref_dw);
	EARLY(fos_linear(c, &tx, &tw, &tb, &tdy, NULL, &ty, &tgx, &tgw, &tgb, &st_), "Linear");
	assert_memory_equal(dY, ref_y, sizeof ref_y);
	assert_memory_equal(dGW, ref_dw, sizeof ref_dw);
	assert_true(g_done_records >= 5);

	/* Y inline in the reply: answered the usual way (no done event, no wait) */
	int records = g_done_records, waits = g_waits;
	uint16_t y_host[M * N];
	fos_tensor yh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_host);
	ASSERT_OK(fos_forward(c, "w", &tx, &tb, NULL, &yh, NULL, &st), st);
	client_got_reply();
	assert_memory_equal(y_host, ref_y, sizeof ref_y);
	assert_int_equal(g_done_records, records);
	assert_int_equal(g_waits, waits);

	/* a second call sent the moment the first was answered did not start during its settle, and
	 * no mapping was closed during a settle */
	assert_int_equal(g_ops_during_settle, 0);
	assert_int_equal(g_closed_in_settle, 0);
	assert_true(g_maps_open > 0);
	void *bufs[] = {dW, dX, dDY, dB, dY, dGX, dGW, dGB};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		ASSERT_OK(fos_cuda_release(c, bufs[i], &st), st);
	ASSERT_OK(fos_drop_weight(c, "w", &st), st); /* a round trip: the releases were served */
	assert_int_equal(g_maps_open, 0);
	fos_close(c);
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		free(bufs[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_early_answers),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
