/* http_metrics.c: fosd's HTTP endpoint for operators (metrics_listen), served by http_server.c
 * (connection cap metrics_max_connections, idle timeout metrics_idle_timeout):
 *   GET /metrics  the Stats op's numbers (one snapshot, stats.h), requests by tenant, the
 *                 process's CPU and memory and the GPUs' NVML numbers (nvml.c, loaded at the
 *                 first scrape; none without the driver) in the Prometheus text exposition
 *                 format 0.0.4;
 *   GET /livez    200 "ok" while the process serves HTTP; 503 once the backend failed for good;
 *   GET /readyz   200 "ready" while the backend is up, fosd is not draining and its listeners
 *                 accept connections; 503 "not ready: WHY" otherwise;
 *   GET /healthz  200 "ok" while serving, 503 "draining" once fosd drains (503 "backend failed"
 *                 when the backend failed for good);
 *   HEAD of each; another method 405 (Allow: GET, HEAD); another path 404.
 * Plain http:// only. The page carries counters, sizes, tenant names and the device name, never
 * tensors, weight names or tokens; an address that is not loopback is allowed, with a warning in
 * the log.
 *
 * Latency distributions are Prometheus histograms in seconds: cumulative _bucket{le} lines at
 * every power of two of microseconds from 4 us to 2^31 us (edges of fosd's own buckets, so the
 * counts are exact), +Inf, _sum and _count; the whole request's by op and status code, its parts
 * (queue, input copy, compute, output copy, run) over OK requests a lane ran, as in Stats. */
#include "http_metrics.h"
#include "http_server.h"
#include "fos_wire.h"
#include "log.h"
#include "nvml.h"
#include "transport.h"
#include "util.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <nng/nng.h>

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

/* The series of one distribution: cumulative buckets, _sum and _count; labels: op="OP" and, when
 * code is not NULL, code="CODE". */
static void pb_hist(prom_buf *b, const char *name, const char *op, const char *code, const fosd_hist_snap *h)
{
	char v[48], series[128];
	for (int part = 0; part < 3; part++) {
		static const char *const suffix[] = {"_bucket", "_sum", "_count"};
		snprintf(series, sizeof series, "%s%s", name, suffix[part]);
		int nb = part == 0 ? FOSD_PROM_LE_N + 1 : 1;
		for (int i = 0; i < nb; i++) {
			pb_series_op(b, series, op);
			if (code) {
				pb_printf(b, ",code=\"");
				pb_escaped(b, code, 1);
				pb_printf(b, "\"");
			}
			if (part == 0 && i < FOSD_PROM_LE_N) {
				le_label(FOSD_PROM_LE_MIN_LOG2 + i, v, sizeof v);
				pb_printf(b, ",le=\"%s\"} %llu\n", v, (unsigned long long)h->below[i]);
			} else if (part == 0) {
				pb_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)h->count);
			} else if (part == 1) {
				us_to_seconds(h->sum_us, v, sizeof v);
				pb_printf(b, "} %s\n", v);
			} else {
				pb_printf(b, "} %llu\n", (unsigned long long)h->count);
			}
		}
	}
}

/* One histogram family over the ops that were answered at least once; off: the fosd_hist_snap in
 * fosd_op_snap. by_code: off is an array by status code, one histogram per code seen. */
static void pb_hist_family(prom_buf *b, const fosd_prom_snapshot *s, const char *name, const char *help, size_t off,
			   int by_code)
{
	pb_family(b, name, "histogram", help);
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		const fosd_op_snap *om = &s->ops[i];
		if (!om->requests)
			continue;
		const fosd_hist_snap *h = (const fosd_hist_snap *)(const void *)((const char *)om + off);
		if (!by_code) {
			pb_hist(b, name, fosd_op_name(i), NULL, h);
			continue;
		}
		for (int c = 0; c < FOSD_NUM_CODES; c++)
			if (om->codes[c])
				pb_hist(b, name, fosd_op_name(i), fosw_code_name(c), &h[c]);
	}
}

