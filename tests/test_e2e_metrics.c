/* test_e2e_metrics.c: fosd's HTTP endpoint for operators (--metrics-listen, server/observe/http_metrics.c).
 * The text of /metrics built from hand-made snapshots: label escaping, cumulative histogram buckets
 * at powers of two of microseconds (the whole request's by op and status code, its queue, input
 * copy, compute, output copy and run parts), +Inf = _count, _sum in seconds, requests by tenant,
 * the process and GPU families, expected values worked out by hand. Then a real fosd (CPU backend)
 * with --metrics-listen http://127.0.0.1:0: after forwards, a NOT_FOUND and a PutWeight, the
 * counters and histogram counts of /metrics equal what the Stats op reports through libfos, the
 * parts of a request add up to its run, the process numbers are there and NVML's absence on a CPU
 * host is fosd_nvml_available 0; every line is a comment or `name{labels} value`; /livez and
 * /healthz are 200 "ok" and /readyz 200 "ready", and during a drain /healthz and /readyz are 503
 * while /livez stays 200; another path 404, another method 405; a fosd with a tokens file labels
 * requests with their tenant; a bad --metrics-listen value exits 2 and a taken port exits 1, each
 * with a message. HTTP is spoken over a plain socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "http_metrics.h"
#include "support_server.h"
#include "support_assert.h"
#include "support_trust.h"

/* ---- reading the exposition text ------------------------------------------------------------ */

static int is_name_start(int c)
{
	return isalpha(c) || c == '_' || c == ':';
}

static int is_name_char(int c)
{
	return isalnum(c) || c == '_' || c == ':';
}

/* Checks the whole page: it ends with a line feed; every line is `# HELP name text`,
 * `# TYPE name counter|gauge|histogram` (once per name), or a sample `name value` /
 * `name{l="v",...} value` of the family last declared (a histogram's name_bucket, _sum, _count),
 * label values using only the escapes \\ \" \n, values numbers or +Inf; a histogram's buckets
 * of one series have increasing le and non-decreasing counts, the +Inf bucket equal to its _count.
 * Returns the number of samples; fails the test on the first bad line. */
static int check_exposition(const char *text)
{
	size_t tlen = strlen(text);
	assert_true(tlen > 0);
	assert_int_equal(text[tlen - 1], '\n');
	char family[128] = "", ftype[1024] = "";
	char *declared = calloc(1, tlen + 2); /* "\nname\n" list of TYPE'd names */
	assert_non_null(declared);
	size_t dlen = 0;
	char prev_series[512] = "";
	double prev_le = -1, prev_count = -1;
	int samples = 0, lineno = 0;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = (size_t)(nl - p);
		char line[2048];
		lineno++;
		if (n >= sizeof line)
			fail_msg("line %d too long", lineno);
		memcpy(line, p, n);
		line[n] = 0;
		p = nl + 1;
		if (line[0] == '#') {
			char name[128], rest[1024];
			if (sscanf(line, "# HELP %127s %1023[^\n]", name, rest) == 2) {
				assert_true(is_name_start((unsigned char)name[0]));
				continue;
			}
			if (sscanf(line, "# TYPE %127s %1023s", name, rest) != 2)
				fail_msg("line %d: a comment that is neither HELP nor TYPE: %s", lineno, line);
			if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram"))
				fail_msg("line %d: type %s", lineno, rest);
			char key[140];
			snprintf(key, sizeof key, "\n%s\n", name);
			if (strstr(declared, key))
				fail_msg("line %d: %s declared twice", lineno, name);
			dlen += (size_t)sprintf(declared + dlen, "\n%s", name);
			declared[dlen] = '\n';
			declared[dlen + 1] = 0;
			snprintf(family, sizeof family, "%s", name);
			snprintf(ftype, sizeof ftype, "%s", rest);
			continue;
		}
		/* a sample */
		const char *q = line;
		if (!is_name_start((unsigned char)*q))
			fail_msg("line %d: not a sample: %s", lineno, line);
		while (is_name_char((unsigned char)*q))
			q++;
		char name[128];
		snprintf(name, sizeof name, "%.*s", (int)(q - line), line);
		char series_no_le[512];
		size_t sl = 0;
		double le = -1;
		int has_le = 0;
		if (*q == '{') {
			q++;
			while (*q != '}') {
				const char *ln = q;
				if (!isalpha((unsigned char)*q) && *q != '_')
					fail_msg("line %d: bad label name: %s", lineno, line);
				while (isalnum((unsigned char)*q) || *q == '_')
					q++;
				size_t lnl = (size_t)(q - ln);
				if (q[0] != '=' || q[1] != '"')
					fail_msg("line %d: bad label: %s", lineno, line);
				q += 2;
				const char *vs = q;
				while (*q && *q != '"') {
					if (*q == '\\') {
						if (q[1] != '\\' && q[1] != '"' && q[1] != 'n')
							fail_msg("line %d: bad escape: %s", lineno, line);
						q++;
					}
					q++;
				}
				if (*q != '"')
					fail_msg("line %d: unterminated label value: %s", lineno, line);
				if (lnl == 2 && !strncmp(ln, "le", 2)) {
					has_le = 1;
					le = !strncmp(vs, "+Inf\"", 5) ? 1e300 : strtod(vs, NULL);
				} else {
					sl += (size_t)snprintf(series_no_le + sl, sizeof series_no_le - sl, "%.*s;",
							       (int)(q + 1 - ln), ln);
				}
				q++;
				if (*q == ',')
					q++;
				else if (*q != '}')
					fail_msg("line %d: bad label list: %s", lineno, line);
			}
			q++;
		}
		series_no_le[sl] = 0;
		if (*q != ' ')
			fail_msg("line %d: no value: %s", lineno, line);
		q++;
		char *end;
		double v = strtod(q, &end);
		if (!strcmp(q, "+Inf"))
			v = 1e300;
		else if (end == q || *end)
			fail_msg("line %d: bad value '%s'", lineno, q);
		/* the family */
		char want[3][160];
		snprintf(want[0], sizeof want[0], "%s_bucket", family);
		snprintf(want[1], sizeof want[1], "%s_sum", family);
		snprintf(want[2], sizeof want[2], "%s_count", family);
		if (!strcmp(ftype, "histogram")) {
			if (strcmp(name, want[0]) && strcmp(name, want[1]) && strcmp(name, want[2]))
				fail_msg("line %d: %s is not of histogram %s", lineno, name, family);
		} else if (strcmp(name, family) || !family[0]) {
			fail_msg("line %d: %s is not of family %s", lineno, name, family);
		}
		if (!strcmp(ftype, "histogram") && !strcmp(name, want[0])) {
			assert_true(has_le);
			if (!strcmp(series_no_le, prev_series)) {
				if (!(le > prev_le))
					fail_msg("line %d: le not increasing: %s", lineno, line);
				if (v < prev_count)
					fail_msg("line %d: bucket counts not cumulative: %s", lineno, line);
			}
			snprintf(prev_series, sizeof prev_series, "%s", series_no_le);
			prev_le = le;
			prev_count = v;
		} else if (!strcmp(ftype, "histogram") && !strcmp(name, want[2])) {
			/* _count follows its buckets, the last being +Inf */
			assert_string_equal(series_no_le, prev_series);
			assert_true(prev_le == 1e300);
			assert_true(v == prev_count);
		}
		samples++;
	}
	free(declared);
	return samples;
}

