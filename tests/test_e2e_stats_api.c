/* test_e2e_stats_api.c: libfos's client API around a real fosd (CPU backend, private ipc socket):
 * the named Stats snapshot (fos_stats_take and its accessors) against the fixed fos_stats_info
 * filled from the same kind of request, name by name, and the version (fos_version, Health's
 * version, FOS_VERSION and its three numbers).
 *
 * Between the two Stats requests the test sends nothing else, so every counter the requests do not
 * move themselves (cache, contexts, weights' bytes, ...) must agree exactly; the stats op's own
 * counters are read from the earlier call's point of view only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "support_assert.h"
#include "support_server.h"

static tsrv g_srv;
static fos_client *g_c;

static int setup(void **state)
{
	(void)state;
	if (tsrv_start(&g_srv, NULL))
		return -1;
	fos_status st;
	if (fos_connect(g_srv.url, NULL, 30000, &g_c, &st)) {
		fprintf(stderr, "connect: %s\n", st.message);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fos_close(g_c);
	tsrv_stop(&g_srv, SIGTERM, 10000);
	tsrv_cleanup(&g_srv);
	return 0;
}

static uint64_t get_u(const fos_stats_snapshot *s, const char *name)
{
	uint64_t v = 0;
	int rc = fos_stats_get(s, name, &v);
	if (rc)
		fail_msg("fos_stats_get(%s): %s", name, fos_code_name(rc));
	return v;
}

/* Puts a weight, runs forwards on it and one bad forward (NOT_FOUND), so that Stats has ops with
 * latencies, codes and cache counters. */
static void some_traffic(void)
{
	enum { N = 128, K = 128, M = 128 };
	uint16_t *w = malloc(N * K * 2), *x = malloc(M * K * 2);
	assert_non_null(w);
	assert_non_null(x);
	tsrv_fill_bf16(w, N * K, 1, 1.0f);
	tsrv_fill_bf16(x, M * K, 2, 1.0f);
	fos_status st;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, w), tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, x);
	ASSERT_OK(fos_put_weight(g_c, "stats-api.w", 1, &tw, NULL, NULL, &st), st);
	for (int i = 0; i < 3; i++) {
		fos_tensor y = fos_tensor_out();
		ASSERT_OK(fos_forward(g_c, "stats-api.w", &tx, NULL, NULL, &y, NULL, &st), st);
		free(y.data);
	}
	fos_tensor y = fos_tensor_out();
	ASSERT_CODE(fos_forward(g_c, "stats-api.missing", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_NOT_FOUND, st);
	free(w);
	free(x);
}

