/* libfos_internal.h: what libfos's files share: the handle, and one request/reply round trip with
 * input tensors placed into the message and output tensors checked and copied out. */
#ifndef FOS_LIBFOS_INTERNAL_H
#define FOS_LIBFOS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "fos.h"
#include "fos_wire.h"

struct fos_client {
	nng_socket sock;
	nng_dialer dialer;
	uint64_t client_id;
	atomic_uint_fast64_t next_id;
	atomic_int timeout_ms;
	/* how long a call waits for a connection when there is none (0: its whole timeout) */
	atomic_int reconnect_wait_ms;
	uint64_t max_message;
	char *token;
	char *url;
	/* shared-memory regions registered on this handle (libfos_shm.c) */
	pthread_mutex_t shm_mu;
	int shm_mu_ok;
	struct fos_region *regions;
	/* copies of weights to put again after a NOT_FOUND (libfos_trust.c; NULL: off) */
	struct fosc_reput *reput;
	/* nng contexts with their aio, kept between requests (opening and freeing them per request
	 * costs more than a small request's round trip) */
	pthread_mutex_t io_mu;
	int io_mu_ok;
	struct fosc_io *io_free;
	/* microseconds a caller polls for its reply before it sleeps (fos_set_spin, $FOS_SPIN_US) */
	atomic_int spin_us;
	/* the request channel in use (libfos_chan.c; NULL: none) and the closed ones, kept until
	 * fos_close because a caller may still hold them */
	struct fosc_chan *_Atomic chan;
	struct fosc_chan *chan_old;
	/* the channel the caller asked for (fos_channel_open; 0 bytes: none): opened again after fosd
	 * stopped serving it (a reconnect, a restart), at most once a second */
	atomic_size_t chan_want_bytes;
	atomic_int chan_want_spin;
	atomic_int chan_reopening;
	atomic_uint_fast64_t chan_tried_ms;
	/* device tensors (libfos_cuda.c), under cuda_mu: the allocations exported through this handle,
	 * fosd's GPU UUID from its Health (srv_gpu_len 16, else 0: none; of device 0 when it serves
	 * several) and those of all its GPUs (srv_gpus, n_srv_gpus of them), the number of devices it
	 * serves (srv_devices; 0: a fosd that predates devices), its MPS state (srv_mps,
	 * FOS_MPS_*), the stream of
	 * fos_set_cuda_stream (cuda_stream_on) and its context, and pooled interprocess events */
	pthread_mutex_t cuda_mu;
	int cuda_mu_ok;
	struct fosc_dev *devs;
	uint8_t srv_gpu[16];
	int srv_gpu_len;
	uint8_t srv_gpus[16][16];
	int n_srv_gpus;
	size_t srv_devices;
	int srv_mps;
	int cuda_stream_on;
	void *cuda_stream, *cuda_stream_ctx;
	struct fosc_devev *dev_events;
	struct fosc_doneev *done_events; /* fosd's done events opened (libfos_cuda_events.c) */
	struct fosc_order *orders;       /* fos_set_cuda_order's, by thread */
	atomic_uint_fast64_t done_waits; /* early replies the stream was made to wait for */
	atomic_uint_fast64_t dev_exports, dev_closes;
	/* Response.device of the last OK reply (fos_last_device; -1: none yet) */
	atomic_int last_device;
	/* the connection (libfos_conn.c): nng's pipes now (0: none: fosd gone, or being redialled)
	 * and the connections lost so far (pipe events), the fork generation the handle was made in
	 * (an older one: inherited across fork, never to touch nng), the re-put hook */
	atomic_int pipes;
	atomic_uint_fast64_t losses;
	unsigned fork_gen;
	fos_reput_hook reput_hook;
	void *reput_user;
	atomic_uint_fast64_t hook_reputs; /* weights the hook put again (in fos_reput_count) */
	/* asynchronous calls (libfos_async.c; NULL until the first) and how many returned so */
	struct fosc_async *_Atomic async;
	atomic_uint_fast64_t async_calls;
};