/* The value of the sample printed exactly as `series value`; -1 when there is none. */
static double sample(const char *text, const char *series)
{
	size_t sl = strlen(series);
	for (const char *p = text; p && *p;) {
		if (!strncmp(p, series, sl) && p[sl] == ' ')
			return strtod(p + sl + 1, NULL);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/* op may carry more labels after it: OP OK_LABEL is op="OP",code="OK" */
#define OK_LABEL "\",code=\"OK"

static double hsample(const char *text, const char *name, const char *op, const char *le)
{
	char s[256];
	if (le)
		snprintf(s, sizeof s, "%s_bucket{op=\"%s\",le=\"%s\"}", name, op, le);
	else
		snprintf(s, sizeof s, "%s{op=\"%s\"}", name, op);
	return sample(text, s);
}

/* ---- units: the text from a snapshot -------------------------------------------------------- */

static void test_escape_label(void **state)
{
	(void)state;
	char out[64];
	/* a"b\c<LF>d -> a\"b\\c\nd */
	size_t n = fosd_prom_escape_label("a\"b\\c\nd", out, sizeof out);
	assert_string_equal(out, "a\\\"b\\\\c\\nd");
	assert_int_equal(n, 10);
	assert_int_equal(fosd_prom_escape_label("plain", out, sizeof out), 5);
	assert_string_equal(out, "plain");
	/* truncated to the buffer, the full length returned */
	char small[4];
	assert_int_equal(fosd_prom_escape_label("\"\"\"", small, sizeof small), 6);
	assert_string_equal(small, "\\\"\\");
}

/* One OK forward of latency_us; queue_us / run_us < 0: not run by a lane. */
static void record(fosd_metrics *m, int op, int code, uint64_t latency_us, long queue_us, long run_us)
{
	uint64_t t0 = 1000000, lane = 0, done = 0;
	if (queue_us >= 0) {
		lane = t0 + (uint64_t)queue_us * 1000u;
		done = lane + (uint64_t)run_us * 1000u;
	}
	fosd_metrics_record(m, op, code, latency_us, t0, lane, done, 0, 100, 200);
}

static fosd_prom_snapshot *hand_snapshot(void)
{
	fosd_metrics *m = calloc(1, sizeof *m);
	fosd_prom_snapshot *s = calloc(1, sizeof *s);
	assert_non_null(m);
	assert_non_null(s);
	assert_int_equal(fosd_metrics_init(m), 0);
	/* forward latencies 0, 3, 4, 7, 8, 100 us, 5 s and 2^35 us (past the last finite le);
	 * the 100 us one ran on a lane: 10 us queued, 20 us running */
	const uint64_t lat[] = {0, 3, 4, 7, 8, 100, 5000000, (uint64_t)1 << 35};
	for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++)
		record(m, FOSD_OP_FORWARD, 0, lat[i], lat[i] == 100 ? 10 : -1, 20);
	record(m, FOSD_OP_FORWARD, 5, 50, -1, 0); /* NOT_FOUND: counted, in a histogram of its code */
	record(m, FOSD_OP_FORWARD, 5, 60, -1, 0);
	record(m, FOSD_OP_HEALTH, 0, 2, -1, 0);
	fosd_metrics_snap *snap = malloc(sizeof *snap);
	assert_non_null(snap);
	fosd_metrics_snapshot(m, snap);
	memcpy(s->ops, snap->ops, sizeof s->ops);
	free(snap);
	s->duplicates = 3;
	s->bad_messages = 4;
	fosd_metrics_destroy(m);
	free(m);
	s->version = "1.2.3";
	s->backend = "cpu";
	s->device = "GPU \"H200\" \\x\nnext";
	s->uptime_ms = 61005;
	s->cache.bytes = 123;
	s->cache.budget = 8589934592ull;
	s->cache.entries = 2;
	s->cache.hits = 7;
	s->cache.misses = 1;
	s->contexts.count = 5;
	s->inflight = 1;
	s->pool.taken = 9;
	s->pool.active = 1;
	return s;
}

static void test_format_snapshot(void **state)
{
	(void)state;
	fosd_prom_snapshot *s = hand_snapshot();
	size_t len = 0;
	char *t = fosd_prom_format(s, &len);
	assert_non_null(t);
	assert_int_equal(len, strlen(t));
	assert_true(check_exposition(t) > 50);

	/* info, with the device's quote, backslash and line feed escaped */
	assert_true(sample(t, "fosd_info{version=\"1.2.3\",backend=\"cpu\",device=\"GPU \\\"H200\\\" \\\\x\\nnext\"}") == 1);
	assert_non_null(strstr(t, "# TYPE fosd_info gauge\n"));
	assert_true(sample(t, "fosd_uptime_seconds") == 61.005);
	assert_true(sample(t, "fosd_draining") == 0);

	/* requests by code: only the codes seen; no tenant counts in the snapshot: tenant "" */
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"OK\",tenant=\"\"}") == 8);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"NOT_FOUND\",tenant=\"\"}") == 2);
	assert_true(sample(t, "fosd_requests_total{op=\"health\",code=\"OK\",tenant=\"\"}") == 1);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"INTERNAL\",tenant=\"\"}") == -1);
	assert_non_null(strstr(t, "# TYPE fosd_requests_total counter\n"));
	/* ops never answered have no series */
	assert_null(strstr(t, "op=\"backward\""));

	/* the latency histogram: le = 2^k us counts the recorded values below 2^k us; by hand from
	 * 0, 3, 4, 7, 8, 100, 5000000, 2^35 */
	const char *d = "fosd_request_duration_seconds";
	assert_non_null(strstr(t, "# TYPE fosd_request_duration_seconds histogram\n"));
	assert_true(hsample(t, d, "forward" OK_LABEL, "0.000004") == 2);      /* 0, 3 */
	assert_true(hsample(t, d, "forward" OK_LABEL, "0.000008") == 4);      /* + 4, 7 */
	assert_true(hsample(t, d, "forward" OK_LABEL, "0.000016") == 5);      /* + 8 */
	assert_true(hsample(t, d, "forward" OK_LABEL, "0.000064") == 5);
	assert_true(hsample(t, d, "forward" OK_LABEL, "0.000128") == 6);      /* + 100 */
	assert_true(hsample(t, d, "forward" OK_LABEL, "4.194304") == 6);      /* 2^22 us < 5 s */
	assert_true(hsample(t, d, "forward" OK_LABEL, "8.388608") == 7);      /* + 5 s */
	assert_true(hsample(t, d, "forward" OK_LABEL, "2147.483648") == 7);   /* 2^31 us */
	assert_true(hsample(t, d, "forward" OK_LABEL, "+Inf") == 8);          /* + 2^35 us */
	assert_true(hsample(t, d, "forward" OK_LABEL, "0.000002") == -1);     /* the first le is 4 us */
	assert_true(hsample(t, d, "forward" OK_LABEL, "4294.967296") == -1);  /* the last finite one 2^31 us */
	/* sum = 5000122 + 34359738368 us */
	assert_true(hsample(t, "fosd_request_duration_seconds_count", "forward" OK_LABEL, NULL) == 8);
	assert_non_null(strstr(t, "fosd_request_duration_seconds_sum{op=\"forward\",code=\"OK\"} 34364.738490\n"));
	/* 31 buckets (30 finite, +Inf), in order: the first line of the series is le 4 us */
	const char *first = strstr(t, "fosd_request_duration_seconds_bucket{op=\"forward\",code=\"OK\",");
	assert_non_null(first);
	const char *want_first = "fosd_request_duration_seconds_bucket{op=\"forward\",code=\"OK\",le=\"0.000004\"} 2\n";
	assert_int_equal(strncmp(first, want_first, strlen(want_first)), 0);
	int buckets = 0;
	for (const char *p = t; (p = strstr(p, "fosd_request_duration_seconds_bucket{op=\"forward\",code=\"OK\",")); p++)
		buckets++;
	assert_int_equal(buckets, FOSD_PROM_LE_MAX_LOG2 - FOSD_PROM_LE_MIN_LOG2 + 2);
	assert_true(hsample(t, d, "health" OK_LABEL, "0.000004") == 1);
	/* the failures have a histogram of their own: 50 and 60 us, under 64 us, sum 110 us */
	assert_true(hsample(t, d, "forward\",code=\"NOT_FOUND", "0.000032") == 0);
	assert_true(hsample(t, d, "forward\",code=\"NOT_FOUND", "0.000064") == 2);
	assert_true(hsample(t, "fosd_request_duration_seconds_count", "forward\",code=\"NOT_FOUND", NULL) == 2);
	assert_non_null(strstr(t, "fosd_request_duration_seconds_sum{op=\"forward\",code=\"NOT_FOUND\"} 0.000110\n"));
	assert_true(hsample(t, "fosd_request_duration_seconds_count", "health\",code=\"NOT_FOUND", NULL) == -1);

	/* queue and run: only the request a lane ran (10 us queued, 20 us running) */
	assert_true(hsample(t, "fosd_request_queue_seconds", "forward", "0.000008") == 0);
	assert_true(hsample(t, "fosd_request_queue_seconds", "forward", "0.000016") == 1);
	assert_true(hsample(t, "fosd_request_queue_seconds_count", "forward", NULL) == 1);
	assert_non_null(strstr(t, "fosd_request_queue_seconds_sum{op=\"forward\"} 0.000010\n"));
	assert_true(hsample(t, "fosd_request_run_seconds", "forward", "0.000016") == 0);
	assert_true(hsample(t, "fosd_request_run_seconds", "forward", "0.000032") == 1);
	assert_true(hsample(t, "fosd_request_run_seconds_count", "forward", NULL) == 1);
	assert_true(hsample(t, "fosd_request_run_seconds_count", "health", NULL) == 0);
	/* without copy times (fosd_metrics_record): no copy, all 20 us compute */
	assert_true(hsample(t, "fosd_request_input_copy_seconds", "forward", "0.000004") == 1);
	assert_true(hsample(t, "fosd_request_output_copy_seconds", "forward", "0.000004") == 1);
	assert_true(hsample(t, "fosd_request_compute_seconds", "forward", "0.000016") == 0);
	assert_true(hsample(t, "fosd_request_compute_seconds", "forward", "0.000032") == 1);
	assert_non_null(strstr(t, "fosd_request_compute_seconds_sum{op=\"forward\"} 0.000020\n"));
	assert_non_null(strstr(t, "fosd_request_input_copy_seconds_sum{op=\"forward\"} 0.000000\n"));
	/* the process (zero here: the snapshot was made by hand) and no NVML */
	assert_true(sample(t, "process_cpu_seconds_total") == 0);
	assert_true(sample(t, "process_resident_memory_bytes") == 0);
	assert_true(sample(t, "fosd_nvml_available") == 0);
	assert_non_null(strstr(t, "# TYPE fosd_gpu_memory_used_bytes gauge\n"));
	assert_null(strstr(t, "fosd_gpu_memory_used_bytes{"));

	/* bytes: 100 in, 200 out a request */
	assert_true(hsample(t, "fosd_request_bytes_total", "forward", NULL) == 1000);
	assert_true(hsample(t, "fosd_response_bytes_total", "forward", NULL) == 2000);
	assert_true(hsample(t, "fosd_request_bytes_total", "health", NULL) == 100);

	/* the scalars */
	assert_true(sample(t, "fosd_weight_cache_bytes") == 123);
	assert_true(sample(t, "fosd_weight_cache_budget_bytes") == 8589934592.0);
	assert_true(sample(t, "fosd_weight_cache_entries") == 2);
	assert_true(sample(t, "fosd_weight_cache_hits_total") == 7);
	assert_true(sample(t, "fosd_weight_cache_misses_total") == 1);
	assert_true(sample(t, "fosd_weight_cache_evictions_total") == 0);
	assert_true(sample(t, "fosd_contexts") == 5);
	assert_true(sample(t, "fosd_inflight_requests") == 1);
	assert_true(sample(t, "fosd_duplicate_requests_total") == 3);
	assert_true(sample(t, "fosd_bad_messages_total") == 4);
	assert_true(sample(t, "fosd_msg_pool_taken_total") == 9);
	assert_true(sample(t, "fosd_msg_pool_active") == 1);
	assert_true(sample(t, "fosd_shm_regions") == 0);
	free(t);

	/* requests by tenant, and two GPUs (the second reports no power) */
	fosd_tenant_count tc[3] = {{"", FOSD_OP_HEALTH, 0, 4}, {"alice", FOSD_OP_FORWARD, 0, 7},
				   {"a\"b", FOSD_OP_FORWARD, 5, 2}};
	s->tenant_counts = tc;
	s->n_tenant_counts = 3;
	s->nvml = 1;
	s->n_gpus = 2;
	fosd_gpu_stat g0 = {.index = 0, .uuid = "GPU-1", .name = "NVIDIA H200", .has_util = 1, .has_mem = 1,
			    .has_power = 1, .has_temp = 1, .util_gpu = 57, .util_mem = 100, .mem_used = 1024,
			    .mem_total = 4096, .power_mw = 123456, .temp_c = 41};
	fosd_gpu_stat g1 = g0;
	g1.index = 1;
	snprintf(g1.uuid, sizeof g1.uuid, "GPU-2");
	g1.has_power = 0;
	s->gpus[0] = g0;
	s->gpus[1] = g1;
	t = fosd_prom_format(s, NULL);
	assert_non_null(t);
	check_exposition(t);
	assert_true(sample(t, "fosd_requests_total{op=\"health\",code=\"OK\",tenant=\"\"}") == 4);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"OK\",tenant=\"alice\"}") == 7);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"NOT_FOUND\",tenant=\"a\\\"b\"}") == 2);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"OK\",tenant=\"\"}") == -1);
	assert_true(sample(t, "fosd_nvml_available") == 1);
	const char *g0l = "{gpu=\"0\",uuid=\"GPU-1\",name=\"NVIDIA H200\"}";
	char ser[256];
	snprintf(ser, sizeof ser, "fosd_gpu_utilization_ratio%s", g0l);
	assert_true(sample(t, ser) == 0.57);
	snprintf(ser, sizeof ser, "fosd_gpu_memory_utilization_ratio%s", g0l);
	assert_true(sample(t, ser) == 1.0);
	snprintf(ser, sizeof ser, "fosd_gpu_memory_used_bytes%s", g0l);
	assert_true(sample(t, ser) == 1024);
	snprintf(ser, sizeof ser, "fosd_gpu_memory_total_bytes%s", g0l);
	assert_true(sample(t, ser) == 4096);
	snprintf(ser, sizeof ser, "fosd_gpu_power_watts%s", g0l);
	assert_true(sample(t, ser) == 123.456);
	snprintf(ser, sizeof ser, "fosd_gpu_temperature_celsius%s", g0l);
	assert_true(sample(t, ser) == 41);
	assert_true(sample(t, "fosd_gpu_temperature_celsius{gpu=\"1\",uuid=\"GPU-2\",name=\"NVIDIA H200\"}") == 41);
	assert_null(strstr(t, "fosd_gpu_power_watts{gpu=\"1\""));
	free(t);
	s->tenant_counts = NULL;
	s->n_tenant_counts = 0;

	/* draining, and a fresh server: no per-op series at all, still a valid page */
	fosd_prom_snapshot *e = calloc(1, sizeof *e);
	assert_non_null(e);
	e->draining = 1;
	e->mps = 1;
	t = fosd_prom_format(e, NULL);
	assert_non_null(t);
	check_exposition(t);
	assert_true(sample(t, "fosd_draining") == 1);
	assert_true(sample(t, "fosd_mps") == 1);
	assert_null(strstr(t, "op=\""));
	assert_non_null(strstr(t, "fosd_info{version=\"\",backend=\"\",device=\"\"} 1\n"));
	free(t);
	free(e);
	free(s);
}

