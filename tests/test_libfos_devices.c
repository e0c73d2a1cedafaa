/* test_libfos_devices.c: libfos against one fosd over several devices (PROTOCOL.md "Devices"): a cpu
 * fosd started with `--devices 0,1,2` (three cpu stand-ins, each its own backend, cache and
 * contexts). fos_health_devices lists the three; fos_put_weight_on puts a weight where its
 * placement says (explicit devices, a replica count, the default: where the name is, else the
 * least loaded by cached bytes) as the entry, the listing and the per-device Stats all say; a
 * forward runs on a device holding the weight and its result is the in-process reference's bits
 * whichever device ran it (fos_last_device); a backward runs where its context was saved; bad
 * placements are INVALID_ARGUMENT naming the field (client-side: both fields, repeats; fosd's: an
 * index out of range, repeats and replicas above the device count, sent raw); the per-device
 * Stats ("devices.I.*") are there and sum to the totals; a fosd without --devices is one device
 * 0. The backend is always cpu (three GPUs are not what a test host has). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "support_raw.h"
#include "support_server.h"
#include "support_stats.h"

#define NDEV 3
#define N 64
#define K 64
#define M 16

static tsrv g_srv;
static fos_client *g_c;
static uint16_t g_w[N * K], g_w2[N * K], g_x[M * K], g_dy[M * N];

static int setup(void **state)
{
	(void)state;
	setenv("FOS_TEST_BACKEND", "cpu", 1); /* the stand-ins are cpu devices */
	const char *args[] = {"--devices", "0,1,2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	fos_status st;
	if (fos_connect(g_srv.url, NULL, 30000, &g_c, &st)) {
		fprintf(stderr, "connect: %s\n", st.message);
		return -1;
	}
	tsrv_fill_bf16(g_w, N * K, 11, 0.05f);
	tsrv_fill_bf16(g_w2, N * K, 12, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 13, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 14, 0.01f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fos_close(g_c);
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

/* fos_put_weight_on that must succeed; the entry in *e. */
static void put_on(const char *name, uint64_t version, const uint16_t *w, const fos_placement *pl, fos_weight_entry *e)
{
	fos_tensor t = fos_tensor_2d(FOS_DTYPE_BF16, N, K, w);
	fos_status st;
	int code = fos_put_weight_on(g_c, name, version, &t, NULL, pl, e, &st);
	if (code)
		fail_msg("put %s: %s %s", name, fos_code_name(code), st.message);
	assert_string_equal(e->info.name, name);
	assert_int_equal(e->info.version, version);
}

static void expect_devices(const fos_weight_entry *e, size_t n, const uint32_t *want)
{
	if (e->n_devices != n)
		fail_msg("%s is on %zu devices, expected %zu", e->info.name, e->n_devices, n);
	for (size_t i = 0; i < n; i++)
		if (e->devices[i] != want[i])
			fail_msg("%s: devices[%zu] = %u, expected %u", e->info.name, i, (unsigned)e->devices[i],
				 (unsigned)want[i]);
}

/* The listing's entry of name (the test fails without one). */
static void listed(const char *name, fos_weight_entry *out)
{
	fos_weight_entry *l;
	size_t n;
	fos_status st;
	assert_int_equal(fos_list_weight_entries(g_c, &l, &n, &st), FOS_CODE_OK);
	int found = 0;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(l[i].info.name, name))
			continue;
		assert_int_equal(found, 0); /* one entry per name, whatever the copies */
		*out = l[i];
		found = 1;
	}
	free(l);
	if (!found)
		fail_msg("%s is not listed", name);
}

/* A device's name "cpu:I", then " (description)" or nothing. */
static void expect_cpu_name(const char *name, unsigned i)
{
	char want[16];
	size_t n = (size_t)snprintf(want, sizeof want, "cpu:%u", i);
	if (!name || strncmp(name, want, n) || (name[n] && name[n] != ' '))
		fail_msg("device %u is named '%s', expected %s", i, name ? name : "(none)", want);
}

static uint64_t dev_stat(unsigned d, const char *field)
{
	char nm[96];
	snprintf(nm, sizeof nm, "devices.%u.%s", d, field);
	return tstat(g_c, nm);
}

/* A forward of g_x through name: Y must be the reference's bits for w; returns the device that
 * ran it, which must be one of e's. */