/* Sets st (if non-NULL) and returns code. */
int fosc_status(fos_status *st, int code, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* An input tensor of a request: t is filled from in (shape, dtype, placement), in->data copied. */
typedef struct fosc_in {
	Fos__Tensor *t;
	const fos_tensor *in;
	const char *what;
} fosc_in;

/* A finished call: the decoded Response and the message whose data section its tensors name. */
typedef struct fosc_reply {
	fos_client *c;
	nng_msg *msg;
	Fos__Response *resp;
	const uint8_t *data;
	size_t dlen;
} fosc_reply;

/* Checks the inputs (dtype known, 1-2 dims, data non-NULL), places them, sends rq and waits for
 * the reply (within the handle's timeout). Returns OK with *out filled (free with
 * fosc_reply_free), or the status code of the reply or of the failure. */
int fosc_call(fos_client *c, Fos__Request *rq, fosc_in *ins, int nin, fosc_reply *out, fos_status *st);
void fosc_reply_free(fosc_reply *r);
/* A Stats round trip (libfos_ops.c): its result (r to free with fosc_reply_free), or NULL with
 * *code the failure (DATA_LOSS when the reply has no stats result; r already freed). */
const Fos__StatsResult *fosc_stats_call(fos_client *c, fosc_reply *r, int *code, fos_status *st);

/* Copies a reply tensor into an output: checks it against the data section and the expected dtype
 * and shape (exp_d1 <= 0: 1-D of exp_d0; exp_d0 < 0: any shape), then allocates or checks the
 * caller's buffer. t NULL gives DATA_LOSS. */
int fosc_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
	     fos_tensor *out, fos_status *st);
/* DATA_LOSS "the reply's WHAT has an unexpected dtype or shape" unless v is of dtype and (exp_d0 >= 0)
 * of the shape fosc_out expects; else OK. */
int fosc_out_expect(const fosw_tensor *v, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
		    fos_status *st);
/* Sets out's dtype, shape and size to v's (its data already there); returns OK. */
int fosc_out_describe(fos_tensor *out, const fosw_tensor *v);
/* A result whose bytes lie outside the reply (in a region of ours: t->shm; in our device memory:
 * t->cuda): its dtype, shape and length checked as an inline result's (that one reference and
 * the offset left out) into *v, then as fosc_out_expect does. bad, when not NULL, says why the
 * reference itself is malformed. DATA_LOSS or OK. */
int fosc_out_ref_check(const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
		       const char *bad, fosw_tensor *v, fos_status *st);
/* OUT_OF_RANGE when the buffer of output what is smaller than v, else fosc_out_describe. */
int fosc_out_fits(fos_tensor *out, const fosw_tensor *v, const char *what, fos_status *st);
/* Marks an output absent (ndim 0, size 0). */
void fosc_out_none(fos_tensor *out);

/* ---- shared-memory regions (libfos_shm.c) ---- */

/* If in->data lies in a region of c, fills t (dtype, shape into shape_store, length, offset 0)
 * with a reference in ref and returns 1; else 0 (the tensor goes inline). */
int fosc_shm_in(fos_client *c, const fos_tensor *in, Fos__Tensor *t, int64_t *shape_store, Fos__ShmRef *ref);
/* Results asked into regions: for each outs[i] whose data lies in a region of c, a ShmOutput
 * named names[i] is added to rq (storage in st, which must outlive the call). */
typedef struct fosc_dev_ref {
	uint8_t handle[64]; /* cudaIpcMemHandle_t of the allocation's base */
	uint8_t uuid[16];   /* its GPU */
	uint64_t offset;    /* of the tensor from the base */
	uint64_t avail;     /* bytes of the allocation from the tensor on */
} fosc_dev_ref;
typedef struct fosc_shm_outs {
	Fos__ShmOutput o[FOSW_MAX_TENSORS];
	Fos__ShmRef ref[FOSW_MAX_TENSORS];
	Fos__ShmOutput *p[FOSW_MAX_TENSORS];
	Fos__CudaRef cref[FOSW_MAX_TENSORS]; /* device outputs (fosc_cuda_outputs) */
	fosc_dev_ref dev[FOSW_MAX_TENSORS];
} fosc_shm_outs;
void fosc_shm_outputs(fos_client *c, Fos__Request *rq, fosc_shm_outs *st, const char *const *names,
		      fos_tensor *const *outs, int n);
/* A reply tensor that names a region (t->shm): checks it is where out->data points and fits, and
 * describes out (no copy). */
int fosc_shm_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0,
		 int64_t exp_d1, fos_tensor *out, fos_status *st);
