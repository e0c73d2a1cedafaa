/* test_dedup_bytes.c: the duplicate-request table (server/requests/dedup.c) stays within the bytes
 * it is given, whatever the number of requests: 64 bytes an id, so 64 KiB hold 1024 ids; past
 * them the oldest executed id is forgotten first, running requests are never forgotten, and a
 * table full of running requests registers no more (the request runs unprotected). The
 * dedup_bytes key sets it (config.c) and fosd refuses less than 64K. Not timed: expiry is driven
 * by the done times handed to the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dedup.h"
#include "util.h"

#define KIB 1024u

static struct fosd_request *slot(void)
{
	return (struct fosd_request *)calloc(1, 4096);
}

static void test_capacity_from_bytes(void **state)
{
	(void)state;
	fosd_dedup dd;
	fosd_dedup_stats st;
	assert_int_equal(fosd_dedup_init(&dd, 600000, 64 * KIB), 0);
	fosd_dedup_get_stats(&dd, &st);
	assert_int_equal(st.capacity, 1024);
	assert_int_equal(st.bytes, 64 * KIB);
	fosd_dedup_destroy(&dd);
	/* 100000 bytes: floor(100000 / 64) = 1562 ids, 99968 bytes */
	assert_int_equal(fosd_dedup_init(&dd, 600000, 100000), 0);
	fosd_dedup_get_stats(&dd, &st);
	assert_int_equal(st.capacity, 1562);
	assert_int_equal(st.bytes, 1562 * 64);
	fosd_dedup_destroy(&dd);
	/* below the minimum */
	assert_int_equal(fosd_dedup_init(&dd, 600000, 64 * KIB - 1), -1);
}

/* 200000 requests through a 64 KiB table with a 10-minute window: the table never holds more
 * than 1024 ids nor uses more than its bytes, the newest 1024 are remembered, the older ones
 * forgotten (a copy runs again). */
static void test_bound_under_many_requests(void **state)
{
	(void)state;
	fosd_dedup dd;
	fosd_dedup_stats st;
	assert_int_equal(fosd_dedup_init(&dd, 600000, 64 * KIB), 0);
	struct fosd_request *s = slot();
	int reg;
	const uint64_t total = 200000;
	for (uint64_t id = 1; id <= total; id++) {
		assert_int_equal(fosd_dedup_begin(&dd, 7 + (id & 3), id, s, &reg), FOSD_DEDUP_NEW);
		assert_int_equal(reg, 1);
		assert_null(fosd_dedup_end(&dd, 7 + (id & 3), id, fosd_now_ns()));
		if (id % 997 == 0) {
			fosd_dedup_get_stats(&dd, &st);
			assert_true(st.live <= 1024);
			assert_true(st.touched <= 64 * KIB);
		}
	}
	fosd_dedup_get_stats(&dd, &st);
	assert_int_equal(st.live, 1024);
	assert_int_equal(st.done, 1024);
	assert_int_equal(st.touched, 64 * KIB);
	assert_int_equal(st.evicted, total - 1024);
	/* the newest 1024 are known; the one before them is not */
	for (uint64_t id = total - 1023; id <= total; id++)
		assert_int_equal(fosd_dedup_begin(&dd, 7 + (id & 3), id, s, &reg), FOSD_DEDUP_DONE);
	uint64_t old = total - 1024;
	assert_int_equal(fosd_dedup_begin(&dd, 7 + (old & 3), old, s, &reg), FOSD_DEDUP_NEW);
	assert_int_equal(reg, 1);
	/* registering it forgot the oldest remembered one */
	uint64_t next = total - 1023;
	fosd_dedup_end(&dd, 7 + (old & 3), old, fosd_now_ns());
	assert_int_equal(fosd_dedup_begin(&dd, 7 + (next & 3), next, s, &reg), FOSD_DEDUP_NEW);
	fosd_dedup_destroy(&dd);
	free(s);
}

/* Running requests keep their entries: with all 1024 running, a new request is not registered;
 * finishing one makes room again; an abandoned one gives its entry back. */