static void test_check_url(void **state)
{
	(void)state;
	char msg[256];
	assert_int_equal(fosd_http_metrics_check_url("http://127.0.0.1:9464", msg, sizeof msg), 0);
	assert_int_equal(fosd_http_metrics_check_url("http://127.0.0.1:0", msg, sizeof msg), 0);
	assert_int_equal(fosd_http_metrics_check_url("http://[::1]:9464/", msg, sizeof msg), 0);
	assert_int_equal(fosd_http_metrics_check_url("http://0.0.0.0:9464", msg, sizeof msg), 0);
	const char *bad[] = {"tcp://127.0.0.1:9464", "https://127.0.0.1:9464", "http://127.0.0.1",
			     "http://127.0.0.1:65536", "http://127.0.0.1:9464/metrics", "127.0.0.1:9464", "",
			     "http://127.0.0.1:x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		msg[0] = 0;
		if (fosd_http_metrics_check_url(bad[i], msg, sizeof msg) != -1)
			fail_msg("'%s' accepted", bad[i]);
		assert_non_null(strstr(msg, "metrics_listen"));
	}
}

/* ---- HTTP over a plain socket ------------------------------------------------------------- */

typedef struct http_reply {
	int status;
	char head[4096]; /* status line and headers */
	char *body;      /* malloc'd, NUL-terminated */
	size_t body_len;
} http_reply;

