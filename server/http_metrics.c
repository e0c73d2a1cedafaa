/* http_metrics.c: fosd's HTTP endpoint for operators (metrics_listen), on nng's HTTP server:
 *   GET /metrics  the Stats op's numbers in the Prometheus text exposition format 0.0.4;
 *   GET /healthz  200 "ok" while serving, 503 "draining" once fosd drains (503 "backend failed"
 *                 when the backend failed for good);
 *   HEAD of both; another method 405 (Allow: GET, HEAD); another path 404 (nng's page).
 * Plain http:// only. The page carries counters, sizes and the device name, never tensors, weight
 * names or tokens; an address that is not loopback is allowed, with a warning in the log.
 *
 * Latency distributions are Prometheus histograms in seconds: cumulative _bucket{le} lines at
 * every power of two of microseconds from 4 us to 2^31 us (edges of fosd's own buckets, so the
 * counts are exact), +Inf, _sum and _count, over OK requests as in Stats. */
#include "http_metrics.h"
#include "fos_wire.h"
#include "log.h"
#include "server.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#ifndef FOSD_VERSION
#define FOSD_VERSION "0.1.0"
#endif

_Static_assert(FOSD_PROM_LE_MAX_LOG2 * FOSD_LAT_SUB < FOSD_LAT_BUCKETS,
	       "exported buckets must lie inside fosd's histogram");

/* ---- the text ------------------------------------------------------------------------------- */

typedef struct prom_buf {
	char *p;
	size_t len, cap;
	int oom;
} prom_buf;

static void pb_reserve(prom_buf *b, size_t more)
{
	if (b->oom || b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 16384;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->oom = 1;
		return;
	}
	b->p = p;
	b->cap = cap;
}

static void pb_printf(prom_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pb_printf(prom_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char small[512];
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = 1;
		return;
	}
	pb_reserve(b, (size_t)n);
	if (b->oom)
		return;
	if ((size_t)n < sizeof small) {
		memcpy(b->p + b->len, small, (size_t)n + 1);
	} else {
		va_start(ap, fmt);
		vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

/* Appends s escaped: always backslash and line feed; the double quote too in a label value. */
static void pb_escaped(prom_buf *b, const char *s, int quote)
{
	for (; *s; s++) {
		char c = *s;
		if (c == '\\')
			pb_printf(b, "\\\\");
		else if (c == '\n')
			pb_printf(b, "\\n");
		else if (c == '"' && quote)
			pb_printf(b, "\\\"");
		else
			pb_printf(b, "%c", c);
	}
}

size_t fosd_prom_escape_label(const char *in, char *out, size_t outsz)
{
	size_t n = 0;
	for (const char *s = in; *s; s++) {
		char e[3] = {*s, 0, 0};
		if (*s == '\\' || *s == '"') {
			e[0] = '\\';
			e[1] = *s;
		} else if (*s == '\n') {
			e[0] = '\\';
			e[1] = 'n';
		}
		for (int i = 0; e[i]; i++, n++)
			if (outsz && n < outsz - 1)
				out[n] = e[i];
	}
	if (outsz)
		out[n < outsz - 1 ? n : outsz - 1] = 0;
	return n;
}

static void pb_family(prom_buf *b, const char *name, const char *type, const char *help)
{
	pb_printf(b, "# HELP %s ", name);
	pb_escaped(b, help, 0);
	pb_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* name{op="OP"[,extra]} */
static void pb_series_op(prom_buf *b, const char *name, const char *op)
{
	pb_printf(b, "%s{op=\"", name);
	pb_escaped(b, op, 1);
	pb_printf(b, "\"");
}

/* Whole microseconds as seconds, exactly (6 decimals). */
static void us_to_seconds(uint64_t us, char *out, size_t outsz)
{
	snprintf(out, outsz, "%llu.%06llu", (unsigned long long)(us / 1000000u), (unsigned long long)(us % 1000000u));
}

/* 2^k us as seconds, without trailing zeros: 0.000004, 1.048576. */
static void le_label(int k, char *out, size_t outsz)
{
	us_to_seconds((uint64_t)1 << k, out, outsz);
	size_t n = strlen(out);
	while (n > 1 && out[n - 1] == '0')
		out[--n] = 0;
	if (n && out[n - 1] == '.')
		out[--n] = 0;
}

static void pb_hist(prom_buf *b, const char *name, const char *op, const fosd_hist *h)
{
	uint64_t cum = 0;
	int next = 0;
	char v[48];
	for (int k = FOSD_PROM_LE_MIN_LOG2; k <= FOSD_PROM_LE_MAX_LOG2; k++) {
		/* fosd's bucket k * SUB is the first whose values are 2^k us or more */
		for (int end = k * FOSD_LAT_SUB; next < end; next++)
			cum += h->buckets[next];
		le_label(k, v, sizeof v);
		pb_series_op(b, name, op);
		pb_printf(b, ",le=\"%s\"} %llu\n", v, (unsigned long long)cum);
	}
	pb_series_op(b, name, op);
	pb_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)h->count);
}

/* One histogram family over the ops that were answered at least once. which: 0 latency, 1 queue,
 * 2 run. */
static void pb_hist_family(prom_buf *b, const fosd_prom_snapshot *s, const char *name, const char *help, int which)
{
	char bucket[96], sum[96], count[96], v[48];
	snprintf(bucket, sizeof bucket, "%s_bucket", name);
	snprintf(sum, sizeof sum, "%s_sum", name);
	snprintf(count, sizeof count, "%s_count", name);
	pb_family(b, name, "histogram", help);
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		const fosd_op_metrics *om = &s->ops[i];
		if (!om->requests)
			continue;
		const fosd_hist *h = which == 0 ? &om->lat : which == 1 ? &om->queue : &om->run;
		const char *op = fosd_op_name(i);
		pb_hist(b, bucket, op, h);
		us_to_seconds(h->sum_us, v, sizeof v);
		pb_series_op(b, sum, op);
		pb_printf(b, "} %s\n", v);
		pb_series_op(b, count, op);
		pb_printf(b, "} %llu\n", (unsigned long long)h->count);
	}
}

