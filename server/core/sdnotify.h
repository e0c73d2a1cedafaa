/* sdnotify.h: fosd's side of systemd's notify protocol (Type=notify units, deploy/fosd.service):
 * READY=1 once fosd serves, STOPPING=1 when a drain starts, WATCHDOG=1 pings from the control
 * loop when the unit sets WatchdogSec=, and STATUS= lines for `systemctl status`. Every call is a
 * no-op when fosd does not run under systemd ($NOTIFY_SOCKET unset). */
#ifndef FOSD_SDNOTIFY_H
#define FOSD_SDNOTIFY_H

#include <uv.h>

/* Loads libsystemd (dlopen, only when $NOTIFY_SOCKET is set: fosd needs it nowhere else). A
 * failure is one warning: fosd serves anyway, systemd then does not see it ready. */
void fosd_sd_init(void);
/* sd_notify(0, "STATE\n...") with a printf-style state ("READY=1\nSTATUS=serving on ..."). */
void fosd_sd_notifyf(const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 1, 2)))
#endif
	;
/* When the unit asks for a watchdog (sd_watchdog_enabled: $WATCHDOG_USEC, and $WATCHDOG_PID is
 * fosd or unset), starts a timer on loop that sends WATCHDOG=1 every half period, so the pings
 * stop when the control loop hangs. The timer is closed with the loop's other handles. Returns 0
 * (also when no watchdog is asked for) or a libuv error. */
int fosd_sd_watchdog_start(uv_loop_t *loop);
/* The watchdog period in microseconds, 0 when none is asked for. */
unsigned long long fosd_sd_watchdog_usec(void);

#endif
