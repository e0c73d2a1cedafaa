/* fos.h: libfos, the C client of fosd (build/libfos.a and build/libfos.so).
 *
 * Connect once, then call from any number of threads: every call is one request/reply on its own
 * nng context, so several requests of one handle are in flight at once. Requests are never resent
 * by the transport (a slow forward is not run twice); each carries an id unique to the handle, and
 * the server does not execute a repeated id again. (libfos itself sends a request once more, with
 * its id, when nng's wait for the reply ends long before the call's timeout; the server answers that
 * copy with the first run's reply.)
 *
 * Errors: every call returns a status code (enum fos_code, the gRPC codes, FOS_CODE_OK = 0) and,
 * when st is not NULL, fills st with the code and a message. libfos never prints and never aborts.
 * Codes made on the client side: UNAVAILABLE (no server / connection lost), DEADLINE_EXCEEDED
 * (the handle's timeout passed), INVALID_ARGUMENT (a bad argument, caught before sending),
 * RESOURCE_EXHAUSTED (the request is over the server's message limit), OUT_OF_RANGE (an output
 * buffer is too small), DATA_LOSS (a malformed reply).
 *
 * Tensors (struct fos_tensor) are row-major bytes + dtype + shape. Inputs are read from data and
 * copied once into the request message (or referenced in place when data lies in a shared-memory
 * region of the handle: see the end of this file; or in CUDA device memory: "device tensors").
 * For an output, set data = NULL to have libfos malloc the
 * buffer (free it with free()), or point data at size bytes of your own; on return dtype, ndim,
 * shape and size describe what was written (ndim = 0 and size = 0 for an output the reply does not
 * have, like db without a bias).
 *
 * Recomputing an expired context: a forward with save_context fills a struct fos_context, which
 * records the weight name and version and the options. If the context has expired or was evicted
 * when fos_backward runs, the server answers NOT_FOUND; when the caller passes the forward's X
 * (and bias) in fos_backward_opts, libfos re-runs that forward against the same weight version
 * (without sending Y back), saves a new context and retries the backward, bit-identically. If the
 * weight was replaced by another version meanwhile, the recompute fails FAILED_PRECONDITION. */
#ifndef FOS_CLIENT_H
#define FOS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "fos_version.h" /* FOS_VERSION_MAJOR, _MINOR, _PATCH and the string FOS_VERSION */
#include "fos_wire_enums.h" /* FOS_DTYPE_*, FOS_OVERRIDE_*, FOS_BLOCKS_*, FOS_ERRMODE_*, FOS_QRECIPE_*,
				* FOS_FOUR_OVER_SIX_* */

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the libfos linked in ("MAJOR.MINOR.PATCH"; FOS_VERSION is that of this header). */
const char *fos_version(void);

/* Status codes: the gRPC codes (the wire's fos.Code). */
enum fos_code {
	FOS_CODE_OK = 0,
	FOS_CODE_CANCELLED = 1,
	FOS_CODE_UNKNOWN = 2,
	FOS_CODE_INVALID_ARGUMENT = 3,
	FOS_CODE_DEADLINE_EXCEEDED = 4,
	FOS_CODE_NOT_FOUND = 5,
	FOS_CODE_ALREADY_EXISTS = 6,
	FOS_CODE_PERMISSION_DENIED = 7,
	FOS_CODE_RESOURCE_EXHAUSTED = 8,
	FOS_CODE_FAILED_PRECONDITION = 9,
	FOS_CODE_ABORTED = 10,
	FOS_CODE_OUT_OF_RANGE = 11,
	FOS_CODE_UNIMPLEMENTED = 12,
	FOS_CODE_INTERNAL = 13,
	FOS_CODE_UNAVAILABLE = 14,
	FOS_CODE_DATA_LOSS = 15,
	FOS_CODE_UNAUTHENTICATED = 16
};

typedef struct fos_status {
	int code;
	char message[512];
} fos_status;

/* "NOT_FOUND" etc. */
const char *fos_code_name(int code);

#define FOS_TENSOR_MAX_DIMS 2

typedef struct fos_tensor {
	int dtype;                          /* enum fos_wire_dtype */
	int ndim;                           /* 1 or 2 */
	int64_t shape[FOS_TENSOR_MAX_DIMS];
	void *data;                         /* see the header comment: inputs and outputs */
	size_t size;                        /* bytes: capacity of a caller's output buffer; set on return */
	int mem;                            /* where data lives: enum fos_mem (0: host memory) */
} fos_tensor;

/* fos_tensor.mem: host memory, or CUDA device memory (fos_tensor_cuda; see "device tensors"). */
enum fos_mem { FOS_MEM_HOST = 0, FOS_MEM_CUDA = 1 };

/* Input tensor helpers (data is only read). */
fos_tensor fos_tensor_1d(int dtype, int64_t n, const void *data);
fos_tensor fos_tensor_2d(int dtype, int64_t rows, int64_t cols, const void *data);
/* An output to be allocated by libfos (data = NULL). */
fos_tensor fos_tensor_out(void);
/* Bytes of a tensor's shape and dtype (0 for an unknown dtype). */
size_t fos_tensor_bytes(const fos_tensor *t);

typedef struct fos_client fos_client;

/* Connects to url ("ipc:///tmp/fosd.sock", "tcp://host:port") and checks the server answers a
 * Health request within timeout_ms (<= 0: 30000). token: the auth token sent with every request
 * (NULL: none). The timeout also bounds every later call. On failure *out is NULL and the code is
 * UNAVAILABLE (nothing listening), DEADLINE_EXCEEDED or INVALID_ARGUMENT (a bad URL). The handle
 * reconnects by itself if the connection drops (see "losing fosd" below). */
int fos_connect(const char *url, const char *token, int timeout_ms, fos_client **out, fos_status *st);
/* Closes the handle; no call may be in progress on it. NULL is fine. */
void fos_close(fos_client *c);
/* Changes the timeout of later calls (milliseconds, > 0). */
void fos_set_timeout(fos_client *c, int timeout_ms);
/* Latency against CPU: a call polls for its reply for up to spin_us microseconds before it sleeps
 * (default 0, or $FOS_SPIN_US at connect). Waking a sleeping thread costs tens of microseconds on an
 * idle CPU; a small request answered within spin_us saves that, at the price of a busy core. */