static int forward_on(const char *name, const uint16_t *w, const fos_weight_entry *e)
{
	static uint16_t y[M * N], ref[M * N];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, w, NULL, NULL, M, N, K, &o, ref, NULL, NULL, NULL), FOS_OK);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), yt = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y);
	fos_status st;
	int code = fos_forward(g_c, name, &x, NULL, NULL, &yt, NULL, &st);
	if (code)
		fail_msg("forward %s: %s %s", name, fos_code_name(code), st.message);
	assert_memory_equal(y, ref, sizeof y);
	int d = fos_last_device(g_c);
	int on = 0;
	for (size_t i = 0; i < e->n_devices; i++)
		on |= (int)e->devices[i] == d;
	if (!on)
		fail_msg("the forward of %s ran on device %d, which holds no copy", name, d);
	return d;
}

static void test_health_devices(void **state)
{
	(void)state;
	fos_device_info d[8];
	size_t n = 99;
	fos_status st;
	assert_int_equal(fos_health_devices(g_c, d, 8, &n, &st), FOS_CODE_OK);
	assert_int_equal(n, NDEV);
	for (unsigned i = 0; i < NDEV; i++) {
		assert_int_equal(d[i].index, i);
		assert_string_equal(d[i].backend, "cpu");
		expect_cpu_name(d[i].device, i);
		assert_int_equal(d[i].has_gpu_uuid, 0);
	}
	/* the count alone; too small an array: the first ones and OUT_OF_RANGE */
	n = 0;
	assert_int_equal(fos_health_devices(g_c, NULL, 0, &n, &st), FOS_CODE_OK);
	assert_int_equal(n, NDEV);
	memset(d, 0, sizeof d);
	assert_int_equal(fos_health_devices(g_c, d, 1, &n, &st), FOS_CODE_OUT_OF_RANGE);
	assert_int_equal(n, NDEV);
	expect_cpu_name(d[0].device, 0);
	assert_string_equal(d[1].device, "");
	assert_int_equal(fos_health_devices(g_c, NULL, 2, &n, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_int_equal(fos_health_devices(g_c, d, 2, NULL, &st), FOS_CODE_INVALID_ARGUMENT);
	/* the old call still answers, with device 0's backend */
	fos_health_info h;
	assert_int_equal(fos_health(g_c, &h, &st), FOS_CODE_OK);
	assert_string_equal(h.backend, "cpu");
}

static void test_explicit_devices(void **state)
{
	(void)state;
	fos_weight_entry e, l;
	const uint32_t two[] = {2}, zero_two[] = {0, 2};
	fos_placement pl = {two, 1, 0};
	put_on("ex.one", 1, g_w, &pl, &e);
	expect_devices(&e, 1, two);
	listed("ex.one", &l);
	expect_devices(&l, 1, two);
	assert_int_equal(l.info.bytes, e.info.bytes);
	for (int i = 0; i < 3; i++)
		assert_int_equal(forward_on("ex.one", g_w, &e), 2);

	pl = (fos_placement){zero_two, 2, 0};
	put_on("ex.two", 1, g_w2, &pl, &e);
	expect_devices(&e, 2, zero_two);
	listed("ex.two", &l);
	expect_devices(&l, 2, zero_two);
	/* one copy's bytes, as a single put of the same weight has */
	fos_weight_entry one;
	pl = (fos_placement){two, 1, 0};
	put_on("ex.two.single", 1, g_w2, &pl, &one);
	assert_int_equal(e.info.bytes, one.info.bytes);
	for (int i = 0; i < 4; i++)
		forward_on("ex.two", g_w2, &e);
	/* replicas equal to the devices' count is the same placement */
	pl = (fos_placement){zero_two, 2, 2};
	put_on("ex.two", 2, g_w, &pl, &e);
	expect_devices(&e, 2, zero_two);

	fos_status st;
	assert_int_equal(fos_drop_weight(g_c, "ex.one", &st), FOS_CODE_OK);
	assert_int_equal(fos_drop_weight(g_c, "ex.two", &st), FOS_CODE_OK);
	assert_int_equal(fos_drop_weight(g_c, "ex.two.single", &st), FOS_CODE_OK);
}

static void test_replicas(void **state)
{
	(void)state;
	fos_weight_entry e, l;
	const uint32_t all[] = {0, 1, 2};
	fos_placement pl = {NULL, 0, NDEV};
	put_on("rep.all", 1, g_w, &pl, &e);
	expect_devices(&e, NDEV, all);
	listed("rep.all", &l);
	expect_devices(&l, NDEV, all);
	int seen[NDEV] = {0};
	for (int i = 0; i < 6; i++)
		seen[forward_on("rep.all", g_w, &e)]++;

	/* two replicas: two different devices */
	pl = (fos_placement){NULL, 0, 2};
	put_on("rep.two", 1, g_w2, &pl, &e);
	assert_int_equal(e.n_devices, 2);
	assert_true(e.devices[0] < e.devices[1] && e.devices[1] < NDEV);
	forward_on("rep.two", g_w2, &e);

	/* replicas of a name already placed keep its devices first: from {1} to two devices, 1 among them */
	const uint32_t one[] = {1};
	pl = (fos_placement){one, 1, 0};
	put_on("rep.grow", 1, g_w, &pl, &e);
	pl = (fos_placement){NULL, 0, 2};
	put_on("rep.grow", 2, g_w2, &pl, &e);
	assert_int_equal(e.n_devices, 2);
	assert_true(e.devices[0] == 1 || e.devices[1] == 1);
	forward_on("rep.grow", g_w2, &e);

	/* the old listing: one entry per name too; the paged one with devices */
	fos_weight_info *wl;
	size_t n;
	fos_status st;
	assert_int_equal(fos_list_weights(g_c, &wl, &n, &st), FOS_CODE_OK);
	assert_int_equal(n, 3);
	assert_string_equal(wl[0].name, "rep.all");
	assert_int_equal(wl[0].bytes, l.info.bytes);
	free(wl);
	fos_weight_entry *page;
	char *next = NULL;
	assert_int_equal(fos_list_weight_entries_page(g_c, NULL, 2, &page, &n, &next, &st), FOS_CODE_OK);
	assert_int_equal(n, 2);
	assert_non_null(next);
	assert_string_equal(page[0].info.name, "rep.all");
	expect_devices(&page[0], NDEV, all);
	free(page);
	char *last = NULL;
	assert_int_equal(fos_list_weight_entries_page(g_c, next, 2, &page, &n, &last, &st), FOS_CODE_OK);
	assert_int_equal(n, 1);
	assert_null(last);
	assert_string_equal(page[0].info.name, "rep.two");
	assert_int_equal(page[0].n_devices, 2);
	free(page);
	free(next);

	assert_int_equal(fos_drop_weight(g_c, "rep.all", &st), FOS_CODE_OK);
	assert_int_equal(fos_drop_weight(g_c, "rep.two", &st), FOS_CODE_OK);
	assert_int_equal(fos_drop_weight(g_c, "rep.grow", &st), FOS_CODE_OK);
}

/* The default: a re-put stays where the name is; a new name goes to the least loaded device. */
static void test_default_placement(void **state)
{
	(void)state;
	fos_weight_entry e;
	const uint32_t one[] = {1};
	fos_placement pl = {one, 1, 0};
	put_on("def.stay", 1, g_w, &pl, &e);
	put_on("def.stay", 2, g_w2, NULL, &e); /* a new version, no placement: still on 1 */
	expect_devices(&e, 1, one);
	forward_on("def.stay", g_w2, &e);
	/* the old entry point (fos_put_weight) puts with the default placement too */
	fos_tensor t = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_weight_info wi;
	fos_status st;
	assert_int_equal(fos_put_weight(g_c, "def.stay", 3, &t, NULL, &wi, &st), FOS_CODE_OK);
	fos_weight_entry l;
	listed("def.stay", &l);
	expect_devices(&l, 1, one);

	/* devices 1 holds def.stay; a new name goes to a device with the fewest cached bytes */
	uint64_t bytes[NDEV], least = UINT64_MAX;
	for (unsigned d = 0; d < NDEV; d++) {
		bytes[d] = dev_stat(d, "cache_bytes");
		if (bytes[d] < least)
			least = bytes[d];
	}
	assert_true(bytes[1] > least);
	put_on("def.new", 1, g_w, NULL, &e);
	assert_int_equal(e.n_devices, 1);
	if (bytes[e.devices[0]] != least)
		fail_msg("def.new went to device %u (%llu bytes cached), the least loaded has %llu", (unsigned)e.devices[0],
			 (unsigned long long)bytes[e.devices[0]], (unsigned long long)least);

	/* moving: devices {0, 2} for a weight on {1} drops its copy on 1 */
	const uint32_t zero_two[] = {0, 2};
	uint64_t on1 = dev_stat(1, "cache_bytes");
	pl = (fos_placement){zero_two, 2, 0};
	put_on("def.stay", 4, g_w2, &pl, &e);
	expect_devices(&e, 2, zero_two);
	assert_true(dev_stat(1, "cache_bytes") < on1);
	forward_on("def.stay", g_w2, &e);

	assert_int_equal(fos_drop_weight(g_c, "def.stay", &st), FOS_CODE_OK);
	assert_int_equal(fos_drop_weight(g_c, "def.new", &st), FOS_CODE_OK);
}

/* A backward runs where its context was saved, and gives the reference's bits. */
static void test_backward_routed(void **state)
{
	(void)state;
	static uint16_t y[M * N], dx[M * K], dw[N * K], ry[M * N], rdx[M * K], rdw[N * K];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, g_dy, M, N, K, &o, ry, rdx, rdw, NULL), FOS_OK);
	for (uint32_t d = 0; d < NDEV; d++) {
		fos_weight_entry e;
		const uint32_t on[] = {d};
		fos_placement pl = {on, 1, 0};
		put_on("bw.w", d + 1, g_w, &pl, &e);
		fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), yt = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y);
		fos_forward_opts fo = {0, 0, 0, 1, 0};
		fos_context ctx;
		fos_status st;
		assert_int_equal(fos_forward(g_c, "bw.w", &x, NULL, &fo, &yt, &ctx, &st), FOS_CODE_OK);
		assert_int_equal(fos_last_device(g_c), (int)d);
		assert_memory_equal(y, ry, sizeof y);
		assert_int_equal(dev_stat(d, "contexts"), 1);
		fos_tensor dyt = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy), dxt = fos_tensor_2d(FOS_DTYPE_BF16, M, K, dx),
			   dwt = fos_tensor_2d(FOS_DTYPE_BF16, N, K, dw);
		uint64_t before = dev_stat(d, "requests");
		int code = fos_backward(g_c, &ctx, &dyt, NULL, &dxt, &dwt, NULL, &st);
		if (code)
			fail_msg("backward on device %u: %s %s", (unsigned)d, fos_code_name(code), st.message);
		assert_int_equal(fos_last_device(g_c), (int)d);
		assert_true(dev_stat(d, "requests") > before);
		assert_memory_equal(dx, rdx, sizeof dx);
		assert_memory_equal(dw, rdw, sizeof dw);
		assert_int_equal(dev_stat(d, "contexts"), 0);
	}
	fos_status st;
	assert_int_equal(fos_drop_weight(g_c, "bw.w", &st), FOS_CODE_OK);
}

