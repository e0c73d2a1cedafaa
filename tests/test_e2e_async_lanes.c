/* test_e2e_async_lanes.c: asynchronous calls (fos.h FOS_CUDA_ORDER_ASYNC) of two connections on a
 * fosd of two lanes, on a machine without a GPU: the in-process cpu fosd of support_standin.c
 * stands in for the GPU one, each lane a cpu backend instance with the test's hooks, so the test
 * sees which instance (lane) ran each op, waited on which mark and freed what.
 *
 * What it shows (executor.c "Settling"): the two connections' requests run at the same time on two
 * lanes (the first op of each waits, in its input-event wait, until an op runs on the other lane:
 * run one after the other, they would not meet), each connection keeps one lane (fosd writes all
 * of one connection's done words from one instance), and every result is the CPU reference's bits.
 * A failed call of one connection is reported with its name at that connection's next call and
 * synchronizes only its own lane; the other connection's calls go on unsynchronized, with the
 * reference's bits. What one lane made and another reads is ordered: a forward on lane B of a
 * weight put asynchronously on lane A, and a backward on B of a context A saved, make B wait on
 * A's mark first. A weight replaced while another lane's forward of it is still pending is freed
 * only once that lane's work has completed (its marks held back, then let go). */
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
#include "executor.h"
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
#define LOGN 8192

static fosd_server g_srv;
static fosd_config g_cfg;
static char g_url[128];
static fos_backend g_cpu;
static fos_backend *g_free_be; /* the instance the caches free through */

/* ---- the stand-in lanes (under g_mu) ------------------------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_meet;                  /* op starts wait (3 s at most) until two lanes have one */
static fos_backend *g_met[2];       /* the instances that met */
static int g_met_n, g_missed;
static fos_backend *g_wl_be[LOGN]; /* done words written: by which instance, where, what */
static uint64_t g_wl_addr[LOGN];
static uint32_t g_wl_val[LOGN];
static int g_wl_n;
static fos_backend *g_wait_by[LOGN], *g_wait_on[LOGN]; /* mark waits: the waiter, the recorder */
static int g_mw_n;
static fos_backend *g_stuck; /* marks this instance records do not complete */
static int g_frees;          /* frees through the caches' instance */
static fos_backend *g_sync_be[16];
static int g_sync_n[16];

typedef struct mark {
	fos_backend *be; /* who recorded it last */
} mark;

