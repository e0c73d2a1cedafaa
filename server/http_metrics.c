/* http_metrics.c: fosd's HTTP endpoint for operators (metrics_listen), served by http_server.c
 * (connection cap metrics_max_connections, idle timeout metrics_idle_timeout):
 *   GET /metrics  the Stats op's numbers in the Prometheus text exposition format 0.0.4;
 *   GET /healthz  200 "ok" while serving, 503 "draining" once fosd drains (503 "backend failed"
 *                 when the backend failed for good);
 *   HEAD of both; another method 405 (Allow: GET, HEAD); another path 404.
 * Plain http:// only. The page carries counters, sizes and the device name, never tensors, weight
 * names or tokens; an address that is not loopback is allowed, with a warning in the log.
 *
 * Latency distributions are Prometheus histograms in seconds: cumulative _bucket{le} lines at
 * every power of two of microseconds from 4 us to 2^31 us (edges of fosd's own buckets, so the
 * counts are exact), +Inf, _sum and _count, over OK requests as in Stats. */
#include "http_metrics.h"
#include "http_server.h"
#include "fos_wire.h"
#include "log.h"
#include "server.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <nng/nng.h>

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
		{"fosd_connections", "gauge", "Client connections now.", SNAP(connections)},
		{"fosd_connections_dropped_total", "counter", "Connections closed for not reading their replies.",
		 SNAP(connections_dropped)},
		{"fosd_connection_refusals_total", "counter",
		 "Requests refused for a connection's share, the token-less cap or max_connections.",
		 SNAP(connection_refusals)},
		{"fosd_connections_rejected_total", "counter", "Connections past max_connections.",
		 SNAP(connections_rejected)},
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
	out->connections = (uint64_t)atomic_load(&srv->pipes);
	out->connections_dropped = atomic_load(&srv->conns.dropped);
	out->connection_refusals = atomic_load(&srv->conns.refused);
	out->connections_rejected = atomic_load(&srv->conns.rejected);
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

/* ---- the endpoint -------------------------------------------------------------------------- */

struct fosd_http_metrics {
	fosd_server *srv;
	fosd_http_server *hs;
};

static void page_text(fosd_http_page *pg, int status, const char *text)
{
	pg->status = status;
	pg->body = strdup(text);
	pg->len = pg->body ? strlen(text) : 0;
	if (!pg->body)
		pg->status = 500;
}

/* GET (or HEAD) of path, on the HTTP server's thread. */
static void route(void *arg, const char *path, fosd_http_page *pg)
{
	fosd_http_metrics *hm = arg;
	if (!strcmp(path, "/metrics")) {
		fosd_prom_snapshot *snap = malloc(sizeof *snap);
		char *text = NULL;
		size_t len = 0;
		if (snap) {
			fosd_prom_snapshot_take(hm->srv, snap);
			text = fosd_prom_format(snap, &len);
			free(snap);
		}
		if (!text) {
			page_text(pg, 500, "out of memory\n");
			return;
		}
		pg->status = 200;
		pg->content_type = "text/plain; version=0.0.4; charset=utf-8";
		pg->body = text;
		pg->len = len;
	} else if (!strcmp(path, "/healthz")) {
		if (atomic_load(&hm->srv->fatal))
			page_text(pg, 503, "backend failed\n");
		else if (atomic_load(&hm->srv->draining))
			page_text(pg, 503, "draining\n");
		else
			page_text(pg, 200, "ok\n");
	} else {
		page_text(pg, 404, "not found: fosd serves /metrics and /healthz\n");
	}
}

static int is_loopback(const struct sockaddr_storage *sa)
{
	if (sa->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
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
	/* no host: every IPv4 address */
	const char *host = u->u_hostname && *u->u_hostname ? u->u_hostname : "0.0.0.0";
	struct addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	int gai = getaddrinfo(host, u->u_port, &hints, &ai);
	nng_url_free(u);
	if (gai) {
		snprintf(msg, msgsz, "cannot serve metrics on %s: cannot resolve the address: %s", url, gai_strerror(gai));
		return -1;
	}
	fosd_http_metrics *hm = calloc(1, sizeof *hm);
	if (!hm) {
		freeaddrinfo(ai);
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	hm->srv = srv;
	fosd_http_opts o = {.max_connections = srv->cfg->metrics_max_connections,
			    .idle_timeout_ms = srv->cfg->metrics_idle_timeout_ms};
	struct sockaddr_storage sa;
	char why[256];
	rv = fosd_http_server_start(ai->ai_addr, ai->ai_addrlen, &o, route, hm, &sa, &hm->hs, why, sizeof why);
	freeaddrinfo(ai);
	if (rv) {
		snprintf(msg, msgsz, "cannot serve metrics on %s: %s", url, why);
		free(hm);
		return -1;
	}
	char host_s[INET6_ADDRSTRLEN + 2] = "?", a[INET6_ADDRSTRLEN];
	int port = 0;
	if (sa.ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&sa;
		if (inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a))
			snprintf(host_s, sizeof host_s, "%s", a);
		port = ntohs(s4->sin_port);
	} else if (sa.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&sa;
		if (inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a))
			snprintf(host_s, sizeof host_s, "[%s]", a);
		port = ntohs(s6->sin6_port);
	}
	char idle[48] = "never";
	if (o.idle_timeout_ms)
		snprintf(idle, sizeof idle, "after %llu ms", (unsigned long long)o.idle_timeout_ms);
	fosd_info("metrics on http://%s:%d (GET /metrics, /healthz; at most %d connections, an idle one closed %s)",
		  host_s, port, o.max_connections, idle);
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
	fosd_http_server_stop(hm->hs); /* no route runs after it */
	free(hm);
}
