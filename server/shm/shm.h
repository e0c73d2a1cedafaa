/* shm.h: fosd's shared-memory data plane (the same-host zero-copy path, like Triton's system
 * shared-memory extension).
 *
 * A client on the same host creates a shared-memory object, registers it (RegisterRegion: name,
 * key, size) over an ipc:// connection, and then names (region, offset, length) in any request
 * instead of sending tensor bytes, for inputs and for results (Request.shm_outputs).
 *
 *  - Ownership: a region belongs to the connection (nng pipe) that registered it and, when
 *    requests carry a tenant, to that tenant: only requests from the same pipe and tenant see it.
 *    Unregister, or the pipe going away (client exit or crash), releases it.
 *  - Opening: key "fd:N" opens /proc/PID/fd/N with PID the peer's from the socket credentials
 *    (NNG_OPT_IPC_PEER_PID), never a pid the client names; key "shm:/NAME" is shm_open(NAME).
 *    The object must be a regular file owned by the peer's uid (NNG_OPT_IPC_PEER_UID) and at least
 *    `size` bytes long. fosd maps it once (MAP_SHARED, read/write) and, on the cuda backend,
 *    pins the mapping for direct DMA through the optional pin hook (shm_cuda.c).
 *  - Shrinking: a memfd sealed with F_SEAL_SHRINK cannot shrink. For any other object fosd checks
 *    its size (fstat) before each use, and every CPU access to a mapping goes through
 *    fosd_shm_copy, which turns the SIGBUS of a page beyond a shrunk end into an error instead
 *    of a crash. Pinned pages stay valid for DMA even if the object shrinks meanwhile.
 *  - Lifetime: requests hold a reference on each region they use; an unregistered region stays
 *    mapped until the last request using it finishes.
 *  - Content that validation checks (Quantize amax, Dequantize scales and amax) is copied out of
 *    the region before it is checked, so the client cannot change it between check and use. */
#ifndef FOSD_SHM_H
#define FOSD_SHM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "devmem.h"
#include "fos_wire.h"
#include "fos.pb-c.h"
#include "pipeset.h"

/* Limits */
#define FOSD_SHM_MAX_PER_PIPE 64                /* regions one connection may register */
#define FOSD_SHM_MAX_TOTAL 4096                 /* regions in all */
#define FOSD_SHM_MAX_SIZE ((uint64_t)1 << 40)   /* one region: 1 TiB */
#define FOSD_SHM_MAX_PINNED ((uint64_t)64 << 30) /* bytes pinned for DMA in all; beyond, unpinned */
#define FOSD_SHM_MAX_REFS 16                    /* regions one request may use */
#define FOSD_REGION_NAME_MAX 128

/* Pins host memory for direct device DMA (cudaHostRegister), for one backend. Optional. */
typedef struct fosd_pin_hook {
	const char *backend; /* the backend name it applies to ("cuda") */
	int (*pin)(void *p, size_t n, char *msg, size_t msgsz); /* 0 or -1 with msg */
	void (*unpin)(void *p);
} fosd_pin_hook;

/* shm_cuda.c: the CUDA runtime's hook in builds with CUDA, else NULL. */
const fosd_pin_hook *fosd_shm_cuda_pin_hook(void);

typedef struct fosd_region fosd_region;

typedef struct fosd_regions {
	pthread_mutex_t mu;
	fosd_region *head;          /* registered regions */
	uint64_t count, bytes;      /* registered */
	uint64_t fds;               /* regions holding their object open (registered, being registered,
				     * or unregistered and still in use): at most max_total */
	uint64_t max_total;         /* FOSD_SHM_MAX_TOTAL, or less from the descriptor limit (fdlimit.c) */
	uint64_t mapped;            /* bytes still mapped (registered or in use) */
	uint64_t pinned;            /* bytes pinned */
	fosd_pipeset live;          /* connections open now (regions register only on those) */
	const fosd_pin_hook *pin;   /* NULL: no pinning */
	int host_backend;           /* backend memory is host memory (cpu): copy straight in/out */
} fosd_regions;