static int s_ev_wait(fos_backend *be, void *ev, fos_err *e)
{
	(void)ev, (void)e;
	pthread_mutex_lock(&g_mu);
	if (g_meet) {
		if (g_met_n == 0 || (g_met_n == 1 && g_met[0] != be))
			g_met[g_met_n++] = be;
		pthread_cond_broadcast(&g_cv);
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 3;
		while (g_met_n < 2)
			if (pthread_cond_timedwait(&g_cv, &g_mu, &t) == ETIMEDOUT)
				break;
		g_missed += g_met_n < 2;
	}
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

static int s_write_u32(fos_backend *be, void *dst, uint32_t v, fos_err *e)
{
	(void)e;
	__atomic_store_n((uint32_t *)dst, v, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&g_mu);
	if (g_wl_n < LOGN) {
		g_wl_be[g_wl_n] = be;
		g_wl_addr[g_wl_n] = (uint64_t)(uintptr_t)dst;
		g_wl_val[g_wl_n++] = v;
	}
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

static int s_mark_record(fos_backend *be, void **ev, fos_err *e)
{
	if (!*ev && !(*ev = calloc(1, sizeof(mark))))
		return fos_seterr(e, FOS_ENOMEM, "out of memory");
	pthread_mutex_lock(&g_mu);
	((mark *)*ev)->be = be;
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

static int s_mark_done(fos_backend *be, void *ev)
{
	(void)be;
	pthread_mutex_lock(&g_mu);
	int done = ((mark *)ev)->be != g_stuck;
	pthread_mutex_unlock(&g_mu);
	return done;
}

static int g_mark_frees; /* marks destroyed */
static void s_mark_free(fos_backend *be, void *ev)
{
	(void)be;
	__atomic_fetch_add(&g_mark_frees, 1, __ATOMIC_SEQ_CST);
	free(ev);
}

static int s_mark_wait(fos_backend *be, void *ev, fos_err *e)
{
	(void)e;
	pthread_mutex_lock(&g_mu);
	if (g_mw_n < LOGN) {
		g_wait_by[g_mw_n] = be;
		g_wait_on[g_mw_n++] = ((mark *)ev)->be;
	}
	pthread_mutex_unlock(&g_mu);
	return FOS_OK;
}

static int s_sync(fos_backend *be, fos_err *e)
{
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < 16; i++)
		if (g_sync_be[i] == be || !g_sync_be[i]) {
			g_sync_be[i] = be;
			g_sync_n[i]++;
			break;
		}
	pthread_mutex_unlock(&g_mu);
	return g_cpu.sync(be, e);
}

static int syncs_of(fos_backend *be)
{
	pthread_mutex_lock(&g_mu);
	int n = 0;
	for (int i = 0; i < 16; i++)
		if (g_sync_be[i] == be)
			n = g_sync_n[i];
	pthread_mutex_unlock(&g_mu);
	return n;
}

static void s_free(fos_backend *be, void *p)
{
	if (p && be == g_free_be)
		__atomic_fetch_add(&g_frees, 1, __ATOMIC_SEQ_CST);
	g_cpu.free(be, p);
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
	return FOS_OK;
}

static void s_ipc_close(fos_backend *be, void *base)
{
	(void)be, (void)base;
}

static void hooks(fos_backend *be)
{
	be->sync = s_sync;
	be->free = s_free;
	be->ipc_open = s_ipc_open;
	be->ipc_close = s_ipc_close;
	be->ipc_event_wait = s_ev_wait;
	be->write_u32 = s_write_u32;
	be->mark_record = s_mark_record;
	be->mark_done = s_mark_done;
	be->mark_free = s_mark_free;
	be->mark_wait = s_mark_wait;
}

static int setup(void **state)
{
	(void)state;
	if (standin_start_lanes(&g_srv, &g_cfg, "alanes", g_url, sizeof g_url, &g_cpu, hooks, 2))
		return -1;
	g_free_be = fosd_srv_exec(&g_srv)->devs[0].free_be;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	standin_stop(&g_srv, &g_cfg);
	return 0;
}

/* ---- helpers ----------------------------------------------------------------------------------- */

/* The fake driver for a test, and a fresh log of done words (word buffers and their values start
 * again at the same addresses and 1). */
static void fake_async_driver(void)
{
	pthread_mutex_lock(&g_mu);
	g_wl_n = 0;
	pthread_mutex_unlock(&g_mu);
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
	ASSERT_OK(fos_set_cuda_order(c, stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS | FOS_CUDA_ORDER_ASYNC, &st),
		  st);
	return c;
}

#define ASYNC(call, what)                                      \
	do {                                                   \
		fos_status st_;                                \
		if ((call) != FOS_CODE_OK)                     \
			fail_msg("%s: %s", what, st_.message); \
	} while (0)

/* The instance that wrote every done word the client of stream waited on (one instance for all
 * of them, else the test fails). */
static fos_backend *writer_of(void *stream)
{
	fos_backend *be = NULL;
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_wv_n; i++) {
		if (g_wv_stream[i] != stream)
			continue;
		fos_backend *w = NULL;
		for (int j = 0; j < g_wl_n && !w; j++)
			if (g_wl_addr[j] == g_wv_addr[i] && g_wl_val[j] == g_wv_val[i])
				w = g_wl_be[j];
		if (!w || (be && w != be)) {
			pthread_mutex_unlock(&g_mu);
			fail_msg("stream %p: wait %d's word was written by %p, the earlier ones by %p", stream, i, (void *)w,
				 (void *)be);
		}
		be = w;
	}
	pthread_mutex_unlock(&g_mu);
	return be;
}

/* One connection's data: its weight, its results in one allocation (Y, dX, dW, db at 8 KiB steps)
 * and the CPU reference's. */
typedef struct side {
	fos_client *c;
	void *stream;
	const char *name;
	uint16_t w[N * K], ry[M * N], rdx[M * K], rdw[N * K], rdb[N];
	uint16_t *dW;
	uint8_t *dOut;
	fos_tensor tw, ty, tgx, tgw, tgb;
} side;

static uint16_t g_x[M * K], g_dy[M * N], g_b[N];
static uint16_t *g_dX, *g_dDY, *g_dB;
static fos_tensor g_tx, g_tdy, g_tb;

static void inputs(void)
{
	tsrv_fill_bf16(g_x, M * K, 82, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 83, 0.1f);
	tsrv_fill_bf16(g_b, N, 84, 0.5f);
	g_dX = standin_dev_buf(0, sizeof g_x, g_x);
	g_dDY = standin_dev_buf(1, sizeof g_dy, g_dy);
	g_dB = standin_dev_buf(2, sizeof g_b, g_b);
	g_tx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, g_dX);
	g_tdy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, g_dDY);
	g_tb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, g_dB);
}

