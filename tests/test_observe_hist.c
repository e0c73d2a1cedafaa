/* test_observe_hist.c: fosd's latency metrics (server/observe/metrics.c) and the fos CLI's load
 * histogram (client/cli/cli_hist.c) are one implementation (formats/fos_hist.c): fed the same
 * samples they report identical percentiles (the Stats op's p50/p90/p99/p99.9 and those of
 * `fos load`), each the top of the bucket of the true nearest-rank value, at most 1/128 above it
 * (checked against the sorted samples). The Prometheus bucket counts equal the number of samples
 * below each power of two. Also: a request's time on a lane split into input copy, compute and
 * output copy (fosd_metrics_copy_time, per thread and per request), and request counters by
 * tenant growing past their first table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fos_hist.h"
#include "metrics.h"
#include "util.h"

static uint64_t rnd_state = 0x243F6A8885A308D3ull;

static uint64_t rnd64(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The nearest-rank percentile of sorted v (n values): the ceil(p/100 * n)-th smallest. */
static uint64_t true_percentile(const uint64_t *v, size_t n, double p)
{
	double r = p / 100.0 * (double)n;
	size_t rank = (size_t)r;
	if ((double)rank < r)
		rank++;
	if (rank < 1)
		rank = 1;
	return v[rank - 1];
}

static void check_agreement(const uint64_t *samples, size_t n)
{
	fosd_metrics *m = malloc(sizeof *m);
	fosd_metrics_snap *snap = malloc(sizeof *snap);
	assert_non_null(m);
	assert_non_null(snap);
	assert_int_equal(fosd_metrics_init(m), 0);
	cli_hist h;
	assert_int_equal(cli_hist_init(&h), FOS_OK);
	for (size_t i = 0; i < n; i++) {
		fosd_metrics_record(m, FOSD_OP_FORWARD, 0, samples[i], 0, 0, 0, 0, 0, 0);
		cli_hist_record(&h, samples[i]);
	}
	fosd_metrics_snapshot(m, snap);
	const fosd_hist_snap *fs = &snap->ops[FOSD_OP_FORWARD].lat[0];
	assert_int_equal(fs->count, h.count);
	assert_int_equal(fs->max_us, h.max);
	/* Stats' percentiles are `fos load`'s */
	const double pcts[] = {50, 90, 99, 99.9};
	const uint64_t stats[] = {fs->p50_us, fs->p90_us, fs->p99_us, fs->p999_us};
	uint64_t *sorted = malloc(n * sizeof *sorted);
	assert_non_null(sorted);
	memcpy(sorted, samples, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, cmp_u64);
	for (int i = 0; i < 4; i++) {
		uint64_t cli = cli_hist_percentile(&h, pcts[i]);
		if (stats[i] != cli)
			fail_msg("p%g: fosd %llu, fos load %llu", pcts[i], (unsigned long long)stats[i],
				 (unsigned long long)cli);
		uint64_t truth = true_percentile(sorted, n, pcts[i]);
		if (cli < truth || (double)cli > (double)truth * (1.0 + 1.0 / 128))
			fail_msg("p%g = %llu, truth %llu", pcts[i], (unsigned long long)cli, (unsigned long long)truth);
	}
	/* any other percentile too, through the live histogram */
	for (double p = 0; p <= 100; p += 0.5) {
		uint64_t a = fosd_hist_quantile(&m->ops[FOSD_OP_FORWARD].lat[0], p / 100.0);
		uint64_t b = fos_hist_percentile(h.buckets, h.count, h.min, h.max, p);
		uint64_t truth = true_percentile(sorted, n, p);
		if (a < truth || (double)a > (double)truth * (1.0 + 1.0 / 128) || b < truth ||
		    (double)b > (double)truth * (1.0 + 1.0 / 128))
			fail_msg("p%g: fosd %llu, cli %llu, truth %llu", p, (unsigned long long)a, (unsigned long long)b,
				 (unsigned long long)truth);
	}
	/* the exported buckets: the samples below each 2^k us */
	for (int i = 0; i < FOSD_PROM_LE_N; i++) {
		uint64_t edge = (uint64_t)1 << (FOSD_PROM_LE_MIN_LOG2 + i), below = 0;
		for (size_t j = 0; j < n; j++)
			below += sorted[j] < edge;
		assert_int_equal(fs->below[i], below);
		assert_int_equal(fos_hist_below_pow2(h.buckets, FOSD_PROM_LE_MIN_LOG2 + i), below);
	}
	free(sorted);
	cli_hist_free(&h);
	fosd_metrics_destroy(m);
	free(m);
	free(snap);
}