/* One counter or gauge per op (answered at least once). */
static void pb_op_family(prom_buf *b, const fosd_prom_snapshot *s, const char *name, const char *type,
			 const char *help, size_t field_offset)
{
	pb_family(b, name, type, help);
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		const fosd_op_snap *om = &s->ops[i];
		if (!om->requests)
			continue;
		uint64_t v;
		memcpy(&v, (const char *)om + field_offset, sizeof v);
		pb_series_op(b, name, fosd_op_name(i));
		pb_printf(b, "} %llu\n", (unsigned long long)v);
	}
}

static void pb_code_series(prom_buf *b, const char *name, int op, int code, const char *tenant, uint64_t n)
{
	pb_series_op(b, name, fosd_op_name(op));
	pb_printf(b, ",code=\"");
	pb_escaped(b, fosw_code_name(code), 1);
	pb_printf(b, "\",tenant=\"");
	pb_escaped(b, tenant, 1);
	pb_printf(b, "\"} %llu\n", (unsigned long long)n);
}

/* requests by op, status code and tenant: the combinations seen so far (tenant "": none) */
static void pb_codes_family(prom_buf *b, const fosd_prom_snapshot *s, const char *name, const char *type,
			    const char *help)
{
	pb_family(b, name, type, help);
	if (s->tenant_counts) {
		for (size_t i = 0; i < s->n_tenant_counts; i++) {
			const fosd_tenant_count *t = &s->tenant_counts[i];
			pb_code_series(b, name, t->op, t->code, t->tenant, t->n);
		}
		return;
	}
	for (int i = 0; i < FOSD_NUM_OPS; i++)
		for (int c = 0; c < FOSD_NUM_CODES; c++)
			if (s->ops[i].codes[c])
				pb_code_series(b, name, i, c, "", s->ops[i].codes[c]);
}

static void pb_scalar(prom_buf *b, const char *name, const char *type, const char *help, uint64_t v);

/* The GPUs NVML sees: one series per GPU of each number it reports. */
static void pb_gpu_label(prom_buf *b, const char *name, const fosd_gpu_stat *g)
{
	pb_printf(b, "%s{gpu=\"%u\",uuid=\"", name, g->index);
	pb_escaped(b, g->uuid, 1);
	pb_printf(b, "\",name=\"");
	pb_escaped(b, g->name, 1);
	pb_printf(b, "\"}");
}

static void pb_gpus(prom_buf *b, const fosd_prom_snapshot *s)
{
	pb_scalar(b, "fosd_nvml_available", "gauge",
		  "1 when NVML (libnvidia-ml.so.1) is loaded and the fosd_gpu_* series report the GPUs it sees.",
		  (uint64_t)(s->nvml != 0));
	static const struct {
		const char *name, *help;
	} fam[] = {
		{"fosd_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran on the GPU (NVML)."},
		{"fosd_gpu_memory_utilization_ratio", "Fraction of the last sample period device memory was read or "
						      "written (NVML)."},
		{"fosd_gpu_memory_used_bytes", "Device memory in use, by every process (NVML)."},
		{"fosd_gpu_memory_total_bytes", "Device memory in all (NVML)."},
		{"fosd_gpu_power_watts", "Power drawn by the GPU board (NVML)."},
		{"fosd_gpu_temperature_celsius", "GPU die temperature (NVML)."},
	};
	int n = s->nvml ? s->n_gpus : 0;
	for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
		pb_family(b, fam[f].name, "gauge", fam[f].help);
		for (int i = 0; i < n && i < FOSD_MAX_GPUS; i++) {
			const fosd_gpu_stat *g = &s->gpus[i];
			int has[] = {g->has_util, g->has_util, g->has_mem, g->has_mem, g->has_power, g->has_temp};
			if (!has[f])
				continue;
			pb_gpu_label(b, fam[f].name, g);
			switch (f) {
			case 0: pb_printf(b, " %u.%02u\n", g->util_gpu / 100, g->util_gpu % 100); break;
			case 1: pb_printf(b, " %u.%02u\n", g->util_mem / 100, g->util_mem % 100); break;
			case 2: pb_printf(b, " %llu\n", (unsigned long long)g->mem_used); break;
			case 3: pb_printf(b, " %llu\n", (unsigned long long)g->mem_total); break;
			case 4: pb_printf(b, " %u.%03u\n", g->power_mw / 1000, g->power_mw % 1000); break;
			default: pb_printf(b, " %u\n", g->temp_c); break;
			}
		}
	}
}

