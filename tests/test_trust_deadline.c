/* test_trust_deadline.c: work nobody waits for is dropped early. A queued request whose deadline
 * passes is answered DEADLINE_EXCEEDED at its deadline, while the request ahead of it still runs
 * (not when a worker reaches it). A request taken by a second worker that waits for the backend
 * past its deadline is answered then and never runs (its weight is not cached). A request whose
 * client vanished before it ran is dropped without running. The daemon's cache is intact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

enum { SLOW = 1024 };
static uint16_t *g_big; /* SLOW x SLOW, shared by x, w and dy of the slow request */
static uint16_t g_small[128 * 128];

/* Starts a slow one-shot Linear (forward + backward, SLOW^3) in the background. */
static void slow_start(tt_async *a, const char *url)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
	Fos__Tensor tx, tw, tdy;
	lr.x = &tx, lr.w = &tw, lr.dy = &tdy;
	rq.op_case = FOS__REQUEST__OP_LINEAR;
	rq.linear = &lr;
	rq.id = 1;
	tt_tensor ts[3] = {{&tx, FOS__DTYPE__DTYPE_BF16, 2, {SLOW, SLOW}, g_big},
			   {&tw, FOS__DTYPE__DTYPE_BF16, 2, {SLOW, SLOW}, g_big},
			   {&tdy, FOS__DTYPE__DTYPE_BF16, 2, {SLOW, SLOW}, g_big}};
	assert_int_equal(tt_async_start(a, url, &rq, ts, 3, 60000), 0);
}

/* A PutWeight of g_small as name, with a deadline. */
static Fos__Request *put_req(Fos__Request *rq, Fos__PutWeightRequest *pw, Fos__Tensor *tw, tt_tensor *t,
			     const char *name, uint32_t deadline_ms)
{
	fos__request__init(rq);
	fos__put_weight_request__init(pw);
	rq->op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq->put_weight = pw;
	rq->id = 2;
	rq->deadline_ms = deadline_ms;
	pw->name = (char *)name;
	pw->version = 1;
	pw->w = tw;
	*t = (tt_tensor){tw, FOS__DTYPE__DTYPE_BF16, 2, {128, 128}, g_small};
	return rq;
}

/* Waits until the slow request runs on the lane. */
static void wait_running(const char *url)
{
	if (tt_wait_lanes_busy(url, 1, 10000))
		fail_msg("the slow request did not start");
}

static int cached(const char *url, const char *name)
{
	fos_client *c = tt_connect(url, NULL);
	fos_weight_info *l;
	size_t n;
	fos_status st;
	int found = 0;
	if (!fos_list_weights(c, &l, &n, &st)) {
		for (size_t i = 0; i < n; i++)
			found |= !strcmp(l[i].name, name);
		free(l);
	}
	fos_close(c);
	return found;
}

static void prepare(void)
{
	if (!g_big) {
		g_big = malloc((size_t)SLOW * SLOW * 2);
		tsrv_fill_bf16(g_big, (size_t)SLOW * SLOW, 1, 0.1f);
		tsrv_fill_bf16(g_small, 128 * 128, 2, 0.05f);
	}
}