/* Placements libfos refuses before sending, and those fosd refuses. */
static void test_bad_placements(void **state)
{
	(void)state;
	fos_tensor t = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_status st;
	fos_weight_entry e;
	const uint32_t twice[] = {1, 1}, three[] = {3}, big[] = {0, 7};
	fos_placement both = {three, 1, 2}, rep = {twice, 2, 0}, nulls = {NULL, 2, 0};
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &both, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(st.message, "replicas"));
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &rep, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(st.message, "twice"));
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &nulls, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(st.message, "devices"));
	fos_placement many = {three, FOS_DEVICES_MAX + 1, 0};
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &many, &e, &st), FOS_CODE_INVALID_ARGUMENT);

	/* fosd's: an index past the devices, replicas above their count */
	fos_placement out = {three, 1, 0}, out2 = {big, 2, 0}, over = {NULL, 0, NDEV + 1};
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &out, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(st.message, "devices"));
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &out2, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(st.message, "devices"));
	assert_non_null(strstr(st.message, "7"));
	assert_int_equal(fos_put_weight_on(g_c, "bad", 1, &t, NULL, &over, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(st.message, "replicas"));

	/* fosd's own check of repeats (libfos never sends them): a raw PutWeight */
	nng_socket s;
	assert_int_equal(traw_open(&s, g_srv.url), 0);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	Fos__Tensor tw = FOS__TENSOR__INIT;
	int64_t shape[2] = {N, K}, ss[2];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&tw, ss, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape);
	uint32_t rd[] = {2, 0, 2};
	pw.name = (char *)"bad";
	pw.version = 1;
	pw.w = &tw;
	pw.devices = rd;
	pw.n_devices = 3;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	Fos__Response *r = traw_call(s, &rq, &pl, g_w, sizeof g_w);
	traw_check(r, FOS_CODE_INVALID_ARGUMENT, "devices");
	nng_close(s);

	/* nothing was put by any of them */
	fos_weight_entry *l;
	size_t n;
	assert_int_equal(fos_list_weight_entries(g_c, &l, &n, &st), FOS_CODE_OK);
	for (size_t i = 0; i < n; i++)
		assert_string_not_equal(l[i].info.name, "bad");
	free(l);
}