/* The devices fosd serves (--devices): one series per device of each of its numbers. */
static void pb_devices(prom_buf *b, const fosd_prom_snapshot *s)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} fam[] = {
#define D(f) offsetof(fosd_dev_stat, f)
		{"fosd_device_weight_cache_bytes", "gauge", "Bytes held by the device's weight cache.", D(cache.bytes)},
		{"fosd_device_weight_cache_budget_bytes", "gauge", "The device's weight cache budget.", D(cache.budget)},
		{"fosd_device_weight_cache_entries", "gauge", "Weights (copies) cached on the device.", D(cache.entries)},
		{"fosd_device_contexts", "gauge", "Saved contexts held on the device.", D(contexts.count)},
		{"fosd_device_context_bytes", "gauge", "Bytes of the device's saved contexts.", D(contexts.bytes)},
		{"fosd_device_decoded_tier_bytes", "gauge", "Bytes of the device's decoded tier.", D(cache.tier_bytes)},
		{"fosd_device_scratch_bytes", "gauge", "The device's lanes' decode buffers.", D(cache.scratch_bytes)},
		{"fosd_device_client_mappings", "gauge", "Client GPU allocations open on the device.", D(device_mappings)},
		{"fosd_device_lanes", "gauge", "Executor lanes of the device.", D(lanes)},
		{"fosd_device_lanes_busy", "gauge", "Of them, running a request now.", D(lanes_busy)},
		{"fosd_device_queued_requests", "gauge", "Requests waiting for the device's executor.", D(queued)},
		{"fosd_device_requests_total", "counter", "Requests run on the device.", D(requests)},
#undef D
	};
	for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
		pb_family(b, fam[f].name, fam[f].type, fam[f].help);
		for (int i = 0; i < s->n_devs; i++) {
			uint64_t v;
			memcpy(&v, (const char *)&s->devs[i] + fam[f].off, sizeof v);
			pb_printf(b, "%s{device=\"%d\",name=\"", fam[f].name, i);
			pb_escaped(b, s->devs[i].device ? s->devs[i].device : "", 1);
			pb_printf(b, "\"} %llu\n", (unsigned long long)v);
		}
	}
	pb_family(b, "fosd_device_busy_seconds_total", "counter", "Time the device's lanes spent running requests.");
	for (int i = 0; i < s->n_devs; i++) {
		char v[48];
		us_to_seconds(s->devs[i].busy_us, v, sizeof v);
		pb_printf(b, "fosd_device_busy_seconds_total{device=\"%d\",name=\"", i);
		pb_escaped(b, s->devs[i].device ? s->devs[i].device : "", 1);
		pb_printf(b, "\"} %s\n", v);
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
	for (size_t i = 0; i < fosd_stats_nrows; i++) {
		const fosd_stat_row *r = &fosd_stats_rows[i];
		const char *src = (const char *)s + r->off;
		if (!r->prom)
			continue;
		switch (r->kind) {
		case FOSD_STAT_U64: {
			uint64_t x;
			memcpy(&x, src, sizeof x);
			pb_scalar(&b, r->prom, r->type, r->help, x);
			break;
		}
		case FOSD_STAT_FLAG: {
			int x;
			memcpy(&x, src, sizeof x);
			pb_scalar(&b, r->prom, r->type, r->help, (uint64_t)(x != 0));
			break;
		}
		case FOSD_STAT_US: {
			uint64_t x;
			memcpy(&x, src, sizeof x);
			us_to_seconds(x, v, sizeof v);
			pb_family(&b, r->prom, r->type, r->help);
			pb_printf(&b, "%s %s\n", r->prom, v);
			break;
		}
		case FOSD_STAT_OP_U64:
			pb_op_family(&b, s, r->prom, r->type, r->help, r->off);
			break;
		case FOSD_STAT_OP_HIST:
			pb_hist_family(&b, s, r->prom, r->help, r->off, 0);
			break;
		case FOSD_STAT_OP_CODE_HIST:
			pb_hist_family(&b, s, r->prom, r->help, r->off, 1);
			break;
		case FOSD_STAT_OP_CODES:
			pb_codes_family(&b, s, r->prom, r->type, r->help);
			break;
		}
	}
	pb_devices(&b, s);
	pb_gpus(&b, s);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	if (len)
		*len = b.len;
	return b.p;
}

