/* ops.h: the op handlers (one per row of the op table, optable.c), what they see of a request and
 * of the server, and the helpers they share: backend error codes to gRPC codes, backend buffers on
 * the request's lane, and the description of a result's output tensors (copied from backend memory
 * straight into the reply by the executor).
 *
 * A handler gets an op context (optable.h): what it sees of the server (fosd_opsrv), of its
 * request (fosd_opreq), of its device (fosd_devres), and the lane's backend, to which every backend
 * call of the request goes. It returns its status and hands its typed result (the op's
 * Fos__*Result and its output tensors) to fosd_result; it builds no reply and sends nothing: the
 * executor makes the Response of that result (executor/response.c) and answers.
 *
 * These structs are the ops layer's part of the state the stages above share: the executor's
 * (executor.h), the requests stage's (dispatch.h) and the transport's (transport.h) each begin with
 * the part of the layer below (fosd_opsrv in fosd_exec, fosd_opreq in fosd_job, fosd_devres in
 * fosd_device), embedded unnamed (-fms-extensions), so every stage reaches the fields by their
 * names and a pointer to the whole is a pointer to that first part. */
#ifndef FOSD_OPS_H
#define FOSD_OPS_H

#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>

#include "backend.h"
#include "compare.h"
#include "config.h"
#include "contexts.h"
#include "devmem.h"
#include "fos_wire.h"
#include "metrics.h"
#include "rc_code.h"
#include "shm.h"
#include "util.h"
#include "tenants.h"
#include "wcache.h"
#include "optable.h"
#include "fos.pb-c.h"

/* ---- the typed request: what validate.c makes of a Request's fields ------------------------- */

typedef struct fosd_put_args {
	const char *name;
	uint64_t version;
	fosw_tensor w;
	fos_linear_opts opts;
	int pin, keep_master, want_col;
} fosd_put_args;

typedef struct fosd_fwd_args {
	const char *weight;
	uint64_t version;
	fosw_tensor x, bias;
	int has_bias;
	int override, row_scaled, save, skip_output;
	int four_over_six;      /* enum fos_scope, or -1: the weight's */
	fosw_tensor expect;     /* a check instead of Y (has_expect): bf16, any rank until N is known */
	int has_expect;
	fos_cmp_criterion crit; /* the check's criterion (all zero: bitwise) */
	fosd_put_args put;      /* the put run before the forward (has_put; ForwardRequest.put) */
	int has_put;
} fosd_fwd_args;

typedef struct fosd_bwd_args {
	uint64_t id;
	fosw_tensor dy;
	int keep;
	int skip_dx, skip_dw; /* gradients not computed */
} fosd_bwd_args;

typedef struct fosd_quant_args {
	fosw_tensor x;
	int dtype; /* FOS_BF16 or FOS_F32 */
	fos_qcfg cfg;
	fosw_tensor amax; /* given amax (has_amax) */
	int has_amax;
} fosd_quant_args;

typedef struct fosd_deq_args {
	fosw_tensor codes, scales, amax;
	int64_t rows, cols;
	int bound, row_scaled, out_dtype; /* out_dtype: FOS_BF16 or FOS_F32 */
} fosd_deq_args;

typedef struct fosd_lin_args {
	fosw_tensor x, w, bias, dy;
	int has_bias, has_dy;
	fos_linear_opts opts;
	int resolved; /* override after DEFAULT is resolved */
} fosd_lin_args;

typedef struct fosd_args {
	int op; /* enum fosd_op */
	union {
		fosd_put_args put;
		const char *drop_name;
		fosd_fwd_args fwd;
		fosd_bwd_args bwd;
		uint64_t release_id;
		fosd_quant_args quant;
		fosd_deq_args deq;
		fosd_lin_args lin;
	} u;
} fosd_args;

/* ---- what an op sees --------------------------------------------------------------------- */

/* One device's resources: its backend (lane 0), weight cache, saved contexts and the client GPU
 * memory opened on it. Owned by the server (server.c); the executor's fosd_device begins with it. */
typedef struct fosd_devres {
	int index;             /* in the server's devices: the number clients see (HealthResult.devices) */
	int ordinal;           /* its backend's device: the CUDA ordinal, or the cpu stand-in's number */
	char name[192];        /* "cuda:1 (NVIDIA H200 (sm_90))", "cpu:0 (CPU, 2 threads)" */
	fos_backend *be;       /* lane 0 */
	fosd_wcache wc;
	fosd_contexts cx;
	fosd_devmaps devmaps;  /* client GPU allocations and events opened on this device (devmaps.c) */
} fosd_devres;