static void inputs_end(void)
{
	free(g_dX);
	free(g_dDY);
	free(g_dB);
}

static void side_init(side *s, int slot, unsigned seed, void *stream, const char *name)
{
	memset(s, 0, sizeof *s);
	s->stream = stream;
	s->name = name;
	tsrv_fill_bf16(s->w, N * K, seed, 0.05f);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, s->w, g_b, g_dy, M, N, K, &o, s->ry, s->rdx, s->rdw, s->rdb), 0);
	s->dW = standin_dev_buf(slot, sizeof s->w, s->w);
	s->dOut = standin_dev_buf(slot + 1, 4 * 8192, NULL);
	s->tw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, s->dW);
	s->ty = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, s->dOut);
	s->tgx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, s->dOut + 8192);
	s->tgw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, s->dOut + 16384);
	s->tgb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, s->dOut + 24576);
	s->c = connect_async(stream);
}

static void side_expect(const side *s, const char *what)
{
	if (memcmp(s->dOut, s->ry, sizeof s->ry) || memcmp(s->dOut + 8192, s->rdx, sizeof s->rdx) ||
	    memcmp(s->dOut + 16384, s->rdw, sizeof s->rdw) || memcmp(s->dOut + 24576, s->rdb, sizeof s->rdb))
		fail_msg("%s: connection %s's results are not the reference's bits", what, s->name);
}

static void side_end(side *s)
{
	fos_status st;
	(void)fos_cuda_release(s->c, s->dW, &st);
	(void)fos_cuda_release(s->c, s->dOut, &st);
	(void)fos_cuda_release(s->c, g_dX, &st);
	(void)fos_cuda_release(s->c, g_dDY, &st);
	(void)fos_cuda_release(s->c, g_dB, &st);
	fos_close(s->c);
	free(s->dW);
	free(s->dOut);
}

/* Forward saving a context, then its backward: Y, dX, dW, db into s's allocation. */
static void fwd_bwd(side *s, const char *weight)
{
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	ASYNC(fos_forward(s->c, weight, &g_tx, &g_tb, &fo, &s->ty, &ctx, &st_), "forward");
	ASYNC(fos_backward(s->c, &ctx, &g_tdy, NULL, &s->tgx, &s->tgw, &s->tgb, &st_), "backward");
}

static void wait_until(int *flag_now, int want, int ms)
{
	for (int i = 0; i < ms && __atomic_load_n(flag_now, __ATOMIC_SEQ_CST) < want; i++)
		usleep(1000);
}

/* ---- tests ------------------------------------------------------------------------------------- */

static void test_two_lanes_at_once(void **state)
{
	(void)state;
	fake_async_driver();
	inputs();
	static side a, b;
	side_init(&a, 3, 91, (void *)(uintptr_t)0x11, "a");
	side_init(&b, 5, 92, (void *)(uintptr_t)0x12, "b");
	fos_status st;
	pthread_mutex_lock(&g_mu);
	g_meet = 1;
	g_met_n = g_missed = g_wl_n = 0;
	pthread_mutex_unlock(&g_mu);
	ASYNC(fos_put_weight(a.c, "wa", 1, &a.tw, NULL, NULL, &st_), "put a");
	ASYNC(fos_put_weight(b.c, "wb", 1, &b.tw, NULL, NULL, &st_), "put b");
	ASSERT_OK(fos_sync(a.c, &st), st);
	ASSERT_OK(fos_sync(b.c, &st), st);
	pthread_mutex_lock(&g_mu);
	g_meet = 0;
	int missed = g_missed, met = g_met_n;
	pthread_mutex_unlock(&g_mu);
	if (missed || met != 2)
		fail_msg("the two connections' puts did not run at once on two lanes (%d missed, %d lanes met)", missed, met);
	/* interleaved: each connection's forward, backward and Linear, a put inside a forward too */
	int mf0 = __atomic_load_n(&g_mark_frees, __ATOMIC_SEQ_CST), fr0 = __atomic_load_n(&g_frees, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 40; i++) {
		fwd_bwd(&a, "wa");
		fwd_bwd(&b, "wb");
		ASYNC(fos_linear(a.c, &g_tx, &a.tw, &g_tb, &g_tdy, NULL, &a.ty, &a.tgx, &a.tgw, &a.tgb, &st_), "linear a");
		ASYNC(fos_forward_put(b.c, "wb", 2 + (uint64_t)i, &b.tw, NULL, &g_tx, &g_tb, NULL, &b.ty, NULL, &st_),
		      "forward_put b");
	}
	ASSERT_OK(fos_sync(a.c, &st), st);
	ASSERT_OK(fos_sync(b.c, &st), st);
	side_expect(&a, "interleaved");
	side_expect(&b, "interleaved");
	/* the replaced weights and consumed contexts were freed, their marks kept for the next ones */
	wait_until(&g_frees, fr0 + 40, 3000);
	assert_true(__atomic_load_n(&g_frees, __ATOMIC_SEQ_CST) >= fr0 + 40);
	assert_int_equal(__atomic_load_n(&g_mark_frees, __ATOMIC_SEQ_CST), mf0);
	fos_backend *la = writer_of(a.stream), *lb = writer_of(b.stream);
	assert_non_null(la);
	assert_non_null(lb);
	if (la == lb)
		fail_msg("both connections' words were written by one lane");
	ASSERT_OK(fos_drop_weight(a.c, "wa", &st), st);
	ASSERT_OK(fos_drop_weight(b.c, "wb", &st), st);
	side_end(&a);
	side_end(&b);
	inputs_end();
}