/* ---- the URL -------------------------------------------------------------------------------- */


/* ---- the endpoint -------------------------------------------------------------------------- */

struct fosd_http_metrics {
	fosd_tpsrv *srv;
	fosd_http_server *hs;
	int nvml_tried;   /* NVML is loaded at the first /metrics (on the HTTP thread) */
	fosd_nvml *nvml;  /* NULL: no NVML on this host */
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
			fosd_stats_take(hm->srv, snap);
			fosd_tenant_count *tc = fosd_metrics_tenant_counts(&hm->srv->metrics, &snap->n_tenant_counts);
			snap->tenant_counts = tc;
			if (!hm->nvml_tried) {
				char why[512];
				hm->nvml_tried = 1;
				hm->nvml = fosd_nvml_open(NULL, why, sizeof why);
				if (hm->nvml)
					fosd_info("metrics: GPU numbers from NVML");
				else
					fosd_info("metrics: no GPU numbers (%s)", why);
			}
			snap->nvml = hm->nvml != NULL;
			snap->n_gpus = fosd_nvml_sample(hm->nvml, snap->gpus, FOSD_MAX_GPUS);
			text = fosd_prom_format(snap, &len);
			free(tc);
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
	} else if (!strcmp(path, "/livez")) {
		/* the process answers; only a backend failed for good (fosd then exits 1) is not alive */
		if (atomic_load(&hm->srv->fatal))
			page_text(pg, 503, "backend failed\n");
		else
			page_text(pg, 200, "ok\n");
	} else if (!strcmp(path, "/readyz")) {
		fosd_tpsrv *srv = hm->srv;
		if (atomic_load(&srv->fatal))
			page_text(pg, 503, "not ready: backend failed\n");
		else if (atomic_load(&srv->draining))
			page_text(pg, 503, "not ready: draining\n");
		else if (atomic_load(&srv->closing) || !srv->sock_open || srv->n_listeners < 1)
			page_text(pg, 503, "not ready: not accepting connections\n");
		else
			page_text(pg, 200, "ready\n");
	} else {
		page_text(pg, 404, "not found: fosd serves /metrics, /livez, /readyz and /healthz\n");
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

int fosd_http_metrics_start(fosd_tpsrv *srv, const char *url, fosd_http_metrics **out, char *msg, size_t msgsz)
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
		snprintf(msg, msgsz, "cannot serve metrics on %s: %s (metrics_listen: give another port, or off)", url,
			 why);
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
	fosd_info("metrics on http://%s:%d (GET /metrics, /livez, /readyz, /healthz; at most %d connections, an idle "
		  "one closed %s)",
		  host_s, port, o.max_connections, idle);
	if (!is_loopback(&sa))
		fosd_warn("metrics: %s is reachable from other hosts: anyone who can connect reads fosd's request "
			  "counts, sizes, tenant names and device (no tensors, weight names or tokens); bind 127.0.0.1 "
			  "or firewall it",
			  url);
	*out = hm;
	return 0;
}

void fosd_http_metrics_stop(fosd_http_metrics *hm)
{
	if (!hm)
		return;
	fosd_http_server_stop(hm->hs); /* no route runs after it */
	fosd_nvml_close(hm->nvml);
	free(hm);
}
