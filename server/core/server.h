/* server.h: the fosd server object that ties the parts together: configuration, the backend,
 * the weight cache, saved contexts, metrics, duplicate detection, the transports' slots and the
 * executor (its queue, lanes and backend gate).
 *
 * A request goes one way:
 *   transport (transport.c: the nng socket; chan.c: a request channel) receives it into a slot
 *   -> dispatch.c decodes it, checks the connection's share and the token, validates it
 *      (validate.c, through the op's row of the op table, optable.c), answers inline ops at once
 *      and hands the rest to the executor
 *   -> executor.c queues it, gives it a lane and runs the op's handler (ops_*.c) with the lane's
 *      backend in an op context (optable.h)
 *   -> reply.c records it and calls the slot's send function, set by its transport, which sends
 *      the reply and frees the slot once it has left. */
#ifndef FOSD_SERVER_H
#define FOSD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>

#include "backend.h"
#include "chan.h"
#include "config.h"
#include "conns.h"
#include "contexts.h"
#include "dedup.h"
#include "metrics.h"
#include "shm.h"
#include "tenants.h"
#include "validate.h"
#include "wcache.h"
#include "reply.h"
#include "util.h"
#include "fos.pb-c.h"

enum fosd_slot_state { FOSD_SLOT_IDLE = 0, FOSD_SLOT_RECV, FOSD_SLOT_BUSY, FOSD_SLOT_SEND };

typedef struct fosd_server fosd_server;

/* A request's state, split by the stage that owns each part: the transport's (the connection, the
 * message, how the reply leaves), the requests stage's (what it decoded and checked: all an op
 * reads of its request) and the executor's (device, stages, queue, times). A stage writes only
 * its own part; a later stage reads an earlier one's. (C11 anonymous structs: the fields keep
 * their names, s->rq, s->dev, ...) */
typedef struct fosd_slot {
	fosd_server *srv;
	/* ---- the transport's: transport.c, chan.c, slot.c ------------------------------------- */
	struct {
		nng_ctx ctx;
		nng_aio *aio;
		int state;
		nng_msg *msg;       /* the request as received */
		uint64_t t_recv_ns;
		uint64_t bytes_in;
		/* the transport's reply function (reply.h): sends reply (NULL: none), then, once it has
		 * left, calls fosd_slot_end and serves the next request */
		void (*send)(struct fosd_slot *s, nng_msg *reply);
		int own_thread;     /* the receiving thread serves only this slot (a channel's), so a
				     * small op may run on it at once without the receivers' gate */
		nng_pipe pipe;      /* the connection the request came from */
		int conn_held;      /* holds a unit of the pipe's share (conns.h) until the reply left */
		int conn_verdict;   /* enum fosd_conn_verdict of the request's arrival */
		int unauth_held;    /* counted as an unauthenticated request of the pipe */
		int accepted;       /* received before a drain began: the drain waits for its reply */
	};
	/* ---- the requests stage's (dispatch.c, auth.c, validate.c, dedup.c): what an op sees --- */
	struct {
		Fos__Request *rq;
		const uint8_t *data; /* the message's data section */
		size_t dlen;
		int op;
		const struct fosd_op_def *def; /* the op's row (optable.h), set with op by dispatch.c:
						* what the later stages know of the op */
		uint64_t client_id, req_id; /* for duplicate detection (client_id 0: none) */
		int dedup_owner;            /* this slot executes the request others may wait on */
		struct fosd_slot *wnext;    /* waiters on a duplicate in flight */
		fosd_args args;
		fosd_tenant *tenant;        /* who sent it (auth.c); NULL: the anonymous tenant */
		int tenant_counted;         /* counted in tenant->inflight until answered */
		fosd_shm_req shm;           /* shared-memory regions the request uses (shm_req.c) */
	};
	/* ---- the executor's (placement.c, executor.c, deadline.c) ------------------------------ */
	struct {
		int dev;                    /* the device it runs on (placement.c); then, for an op staged
					     * over several devices, the device of the current stage */
		uint32_t put_todo, drop_todo; /* PutWeight, DropWeight: devices still to put it on
					       * (first), then to drop it from (placement.c) */
		uint32_t placed;            /* PutWeight: every device it goes to */
		int stages_done;            /* stages of the op run so far (placement.c) */
		int bound_dev;              /* the device whose mappings hold its device tensors (its first) */
		nng_msg *stage_reply;       /* PutWeight: the reply of its last put stage, sent after its
					     * drop stages (freed when the slot ends, if still here) */
		struct fosd_slot *qnext;    /* executor queue */
		uint64_t t_lane_ns, t_done_ns; /* executor ops: a lane took it; the op and its device sync
						* ended (else 0) */
		int ran_now;                /* run by fosd_executor_try_now on the receiving thread */
	};
} fosd_slot;