void fos_set_spin(fos_client *c, int spin_us);
/* The server's message size limit as reported at connect. */
uint64_t fos_max_message_bytes(const fos_client *c);

/* ---- health and stats ---------------------------------------------------------------------- */

typedef struct fos_health_info {
	char version[32];
	char backend[16];
	char device[128];
	uint64_t uptime_ms;
	uint64_t max_message_bytes;
	int draining;
} fos_health_info;

int fos_health(fos_client *c, fos_health_info *out, fos_status *st);

#define FOS_STATS_MAX_OPS 16
#define FOS_STATS_CODES 17

typedef struct fos_op_stats {
	char op[32];                      /* "forward", "backward", ..., "invalid" */
	uint64_t requests;
	uint64_t by_code[FOS_STATS_CODES]; /* requests by status code */
	uint64_t lat_count;               /* OK requests, receipt to reply */
	double lat_mean_us;
	uint64_t lat_p50_us, lat_p90_us, lat_p99_us, lat_p999_us, lat_max_us;
	uint64_t bytes_in, bytes_out;
	/* Where an executor op's time goes (OK requests an executor lane ran; all 0 for health, stats
	 * and list_weights, which fosd answers without the executor): queue = receipt until a lane
	 * took it, run = the op and its device sync on the lane. The rest of lat_* is decoding,
	 * encoding and sending. Same histogram as lat_* (microseconds, at most 25% high). */
	uint64_t queue_count;
	double queue_mean_us;
	uint64_t queue_p50_us, queue_p90_us, queue_p99_us, queue_p999_us, queue_max_us;
	uint64_t run_count;
	double run_mean_us;
	uint64_t run_p50_us, run_p90_us, run_p99_us, run_p999_us, run_max_us;
	/* of run_count, how many fosd ran at once on the thread that received them (over the socket a
	 * small forward, quantize or dequantize with nothing queued and a lane free; through a request
	 * channel any request with nothing queued) */
	uint64_t ran_at_once;
} fos_op_stats;

typedef struct fos_stats_info {
	uint64_t uptime_ms;
	char backend[16];
	char device[128];
	int n_ops;
	fos_op_stats ops[FOS_STATS_MAX_OPS];
	uint64_t cache_bytes, cache_budget, cache_entries, cache_hits, cache_misses, cache_evictions;
	uint64_t contexts, context_bytes, context_budget, contexts_expired, contexts_evicted;
	uint64_t inflight, queued, duplicates, bad_messages, workers;
	/* fosd's pool of message bodies of 1 MiB and more (its whole process): buffers handed out,
	 * of them reused and freshly mapped; bytes mapped now free (kept for reuse) and holding a
	 * message, of both pinned for the device; failed pins; active 0 until the first buffer (or
	 * in a fosd built without the pool). */
	uint64_t msg_pool_taken, msg_pool_reused, msg_pool_mapped_new;
	uint64_t msg_pool_bytes_free, msg_pool_bytes_used, msg_pool_bytes_pinned, msg_pool_pin_failures;
	int msg_pool_active;
	/* request channels being served (all connections) and requests taken from them since start */
	uint64_t channels, channel_requests;
	/* connections now; closed for not reading their replies; requests refused for a
	 * connection's share (or the token-less or connection cap); connections past
	 * max_connections */
	uint64_t connections, connections_dropped, connection_refusals, connections_rejected;
} fos_stats_info;

/* Fills *out (a fixed struct: counters fosd added after it was laid out are only in the snapshot
 * below). */
int fos_stats(fos_client *c, fos_stats_info *out, fos_status *st);

/* Stats as named values, every numeric one fosd sends (new ones too, with no change to this ABI),
 * by their fos.proto names: "cache_hits", "msg_pool_active" (0 or 1); per op "ops.OP.requests",
 * "ops.OP.bytes_in", "ops.OP.latency.p99_us" (also .queue. and .run.: count, mean_us, p50_us,
 * p90_us, p99_us, p999_us, max_us), "ops.OP.codes.CODE.count" ("ops.forward.codes.NOT_FOUND.count");
 * per device (fosd --devices; PROTOCOL.md "Devices") "devices.I.FIELD" with I the device's index
 * ("devices.0.cache_bytes", "devices.1.queued", "devices.1.requests"; the top-level cache, context,
 * decoded tier, scratch, device mapping and queued counters are their sums).
 * Strings ("backend", "device", "devices.I.device") through fos_stats_text. Names are unique, in the order fosd sends
 * them; a name fosd does not send is not there (NOT_FOUND), so read what you need by name. */
typedef struct fos_stats_snapshot fos_stats_snapshot;

/* One Stats request; *out (fos_stats_free it) is NULL on failure. */
int fos_stats_take(fos_client *c, fos_stats_snapshot **out, fos_status *st);
void fos_stats_free(fos_stats_snapshot *s);
/* Values in the snapshot (numbers and strings) and the name of value i (NULL past the end). */
size_t fos_stats_count(const fos_stats_snapshot *s);
const char *fos_stats_name_at(const fos_stats_snapshot *s, size_t i);
/* The integer value of name: FOS_CODE_OK, NOT_FOUND (no such value) or INVALID_ARGUMENT (it is a
 * mean, read it with fos_stats_get_double, or a string). */
int fos_stats_get(const fos_stats_snapshot *s, const char *name, uint64_t *out);
/* Any numeric value of name as a double (means are doubles): OK, NOT_FOUND or INVALID_ARGUMENT. */
int fos_stats_get_double(const fos_stats_snapshot *s, const char *name, double *out);
/* The string value of name ("backend", "device"), NULL when there is none; valid until
 * fos_stats_free. */
const char *fos_stats_text(const fos_stats_snapshot *s, const char *name);

/* ---- the weight cache ---------------------------------------------------------------------- */

typedef struct fos_weight_config {
	int weight_block;     /* enum fos_block_opt (default 16x16) */
	int err_mode;         /* enum fos_errmode_opt */
	int bound;            /* 256 or 448; 0 = 256 */
	int pin;              /* never evicted by LRU */
	int drop_master;      /* without uses: every use but high_precision */
	int eager_columnwise; /* no effect (the columnwise copy is made at put for the quantized use) */
	int uses;             /* FOS_WEIGHT_USE_* bits the weight will serve; 0: all (PROTOCOL.md "Weight uses") */
	int four_over_six;    /* enum fos_four_over_six_opt: the scope W is quantized for (0: all) */
} fos_weight_config;