/* One counter or gauge per op (answered at least once). */
static void pb_op_family(prom_buf *b, const fosd_prom_snapshot *s, const char *name, const char *type,
			 const char *help, size_t field_offset)
{
	pb_family(b, name, type, help);
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		const fosd_op_metrics *om = &s->ops[i];
		if (!om->requests)
			continue;
		uint64_t v;
		memcpy(&v, (const char *)om + field_offset, sizeof v);
		pb_series_op(b, name, fosd_op_name(i));
		pb_printf(b, "} %llu\n", (unsigned long long)v);
	}
}

static void pb_scalar(prom_buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
	pb_family(b, name, type, help);
	pb_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

char *fosd_prom_format(const fosd_prom_snapshot *s, size_t *len)
{
	prom_buf b = {0};
	char v[48];

	pb_family(&b, "fosd_info", "gauge", "fosd's version, numerics backend and device (always 1).");
	pb_printf(&b, "fosd_info{version=\"");
	pb_escaped(&b, s->version ? s->version : "", 1);
	pb_printf(&b, "\",backend=\"");
	pb_escaped(&b, s->backend ? s->backend : "", 1);
	pb_printf(&b, "\",device=\"");
	pb_escaped(&b, s->device ? s->device : "", 1);
	pb_printf(&b, "\"} 1\n");
	pb_family(&b, "fosd_uptime_seconds", "gauge", "Seconds since fosd started.");
	snprintf(v, sizeof v, "%llu.%03llu", (unsigned long long)(s->uptime_ms / 1000u),
		 (unsigned long long)(s->uptime_ms % 1000u));
	pb_printf(&b, "fosd_uptime_seconds %s\n", v);
	pb_scalar(&b, "fosd_draining", "gauge",
		  "1 once fosd drains (SIGTERM/SIGINT or a failed backend): new requests get UNAVAILABLE.",
		  (uint64_t)(s->draining != 0));
	pb_scalar(&b, "fosd_backend_failed", "gauge", "1 once the backend failed for good (fosd then exits 1).",
		  (uint64_t)(s->failed != 0));

	/* requests by op and status code: the codes seen so far */
	pb_family(&b, "fosd_requests_total", "counter", "Requests answered, by operation and status code.");
	for (int i = 0; i < FOSD_NUM_OPS; i++)
		for (int c = 0; c < FOSD_NUM_CODES; c++) {
			uint64_t n = s->ops[i].codes[c];
			if (!n)
				continue;
			pb_series_op(&b, "fosd_requests_total", fosd_op_name(i));
			pb_printf(&b, ",code=\"");
			pb_escaped(&b, fosw_code_name(c), 1);
			pb_printf(&b, "\"} %llu\n", (unsigned long long)n);
		}
	pb_hist_family(&b, s, "fosd_request_duration_seconds",
		       "OK requests: from receipt (the whole message read) to the reply handed to nng.", 0);
	pb_hist_family(&b, s, "fosd_request_queue_seconds",
		       "OK requests an executor lane ran: from receipt until a lane took the request.", 1);
	pb_hist_family(&b, s, "fosd_request_run_seconds",
		       "OK requests an executor lane ran: the op and its device synchronization on the lane.", 2);
	pb_op_family(&b, s, "fosd_requests_run_at_once_total", "counter",
		     "OK requests run on the thread that received them (small, nothing queued, a lane free).",
		     offsetof(fosd_op_metrics, ran_at_once));
	pb_op_family(&b, s, "fosd_request_bytes_total", "counter", "Bytes of request messages received, by operation.",
		     offsetof(fosd_op_metrics, bytes_in));
	pb_op_family(&b, s, "fosd_response_bytes_total", "counter", "Bytes of reply messages sent, by operation.",
		     offsetof(fosd_op_metrics, bytes_out));

	static const struct {
		const char *name, *type, *help;
		size_t off;
	} scalars[] = {
#define SNAP(f) offsetof(fosd_prom_snapshot, f)
		{"fosd_duplicate_requests_total", "counter",
		 "Repeated request ids answered with the first copy's reply instead of running again.", SNAP(duplicates)},
		{"fosd_bad_messages_total", "counter", "Messages that were not a decodable request.", SNAP(bad_messages)},
		{"fosd_inflight_requests", "gauge", "Requests received and not yet answered.", SNAP(inflight)},
		{"fosd_queued_requests", "gauge", "Requests waiting for an executor worker.", SNAP(queued)},
		{"fosd_workers", "gauge", "Executor worker threads.", SNAP(workers)},
		{"fosd_weight_cache_bytes", "gauge", "Bytes held by the weight cache.", SNAP(cache.bytes)},
		{"fosd_weight_cache_budget_bytes", "gauge", "The weight cache budget (cache_bytes).", SNAP(cache.budget)},
		{"fosd_weight_cache_entries", "gauge", "Weights cached.", SNAP(cache.entries)},
		{"fosd_weight_cache_hits_total", "counter", "Weight lookups that found the weight.", SNAP(cache.hits)},
		{"fosd_weight_cache_misses_total", "counter", "Weight lookups that did not find it.", SNAP(cache.misses)},
		{"fosd_weight_cache_evictions_total", "counter", "Weights evicted to make room.", SNAP(cache.evictions)},
		{"fosd_contexts", "gauge", "Saved contexts held.", SNAP(contexts.count)},
		{"fosd_context_bytes", "gauge", "Bytes held by saved contexts.", SNAP(contexts.bytes)},
		{"fosd_context_budget_bytes", "gauge", "The saved-context budget (context_bytes).", SNAP(contexts.budget)},
		{"fosd_contexts_expired_total", "counter", "Saved contexts freed after their TTL.", SNAP(contexts.expired)},
		{"fosd_contexts_evicted_total", "counter", "Saved contexts evicted to make room.", SNAP(contexts.evicted)},
		{"fosd_shm_regions", "gauge", "Shared-memory regions registered by clients.", SNAP(shm_regions)},
		{"fosd_shm_region_bytes", "gauge", "Bytes of the registered shared-memory regions.", SNAP(shm_region_bytes)},
		{"fosd_shm_mapped_bytes", "gauge", "Bytes of shared-memory regions still mapped.", SNAP(shm_mapped_bytes)},
		{"fosd_channels", "gauge", "Request channels being served.", SNAP(channels)},
		{"fosd_channel_requests_total", "counter", "Requests taken from request channels.", SNAP(channel_requests)},
		{"fosd_msg_pool_taken_total", "counter", "Message bodies of 1 MiB and more handed out by the pool.",
		 SNAP(pool.taken)},
		{"fosd_msg_pool_reused_total", "counter", "Of those, reused from the pool.", SNAP(pool.reused)},
		{"fosd_msg_pool_mapped_new_total", "counter", "Of those, freshly mapped.", SNAP(pool.mapped_new)},
		{"fosd_msg_pool_free_bytes", "gauge", "Pool bytes mapped and kept for the next message.",
		 SNAP(pool.bytes_free)},
		{"fosd_msg_pool_used_bytes", "gauge", "Pool bytes mapped and holding a message now.", SNAP(pool.bytes_used)},
		{"fosd_msg_pool_pinned_bytes", "gauge", "Pool bytes registered with the device for DMA.",
		 SNAP(pool.bytes_pinned)},
		{"fosd_msg_pool_pin_failures_total", "counter", "Pool buffers that could not be pinned.",
		 SNAP(pool.pin_failures)},
#undef SNAP
	};
	for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
		uint64_t x;
		memcpy(&x, (const char *)s + scalars[i].off, sizeof x);
		pb_scalar(&b, scalars[i].name, scalars[i].type, scalars[i].help, x);
	}
	pb_scalar(&b, "fosd_msg_pool_active", "gauge", "1 once the message pool handed out its first buffer.",
		  (uint64_t)(s->pool.active != 0));
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	if (len)
		*len = b.len;
	return b.p;
}

