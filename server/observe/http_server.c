/* http_server.c: the HTTP/1.1 server of fosd's operators' endpoint (see http_server.h): the
 * listening socket, accepting with a cap and a spare descriptor, per connection a libuv TCP handle,
 * a timer and an http-parser state, replies written in order, and shutdown.
 *
 * Invariants: everything but start and stop runs on the server's own thread; hs->n_conns is the
 * number of open connections and never exceeds max_connections; hs->head..tail lists them least
 * recently active first (accept, a reply started or finished); a connection reads only while no
 * reply of its is being written, so at most one reply per connection is in flight, and bytes read
 * past a request wait in c->pend until its reply is written. */
#include "http_server.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define HS_READ_BUF 16384
#define HS_ACCEPT_BURST 64 /* connections accepted per wake-up of the listener */
#define HS_URL_MAX 2048
#define HS_WARN_EVERY_NS (10ull * 1000000000ull)

typedef struct hs_conn hs_conn;

struct fosd_http_server {
	uv_loop_t loop;
	int lfd;                /* the listening socket */
	int spare_fd;           /* /dev/null, given up to accept one connection when out of descriptors */
	uv_poll_t lpoll;        /* lfd readable */
	uv_timer_t pause;       /* accepting resumes when it fires */
	uv_async_t stop;
	pthread_t th;
	int handles_inited;     /* lpoll, pause and stop were initialized */
	int thread_started;
	fosd_http_opts o;
	fosd_http_route route;
	void *arg;
	http_parser_settings ps;
	hs_conn *head, *tail;   /* open connections, least recently active first */
	int n_conns;
	uint64_t last_warn_ns, warns_held;
	char rbuf[HS_READ_BUF]; /* every read lands here; the parser copies what it keeps */
};

struct hs_conn {
	uv_tcp_t tcp;
	uv_timer_t timer;       /* idle / request / reply timeout */
	http_parser p;
	fosd_http_server *hs;
	hs_conn *prev, *next;
	int handles;            /* open libuv handles of this connection; freed at 0 */
	int closing;
	int writing;            /* c->out is being written */
	int close_after;        /* close once c->out is written */
	uv_write_t wr;
	char *out;
	size_t out_len;
	char url[HS_URL_MAX + 1];
	size_t url_len;
	int url_long;
	char *pend;             /* read past the request whose reply is being written */
	size_t pend_len;
};

static const char busy_reply[] = "HTTP/1.1 503 Service Unavailable\r\n"
				 "Content-Type: text/plain; charset=utf-8\r\n"
				 "Content-Length: 21\r\n"
				 "Connection: close\r\n\r\n"
				 "too many connections\n";

/* A warning at most every 10 s (the ones between are counted in the next). */
static void warn_limited(fosd_http_server *hs, const char *what, int err)
{
	uint64_t now = fosd_now_ns();
	if (hs->last_warn_ns && now - hs->last_warn_ns < HS_WARN_EVERY_NS) {
		hs->warns_held++;
		return;
	}
	fosd_warn("metrics: %s: %s (%llu more like it since the last warning)", what, strerror(err),
		  (unsigned long long)hs->warns_held);
	hs->last_warn_ns = now;
	hs->warns_held = 0;
}

/* ---- the connection list -------------------------------------------------------------------- */

static void list_remove(fosd_http_server *hs, hs_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		hs->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		hs->tail = c->prev;
	c->prev = c->next = NULL;
}

static void list_append(fosd_http_server *hs, hs_conn *c)
{
	c->prev = hs->tail;
	c->next = NULL;
	if (hs->tail)
		hs->tail->next = c;
	else
		hs->head = c;
	hs->tail = c;
}

static void on_conn_closed(uv_handle_t *h)
{
	hs_conn *c = h->data;
	if (--c->handles == 0) {
		free(c->out);
		free(c->pend);
		free(c);
	}
}

/* Closes c (its descriptor at once); freed when both handles have closed. */
static void conn_close(hs_conn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	list_remove(c->hs, c);
	c->hs->n_conns--;
	uv_close((uv_handle_t *)&c->timer, on_conn_closed);
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_timeout(uv_timer_t *t)
{
	hs_conn *c = t->data;
	fosd_debug("metrics: a connection idle for %llu ms is closed", (unsigned long long)c->hs->o.idle_timeout_ms);
	conn_close(c);
}

/* c was active now: last in the list, its timeout restarts. */
static void touch(hs_conn *c)
{
	fosd_http_server *hs = c->hs;
	list_remove(hs, c);
	list_append(hs, c);
	if (hs->o.idle_timeout_ms)
		uv_timer_start(&c->timer, on_timeout, hs->o.idle_timeout_ms, 0);
}

/* ---- replies -------------------------------------------------------------------------------- */

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Unknown";
	}
}