/* What a weight is put for (fos_weight_config.uses, fos_weight_info.weight_uses); it keeps only
 * what they need, and a forward or backward needing another use gets FAILED_PRECONDITION. */
#define FOS_WEIGHT_USE_FORWARD 0x1        /* forwards without a saved context */
#define FOS_WEIGHT_USE_QUANTIZED 0x2      /* the quantized backward */
#define FOS_WEIGHT_USE_HIGH_PRECISION 0x4 /* the high_precision backward (keeps the bf16 master) */
#define FOS_WEIGHT_USE_DEQUANTIZED 0x8    /* the dequantized backward */
#define FOS_WEIGHT_USES_ALL 0xF

#define FOS_NAME_MAX 128

typedef struct fos_weight_info {
	char name[FOS_NAME_MAX + 1];
	uint64_t version;
	int64_t n, k;
	int weight_block, err_mode, bound;
	uint64_t bytes;
	int pinned, has_master, has_columnwise;
	uint64_t uses, idle_ms;
	int weight_uses; /* FOS_WEIGHT_USE_* bits it was put for */
	/* bytes by part (their sum is bytes): rowwise codes + scales + amax, the columnwise ones, the
	 * bf16 master; its decoded tier copy (not in bytes) */
	uint64_t codes_bytes, columnwise_bytes, master_bytes, decoded_tier_bytes;
} fos_weight_info;

/* Quantizes w (N, K) bf16 once and caches it as (name, version); a new version replaces the old
 * one. cfg NULL: defaults. info may be NULL. Names: 1..128 bytes of [A-Za-z0-9._:/-]. */
int fos_put_weight(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
		   const fos_weight_config *cfg, fos_weight_info *info, fos_status *st);
int fos_drop_weight(fos_client *c, const char *name, fos_status *st);
/* Every weight of the caller: *list is malloc'd (free() it), *count entries, in byte order of their
 * names. It follows fosd's pages (fos_list_weights_page) until the last one. */
int fos_list_weights(fos_client *c, fos_weight_info **list, size_t *count, fos_status *st);
/* One page of the caller's weights in byte order of their names: page_token NULL or "" for the
 * first page, else the *next_token of the page before (opaque; a weight put or dropped between
 * pages makes no other one skipped or repeated). page_size: the most weights wanted (0: fosd's
 * default of 1000; fosd gives at most 10000, and fewer when more would not fit in a message).
 * *list as for fos_list_weights; *next_token is malloc'd (free() it), NULL after the last page. A
 * token fosd did not give is INVALID_ARGUMENT. */
int fos_list_weights_page(fos_client *c, const char *page_token, uint32_t page_size, fos_weight_info **list,
			  size_t *count, char **next_token, fos_status *st);

/* ---- forward / backward through the cache --------------------------------------------------- */

typedef struct fos_forward_opts {
	uint64_t weight_version; /* 0: whatever is cached; else it must match */
	int override;            /* enum fos_override_opt */
	int row_scaled;
	int save_context;        /* keep what the backward needs; fills *ctx */
	int four_over_six;       /* enum fos_four_over_six_opt; 0: the weight's scope. A scope that
				  * quantizes W otherwise than the weight's: FAILED_PRECONDITION unless
				  * the weight keeps its master (NUMERICS.md section 11) */
} fos_forward_opts;

typedef struct fos_context {
	uint64_t id;             /* 0: none (released, consumed, or not saved) */
	int resolved_override;
	uint64_t ttl_ms;
	int recomputed;          /* times fos_backward recomputed it */
	/* what a recompute needs */
	char weight[FOS_NAME_MAX + 1];
	uint64_t weight_version;
	int override, row_scaled;
	int64_t m, n, k;
	int has_bias;
	int four_over_six; /* the forward's (enum fos_four_over_six_opt) */
} fos_context;

/* y (M, N) bf16 = x (M, K) bf16 W^T [+ bias (N) bf16], W the cached weight. o NULL: defaults
 * (no context). ctx may be NULL unless o->save_context. */
int fos_forward(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st);

/* A forward that carries the put of its own weight (LIBFOS_1.4; PROTOCOL.md "A put inside a
 * forward"): w (N, K) bf16 put as (weight, version) with cfg's options (NULL: defaults; as
 * fos_put_weight), then y = x W^T [+ bias] with it, in one request, so a training step whose weight
 * changed makes one round trip per layer. version nonzero; o->weight_version 0 or version (o NULL:
 * defaults). fosd runs it alone, as a PutWeight. A put that fails fails the call before the forward
 * runs (fosd's message starts "put: "); one that succeeded stays cached when the forward then
 * fails. FAILED_PRECONDITION from a fosd serving several devices ("a put inside a forward is for a
 * fosd serving one"; libfos answers it without a request when fosd's last Health, at connect or
 * fos_health, listed several). A fosd that predates the field ignores the put and refuses the call: NOT_FOUND
 * (the version is not cached) or, with W in the message, INVALID_ARGUMENT ("... bytes beyond its
 * last tensor"); put with fos_put_weight, then fos_forward. With reput_weights the put is
 * remembered as fos_put_weight's. */
int fos_forward_put(fos_client *c, const char *weight, uint64_t version, const fos_tensor *w,
		    const fos_weight_config *cfg, const fos_tensor *x, const fos_tensor *bias,
		    const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st);

/* ---- a forward that checks the caller's Y instead of returning fosd's ---------------------- */

/* When a check is consistent (the criteria of `fos check`): all zero means bitwise (every element
 * has the same bits); with by_max_ulps and/or by_min_sqnr, no element may be NaN/inf on one side
 * only and every bound set must hold. */
typedef struct fos_check_criterion {
	int by_max_ulps;
	uint32_t max_ulps;       /* no element more than this many bf16 ulps from fosd's Y */
	int by_min_sqnr;
	double min_sqnr_db;      /* the SQNR at least this (finite) */
} fos_check_criterion;

/* One element of a check. */
typedef struct fos_check_point {
	int present;             /* 0: there is no such element (the fields below are 0) */
	int64_t row, col;
	uint16_t expect, y;      /* the caller's and fosd's bf16 bits */
} fos_check_point;

