/* ops.h: the op handlers (one per row of the op table, optable.c) and the helpers they share:
 * backend error codes to gRPC codes, backend buffers on the request's lane, and replies whose
 * tensors are copied from backend memory straight into the message.
 *
 * A handler gets an op context (optable.h): the server, the request's slot, and the lane's
 * backend, to which every backend call of the request goes. It returns the reply (NULL if none
 * could be made) and sets *code; it never sends: the executor answers with the reply (reply.h). */
#ifndef FOSD_OPS_H
#define FOSD_OPS_H

#include "server.h"
#include "optable.h"
#include "reply.h"

/* Runs the handler of the request's row (c->s->def); UNIMPLEMENTED for a row without one. */
nng_msg *fosd_op_run(fosd_opctx *c, int *code);

/* A failed op: sets *code and returns the error reply. */
nng_msg *fosd_fail(fosd_slot *s, int *code, int c, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 4, 5)))
#endif
	;

/* A failed backend step: *code from the backend's rc (fosd_code_of_rc), the message e->msg, after
 * "what: " when what is not NULL. */
nng_msg *fosd_fail_be(fosd_slot *s, int *code, int rc, const char *what, const fos_err *e);

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
/* Packs resp (with id set here), allocates the message and copies every output in (through c's
 * lane; o NULL: none). On failure returns an error reply and sets *code. */
nng_msg *fosd_outs_reply(fosd_opctx *c, Fos__Response *resp, fosd_outs *o, int *code);
/* fosd_outs_reply of a Response whose result is `result`, the member of the result oneof whose
 * case is `which` (a Fos__*Result of that member's type; INTERNAL if it is not). */
nng_msg *fosd_result_reply(fosd_opctx *c, Fos__Response__ResultCase which, void *result, fosd_outs *o, int *code);

/* ops_weights.c */
nng_msg *fosd_op_put_weight(fosd_opctx *c, int *code);
/* A put's work on c's device (PutWeight's, and a Forward's put): the weight quantized for its uses
 * (r's; r NULL: all) and inserted into the device's cache as *out. 0, or a gRPC code with msg;
 * *staged says whether a failure is one PutWeight reports with the devices already holding it. */
int fosd_put_cache(fosd_opctx *c, const fosd_put_args *a, const Fos__PutWeightRequest *r, struct fosd_weight **out,
		   int *staged, char *msg, size_t msgsz);
nng_msg *fosd_op_drop_weight(fosd_opctx *c, int *code);
/* ops_linear.c */
nng_msg *fosd_op_forward(fosd_opctx *c, int *code);
nng_msg *fosd_op_backward(fosd_opctx *c, int *code);
nng_msg *fosd_op_release(fosd_opctx *c, int *code);
nng_msg *fosd_op_linear(fosd_opctx *c, int *code);
/* ops_quant.c */
nng_msg *fosd_op_quantize(fosd_opctx *c, int *code);
nng_msg *fosd_op_dequantize(fosd_opctx *c, int *code);
/* ops_info.c: the inline ops (FOSD_OPF_INLINE), read-only, no backend calls */
nng_msg *fosd_op_health(fosd_opctx *c, int *code);
nng_msg *fosd_op_stats(fosd_server *srv, fosd_slot *s); /* its row wraps it (optable.c) */
nng_msg *fosd_op_list_weights(fosd_opctx *c, int *code);
/* ops_shm.c: RegisterRegion, UnregisterRegion, ListRegions; their requests' checks (0 or a code) */
int fosd_shm_validate_op(const Fos__Request *rq, char *msg, size_t msgsz);
nng_msg *fosd_op_register_region(fosd_opctx *c, int *code);
nng_msg *fosd_op_unregister_region(fosd_opctx *c, int *code);
nng_msg *fosd_op_list_regions(fosd_opctx *c, int *code);
/* ops_devmem.c */
nng_msg *fosd_op_close_device_memory(fosd_opctx *c, int *code);

/* WeightInfo for a reply; strings point into info. */
void fosd_weight_info_msg(const fosd_weight_info *info, Fos__WeightInfo *out, Fos__WeightConfig *cfg);

#endif