static void test_failure_on_one_lane(void **state)
{
	(void)state;
	fake_async_driver();
	inputs();
	static side a, b;
	side_init(&a, 3, 93, (void *)(uintptr_t)0x21, "a");
	side_init(&b, 5, 94, (void *)(uintptr_t)0x22, "b");
	fos_status st;
	ASYNC(fos_put_weight(a.c, "wa", 1, &a.tw, NULL, NULL, &st_), "put a");
	ASYNC(fos_put_weight(b.c, "wb", 1, &b.tw, NULL, NULL, &st_), "put b");
	fwd_bwd(&a, "wa");
	fwd_bwd(&b, "wb");
	ASSERT_OK(fos_sync(a.c, &st), st);
	ASSERT_OK(fos_sync(b.c, &st), st);
	fos_backend *la = writer_of(a.stream), *lb = writer_of(b.stream);
	assert_true(la && lb && la != lb);
	int sa = syncs_of(la), sb = syncs_of(lb);
	memset(b.dOut, 0, 4 * 8192);
	ASYNC(fos_forward(a.c, "nope", &g_tx, NULL, NULL, &a.ty, NULL, &st_), "forward of an unknown weight");
	for (int i = 0; i < 20; i++)
		fwd_bwd(&b, "wb");
	ASSERT_OK(fos_sync(b.c, &st), st);
	int rc = fos_sync(a.c, &st);
	if (rc != FOS_CODE_NOT_FOUND || !strstr(st.message, "asynchronous Forward of weight 'nope' (request "))
		fail_msg("a's failure: code %d, \"%s\"", rc, st.message);
	side_expect(&b, "beside a failure");
	assert_int_equal(syncs_of(lb), sb); /* b's lane never synchronized */
	assert_true(syncs_of(la) > sa);     /* a's failure settled a's lane */
	fwd_bwd(&a, "wa");                  /* a goes on */
	ASSERT_OK(fos_sync(a.c, &st), st);
	side_expect(&a, "after its failure");
	ASSERT_OK(fos_drop_weight(a.c, "wa", &st), st);
	ASSERT_OK(fos_drop_weight(b.c, "wb", &st), st);
	side_end(&a);
	side_end(&b);
	inputs_end();
}