/* expect ("ours") against fosd's Y (the reference), with the definitions of `fos check`
 * (client/cli/CLI.md): bits, bf16 ulps, SQNR over elements finite on both sides. */
typedef struct fos_check_result {
	int64_t rows, cols;              /* Y's shape (M, N) */
	uint64_t elements;               /* M * N */
	uint64_t differ;                 /* elements whose bits differ */
	uint64_t nonfinite;              /* NaN or inf on one side only, or +inf against -inf */
	int64_t max_ulps;                /* the largest ulp distance of elements finite on both sides */
	fos_check_point max_ulps_at;     /* the first element at max_ulps (absent: none differs) */
	fos_check_point first_differ;    /* the first element whose bits differ */
	fos_check_point first_nonfinite; /* the first non-finite mismatch */
	double sqnr_db;                  /* 10 log10(sum y^2 / sum (expect - y)^2); +inf: no value
	                                  * differs; -inf: Y is zero wherever a value differs */
	int consistent;                  /* under the criterion */
	char reason[256];                /* why, in one line */
} fos_check_result;

/* A forward whose reply is a comparison instead of Y: fosd computes Y (M, N) = x W^T [+ bias] as
 * fos_forward would, compares expect (bf16 of Y's shape, inline or in a region of the handle)
 * with it element by element and sends back only *out. crit NULL: bitwise. o as for fos_forward,
 * but save_context is refused (INVALID_ARGUMENT). Returns FOS_CODE_OK when the comparison was
 * made, consistent or not; an expect of another shape than Y is INVALID_ARGUMENT naming both. */
int fos_forward_check(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		      const fos_forward_opts *o, const fos_tensor *expect, const fos_check_criterion *crit,
		      fos_check_result *out, fos_status *st);

typedef struct fos_backward_opts {
	int keep_context;                 /* keep the context for another backward */
	const fos_tensor *recompute_x;    /* the forward's X: recompute an expired context */
	const fos_tensor *recompute_bias; /* the forward's bias, when it had one */
} fos_backward_opts;

/* dx (M, K), dw (N, K), db (N, when the forward had a bias) bf16 from dy (M, N) bf16. The context
 * is consumed (ctx->id = 0) unless o->keep_context. o may be NULL. db may be NULL. dx or dw NULL:
 * that gradient is not wanted, and fosd does not compute it (an input that needs no gradient, a
 * frozen weight: its GEMM is skipped; the other gradients' bits are the same). */
int fos_backward(fos_client *c, fos_context *ctx, const fos_tensor *dy, const fos_backward_opts *o,
		 fos_tensor *dx, fos_tensor *dw, fos_tensor *db, fos_status *st);
/* Frees a saved context on the server now (ctx->id = 0). */
int fos_release(fos_client *c, fos_context *ctx, fos_status *st);

/* ---- stateless operations ------------------------------------------------------------------ */

typedef struct fos_quant_config {
	int recipe;     /* enum fos_recipe_opt */
	int block;      /* enum fos_block_opt (default 1x16) */
	int err_mode;   /* enum fos_errmode_opt */
	int bound;      /* 256 or 448; 0 = 256 (448 for nvfp4) */
	int row_scaled;
} fos_quant_config;

/* x (rows, cols) bf16 or f32 -> codes u8 (rows, cols/2), scales e4m3 (rows, cols/16), amax_out
 * f32 (1) or (rows). amax_in: NULL, or the amax to use instead of max|x| (same shape). cfg NULL:
 * defaults. */
int fos_quantize(fos_client *c, const fos_tensor *x, const fos_quant_config *cfg, const fos_tensor *amax_in,
		 fos_tensor *codes, fos_tensor *scales, fos_tensor *amax_out, fos_status *st);
/* out (rows, cols) of out_dtype (FOS_DTYPE_BF16 or FOS_DTYPE_F32) from codes, scales, amax. */
int fos_dequantize(fos_client *c, const fos_tensor *codes, const fos_tensor *scales, const fos_tensor *amax,
		   int bound, int row_scaled, int out_dtype, fos_tensor *out, fos_status *st);

typedef struct fos_linear_config {
	int override;     /* enum fos_override_opt */
	int weight_block; /* enum fos_block_opt (default 16x16) */
	int err_mode;     /* enum fos_errmode_opt */
	int bound;        /* 0 = 256 */
	int row_scaled;
	int four_over_six; /* enum fos_four_over_six_opt (0: all) */
} fos_linear_config;

/* One linear layer without the cache: y = x w^T [+ bias]; with dy also dx, dw (and db with a
 * bias). bias, dy, dx, dw, db may be NULL. cfg NULL: defaults. */
int fos_linear(fos_client *c, const fos_tensor *x, const fos_tensor *w, const fos_tensor *bias,
	       const fos_tensor *dy, const fos_linear_config *cfg, fos_tensor *y, fos_tensor *dx, fos_tensor *dw,
	       fos_tensor *db, fos_status *st);

/* ---- shared-memory regions (same-host zero copy) ------------------------------------------- *
 *
 * Over an ipc:// connection, tensor bytes can stay in shared memory that both sides map: a region
 * is created (or attached) here, registered with fosd on this handle's connection, and then any
 * fos_tensor whose data lies inside a region of the handle, input or output, travels as a
 * (region, offset) reference instead of bytes: fosd reads inputs from the region and writes
 * results straight into it (an output tensor whose data points into a region is filled in place,
 * no copy). fos_tensor_shm makes such a tensor. Results are bit-identical to the inline path.
 *
 * Regions belong to the connection and tenant that registered them: fosd releases them when this
 * handle's connection goes away (also when the process dies). If the handle reconnects, libfos
 * registers its regions again the first time a request finds them missing, and retries once. A
 * region must stay mapped until fos_region_destroy; destroy every region before fos_close (which
 * releases the bookkeeping of any left over). */

typedef struct fos_region fos_region;

enum fos_region_kind {
	FOS_REGION_MEMFD = 0, /* memfd_create, sealed against shrinking and growing (default) */
	FOS_REGION_POSIX = 1  /* shm_open (unlinked at once: only this process and fosd hold it) */
};

