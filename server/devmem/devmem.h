/* devmem.h: fosd's device data plane: tensors that stay in a client's GPU memory (the same-GPU
 * zero-copy path; PROTOCOL.md "Device tensors").
 *
 * A client on the same host and GPU names memory of its own GPU allocation in a tensor (CudaRef:
 * the allocation's CUDA IPC memory handle, an offset from its base, the GPU's UUID); fosd maps the
 * allocation once (backend ipc_open) and reads inputs and writes outputs there in place.
 *
 *  - Ownership: a mapping belongs to the connection (nng pipe) and tenant whose request opened it,
 *    keyed by the handle's 64 bytes; only requests of that pipe and tenant use it. Another pipe or
 *    tenant presenting the same handle gets a mapping of its own; the allocation itself is opened
 *    once in the process and shared by all of them (the driver refuses a second open).
 *    CloseDeviceMemory, the pipe going away, or the per-pipe limit (the least recently used idle
 *    mapping goes first) close it.
 *  - Checks: only a cuda fosd (FAILED_PRECONDITION otherwise), only over a connection with peer
 *    credentials (ipc://, the same-host check of shm regions), only for the GPU fosd runs on
 *    (UUID), and offset + length must lie inside the allocation as the driver sizes it.
 *  - Lifetime: requests hold a reference on each mapping they use; a closed mapping is unmapped
 *    when its last request is answered (after its lane synced, so no GPU work still reads it).
 *  - Events: Request.cuda_wait_event names a CUDA IPC event the client recorded after the work
 *    that produced its inputs; it is opened once per pipe and tenant like a mapping, and the
 *    request's lane waits for it on its stream before the op runs (a CPU wait only for inputs that
 *    validation reads, which are copied out first).
 *  - Alignment: a tensor whose address is not FOSD_DEV_ALIGN-aligned is staged: copied once on the
 *    GPU into (or out of) a buffer of fosd's, because the kernels and GEMM plans assume aligned
 *    operands. Stats count staged tensors. */
#ifndef FOSD_DEVMEM_H
#define FOSD_DEVMEM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "fos.pb-c.h"
#include "fos_wire.h"
#include "pipeset.h"

#define FOSD_DEV_HANDLE_BYTES 64
#define FOSD_DEV_UUID_BYTES 16
#define FOSD_DEV_MAX_PER_PIPE 256 /* mappings of one pipe and tenant; beyond, idle ones close (LRU) */
#define FOSD_DEV_MAX_EVENTS 16    /* events of one pipe and tenant; likewise */
#define FOSD_DEV_MAX_REFS 16      /* mappings one request may use */
#define FOSD_DEV_ALIGN 256        /* addresses used in place */

typedef struct fosd_devmap fosd_devmap;

struct fosd_devopen;

typedef struct fosd_devmaps {
	pthread_mutex_t mu;
	fosd_devmap *head;
	pthread_mutex_t open_mu;     /* guards opens and the backend's ipc_open / ipc_close */
	struct fosd_devopen *opens;  /* each allocation opened once in the process (devmaps.c) */
	fos_backend *be;           /* the server's backend; NULL unless it offers ipc_open */
	fosd_pipeset live;         /* connections open now (mappings open only for those) */
	uint64_t count;            /* memory mappings of connections (and tenants) open */
	uint64_t bytes;            /* the sizes of the allocations they open, each counted once */
	uint64_t events;           /* events open */
	uint64_t tensors, staged;  /* device tensors used since start; of them, staged */
	uint64_t tick;
} fosd_devmaps;

/* A request's use of device memory: the mappings it references and where its device outputs go.
 * Lives in the request's shm state (shm.h); begun before validation, ended after the reply. */
typedef struct fosd_dev_target {
	fosd_devmap *m; /* NULL: this output is not a device output */
	uint64_t off, cap;
} fosd_dev_target;

typedef struct fosd_dev_req {
	fosd_devmaps *dm;
	uint32_t pipe;
	const char *tenant;
	int no_peer;        /* the connection has no peer credentials (not ipc://) */
	int n_refs;
	fosd_devmap *refs[FOSD_DEV_MAX_REFS];
	fosd_devmap *ev;    /* the request's wait event, or NULL */
	int ev_waited;      /* the CPU already waited for it (validation read device inputs) */
	int n_snaps;
	void *snaps[FOSD_DEV_MAX_REFS];
	fosd_dev_target out[FOSW_MAX_TENSORS];       /* by index in Request.shm_outputs */
	Fos__CudaRef out_ref[FOSW_MAX_TENSORS];   /* the reply's references, by reply output */
	void *borrowed[2 * FOSW_MAX_TENSORS];     /* client addresses handed to the op as buffers */
	int n_borrowed;
	fosd_devmap *word;  /* Request.done_word's mapping (an asynchronous request), or NULL */
	uint8_t *word_ptr;  /* the word's address here */
	uint32_t word_value;
} fosd_dev_req;

/* ---- the mapping table (devmaps.c) ------------------------------------------------------------ */

/* be: the server's backend (device tensors are refused unless it offers ipc_open). */
int fosd_devmaps_init(fosd_devmaps *dm, fos_backend *be);
/* Closes every mapping (after the transport and executor stopped). */
void fosd_devmaps_destroy(fosd_devmaps *dm);
void fosd_devmaps_pipe_opened(fosd_devmaps *dm, uint32_t pipe);
/* The connection went away: its mappings and events close (once their requests are answered). */
void fosd_devmaps_pipe_closed(fosd_devmaps *dm, uint32_t pipe);
/* CloseDeviceMemory: NOT_FOUND when the pipe and tenant have no mapping of handle. */
int fosd_devmaps_close(fosd_devmaps *dm, uint32_t pipe, const char *tenant, const uint8_t *handle, size_t hlen,
		       char *msg, size_t msgsz);
