/* cli_load_gate.c: the outage gate of `fos load` (see cli_load_gate.h). Time is libuv's
 * uv_hrtime, as in cli_load.c. */
#include "cli_load_gate.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#define MS 1000000ull

void cli_load_gate_init(cli_load_gate *g, int timeout_ms)
{
	memset(g, 0, sizeof *g);
	pthread_mutex_init(&g->mu, NULL);
	g->backoff = CLI_LOAD_BACKOFF_MIN_MS * MS;
	g->timeout_ms = timeout_ms;
}

void cli_load_gate_destroy(cli_load_gate *g)
{
	pthread_mutex_destroy(&g->mu);
}

/* A failure at now (mu held): opens the outage or, for a probe, doubles the backoff; gives up
 * when the outage has lasted long enough. */
static void gate_fail(cli_load_gate *g, uint64_t now, int probe, const char *why)
{
	if (!g->since) {
		g->since = now;
		g->backoff = CLI_LOAD_BACKOFF_MIN_MS * MS;
	} else if (probe) {
		g->backoff = g->backoff * 2 < CLI_LOAD_BACKOFF_MAX_MS * MS ? g->backoff * 2 : CLI_LOAD_BACKOFF_MAX_MS * MS;
	}
	if (probe || g->next_try < now + g->backoff)
		g->next_try = now + g->backoff;
	snprintf(g->why, sizeof g->why, "%s", why);
	if (now - g->since >= CLI_LOAD_GIVE_UP_MS * MS)
		g->gave_up = 1;
}

static void gate_clear(cli_load_gate *g)
{
	g->since = 0;
	g->backoff = CLI_LOAD_BACKOFF_MIN_MS * MS;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	nanosleep(&ts, NULL);
}

int cli_load_gate_pass(cli_load_gate *g, fos_client *c, atomic_int *stop)
{
	for (;;) {
		pthread_mutex_lock(&g->mu);
		if (!g->since) {
			pthread_mutex_unlock(&g->mu);
			return 0;
		}
		if (g->gave_up || atomic_load(stop)) {
			pthread_mutex_unlock(&g->mu);
			return 1;
		}
		uint64_t now = uv_hrtime();
		if (g->probing || now < g->next_try) {
			/* short naps: a stop, or another worker's probe that reopens the gate, is seen soon */
			uint64_t wait = g->probing || g->next_try - now > 10 * MS ? 10 * MS : g->next_try - now;
			pthread_mutex_unlock(&g->mu);
			sleep_ns(wait);
			continue;
		}
		g->probing = 1;
		g->probes++;
		int tmo = g->timeout_ms < CLI_LOAD_PROBE_TIMEOUT_MS ? g->timeout_ms : CLI_LOAD_PROBE_TIMEOUT_MS;
		pthread_mutex_unlock(&g->mu);
		/* the other workers of this handle wait here meanwhile, so only the probe sees the short
		 * timeout */
		fos_set_timeout(c, tmo);
		fos_health_info h;
		fos_status st;
		int code = fos_health(c, &h, &st);
		fos_set_timeout(c, g->timeout_ms);
		pthread_mutex_lock(&g->mu);
		g->probing = 0;
		if (code == FOS_CODE_OK && !h.draining) {
			gate_clear(g);
		} else {
			char why[300];
			if (code == FOS_CODE_OK)
				snprintf(why, sizeof why, "Health: fosd is draining");
			else
				snprintf(why, sizeof why, "Health: %s: %.200s", fos_code_name(code), st.message);
			gate_fail(g, uv_hrtime(), 1, why);
		}
		pthread_mutex_unlock(&g->mu);
	}
}

int cli_load_gate_after(cli_load_gate *g, int code, const fos_status *st)
{
	pthread_mutex_lock(&g->mu);
	if (code == FOS_CODE_UNAVAILABLE) {
		char why[300];
		snprintf(why, sizeof why, "UNAVAILABLE: %.200s", st->message);
		g->failures++;
		gate_fail(g, uv_hrtime(), 0, why);
	} else {
		gate_clear(g); /* fosd answered this one */
	}
	int stop = g->gave_up;
	pthread_mutex_unlock(&g->mu);
	return stop;
}

int cli_load_gate_gave_up(cli_load_gate *g, uint64_t *outage_ns)
{
	pthread_mutex_lock(&g->mu);
	int gave = g->gave_up;
	if (outage_ns)
		*outage_ns = gave && g->since ? uv_hrtime() - g->since : 0;
	pthread_mutex_unlock(&g->mu);
	return gave;
}