/* Creates a region of size bytes (zero-filled), maps it here and registers it under name (NULL: a
 * generated name). Fails FAILED_PRECONDITION over tcp. */
int fos_region_create(fos_client *c, const char *name, size_t size, int kind, fos_region **out, fos_status *st);
/* Registers memory the caller already mapped, shared with fosd through key: "fd:N" (file
 * descriptor N of this process: a memfd or shm_open fd, mapped MAP_SHARED at base) or
 * "shm:/NAME" (a POSIX shm object). The caller keeps the mapping and the descriptor until
 * fos_region_destroy, which then only unregisters. */
int fos_region_attach(fos_client *c, const char *name, const char *key, void *base, size_t size, fos_region **out,
		      fos_status *st);
/* Unregisters (a server that is gone is not an error), then unmaps and closes what
 * fos_region_create made. NULL is fine. */
int fos_region_destroy(fos_region *r, fos_status *st);

void *fos_region_data(const fos_region *r);
size_t fos_region_size(const fos_region *r);
const char *fos_region_name(const fos_region *r);
/* The file descriptor of a created region (-1 for an attached one). */
int fos_region_fd(const fos_region *r);

/* A tensor of dtype and shape (d1 <= 0: 1-D) at offset bytes into r, as an input or an output
 * (size = its bytes). If it does not fit in r, data is NULL (calls then fail INVALID_ARGUMENT). */
fos_tensor fos_tensor_shm(const fos_region *r, size_t offset, int dtype, int64_t d0, int64_t d1);

/* The server's region counts over all connections (from Stats): registered regions, their
 * bytes, and bytes still mapped. Any pointer may be NULL. */
int fos_region_stats(fos_client *c, uint64_t *regions, uint64_t *bytes, uint64_t *mapped, fos_status *st);

/* ---- request channel (same host, lowest latency) ---------------------------------------------- *
 *
 * Over an ipc:// connection, fos_channel_open gives the handle a request channel: a sealed memfd
 * region that fosd serves on a thread of its own (PROTOCOL.md "Request channels"). From then on a
 * call whose request fits in the channel goes through it: libfos writes the request message into
 * the region and rings a doorbell, fosd writes the reply back; the bytes, ids, checks and results
 * are those of the socket path, only nng's threads and socket are skipped. One call at a time uses
 * the channel; calls made meanwhile from other threads take the socket, as does a call whose
 * request does not fit, and one whose reply did not fit (fosd ran it and answered
 * RESOURCE_EXHAUSTED: libfos sends it again over the socket with a new id; size the channel for
 * the replies you expect, or have results written to regions). spin_us is the channel's one spin
 * setting: both sides poll for up to spin_us microseconds before they sleep on a futex (0:
 * FOS_CHANNEL_SPIN_DEFAULT_US; fosd polls for at most its channel_spin_us, and for exactly that
 * when spin_us is 0); a call on the channel polls for the larger of this and fos_set_spin's value.
 *
 * bytes: the region's size (0: 4 MiB; at least 8704), split into equal request and reply areas.
 * The channel ends with fos_channel_close, fos_close or the process. When fosd stops serving it
 * (the connection was lost and redialled, fosd restarted, its region unregistered), calls take the
 * socket, and the first one that succeeds opens a new channel like it (at most one try a second),
 * until fos_channel_close. */
#define FOS_CHANNEL_SPIN_DEFAULT_US 50 /* spin_us 0; fosd's channel_spin_us defaults to the same */
#define FOS_CHANNEL_SPIN_MAX_US 1000000 /* the largest spin_us (INVALID_ARGUMENT above) */
int fos_channel_open(fos_client *c, size_t bytes, int spin_us, fos_status *st);
/* Unregisters the channel; later calls use the socket. Waits for a call using it to finish. */
int fos_channel_close(fos_client *c, fos_status *st);
/* Bytes of the channel's request (= reply) area, 0 when the handle has none open. */
size_t fos_channel_bytes(const fos_client *c);

/* ---- device tensors (same-host, same-GPU zero copy) ------------------------------------------ *
 *
 * A tensor in CUDA device memory of the caller's process (fos_tensor_cuda), input or output, goes
 * to a cuda fosd on the same host and GPU as a reference (PROTOCOL.md "Device tensors"): libfos
 * exports the allocation holding it with a CUDA IPC memory handle (of the allocation's base, as
 * cuMemGetAddressRange finds it) and sends the handle, the tensor's offset in the allocation and the
 * GPU's UUID; fosd maps the allocation once per connection and tenant, reads inputs and writes
 * outputs there in place (an output's size is the bytes available). Results are bit-identical to
 * the host-memory path. Works over the socket and through request channels.
 *
 * libfos loads the CUDA driver (libcuda.so.1, or $FOS_CUDA_DRIVER) with dlopen on first use, so it
 * links and runs on hosts without CUDA; a device tensor then fails FAILED_PRECONDITION "no CUDA
 * driver". Also FAILED_PRECONDITION: memory that cannot be exported as a legacy CUDA IPC handle
 * (cuMemCreate / VMM memory such as PyTorch's expandable_segments allocator, stream-ordered pools
 * of cudaMallocAsync, managed memory), memory on another GPU than fosd's, and a cpu fosd. A
 * pointer that is not device memory, or a tensor running past the end of its allocation, is
 * INVALID_ARGUMENT.
 *
 * Ordering: the work producing a device input must be complete before the call (synchronize its
 * stream, e.g. cudaStreamSynchronize), unless fos_set_cuda_stream (fos_set_cuda_order) names that
 * stream; fosd's writes to device outputs are complete when the call returns, unless
 * fos_set_cuda_order asked for FOS_CUDA_ORDER_OUTPUTS: then they are complete in that stream's
 * order (below).
 *
 * Handles are exported once per allocation and handle and kept in a cache keyed by (allocation
 * base, CU_POINTER_ATTRIBUTE_BUFFER_ID): an allocation freed and another made at the same address
 * gets a new handle, and fosd is told to close the old mapping. fosd keeps a mapping (and so the
 * allocation's memory) until fos_cuda_release, fos_close or the end of the process: call
 * fos_cuda_release before freeing device memory that fosd has seen. */

/* A tensor of dtype and shape (rows, cols; cols <= 0: 1-D of rows) at dev_ptr in CUDA device
 * memory, as an input or as an output that fosd writes in place (size = its bytes). */
