/* optable.h: the op table, one row per operation of the protocol: its name (in logs, Stats and
 * /metrics), the Request oneof case it answers, its validator, its handler and the flags that tell
 * dispatch.c, executor.c and auth.c how to run it. Those stages know an op only through its row
 * (dispatch.c puts the row on the request, fosd_opreq.def); the per-op metrics are indexed by the op.
 *
 * Adding an op (once its request and result are in proto/fos.proto's oneofs): a value in enum
 * fosd_op (before FOSD_OP_INVALID), one row in optable.c, its handler (ops_*.c, declared in
 * ops.h) and, if its request has fields, its validator (validate.c, declared in validate.h).
 *
 * Invariants: row i is op i (designated initializers); every row but FOSD_OP_INVALID's has a
 * handler; a row flagged FOSD_OPF_INLINE never touches the backend. */
#ifndef FOSD_OPTABLE_H
#define FOSD_OPTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h" /* FOSD_MSG_MAX */

/* The ops, in the order of the rows (and of the per-op metrics arrays, metrics.h). */
enum fosd_op {
	FOSD_OP_HEALTH = 0,
	FOSD_OP_STATS,
	FOSD_OP_PUT_WEIGHT,
	FOSD_OP_DROP_WEIGHT,
	FOSD_OP_LIST_WEIGHTS,
	FOSD_OP_FORWARD,
	FOSD_OP_BACKWARD,
	FOSD_OP_RELEASE_CONTEXT,
	FOSD_OP_QUANTIZE,
	FOSD_OP_DEQUANTIZE,
	FOSD_OP_LINEAR,
	FOSD_OP_REGISTER_REGION,
	FOSD_OP_UNREGISTER_REGION,
	FOSD_OP_LIST_REGIONS,
	FOSD_OP_CLOSE_DEVICE_MEMORY,
	FOSD_OP_INVALID, /* undecodable message or no operation set */
	FOSD_NUM_OPS
};

/* Row flags. */
enum {
	/* answered by dispatch.c on the receiving thread, without the executor (cheap, read-only, no
	 * backend, no duplicate detection) */
	FOSD_OPF_INLINE = 1u << 0,
	/* runs on any free lane beside other requests (only reads shared state and makes its own
	 * buffers); without it the op runs alone, after the running lanes, on lane 0. The row's beside()
	 * may refuse it per request. */
	FOSD_OPF_BESIDE = 1u << 1,
	/* still answered while fosd drains (others get UNAVAILABLE) */
	FOSD_OPF_DRAINING = 1u << 2,
	/* answered without an auth token (liveness probes); says nothing about any tenant and takes no
	 * tenant quota */
	FOSD_OPF_NO_TOKEN = 1u << 3,
};

struct fosd_opsrv;
struct fosd_opreq;
struct fosd_devres;
struct fosd_outs;
struct fosd_args;
struct fosd_vctx;
struct fos_backend;
struct nng_msg;
struct Fos__Request;

/* A lane's device buffers for small operands (fosd_lane_buffer, ops.h); the executor owns them. */
typedef struct fosd_lane_buf {
	void *p[2];
	size_t cap[2];
} fosd_lane_buf;

/* What an op handler runs with: the request, and the lane the executor gave it. Every backend call
 * of the op goes to be; lane is -1 (and buf NULL) for an op answered without a lane
 * (FOSD_OPF_INLINE). */
typedef struct fosd_opctx {
	struct fosd_opsrv *srv;  /* what an op sees of the server (ops.h) */
	struct fosd_opreq *s;    /* ... of its request (ops.h) */
	struct fos_backend *be;
	int lane;
	fosd_lane_buf *buf; /* the lane's small-operand buffers (NULL: none) */
	struct fosd_devres *dev; /* the device it runs on: its caches; be is one of its lanes */
	/* The lane's done-event handle when the request may be answered before its GPU work ends
	 * (executor.c; NULL: it may not). response.c puts it in a reply whose results are all in
	 * the client's GPU memory, records the event after the op's work and sets early. */
	const unsigned char *done_event;
	int early;
	uint64_t deadline_ns; /* the request's deadline on the monotonic clock (fosd_now_ns), 0: none;
			       * set by the executor, for an op that checks it between its steps */
	/* Where the op's result goes (ops.h fosd_result): set by whoever runs the op (the executor;
	 * dispatch.c for inline ops), executor/response.c's fosd_response_result, which makes reply
	 * of it while the op still holds its output buffers. */
	int (*result)(struct fosd_opctx *c, int which, void *result, struct fosd_outs *o);
	struct nng_msg *reply; /* made by result (NULL: none yet); the runner takes it */
	char msg[FOSD_MSG_MAX]; /* a failed op's message (fosd_fail) */
} fosd_opctx;

/* Runs the op: 0, or a gRPC code with c->msg. Its result, handed to c->result, is c->reply. */
typedef int (*fosd_op_handler)(fosd_opctx *c);
/* Checks the request's fields of this op and fills a (validate.c); 0 or a gRPC code with the
 * message in v. */
typedef int (*fosd_op_validator)(struct fosd_vctx *v, const struct Fos__Request *rq, struct fosd_args *a,
				 uint64_t max_reply);

typedef struct fosd_op_def {
	const char *name;
	int request_case;            /* Fos__Request.op_case this op answers (0: none) */
	fosd_op_validator validate;  /* NULL: the request has no fields to check */
	fosd_op_handler run;
	unsigned flags;              /* FOSD_OPF_* */
	/* with FOSD_OPF_BESIDE: whether this request may run beside others (NULL: always) */
	int (*beside)(const struct fosd_args *a);
	/* small enough to run at once on the receiving thread when a lane is free and nothing waits
	 * (tens of microseconds of device work, not milliseconds); NULL: never */
	int (*small)(const struct fosd_args *a);
} fosd_op_def;

/* Whether request a of the op of row d may run beside others / at once on its receiving thread.
 * (Inline, so that the stages after dispatch know an op only through its row.) */
static inline int fosd_def_beside(const fosd_op_def *d, const struct fosd_args *a)
{
	return (d->flags & FOSD_OPF_BESIDE) && (!d->beside || d->beside(a));
}

static inline int fosd_def_small(const fosd_op_def *d, const struct fosd_args *a)
{
	return d->small && d->small(a);
}

/* The row of op (FOSD_OP_INVALID's for any value out of range). */
const fosd_op_def *fosd_op_def_of(int op);
const char *fosd_op_name(int op);
unsigned fosd_op_flags(int op);
/* The op answering a Request oneof case; FOSD_OP_INVALID when none does. */
int fosd_op_of_case(int request_case);

/* Inputs up to this size make a request small (a row's small(), optable.c). */
#define FOSD_RUN_NOW_BYTES ((size_t)2 << 20)

#endif