/* One device fosd serves (--devices; one by default): its backend, its weight cache, saved
 * contexts and client GPU mappings, and its executor (executor.c: a queue, workers, lanes and the
 * backend gate). Nothing of one device is touched by another's executor; the server's placement
 * (placement.c) picks the device of each request before it is queued. */
typedef struct fosd_device {
	int index;             /* in srv->devs: the number clients see (HealthResult.devices) */
	int ordinal;           /* its backend's device: the CUDA ordinal, or the cpu stand-in's number */
	char name[192];        /* "cuda:1 (NVIDIA H200 (sm_90))", "cpu:0 (CPU, 2 threads)" */
	fosd_server *srv;
	fos_backend *be;       /* lane 0 */
	pthread_mutex_t be_mu; /* the executor's gate: held to start a request, and for the whole of
				* an op that must run alone (executor.c alone takes it) */
	fosd_wcache wc;
	fosd_contexts cx;
	fosd_devmaps devmaps;  /* client GPU allocations and events opened on this device (devmaps.c) */
	atomic_int running;    /* requests running on it now (with queued: placement's "least busy") */
	atomic_uint_fast64_t requests, busy_ns; /* run on its lanes since start, and their time */

	/* executor lanes (executor.c): backend instances that run requests at the same time, each on
	 * its own stream (cuda). lanes[0] is be. Forwards without a saved context, Quantize, Dequantize
	 * and Linear run on any free lane; every other op runs alone on lane 0, after the running ones
	 * finished (see executor.c). */
	fos_backend **lanes;
	int n_lanes;
	fosd_lane_buf *lane_bufs; /* per lane: device buffers of small requests (executor.c) */
	pthread_mutex_t lane_mu;
	pthread_cond_t lane_cv;  /* CLOCK_MONOTONIC */
	uint64_t lane_busy;      /* bit i: lane i runs a request */
	int lane_active;         /* requests running on lanes without holding be_mu */
	struct fosd_pending *pend; /* asynchronous requests' held resources on lane 0 (pending.c) */

	/* the device's queue and workers */
	pthread_mutex_t q_mu;
	pthread_cond_t q_cv;
	fosd_slot *q_head, *q_tail;
	uint64_t queued;
	int sweep_pending;
	int q_stop;
	pthread_t *workers;
	int n_workers;
} fosd_device;

struct fosd_server {
	fosd_config *cfg;
	fosd_device *devs;     /* n_devs >= 1; devs[0] also pins host memory (regions, message pool) */
	int n_devs;
	fosd_metrics metrics;
	fosd_dedup dd;
	fosd_regions regions;  /* shared-memory regions of ipc clients (regions.c) */
	fosd_chans chans;      /* request channels in regions (chan.c) */
	fosd_tenants *tenants; /* NULL: no tokens file, one anonymous tenant (auth.c) */
	struct fosd_deadlines *deadlines; /* the deadline reaper (deadline.c) */
	uint64_t start_ns;
	int mps;               /* FOS_MPS_*: whether its GPU work runs under MPS (mps.c, set at start) */

	/* transport */
	nng_socket sock;
	int sock_open;
	nng_listener listeners[FOSD_MAX_LISTEN];
	int n_listeners;
	fosd_slot *slots;
	int n_slots;
	atomic_int pipes;       /* connected clients */
	atomic_int inflight;    /* requests received and not yet answered */
	atomic_int accepted;    /* of them, received before a drain began (control.c waits for these) */
	fosd_conns conns;       /* per-connection shares of the slots (conns.c) */
	atomic_int draining;
	atomic_int closing;
	atomic_int fatal;       /* the backend failed for good: drain and exit 1 */
	atomic_int running_now; /* a small op runs on a socket's receiving thread (fosd_executor_try_now):
				 * one at a time, since those threads also move everyone's messages */
};

/* Initializes everything but the transport and the executors, with one device per backend of be
 * (n of them, 1 <= n <= FOSD_MAX_DEVICES; ordinals: their CUDA ordinals or stand-in numbers); the
 * backends are owned by the server after, also on failure. */
int fosd_server_init(fosd_server *srv, fosd_config *cfg, fos_backend **be, const int *ordinals, int n, char *msg,
		     size_t msgsz);
/* Frees the caches and the backend (after transport and executor are stopped). */
void fosd_server_destroy(fosd_server *srv);

/* the stages' functions, each in its folder's header */
#include "transport.h"
#include "dispatch.h"
#include "executor.h"
#include "control.h"

#endif
