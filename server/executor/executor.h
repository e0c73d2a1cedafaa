/* executor.h: the executor's functions (executor.c: per device the queue, lanes and gate;
 * placement.c: the device of a request and its stages). */
#ifndef FOSD_EXECUTOR_H
#define FOSD_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct fosd_server fosd_server;
typedef struct fosd_slot fosd_slot;
typedef struct fosd_device fosd_device;

/* executor.c */
/* For every device: opens the lanes (cfg->streams backend instances like its be, at most 64) and
 * starts the workers (cfg->workers, and at least one per lane); then the deadline reaper
 * (deadline.c). */
int fosd_executor_start(fosd_server *srv, char *msg, size_t msgsz);
/* Queues s on its device (s->dev). */
void fosd_executor_submit(fosd_server *srv, fosd_slot *s);
/* Runs s at once on the calling (receiving) thread if it is a small side-by-side op, nothing is
 * queued and a lane is free; returns 1 if it ran (and was answered), 0 to queue it. */
int fosd_executor_try_now(fosd_server *srv, fosd_slot *s);
void fosd_executor_request_sweep(fosd_server *srv);
void fosd_executor_stop(fosd_server *srv);
uint64_t fosd_executor_queued(fosd_server *srv);
uint64_t fosd_device_queued(fosd_device *d);
/* What one device's executor publishes for Stats and /metrics: its lanes, those running a request
 * now, requests queued, run since start and their time, its workers. */
typedef struct fosd_exec_snap {
	uint64_t lanes, lanes_busy, queued, requests, busy_us, workers;
} fosd_exec_snap;
void fosd_device_exec_snapshot(fosd_device *d, fosd_exec_snap *out);

/* placement.c: picks the device of a request that dispatch.c is about to run (s->dev, and the
 * stages of PutWeight and DropWeight). 0, or a gRPC code with the message. */
int fosd_place(fosd_server *srv, fosd_slot *s, char *msg, size_t msgsz);
/* The device whose GPU has this 16-byte UUID, or NULL. */
fosd_device *fosd_device_by_uuid(fosd_server *srv, const uint8_t *uuid);
/* After an op of s ran on its current stage's device: moves s to its next stage. Returns 1 when
 * there is one (s->dev is its device; the caller queues s there), 0 when s is done. */
int fosd_place_next_stage(fosd_slot *s);
/* For the deadline reaper (deadline.c): answers DEADLINE_EXCEEDED every queued request whose
 * deadline is at or before now, taking it out of the queue (adds their number to *reaped);
 * returns the earliest deadline still queued (0: none). */
uint64_t fosd_executor_reap(fosd_server *srv, uint64_t now, uint64_t *reaped);

#endif