/* Makes c->out: status line, headers and (unless head_only) body. c->out stays NULL when out of
 * memory (the connection is then closed). */
static void make_reply(hs_conn *c, int status, const char *ctype, const char *body, size_t len, int head_only,
		       int allow)
{
	const char *conn = "";
	if (c->close_after)
		conn = "Connection: close\r\n";
	else if (c->p.http_major == 1 && c->p.http_minor == 0)
		conn = "Connection: keep-alive\r\n";
	char hdr[512];
	int hn = snprintf(hdr, sizeof hdr,
			  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s%s\r\n",
			  status, reason(status), ctype ? ctype : "text/plain; charset=utf-8", len,
			  allow ? "Allow: GET, HEAD\r\n" : "", conn);
	size_t blen = head_only || !body ? 0 : len;
	free(c->out);
	c->out = malloc((size_t)hn + blen);
	c->out_len = 0;
	if (!c->out)
		return;
	memcpy(c->out, hdr, (size_t)hn);
	if (blen)
		memcpy(c->out + hn, body, blen);
	c->out_len = (size_t)hn + blen;
}

static void error_reply(hs_conn *c, int status, const char *text)
{
	c->close_after = 1;
	make_reply(c, status, NULL, text, strlen(text), 0, 0);
}

static void conn_feed(hs_conn *c, const char *data, size_t len);
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)suggested;
	hs_conn *c = h->data;
	*b = uv_buf_init(c->hs->rbuf, sizeof c->hs->rbuf);
}

static void on_written(uv_write_t *w, int status)
{
	hs_conn *c = w->data;
	free(c->out);
	c->out = NULL;
	c->writing = 0;
	if (c->closing)
		return;
	if (status < 0 || c->close_after) {
		conn_close(c);
		return;
	}
	touch(c);
	http_parser_pause(&c->p, 0);
	char *rest = c->pend;
	size_t rn = c->pend_len;
	c->pend = NULL;
	c->pend_len = 0;
	if (rest) {
		conn_feed(c, rest, rn);
		free(rest);
		if (c->writing || c->closing)
			return;
	}
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
		conn_close(c);
}

/* Writes c->out; reading stops until it is written. */
static void conn_send(hs_conn *c)
{
	if (!c->out) {
		conn_close(c);
		return;
	}
	c->writing = 1;
	uv_read_stop((uv_stream_t *)&c->tcp);
	touch(c);
	uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
	c->wr.data = c;
	if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
		c->writing = 0;
		conn_close(c);
	}
}

/* ---- requests ------------------------------------------------------------------------------- */

static int on_message_begin(http_parser *p)
{
	hs_conn *c = p->data;
	c->url_len = 0;
	c->url_long = 0;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
	hs_conn *c = p->data;
	if (c->url_len + len > HS_URL_MAX) {
		c->url_long = 1;
		return 0;
	}
	memcpy(c->url + c->url_len, at, len);
	c->url_len += len;
	return 0;
}

/* A whole request (its body, if any, read and dropped): makes its reply, then pauses the parser
 * until the reply is written. */
static int on_message_complete(http_parser *p)
{
	hs_conn *c = p->data;
	fosd_http_server *hs = c->hs;
	c->close_after = !http_should_keep_alive(p) || p->upgrade;
	int head = p->method == HTTP_HEAD;
	struct http_parser_url u;
	http_parser_url_init(&u);
	if (p->method != HTTP_GET && !head) {
		static const char text[] = "method not allowed: use GET\n";
		make_reply(c, 405, NULL, text, sizeof text - 1, 0, 1);
	} else if (c->url_long) {
		error_reply(c, 414, "the URL is too long\n");
	} else if (http_parser_parse_url(c->url, c->url_len, 0, &u) || !(u.field_set & (1 << UF_PATH))) {
		error_reply(c, 400, "bad request URL\n");
	} else {
		char path[HS_URL_MAX + 1];
		memcpy(path, c->url + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len);
		path[u.field_data[UF_PATH].len] = 0;
		fosd_http_page pg;
		memset(&pg, 0, sizeof pg);
		hs->route(hs->arg, path, &pg);
		make_reply(c, pg.status ? pg.status : 500, pg.content_type, pg.body, pg.len, head, 0);
		free(pg.body);
	}
	http_parser_pause(p, 1);
	return 0;
}