void fosd_devmaps_stats(fosd_devmaps *dm, uint64_t *count, uint64_t *bytes, uint64_t *tensors, uint64_t *staged);

/* Finds or opens (is_event 0: memory, 1: an event) the pipe and tenant's entry for handle and
 * references it. peer_ok: the pipe passed the same-host check. Returns NULL with a gRPC code and
 * msg. */
fosd_devmap *fosd_devmaps_acquire(fosd_devmaps *dm, uint32_t pipe, const char *tenant, int is_event,
				  const uint8_t handle[FOSD_DEV_HANDLE_BYTES], int *code, char *msg, size_t msgsz);
void fosd_devmaps_release(fosd_devmaps *dm, fosd_devmap *m);
uint8_t *fosd_devmap_base(const fosd_devmap *m);
uint64_t fosd_devmap_size(const fosd_devmap *m);
void *fosd_devmap_event(const fosd_devmap *m);
/* Counts device tensors used and, of them, staged ones (Stats). */
void fosd_devmaps_count(fosd_devmaps *dm, int tensors, int staged);

/* ---- per request (dev_req.c) ------------------------------------------------------------------ */

void fosd_dev_req_begin(fosd_dev_req *q, fosd_devmaps *dm, uint32_t pipe, const char *tenant);
void fosd_dev_req_end(fosd_dev_req *q);
/* The request's input event (cuda_wait_event) once its op ran: every wait on it is in a stream by
 * then (a wait takes the event's state when queued), so the request lets its mapping go; it stays
 * open, idle, for the connection's next requests. A request held until its GPU work ends
 * (fosd_job_hold) thus holds no event: a connection's events in use are those of its requests
 * in progress, never of its pending ones. */
void fosd_dev_req_event_done(fosd_dev_req *q);

/* Whether the request's pipe may use device tensors at all (set by dispatch from the pipe's peer
 * credentials). */
void fosd_dev_req_set_peer(fosd_dev_req *q, int has_peer_credentials);

/* Resolves a tensor that names device memory (t->cuda set): dtype, shape and length as for inline
 * tensors; offset 0 and no shm; the backend, peer, UUID and handle checks; the range inside the
 * allocation. out->ptr is then the device address and out->cuda set. snapshot: copy the bytes to
 * host memory instead (inputs that validation reads; out->cuda NULL then). Returns 0 or -1 with
 * *code and msg. */
int fosd_dev_tensor_get(fosd_dev_req *q, const Fos__Tensor *t, const char *what, int snapshot, fosw_tensor *out,
			int *code, char *msg, size_t msgsz);
/* Checks output i of Request.shm_outputs, a device target (so->cuda set, capacity > 0). */
int fosd_dev_output_check(fosd_dev_req *q, int i, const Fos__ShmOutput *so, char *msg, size_t msgsz);
/* Opens the request's wait event (Request.cuda_wait_event), if any. Returns 0 or a code. */
int fosd_dev_event_check(fosd_dev_req *q, const Fos__Request *rq, char *msg, size_t msgsz);
/* Maps the request's done word (Request.done_word, done_value; PROTOCOL.md "Asynchronous
 * requests"), if any: the device-tensor checks of a CudaRef, 4 bytes at a 4-aligned offset inside
 * the allocation, a nonzero value. Returns 0 or a code with msg (INVALID_ARGUMENT naming the
 * field; FAILED_PRECONDITION on a cpu fosd or without peer credentials). */
int fosd_dev_word_check(fosd_dev_req *q, const Fos__Request *rq, char *msg, size_t msgsz);
/* dev_async.c: for a request with a done word, whether it may run asynchronously (the op, its
 * tensors and results all in the client's GPU memory, one device for a PutWeight: else
 * FAILED_PRECONDITION saying what is in the way), then fosd_dev_word_check. 0 without one. */
int fosd_dev_async_check(fosd_dev_req *q, const Fos__Request *rq, int n_devices, char *msg, size_t msgsz);
/* The lane's stream waits for the request's event (nothing without one). */
int fosd_dev_wait(fosd_dev_req *q, fos_backend *be, fos_err *e);

/* The address of output i's device target when `need` bytes can be written there in place
 * (aligned, room enough), else NULL; the address is then borrowed (fosd_dev_borrowed). */
void *fosd_dev_out_inplace(fosd_dev_req *q, int i, size_t need);
/* Marks a client address handed to an op as one of its buffers (so it is never freed): 0, or -1
 * when the request has marked as many as it may (then the caller stages instead). */
int fosd_dev_borrow(fosd_dev_req *q, void *p);
/* 1 if p was so marked. */
int fosd_dev_borrowed(const fosd_dev_req *q, const void *p);
/* 1 if an input tensor may be used in place (aligned device address). */
int fosd_dev_inplace_ok(const fosw_tensor *t);
/* Writes len bytes at backend address src to output i's device target (nothing when src is the
 * target itself). Returns 0 or a gRPC code with msg. */
int fosd_dev_out_write(fosd_dev_req *q, fos_backend *be, int i, const void *src, size_t len, char *msg,
		       size_t msgsz);
/* The reply's CudaRef for its output reply_index: the request's target, echoed. */
Fos__CudaRef *fosd_dev_out_ref(fosd_dev_req *q, int reply_index, const Fos__CudaRef *asked);

#endif