/* One request on a fresh connection (Connection: close); reads to EOF. Returns 0 or -1. */
static int http_do(int port, const char *method, const char *path, const char *body, http_reply *r)
{
	memset(r, 0, sizeof *r);
	int fd = tsrv_tcp_connect(port, 10);
	if (fd < 0)
		return -1;
	char req[1024];
	int n = snprintf(req, sizeof req,
			 "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
			 method, path, port, body ? strlen(body) : 0, body ? body : "");
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (len + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
		ssize_t k = read(fd, buf + len, cap - len - 1);
		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			break;
		}
		len += (size_t)k;
	}
	close(fd);
	buf[len] = 0;
	char *sep = strstr(buf, "\r\n\r\n");
	if (!sep || sscanf(buf, "HTTP/1.1 %d", &r->status) != 1) {
		free(buf);
		return -1;
	}
	snprintf(r->head, sizeof r->head, "%.*s", (int)(sep - buf), buf);
	r->body_len = len - (size_t)(sep + 4 - buf);
	r->body = malloc(r->body_len + 1);
	memcpy(r->body, sep + 4, r->body_len);
	r->body[r->body_len] = 0;
	free(buf);
	return 0;
}

/* A header's value (case-insensitive name) into out; 0, or -1 when absent. */
static int http_header(const http_reply *r, const char *name, char *out, size_t outsz)
{
	size_t nl = strlen(name);
	for (const char *p = strstr(r->head, "\r\n"); p; p = strstr(p, "\r\n")) {
		p += 2;
		if (!strncasecmp(p, name, nl) && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (*v == ' ')
				v++;
			const char *e = strstr(v, "\r\n");
			size_t vl = e ? (size_t)(e - v) : strlen(v);
			snprintf(out, outsz, "%.*s", (int)vl, v);
			return 0;
		}
	}
	return -1;
}

