/* executor.h: the executor's part of the server's and of a request's state, and its functions
 * (executor.c: per device the queue, lanes and gate; placement.c: the device of a request and its
 * stages; deadline.c: the reaper).
 *
 * Each struct begins with the ops layer's part (ops.h), embedded unnamed: fosd_device with
 * fosd_devres, fosd_job with fosd_opreq, fosd_exec with fosd_opsrv; fosd_exec_ops & co. convert.
 * The stages above embed these the same way (dispatch.h, transport.h). The executor reaches the
 * stage above it only through the hooks of fosd_exec. */
#ifndef FOSD_EXECUTOR_H
#define FOSD_EXECUTOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "ops.h"

struct fosd_exec;

/* A request as the executor keeps it: what its op sees, then the executor's own (device, stages,
 * queue, times). The transport sets t_recv_ns and own_thread (and the op's request's msg); the requests stage the rest of
 * fosd_opreq; placement.c and executor.c the fields below them. */
typedef struct fosd_job {
	fosd_opreq;
	uint64_t t_recv_ns;
	int own_thread;             /* the receiving thread serves only this request's slot (a
				     * channel's), so a small op may run on it at once without the
				     * receivers' gate */
	int dev;                    /* the device it runs on (placement.c); then, for an op staged
				     * over several devices, the device of the current stage */
	uint32_t put_todo, drop_todo; /* PutWeight, DropWeight: devices still to put it on (first),
				       * then to drop it from (placement.c) */
	struct fosd_job *qnext;     /* executor queue */
	uint64_t t_lane_ns, t_done_ns; /* executor ops: a lane took it; the op and its device sync
					* ended (else 0) */
	int ran_now;                /* run by fosd_executor_try_now on the receiving thread */
} fosd_job;

/* One device fosd serves (--devices; one by default): its resources (fosd_devres: backend, weight
 * cache, saved contexts, client GPU mappings) and its executor (executor.c: a queue, workers,
 * lanes and the backend gate). Nothing of one device is touched by another's executor; placement
 * (placement.c) picks the device of each request before it is queued. */
typedef struct fosd_device {
	fosd_devres;
	struct fosd_exec *srv;
	pthread_mutex_t be_mu; /* the executor's gate: held to start a request, and for the whole of
				* an op that must run alone (executor.c alone takes it) */
	atomic_int running;    /* requests running on it now (with queued: placement's "least busy") */
	atomic_uint_fast64_t requests, busy_ns; /* run on its lanes since start, and their time */

	/* executor lanes (executor.c): backend instances that run requests at the same time, each on
	 * its own stream (cuda). lanes[0] is be. Forwards without a saved context, Quantize, Dequantize
	 * and Linear run on any free lane; asynchronous requests on their connection's lane; every other
	 * op runs alone on lane 0, after the running ones finished and every lane settled (see
	 * executor.c). */
	fos_backend **lanes;
	int n_lanes;
	fosd_lane_buf *lane_bufs; /* per lane: device buffers of small requests (executor.c) */
	pthread_mutex_t lane_mu;
	pthread_cond_t lane_cv;  /* CLOCK_MONOTONIC */
	uint64_t lane_busy;      /* bit i: lane i runs a request */
	int lane_active;         /* requests running on lanes without holding be_mu */
	struct fosd_lane *lstate;  /* per lane: its connection, pending list and tickets (lanes.h) */
	int async_running;       /* asynchronous requests running on lanes now; under lane_mu */
	fos_backend *free_be;    /* the instance the caches free through (lanes.c), NULL before start */
	pthread_mutex_t retire_mu;
	struct fosd_retired *retired; /* frees waiting for the lanes' work (lanes.c) */
	void **mark_pool;        /* marks of freed weights and contexts, to record again (lanes.c) */
	int mark_n;              /* under retire_mu */

	/* the device's queue and workers */
	pthread_mutex_t q_mu;
	pthread_cond_t q_cv;
	fosd_job *q_head, *q_tail;
	uint64_t queued;
	int sweep_pending;
	int q_stop;
	pthread_t *workers;
	int n_workers;
} fosd_device;

/* What the executor keeps of the server: what ops see, the devices, the deadline reaper, and the
 * hooks through which it answers (set by the server, server.c: the requests stage's functions). */
