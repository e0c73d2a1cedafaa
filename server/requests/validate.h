/* validate.h: checks a decoded Request against its data section and the configured limits, before
 * anything reaches the backend, and turns it into typed arguments with backend enums. Checks that
 * need the cached weight or a saved context (K of X against the weight, dY against the context)
 * are made by the op handlers, still before any backend call. */
#ifndef FOSD_VALIDATE_H
#define FOSD_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "fos_wire.h"
#include "ops.h"     /* fosd_args: the typed request an op reads */
#include "optable.h"

/* The op of a request (FOSD_OP_INVALID when none is set; optable.c maps the oneof case). */
int fosd_request_op(const Fos__Request *rq);

/* Returns 0 with *a filled, or a gRPC code with msg. max_reply: the largest reply allowed. */
int fosd_validate(const Fos__Request *rq, const uint8_t *data, size_t dlen, uint64_t max_reply, fosd_args *a,
		  char *msg, size_t msgsz);
/* The same, with tensors that name shared-memory regions resolved through shm (shm.h); without
 * it (NULL) such tensors are UNIMPLEMENTED. */
struct fosd_shm_req;
int fosd_validate_shm(const Fos__Request *rq, const uint8_t *data, size_t dlen, uint64_t max_reply,
		      struct fosd_shm_req *shm, fosd_args *a, char *msg, size_t msgsz);

/* The validators of the op table's rows (fosd_op_validator, optable.h): each checks the fields
 * of its op's request. */
typedef struct fosd_vctx fosd_vctx;
int fosd_validate_put(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_drop(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_forward(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_backward(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_release(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_quantize(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_dequantize(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
int fosd_validate_linear(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
/* RegisterRegion, UnregisterRegion, ListRegions (ops_shm.c checks them) */
int fosd_validate_region_op(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);
/* CloseDeviceMemory: a 64-byte handle */
int fosd_validate_close_device(fosd_vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply);


#endif
