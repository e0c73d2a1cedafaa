/* test_wcache_scale.c: the weight cache's cost per put does not grow with its size (issue 25: 20,000
 * tensors of one file took 27 s, each put walking every entry). Counted, not timed: the cache
 * counts the entries its lookups and reserve walks look at (fosd_wcache.probes); a put (find,
 * reserve, insert, as ops_weights.c does it) must look at a handful whatever the number of
 * entries, with room to spare and with a full budget that evicts one entry a put. The evictable
 * bytes the cache keeps as entries are used, pinned, replaced and dropped are checked against a
 * walk of the entries after every step of a mixed sequence, and every name of 20,000 is found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "log.h"
#include "wcache.h"

enum { NTOTAL = 20000, TAIL = 1000, DIM = 16 };

static fos_backend *g_be;
static uint16_t g_host[DIM * DIM];

static fosd_weight *make_weight(const char *name, uint64_t version, int pinned)
{
	fosd_weight *w = calloc(1, sizeof *w);
	assert_non_null(w);
	snprintf(w->name, sizeof w->name, "%s", name);
	w->version = version;
	w->pinned = pinned;
	fos_linear_opts o = fos_linear_opts_default();
	fos_err e;
	assert_int_equal(fos_qweight_make(g_be, g_host, DIM, DIM, &o, 1, 0, &w->qw, &e), 0);
	return w;
}

/* One put as ops_weights.c makes it: the old entry, room for the new one, the insert. */
static int put(fosd_wcache *wc, const char *name, uint64_t version, size_t bytes)
{
	char msg[512];
	fosd_weight *old = fosd_wcache_find_in(wc, NULL, name);
	int rc = fosd_wcache_reserve_in(wc, NULL, bytes, old, msg, sizeof msg);
	if (!rc)
		fosd_wcache_insert(wc, make_weight(name, version, 0));
	return rc;
}

/* idle_bytes as a walk counts it: attached entries, unpinned, unused. */
static uint64_t walked_idle(const fosd_wcache *wc)
{
	uint64_t b = 0;
	for (const fosd_weight *w = wc->head; w; w = w->next)
		if (!w->pinned && w->refs == 0)
			b += w->bytes;
	return b;
}

static size_t one_bytes(void)
{
	fosd_weight *w = make_weight("probe", 1, 0);
	size_t b = fos_qweight_bytes(&w->qw);
	fos_qweight_free(g_be, &w->qw);
	free(w);
	return b;
}

static int setup(void **state)
{
	(void)state;
	fos_err e;
	fosd_log_set_level(FOSD_LOG_WARN); /* not a line per eviction */
	g_be = fos_backend_cpu(1, &e);
	for (int i = 0; i < DIM * DIM; i++)
		g_host[i] = (uint16_t)(0x3c00 + (i * 7) % 512);
	return g_be ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	g_be->destroy(g_be);
	return 0;
}

static void test_puts_with_room(void **state)
{
	(void)state;
	size_t one = one_bytes();
	fosd_wcache wc;
	assert_int_equal(fosd_wcache_init(&wc, g_be, (uint64_t)one * (NTOTAL + 10)), 0);
	char name[64];
	uint64_t before = 0;
	for (int i = 0; i < NTOTAL; i++) {
		if (i == NTOTAL - TAIL)
			before = wc.probes;
		snprintf(name, sizeof name, "layer.%d.weight", i);
		assert_int_equal(put(&wc, name, 1, one), 0);
	}
	/* the last 1000 puts, among 19,000+ entries: a few probes each (a chain or two of the index),
	 * where walking the entries would be 19,000 and more */
	uint64_t per_put = (wc.probes - before) / TAIL;
	printf("probes per put with %d entries: %llu\n", NTOTAL, (unsigned long long)per_put);
	assert_true(per_put <= 4);
	assert_int_equal(wc.entries, NTOTAL);
	assert_int_equal(wc.idle_bytes, walked_idle(&wc));
	assert_int_equal(wc.idle_bytes, (uint64_t)one * NTOTAL);
	/* every name is found, with its version */
	for (int i = 0; i < NTOTAL; i++) {
		snprintf(name, sizeof name, "layer.%d.weight", i);
		uint64_t v = 0;
		assert_true(fosd_wcache_holds(&wc, NULL, name, &v));
		assert_int_equal(v, 1);
	}
	assert_false(fosd_wcache_holds(&wc, NULL, "layer.20000.weight", NULL));
	/* replacing and dropping keep the index right */
	assert_int_equal(put(&wc, "layer.7.weight", 2, one), 0);
	char msg[512];
	assert_int_equal(fosd_wcache_drop(&wc, "layer.8.weight", msg, sizeof msg), 0);
	uint64_t v = 0;
	assert_true(fosd_wcache_holds(&wc, NULL, "layer.7.weight", &v));
	assert_int_equal(v, 2);
	assert_false(fosd_wcache_holds(&wc, NULL, "layer.8.weight", NULL));
	assert_int_equal(wc.entries, NTOTAL - 1);
	assert_int_equal(wc.idle_bytes, walked_idle(&wc));
	fosd_wcache_destroy(&wc);
}