static void test_across_lanes(void **state)
{
	(void)state;
	fake_async_driver();
	inputs();
	static side a, b;
	side_init(&a, 3, 95, (void *)(uintptr_t)0x31, "a");
	side_init(&b, 5, 96, (void *)(uintptr_t)0x32, "b");
	memcpy(b.w, a.w, sizeof a.w); /* b reads a's weight: a's references */
	memcpy(b.ry, a.ry, sizeof a.ry);
	memcpy(b.rdx, a.rdx, sizeof a.rdx);
	memcpy(b.rdw, a.rdw, sizeof a.rdw);
	memcpy(b.rdb, a.rdb, sizeof a.rdb);
	fos_status st;
	/* each on its own lane first */
	ASYNC(fos_put_weight(b.c, "b0", 1, &b.tw, NULL, NULL, &st_), "put b0");
	ASYNC(fos_put_weight(a.c, "shared", 1, &a.tw, NULL, NULL, &st_), "put shared");
	ASSERT_OK(fos_sync(a.c, &st), st);
	ASSERT_OK(fos_sync(b.c, &st), st);
	fos_backend *la = writer_of(a.stream), *lb = writer_of(b.stream);
	assert_true(la && lb && la != lb);
	/* b's forward and backward of the weight a put, and b's backward of a context a saved */
	pthread_mutex_lock(&g_mu);
	g_mw_n = 0;
	pthread_mutex_unlock(&g_mu);
	fwd_bwd(&b, "shared");
	ASSERT_OK(fos_sync(b.c, &st), st);
	side_expect(&b, "b of a's weight");
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ctx;
	ASYNC(fos_forward(a.c, "shared", &g_tx, &g_tb, &fo, &a.ty, &ctx, &st_), "a's forward");
	ASSERT_OK(fos_sync(a.c, &st), st);
	memset(b.dOut, 0, 4 * 8192);
	memcpy(b.dOut, a.ry, sizeof a.ry); /* (Y is a's) */
	ASYNC(fos_backward(b.c, &ctx, &g_tdy, NULL, &b.tgx, &b.tgw, &b.tgb, &st_), "b's backward of a's context");
	ASSERT_OK(fos_sync(b.c, &st), st);
	side_expect(&b, "b's backward of a's context");
	assert_true(writer_of(b.stream) == lb);
	pthread_mutex_lock(&g_mu);
	int waits = 0, wrong = 0;
	for (int i = 0; i < g_mw_n; i++) {
		waits += g_wait_by[i] == lb && g_wait_on[i] == la;
		wrong += g_wait_by[i] == g_wait_on[i];
	}
	pthread_mutex_unlock(&g_mu);
	assert_int_equal(wrong, 0); /* a lane never waits on its own marks */
	assert_true(waits >= 2);    /* a's put before b's forward, a's context before b's backward */

	/* a replaces the weight while b's forward of it is pending: freed once b's work completed */
	enum { M2 = 272 };
	static uint16_t x2[M2 * K];
	tsrv_fill_bf16(x2, M2 * K, 97, 1.0f);
	uint16_t *dX2 = standin_dev_buf(7, sizeof x2, x2), *dY2 = standin_dev_buf(8, (size_t)M2 * N * 2, NULL);
	fos_tensor tx2 = fos_tensor_cuda(FOS_DTYPE_BF16, M2, K, dX2), ty2 = fos_tensor_cuda(FOS_DTYPE_BF16, M2, N, dY2);
	pthread_mutex_lock(&g_mu);
	g_stuck = lb;
	pthread_mutex_unlock(&g_mu);
	ASYNC(fos_forward(b.c, "shared", &tx2, NULL, NULL, &ty2, NULL, &st_), "b's forward, held");
	for (int i = 0; i < 500 && fosc_async_inflight(b.c); i++)
		usleep(2000);
	int f0 = __atomic_load_n(&g_frees, __ATOMIC_SEQ_CST);
	ASYNC(fos_put_weight(a.c, "shared", 2, &a.tw, NULL, NULL, &st_), "a's put of version 2");
	ASSERT_OK(fos_sync(a.c, &st), st);
	usleep(50 * 1000); /* the reaper polls a's lane meanwhile */
	int f1 = __atomic_load_n(&g_frees, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&g_mu);
	g_stuck = NULL;
	pthread_mutex_unlock(&g_mu);
	wait_until(&g_frees, f0 + 1, 3000);
	int f2 = __atomic_load_n(&g_frees, __ATOMIC_SEQ_CST);
	if (f1 != f0 || f2 <= f0)
		fail_msg("version 1 freed %s b's pending forward completed (frees %d, %d, %d)", f1 != f0 ? "before" : "never after",
			 f0, f1, f2);
	ASSERT_OK(fos_sync(b.c, &st), st);
	(void)fos_cuda_release(b.c, dX2, &st);
	(void)fos_cuda_release(b.c, dY2, &st);
	free(dX2);
	free(dY2);
	ASSERT_OK(fos_drop_weight(a.c, "shared", &st), st);
	ASSERT_OK(fos_drop_weight(b.c, "b0", &st), st);
	side_end(&a);
	side_end(&b);
	inputs_end();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_lanes_at_once),
		cmocka_unit_test(test_failure_on_one_lane),
		cmocka_unit_test(test_across_lanes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