/* Registers every region of c again (after a reconnect). Returns OK or the first failure. */
int fosc_shm_reregister(fos_client *c, fos_status *st);
/* Frees the bookkeeping of regions left at fos_close. */
void fosc_shm_close(fos_client *c);
/* RegisterRegion (channel: as a request channel, *channel_bytes its area size) / UnregisterRegion. */
int fosc_region_register(fos_client *c, const char *name, const char *key, uint64_t size, int channel,
			 uint32_t spin_us, uint64_t *channel_bytes, fos_status *st);
int fosc_region_unregister(fos_client *c, const char *name, fos_status *st);

/* ---- device tensors (libfos_cuda.c) ---- */

/* An input with in->mem == FOS_MEM_CUDA: exports (or finds) the handle of its allocation into r
 * and fills t (dtype, shape into shape_store, length, offset 0, t->cuda = cref naming r). Returns
 * OK or the status (no driver, not device memory, not exportable, another GPU than fosd's). */
int fosc_cuda_in(fos_client *c, const fos_tensor *in, const char *what, Fos__Tensor *t, int64_t *shape_store,
		 Fos__CudaRef *cref, fosc_dev_ref *r, fos_status *st);
/* Results asked into device memory: for each outs[i] with mem FOS_MEM_CUDA, a ShmOutput named
 * names[i] with cuda set is added to rq (after fosc_shm_outputs' entries; storage in so). */
int fosc_cuda_outputs(fos_client *c, Fos__Request *rq, fosc_shm_outs *so, const char *const *names,
		      fos_tensor *const *outs, int n, fos_status *st);
/* A reply tensor written into device memory (t->cuda): checks it names out's buffer and fits,
 * and describes out (no copy). */
int fosc_cuda_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0,
		  int64_t exp_d1, fos_tensor *out, fos_status *st);
/* fosd's GPU UUIDs from a Health reply: its GPU (device 0's) and every device's (none: a cpu fosd). */
void fosc_cuda_health(fos_client *c, const Fos__HealthResult *hr);
/* libfos_cuda_events.c. With fos_set_cuda_order on: records a pooled interprocess event on the
 * stream and sets rq->cuda_wait_event to its handle (and rq->cuda_done_event with
 * FOS_CUDA_ORDER_OUTPUTS); *ev (NULL when off) goes back with fosc_cuda_event_done once the reply
 * came or the call failed. */
struct fosc_devev;
int fosc_cuda_wait_event(fos_client *c, Fos__Request *rq, struct fosc_devev **ev, fos_status *st);
void fosc_cuda_event_done(fos_client *c, struct fosc_devev *ev);
/* An OK reply with Response.cuda_done_event h: the stream of ev's call waits for fosd's event
 * (DATA_LOSS when the call did not ask for one or h is not a handle). */
int fosc_cuda_done_wait(fos_client *c, const struct fosc_devev *ev, const ProtobufCBinaryData *h, fos_status *st);
/* fosc_cuda_close: destroys the pooled and the opened events. */
void fosc_cuda_events_close(fos_client *c);
/* fos_close: frees the exported-handle cache and the events. */
void fosc_cuda_close(fos_client *c);

/* CUDA driver API values (cuda.h), stable parts of the driver ABI (checked in libfos_cuda.c) */
enum {
	FOSC_CU_PTR_CONTEXT = 1,
	FOSC_CU_PTR_MEMORY_TYPE = 2,
	FOSC_CU_PTR_BUFFER_ID = 7,
	FOSC_CU_PTR_IS_MANAGED = 8,
	FOSC_CU_PTR_DEVICE_ORDINAL = 9,
	FOSC_CU_PTR_IS_LEGACY_IPC = 10,
	FOSC_CU_PTR_RANGE_START = 11,
	FOSC_CU_PTR_RANGE_SIZE = 12,
	FOSC_CU_MEMORYTYPE_DEVICE = 2,
	FOSC_CU_EVENT_DISABLE_TIMING = 2,
	FOSC_CU_EVENT_INTERPROCESS = 4,
	FOSC_CU_IPC_HANDLE_SIZE = 64,
};
/* A CUipcEventHandle, passed by value as the driver takes it. */
typedef struct fosc_cu_ipc_event_handle {
	uint8_t reserved[FOSC_CU_IPC_HANDLE_SIZE];
} fosc_cu_ipc_event_handle;

/* The driver entry points libfos uses (CUDA driver API signatures with the handles as plain
 * types). Tests replace the driver with fosc_cuda_override (NULL: load the real one again, from
 * $FOS_CUDA_DRIVER or libcuda.so.1, at the next use). */