/* A budget of 100 entries: each of 20,000 puts evicts the least recently used one; the probes of
 * a put stay a handful; with every entry pinned or busy, a put is refused without a walk. */
static void test_puts_with_eviction(void **state)
{
	(void)state;
	size_t one = one_bytes();
	fosd_wcache wc;
	assert_int_equal(fosd_wcache_init(&wc, g_be, (uint64_t)one * 100), 0);
	char name[64];
	uint64_t before = 0;
	for (int i = 0; i < NTOTAL; i++) {
		if (i == NTOTAL - TAIL)
			before = wc.probes;
		snprintf(name, sizeof name, "e.%d", i);
		assert_int_equal(put(&wc, name, 1, one), 0);
	}
	uint64_t per_put = (wc.probes - before) / TAIL;
	assert_true(per_put <= 4);
	assert_int_equal(wc.entries, 100);
	assert_int_equal(wc.evictions, NTOTAL - 100);
	assert_true(fosd_wcache_holds(&wc, NULL, "e.19999", NULL));
	assert_false(fosd_wcache_holds(&wc, NULL, "e.19899", NULL));
	assert_int_equal(wc.idle_bytes, walked_idle(&wc));
	/* every entry busy: refused, and from the counts alone */
	fosd_weight *held[100];
	char msg[512];
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof name, "e.%d", NTOTAL - 100 + i);
		assert_int_equal(fosd_wcache_acquire(&wc, name, 0, &held[i], msg, sizeof msg), 0);
	}
	assert_int_equal(wc.idle_bytes, 0);
	before = wc.probes;
	assert_int_equal(put(&wc, "one.more", 1, one), FOS__CODE__RESOURCE_EXHAUSTED);
	assert_true(wc.probes - before <= 4);
	for (int i = 0; i < 100; i++)
		fosd_wcache_release(&wc, held[i]);
	assert_int_equal(wc.idle_bytes, (uint64_t)one * 100);
	fosd_wcache_destroy(&wc);
}

/* A mixed sequence: the kept evictable bytes equal a walk after every step. */
static void test_idle_bytes_follow(void **state)
{
	(void)state;
	size_t one = one_bytes();
	fosd_wcache wc;
	assert_int_equal(fosd_wcache_init(&wc, g_be, (uint64_t)one * 40), 0);
	uint64_t s = 0x9E3779B97F4A7C15ull;
	fosd_weight *held[64];
	int nheld = 0;
	char name[32], msg[512];
	for (int step = 0; step < 5000; step++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		snprintf(name, sizeof name, "m.%d", (int)(s % 60));
		switch ((s >> 8) % 5) {
		case 0: { /* a put, pinned one time in eight */
			fosd_weight *old = fosd_wcache_find_in(&wc, NULL, name);
			if (!fosd_wcache_reserve_in(&wc, NULL, one, old, msg, sizeof msg))
				fosd_wcache_insert(&wc, make_weight(name, (uint64_t)step + 1, (s >> 20) % 8 == 0));
			break;
		}
		case 1: /* a use that is held */
			if (nheld < 64 && !fosd_wcache_acquire(&wc, name, 0, &held[nheld], msg, sizeof msg))
				nheld++;
			break;
		case 2: /* a held one is released */
			if (nheld)
				fosd_wcache_release(&wc, held[--nheld]);
			break;
		case 3:
			fosd_wcache_drop(&wc, name, msg, sizeof msg);
			break;
		default: /* a context takes another reference of a held one and gives it back */
			if (nheld) {
				fosd_wcache_acquire_ref(&wc, held[0]);
				fosd_wcache_release(&wc, held[0]);
			}
			break;
		}
		assert_int_equal(wc.idle_bytes, walked_idle(&wc));
	}
	while (nheld)
		fosd_wcache_release(&wc, held[--nheld]);
	assert_int_equal(wc.idle_bytes, walked_idle(&wc));
	fosd_wcache_destroy(&wc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_puts_with_room),
		cmocka_unit_test(test_puts_with_eviction),
		cmocka_unit_test(test_idle_bytes_follow),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