fos_tensor fos_tensor_cuda(int dtype, int64_t rows, int64_t cols, void *dev_ptr);
/* Tells fosd to close its mapping of the allocation holding dev_ptr (sent at once; fosd closes it
 * when no request in progress uses it) and forgets the exported handle. NOT_FOUND when this handle
 * has exported no allocation holding dev_ptr. A server that is gone is not an error. */
int fos_cuda_release(fos_client *c, const void *dev_ptr, fos_status *st);
/* The 16-byte UUID of fosd's GPU as its Health reports it (at connect and at each fos_health):
 * OK, or FAILED_PRECONDITION when fosd has no GPU (a cpu fosd). */
int fos_server_gpu_uuid(fos_client *c, uint8_t uuid[16], fos_status *st);
/* Whether fosd's GPU work runs under NVIDIA MPS, as its Health reports it (at connect and at each
 * fos_health): FOS_MPS_ON, FOS_MPS_OFF, FOS_MPS_NOT_APPLICABLE (a cpu fosd) or FOS_MPS_UNKNOWN (fosd
 * cannot tell, or predates the field; also for c NULL) (fos_wire_enums.h; LIBFOS_1.3). A process
 * sharing fosd's GPU without MPS pays a switch of CUDA contexts at each hand-off (README.md
 * "Sharing a GPU with trainers: MPS"). */
int fos_server_mps(fos_client *c);
/* The 16-byte UUID of the GPU holding dev_ptr (the UUID CUDA's device properties give):
 * FAILED_PRECONDITION without a CUDA driver, INVALID_ARGUMENT when dev_ptr is not device memory. */
int fos_cuda_ptr_uuid(const void *dev_ptr, uint8_t uuid[16], fos_status *st);
/* A GPU's 16-byte UUID as NVIDIA's tools write it (NVIDIA_VISIBLE_DEVICES takes it): "GPU-" and
 * 32 lowercase hex digits grouped 8-4-4-4-12, NUL-terminated in out (41 bytes). Returns out. */
char *fos_gpu_uuid_str(const uint8_t uuid[16], char out[41]);
/* Whether bytes of device memory at dev_ptr can go to this handle's fosd as a device tensor: OK
 * (the allocation is exported now, so a call finds it cached), or the status a call would fail
 * with, and also FAILED_PRECONDITION when fosd reports no GPU (a cpu fosd). For callers that fall
 * back to host memory (the Python package does). */
int fos_cuda_check(fos_client *c, const void *dev_ptr, size_t bytes, fos_status *st);
/* Event ordering instead of synchronizing: stream (a CUstream / cudaStream_t of the context of the
 * device inputs; NULL: off, the default) is where the caller's work producing device inputs runs.
 * Before each call with device inputs, libfos records an interprocess event on it and sends its
 * IPC handle; fosd's stream waits for the event before reading, and no CPU thread blocks on the
 * caller's side. */
int fos_set_cuda_stream(fos_client *c, void *stream, fos_status *st);

/* Stream order for inputs and outputs, for the calls the calling thread makes through c (as a
 * current stream is a thread's; it overrides fos_set_cuda_stream for this thread; LIBFOS_1.1).
 * flags: FOS_CUDA_ORDER_INPUTS orders the inputs as fos_set_cuda_stream does;
 * FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS also lets a call with device
 * tensors return as soon as fosd has queued its GPU work, before that work ends: fosd answers with
 * an event of its own (Response.cuda_done_event) and libfos makes stream wait for it
 * (cuStreamWaitEvent), so work queued on stream after the call sees the device outputs, and fosd's
 * reads of the device inputs come before it. The host, and other streams, must wait for stream
 * first (cudaStreamSynchronize, an event); the call's device memory must not be freed or written
 * other than by work ordered after stream's wait (PyTorch's caching allocator reuses a tensor's
 * memory in the order of the stream it was made on, which is enough when that is stream). fosd
 * answers the usual way when it cannot answer early (a cpu fosd; a result in the reply or in shared
 * memory; a PutWeight over several devices), and a call then returns with its work done, as
 * without the flag. stream NULL or flags 0: off for this thread (device tensors synchronized by the
 * caller). The stream may be CU_STREAM_LEGACY ((void *)1) for the legacy default stream of the
 * calling thread's current context (PyTorch's default stream).
 * INVALID_ARGUMENT for FOS_CUDA_ORDER_OUTPUTS without FOS_CUDA_ORDER_INPUTS or other bits;
 * FAILED_PRECONDITION without a CUDA driver (or one without cuIpcOpenEventHandle). A call answered
 * early whose stream the driver then refuses to make wait fails INTERNAL saying so; fosd's work
 * may still be running: synchronize the device before reusing the call's memory. */
#define FOS_CUDA_ORDER_INPUTS 1u
#define FOS_CUDA_ORDER_OUTPUTS 2u
int fos_set_cuda_order(fos_client *c, void *stream, unsigned flags, fos_status *st);