static void conn_feed(hs_conn *c, const char *data, size_t len)
{
	size_t n = http_parser_execute(&c->p, &c->hs->ps, data, len);
	enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
	if (e == HPE_PAUSED) { /* a reply is made: what follows waits for it */
		if (n < len && !c->close_after) {
			c->pend = malloc(len - n);
			if (c->pend) {
				memcpy(c->pend, data + n, len - n);
				c->pend_len = len - n;
			} else {
				c->close_after = 1;
			}
		}
		conn_send(c);
		return;
	}
	if (e != HPE_OK || n != len) {
		if (e == HPE_HEADER_OVERFLOW)
			error_reply(c, 431, "the request head is too large\n");
		else
			error_reply(c, 400, "bad request\n");
		conn_send(c);
	}
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
	hs_conn *c = st->data;
	if (n < 0) { /* the peer closed, or an error */
		conn_close(c);
		return;
	}
	if (n > 0)
		conn_feed(c, b->base, (size_t)n);
}

/* ---- accepting ------------------------------------------------------------------------------ */

/* Closes the open connection idle the longest (none of its replies in flight); 0 when there is
 * none. */
static int evict_one(fosd_http_server *hs)
{
	for (hs_conn *c = hs->head; c; c = c->next)
		if (!c->writing) {
			fosd_debug("metrics: at the cap of %d connections: the one idle the longest is closed",
				   hs->o.max_connections);
			conn_close(c);
			return 1;
		}
	return 0;
}

static void refuse(int fd)
{
	ssize_t w = send(fd, busy_reply, sizeof busy_reply - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)w;
	close(fd);
}