struct fosd_opsrv;
/* Stats: the result of one snapshot taken now, *st pointing into the returned block (free() it);
 * NULL when out of memory (observe/stats.c's, set by fosd_server_init). */
typedef void *(*fosd_stats_result_fn)(struct fosd_opsrv *srv, Fos__StatsResult **st);

/* What an op sees of the server: the first part of the executor's fosd_exec. */
typedef struct fosd_opsrv {
	fosd_config *cfg;
	int n_devs;            /* >= 1 */
	fosd_devres *res[FOSD_MAX_DEVICES]; /* each device's resources (res[i]->index == i) */
	fosd_regions regions;  /* shared-memory regions of ipc clients (regions.c) */
	uint64_t start_ns;
	int mps;               /* FOS_MPS_*: whether its GPU work runs under MPS (mps.c, set at start) */
	atomic_int draining;
	fosd_stats_result_fn stats_result;
	/* RegisterRegion with a channel: serves region r as a request channel of s's connection
	 * (transport/chan.c's fosd_chan_start_op, set by fosd_server_init; see chan.h) */
	int (*chan_start)(struct fosd_opsrv *srv, struct fosd_opreq *s, struct fosd_region *r, uint32_t spin_us,
			  uint64_t *bytes, char *msg, size_t msgsz);
} fosd_opsrv;

/* What an op sees of its request (written by the requests stage and placement; read by the op):
 * the first part of the executor's fosd_job. */
typedef struct fosd_opreq {
	nng_msg *msg;               /* the request as received (set by the transport; its pipe is the
				     * client's connection) */
	Fos__Request *rq;
	const uint8_t *data;        /* the message's data section */
	size_t dlen;
	int op;
	const struct fosd_op_def *def; /* the op's row (optable.h), set with op by dispatch.c: what the
					* later stages know of the op */
	uint64_t req_id;
	fosd_args args;
	fosd_tenant *tenant;        /* who sent it (auth.c); NULL: the anonymous tenant */
	fosd_shm_req shm;           /* shared-memory regions the request uses (shm_req.c) */
	int bound_dev;              /* the device whose mappings hold its device tensors (its first) */
	uint32_t placed;            /* PutWeight: every device it goes to (placement.c) */
	int stages_done;            /* stages of the op run so far (placement.c) */
	nng_msg *stage_reply;       /* PutWeight: the reply of its last put stage, sent after its
				     * drop stages (freed when the request ends, if still here) */
} fosd_opreq;

/* Runs the handler of the request's row (c->s->def); UNIMPLEMENTED for a row without one. 0, or a
 * gRPC code with c->msg; the result the op handed fosd_result is c->reply (the caller answers). */
int fosd_op_run(fosd_opctx *c);

