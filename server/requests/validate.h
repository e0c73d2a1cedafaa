/* validate.h: checks a decoded Request against its data section and the configured limits, before
 * anything reaches the backend, and turns it into typed arguments with backend enums. Checks that
 * need the cached weight or a saved context (K of X against the weight, dY against the context)
 * are made by the op handlers, still before any backend call. */
#ifndef FOSD_VALIDATE_H
#define FOSD_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "compare.h"
#include "fos_wire.h"
#include "optable.h"

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

/* Weight names: 1..128 bytes of [A-Za-z0-9._:/-]. Returns 0 or -1 with msg. */
int fosd_check_name(const char *name, const char *what, char *msg, size_t msgsz);

#endif
