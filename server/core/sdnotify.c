/* sdnotify.c: fosd's side of systemd's notify protocol (sdnotify.h). libsystemd's sd_notify and
 * sd_watchdog_enabled do the work; libsystemd.so.0 is opened with dlopen and only when
 * $NOTIFY_SOCKET is set, so neither the build's link line nor the hosts without systemd (GPU
 * hosts, containers) need it. The prototypes come from libsystemd-dev's <systemd/sd-daemon.h>.
 * Invariants: nothing here stops fosd from serving (a failure is one warning); the functions
 * are set once in fosd_sd_init, before any thread starts, and only read afterwards. */
#include "sdnotify.h"
#include "log.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

static __typeof__(sd_notify) *sd_notify_fn;
static __typeof__(sd_watchdog_enabled) *sd_watchdog_fn;
static uv_timer_t watchdog_timer;

void fosd_sd_init(void)
{
	const char *sock = getenv("NOTIFY_SOCKET");
	if (!sock || !sock[0] || sd_notify_fn)
		return;
	void *h = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
	if (h) {
		sd_notify_fn = (__typeof__(sd_notify) *)dlsym(h, "sd_notify");
		sd_watchdog_fn = (__typeof__(sd_watchdog_enabled) *)dlsym(h, "sd_watchdog_enabled");
	}
	if (!sd_notify_fn)
		fosd_warn("NOTIFY_SOCKET is set but libsystemd.so.0 cannot be used (%s): systemd will not be told "
			  "that fosd is ready (install libsystemd0)",
			  h ? "no sd_notify in it" : dlerror());
}

void fosd_sd_notifyf(const char *fmt, ...)
{
	if (!sd_notify_fn)
		return;
	char state[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(state, sizeof state, fmt, ap);
	va_end(ap);
	int rv = sd_notify_fn(0, state);
	if (rv < 0)
		fosd_warn("sd_notify(%.*s): %s", (int)strcspn(state, "\n"), state, strerror(-rv));
}

unsigned long long fosd_sd_watchdog_usec(void)
{
	uint64_t usec = 0;
	if (!sd_watchdog_fn || sd_watchdog_fn(0, &usec) <= 0)
		return 0;
	return (unsigned long long)usec;
}

static void on_watchdog(uv_timer_t *t)
{
	(void)t;
	fosd_sd_notifyf("WATCHDOG=1");
}

int fosd_sd_watchdog_start(uv_loop_t *loop)
{
	unsigned long long usec = fosd_sd_watchdog_usec();
	if (!usec)
		return 0;
	uint64_t ms = usec / 2000 ? usec / 2000 : 1; /* half the period, at least 1 ms */
	int rv = uv_timer_init(loop, &watchdog_timer);
	if (!rv)
		rv = uv_timer_start(&watchdog_timer, on_watchdog, 0, ms);
	if (rv)
		return rv;
	fosd_info("systemd watchdog: %llu ms; WATCHDOG=1 every %llu ms from the control loop", usec / 1000,
		  (unsigned long long)ms);
	return 0;
}