/* A failed op: c->msg from fmt; returns code (logged when INTERNAL). */
int fosd_fail(fosd_opctx *c, int code, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* A failed backend step: the code of the backend's rc (fosd_code_of_rc), the message e->msg, after
 * "what: " when what is not NULL. */
int fosd_fail_be(fosd_opctx *c, int rc, const char *what, const fos_err *e);

/* Backend buffer (on c's lane) holding a copy of a received tensor, or the tensor itself when it
 * lies aligned in the client's GPU memory (devmem.h); NULL (with e) on failure. Read only. */
void *fosd_dev_from(fosd_opctx *c, const fosw_tensor *t, fos_err *e);
/* Backend buffer of n bytes; NULL (with e) on failure. */
void *fosd_dev_alloc(fosd_opctx *c, size_t n, fos_err *e);
/* The buffer of n bytes for the op's result `result` ("y", "dx", ...): the client's GPU memory
 * itself when the request asked for that result there and it can be written in place (devmem.h),
 * else fosd_dev_alloc. */
void *fosd_dev_out(fosd_opctx *c, const char *result, size_t n, fos_err *e);
/* Frees a buffer of fosd_dev_from / fosd_dev_alloc / fosd_dev_out (never client memory). */
void fosd_dev_free(fosd_opctx *c, void *p);
/* A device buffer of at least n bytes that belongs to c's lane, for a small operand (n <=
 * FOSD_LANE_BUF_MAX; which: 0 or 1, two buffers a lane): the same addresses request after request,
 * so the backend's recorded work (backend.h replay) is found again. Valid until the request ends;
 * never freed by the caller. NULL when not on a lane, n is too large or memory is short: the
 * caller allocates as usual. (executor.c owns the buffers and frees them with its lanes.) */
#define FOSD_LANE_BUF_MAX FOSD_RUN_NOW_BYTES
void *fosd_lane_buffer(fosd_opctx *c, int which, size_t n);

/* Cross-lane order of what an asynchronous request makes for others (a weight entry, a saved
 * context): when c's lane defers its syncs (an asynchronous request), fosd_mark_made records a mark
 * after the work queued so far into *ev (a mark of the device's pool: retire.h; and c's lane into
 * *lane); else leaves *ev NULL (that work
 * is synchronized before the op ends). 0, or -1 with e. fosd_wait_made makes c's lane wait for such
 * a mark when it was recorded on another lane (a no-op for NULL, its own lane, or a backend without
 * streams). */
int fosd_mark_made(fosd_opctx *c, void **ev, int *lane, fos_err *e);
int fosd_wait_made(fosd_opctx *c, void *ev, int lane, fos_err *e);

/* Output tensors of a reply, described first, then copied from backend memory into the message. */
typedef struct fosd_outs {
	fosw_placer pl;
	int n;
	Fos__Tensor t[FOSW_MAX_TENSORS];
	int64_t shape[FOSW_MAX_TENSORS][FOSW_MAX_DIMS];
	const void *dev[FOSW_MAX_TENSORS];
} fosd_outs;

void fosd_outs_init(fosd_outs *o);
/* Adds an output of wire dtype and shape (d1 <= 0: 1-D) read from backend pointer dev. */
Fos__Tensor *fosd_out_add(fosd_outs *o, int wire_dtype, int64_t d0, int64_t d1, const void *dev);
/* The op's result: `result` is the Fos__*Result of the Response's result oneof member whose case is
 * which, o its output tensors (NULL: none), read from backend memory before this returns (so the
 * op frees them after). 0, or a gRPC code with c->msg (then the op undoes what the result
 * reported, if anything). The reply is made by whoever runs the op (c->result). */
static inline int fosd_result(fosd_opctx *c, Fos__Response__ResultCase which, void *result, fosd_outs *o)
{
	return c->result(c, (int)which, result, o);
}

/* ops_weights.c */
int fosd_op_put_weight(fosd_opctx *c);
/* A put's work on c's device (PutWeight's, and a Forward's put): the weight quantized for its uses
 * (r's; r NULL: all) and inserted into the device's cache as *out. 0, or a gRPC code with msg;
 * *staged says whether a failure is one PutWeight reports with the devices already holding it. */
int fosd_put_cache(fosd_opctx *c, const fosd_put_args *a, const Fos__PutWeightRequest *r, struct fosd_weight **out,
		   int *staged, char *msg, size_t msgsz);
int fosd_op_drop_weight(fosd_opctx *c);
/* ops_linear.c */
int fosd_op_forward(fosd_opctx *c);
int fosd_op_backward(fosd_opctx *c);
int fosd_op_release(fosd_opctx *c);
int fosd_op_linear(fosd_opctx *c);
/* ops_quant.c */
int fosd_op_quantize(fosd_opctx *c);
int fosd_op_dequantize(fosd_opctx *c);
/* ops_info.c: the inline ops (FOSD_OPF_INLINE), read-only, no backend calls */
int fosd_op_health(fosd_opctx *c);
int fosd_op_stats(fosd_opctx *c);
int fosd_op_list_weights(fosd_opctx *c);
/* ops_shm.c: RegisterRegion, UnregisterRegion, ListRegions; their requests' checks (0 or a code).
 * A channel's thread polls for spin_us after each reply (default, most: transport/chan.c). */
#define FOSD_CHAN_SPIN_DEFAULT_US 50u
#define FOSD_CHAN_SPIN_MAX_US 1000000u
int fosd_shm_validate_op(const Fos__Request *rq, char *msg, size_t msgsz);
int fosd_op_register_region(fosd_opctx *c);
int fosd_op_unregister_region(fosd_opctx *c);
int fosd_op_list_regions(fosd_opctx *c);
/* ops_devmem.c */
int fosd_op_close_device_memory(fosd_opctx *c);

/* Weight and region names: 1..128 bytes of [A-Za-z0-9._:/-]. Returns 0 or -1 with msg. */
int fosd_check_name(const char *name, const char *what, char *msg, size_t msgsz);

/* WeightInfo for a reply; strings point into info. */
void fosd_weight_info_msg(const fosd_weight_info *info, Fos__WeightInfo *out, Fos__WeightConfig *cfg);

#endif
