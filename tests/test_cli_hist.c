/* test_cli_hist.c: the load tester's log-linear latency histogram (client/cli/cli_hist.c): every value
 * lands in a bucket that contains it, buckets tile the whole uint64 range without gaps or overlap,
 * a bucket is never wider than 1/128 of its lowest value, and percentiles are exact below 256 and
 * within that bound above; merge, empty and single-value cases. Expected values are worked out by
 * hand from the definition (rank = ceil(p/100 * count)). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "cli.h"

static uint64_t rnd_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd64(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void check_value(uint64_t v)
{
	size_t idx = cli_hist_index(v);
	if (idx >= CLI_HIST_BUCKETS)
		fail_msg("value %llu: index %zu out of range", (unsigned long long)v, idx);
	uint64_t lo, hi;
	cli_hist_bucket_range(idx, &lo, &hi);
	if (v < lo || v > hi)
		fail_msg("value %llu is outside its bucket %zu [%llu, %llu]", (unsigned long long)v, idx,
			 (unsigned long long)lo, (unsigned long long)hi);
	/* width bound: (hi - lo + 1) <= lo / 128 once buckets are wider than 1 */
	if (hi > lo && (hi - lo + 1) > lo / 128)
		fail_msg("bucket %zu [%llu, %llu] is wider than 1/128 of %llu", idx, (unsigned long long)lo,
			 (unsigned long long)hi, (unsigned long long)lo);
}

static void test_buckets_contain_values(void **state)
{
	(void)state;
	for (uint64_t v = 0; v < 70000; v++)
		check_value(v);
	for (int e = 0; e < 64; e++) {
		uint64_t p = UINT64_C(1) << e;
		check_value(p);
		check_value(p - 1);
		check_value(p + 1);
		check_value(p + p / 2);
	}
	check_value(UINT64_MAX);
	for (int i = 0; i < 200000; i++)
		check_value(rnd64() >> (rnd64() % 64));
	/* by hand: exact below 256; 256..257 share a bucket (width 2); 2^20 + 8191 shares 2^20's bucket
	 * (2^20 >> 13 = 128: width 2^13) */
	assert_int_equal(cli_hist_index(255), 255);
	assert_int_equal(cli_hist_index(256), 256);
	assert_int_equal(cli_hist_index(257), 256);
	assert_int_equal(cli_hist_index(258), 257);
	assert_int_equal(cli_hist_index((1u << 20) + 8191), cli_hist_index(1u << 20));
	assert_int_not_equal(cli_hist_index((1u << 20) + 8192), cli_hist_index(1u << 20));
	assert_int_equal(cli_hist_index(UINT64_MAX), CLI_HIST_BUCKETS - 1);
}

static void test_buckets_tile_the_range(void **state)
{
	(void)state;
	uint64_t lo, hi, prev_hi;
	cli_hist_bucket_range(0, &lo, &prev_hi);
	assert_int_equal(lo, 0);
	for (size_t i = 1; i < CLI_HIST_BUCKETS; i++) {
		cli_hist_bucket_range(i, &lo, &hi);
		if (lo != prev_hi + 1 || hi < lo)
			fail_msg("bucket %zu [%llu, %llu] does not follow %llu", i, (unsigned long long)lo,
				 (unsigned long long)hi, (unsigned long long)prev_hi);
		assert_int_equal(cli_hist_index(lo), i);
		assert_int_equal(cli_hist_index(hi), i);
		prev_hi = hi;
	}
	assert_true(prev_hi == UINT64_MAX);
}

static void test_percentiles_exact_small(void **state)
{
	(void)state;
	cli_hist h;
	assert_int_equal(cli_hist_init(&h), FOS_OK);
	/* 100 values 1..100 in a scrambled order: the k-th smallest is k */
	for (int i = 0; i < 100; i++)
		cli_hist_record(&h, (uint64_t)((i * 37) % 100 + 1));
	assert_int_equal(h.count, 100);
	assert_int_equal(h.min, 1);
	assert_int_equal(h.max, 100);
	assert_int_equal(cli_hist_percentile(&h, 50), 50);
	assert_int_equal(cli_hist_percentile(&h, 90), 90);
	assert_int_equal(cli_hist_percentile(&h, 99), 99);
	assert_int_equal(cli_hist_percentile(&h, 99.9), 100); /* rank ceil(99.9) = 100 */
	assert_int_equal(cli_hist_percentile(&h, 100), 100);
	assert_int_equal(cli_hist_percentile(&h, 0), 1);
	assert_int_equal(cli_hist_percentile(&h, 0.5), 1);
	assert_int_equal(cli_hist_percentile(&h, 1.01), 2);
	/* mean of 1..100 = 50.5 */
	assert_true(cli_hist_mean(&h) == 50.5);
	cli_hist_free(&h);
}