static void test_queued_past_deadline(void **state)
{
	(void)state;
	prepare();
	tsrv s;
	const char *args[] = {"--workers", "1", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	tt_async slow;
	slow_start(&slow, s.url);
	wait_running(s.url); /* the slow one is running; the next one queues behind it */
	Fos__Request rq;
	Fos__PutWeightRequest pw;
	Fos__Tensor tw;
	tt_tensor t;
	put_req(&rq, &pw, &tw, &t, "queued", 100);
	char msg[600];
	uint64_t t0 = tsrv_now_ms();
	int code = tt_raw_call(s.url, &rq, &t, 1, 30000, msg, sizeof msg, NULL);
	uint64_t answered = tsrv_now_ms();
	int slow_code = tt_async_wait(&slow, NULL, 0);
	assert_int_equal(slow_code, 0);
	assert_int_equal(code, FOS_CODE_DEADLINE_EXCEEDED);
	/* answered at its deadline, before the slow request ahead of it finished */
	if (!(answered < slow.t_done_ms))
		fail_msg("answered after %llu ms, the slow request finished %llu ms after it started",
			 (unsigned long long)(answered - t0), (unsigned long long)(slow.t_done_ms - slow.t_start_ms));
	assert_true(answered - t0 < 5000);
	assert_int_equal(cached(s.url, "queued"), 0); /* never ran */
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

static void test_backend_wait_past_deadline(void **state)
{
	(void)state;
	prepare();
	tsrv s;
	const char *args[] = {"--workers", "2", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	tt_async slow;
	slow_start(&slow, s.url);
	wait_running(s.url); /* worker 1 holds the backend; worker 2 takes the next request and waits */
	Fos__Request rq;
	Fos__PutWeightRequest pw;
	Fos__Tensor tw;
	tt_tensor t;
	put_req(&rq, &pw, &tw, &t, "late", 100);
	char msg[600];
	int code = tt_raw_call(s.url, &rq, &t, 1, 30000, msg, sizeof msg, NULL);
	uint64_t answered = tsrv_now_ms();
	assert_int_equal(tt_async_wait(&slow, NULL, 0), 0);
	assert_int_equal(code, FOS_CODE_DEADLINE_EXCEEDED);
	assert_true(answered < slow.t_done_ms);
	assert_int_equal(cached(s.url, "late"), 0);
	/* without a deadline the same request runs */
	put_req(&rq, &pw, &tw, &t, "late", 0);
	assert_int_equal(tt_raw_call(s.url, &rq, &t, 1, 30000, msg, sizeof msg, NULL), 0);
	assert_int_equal(cached(s.url, "late"), 1);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

static void test_client_gone_before_run(void **state)
{
	(void)state;
	prepare();
	tsrv s;
	const char *args[] = {"--workers", "1", "--log-level", "debug", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	tt_async slow;
	slow_start(&slow, s.url);
	wait_running(s.url);
	/* a bare client sends a put, waits until fosd has it, and vanishes */
	Fos__Request rq;
	Fos__PutWeightRequest pw;
	Fos__Tensor tw;
	tt_tensor t;
	put_req(&rq, &pw, &tw, &t, "ghost", 0);
	rq.client_id = 0x1234;
	size_t len;
	uint8_t *body = tt_build(&rq, &t, 1, &len);
	assert_non_null(body);
	int fd = tt_ipc_connect(s.url);
	assert_true(fd >= 0);
	assert_int_equal(tt_sp_handshake(fd), 0);
	assert_int_equal(tt_sp_send_partial(fd, 1, body, len, (size_t)-1), 0);
	free(body);
	usleep(100 * 1000);
	close(fd);
	assert_int_equal(tt_async_wait(&slow, NULL, 0), 0);
	uint64_t t0 = tsrv_now_ms();
	while (!tsrv_log_contains(&s, "the client is gone") && tsrv_now_ms() - t0 < 5000)
		usleep(10 * 1000);
	assert_true(tsrv_log_contains(&s, "the client is gone"));
	assert_int_equal(cached(s.url, "ghost"), 0);
	/* the same request id from a live client later runs normally */
	rq.client_id = 0x1234;
	char msg[600];
	assert_int_equal(tt_raw_call(s.url, &rq, &t, 1, 30000, msg, sizeof msg, NULL), 0);
	assert_int_equal(cached(s.url, "ghost"), 1);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

static int teardown(void **state)
{
	(void)state;
	free(g_big);
	g_big = NULL;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_queued_past_deadline),
		cmocka_unit_test(test_backend_wait_past_deadline),
		cmocka_unit_test(test_client_gone_before_run),
	};
	return cmocka_run_group_tests(tests, NULL, teardown);
}
