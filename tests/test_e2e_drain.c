/* test_e2e_drain.c: graceful shutdown of a real fosd. SIGTERM (and SIGINT) while clients keep
 * sending: requests in progress finish with correct results, later ones get UNAVAILABLE (or find
 * no server), the daemon exits 0 and says it drained. A long request in flight at the signal is
 * answered, not dropped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"

enum { M = 256, N = 256, K = 256, THREADS = 4 };

static uint16_t g_w[N * K], g_x[THREADS][M * K], g_y[THREADS][M * N];

typedef struct load_arg {
	const char *url;
	int idx;
	atomic_int *stop;
	int ok, wrong, unavailable, other;
	int last_code;
	char last_msg[600];
} load_arg;

static void *load_main(void *p)
{
	load_arg *a = p;
	fos_client *c;
	fos_status st;
	if (fos_connect(a->url, NULL, 3000, &c, &st)) {
		a->other++;
		snprintf(a->last_msg, sizeof a->last_msg, "connect: %s", st.message);
		return NULL;
	}
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x[a->idx]);
	uint16_t *y = malloc(M * N * 2);
	while (!atomic_load(a->stop)) {
		fos_tensor ty = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y);
		int rc = fos_forward(c, "w", &x, NULL, NULL, &ty, NULL, &st);
		if (rc == FOS_CODE_OK) {
			a->ok++;
			if (memcmp(y, g_y[a->idx], sizeof g_y[0]))
				a->wrong++;
			continue;
		}
		a->last_code = rc;
		snprintf(a->last_msg, sizeof a->last_msg, "%s", st.message);
		if (rc == FOS_CODE_UNAVAILABLE || rc == FOS_CODE_DEADLINE_EXCEEDED)
			a->unavailable++;
		else
			a->other++;
		break; /* the server is going away */
	}
	free(y);
	fos_close(c);
	return NULL;
}

static void prepare(void)
{
	tsrv_fill_bf16(g_w, N * K, 1, 0.05f);
	fos_linear_opts o = fos_linear_opts_default();
	for (int t = 0; t < THREADS; t++) {
		tsrv_fill_bf16(g_x[t], M * K, 10 + (uint64_t)t, 1.0f);
		assert_int_equal(tsrv_ref_linear(g_x[t], g_w, NULL, NULL, M, N, K, &o, g_y[t], NULL, NULL, NULL), 0);
	}
}

static void put_w(const tsrv *s)
{
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(s->url, NULL, 10000, &c, &st), 0);
	fos_tensor w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	assert_int_equal(fos_put_weight(c, "w", 1, &w, NULL, NULL, &st), 0);
	fos_close(c);
}

static void drain_under_load(int sig)
{
	prepare();
	tsrv s;
	const char *args[] = {"--workers", "2", "--drain-timeout", "20s", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	put_w(&s);
	atomic_int stop = 0;
	pthread_t th[THREADS];
	load_arg a[THREADS];
	for (int t = 0; t < THREADS; t++) {
		memset(&a[t], 0, sizeof a[t]);
		a[t].url = s.url;
		a[t].idx = t;
		a[t].stop = &stop;
		assert_int_equal(pthread_create(&th[t], NULL, load_main, &a[t]), 0);
	}
	usleep(300 * 1000);
	uint64_t t0 = tsrv_now_ms();
	int status = tsrv_stop(&s, sig, 15000);
	uint64_t took = tsrv_now_ms() - t0;
	atomic_store(&stop, 1);
	int ok = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		ok += a[t].ok;
		if (a[t].wrong || a[t].other)
			fail_msg("thread %d: %d wrong results, %d unexpected errors (last %s: %s)", t, a[t].wrong,
				 a[t].other, fos_code_name(a[t].last_code), a[t].last_msg);
	}
	if (status != 0)
		tsrv_dump_log(&s);
	assert_int_equal(status, 0);
	assert_true(ok > 0);
	assert_true(took < 10000);
	assert_true(tsrv_log_contains(&s, sig == SIGINT ? "SIGINT: draining" : "SIGTERM: draining"));
	assert_true(tsrv_log_contains(&s, "drained: all requests answered"));
	tsrv_cleanup(&s);
}

static void test_sigterm_under_load(void **state)
{
	(void)state;
	drain_under_load(SIGTERM);
}

static void test_sigint_under_load(void **state)
{
	(void)state;
	drain_under_load(SIGINT);
}

/* ---- a long request in flight when the signal comes ----------------------------------------- */

enum { BIG = 2048 };

typedef struct long_arg {
	const char *url;
	uint16_t *x;
	int rc;
	char msg[512];
	fos_tensor y;
} long_arg;

static void *long_main(void *p)
{
	long_arg *a = p;
	fos_client *c;
	fos_status st;
	a->rc = fos_connect(a->url, NULL, 60000, &c, &st);
	if (a->rc) {
		snprintf(a->msg, sizeof a->msg, "%s", st.message);
		return NULL;
	}
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, BIG, BIG, a->x);
	a->y = fos_tensor_out();
	a->rc = fos_linear(c, &x, &x, NULL, &x, NULL, &a->y, NULL, NULL, NULL, &st);
	snprintf(a->msg, sizeof a->msg, "%s", st.message);
	fos_close(c);
	return NULL;
}

static void test_long_request_finishes(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--log-level", "debug", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	long_arg a;
	memset(&a, 0, sizeof a);
	a.url = s.url;
	a.x = malloc((size_t)BIG * BIG * 2);
	tsrv_fill_bf16(a.x, (size_t)BIG * BIG, 5, 1.0f);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, long_main, &a), 0);
	/* wait until the daemon is working on it */
	uint64_t t0 = tsrv_now_ms();
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(s.url, NULL, 10000, &c, &st), 0);
	/* The linear and this stats request make 2; a Health whose reply is still being sent (from a
	 * connect) can make a passing 2 as well, so ask for 2 in 5 polls in a row, 10 ms apart: a
	 * Health finishes in microseconds, the 2048^3 linear takes seconds. */
	for (int seen = 0; seen < 5;) {
		fos_stats_info si;
		assert_int_equal(fos_stats(c, &si, &st), 0);
		seen = si.inflight >= 2 ? seen + 1 : 0;
		assert_true(tsrv_now_ms() - t0 < 20000);
		usleep(10000);
	}
	fos_close(c);
	int status = tsrv_stop(&s, SIGTERM, 30000);
	pthread_join(th, NULL);
	if (status != 0 || a.rc != 0)
		tsrv_dump_log(&s);
	assert_int_equal(status, 0);
	if (a.rc)
		fail_msg("the in-flight linear got %s: %s", fos_code_name(a.rc), a.msg);
	/* and its result is right */
	uint16_t *ref = malloc((size_t)BIG * BIG * 2);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(a.x, a.x, NULL, NULL, BIG, BIG, BIG, &o, ref, NULL, NULL, NULL), 0);
	assert_memory_equal(a.y.data, ref, (size_t)BIG * BIG * 2);
	assert_true(tsrv_log_contains(&s, "SIGTERM: draining 1 request"));
	free(ref);
	free(a.y.data);
	free(a.x);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigterm_under_load),
		cmocka_unit_test(test_sigint_under_load),
		cmocka_unit_test(test_long_request_finishes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
