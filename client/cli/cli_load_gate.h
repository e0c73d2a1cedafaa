/* cli_load_gate.h: how `fos load` (cli_load.c) behaves when fosd stops answering: while requests
 * come back UNAVAILABLE (fosd draining, or the connection lost and fosd gone), the workers stop
 * sending and one of them at a time probes fosd with a Health request, with a short timeout,
 * backing off exponentially (10 ms doubling to 1 s); a probe that finds fosd serving (not
 * draining) reopens the gate, and an outage that lasts CLI_LOAD_GIVE_UP_MS closes it for good: the
 * run stops with a clear message. Invariants: at most one probe is in flight; no load request is
 * started while an outage is open; every field is read and written under mu. */
#ifndef FOS_CLI_LOAD_GATE_H
#define FOS_CLI_LOAD_GATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fos.h"

#define CLI_LOAD_BACKOFF_MIN_MS 10
#define CLI_LOAD_BACKOFF_MAX_MS 1000
#define CLI_LOAD_PROBE_TIMEOUT_MS 1000
#define CLI_LOAD_GIVE_UP_MS 3000

typedef struct cli_load_gate {
	pthread_mutex_t mu;
	uint64_t since;     /* uv_hrtime of the outage's first failure; 0: fosd answers */
	uint64_t next_try;  /* no probe before this */
	uint64_t backoff;   /* ns until the next probe after a failed one */
	int probing;        /* a worker's probe is in flight */
	int gave_up;        /* the outage lasted CLI_LOAD_GIVE_UP_MS: the run stops */
	uint64_t failures;  /* load requests that came back UNAVAILABLE */
	uint64_t probes;    /* Health probes sent */
	int timeout_ms;     /* the requests' own timeout (restored after a probe) */
	char why[300];      /* the last failure: a request's or a probe's */
} cli_load_gate;

void cli_load_gate_init(cli_load_gate *g, int timeout_ms);
void cli_load_gate_destroy(cli_load_gate *g);
/* Before a load request on c: returns 0 at once while fosd answers; during an outage it waits,
 * probing in turn with the other workers, until fosd serves again (0) or the run must stop (1:
 * *stop set, or the gate gave up). */
int cli_load_gate_pass(cli_load_gate *g, fos_client *c, atomic_int *stop);
/* After a load request: an UNAVAILABLE opens (or continues) the outage, anything else shows that
 * fosd answers. Returns 1 when the run must stop (the gate gave up). */
int cli_load_gate_after(cli_load_gate *g, int code, const fos_status *st);
/* 1 when the gate gave up; then how long the outage lasted. */
int cli_load_gate_gave_up(cli_load_gate *g, uint64_t *outage_ns);

#endif