static void admit(fosd_http_server *hs, int fd)
{
	if (hs->n_conns >= hs->o.max_connections && !evict_one(hs)) {
		fosd_debug("metrics: %d connections are all writing replies: a new one is refused", hs->n_conns);
		refuse(fd);
		return;
	}
	hs_conn *c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->hs = hs;
	uv_tcp_init(&hs->loop, &c->tcp);
	uv_timer_init(&hs->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->handles = 2;
	http_parser_init(&c->p, HTTP_REQUEST);
	c->p.data = c;
	list_append(hs, c);
	hs->n_conns++;
	if (uv_tcp_open(&c->tcp, fd)) {
		close(fd);
		conn_close(c);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	touch(c);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
		conn_close(c);
}

static void on_listen_ready(uv_poll_t *h, int status, int events);

static void on_pause_end(uv_timer_t *t)
{
	fosd_http_server *hs = t->data;
	if (hs->spare_fd < 0)
		hs->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_poll_start(&hs->lpoll, UV_READABLE, on_listen_ready);
}

static void pause_accept(fosd_http_server *hs)
{
	uv_poll_stop(&hs->lpoll);
	uv_timer_start(&hs->pause, on_pause_end, FOSD_HTTP_PAUSE_MS, 0);
}

/* Out of descriptors: gives up the spare to accept one pending connection and close it at once.
 * Returns 1 when one was, 0 when none was pending, -1 when it cannot (no spare). */
static int shed_one(fosd_http_server *hs)
{
	if (hs->spare_fd < 0)
		return -1;
	close(hs->spare_fd);
	hs->spare_fd = -1;
	int fd = accept4(hs->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int err = errno;
	if (fd >= 0)
		refuse(fd);
	hs->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		warn_limited(hs, "out of file descriptors: a connection was closed as it came", EMFILE);
		return 1;
	}
	return err == EAGAIN || err == EWOULDBLOCK ? 0 : -1;
}

static void on_listen_ready(uv_poll_t *h, int status, int events)
{
	(void)events;
	fosd_http_server *hs = h->data;
	if (status < 0) {
		warn_limited(hs, "the listener failed; accepting again shortly", -status);
		pause_accept(hs);
		return;
	}
	for (int i = 0; i < HS_ACCEPT_BURST; i++) {
		int fd = accept4(hs->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			admit(hs, fd);
			continue;
		}
		int err = errno;
		if (err == EAGAIN || err == EWOULDBLOCK)
			return;
		if (err == EINTR || err == ECONNABORTED || err == EPROTO)
			continue;
		if (fosd_fd_exhausted(err)) {
			int r = shed_one(hs);
			if (r > 0)
				continue;
			if (r == 0)
				return;
		}
		warn_limited(hs, "cannot accept a connection; accepting again shortly", err);
		pause_accept(hs);
		return;
	}
}

/* ---- start and stop ------------------------------------------------------------------------- */

static void close_conns_and_handles(fosd_http_server *hs)
{
	while (hs->head)
		conn_close(hs->head);
	if (hs->handles_inited) {
		uv_close((uv_handle_t *)&hs->lpoll, NULL);
		uv_close((uv_handle_t *)&hs->pause, NULL);
		uv_close((uv_handle_t *)&hs->stop, NULL);
		hs->handles_inited = 0;
	}
}

static void on_stop(uv_async_t *a)
{
	close_conns_and_handles(a->data);
}

static void *hs_main(void *arg)
{
	fosd_http_server *hs = arg;
	uv_run(&hs->loop, UV_RUN_DEFAULT);
	return NULL;
}

static void hs_free(fosd_http_server *hs)
{
	close_conns_and_handles(hs);
	uv_run(&hs->loop, UV_RUN_DEFAULT); /* the close callbacks */
	if (uv_loop_close(&hs->loop))
		fosd_warn("metrics: the HTTP loop did not close cleanly");
	if (hs->lfd >= 0)
		close(hs->lfd);
	if (hs->spare_fd >= 0)
		close(hs->spare_fd);
	free(hs);
}

int fosd_http_server_start(const struct sockaddr *addr, socklen_t addrlen, const fosd_http_opts *o,
			   fosd_http_route route, void *arg, struct sockaddr_storage *bound, fosd_http_server **out,
			   char *msg, size_t msgsz)
{
	*out = NULL;
	fosd_http_server *hs = calloc(1, sizeof *hs);
	if (!hs) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	hs->lfd = hs->spare_fd = -1;
	hs->o = *o;
	if (hs->o.max_connections < 1)
		hs->o.max_connections = 1;
	hs->route = route;
	hs->arg = arg;
	http_parser_settings_init(&hs->ps);
	hs->ps.on_message_begin = on_message_begin;
	hs->ps.on_url = on_url;
	hs->ps.on_message_complete = on_message_complete;
	http_parser_set_max_header_size(FOSD_HTTP_HEAD_MAX);
	int rv = uv_loop_init(&hs->loop);
	if (rv) {
		snprintf(msg, msgsz, "libuv: %s", uv_strerror(rv));
		free(hs);
		return -1;
	}
	const char *what = "socket";
	int one = 1;
	hs->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int ok = hs->lfd >= 0;
	if (ok) {
		setsockopt(hs->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		what = "bind";
		ok = bind(hs->lfd, addr, addrlen) == 0;
	}
	if (ok) {
		what = "listen";
		ok = listen(hs->lfd, 128) == 0;
	}
	socklen_t bl = sizeof *bound;
	memset(bound, 0, sizeof *bound);
	if (ok) {
		what = "getsockname";
		ok = getsockname(hs->lfd, (struct sockaddr *)bound, &bl) == 0;
	}
	if (!ok) {
		snprintf(msg, msgsz, "%s: %s", what, strerror(errno));
		hs_free(hs);
		return -1;
	}
	hs->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_poll_init(&hs->loop, &hs->lpoll, hs->lfd);
	uv_timer_init(&hs->loop, &hs->pause);
	uv_async_init(&hs->loop, &hs->stop, on_stop);
	hs->lpoll.data = hs->pause.data = hs->stop.data = hs;
	hs->handles_inited = 1;
	if ((rv = uv_poll_start(&hs->lpoll, UV_READABLE, on_listen_ready))) {
		snprintf(msg, msgsz, "libuv: %s", uv_strerror(rv));
		hs_free(hs);
		return -1;
	}
	if ((rv = pthread_create(&hs->th, NULL, hs_main, hs))) {
		snprintf(msg, msgsz, "cannot start the HTTP thread: %s", strerror(rv));
		hs_free(hs);
		return -1;
	}
	hs->thread_started = 1;
	*out = hs;
	return 0;
}

void fosd_http_server_stop(fosd_http_server *hs)
{
	if (!hs)
		return;
	if (hs->thread_started) {
		uv_async_send(&hs->stop);
		pthread_join(hs->th, NULL);
	}
	hs_free(hs);
}