void fosd_prom_snapshot_take(fosd_server *srv, fosd_prom_snapshot *out)
{
	memset(out, 0, sizeof *out);
	out->version = FOSD_VERSION;
	out->backend = srv->be->name;
	out->device = srv->be->device;
	out->uptime_ms = (fosd_now_ns() - srv->start_ns) / 1000000u;
	out->draining = atomic_load(&srv->draining) != 0;
	out->failed = atomic_load(&srv->fatal) != 0;
	fosd_metrics *m = malloc(sizeof *m);
	if (m) {
		fosd_metrics_snapshot(&srv->metrics, m);
		memcpy(out->ops, m->ops, sizeof out->ops);
		out->duplicates = m->duplicates;
		out->bad_messages = m->bad_messages;
		free(m);
	}
	fosd_wcache_stats_get(&srv->wc, &out->cache);
	fosd_contexts_stats_get(&srv->cx, &out->contexts);
	int inflight = atomic_load(&srv->inflight);
	out->inflight = inflight > 0 ? (uint64_t)inflight : 0;
	out->queued = fosd_executor_queued(srv);
	out->workers = (uint64_t)srv->n_workers;
	fosd_regions_stats(&srv->regions, &out->shm_regions, &out->shm_region_bytes, &out->shm_mapped_bytes);
	out->channels = fosd_chans_count(&srv->chans);
	out->channel_requests = atomic_load(&srv->chans.requests);
	fosd_msgpool_get_stats(&out->pool);
}