/* Stats per device: named devices.I.*, the text devices.I.device, summing to the totals. */
static void test_stats_per_device(void **state)
{
	(void)state;
	fos_weight_entry e, eb;
	const uint32_t d02[] = {0, 2};
	fos_placement pl = {d02, 2, 0}, p1 = {NULL, 0, 1};
	put_on("st.a", 1, g_w, &pl, &e);
	put_on("st.b", 1, g_w2, &p1, &eb);
	assert_int_equal(eb.n_devices, 1);
	fos_stats_snapshot *s;
	fos_status st;
	assert_int_equal(fos_stats_take(g_c, &s, &st), FOS_CODE_OK);
	static const char *const summed[] = {"cache_bytes", "cache_entries", "contexts", "context_bytes",
					     "decoded_tier_bytes", "scratch_bytes", "device_mappings",
					     "device_mapped_bytes", "queued"};
	for (size_t f = 0; f < sizeof summed / sizeof summed[0]; f++) {
		uint64_t total, sum = 0;
		assert_int_equal(fos_stats_get(s, summed[f], &total), FOS_CODE_OK);
		for (unsigned d = 0; d < NDEV; d++) {
			char nm[96];
			uint64_t v;
			snprintf(nm, sizeof nm, "devices.%u.%s", d, summed[f]);
			if (fos_stats_get(s, nm, &v))
				fail_msg("Stats has no %s", nm);
			sum += v;
		}
		if (sum != total)
			fail_msg("%s: the devices sum to %llu, the total is %llu", summed[f], (unsigned long long)sum,
				 (unsigned long long)total);
	}
	for (unsigned d = 0; d < NDEV; d++) {
		char nm[96];
		uint64_t v;
		snprintf(nm, sizeof nm, "devices.%u.device", d);
		expect_cpu_name(fos_stats_text(s, nm), d);
		static const char *const fields[] = {"cache_budget", "context_budget", "lanes", "lanes_busy", "requests",
						     "busy_us"};
		for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
			snprintf(nm, sizeof nm, "devices.%u.%s", d, fields[f]);
			if (fos_stats_get(s, nm, &v))
				fail_msg("Stats has no %s", nm);
		}
		snprintf(nm, sizeof nm, "devices.%u.lanes", d);
		assert_int_equal(fos_stats_get(s, nm, &v), FOS_CODE_OK);
		assert_true(v >= 1);
	}
	uint64_t v;
	assert_int_equal(fos_stats_get(s, "devices.3.cache_bytes", &v), FOS_CODE_NOT_FOUND);
	/* st.a's two copies are both counted: devices 0 and 2 each hold at least one copy's bytes */
	assert_int_equal(fos_stats_get(s, "devices.0.cache_bytes", &v), FOS_CODE_OK);
	assert_true(v >= e.info.bytes);
	assert_int_equal(fos_stats_get(s, "devices.2.cache_bytes", &v), FOS_CODE_OK);
	assert_true(v >= e.info.bytes);
	fos_stats_free(s);

	/* dropping drops every copy: the devices' bytes go back down by one copy each */
	uint64_t b0 = dev_stat(0, "cache_bytes"), b2 = dev_stat(2, "cache_bytes");
	assert_int_equal(fos_drop_weight(g_c, "st.a", &st), FOS_CODE_OK);
	assert_int_equal(dev_stat(0, "cache_bytes"), b0 - e.info.bytes);
	assert_int_equal(dev_stat(2, "cache_bytes"), b2 - e.info.bytes);
	assert_int_equal(fos_drop_weight(g_c, "st.b", &st), FOS_CODE_OK);

	/* the fixed struct carries the totals */
	static fos_stats_info si;
	assert_int_equal(fos_stats(g_c, &si, &st), FOS_CODE_OK);
	assert_int_equal(si.cache_bytes, dev_stat(0, "cache_bytes") + dev_stat(1, "cache_bytes") +
						 dev_stat(2, "cache_bytes"));
}