/* GET path: 200 with a body as long as its Content-Length. Returns the body (free() it). */
static char *http_get_ok(int port, const char *path)
{
	http_reply r;
	assert_int_equal(http_do(port, "GET", path, NULL, &r), 0);
	if (r.status != 200)
		fail_msg("GET %s: %d\n%s", path, r.status, r.head);
	char cl[32];
	assert_int_equal(http_header(&r, "Content-Length", cl, sizeof cl), 0);
	assert_int_equal(strtoull(cl, NULL, 10), r.body_len);
	return r.body;
}

/* ---- a real fosd ---------------------------------------------------------------------------- */

static tsrv g_srv;
static int g_started, g_port;

/* The port of "metrics on http://127.0.0.1:PORT" in the daemon's log (logged just after the
 * listeners start, so it may come a moment after fosd answers). */
static int metrics_port(const tsrv *s)
{
	uint64_t t0 = tsrv_now_ms();
	while (tsrv_now_ms() - t0 < 10000) {
		FILE *f = fopen(s->log, "r");
		char line[1024];
		int port = 0;
		while (f && fgets(line, sizeof line, f)) {
			const char *m = strstr(line, "metrics on http://127.0.0.1:");
			if (m)
				port = atoi(m + strlen("metrics on http://127.0.0.1:"));
		}
		if (f)
			fclose(f);
		if (port > 0)
			return port;
		usleep(20000);
	}
	return -1;
}

static void need_server(void)
{
	if (g_started)
		return;
	const char *args[] = {"--workers", "2", "--metrics-listen", "http://127.0.0.1:0", NULL};
	assert_int_equal(tsrv_start(&g_srv, args), 0);
	g_started = 1;
	g_port = metrics_port(&g_srv);
	if (g_port <= 0) {
		tsrv_dump_log(&g_srv);
		fail_msg("no 'metrics on http://127.0.0.1:PORT' in fosd's log");
	}
}

static int teardown_group(void **state)
{
	(void)state;
	int rc = 0;
	if (g_started && g_srv.pid) {
		rc = tsrv_stop(&g_srv, SIGTERM, 10000);
		if (rc != 0)
			tsrv_dump_log(&g_srv);
	}
	if (g_started)
		tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

static fos_client *connect_or_fail(void)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(g_srv.url, NULL, 20000, &c, &st);
	if (rc)
		fail_msg("connect: %s: %s", fos_code_name(rc), st.message);
	return c;
}

static const fos_op_stats *find_op(const fos_stats_info *s, const char *op)
{
	for (int i = 0; i < s->n_ops; i++)
		if (!strcmp(s->ops[i].op, op))
			return &s->ops[i];
	fail_msg("no stats for op %s", op);
	return NULL;
}

/* A quantile q that Stats reports (at its own finer bucket's upper edge, clamped to the minimum and maximum)
 * lies between the powers of two that bracket the rank in the exported buckets. */
static void check_quantile_brackets(const char *t, const char *name, const char *op, uint64_t count, double q,
				    uint64_t reported_us)
{
	/* the ceil(q * count)-th smallest value (at least the first), as a 0-based rank */
	double rq = q * (double)count;
	uint64_t rank = (uint64_t)rq;
	if ((double)rank < rq)
		rank++;
	rank = rank ? rank - 1 : 0;
	if (rank >= count)
		rank = count - 1;
	for (int k = FOSD_PROM_LE_MIN_LOG2; k <= FOSD_PROM_LE_MAX_LOG2; k++) {
		char le[32];
		uint64_t us = (uint64_t)1 << k;
		snprintf(le, sizeof le, "%llu.%06llu", (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000));
		size_t n = strlen(le);
		while (le[n - 1] == '0')
			le[--n] = 0;
		double cum = hsample(t, name, op, le);
		assert_true(cum >= 0);
		if (cum > (double)rank) {
			uint64_t lo = k == FOSD_PROM_LE_MIN_LOG2 ? 0 : us / 2;
			if (reported_us < lo || reported_us > us)
				fail_msg("%s %s q%.3f: Stats says %llu us, buckets say [%llu, %llu]", name, op, q,
					 (unsigned long long)reported_us, (unsigned long long)lo, (unsigned long long)us);
			return;
		}
	}
	assert_true(reported_us > ((uint64_t)1 << FOSD_PROM_LE_MAX_LOG2) / 2);
}

static void check_hist_vs_stats(const char *t, const char *name, const char *op, uint64_t count, double mean_us,
				uint64_t p50, uint64_t p99, uint64_t max_us)
{
	char s[160];
	snprintf(s, sizeof s, "%s_count", name);
	assert_true(hsample(t, s, op, NULL) == (double)count);
	assert_true(hsample(t, name, op, "+Inf") == (double)count);
	snprintf(s, sizeof s, "%s_sum", name);
	double sum_us = hsample(t, s, op, NULL) * 1e6;
	double want = mean_us * (double)count;
	if (sum_us < want - 1.0 - 1e-9 * want || sum_us > want + 1.0 + 1e-9 * want)
		fail_msg("%s %s: sum %.1f us, Stats mean x count %.1f us", name, op, sum_us, want);
	if (count) {
		check_quantile_brackets(t, name, op, count, 0.50, p50);
		check_quantile_brackets(t, name, op, count, 0.99, p99);
		check_quantile_brackets(t, name, op, count, 1.0, max_us);
	}
}