typedef struct fosc_cuda_api {
	int (*Init)(unsigned flags);
	int (*GetErrorName)(int rc, const char **name);
	int (*DeviceGet)(int *dev, int ordinal);
	int (*DeviceGetUuid)(uint8_t uuid[16], int dev);
	int (*PointerGetAttributes)(unsigned n, int *attrs, void **data, uint64_t ptr);
	int (*MemGetAddressRange)(uint64_t *base, size_t *size, uint64_t ptr);
	int (*IpcGetMemHandle)(uint8_t handle[64], uint64_t ptr);
	int (*CtxPushCurrent)(void *ctx);
	int (*CtxPopCurrent)(void **ctx);
	int (*CtxSynchronize)(void);
	int (*DevicePrimaryCtxRetain)(void **ctx, int dev);
	int (*DevicePrimaryCtxRelease)(int dev);
	int (*MemAlloc)(uint64_t *ptr, size_t bytes);
	int (*MemFree)(uint64_t ptr);
	int (*Memcpy)(uint64_t dst, uint64_t src, size_t bytes);
	int (*StreamGetCtx)(void *stream, void **ctx);
	int (*EventCreate)(void **ev, unsigned flags);
	int (*EventRecord)(void *ev, void *stream);
	int (*EventDestroy)(void *ev);
	int (*IpcGetEventHandle)(uint8_t handle[64], void *ev);
	int (*IpcOpenEventHandle)(void **ev, fosc_cu_ipc_event_handle handle); /* NULL: no early replies */
	int (*StreamWaitEvent)(void *stream, void *ev, unsigned flags);
	/* FOS_CUDA_ORDER_ASYNC (NULL: refused): the done words (libfos_async.c) */
	int (*StreamWaitValue32)(void *stream, uint64_t addr, uint32_t value, unsigned flags);
	int (*StreamWriteValue32)(void *stream, uint64_t addr, uint32_t value, unsigned flags);
	int (*StreamCreate)(void **stream, unsigned flags);
	int (*StreamDestroy)(void *stream);
	int (*MemsetD32)(uint64_t dst, uint32_t value, size_t n);
} fosc_cuda_api;
/* cuStreamWaitValue32's CU_STREAM_WAIT_VALUE_GEQ, cuStreamCreate's CU_STREAM_NON_BLOCKING */
#define FOSC_CU_WAIT_VALUE_GEQ 0u
#define FOSC_CU_STREAM_NON_BLOCKING 1u
/* The driver, or NULL with st FAILED_PRECONDITION saying why there is none (libfos_cuda.c). */
const fosc_cuda_api *fosc_cuda_drv(fos_status *st);
/* "CUDA_ERROR_X" for rc (a buffer of the calling thread). */
const char *fosc_cuda_err(const fosc_cuda_api *a, int rc);
void fosc_cuda_override(const fosc_cuda_api *api);
/* Tests: handles exported and CloseDeviceMemory requests sent through c, allocations cached now. */
void fosc_cuda_counts(fos_client *c, uint64_t *exports, uint64_t *closes, size_t *cached);

/* fosc_call_once and fosc_chan_exchange: the connection was lost while the request was out (its
 * reply will not come; fosd may have run it): fosc_call sends it again, with its id, once the
 * handle has reconnected (fosd's duplicate detection never runs it twice). */
#define FOSC_LOST (-3)
/* fosc_exchange: the socket's wait for the reply ended NNG_ETIMEDOUT long before the call's
 * timeout (nng 1.5.2's REQ context does this, rarely, after contexts with requests in flight were
 * closed): the request is sent again with its id, which fosd's duplicate detection answers with the
 * first one's reply (or ABORTED if it already ran: never a second run). */
#define FOSC_RETRY_SAME_ID (-2)
/* One request message out and its reply in (libfos_client.c): through the handle's request channel
 * unless nochan (or it is busy or too small), else the socket, within timeout ms; takes msg.
 * same_id: this is a copy sent again with its id (no early-timeout retry). Returns OK with *reply
 * (*via_chan 1 when the channel carried it), or a code: a status, FOSC_LOST, FOSC_RETRY_SAME_ID. */
int fosc_exchange(fos_client *c, nng_msg *msg, int timeout, int nochan, int same_id, nng_msg **reply,
		  int *via_chan, fos_status *st);

