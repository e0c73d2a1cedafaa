/* http_metrics.h: fosd's HTTP endpoint for operators (setting metrics_listen), served by
 * http_server.h's server (a connection cap and an idle timeout): GET /metrics (Prometheus text
 * exposition format 0.0.4, the numbers of the Stats op) and GET /healthz (200 "ok" while serving,
 * 503 once fosd drains). The page is built from a
 * snapshot (fosd_prom_snapshot) by a pure function, so the text is testable without HTTP. */
#ifndef FOSD_HTTP_METRICS_H
#define FOSD_HTTP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "contexts.h"
#include "metrics.h"
#include "msg_pool.h"
#include "wcache.h"

/* Histogram buckets exported: le = 2^k microseconds (in seconds) for k = MIN..MAX, then +Inf.
 * Every 2^k us is an edge of fosd's own log-linear buckets (metrics.h), so the counts are exact:
 * le = 2^k us counts the durations recorded below 2^k whole microseconds. */
#define FOSD_PROM_LE_MIN_LOG2 2  /* 4 us */
#define FOSD_PROM_LE_MAX_LOG2 31 /* 2147.483648 s */

/* Everything /metrics exports, taken at one moment. */
typedef struct fosd_prom_snapshot {
	const char *version, *backend, *device;
	uint64_t uptime_ms;
	int draining;                   /* drains (SIGTERM/SIGINT, or a backend failed for good) */
	int failed;                     /* the backend failed for good */
	fosd_op_metrics ops[FOSD_NUM_OPS];
	uint64_t duplicates, bad_messages;
	fosd_wcache_stats cache;
	fosd_contexts_stats contexts;
	uint64_t inflight, queued, workers;
	uint64_t shm_regions, shm_region_bytes, shm_mapped_bytes;
	uint64_t channels, channel_requests;
	uint64_t connections, connections_dropped, connection_refusals, connections_rejected;
	fosd_msgpool_stats pool;
} fosd_prom_snapshot;

struct fosd_server;

/* Fills out from a running server (the same sources as the Stats op). */
void fosd_prom_snapshot_take(struct fosd_server *srv, fosd_prom_snapshot *out);

/* The Prometheus text of s: a malloc'd NUL-terminated string (free() it), its length in *len.
 * NULL when out of memory. Per-op series appear once the op has been answered at least once
 * (then stay, zeros included); a status code's series with its first request. */
char *fosd_prom_format(const fosd_prom_snapshot *s, size_t *len);

/* Escapes a label value per the text format (backslash, double quote, line feed) into out
 * (NUL-terminated, truncated to outsz). Returns the length of the full escaped value. */
size_t fosd_prom_escape_label(const char *in, char *out, size_t outsz);

/* Checks a metrics_listen value: http://HOST:PORT with an explicit port (0: any free port) and no
 * path. Returns 0, or -1 with msg. */
int fosd_http_metrics_check_url(const char *url, char *msg, size_t msgsz);

typedef struct fosd_http_metrics fosd_http_metrics;

/* Serves /metrics and /healthz of srv on url (checked as above) until fosd_http_metrics_stop,
 * with at most srv->cfg->metrics_max_connections connections and srv->cfg->metrics_idle_timeout_ms.
 * Logs "metrics on http://HOST:PORT" (the bound port) and a warning for an address that is not
 * loopback. Returns 0 with *out set, or -1 with msg (e.g. the port is taken). */
int fosd_http_metrics_start(struct fosd_server *srv, const char *url, fosd_http_metrics **out, char *msg,
			    size_t msgsz);
/* Closes the listener and every connection; no handler runs after it returns. NULL is fine. */
void fosd_http_metrics_stop(fosd_http_metrics *h);

#endif
