/* control.c: fosd's control loop on libuv: SIGTERM/SIGINT start a graceful drain (refuse new connections,
 * answer new requests UNAVAILABLE, let in-flight requests finish, give the last replies a moment
 * to leave), a second signal stops at once; a timer asks the executor to sweep expired contexts. */
#include "server.h"
#include "log.h"
#include "util.h"

#include <signal.h>
#include <uv.h>

#define FOSD_LINGER_MS 2000 /* after the last reply: let connected clients read it */

typedef struct control {
	fosd_server *srv;
	uv_loop_t loop;
	uv_signal_t sigterm, sigint;
	uv_timer_t sweep, drain;
	uint64_t drain_start_ns, idle_since_ns;
	int signals;
	int exit_code;
} control;

static void on_sweep(uv_timer_t *t)
{
	control *c = t->data;
	fosd_executor_request_sweep(c->srv);
}

static void stop_loop(control *c)
{
	uv_stop(&c->loop);
}

static void on_drain_tick(uv_timer_t *t)
{
	control *c = t->data;
	fosd_server *srv = c->srv;
	uint64_t now = fosd_now_ns();
	int inflight = atomic_load(&srv->inflight);
	if (inflight == 0) {
		if (!c->idle_since_ns)
			c->idle_since_ns = now;
		/* replies are handed to the transport when their send completes; give clients that are
		 * still connected a moment to read the last ones before the socket closes */
		if (atomic_load(&srv->pipes) == 0 || now - c->idle_since_ns >= FOSD_LINGER_MS * 1000000ull) {
			fosd_info("drained: all requests answered");
			c->exit_code = atomic_load(&srv->fatal) ? 1 : 0;
			stop_loop(c);
		}
		return;
	}
	c->idle_since_ns = 0;
	if (now - c->drain_start_ns >= srv->cfg->drain_timeout_ms * 1000000ull) {
		fosd_warn("drain timeout: %d requests still in progress are abandoned", inflight);
		c->exit_code = 1;
		stop_loop(c);
	}
}

static void on_signal(uv_signal_t *h, int signum)
{
	control *c = h->data;
	fosd_server *srv = c->srv;
	if (c->signals++) {
		fosd_warn("second signal (%s): stopping now", signum == SIGINT ? "SIGINT" : "SIGTERM");
		c->exit_code = 1;
		stop_loop(c);
		return;
	}
	fosd_info("%s: draining %d request(s) in progress; new requests get UNAVAILABLE",
		  signum == SIGINT ? "SIGINT" : "SIGTERM", atomic_load(&srv->inflight));
	atomic_store(&srv->draining, 1); /* new connections are refused from now on (transport.c) */
	c->drain_start_ns = fosd_now_ns();
	uv_timer_start(&c->drain, on_drain_tick, 0, 10);
}

static void close_cb(uv_handle_t *h)
{
	(void)h;
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, close_cb);
}

int fosd_control_run(fosd_server *srv)
{
	control c = {0};
	c.srv = srv;
	c.exit_code = 0;
	int rv = uv_loop_init(&c.loop);
	if (rv) {
		fosd_error("libuv: %s", uv_strerror(rv));
		return 1;
	}
	uv_signal_init(&c.loop, &c.sigterm);
	uv_signal_init(&c.loop, &c.sigint);
	uv_timer_init(&c.loop, &c.sweep);
	uv_timer_init(&c.loop, &c.drain);
	c.sigterm.data = c.sigint.data = c.sweep.data = c.drain.data = &c;
	if ((rv = uv_signal_start(&c.sigterm, on_signal, SIGTERM)) || (rv = uv_signal_start(&c.sigint, on_signal, SIGINT)) ||
	    (rv = uv_timer_start(&c.sweep, on_sweep, srv->cfg->sweep_interval_ms, srv->cfg->sweep_interval_ms))) {
		fosd_error("libuv: %s", uv_strerror(rv));
		c.exit_code = 1;
	} else {
		uv_run(&c.loop, UV_RUN_DEFAULT);
	}
	uv_walk(&c.loop, close_walk, NULL);
	uv_run(&c.loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&c.loop))
		fosd_warn("libuv loop did not close cleanly");
	return c.exit_code;
}