/* Stateless ops run on some device and give the reference's bits; the re-put registry keeps the
 * placement. */
static void test_linear_and_reput(void **state)
{
	(void)state;
	static uint16_t y[M * N], ref[M * N];
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, ref, NULL, NULL, NULL), FOS_OK);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w),
		   yt = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y);
	fos_status st;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fos_linear(g_c, &x, &w, NULL, NULL, NULL, &yt, NULL, NULL, NULL, &st), FOS_CODE_OK);
		assert_memory_equal(y, ref, sizeof y);
		assert_in_range(fos_last_device(g_c), 0, NDEV - 1);
	}

	/* a handle that re-puts: the weight comes back on the devices it was put on */
	fos_connect_opts co;
	memset(&co, 0, sizeof co);
	co.reput_weights = 1;
	fos_client *c2;
	assert_int_equal(fos_connect_with(g_srv.url, &co, &c2, &st), FOS_CODE_OK);
	assert_int_equal(fos_last_device(c2), -1);
	const uint32_t d12[] = {1, 2};
	fos_placement pl = {d12, 2, 0};
	fos_weight_entry e;
	assert_int_equal(fos_put_weight_on(c2, "rp.w", 1, &w, NULL, &pl, &e, &st), FOS_CODE_OK);
	expect_devices(&e, 2, d12);
	assert_int_equal(fos_drop_weight(g_c, "rp.w", &st), FOS_CODE_OK); /* behind c2's back */
	assert_int_equal(fos_forward(c2, "rp.w", &x, NULL, NULL, &yt, NULL, &st), FOS_CODE_OK);
	assert_memory_equal(y, ref, sizeof y);
	assert_int_equal(fos_reput_count(c2), 1);
	int d = fos_last_device(c2);
	assert_true(d == 1 || d == 2);
	fos_weight_entry l;
	listed("rp.w", &l);
	expect_devices(&l, 2, d12);
	assert_int_equal(fos_drop_weight(c2, "rp.w", &st), FOS_CODE_OK);
	fos_close(c2);
}