/* ---- the connection (libfos_conn.c) ---- */

/* At connect, after the socket is opened: counts its pipes (fos_client.pipes, .losses) and notes
 * the process's fork generation. Returns an nng error. */
int fosc_conn_watch(fos_client *c);
/* Whether c has a connection now. */
int fosc_connected(const fos_client *c);
/* Whether c was made before this process forked (a child's copy: nng must not be touched). */
int fosc_inherited(const fos_client *c);
/* FAILED_PRECONDITION naming the fork, for a call on an inherited handle. */
int fosc_inherited_status(const fos_client *c, fos_status *st);
/* fos_connect in a process forked after libfos used nng: FAILED_PRECONDITION, else OK. */
int fosc_fork_check(fos_status *st);
/* fosc_call for a request that only releases something fosd holds for this connection (a region,
 * a context, a device mapping): with no connection now it is not waited for (UNAVAILABLE at once:
 * fosd let go of the connection's, or is gone). */
int fosc_call_cleanup(fos_client *c, Fos__Request *rq, fosc_reply *out, fos_status *st);
/* After a NOT_FOUND for weight name (a forward, a recompute; version: the one needed, 0 any): puts
 * it again from the handle's copies (reput_weights), else through the re-put hook. OK when it is
 * there again. */
int fosc_reput_any(fos_client *c, const char *name, uint64_t version);

/* libfos_chan.c: one exchange through the handle's request channel. Returns 0 when the channel
 * was not used (none, busy, closed, or the request does not fit: use the socket), else 1 with
 * *reply (a new message holding the reply's bytes) or *code (and st) set. */
int fosc_chan_exchange(fos_client *c, const nng_msg *req, int timeout_ms, nng_msg **reply, int *code,
		       fos_status *st);
/* fos_close of an inherited handle: unmaps and frees the channels without a word to fosd. */
void fosc_chan_abandon(fos_client *c);
/* fos_close: closes and frees the channels. */
void fosc_chan_free_all(fos_client *c);
/* After a call that succeeded: opens the wanted channel again if fosd no longer serves it. */
void fosc_chan_revive(fos_client *c);

/* ---- trust and recovery (libfos_trust.c) ---- */

/* fos_connect with options (never NULL here). */
int fosc_connect(const char *url, const fos_connect_opts *o, fos_client **out, fos_status *st);
/* Creates and starts c's dialer for url (TLS for tls+tcp://) and the re-put registry if asked. */
int fosc_dial(fos_client *c, const char *url, const fos_connect_opts *o, fos_status *st);
/* libfos_tls_why.c: after a TLS connect to host:port was refused, why (a handshake of its own
 * with the CA file and server name, mbedTLS's verify flags in words). 0 with why, or -1 when it
 * finds nothing to say. */
int fosc_tls_why(const char *host, const char *port, const char *ca_file, const char *server_name, int timeout_ms,
		 char *why, size_t whysz);
/* The re-put registry: remember a weight put through c, forget a dropped one, put one again after
 * a NOT_FOUND (returns OK when it is there again; NOT_FOUND when c does not hold it). */
/* A checked copy of a fos_placement (libfos_weights.c): n devices, or replicas, or all 0 (the
 * default). */
typedef struct fosc_place {
	uint32_t devices[FOS_DEVICES_MAX];
	size_t n;
	uint32_t replicas;
} fosc_place;
void fosc_reput_remember(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
			 const fos_weight_config *cfg, const fosc_place *pl);
void fosc_reput_forget(fos_client *c, const char *name);
int fosc_reput_restore(fos_client *c, const char *name);
void fosc_reput_free(fos_client *c);
/* PutWeight without remembering it (libfos_weights.c); pl NULL: the default placement. */
int fosc_put_weight_raw(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
			const fos_weight_config *cfg, const fosc_place *pl, fos_status *st);

/* ---- one op's call (libfos_ops.c), shared by the operations' files ---------------------------- */

/* Outputs that libfos may allocate: on failure, what it allocated is freed again. */
typedef struct outset {
	fos_tensor *t[4];
	int allocated[4];
	int n;
} outset;

/* The weight of a Forward and the version it needs (0: any), put again on a NOT_FOUND. */
typedef struct reput_of {
	const char *name;
	uint64_t version;
} reput_of;