static void test_percentiles_large_within_bound(void **state)
{
	(void)state;
	cli_hist h;
	assert_int_equal(cli_hist_init(&h), FOS_OK);
	/* 1000 values 1000, 2000, ..., 1000000 (as nanoseconds: 1 us .. 1 ms) */
	for (int i = 1000; i >= 1; i--)
		cli_hist_record(&h, (uint64_t)i * 1000);
	struct {
		double p;
		uint64_t truth; /* the ceil(p * 10)-th smallest, times 1000 */
	} cases[] = {{50, 500000}, {90, 900000}, {99, 990000}, {99.9, 999000}, {10, 100000}, {0.1, 1000}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint64_t got = cli_hist_percentile(&h, cases[i].p);
		/* reported: the top of the truth's bucket, at most 1/128 above it */
		if (got < cases[i].truth || (double)got > (double)cases[i].truth * (1.0 + 1.0 / 128))
			fail_msg("p%g = %llu, truth %llu", cases[i].p, (unsigned long long)got,
				 (unsigned long long)cases[i].truth);
	}
	assert_int_equal(cli_hist_percentile(&h, 100), 1000000); /* clamped to the exact max */
	assert_int_equal(h.min, 1000);
	assert_true(cli_hist_mean(&h) == 500500.0);
	cli_hist_free(&h);
}

static void test_merge_empty_single(void **state)
{
	(void)state;
	cli_hist a, b, all, e;
	assert_int_equal(cli_hist_init(&a), FOS_OK);
	assert_int_equal(cli_hist_init(&b), FOS_OK);
	assert_int_equal(cli_hist_init(&all), FOS_OK);
	assert_int_equal(cli_hist_init(&e), FOS_OK);
	assert_int_equal(cli_hist_percentile(&e, 50), 0);
	assert_true(cli_hist_mean(&e) == 0.0);
	for (int i = 0; i < 5000; i++) {
		uint64_t v = rnd64() % 100000000;
		cli_hist_record(i % 3 ? &a : &b, v);
		cli_hist_record(&all, v);
	}
	cli_hist_merge(&a, &b);
	cli_hist_merge(&a, &e);
	assert_int_equal(a.count, all.count);
	assert_int_equal(a.min, all.min);
	assert_int_equal(a.max, all.max);
	for (size_t i = 0; i < CLI_HIST_BUCKETS; i++)
		assert_int_equal(a.buckets[i], all.buckets[i]);
	static const double ps[] = {0, 25, 50, 90, 99, 99.9, 100};
	for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
		assert_int_equal(cli_hist_percentile(&a, ps[i]), cli_hist_percentile(&all, ps[i]));
	/* one value: every percentile is that value (the bucket top clamped to max) */
	cli_hist_reset(&e);
	cli_hist_record(&e, 123456789);
	for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
		assert_int_equal(cli_hist_percentile(&e, ps[i]), 123456789);
	cli_hist_reset(&e);
	assert_int_equal(e.count, 0);
	assert_int_equal(cli_hist_percentile(&e, 99), 0);
	cli_hist_free(&a);
	cli_hist_free(&b);
	cli_hist_free(&all);
	cli_hist_free(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets_contain_values),
		cmocka_unit_test(test_buckets_tile_the_range),
		cmocka_unit_test(test_percentiles_exact_small),
		cmocka_unit_test(test_percentiles_large_within_bound),
		cmocka_unit_test(test_merge_empty_single),
	};
	return cmocka_run_group_tests_name("cli_hist", tests, NULL, NULL);
}