static void test_snapshot_matches_struct(void **state)
{
	(void)state;
	some_traffic();
	fos_status st;
	fos_stats_info si;
	ASSERT_OK(fos_stats(g_c, &si, &st), st);
	fos_stats_snapshot *s = NULL;
	ASSERT_OK(fos_stats_take(g_c, &s, &st), st);
	assert_non_null(s);

	/* the struct's top-level counters under their wire names, unmoved between the two requests */
	const struct {
		const char *name;
		uint64_t v;
	} same[] = {
		{"cache_bytes", si.cache_bytes},     {"cache_budget", si.cache_budget},
		{"cache_entries", si.cache_entries}, {"cache_hits", si.cache_hits},
		{"cache_misses", si.cache_misses},   {"cache_evictions", si.cache_evictions},
		{"contexts", si.contexts},           {"context_bytes", si.context_bytes},
		{"context_budget", si.context_budget}, {"contexts_expired", si.contexts_expired},
		{"contexts_evicted", si.contexts_evicted}, {"duplicates", si.duplicates},
		{"bad_messages", si.bad_messages},   {"workers", si.workers},
		{"channels", si.channels},           {"channel_requests", si.channel_requests},
		{"connections", si.connections},     {"connections_dropped", si.connections_dropped},
		{"connection_refusals", si.connection_refusals}, {"connections_rejected", si.connections_rejected},
		{"msg_pool_active", (uint64_t)si.msg_pool_active},
	};
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
		if (get_u(s, same[i].name) != same[i].v)
			fail_msg("%s: snapshot %llu, fos_stats_info %llu", same[i].name,
				 (unsigned long long)get_u(s, same[i].name), (unsigned long long)same[i].v);
	assert_true(get_u(s, "uptime_ms") >= si.uptime_ms);
	assert_int_equal(get_u(s, "cache_entries"), 1);
	assert_string_equal(fos_stats_text(s, "backend"), si.backend);
	assert_string_equal(fos_stats_text(s, "device"), si.device);

	/* the forward op: same counts, codes and latencies (no forward ran in between) */
	const fos_op_stats *fw = NULL;
	for (int i = 0; i < si.n_ops; i++)
		if (!strcmp(si.ops[i].op, "forward"))
			fw = &si.ops[i];
	assert_non_null(fw);
	assert_int_equal(fw->requests, 4);
	assert_int_equal(get_u(s, "ops.forward.requests"), fw->requests);
	assert_int_equal(get_u(s, "ops.forward.codes.OK.count"), fw->by_code[FOS_CODE_OK]);
	assert_int_equal(get_u(s, "ops.forward.codes.NOT_FOUND.count"), fw->by_code[FOS_CODE_NOT_FOUND]);
	assert_int_equal(fw->by_code[FOS_CODE_NOT_FOUND], 1);
	assert_int_equal(get_u(s, "ops.forward.bytes_in"), fw->bytes_in);
	assert_int_equal(get_u(s, "ops.forward.bytes_out"), fw->bytes_out);
	assert_int_equal(get_u(s, "ops.forward.ran_at_once"), fw->ran_at_once);
	assert_int_equal(get_u(s, "ops.forward.latency.count"), fw->lat_count);
	assert_int_equal(get_u(s, "ops.forward.latency.p99_us"), fw->lat_p99_us);
	assert_int_equal(get_u(s, "ops.forward.latency.max_us"), fw->lat_max_us);
	assert_int_equal(get_u(s, "ops.forward.run.count"), fw->run_count);
	assert_int_equal(get_u(s, "ops.forward.queue.p50_us"), fw->queue_p50_us);
	double mean = -1;
	ASSERT_CODE(fos_stats_get(s, "ops.forward.latency.mean_us", NULL), FOS_CODE_INVALID_ARGUMENT, st);
	assert_int_equal(fos_stats_get_double(s, "ops.forward.latency.mean_us", &mean), FOS_CODE_OK);
	assert_true(mean == fw->lat_mean_us);
	double req = 0;
	assert_int_equal(fos_stats_get_double(s, "ops.forward.requests", &req), FOS_CODE_OK);
	assert_true(req == 4.0);

	/* names: unique, every one readable, unknown ones NOT_FOUND, strings not numbers */
	size_t n = fos_stats_count(s);
	assert_true(n > 40);
	for (size_t i = 0; i < n; i++) {
		const char *name = fos_stats_name_at(s, i);
		assert_non_null(name);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(name, fos_stats_name_at(s, j)))
				fail_msg("name %s twice", name);
		double d;
		int rc = fos_stats_get_double(s, name, &d);
		if (fos_stats_text(s, name))
			assert_int_equal(rc, FOS_CODE_INVALID_ARGUMENT);
		else
			assert_int_equal(rc, FOS_CODE_OK);
	}
	assert_null(fos_stats_name_at(s, n));
	uint64_t v = 7;
	assert_int_equal(fos_stats_get(s, "no_such_counter", &v), FOS_CODE_NOT_FOUND);
	assert_int_equal(v, 7);
	assert_int_equal(fos_stats_get(s, "ops.no_such_op.requests", &v), FOS_CODE_NOT_FOUND);
	assert_int_equal(fos_stats_get(s, "backend", &v), FOS_CODE_INVALID_ARGUMENT);
	assert_null(fos_stats_text(s, "cache_hits"));
	fos_stats_free(s);

	/* NULL-safe accessors */
	assert_int_equal(fos_stats_count(NULL), 0);
	assert_null(fos_stats_name_at(NULL, 0));
	assert_int_equal(fos_stats_get(NULL, "cache_hits", &v), FOS_CODE_NOT_FOUND);
	fos_stats_free(NULL);
	ASSERT_CODE(fos_stats_take(g_c, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
}

static void test_version(void **state)
{
	(void)state;
	char want[64];
	snprintf(want, sizeof want, "%d.%d.%d", FOS_VERSION_MAJOR, FOS_VERSION_MINOR, FOS_VERSION_PATCH);
	assert_string_equal(FOS_VERSION, want);
	assert_string_equal(fos_version(), want);
	fos_health_info h;
	fos_status st;
	ASSERT_OK(fos_health(g_c, &h, &st), st);
	assert_string_equal(h.version, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshot_matches_struct),
		cmocka_unit_test(test_version),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
