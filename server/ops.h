/* ops.h: helpers shared by the op handlers (ops_*.c): backend error codes to gRPC codes, backend
 * buffers, and replies whose tensors are copied from backend memory straight into the message. */
#ifndef FOSD_OPS_H
#define FOSD_OPS_H

#include "server.h"

/* enum fos_rc -> gRPC code */
int fosd_code_of_rc(int rc);

/* A failed op: sets *code and returns the error reply. */
nng_msg *fosd_fail(fosd_slot *s, int *code, int c, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 4, 5)))
#endif
	;

/* Backend buffer holding a copy of a received tensor; NULL (with e) on failure. */
void *fosd_dev_from(fosd_server *srv, const fosw_tensor *t, fos_err *e);
/* Backend buffer of n bytes; NULL (with e) on failure. */
void *fosd_dev_alloc(fosd_server *srv, size_t n, fos_err *e);
void fosd_dev_free(fosd_server *srv, void *p);

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
/* Packs resp (with id set here), allocates the message and copies every output in. On failure
 * returns an error reply and sets *code. */
nng_msg *fosd_outs_reply(fosd_server *srv, fosd_slot *s, Fos__Response *resp, fosd_outs *o, int *code);

nng_msg *fosd_op_put_weight(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_drop_weight(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_forward(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_backward(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_release(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_linear(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_quantize(fosd_server *srv, fosd_slot *s, int *code);
nng_msg *fosd_op_dequantize(fosd_server *srv, fosd_slot *s, int *code);

/* WeightInfo for a reply; strings point into info. */
void fosd_weight_info_msg(const fosd_weight_info *info, Fos__WeightInfo *out, Fos__WeightConfig *cfg);

#endif