/* ---- the URL -------------------------------------------------------------------------------- */

int fosd_http_metrics_check_url(const char *url, char *msg, size_t msgsz)
{
	if (!strncmp(url, "https://", 8)) {
		snprintf(msg, msgsz, "metrics_listen: '%s': the metrics endpoint serves plain http:// only", url);
		return -1;
	}
	if (strncmp(url, "http://", 7)) {
		snprintf(msg, msgsz, "metrics_listen: '%s' is not an http://HOST:PORT URL (e.g. http://127.0.0.1:9464)",
			 url);
		return -1;
	}
	nng_url *u = NULL;
	int rv = nng_url_parse(&u, url);
	if (rv) {
		snprintf(msg, msgsz, "metrics_listen: '%s' is not a valid URL: %s", url, nng_strerror(rv));
		return -1;
	}
	int bad = 0;
	char *end = NULL;
	/* nng fills in port 80 when none is given: insist on an explicit one */
	const char *after_host = strrchr(url + 7, ']');
	after_host = after_host ? after_host : url + 7;
	const char *colon = strchr(after_host, ':');
	if (!colon || !u->u_port || !*u->u_port) {
		snprintf(msg, msgsz, "metrics_listen: '%s' needs a port (e.g. http://127.0.0.1:9464; 0: any free port)",
			 url);
		bad = 1;
	} else {
		unsigned long port = strtoul(u->u_port, &end, 10);
		if (!*u->u_port || *end || port > 65535) {
			snprintf(msg, msgsz, "metrics_listen: '%s': bad port '%s'", url, u->u_port);
			bad = 1;
		}
	}
	if (!bad && u->u_path && *u->u_path && strcmp(u->u_path, "/")) {
		snprintf(msg, msgsz, "metrics_listen: '%s': give no path (fosd serves /metrics and /healthz)", url);
		bad = 1;
	}
	if (!bad && ((u->u_query && *u->u_query) || (u->u_fragment && *u->u_fragment) ||
		     (u->u_userinfo && *u->u_userinfo))) {
		snprintf(msg, msgsz, "metrics_listen: '%s': give only http://HOST:PORT", url);
		bad = 1;
	}
	nng_url_free(u);
	return bad ? -1 : 0;
}