typedef struct fosd_region_info {
	char name[FOSD_REGION_NAME_MAX + 1];
	uint64_t size, uses;
	int sealed, pinned;
	uint64_t channel_bytes; /* a request channel's area size; 0: not a channel */
} fosd_region_info;

/* A request's use of regions: the references it holds, the snapshots of checked inputs and where
 * its results go. Lives in the slot; begun before validation, ended when the reply is sent. */
typedef struct fosd_shm_out {
	fosd_region *r;   /* NULL: this result goes inline */
	uint64_t off, cap;
	int used;         /* matched to an output of the reply */
} fosd_shm_out;

typedef struct fosd_shm_req {
	fosd_regions *rg;
	uint32_t pipe;       /* nng pipe id of the request */
	const char *tenant;  /* NULL: anonymous */
	int op;              /* enum fosd_op */
	int n_refs;
	fosd_region *refs[FOSD_SHM_MAX_REFS];
	int n_snaps;
	void *snaps[FOSD_SHM_MAX_REFS];
	int n_out;
	Fos__ShmOutput **outs;      /* the request's shm_outputs */
	fosd_shm_out out[FOSW_MAX_TENSORS];     /* by index in outs */
	int out_of_t[FOSW_MAX_TENSORS];         /* reply output i -> index in out, or -1 */
	Fos__ShmRef out_ref[FOSW_MAX_TENSORS];  /* the reply's references */
	fosd_dev_req dev;                       /* device tensors and device outputs (devmem.h) */
} fosd_shm_req;

/* ---- the region table (regions.c) ------------------------------------------------------------ */

/* be: the server's backend (pinning applies when a hook for its name exists). */
int fosd_regions_init(fosd_regions *rg, const fos_backend *be);
/* Releases every region (after the transport and executor have stopped). */
void fosd_regions_destroy(fosd_regions *rg);

/* Opens, maps and (on cuda) pins the object that key names and registers it as name for the pipe
 * (and tenant). peer_pid/peer_uid: the ipc peer's credentials. Returns 0 with *info, or a gRPC
 * code with msg. */
int fosd_regions_register(fosd_regions *rg, uint32_t pipe, const char *tenant, int peer_pid, int peer_uid,
			  const char *name, const char *key, uint64_t size, fosd_region_info *info, char *msg,
			  size_t msgsz);
int fosd_regions_unregister(fosd_regions *rg, uint32_t pipe, const char *tenant, const char *name, char *msg,
			    size_t msgsz);
/* The regions of a pipe and tenant: *out malloc'd (free()), *n entries. Returns 0 or -1 (memory). */
int fosd_regions_list(fosd_regions *rg, uint32_t pipe, const char *tenant, fosd_region_info **out, size_t *n);
/* A connection came (transport's pipe callback, before any of its messages). */
void fosd_regions_pipe_opened(fosd_regions *rg, uint32_t pipe);
/* A connection went away: release all its regions. */
void fosd_regions_pipe_closed(fosd_regions *rg, uint32_t pipe);
void fosd_regions_stats(fosd_regions *rg, uint64_t *count, uint64_t *bytes, uint64_t *mapped);

/* Finds and references a region; NULL (with code and msg) when this pipe/tenant has none by that
 * name. */
fosd_region *fosd_regions_acquire(fosd_regions *rg, uint32_t pipe, const char *tenant, const char *name, int *code,
				  char *msg, size_t msgsz);
void fosd_regions_release(fosd_regions *rg, fosd_region *r);

/* Accessors of a referenced region. */
uint8_t *fosd_region_base(const fosd_region *r);
uint64_t fosd_region_size(const fosd_region *r);
const char *fosd_region_name(const fosd_region *r);
int fosd_region_pinned(const fosd_region *r);
int fosd_region_sealed(const fosd_region *r);
/* Makes c the request channel of r (NULL: none now); signal(c) wakes the channel when r is
 * unregistered (under the table's lock), so the regions call back into the transport without
 * knowing it. Returns -1 when r is no longer registered or already has a channel. */
