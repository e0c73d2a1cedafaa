/* http_server.h: a small HTTP/1.1 server for read-only GET endpoints (http_server.c), on a libuv
 * loop of its own thread, with requests parsed by the http-parser library. It owns the sockets;
 * what a path returns comes from a route function (http_metrics.c: /metrics and /healthz).
 *
 * Limits, so that no client can take the endpoint or fosd's descriptors:
 *   - at most max_connections open connections; a new one past it closes the connection that was
 *     idle the longest (no reply being written), or, when every one is writing a reply, is
 *     answered 503 and closed at once;
 *   - a connection must bring a whole request within idle_timeout_ms of its accept or of its last
 *     reply, and take each reply within idle_timeout_ms, else it is closed (0: no timeout);
 *   - the request line and headers are at most FOSD_HTTP_HEAD_MAX bytes (else 431, closed);
 *   - when the process runs out of descriptors, the pending connection is accepted on a spare
 *     descriptor and closed; if even that fails, accepting pauses FOSD_HTTP_PAUSE_MS (never spins).
 * GET and HEAD (the same headers, no body) go to the route; any other method is 405 with
 * Allow: GET, HEAD. Keep-alive and pipelined requests are answered in order; request bodies are
 * read and dropped. */
#ifndef FOSD_HTTP_SERVER_H
#define FOSD_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define FOSD_HTTP_HEAD_MAX 8192
#define FOSD_HTTP_PAUSE_MS 100

/* A route's answer. */
typedef struct fosd_http_page {
	int status;               /* 200, 404, 500, 503 ... */
	const char *content_type; /* NULL: text/plain; charset=utf-8 */
	char *body;               /* malloc'd, freed by the server; NULL: empty */
	size_t len;
} fosd_http_page;

/* Fills *page for a GET or HEAD of path (the URL's path, without query). Runs on the server's
 * thread; page starts zeroed. */
typedef void (*fosd_http_route)(void *arg, const char *path, fosd_http_page *page);

typedef struct fosd_http_opts {
	int max_connections;      /* at least 1 */
	uint64_t idle_timeout_ms; /* 0: none */
} fosd_http_opts;

typedef struct fosd_http_server fosd_http_server;

/* Listens on addr and serves until fosd_http_server_stop. *bound gets the address bound (the
 * port chosen for port 0). Returns 0, or -1 with msg (e.g. the port is taken). */
int fosd_http_server_start(const struct sockaddr *addr, socklen_t addrlen, const fosd_http_opts *o,
			   fosd_http_route route, void *arg, struct sockaddr_storage *bound, fosd_http_server **out,
			   char *msg, size_t msgsz);
/* Closes the listener and every connection and ends the thread; the route runs no more after it
 * returns. NULL is fine. */
void fosd_http_server_stop(fosd_http_server *s);

#endif