/* Calls that return before fosd has read them (LIBFOS_1.4): FOS_CUDA_ORDER_ASYNC together with
 * FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS (INVALID_ARGUMENT alone or with fewer; also
 * FAILED_PRECONDITION when the driver has no cuStreamWaitValue32/cuStreamWriteValue32). With it, a
 * fos_forward (with or without save_context), fos_backward, fos_put_weight (fos_put_weight_on
 * with the default placement and out NULL; not on a fosd of several GPUs, where a put runs as
 * stages) or fos_linear made by this thread whose inputs are all
 * device tensors and whose outputs are all the caller's device tensors (fos_tensor_cuda with a
 * dev_ptr) returns FOS_CODE_OK as soon as its request is handed to the handle's sender thread,
 * without waiting for fosd: libfos records the input event on stream, then makes stream wait
 * (cuStreamWaitValue32) on a word of a small device buffer of its own that fosd writes in its
 * stream order after the call's GPU work (PROTOCOL.md "Asynchronous requests"). Work queued on
 * stream after the call sees the outputs; the host and other streams wait for stream first. Each
 * output keeps the dtype, shape and size the caller gave it (fos_tensor_cuda: give the result's
 * shape; a buffer too small is an asynchronous OUT_OF_RANGE); a backward's db must be given when the
 * forward had a bias (else it runs synchronously); info of a PutWeight gets name, version, n, k and
 * weight_uses, the rest 0. Other calls (a host tensor, an output libfos would allocate, other ops,
 * a placement or out of fos_put_weight_on, a handle with reput_weights) run as with
 * FOS_CUDA_ORDER_OUTPUTS alone.
 *
 * Order: the handle's asynchronous calls reach fosd one at a time in the order they were made (from
 * every thread of the handle), so a backward finds the context of the forward made before it. Any
 * call through the handle that does not go asynchronously first waits until every asynchronous
 * call made before it is answered (as fos_sync), so it sees their effects (a weight put, a
 * context saved).
 *
 * A forward with save_context fills *ctx at once: ctx->id is an id libfos chose (random, nonzero,
 * unique to the handle; fosd saves the context under it), the recompute fields (weight,
 * weight_version as asked, override, row_scaled, m, n, k, has_bias, four_over_six) from the call;
 * resolved_override and ttl_ms stay 0 (unknown: only the reply knows them, and libfos does not
 * write into *ctx after the call returned). An asynchronous forward does not put a missing weight
 * again (reput_weights, the re-put hook) and an asynchronous backward does not recompute an
 * expired context: their NOT_FOUND is reported as below.
 *
 * Failures: an asynchronous call that fails is reported, like CUDA's asynchronous errors, by the
 * next call through the handle (any call, which then does not run and returns that code) or by
 * fos_sync, with the message "asynchronous Forward of weight 'w' (request 17) failed: <fosd's
 * message>" (Backward names its context, Linear no weight); each failure is reported once, the
 * first one first, the count of others after it in the message. Even then the stream's wait ends:
 * fosd writes the word after whatever it queued, and libfos writes it itself when the reply is a
 * failure or none comes within the handle's timeout (a lost connection, a fosd that died), so a
 * failure never leaves stream waiting for good (the outputs' contents are then undefined). After
 * such a lost connection the calls already queued fail too, without being sent. */
#define FOS_CUDA_ORDER_ASYNC 4u
/* Waits until every asynchronous call of c made before it is answered by fosd (their GPU work is
 * queued on fosd's side, in the order of stream: synchronize stream to wait for it), then returns
 * the first failure not yet reported (with the message above), else FOS_CODE_OK. Without
 * asynchronous calls: OK at once. c NULL: INVALID_ARGUMENT. fos_close waits for the handle's
 * asynchronous calls too, but a failure not yet reported is lost with the handle: fos_sync first. */
int fos_sync(fos_client *c, fos_status *st);
/* Calls of c that returned asynchronously since fos_connect (tests, the Python package: whether
 * the path was taken). */
uint64_t fos_async_count(const fos_client *c);

/* Device memory without the CUDA runtime (tests, the CLI, C programs): cuMemAlloc on device
 * ordinal device (its primary context; FAILED_PRECONDITION without a driver or such a device),
 * cuMemFree, and a copy between any two of host and device memory (cuMemcpy: complete on return). */
int fos_cuda_malloc(int device, size_t bytes, void **dev_ptr, fos_status *st);
int fos_cuda_free(void *dev_ptr, fos_status *st);
int fos_cuda_memcpy(void *dst, const void *src, size_t bytes, fos_status *st);

/* ---- connecting with options: tokens, TLS, re-putting weights -------------------------------- *
 *
 * fos_connect(url, token, timeout_ms, ...) is fos_connect_with(url, &{token, timeout_ms}, ...).
 * Zero (NULL) fields take their defaults.
 *
 * TLS: a tls+tcp://host:port URL connects with TLS 1.2; the server's certificate must be signed by
 * a CA of ca_file (default: the system's /etc/ssl/certs/ca-certificates.crt) and name server_name
 * (default: the URL's host). A certificate that is not accepted fails the connect with UNAVAILABLE
 * and a message saying so.
 *
 * Tokens: a fosd with a tokens file answers every request but Health UNAUTHENTICATED unless it
 * carries a tenant's secret; a wrong token fails the connect itself (UNAUTHENTICATED).
 *
 * Re-put (reput_weights = 1): the handle keeps a private copy of every weight put through it
 * (fos_put_weight) until it is dropped through it (fos_drop_weight) or the handle is closed. When a
 * forward (or the recompute of fos_backward) gets NOT_FOUND for such a weight (fosd restarted, or
 * evicted it), libfos puts the copy again, same name, version and config, and retries once. This
 * costs the memory of the copies. fos_reput_count says how often it happened. */
typedef struct fos_connect_opts {
	const char *token;       /* the tenant's secret sent with every request (NULL: none) */
	int timeout_ms;          /* connect and every later call (<= 0: 30000) */
	const char *ca_file;     /* tls+tcp: PEM file of the CAs to trust (NULL: the system's) */
	const char *server_name; /* tls+tcp: the name the certificate must carry (NULL: the URL's host) */
	int reput_weights;       /* 1: put a weight of this handle again when fosd answers NOT_FOUND */
} fos_connect_opts;

int fos_connect_with(const char *url, const fos_connect_opts *o, fos_client **out, fos_status *st);
/* Weights the handle has put again after a NOT_FOUND (reput_weights, or the re-put hook). */
uint64_t fos_reput_count(const fos_client *c);

