/* test_e2e_devices.c: one fosd over several devices, with cpu stand-ins (`--backend cpu
 * --devices 0,1,2`): Health lists them; PutWeight places a weight on the devices asked, on the
 * least loaded one by default, where it already is on a re-put, or on several (replicas), and a
 * device it leaves drops its copy; bad placements are INVALID_ARGUMENT naming the field; a forward
 * runs on a device holding its weight and gives the same bits on every device (against the
 * in-process reference); a backward and a ReleaseContext run where their context was saved;
 * DropWeight drops every copy; ListWeights lists a name once with its devices, page by page; Stats
 * reports each device and its sums are the totals; libfos's fos_forward_put is refused without a
 * request (the Health at connect listed the devices). Which device ran a request: the reply's
 * Response.device (raw requests) or the per-device request counts of Stats. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "support_assert.h"
#include "support_devices.h"
#include "support_raw.h"
#include "support_server.h"
#include "support_trust.h"

#define M 8
#define N 32
#define K 64
#define NDEV 3

static tsrv g_srv;
static nng_socket g_sock;
static fos_client *g_c;
static uint16_t g_w[N * K], g_x[M * K], g_dy[M * N];
static uint16_t g_ry[M * N], g_rdx[M * K], g_rdw[N * K];

static int g_skip; /* not the cpu backend: its stand-ins are what this file tests */