/* What an asynchronous call's failure names: "Forward of weight 'w'", "Backward of context ...". */
typedef struct fosc_async_desc {
	const char *op;
	const char *weight;  /* NULL: none */
	uint64_t context;    /* 0: none */
} fosc_async_desc;

/* One op's call: its inputs, the outputs fosd may write straight into a shared-memory region
 * (names[i] for outs[i]; NULL entries are not asked for), the result case it answers with, and
 * for a Forward the weight libfos puts again (then retries once) when fosd answers NOT_FOUND. */
typedef struct opcall {
	fosc_in *ins;
	int nin;
	const char *const *names;
	fos_tensor *const *outs;
	int nout;
	Fos__Response__ResultCase want;
	const char *what;
	const reput_of *reput;
	/* non-NULL: the call goes asynchronously (fosc_async_wanted said so; fosc_async_call) */
	const fosc_async_desc *async;
} opcall;

/* What one op's call leaves: the reply (to free with fosc_reply_free when the result came), the
 * status code, and the outputs, so that a failure copying them out frees what libfos allocated. */
typedef struct opreply {
	fosc_reply r;
	int code;
	outset os;
	int async; /* the call was queued asynchronously (no reply: code OK, or why it was not queued) */
} opreply;

/* call_result for oc, after asking for its outputs in regions or device memory; fills rp. Returns
 * the result (the oneof member), or NULL with rp->code the failure. */
const void *fosc_op_call(fos_client *c, Fos__Request *rq, const opcall *oc, opreply *rp, fos_status *st);
/* One Forward request (libfos_ops.c); y NULL with skip_output. put: a PutWeight carried by the
 * forward (ForwardRequest.put, filled by fosc_put_request; its w a Fos__Tensor filled from w), or
 * NULL. */
int fosc_forward_call(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		      const fos_forward_opts *o, int skip_output, fos_tensor *y, fos_context *ctx,
		      Fos__PutWeightRequest *put, const fos_tensor *w, fos_status *st);
/* A PutWeightRequest of name, version and cfg's options (NULL: defaults) in pw, its config in wc
 * and uses in uses, W to come into tw (libfos_weights.c); no placement. INVALID_ARGUMENT for uses
 * bits other than FOS_WEIGHT_USE_*. */
int fosc_put_request(Fos__PutWeightRequest *pw, Fos__WeightConfig *wc, Fos__WeightUse uses[4], Fos__Tensor *tw,
		     const char *name, uint64_t version, const fos_weight_config *cfg, fos_status *st);
/* ---- asynchronous calls (libfos_async.c) ---- */

/* Whether a call with these inputs and outputs (NULL entries: none) goes asynchronously: the
 * calling thread's fos_set_cuda_order has FOS_CUDA_ORDER_ASYNC, every input is a device tensor,
 * every output the caller's device tensor. */
int fosc_async_wanted(fos_client *c, const fosc_in *ins, int nin, fos_tensor *const *outs, int nout);
/* Queues oc's request (rq: its op filled) for the sender thread after ordering the thread's stream
 * (input event, done word); OK once queued, or the failure (also an earlier call's, unreported). */
int fosc_async_call(fos_client *c, Fos__Request *rq, const opcall *oc, fos_status *st);
/* A context id for an asynchronous forward: random, nonzero, distinct within the handle. */
uint64_t fosc_async_context_id(fos_client *c);
/* Waits until c's asynchronous calls are answered; the first unreported failure, else OK. A no-op
 * on the sender thread. */
int fosc_async_drain(fos_client *c, fos_status *st);
/* on: the calling thread's requests are libfos's own (closing a stale mapping): fosc_call waits for
 * the asynchronous calls but leaves their failures for the caller's calls. */
void fosc_async_quiet(int on);
/* c's asynchronous calls queued or being sent now (tests). */
int fosc_async_inflight(fos_client *c);
/* The first unreported failure of c's asynchronous calls answered so far, without waiting; else OK. */
int fosc_async_check(fos_client *c, fos_status *st);
/* fos_close: drains (unless inherited across fork), stops the sender, frees the word buffers. */
void fosc_async_close(fos_client *c, int inherited);
/* libfos_cuda_events.c: 1 with the stream and its context when the calling thread's order has
 * FOS_CUDA_ORDER_ASYNC. */
int fosc_cuda_order_async(fos_client *c, void **stream, void **ctx);

/* snprintf of src (NULL: "") into dst of n bytes */
void fosc_copy_str(char *dst, size_t n, const char *src);

#endif