static void test_metrics_equal_stats(void **state)
{
	(void)state;
	need_server();
	fos_client *c = connect_or_fail();
	fos_status st;
	const int64_t m = 128, n = 128, k = 256;
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(m * k) * 2);
	assert_non_null(w);
	assert_non_null(x);
	tsrv_fill_bf16(w, (size_t)(n * k), 31, 0.05f);
	tsrv_fill_bf16(x, (size_t)(m * k), 32, 1.0f);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, n, k, w);
	ASSERT_OK(fos_put_weight(c, "met.w", 1, &tw, NULL, NULL, &st), st);
	const int ok_forwards = 6;
	for (int i = 0; i < ok_forwards; i++) {
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, m, k, x), y = fos_tensor_out();
		ASSERT_OK(fos_forward(c, "met.w", &tx, NULL, NULL, &y, NULL, &st), st);
		free(y.data);
	}
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, m, k, x), y = fos_tensor_out();
	assert_int_equal(fos_forward(c, "met.nope", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_NOT_FOUND);
	fos_stats_info *si = calloc(1, sizeof *si);
	assert_non_null(si);
	ASSERT_OK(fos_stats(c, si, &st), st);

	http_reply r;
	assert_int_equal(http_do(g_port, "GET", "/metrics", NULL, &r), 0);
	assert_int_equal(r.status, 200);
	char ct[128], cl[32];
	assert_int_equal(http_header(&r, "Content-Type", ct, sizeof ct), 0);
	assert_int_equal(strncmp(ct, "text/plain; version=0.0.4", 25), 0);
	assert_int_equal(http_header(&r, "Content-Length", cl, sizeof cl), 0);
	assert_int_equal(strtoull(cl, NULL, 10), r.body_len);
	const char *t = r.body;
	assert_true(check_exposition(t) > 100);

	/* forward: counts by code, histograms, bytes, as Stats says */
	const fos_op_stats *f = find_op(si, "forward");
	assert_int_equal(f->by_code[FOS_CODE_OK], ok_forwards);
	assert_int_equal(f->by_code[FOS_CODE_NOT_FOUND], 1);
	/* no tokens file: every request is of no tenant */
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"OK\",tenant=\"\"}") ==
		    (double)f->by_code[FOS_CODE_OK]);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"NOT_FOUND\",tenant=\"\"}") ==
		    (double)f->by_code[FOS_CODE_NOT_FOUND]);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"INTERNAL\",tenant=\"\"}") == -1);
	assert_true(hsample(t, "fosd_request_duration_seconds_count", "forward\",code=\"NOT_FOUND", NULL) == 1);
	assert_int_equal(f->lat_count, ok_forwards);
	assert_int_equal(f->queue_count, ok_forwards);
	assert_int_equal(f->run_count, ok_forwards);
	check_hist_vs_stats(t, "fosd_request_duration_seconds", "forward" OK_LABEL, f->lat_count, f->lat_mean_us,
			    f->lat_p50_us, f->lat_p99_us, f->lat_max_us);
	check_hist_vs_stats(t, "fosd_request_queue_seconds", "forward", f->queue_count, f->queue_mean_us,
			    f->queue_p50_us, f->queue_p99_us, f->queue_max_us);
	check_hist_vs_stats(t, "fosd_request_run_seconds", "forward", f->run_count, f->run_mean_us, f->run_p50_us,
			    f->run_p99_us, f->run_max_us);
	/* the parts of the time on the lane: each request's whole microseconds of input copy, compute
	 * and output copy add up to its run, less at most 2 us of truncation */
	const char *parts[] = {"fosd_request_input_copy_seconds", "fosd_request_compute_seconds",
			       "fosd_request_output_copy_seconds"};
	double parts_us = 0;
	for (int i = 0; i < 3; i++) {
		char cs[160];
		snprintf(cs, sizeof cs, "%s_count", parts[i]);
		assert_true(hsample(t, cs, "forward", NULL) == (double)f->run_count);
		snprintf(cs, sizeof cs, "%s_sum", parts[i]);
		parts_us += hsample(t, cs, "forward", NULL) * 1e6;
	}
	double run_us = hsample(t, "fosd_request_run_seconds_sum", "forward", NULL) * 1e6;
	if (parts_us > run_us + 0.5 || parts_us < run_us - 2.0 * (double)f->run_count - 0.5)
		fail_msg("forward: input copy + compute + output copy = %.0f us, run %.0f us", parts_us, run_us);
	assert_true(hsample(t, "fosd_request_input_copy_seconds_sum", "forward", NULL) > 0); /* X was copied */
	/* the process: running, some memory, descriptors; no NVML on a CPU host is no failure */
	assert_true(sample(t, "process_cpu_seconds_total") > 0);
	assert_true(sample(t, "process_resident_memory_bytes") > 1e6);
	assert_true(sample(t, "process_virtual_memory_bytes") >= sample(t, "process_resident_memory_bytes"));
	assert_true(sample(t, "process_open_fds") > 3);
	assert_true(sample(t, "process_max_fds") >= sample(t, "process_open_fds"));
	assert_true(sample(t, "process_threads") > 2);
	double start = sample(t, "process_start_time_seconds");
	struct timeval now;
	gettimeofday(&now, NULL);
	if (start > (double)now.tv_sec + 2 || start < (double)now.tv_sec - 600)
		fail_msg("process_start_time_seconds %.3f, now %ld", start, (long)now.tv_sec);
	double nv = sample(t, "fosd_nvml_available");
	assert_true(nv == 0 || nv == 1);
	if (nv == 0)
		assert_null(strstr(t, "fosd_gpu_memory_total_bytes{"));
	assert_true(hsample(t, "fosd_request_bytes_total", "forward", NULL) == (double)f->bytes_in);
	assert_true(hsample(t, "fosd_response_bytes_total", "forward", NULL) == (double)f->bytes_out);
	assert_true(f->bytes_in > (uint64_t)(ok_forwards * m * k * 2));

	/* put_weight too */
	const fos_op_stats *pw = find_op(si, "put_weight");
	assert_true(sample(t, "fosd_requests_total{op=\"put_weight\",code=\"OK\",tenant=\"\"}") == (double)pw->by_code[0]);
	check_hist_vs_stats(t, "fosd_request_duration_seconds", "put_weight" OK_LABEL, pw->lat_count, pw->lat_mean_us,
			    pw->lat_p50_us, pw->lat_p99_us, pw->lat_max_us);
	check_hist_vs_stats(t, "fosd_request_run_seconds", "put_weight", pw->run_count, pw->run_mean_us,
			    pw->run_p50_us, pw->run_p99_us, pw->run_max_us);

	/* the server-wide numbers (nothing changed them between Stats and the scrape) */
	assert_true(sample(t, "fosd_weight_cache_entries") == (double)si->cache_entries);
	assert_true(sample(t, "fosd_weight_cache_bytes") == (double)si->cache_bytes);
	assert_true(sample(t, "fosd_weight_cache_budget_bytes") == (double)si->cache_budget);
	assert_true(sample(t, "fosd_weight_cache_hits_total") == (double)si->cache_hits);
	assert_true(sample(t, "fosd_weight_cache_misses_total") == (double)si->cache_misses);
	assert_true(sample(t, "fosd_weight_cache_evictions_total") == (double)si->cache_evictions);
	assert_true(sample(t, "fosd_contexts") == (double)si->contexts);
	assert_true(sample(t, "fosd_context_budget_bytes") == (double)si->context_budget);
	assert_true(sample(t, "fosd_duplicate_requests_total") == (double)si->duplicates);
	assert_true(sample(t, "fosd_bad_messages_total") == (double)si->bad_messages);
	assert_true(sample(t, "fosd_workers") == (double)si->workers);
	/* a request counts as in flight until nng reports its reply sent, which may come after the
	 * client has it: at most this client's last few requests */
	double inflight = sample(t, "fosd_inflight_requests");
	if (inflight < 0 || inflight > ok_forwards + 3)
		fail_msg("fosd_inflight_requests %g", inflight);
	assert_true(sample(t, "fosd_queued_requests") == 0);
	assert_true(sample(t, "fosd_msg_pool_taken_total") == (double)si->msg_pool_taken);
	assert_true(sample(t, "fosd_msg_pool_active") == (double)si->msg_pool_active);
	assert_true(sample(t, "fosd_draining") == 0);
	double mps = sample(t, "fosd_mps"); /* 0 on cpu (not applicable) */
	assert_true(strcmp(tsrv_backend_name(), "cpu") ? mps == 0 || mps == 1 : mps == 0);
	assert_true(sample(t, "fosd_uptime_seconds") * 1000.0 >= (double)si->uptime_ms);
	assert_non_null(strstr(t, "\nfosd_info{version=\""));
	char dev[256], series[512];
	fosd_prom_escape_label(si->device, dev, sizeof dev);
	snprintf(series, sizeof series, "\",backend=\"%s\",device=\"%s\"} 1\n", si->backend, dev);
	assert_non_null(strstr(t, series));
	free(r.body);

	/* HEAD: the headers (Content-Length of the page) without a body */
	assert_int_equal(http_do(g_port, "HEAD", "/metrics", NULL, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 0);
	assert_int_equal(http_header(&r, "Content-Length", cl, sizeof cl), 0);
	assert_true(strtoull(cl, NULL, 10) > 1000);
	free(r.body);

	free(si);
	free(w);
	free(x);
	fos_close(c);
}