static void test_running_not_evicted(void **state)
{
	(void)state;
	fosd_dedup dd;
	fosd_dedup_stats st;
	assert_int_equal(fosd_dedup_init(&dd, 600000, 64 * KIB), 0);
	struct fosd_request *s = slot(), *w = slot();
	int reg;
	for (uint64_t id = 0; id < 1024; id++) {
		assert_int_equal(fosd_dedup_begin(&dd, 1, id, s, &reg), FOSD_DEDUP_NEW);
		assert_int_equal(reg, 1);
	}
	assert_int_equal(fosd_dedup_begin(&dd, 1, 5000, s, &reg), FOSD_DEDUP_NEW);
	assert_int_equal(reg, 0);
	/* every running one is still known: a copy waits for it */
	assert_int_equal(fosd_dedup_begin(&dd, 1, 0, w, &reg), FOSD_DEDUP_WAIT);
	assert_ptr_equal(fosd_dedup_end(&dd, 1, 0, fosd_now_ns()), w);
	/* (1, 0) is done: the next new one takes its entry */
	assert_int_equal(fosd_dedup_begin(&dd, 1, 5001, s, &reg), FOSD_DEDUP_NEW);
	assert_int_equal(reg, 1);
	assert_int_equal(fosd_dedup_begin(&dd, 1, 0, s, &reg), FOSD_DEDUP_NEW);
	assert_int_equal(reg, 0);
	assert_int_equal(fosd_dedup_abandon(&dd, 1, 1), 1);
	assert_int_equal(fosd_dedup_begin(&dd, 1, 5002, s, &reg), FOSD_DEDUP_NEW);
	assert_int_equal(reg, 1);
	fosd_dedup_get_stats(&dd, &st);
	assert_int_equal(st.live, 1024);
	assert_int_equal(st.done, 0);
	assert_int_equal(st.evicted, 1);
	fosd_dedup_destroy(&dd);
	free(s);
	free(w);
}

/* Done ids past the window are forgotten and their entries reused (done times 10 s in the past
 * against a 1 s window). */
static void test_window_frees_entries(void **state)
{
	(void)state;
	fosd_dedup dd;
	fosd_dedup_stats st;
	assert_int_equal(fosd_dedup_init(&dd, 1000, 64 * KIB), 0);
	struct fosd_request *s = slot();
	int reg;
	uint64_t past = fosd_now_ns() - 10000000000ull;
	for (uint64_t id = 0; id < 500; id++)
		assert_int_equal(fosd_dedup_begin(&dd, 3, id, s, &reg), FOSD_DEDUP_NEW);
	for (uint64_t id = 0; id < 500; id++)
		fosd_dedup_end(&dd, 3, id, past);
	assert_int_equal(fosd_dedup_begin(&dd, 3, 0, s, &reg), FOSD_DEDUP_NEW); /* expired */
	fosd_dedup_get_stats(&dd, &st);
	assert_int_equal(st.live, 1);
	assert_int_equal(st.done, 0);
	assert_int_equal(st.evicted, 0);
	/* 499 more: the forgotten entries are reused, no new one is touched */
	for (uint64_t id = 1000; id < 1499; id++)
		assert_int_equal(fosd_dedup_begin(&dd, 3, id, s, &reg), FOSD_DEDUP_NEW);
	fosd_dedup_get_stats(&dd, &st);
	assert_int_equal(st.live, 500);
	assert_int_equal(st.touched, 500 * sizeof(fosd_dedup_entry) + 1024 * sizeof(void *));
	fosd_dedup_destroy(&dd);
	free(s);
}

static void test_config_key(void **state)
{
	(void)state;
	fosd_config c;
	char msg[512];
	fosd_config_defaults(&c);
	assert_int_equal(c.dedup_bytes, 4u << 20);
	assert_int_equal(fosd_config_set(&c, "dedup_bytes", "256K", msg, sizeof msg), 0);
	assert_int_equal(c.dedup_bytes, 256 * KIB);
	assert_int_equal(fosd_config_set(&c, "dedup_bytes", "lots", msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "dedup_bytes"));
	fosd_config_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_capacity_from_bytes),
		cmocka_unit_test(test_bound_under_many_requests),
		cmocka_unit_test(test_running_not_evicted),
		cmocka_unit_test(test_window_frees_entries),
		cmocka_unit_test(test_config_key),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