/* A fosd without --devices serves one device 0, and the new calls work against it. */
static void test_one_device(void **state)
{
	(void)state;
	tsrv s1;
	assert_int_equal(tsrv_start(&s1, NULL), 0);
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(s1.url, NULL, 30000, &c, &st), FOS_CODE_OK);
	fos_device_info d[4];
	size_t n = 0;
	assert_int_equal(fos_health_devices(c, d, 4, &n, &st), FOS_CODE_OK);
	assert_int_equal(n, 1);
	assert_int_equal(d[0].index, 0);
	assert_string_equal(d[0].backend, "cpu");
	fos_tensor t = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_weight_entry e;
	const uint32_t zero[] = {0}, one[] = {1};
	assert_int_equal(fos_put_weight_on(c, "one.w", 1, &t, NULL, NULL, &e, &st), FOS_CODE_OK);
	expect_devices(&e, 1, zero);
	fos_placement bad = {one, 1, 0}, over = {NULL, 0, 2};
	assert_int_equal(fos_put_weight_on(c, "one.v", 1, &t, NULL, &bad, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	assert_int_equal(fos_put_weight_on(c, "one.v", 1, &t, NULL, &over, &e, &st), FOS_CODE_INVALID_ARGUMENT);
	fos_close(c);
	int rc = tsrv_stop(&s1, SIGTERM, 10000);
	if (rc)
		tsrv_dump_log(&s1);
	tsrv_cleanup(&s1);
	assert_int_equal(rc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health_devices),   cmocka_unit_test(test_explicit_devices),
		cmocka_unit_test(test_replicas),         cmocka_unit_test(test_default_placement),
		cmocka_unit_test(test_backward_routed),  cmocka_unit_test(test_bad_placements),
		cmocka_unit_test(test_stats_per_device), cmocka_unit_test(test_linear_and_reput),
		cmocka_unit_test(test_one_device),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
