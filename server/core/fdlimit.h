/* fdlimit.h: fosd's file descriptor budget (fdlimit.c).
 *
 * At start fosd raises its RLIMIT_NOFILE soft limit to the hard limit, then splits what the limit
 * leaves, after the descriptors already open and a reserve (listeners, the log, the backend's
 * device files, the event loops, connections that are told they are over the cap), between the
 * descriptor consumers, each with a cap:
 *   - client connections (nng pipes, one descriptor each): max_connections, 0 = auto;
 *   - HTTP endpoint connections: metrics_max_connections, lowered to its share when it exceeds it;
 *   - shared-memory regions in all (each keeps its object open and mapped, regions.c), at most
 *     FOSD_SHM_MAX_TOTAL; request channels (a region each, and a thread) at most as many.
 * Invariant: reserve + connections + HTTP + regions <= limit - descriptors open at start, unless
 * max_connections was set by hand above its share (then a warning says so). */
#ifndef FOSD_FDLIMIT_H
#define FOSD_FDLIMIT_H

#include <stdint.h>
#include <stddef.h>

#include "util.h" /* fosd_fd_exhausted */

#define FOSD_FD_RESERVE_MIN 64 /* descriptors kept back: at least this, plus limit / 16 */
#define FOSD_FD_MIN_CONNECTIONS 4

typedef struct fosd_fd_caps {
	uint64_t limit;      /* the soft limit the caps come from */
	uint64_t open;       /* descriptors open when they were computed */
	uint64_t reserve;
	int connections;     /* client connections */
	int http;            /* HTTP endpoint connections (0: no endpoint) */
	uint64_t regions;    /* shared-memory regions in all */
	int channels;        /* request channels in all */
	int over_budget;     /* an explicit max_connections exceeds its share */
} fosd_fd_caps;

/* The caps for a soft limit, the descriptors open now, max_connections (0: auto) and
 * metrics_max_connections (http_on 0: no endpoint). Pure: no system calls. */
void fosd_fd_caps_compute(uint64_t limit, uint64_t open_now, int max_connections, int metrics_max_connections,
			  int http_on, fosd_fd_caps *out);

struct fosd_server;

/* Raises the soft limit to the hard one (logged: both limits), computes the caps from what is
 * open now and applies them: srv->cfg->max_connections (when 0), srv->cfg->metrics_max_connections
 * (when above its share), the region and channel totals; logs the caps in one line. Called once,
 * after fosd_server_init and before the transport, the executor and the HTTP endpoint start.
 * Returns 0 (a limit that cannot be raised is a warning, not an error). */
int fosd_fdlimit_setup(struct fosd_server *srv, char *msg, size_t msgsz);

/* Descriptors open in this process now (/proc/self/fd); -1 when that cannot be read. */
long fosd_fd_count_open(void);

#endif
