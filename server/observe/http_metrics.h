/* http_metrics.h: fosd's HTTP endpoint for operators (setting metrics_listen), served by
 * http_server.h's server (a connection cap and an idle timeout): GET /metrics (Prometheus text
 * exposition format 0.0.4, the numbers of the Stats op) and GET /healthz (200 "ok" while serving,
 * 503 once fosd drains). The page is built from a snapshot (fosd_stats, stats.h) by a pure
 * function over stats.h's rows, so the text is testable without HTTP. */
#ifndef FOSD_HTTP_METRICS_H
#define FOSD_HTTP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "stats.h"

/* Histogram buckets exported: le = 2^k microseconds (in seconds) for k = MIN..MAX, then +Inf.
 * Every 2^k us is an edge of fosd's own log-linear buckets (metrics.h), so the counts are exact:
 * le = 2^k us counts the durations recorded below 2^k whole microseconds. */
#define FOSD_PROM_LE_MIN_LOG2 2  /* 4 us */
#define FOSD_PROM_LE_MAX_LOG2 31 /* 2147.483648 s */

/* The snapshot /metrics exports: the one of the Stats op (stats.h). */
typedef fosd_stats fosd_prom_snapshot;

/* The Prometheus text of s: fosd_info and fosd_uptime_seconds, then one family per row of
 * fosd_stats_rows that names one. A malloc'd NUL-terminated string (free() it), its length in
 * *len. NULL when out of memory. Per-op series appear once the op has been answered at least once
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