static void test_same_samples_same_percentiles(void **state)
{
	(void)state;
	/* the case: forwards around 100 ms, where 4 buckets per power of two said 131072 us */
	size_t n = 5000;
	uint64_t *v = malloc(n * sizeof *v);
	assert_non_null(v);
	for (size_t i = 0; i < n; i++)
		v[i] = 80000 + rnd64() % 30000;
	check_agreement(v, n);
	/* log-uniform over 0 .. 2^36 us */
	for (size_t i = 0; i < n; i++)
		v[i] = rnd64() >> (28 + rnd64() % 36);
	check_agreement(v, n);
	/* small exact values, one value, a few */
	for (size_t i = 0; i < 300; i++)
		v[i] = (i * 37) % 300;
	check_agreement(v, 300);
	v[0] = 104330;
	check_agreement(v, 1);
	v[1] = 7;
	v[2] = 1u << 20;
	check_agreement(v, 3);
	free(v);
}

/* Copy times of the request a thread runs: in and out added up, compute the rest of the run. Each
 * run is 20 ms; the copy times are "since t0" for t0s a few ms before now, so each is its nominal
 * value plus the clock's advance since now (at most slack). */
static void test_copy_split(void **state)
{
	(void)state;
	fosd_metrics *m = malloc(sizeof *m);
	fosd_metrics_snap *snap = malloc(sizeof *snap);
	assert_non_null(m);
	assert_non_null(snap);
	assert_int_equal(fosd_metrics_init(m), 0);
	int req1, req2;
	const uint64_t now = fosd_now_ns(), ms = 1000000;
	fosd_req_sample r = {.op = FOSD_OP_LINEAR, .code = 0, .latency_us = 30000, .t_recv_ns = now - 30 * ms,
			     .t_lane_ns = now - 25 * ms, .t_done_ns = now - 5 * ms, .req = &req1};
	/* 1: req1 copies 2 + 3 ms in and 4 ms out: compute about 11 ms */
	fosd_metrics_copy_time(&req1, FOSD_COPY_IN, now - 2 * ms);
	fosd_metrics_copy_time(&req1, FOSD_COPY_IN, now - 3 * ms);
	fosd_metrics_copy_time(&req1, FOSD_COPY_OUT, now - 4 * ms);
	fosd_metrics_record_req(m, &r);
	/* 2: req1 recorded again (a duplicate's answer): its copy times were taken */
	fosd_metrics_record_req(m, &r);
	/* 3: times of req1 do not go to req2 */
	fosd_metrics_copy_time(&req1, FOSD_COPY_IN, now - 1 * ms);
	r.req = &req2;
	fosd_metrics_record_req(m, &r);
	/* 4: req2 copies 15 ms in and 15 ms out, more than its 20 ms run: out is cut to the rest (5 ms),
	 * compute 0 */
	fosd_metrics_copy_time(&req2, FOSD_COPY_IN, now - 15 * ms);
	fosd_metrics_copy_time(&req2, FOSD_COPY_OUT, now - 15 * ms);
	fosd_metrics_record_req(m, &r);
	/* 5: a failed request has no parts */
	r.code = 13;
	fosd_metrics_copy_time(&req2, FOSD_COPY_IN, now - 1 * ms);
	fosd_metrics_record_req(m, &r);
	const uint64_t slack = (fosd_now_ns() - now) / 1000 + 1; /* us */
	fosd_metrics_snapshot(m, snap);
	const fosd_op_snap *o = &snap->ops[FOSD_OP_LINEAR];
	assert_int_equal(o->run.count, 4);
	assert_int_equal(o->run.sum_us, 4 * 20000);
	assert_int_equal(o->in_copy.count, 4);
	assert_int_equal(o->compute.count, 4);
	assert_int_equal(o->lat[13].count, 1);
	/* in: 5 + 0 + 0 + 15 ms; out: 4 + 0 + 0 + (20 - 15) ms */
	if (o->in_copy.sum_us < 20000 || o->in_copy.sum_us > 20000 + 3 * slack)
		fail_msg("input copy sum %llu us (slack %llu)", (unsigned long long)o->in_copy.sum_us,
			 (unsigned long long)slack);
	if (o->out_copy.sum_us + slack + 1 < 9000 || o->out_copy.sum_us > 9000 + slack)
		fail_msg("output copy sum %llu us (slack %llu)", (unsigned long long)o->out_copy.sum_us,
			 (unsigned long long)slack);
	assert_true(o->in_copy.max_us >= 15000 && o->in_copy.max_us <= 15000 + slack);
	assert_int_equal(o->compute.max_us, 20000); /* 2 and 3: no copies */
	/* each request's parts add up to its run, less what whole microseconds cut off (< 3 us) */
	uint64_t parts = o->in_copy.sum_us + o->compute.sum_us + o->out_copy.sum_us;
	assert_true(parts <= o->run.sum_us && parts + 2 * 4 >= o->run.sum_us);
	fosd_metrics_destroy(m);
	free(m);
	free(snap);
}