typedef struct fosd_exec {
	fosd_opsrv;
	fosd_device *devs;     /* n_devs; devs[0] also pins host memory (regions, message pool) */
	struct fosd_deadlines *deadlines; /* the deadline reaper (deadline.c) */
	atomic_int fatal;      /* the backend failed for good: drain and exit 1 */
	atomic_int running_now; /* a small op runs on a socket's receiving thread (fosd_executor_try_now):
				 * one at a time, since those threads also move everyone's messages */
	/* Answers j with reply (NULL: none) and code, and every duplicate that waited on it; j is then
	 * the transport's again. Takes reply. (reply.c's fosd_finish) */
	void (*finish)(fosd_job *j, nng_msg *reply, int code);
	/* Tests only (NULL in fosd): opens lane i (1..) of d, or with i 0 the instance its caches free
	 * through, instead of a backend like d->be (lanes.c). */
	fos_backend *(*lane_open)(struct fosd_exec *x, fosd_device *d, int i, fos_err *e);
	/* Drops j unanswered when its client's connection is gone and no resent copy waits on it; 1
	 * when dropped, 0 to run it. (reply.c's fosd_drop_if_client_gone) */
	int (*drop_if_gone)(fosd_job *j);
} fosd_exec;

/* The ops layer's part of each (their first member). */
static inline fosd_opsrv *fosd_exec_ops(fosd_exec *x)
{
	return (fosd_opsrv *)x;
}
static inline fosd_opreq *fosd_job_op(fosd_job *j)
{
	return (fosd_opreq *)j;
}
static inline fosd_devres *fosd_device_res(fosd_device *d)
{
	return (fosd_devres *)d;
}

/* What a request answered before its GPU work ended (executor.c, Response.cuda_done_event) still
 * needs until that work is done: its message (a source of queued h2d copies), its decoded request
 * and its references to shared-memory regions and to the client's GPU memory (which keep those
 * mapped), not its input event (its wait is queued). fosd_job_hold moves them out of the job, whose
 * answer then frees none of them;
 * fosd_held_end frees them. */
typedef struct fosd_held {
	nng_msg *msg;
	Fos__Request *rq;
	fosd_shm_req shm;
} fosd_held;
void fosd_job_hold(fosd_job *j, fosd_held *h);
void fosd_held_end(fosd_held *h);

/* executor.c */
/* For every device: opens the lanes (cfg->streams backend instances like its be, at most 64) and
 * starts the workers (cfg->workers, and at least one per lane); then the deadline reaper
 * (deadline.c). */
int fosd_executor_start(fosd_exec *srv, char *msg, size_t msgsz);
/* Queues s on its device (s->dev). */
void fosd_executor_submit(fosd_exec *srv, fosd_job *s);
/* Runs s at once on the calling (receiving) thread if it is a small side-by-side op, nothing is
 * queued and a lane is free; returns 1 if it ran (and was answered), 0 to queue it. */
int fosd_executor_try_now(fosd_exec *srv, fosd_job *s);
void fosd_executor_request_sweep(fosd_exec *srv);
void fosd_executor_stop(fosd_exec *srv);
uint64_t fosd_executor_queued(fosd_exec *srv);
uint64_t fosd_device_queued(fosd_device *d);
/* What one device's executor publishes for Stats and /metrics: its lanes, those running a request
 * now, requests queued, run since start and their time, its workers. */
typedef struct fosd_exec_snap {
	uint64_t lanes, lanes_busy, queued, requests, busy_us, workers;
} fosd_exec_snap;
void fosd_device_exec_snapshot(fosd_device *d, fosd_exec_snap *out);

/* placement.c: picks the device of a request that dispatch.c is about to run (s->dev, and the
 * stages of PutWeight and DropWeight). 0, or a gRPC code with the message. */
int fosd_place(fosd_exec *srv, fosd_job *s, char *msg, size_t msgsz);
/* The device whose GPU has this 16-byte UUID, or NULL. */
fosd_device *fosd_device_by_uuid(fosd_exec *srv, const uint8_t *uuid);
/* After an op of s ran on its current stage's device: moves s to its next stage. Returns 1 when
 * there is one (s->dev is its device; the caller queues s there), 0 when s is done. */
int fosd_place_next_stage(fosd_job *s);
/* For the deadline reaper (deadline.c): answers DEADLINE_EXCEEDED every queued request whose
 * deadline is at or before now, taking it out of the queue (adds their number to *reaped);
 * returns the earliest deadline still queued (0: none). */
uint64_t fosd_executor_reap(fosd_exec *srv, uint64_t now, uint64_t *reaped);

#endif