static void test_healthz_and_errors(void **state)
{
	(void)state;
	need_server();
	char *b = http_get_ok(g_port, "/healthz");
	assert_string_equal(b, "ok\n");
	free(b);
	b = http_get_ok(g_port, "/livez");
	assert_string_equal(b, "ok\n");
	free(b);
	b = http_get_ok(g_port, "/readyz");
	assert_string_equal(b, "ready\n");
	free(b);
	http_reply r;
	assert_int_equal(http_do(g_port, "HEAD", "/readyz", NULL, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 0);
	free(r.body);
	const char *paths[] = {"/nope", "/", "/metricsx", "/healthz/more", "/readyz/x", "/live"};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		assert_int_equal(http_do(g_port, "GET", paths[i], NULL, &r), 0);
		if (r.status != 404)
			fail_msg("GET %s: %d", paths[i], r.status);
		free(r.body);
	}
	const char *methods[] = {"POST", "PUT", "DELETE"};
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
		assert_int_equal(http_do(g_port, methods[i], i ? "/healthz" : "/metrics", "x=1", &r), 0);
		if (r.status != 405)
			fail_msg("%s: %d", methods[i], r.status);
		char allow[64];
		assert_int_equal(http_header(&r, "Allow", allow, sizeof allow), 0);
		assert_string_equal(allow, "GET, HEAD");
		free(r.body);
	}
	/* fosd itself still serves */
	fos_client *c = connect_or_fail();
	fos_health_info h;
	fos_status st;
	ASSERT_OK(fos_health(c, &h, &st), st);
	fos_close(c);
	b = http_get_ok(g_port, "/metrics");
	check_exposition(b);
	free(b);
}

/* A fosd with a tokens file: requests count under their tenant's name, those of no tenant (Health
 * without a token, a wrong token) under tenant "". */
static void test_tenant_label(void **state)
{
	(void)state;
	char dir[256], tokens[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	assert_int_equal(tt_write_file(tokens, "alice alice-secret-0123456789\nbob bob-secret-0123456789ab\n", 0600), 0);
	tsrv s2;
	const char *args[] = {"--tokens", tokens, "--metrics-listen", "http://127.0.0.1:0", NULL};
	assert_int_equal(tsrv_start(&s2, args), 0);
	int port = metrics_port(&s2);
	assert_true(port > 0);
	fos_client *c = NULL;
	fos_status st;
	fos_health_info h;
	ASSERT_OK(fos_connect(s2.url, "alice-secret-0123456789", 20000, &c, &st), st);
	for (int i = 0; i < 3; i++)
		ASSERT_OK(fos_health(c, &h, &st), st);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, 128, 128, calloc(128 * 128, 2)), y = fos_tensor_out();
	assert_int_equal(fos_forward(c, "nope", &tx, NULL, NULL, &y, NULL, &st), FOS_CODE_NOT_FOUND);
	free((void *)tx.data);
	fos_close(c);
	c = NULL;
	assert_int_equal(fos_connect(s2.url, "wrong-secret-0123456789", 20000, &c, &st), FOS_CODE_UNAUTHENTICATED);
	if (c)
		fos_close(c);
	char *t = http_get_ok(port, "/metrics");
	check_exposition(t);
	/* the connect's Health (it checks the token) and 3 */
	assert_true(sample(t, "fosd_requests_total{op=\"health\",code=\"OK\",tenant=\"alice\"}") == 4);
	assert_true(sample(t, "fosd_requests_total{op=\"forward\",code=\"NOT_FOUND\",tenant=\"alice\"}") == 1);
	assert_non_null(strstr(t, ",code=\"UNAUTHENTICATED\",tenant=\"\"} 1\n"));
	assert_true(sample(t, "fosd_requests_total{op=\"health\",code=\"OK\",tenant=\"\"}") >= 1); /* tsrv_start's */
	assert_null(strstr(t, "tenant=\"bob\"")); /* no request yet */
	assert_null(strstr(t, "secret")); /* tokens never appear */
	free(t);
	assert_int_equal(tsrv_stop(&s2, SIGTERM, 10000), 0);
	tsrv_cleanup(&s2);
	tt_tmpdir_remove(dir);
}