/* ---- the server ----------------------------------------------------------------------------- */

struct fosd_http_metrics {
	fosd_server *srv;
	nng_http_server *hs;
	int started;
};

/* A small text/plain response; NULL when out of memory. */
static nng_http_res *text_res(uint16_t status, const char *content_type, const char *body, size_t len)
{
	nng_http_res *res;
	if (nng_http_res_alloc(&res))
		return NULL;
	if (nng_http_res_set_status(res, status) || nng_http_res_set_header(res, "Content-Type", content_type) ||
	    nng_http_res_set_header(res, "Cache-Control", "no-store") || nng_http_res_copy_data(res, body, len)) {
		nng_http_res_free(res);
		return NULL;
	}
	return res;
}

/* GET and HEAD pass (nng drops the body of a HEAD reply, keeping its Content-Length): returns 0.
 * Another method: returns 1 with *res the 405 reply (NULL when out of memory). */
static int method_refused(nng_http_req *req, nng_http_res **res)
{
	const char *m = nng_http_req_get_method(req);
	if (m && (!strcmp(m, "GET") || !strcmp(m, "HEAD")))
		return 0;
	static const char body[] = "method not allowed: use GET\n";
	*res = text_res(NNG_HTTP_STATUS_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", body, sizeof body - 1);
	/* the request's body (if any) is not read: close the connection after the reply */
	if (*res && (nng_http_res_set_header(*res, "Allow", "GET, HEAD") ||
		     nng_http_res_set_header(*res, "Connection", "close"))) {
		nng_http_res_free(*res);
		*res = NULL;
	}
	return 1;
}

/* Hands res to nng, which sends and frees it; NULL (out of memory) closes the connection. */
static void finish(nng_aio *aio, nng_http_res *res)
{
	if (!res) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

static void on_metrics(nng_aio *aio)
{
	nng_http_req *req = nng_aio_get_input(aio, 0);
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	fosd_http_metrics *hm = nng_http_handler_get_data(h);
	nng_http_res *res = NULL;
	if (method_refused(req, &res)) {
		finish(aio, res);
		return;
	}
	fosd_prom_snapshot *snap = malloc(sizeof *snap);
	char *text = NULL;
	size_t len = 0;
	if (snap) {
		fosd_prom_snapshot_take(hm->srv, snap);
		text = fosd_prom_format(snap, &len);
		free(snap);
	}
	if (text) {
		res = text_res(NNG_HTTP_STATUS_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
		free(text);
	}
	finish(aio, res);
}

static void on_healthz(nng_aio *aio)
{
	nng_http_req *req = nng_aio_get_input(aio, 0);
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	fosd_http_metrics *hm = nng_http_handler_get_data(h);
	nng_http_res *res = NULL;
	if (method_refused(req, &res)) {
		finish(aio, res);
		return;
	}
	const char *body = "ok\n";
	uint16_t status = NNG_HTTP_STATUS_OK;
	if (atomic_load(&hm->srv->fatal)) {
		body = "backend failed\n";
		status = NNG_HTTP_STATUS_SERVICE_UNAVAILABLE;
	} else if (atomic_load(&hm->srv->draining)) {
		body = "draining\n";
		status = NNG_HTTP_STATUS_SERVICE_UNAVAILABLE;
	}
	finish(aio, text_res(status, "text/plain; charset=utf-8", body, strlen(body)));
}

static int add_handler(fosd_http_metrics *hm, const char *path, void (*cb)(nng_aio *))
{
	nng_http_handler *h;
	int rv = nng_http_handler_alloc(&h, path, cb);
	if (rv)
		return rv;
	/* every method comes here, so that a wrong one gets 405 with an Allow header */
	if ((rv = nng_http_handler_set_method(h, NULL)) || (rv = nng_http_handler_set_data(h, hm, NULL)) ||
	    (rv = nng_http_server_add_handler(hm->hs, h))) {
		nng_http_handler_free(h);
		return rv;
	}
	return 0; /* the server owns h now */
}

static int is_loopback(const nng_sockaddr *sa)
{
	if (sa->s_family == NNG_AF_INET)
		return (ntohl(sa->s_in.sa_addr) >> 24) == 127;
	if (sa->s_family == NNG_AF_INET6) {
		static const uint8_t lo6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
		return !memcmp(sa->s_in6.sa_addr, lo6, 16);
	}
	return 0;
}

int fosd_http_metrics_start(fosd_server *srv, const char *url, fosd_http_metrics **out, char *msg, size_t msgsz)
{
	*out = NULL;
	if (fosd_http_metrics_check_url(url, msg, msgsz))
		return -1;
	nng_url *u = NULL;
	int rv = nng_url_parse(&u, url);
	if (rv) {
		snprintf(msg, msgsz, "metrics_listen: '%s': %s", url, nng_strerror(rv));
		return -1;
	}
	fosd_http_metrics *hm = calloc(1, sizeof *hm);
	if (!hm) {
		nng_url_free(u);
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	hm->srv = srv;
	const char *what = "cannot create the server";
	rv = nng_http_server_hold(&hm->hs, u);
	nng_url_free(u);
	if (!rv) {
		what = "cannot add the handlers";
		rv = add_handler(hm, "/metrics", on_metrics);
		if (!rv)
			rv = add_handler(hm, "/healthz", on_healthz);
	}
	if (!rv) {
		what = "cannot listen";
		rv = nng_http_server_start(hm->hs);
		hm->started = rv == 0;
	}
	if (rv) {
		snprintf(msg, msgsz, "cannot serve metrics on %s: %s: %s", url, what, nng_strerror(rv));
		fosd_http_metrics_stop(hm);
		return -1;
	}
	nng_sockaddr sa;
	char host[INET6_ADDRSTRLEN + 2] = "?";
	int port = 0;
	memset(&sa, 0, sizeof sa);
	if (!nng_http_server_get_addr(hm->hs, &sa)) {
		char a[INET6_ADDRSTRLEN];
		if (sa.s_family == NNG_AF_INET && inet_ntop(AF_INET, &sa.s_in.sa_addr, a, sizeof a)) {
			snprintf(host, sizeof host, "%s", a);
			port = ntohs(sa.s_in.sa_port);
		} else if (sa.s_family == NNG_AF_INET6 && inet_ntop(AF_INET6, sa.s_in6.sa_addr, a, sizeof a)) {
			snprintf(host, sizeof host, "[%s]", a);
			port = ntohs(sa.s_in6.sa_port);
		}
	}
	fosd_info("metrics on http://%s:%d (GET /metrics, /healthz)", host, port);
	if (!is_loopback(&sa))
		fosd_warn("metrics: %s is reachable from other hosts: anyone who can connect reads fosd's request "
			  "counts, sizes and device (no tensors, names or tokens); bind 127.0.0.1 or firewall it",
			  url);
	*out = hm;
	return 0;
}

void fosd_http_metrics_stop(fosd_http_metrics *hm)
{
	if (!hm)
		return;
	if (hm->hs) {
		/* stop closes the listener and every connection and waits for them: no handler runs after */
		if (hm->started)
			nng_http_server_stop(hm->hs);
		nng_http_server_release(hm->hs);
	}
	free(hm);
}
