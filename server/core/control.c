/* control.c: fosd's control loop on libuv: SIGTERM/SIGINT start a graceful drain (refuse new
 * connections, answer requests received from then on UNAVAILABLE, wait for the replies of the
 * requests accepted before it, give them a moment to leave), a second signal stops at once; a
 * timer asks the executor to sweep expired contexts; another gives the heap's free pages back once
 * no request has arrived or run for FOSD_IDLE_TRIM_MS (alloc_tune.c), once per idle spell.
 *
 * The drain ends as soon as the accepted requests (srv->accepted) are answered, however much
 * clients keep sending; exit 1 only when one of them is still unanswered at drain_timeout or the
 * backend failed. */
#include "server.h"
#include "alloc_tune.h"
#include "log.h"
#include "util.h"
#include "reload.h"
#include "sdnotify.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define FOSD_SHUTDOWN_MS 15000 /* the teardown after the loop: past this, the watchdog exits */
#define FOSD_LINGER_MS 500 /* after the last accepted reply: let connected clients read it */
#define FOSD_IDLE_TRIM_MS 5000 /* idle this long: the free heap goes back to the system */
#define FOSD_IDLE_TICK_MS 1000

typedef struct control {
	fosd_server *srv;
	uv_loop_t loop;
	uv_signal_t sigterm, sigint;
	uv_timer_t sweep, drain, idle;
	uint64_t drain_start_ns, idle_since_ns;
	uint64_t activity, quiet_since_ns; /* the idle trim's: requests seen, and since when none */
	int trimmed;
	int signals;
	int exit_code;
} control;

static void on_sweep(uv_timer_t *t)
{
	control *c = t->data;
	fosd_executor_request_sweep(fosd_srv_exec(c->srv));
}

/* requests run on every device since start: a change (or one in flight) is use */
static uint64_t activity_of(fosd_server *srv)
{
	uint64_t a = 0;
	for (int i = 0; i < srv->n_devs; i++)
		a += atomic_load(&srv->devs[i].requests);
	return a;
}

static void on_idle_tick(uv_timer_t *t)
{
	control *c = t->data;
	uint64_t now = fosd_now_ns(), a = activity_of(c->srv);
	if (a != c->activity || atomic_load(&c->srv->inflight)) {
		c->activity = a;
		c->quiet_since_ns = now;
		c->trimmed = 0;
		return;
	}
	if (c->trimmed || now - c->quiet_since_ns < FOSD_IDLE_TRIM_MS * 1000000ull)
		return;
	c->trimmed = 1;
	uint64_t gave = fosd_alloc_idle_trim();
	fosd_debug("idle for %d s: %.1f MiB of free heap given back to the system", FOSD_IDLE_TRIM_MS / 1000,
		   (double)gave / (1 << 20));
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
	int accepted = atomic_load(&srv->accepted);
	if (accepted == 0) {
		if (!c->idle_since_ns)
			c->idle_since_ns = now;
		/* a reply's send completes when nng has taken it: give clients that are still connected
		 * a moment to read the last ones before the socket closes */
		if (atomic_load(&srv->pipes) == 0 || now - c->idle_since_ns >= FOSD_LINGER_MS * 1000000ull) {
			fosd_info("drained: all requests answered in %llu ms",
				  (unsigned long long)((now - c->drain_start_ns) / 1000000u));
			c->exit_code = atomic_load(&srv->fatal) ? 1 : 0;
			stop_loop(c);
		}
		return;
	}
	if (now - c->drain_start_ns >= srv->cfg->drain_timeout_ms * 1000000ull) {
		fosd_warn("drain timeout: %d accepted request(s) still in progress are abandoned", accepted);
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
	/* new connections and requests are refused from now on (transport.c, dispatch.c); accepted
	 * is read after draining is set (fosd_slot_begin counts in the other order) */
	atomic_store(&srv->draining, 1);
	fosd_info("%s: draining %d request(s) accepted before it; new requests get UNAVAILABLE",
		  signum == SIGINT ? "SIGINT" : "SIGTERM", atomic_load(&srv->accepted));
	fosd_sd_notifyf("STOPPING=1\nSTATUS=draining: new requests get UNAVAILABLE");
	c->drain_start_ns = fosd_now_ns();
	uv_timer_start(&c->drain, on_drain_tick, 0, 10);
}

static void signals_mask(int how)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(how, &set, NULL);
}

void fosd_control_block_signals(void)
{
	signals_mask(SIG_BLOCK);
}

int fosd_control_stop_pending(void)
{
	sigset_t set;
	if (sigpending(&set))
		return 0;
	return sigismember(&set, SIGTERM) ? SIGTERM : sigismember(&set, SIGINT) ? SIGINT : 0;
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
	uv_timer_init(&c.loop, &c.idle);
	c.sigterm.data = c.sigint.data = c.sweep.data = c.drain.data = c.idle.data = &c;
	c.quiet_since_ns = fosd_now_ns();
	static uv_signal_t sighup; /* SIGHUP: reload the tokens file and settings (reload.c) */
	uv_signal_init(&c.loop, &sighup);
	sighup.data = srv;
	if ((rv = uv_signal_start(&sighup, fosd_reload_on_signal, SIGHUP)))
		fosd_warn("libuv: SIGHUP: %s", uv_strerror(rv));
	if ((rv = uv_signal_start(&c.sigterm, on_signal, SIGTERM)) || (rv = uv_signal_start(&c.sigint, on_signal, SIGINT)) ||
	    (rv = uv_timer_start(&c.sweep, on_sweep, srv->cfg->sweep_interval_ms, srv->cfg->sweep_interval_ms)) ||
	    (rv = uv_timer_start(&c.idle, on_idle_tick, FOSD_IDLE_TICK_MS, FOSD_IDLE_TICK_MS)) ||
	    (rv = fosd_sd_watchdog_start(&c.loop))) {
		fosd_error("libuv: %s", uv_strerror(rv));
		c.exit_code = 1;
	} else {
		/* the handlers exist: a signal that came during the start (pending) arrives now */
		signals_mask(SIG_UNBLOCK);
		uv_run(&c.loop, UV_RUN_DEFAULT);
	}
	uv_walk(&c.loop, close_walk, NULL);
	uv_run(&c.loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&c.loop))
		fosd_warn("libuv loop did not close cleanly");
	return c.exit_code;
}

static void *watchdog_main(void *arg)
{
	int code = (int)(intptr_t)arg;
	struct timespec ts = {FOSD_SHUTDOWN_MS / 1000, (FOSD_SHUTDOWN_MS % 1000) * 1000000L};
	while (nanosleep(&ts, &ts))
		;
	fosd_error("shutdown did not finish in %d s: exiting now", FOSD_SHUTDOWN_MS / 1000);
	_exit(code ? code : 1);
}

void fosd_control_watchdog(int exit_code)
{
	/* a signal during the teardown ends fosd at once (the loop no longer handles it) */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signals_mask(SIG_UNBLOCK);
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, watchdog_main, (void *)(intptr_t)exit_code))
		fosd_warn("cannot start the shutdown watchdog");
	pthread_attr_destroy(&a);
}