/* Runs BUILD/fosd with args (NULL-terminated) until it exits (15 s at most); returns its exit
 * status (-1: killed or timed out) with its stderr in err. */
static int run_fosd(const char *const *args, char *err, size_t errsz)
{
	char dir[] = "/tmp/fosd-metrics-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char log[300], sock[300], bin[1200];
	snprintf(log, sizeof log, "%s/err", dir);
	snprintf(sock, sizeof sock, "ipc://%s/fosd.sock", dir);
	snprintf(bin, sizeof bin, "%s/fosd", tsrv_build_dir());
	const char *argv[32];
	int argc = 0;
	argv[argc++] = bin;
	argv[argc++] = "--backend";
	argv[argc++] = "cpu";
	argv[argc++] = "--threads";
	argv[argc++] = "1";
	argv[argc++] = "--listen";
	argv[argc++] = sock;
	argv[argc++] = "--metrics-listen"; /* none unless args name one */
	argv[argc++] = "off";
	for (int i = 0; args[i] && argc < 31; i++)
		argv[argc++] = args[i];
	argv[argc] = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	int status = 0, rc = -1;
	uint64_t t0 = tsrv_now_ms();
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid) {
			rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
			break;
		}
		if (tsrv_now_ms() - t0 > 15000) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		usleep(10000);
	}
	err[0] = 0;
	FILE *f = fopen(log, "r");
	if (f) {
		size_t n = fread(err, 1, errsz - 1, f);
		err[n] = 0;
		fclose(f);
	}
	unlink(log);
	char p[320];
	snprintf(p, sizeof p, "%s/fosd.sock", dir);
	unlink(p);
	rmdir(dir);
	return rc;
}

static void test_bad_metrics_listen(void **state)
{
	(void)state;
	static char err[16384];
	/* a bad value is a usage error: exit 2 before anything starts */
	const char *bad[][3] = {
		{"--metrics-listen", "ftp://127.0.0.1:9464", NULL},
		{"--metrics-listen", "https://127.0.0.1:9464", NULL},
		{"--metrics-listen", "http://127.0.0.1", NULL},
		{"--metrics-listen", "http://127.0.0.1:9464/x", NULL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = run_fosd(bad[i], err, sizeof err);
		if (rc != 2 || !strstr(err, "metrics_listen") || !strstr(err, bad[i][1]))
			fail_msg("%s %s: exit %d, said: %s", bad[i][0], bad[i][1], rc, err);
	}
	/* a port that is taken: fosd fails at start, exit 1 (as a --listen it cannot bind) */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(fd, 4), 0);
	socklen_t al = sizeof a;
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
	const char *taken[] = {"--metrics-listen", url, NULL};
	int rc = run_fosd(taken, err, sizeof err);
	close(fd);
	if (rc != 1 || !strstr(err, "cannot serve metrics on") || !strstr(err, url))
		fail_msg("taken port %s: exit %d, said: %s", url, rc, err);
	/* --help lists the flag */
	const char *help[] = {"--help", NULL};
	assert_int_equal(run_fosd(help, err, sizeof err), 0);
	assert_non_null(strstr(err, "--metrics-listen URL"));
}

/* Last (it stops the shared fosd): during a drain /healthz answers 503 "draining". A connected
 * client keeps fosd lingering up to 2 s after the last reply, long enough to see it. */
static void test_healthz_draining(void **state)
{
	(void)state;
	need_server();
	fos_client *c = connect_or_fail();
	fos_health_info h;
	fos_status st;
	ASSERT_OK(fos_health(c, &h, &st), st);
	assert_int_equal(kill(g_srv.pid, SIGTERM), 0);
	int seen = 0;
	uint64_t t0 = tsrv_now_ms();
	while (!seen && tsrv_now_ms() - t0 < 5000) {
		http_reply r;
		if (http_do(g_port, "GET", "/healthz", NULL, &r))
			break; /* gone already */
		if (r.status == 503) {
			assert_string_equal(r.body, "draining\n");
			seen = 1;
		} else {
			assert_int_equal(r.status, 200);
		}
		free(r.body);
		if (!seen)
			usleep(5000);
	}
	if (!seen)
		fail_msg("no 503 from /healthz during the drain");
	/* draining is for good: not ready, still alive (fosd lingers while c is connected) */
	http_reply rr;
	if (!http_do(g_port, "GET", "/readyz", NULL, &rr)) {
		assert_int_equal(rr.status, 503);
		assert_string_equal(rr.body, "not ready: draining\n");
		free(rr.body);
		if (!http_do(g_port, "GET", "/livez", NULL, &rr)) {
			assert_int_equal(rr.status, 200);
			assert_string_equal(rr.body, "ok\n");
			free(rr.body);
		}
	}
	char *b = NULL;
	http_reply r;
	if (!http_do(g_port, "GET", "/metrics", NULL, &r)) {
		b = r.body;
		if (r.status == 200)
			assert_true(sample(b, "fosd_draining") == 1);
		free(b);
	}
	fos_close(c);
	int rc = tsrv_stop(&g_srv, 0, 10000); /* signal 0: only wait for the exit */
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	assert_int_equal(rc, 0);
	assert_true(tsrv_log_contains(&g_srv, "metrics on http://127.0.0.1:"));
	/* the endpoint went away with fosd */
	assert_int_equal(http_do(g_port, "GET", "/healthz", NULL, &r), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape_label),
		cmocka_unit_test(test_format_snapshot),
		cmocka_unit_test(test_check_url),
		cmocka_unit_test(test_metrics_equal_stats),
		cmocka_unit_test(test_healthz_and_errors),
		cmocka_unit_test(test_tenant_label),
		cmocka_unit_test(test_bad_metrics_listen),
		cmocka_unit_test(test_healthz_draining),
	};
	return cmocka_run_group_tests(tests, NULL, teardown_group);
}
