/* test_fault_restart.c: fosd restarted under load. Client threads, each with a libfos handle that
 * re-puts its weights (fos_connect_opts.reput_weights), run forwards in a loop and compare every
 * result with the in-process reference; fosd is killed (SIGKILL) and started again on the same
 * socket, then stopped gracefully (SIGTERM) and started again. The handles reconnect by
 * themselves, put their weights again when the new daemon answers NOT_FOUND, and go on with
 * bit-identical results; the only errors they see are UNAVAILABLE or DEADLINE_EXCEEDED while no
 * daemon runs. Without re-put, a handle gets NOT_FOUND after a restart. */
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
#include "support_trust.h"
#include "support_assert.h"

enum { T = 4 };

typedef struct worker {
	const char *url;
	tt_weight w;
	atomic_int *stop;
	atomic_int ok_total;      /* forwards with the right result */
	int wrong, unexpected, transient;
	uint64_t reputs;
	int last_code;
	char last_msg[600];
} worker;

static void *worker_main(void *p)
{
	worker *a = p;
	fos_connect_opts o;
	memset(&o, 0, sizeof o);
	o.timeout_ms = 3000;
	o.reput_weights = 1;
	fos_client *c;
	fos_status st;
	if (fos_connect_with(a->url, &o, &c, &st)) {
		a->unexpected++;
		snprintf(a->last_msg, sizeof a->last_msg, "connect: %s", st.message);
		return NULL;
	}
	if (tt_weight_put(c, &a->w, 0, &st)) {
		a->unexpected++;
		snprintf(a->last_msg, sizeof a->last_msg, "put: %s", st.message);
		fos_close(c);
		return NULL;
	}
	while (!atomic_load(a->stop)) {
		int rc = tt_weight_check(c, &a->w, &st);
		if (rc == FOS_CODE_OK) {
			atomic_fetch_add(&a->ok_total, 1);
			continue;
		}
		if (rc == FOS_CODE_DATA_LOSS && strstr(st.message, "differs")) {
			a->wrong++;
		} else if (rc == FOS_CODE_UNAVAILABLE || rc == FOS_CODE_DEADLINE_EXCEEDED) {
			a->transient++;
			usleep(20 * 1000);
		} else {
			a->unexpected++;
		}
		a->last_code = rc;
		snprintf(a->last_msg, sizeof a->last_msg, "%s", st.message);
	}
	a->reputs = fos_reput_count(c);
	fos_close(c);
	return NULL;
}

/* Waits until every worker has made progress past the counts in before[]. */
static void wait_progress(worker *w, const int *before, int more)
{
	uint64_t t0 = tsrv_now_ms();
	for (int i = 0; i < T; i++)
		while (atomic_load(&w[i].ok_total) < before[i] + more) {
			if (tsrv_now_ms() - t0 > 20000)
				fail_msg("worker %d made no progress (%d ok; last %s: %s)", i, atomic_load(&w[i].ok_total),
					 fos_code_name(w[i].last_code), w[i].last_msg);
			usleep(10 * 1000);
		}
}

static void test_restart_under_load(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--workers", "2", "--drain-timeout", "10s", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	atomic_int stop = 0;
	worker w[T];
	pthread_t th[T];
	for (int i = 0; i < T; i++) {
		memset(&w[i], 0, sizeof w[i]);
		char name[32];
		snprintf(name, sizeof name, "restart/w%d", i);
		assert_int_equal(tt_weight_make(&w[i].w, name, 256, 256, 128, 40 + (uint64_t)i), 0);
		w[i].url = s.url;
		w[i].stop = &stop;
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	int before[T];
	for (int i = 0; i < T; i++)
		before[i] = 0;
	wait_progress(w, before, 5);

	/* killed without warning, started again */
	for (int i = 0; i < T; i++)
		before[i] = atomic_load(&w[i].ok_total);
	assert_int_equal(tt_restart(&s, SIGKILL, args), 0);
	wait_progress(w, before, 5);

	/* drained, started again */
	for (int i = 0; i < T; i++)
		before[i] = atomic_load(&w[i].ok_total);
	assert_int_equal(tt_restart(&s, SIGTERM, args), 0);
	wait_progress(w, before, 5);

	atomic_store(&stop, 1);
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < T; i++) {
		if (w[i].wrong || w[i].unexpected)
			fail_msg("worker %d: %d wrong results, %d unexpected errors (last %s: %s)", i, w[i].wrong,
				 w[i].unexpected, fos_code_name(w[i].last_code), w[i].last_msg);
		assert_true(w[i].reputs >= 2); /* once per restart */
	}
	/* the new daemon holds every weight, bit-identical */
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	for (int i = 0; i < T; i++)
		ASSERT_OK(tt_weight_check(c, &w[i].w, &st), st);
	fos_close(c);
	for (int i = 0; i < T; i++)
		tt_weight_free(&w[i].w);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

static void test_without_reput(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "plain", 128, 128, 128, 9), 0);
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	ASSERT_OK(tt_weight_put(c, &w, 0, &st), st);
	assert_int_equal(tt_restart(&s, SIGKILL, NULL), 0);
	/* the handle reconnects; the weight is gone and nothing puts it back */
	int rc;
	uint64_t t0 = tsrv_now_ms();
	while ((rc = tt_weight_check(c, &w, &st)) == FOS_CODE_UNAVAILABLE && tsrv_now_ms() - t0 < 10000)
		usleep(20 * 1000);
	assert_int_equal(rc, FOS_CODE_NOT_FOUND);
	assert_int_equal(fos_reput_count(c), 0);
	/* dropping a weight through a re-put handle forgets it: NOT_FOUND stays NOT_FOUND */
	fos_close(c);
	fos_connect_opts o;
	memset(&o, 0, sizeof o);
	o.reput_weights = 1;
	ASSERT_OK(fos_connect_with(s.url, &o, &c, &st), st);
	ASSERT_OK(tt_weight_put(c, &w, 0, &st), st);
	ASSERT_OK(fos_drop_weight(c, "plain", &st), st);
	assert_int_equal(tt_weight_check(c, &w, &st), FOS_CODE_NOT_FOUND);
	assert_int_equal(fos_reput_count(c), 0);
	fos_close(c);
	tt_weight_free(&w);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restart_under_load),
		cmocka_unit_test(test_without_reput),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