/* ---- losing fosd: restarts, lost connections, fork (LIBFOS_1.2) ------------------------------ *
 *
 * The handle redials by itself when its connection drops (fosd restarted, or killed). A call whose
 * request was out when the connection was lost (over the socket or through the request channel,
 * which stops with its connection) is sent again, with its id, once the handle has a connection,
 * within the call's timeout; fosd's duplicate detection never runs it twice (a fosd that already
 * ran it answers ABORTED; a restarted one runs it). A call made while there is no connection waits
 * for one up to its timeout and then fails UNAVAILABLE ("no connection ... within N ms"), never
 * later than the timeout. Shared-memory regions and the request channel are registered again on
 * the new connection (the first call naming a region does it; the channel reopens after the first
 * call that succeeds). Calls that only release what fosd holds for the connection (region
 * unregistering, fos_release, device mappings) do not wait for one: fosd let go of those with the
 * connection. A restarted fosd has lost its weight cache and saved contexts: a forward of a
 * weight it lacks answers NOT_FOUND unless the weight is put again, by reput_weights' copies or by
 * the re-put hook below; fos_backward given the forward's X recomputes a lost context, putting its
 * weight again the same way.
 *
 * Re-put hook: when fosd answers NOT_FOUND for the weight of a forward (or of the recompute in
 * fos_backward) and the handle's copies (reput_weights) do not have it, libfos calls
 * fn(c, name, version, user) on the calling thread; version is the one the call needs (0: any).
 * fn puts the weight again through c (fos_put_weight or fos_put_weight_on, same name, and that
 * version when it is not 0) and returns FOS_CODE_OK (or the put's ALREADY_EXISTS: another thread
 * put it first), and the call is retried once; any other return leaves the call's NOT_FOUND. For callers that hold their weights (the Python package
 * keeps a reference to each tensor it put) and so need no copy in libfos. fn NULL: none (the
 * default). Set it before calls start.
 *
 * fork: nng (libfos's transport) cannot be used in a process forked from one where it ran. In such
 * a child, a handle inherited from the parent refuses every call with FAILED_PRECONDITION naming
 * the fork (nothing is sent; the parent's connection, regions and channel are untouched), fos_close
 * of it frees the child's copy without a word to fosd, and fos_connect fails FAILED_PRECONDITION
 * (connect in a process that did not inherit libfos's state: exec, a spawned process, or load
 * another copy of libfos.so). fos_after_fork says whether this is such a process. */
typedef int (*fos_reput_hook)(fos_client *c, const char *name, uint64_t version, void *user);
void fos_set_reput_hook(fos_client *c, fos_reput_hook fn, void *user);
/* How long a call made while the handle has no connection waits for one before it fails
 * UNAVAILABLE (milliseconds; 0, the default: the call's whole timeout). A load tester or a health
 * probe that wants to see an outage sooner than its timeout sets it; a request already out when the
 * connection was lost waits for the next connection this long too. */
void fos_set_reconnect_wait(fos_client *c, int wait_ms);
/* 1 in a process forked (without exec) from one where this libfos had connected, else 0. */
int fos_after_fork(void);


/* ---- several devices (PROTOCOL.md "Devices") -------------------------------------------------- *
 *
 * A fosd started with `--devices` serves several devices (GPUs, or cpu stand-ins "cpu:0",
 * "cpu:1", ...), each with its own executor, weight cache and saved contexts. Devices are named by
 * their index 0..n-1 in fos_health_devices' list (not by CUDA ordinal). A weight is put on one
 * device (by default the least loaded by cached bytes; a re-put stays where its name was) or on
 * several (fos_put_weight_on); a forward runs on a device holding its weight (the one of its
 * device tensors' GPU, else the least busy), a backward where its context was saved. The calls
 * above work unchanged against such a fosd, with the default placement; fos_stats_info and
 * fos_weight_info carry the sums and one copy's bytes. A fosd that predates devices is one
 * device 0. */

#define FOS_DEVICES_MAX 64 /* devices one weight entry (fos_weight_entry) can list */

/* One device fosd serves. */
typedef struct fos_device_info {
	uint32_t index;       /* its index: what fos_placement, fos_weight_entry and fos_last_device name */
	char backend[16];     /* "cpu" or "cuda" */
	char device[128];     /* its name: "cuda:1 (NVIDIA H200 (sm_90))" (CUDA ordinal 1), "cpu:2 (...)" */
	int has_gpu_uuid;     /* 1: gpu_uuid holds its GPU's UUID (cuda) */
	uint8_t gpu_uuid[16];
} fos_device_info;

/* One Health request: the devices fosd serves, in index order. out[0..cap-1] gets the first cap of
 * them and *n their number (out may be NULL with cap 0 to ask for the number). OK, or OUT_OF_RANGE
 * when cap < *n (the first cap are filled). */
int fos_health_devices(fos_client *c, fos_device_info *out, size_t cap, size_t *n, fos_status *st);

/* Where fos_put_weight_on puts a weight: devices (n_devices indices, each once; each must be <
 * the device count, else fosd answers INVALID_ARGUMENT naming it), or replicas (a count of
 * devices, at most the device count: fosd takes those of the name's current entry first, then the
 * GPU of a device tensor w, then the least loaded by cached bytes, ties to the lower index); not
 * both, unless replicas equals n_devices. All zero (or pl NULL): as many as the name's current
 * entry has (so the same devices), else one. A device the weight was on and is not chosen now
 * drops its copy. Each copy counts against the tenant's cache quota and its device's budget. */
typedef struct fos_placement {
	const uint32_t *devices;
	size_t n_devices;  /* at most FOS_DEVICES_MAX */
	uint32_t replicas; /* 0: by devices, or the default */
} fos_placement;

/* A weight and the devices holding a copy (info's bytes and parts are one copy's). */
typedef struct fos_weight_entry {
	fos_weight_info info;
	size_t n_devices;                  /* 0 only from a fosd that predates devices */
	uint32_t devices[FOS_DEVICES_MAX]; /* ascending */
} fos_weight_entry;

/* fos_put_weight with a placement (pl NULL: the default); out (may be NULL) gets the entry and
 * where it went. Client-side INVALID_ARGUMENT: replicas other than n_devices with devices, a device listed twice,
 * n_devices above FOS_DEVICES_MAX, devices NULL with n_devices > 0. With reput_weights the
 * placement is kept with the copy and used again. */
int fos_put_weight_on(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
		      const fos_weight_config *cfg, const fos_placement *pl, fos_weight_entry *out, fos_status *st);
/* fos_list_weights and fos_list_weights_page with each weight's devices: one entry per name,
 * whatever the number of copies. *list is malloc'd (free() it). */
int fos_list_weight_entries(fos_client *c, fos_weight_entry **list, size_t *count, fos_status *st);
int fos_list_weight_entries_page(fos_client *c, const char *page_token, uint32_t page_size,
				 fos_weight_entry **list, size_t *count, char **next_token, fos_status *st);
/* The device (index) that ran the last call of this handle answered OK (with several threads
 * calling at once: the last such reply to arrive); -1 before any. fosd reports device 0 for
 * requests it answers without a device (health, stats, listings), and a fosd that predates
 * devices always 0. */
int fos_last_device(const fos_client *c);

#ifdef __cplusplus
}
#endif
#endif
