/* http_metrics.h: fosd's HTTP endpoint for operators (setting metrics_listen), served by
 * http_server.h's server (a connection cap and an idle timeout): GET /metrics (Prometheus text
 * exposition format 0.0.4: the numbers of the Stats op, requests by tenant, the process's and
 * the GPUs'), GET /livez, /readyz and /healthz (http_metrics.c says what each answers). The page
 * is built from a snapshot (fosd_stats, stats.h) by a pure function over stats.h's rows, so the
 * text is testable without HTTP. */
#ifndef FOSD_HTTP_METRICS_H
#define FOSD_HTTP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "stats.h"

/* The snapshot /metrics exports: the one of the Stats op (stats.h). */
typedef fosd_stats fosd_prom_snapshot;

/* The Prometheus text of s: fosd_info and fosd_uptime_seconds, then one family per row of
 * fosd_stats_rows that names one, then fosd_nvml_available and the GPU families. A malloc'd
 * NUL-terminated string (free() it), its length in *len. NULL when out of memory. Per-op series
 * appear once the op has been answered at least once (then stay, zeros included); a status code's
 * series with its first request. fosd_requests_total is by op, code and tenant: from
 * s->tenant_counts, or with tenant="" for all when it is NULL. */
char *fosd_prom_format(const fosd_prom_snapshot *s, size_t *len);

/* Escapes a label value per the text format (backslash, double quote, line feed) into out
 * (NUL-terminated, truncated to outsz). Returns the length of the full escaped value. */
size_t fosd_prom_escape_label(const char *in, char *out, size_t outsz);

/* The metrics_listen value's check, fosd_http_metrics_check_url, is the config's (config.h). */

struct fosd_tpsrv;
typedef struct fosd_http_metrics fosd_http_metrics;

/* Serves /metrics, /livez, /readyz and /healthz of srv on url (checked as above) until fosd_http_metrics_stop,
 * with at most srv->cfg->metrics_max_connections connections and srv->cfg->metrics_idle_timeout_ms.
 * Logs "metrics on http://HOST:PORT" (the bound port) and a warning for an address that is not
 * loopback. Returns 0 with *out set, or -1 with msg (e.g. the port is taken). */
int fosd_http_metrics_start(struct fosd_tpsrv *srv, const char *url, fosd_http_metrics **out, char *msg,
			    size_t msgsz);
/* Closes the listener and every connection; no handler runs after it returns. NULL is fine. */
void fosd_http_metrics_stop(fosd_http_metrics *h);

#endif