static int setup(void **state)
{
	(void)state;
	if (strcmp(tsrv_backend_name(), "cpu")) {
		g_skip = 1;
		return 0;
	}
	tsrv_fill_bf16(g_w, N * K, 71, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 72, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 73, 0.01f);
	fos_linear_opts o = fos_linear_opts_default();
	if (tsrv_ref_linear(g_x, g_w, NULL, g_dy, M, N, K, &o, g_ry, g_rdx, g_rdw, NULL))
		return -1;
	const char *args[] = {"--devices", "0,1,2", "--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	if (traw_open(&g_sock, g_srv.url))
		return -1;
	g_c = tt_connect(g_srv.url, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (g_skip)
		return 0;
	fos_close(g_c);
	nng_close(g_sock);
	int rc = tsrv_stop(&g_srv, SIGTERM, 15000);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

/* PutWeight of g_w as name/version with the placement given (devices: nd of them). */
static int g_pin; /* put() puts pinned weights */

static Fos__Response *put(const char *name, uint64_t version, const uint32_t *devices, size_t nd, uint32_t replicas)
{
	return tdev_put(g_sock, name, version, g_w, N, K, devices, nd, replicas, g_pin);
}

/* Puts and checks the reply: OK, and the devices it says the weight is on. */
static void put_ok(const char *name, uint64_t version, const uint32_t *devices, size_t nd, uint32_t replicas,
		   unsigned want)
{
	Fos__Response *r = put(name, version, devices, nd, replicas);
	if (r->status && r->status->code)
		fail_msg("put %s: %s", name, r->status->message);
	assert_int_equal(r->result_case, FOS__RESPONSE__RESULT_PUT_WEIGHT);
	if (tdev_set(r->put_weight->info) != want)
		fail_msg("put %s went to devices %#x, expected %#x", name, tdev_set(r->put_weight->info), want);
	assert_true(want >> r->device & 1); /* the reply comes from one of them */
	fos__response__free_unpacked(r, NULL);
}

static Fos__Response *stats(void)
{
	return tdev_stats(g_sock, NDEV);
}

static void requests_per_device(uint64_t *out)
{
	tdev_requests(g_sock, NDEV, out);
}

static int ran_on(const uint64_t *before)
{
	return tdev_ran_on(g_sock, NDEV, before);
}

/* The weight's devices as ListWeights says (0: not listed). */
static unsigned listed(const char *name)
{
	fos_weight_info *l;
	size_t n;
	fos_status st;
	ASSERT_OK(fos_list_weights(g_c, &l, &n, &st), st);
	free(l);
	Fos__ListWeightsRequest lq = FOS__LIST_WEIGHTS_REQUEST__INIT;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_LIST_WEIGHTS;
	rq.list_weights = &lq;
	Fos__Response *r = traw_call(g_sock, &rq, NULL, NULL, 0);
	unsigned m = 0;
	int seen = 0;
	for (size_t i = 0; i < r->list_weights->n_weights; i++)
		if (!strcmp(r->list_weights->weights[i]->name, name)) {
			assert_int_equal(seen, 0); /* a name once, whatever its copies */
			seen = 1;
			m = tdev_set(r->list_weights->weights[i]);
		}
	assert_int_equal(n, r->list_weights->n_weights);
	fos__response__free_unpacked(r, NULL);
	return m;
}

static void test_health_lists_devices(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &hr;
	Fos__Response *r = traw_call(g_sock, &rq, NULL, NULL, 0);
	assert_int_equal(r->health->n_devices, NDEV);
	for (int i = 0; i < NDEV; i++) {
		char want[16];
		snprintf(want, sizeof want, "cpu:%d (", i);
		assert_int_equal(r->health->devices[i]->index, i);
		assert_string_equal(r->health->devices[i]->backend, "cpu");
		if (strncmp(r->health->devices[i]->device, want, strlen(want)))
			fail_msg("device %d is named '%s'", i, r->health->devices[i]->device);
	}
	assert_string_equal(r->health->backend, "cpu");
	fos__response__free_unpacked(r, NULL);
	assert_true(tsrv_log_contains(&g_srv, "executor of device 2"));
}

static void test_placement(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	/* empty devices: the least loaded by cached bytes, ties to the lower index */
	put_ok("p.a", 1, NULL, 0, 0, 1u << 0);
	put_ok("p.b", 1, NULL, 0, 0, 1u << 1);
	put_ok("p.c", 1, NULL, 0, 0, 1u << 2);
	/* a re-put stays where the name is */
	put_ok("p.b", 2, NULL, 0, 0, 1u << 1);
	/* explicit devices; then moved: the device it leaves drops its copy */
	uint32_t d2[] = {2}, d1[] = {1}, d01[] = {0, 1};
	put_ok("p.m", 1, d2, 1, 0, 1u << 2);
	put_ok("p.m", 2, d1, 1, 0, 1u << 1);
	assert_int_equal(listed("p.m"), 1u << 1);
	/* replicas: where it is first, then the least loaded */
	put_ok("p.m", 3, NULL, 0, 2, (1u << 1) | (1u << 0));
	put_ok("p.m", 4, NULL, 0, 0, (1u << 1) | (1u << 0)); /* a re-put keeps the replicas */
	put_ok("p.r", 1, NULL, 0, 3, 7u);
	assert_int_equal(listed("p.r"), 7u);
	/* the same version again on one more device: no ALREADY_EXISTS, a copy added */
	put_ok("p.a", 1, d01, 2, 0, 3u);
	assert_int_equal(listed("p.a"), 3u);
	/* the same version where it is: ALREADY_EXISTS as with one device */
	traw_check(put("p.a", 1, d01, 2, 0), FOS__CODE__ALREADY_EXISTS, "already cached");
	/* DropWeight drops every copy */
	fos_status st;
	ASSERT_OK(fos_drop_weight(g_c, "p.r", &st), st);
	assert_int_equal(listed("p.r"), 0);
	ASSERT_CODE(fos_drop_weight(g_c, "p.r", &st), FOS_CODE_NOT_FOUND, st);
}

static void test_bad_placement(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	uint32_t d3[] = {3}, d11[] = {1, 1}, d0[] = {0};
	traw_check(put("bad.a", 1, d3, 1, 0), FOS__CODE__INVALID_ARGUMENT, "put_weight.devices[0] is 3; fosd serves 3");
	traw_check(put("bad.a", 1, d11, 2, 0), FOS__CODE__INVALID_ARGUMENT, "put_weight.devices[1] repeats device 1");
	traw_check(put("bad.a", 1, NULL, 0, 4), FOS__CODE__INVALID_ARGUMENT, "put_weight.replicas is 4");
	traw_check(put("bad.a", 1, d0, 1, 2), FOS__CODE__INVALID_ARGUMENT, "put_weight.replicas is 2 but");
	assert_int_equal(listed("bad.a"), 0);
	/* fosd still serves */
	put_ok("bad.a", 1, d0, 1, 1, 1u);
}

/* The same weight on each device alone: a forward runs there and gives the reference's bits. */
static void test_forward_each_device(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	fos_status st;
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	for (uint32_t d = 0; d < NDEV; d++) {
		char name[32];
		snprintf(name, sizeof name, "f.%u", d);
		put_ok(name, 1, &d, 1, 0, 1u << d);
		uint64_t before[NDEV];
		requests_per_device(before);
		fos_tensor y = fos_tensor_out();
		ASSERT_OK(fos_forward(g_c, name, &tx, NULL, NULL, &y, NULL, &st), st);
		assert_int_equal(ran_on(before), (int)d);
		assert_memory_equal(y.data, g_ry, sizeof g_ry);
		free(y.data);
	}
	/* with replicas everywhere, forwards still give the same bits wherever they run */
	put_ok("f.all", 1, NULL, 0, NDEV, 7u);
	for (int i = 0; i < 6; i++) {
		fos_tensor y = fos_tensor_out();
		ASSERT_OK(fos_forward(g_c, "f.all", &tx, NULL, NULL, &y, NULL, &st), st);
		assert_memory_equal(y.data, g_ry, sizeof g_ry);
		free(y.data);
	}
}

/* Forward with a saved context on device 2; its backward and a release run there. */
static void test_backward_follows_context(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	fos_status st;
	uint32_t d2 = 2;
	put_ok("b.w", 1, &d2, 1, 0, 1u << 2);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), tdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	fos_forward_opts fo = {.save_context = 1};
	for (int round = 0; round < 2; round++) {
		fos_tensor y = fos_tensor_out();
		fos_context ctx;
		uint64_t before[NDEV];
		requests_per_device(before);
		ASSERT_OK(fos_forward(g_c, "b.w", &tx, NULL, &fo, &y, &ctx, &st), st);
		assert_int_equal(ran_on(before), 2);
		assert_memory_equal(y.data, g_ry, sizeof g_ry);
		free(y.data);
		requests_per_device(before);
		if (round == 0) {
			fos_tensor dx = fos_tensor_out(), dw = fos_tensor_out();
			ASSERT_OK(fos_backward(g_c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
			assert_int_equal(ran_on(before), 2);
			assert_memory_equal(dx.data, g_rdx, sizeof g_rdx);
			assert_memory_equal(dw.data, g_rdw, sizeof g_rdw);
			free(dx.data);
			free(dw.data);
		} else {
			ASSERT_OK(fos_release(g_c, &ctx, &st), st);
			assert_int_equal(ran_on(before), 2);
		}
	}
	Fos__Response *r = stats();
	assert_int_equal(r->stats->contexts, 0);
	fos__response__free_unpacked(r, NULL);
}

static void test_stats_sum(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	Fos__Response *r = stats();
	const Fos__StatsResult *s = r->stats;
	uint64_t bytes = 0, entries = 0, budget = 0, reqs = 0;
	for (int i = 0; i < NDEV; i++) {
		const Fos__DeviceStats *d = s->devices[i];
		bytes += d->cache_bytes;
		entries += d->cache_entries;
		budget += d->cache_budget;
		reqs += d->requests;
		assert_int_equal(d->lanes, 1);
		assert_true(d->cache_entries > 0);
		assert_true(d->requests > 0);
	}
	assert_int_equal(bytes, s->cache_bytes);
	assert_int_equal(entries, s->cache_entries);
	assert_int_equal(budget, s->cache_budget);
	assert_true(reqs > 0);
	fos__response__free_unpacked(r, NULL);
}

/* ListWeights pages over the devices: every name once, in order, with a page size of 2. */
static void test_list_pages(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	fos_weight_info *all;
	size_t n;
	fos_status st;
	ASSERT_OK(fos_list_weights(g_c, &all, &n, &st), st);
	assert_true(n >= 6);
	char *token = NULL;
	size_t seen = 0;
	do {
		fos_weight_info *l;
		size_t k;
		char *next = NULL;
		ASSERT_OK(fos_list_weights_page(g_c, token, 2, &l, &k, &next, &st), st);
		assert_true(k <= 2);
		for (size_t i = 0; i < k; i++, seen++) {
			assert_true(seen < n);
			assert_string_equal(l[i].name, all[seen].name);
			if (seen)
				assert_true(strcmp(all[seen - 1].name, all[seen].name) < 0);
		}
		free(l);
		free(token);
		token = next;
	} while (token);
	assert_int_equal(seen, n);
	free(all);
}

/* A put stage that fails after another succeeded: the error names the device and says the new
 * version is already on the devices before it; that copy stays and serves. */
static void test_staged_put_fails(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	tsrv s2;
	const char *args[] = {"--devices", "0,1", "--cache-bytes", "12k", NULL};
	assert_int_equal(tsrv_start(&s2, args), 0);
	nng_socket keep = g_sock;
	assert_int_equal(traw_open(&g_sock, s2.url), 0);
	uint32_t d1[] = {1}, d01[] = {0, 1};
	g_pin = 1; /* device 1 full of a weight that cannot be evicted */
	put_ok("full.a", 1, d1, 1, 0, 1u << 1);
	g_pin = 0;
	traw_check(put("full.b", 1, d01, 2, 0), FOS__CODE__RESOURCE_EXHAUSTED, "device 1: ");
	Fos__ListWeightsRequest lq = FOS__LIST_WEIGHTS_REQUEST__INIT;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_LIST_WEIGHTS;
	rq.list_weights = &lq;
	Fos__Response *r = traw_call(g_sock, &rq, NULL, NULL, 0);
	assert_int_equal(r->list_weights->n_weights, 2);
	assert_string_equal(r->list_weights->weights[1]->name, "full.b");
	assert_int_equal(tdev_set(r->list_weights->weights[1]), 1u << 0);
	fos__response__free_unpacked(r, NULL);
	fos_client *c = tt_connect(s2.url, NULL);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), y = fos_tensor_out();
	fos_status st;
	ASSERT_OK(fos_forward(c, "full.b", &tx, NULL, NULL, &y, NULL, &st), st);
	assert_memory_equal(y.data, g_ry, sizeof g_ry);
	free(y.data);
	fos_close(c);
	nng_close(g_sock);
	g_sock = keep;
	assert_int_equal(tsrv_stop(&s2, SIGTERM, 15000), 0);
	tsrv_cleanup(&s2);
}

/* Forward requests fosd has received (Stats, refused ones included). */
static uint64_t forward_requests(void)
{
	static fos_stats_info s;
	fos_status st;
	ASSERT_OK(fos_stats(g_c, &s, &st), st);
	for (int i = 0; i < s.n_ops; i++)
		if (!strcmp(s.ops[i].op, "forward"))
			return s.ops[i].requests;
	return 0;
}

/* A put inside a forward is for a fosd serving one device: libfos refuses it from the Health it
 * got at connect, with fosd's code, and sends nothing. */
static void test_forward_put_refused_without_a_request(void **state)
{
	(void)state;
	if (g_skip)
		skip();
	fos_status st;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_tensor y = fos_tensor_out();
	uint64_t f0 = forward_requests();
	ASSERT_CODE(fos_forward_put(g_c, "fp.multi", 1, &tw, NULL, &tx, NULL, NULL, &y, NULL, &st),
		    FOS_CODE_FAILED_PRECONDITION, st);
	assert_non_null(strstr(st.message, "fosd serves 3 devices (its Health), and a put inside a forward"));
	assert_non_null(strstr(st.message, "put weight 'fp.multi' with fos_put_weight"));
	assert_null(y.data);
	assert_int_equal(forward_requests(), f0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health_lists_devices), cmocka_unit_test(test_placement),
		cmocka_unit_test(test_bad_placement),        cmocka_unit_test(test_forward_each_device),
		cmocka_unit_test(test_backward_follows_context), cmocka_unit_test(test_stats_sum),
		cmocka_unit_test(test_list_pages),           cmocka_unit_test(test_staged_put_fails),
		cmocka_unit_test(test_forward_put_refused_without_a_request),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