struct fosd_chan;
int fosd_region_set_chan(fosd_regions *rg, fosd_region *r, struct fosd_chan *c, void (*signal)(struct fosd_chan *c));
void fosd_region_count_use(fosd_region *r);
/* Checks [off, off + len) lies in the object as it is now (fstat, unless sealed against
 * shrinking). Returns 0, or FAILED_PRECONDITION with msg. */
int fosd_region_check_now(const fosd_region *r, uint64_t off, uint64_t len, char *msg, size_t msgsz);

/* ---- guarded copies (shm_copy.c) -------------------------------------------------------------- */

/* memcpy that returns -1 instead of crashing when a page of src or dst is gone (SIGBUS: a shared
 * object shrunk under its mapping). Installs fosd's SIGBUS handler on first use; a SIGBUS outside
 * a guarded copy keeps its default action. */
int fosd_shm_copy(void *dst, const void *src, size_t n);

/* ---- per request (shm_req.c) ------------------------------------------------------------------ */

/* Starts the request's shm state (pipe from the message, op, tenant: NULL for anonymous) and its
 * device state (dm: the device mapping table). */
void fosd_shm_req_begin(fosd_shm_req *q, fosd_regions *rg, fosd_devmaps *dm, uint32_t pipe, int op,
			const char *tenant);
/* Releases its references and snapshots. Safe to call twice. */
void fosd_shm_req_end(fosd_shm_req *q);

/* Resolves a tensor that names a region (t->shm set): checks dtype, shape and length as for inline
 * tensors, offset 0, the region (NOT_FOUND), the range against the region (INVALID_ARGUMENT) and
 * the object's current size (FAILED_PRECONDITION); references the region. Inputs whose content
 * validation checks are copied out. Returns 0 or -1 with *code and msg. */
int fosd_shm_tensor_get(fosd_shm_req *q, const Fos__Tensor *t, const char *what, fosw_tensor *out, int *code,
			char *msg, size_t msgsz);
/* Inputs whose content validation checks (copied out of a region or device memory first). */
int fosd_shm_wants_snapshot(int op, const char *what);
/* Checks the request's shm_outputs against its op's result (names, regions or device targets,
 * ranges). Returns 0 or a gRPC code with msg. */
int fosd_shm_outputs_check(fosd_shm_req *q, const Fos__Request *rq, char *msg, size_t msgsz);
/* 1 when rq's shm_outputs name the result field `result` ("y", "dx", ...). Such a result travels
 * as a reference, so it does not count against max_message_bytes: its room is its region's
 * (offset + capacity inside the region, checked above; the result's length against the capacity,
 * OUT_OF_RANGE, in fosd_shm_outs_place). */
int fosd_shm_output_named(const Fos__Request *rq, const char *result);
/* The index in rq's shm_outputs of the entry for `result`, or -1. */
int fosd_shm_output_index(const Fos__Request *rq, const char *result);

/* A region that shrank fails with the fos_err rc FOSD_RC_PRECONDITION (rc_code.h):
 * FAILED_PRECONDITION. */

/* Copies a received tensor (inline or in a region) into backend memory through be (the request's
 * lane). */
int fosd_tensor_h2d(fos_backend *be, const fosd_regions *rg, fosd_devmaps *dm, void *dst, const fosw_tensor *t,
		    fos_err *e);
/* Before a reply is built: moves the outputs the request asked for (the n tensors t of resp) into
 * their regions (the reply's tensors get shm references) and places the others again (*placer,
 * set only when something was asked for). Returns 0 or a gRPC code with msg (OUT_OF_RANGE: a
 * result larger than its capacity). */
int fosd_shm_outs_place(fosd_shm_req *q, ProtobufCMessage *resp, Fos__Tensor *t, int n, fosw_placer *placer,
			char *msg, size_t msgsz);
/* Writes output i (len bytes at backend pointer dev, read through be) into its region. Returns 0
 * or a gRPC code with msg. */
int fosd_shm_out_write(fos_backend *be, const fosd_regions *rg, fosd_shm_req *q, int i, const void *dev,
		       size_t len, char *msg, size_t msgsz);

#endif