/* Counters by tenant: keyed by the tenant object, named once, in order of first request. */
static void test_tenant_counts(void **state)
{
	(void)state;
	fosd_metrics *m = malloc(sizeof *m);
	assert_non_null(m);
	assert_int_equal(fosd_metrics_init(m), 0);
	enum { NT = 100 };
	static char keys[NT];
	char names[NT][16];
	for (int round = 0; round < 3; round++)
		for (int t = 0; t < NT; t++) {
			snprintf(names[t], sizeof names[t], "t%02d", t);
			fosd_req_sample r = {.op = FOSD_OP_HEALTH, .code = t % 2 ? 5 : 0, .tenant_key = &keys[t],
					     .tenant = names[t]};
			fosd_metrics_record_req(m, &r);
		}
	fosd_req_sample anon = {.op = FOSD_OP_STATS, .code = 16};
	fosd_metrics_record_req(m, &anon);
	size_t n = 0;
	fosd_tenant_count *c = fosd_metrics_tenant_counts(m, &n);
	assert_non_null(c);
	assert_int_equal(n, NT + 1);
	assert_string_equal(c[0].tenant, ""); /* no tenant first */
	assert_int_equal(c[0].op, FOSD_OP_STATS);
	assert_int_equal(c[0].code, 16);
	assert_int_equal(c[0].n, 1);
	for (int t = 0; t < NT; t++) {
		assert_string_equal(c[1 + t].tenant, names[t]);
		assert_int_equal(c[1 + t].op, FOSD_OP_HEALTH);
		assert_int_equal(c[1 + t].code, t % 2 ? 5 : 0);
		assert_int_equal(c[1 + t].n, 3);
	}
	free(c);
	/* the per-op counters are the sum over tenants */
	assert_int_equal(m->ops[FOSD_OP_HEALTH].requests, 3 * NT);
	assert_int_equal(m->ops[FOSD_OP_HEALTH].codes[5], 3 * NT / 2);
	fosd_metrics_destroy(m);
	free(m);
	/* a fresh one: nothing yet */
	fosd_metrics m2;
	assert_int_equal(fosd_metrics_init(&m2), 0);
	assert_null(fosd_metrics_tenant_counts(&m2, &n));
	assert_int_equal(n, 0);
	fosd_metrics_destroy(&m2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_samples_same_percentiles),
		cmocka_unit_test(test_copy_split),
		cmocka_unit_test(test_tenant_counts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
