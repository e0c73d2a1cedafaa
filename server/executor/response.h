/* response.h: Response messages: packing one (its header and the data section its tensors are
 * placed in), and the error Response of a request id. Pure builders: nothing here sends, records or
 * frees a request (reply.h answers; the executor decides what the answer is). An op never
 * includes this: it hands its typed result to its context's result function. */
#ifndef FOSD_RESPONSE_H
#define FOSD_RESPONSE_H

#include <stdint.h>

#include <nng/nng.h>

#include "fos_wire.h"
#include "fos.pb-c.h"

/* Packs a Response whose tensors are placed by pl (NULL: none); *data gets the data section.
 * NULL when out of memory. */
nng_msg *fosd_build_reply(Fos__Response *resp, const fosw_placer *pl, uint8_t **data);
/* An error Response for request id. Never NULL unless out of memory. */
nng_msg *fosd_error_reply(uint64_t id, int code, const char *message);

struct fosd_opctx;
struct fosd_outs;
/* The op context's result function (optable.h, set by whoever runs the op): makes c->reply, the
 * Response of request c->s whose result is `result`, the member of the result oneof whose case is
 * `which` (a Fos__*Result of that member's type; INTERNAL if it is not), with the output tensors o
 * (ops.h; NULL: none) copied in from backend memory through c's lane, or written where the request
 * asked for them. 0, or a gRPC code with c->msg. An inline op's result (FOSD_OPF_INLINE) is packed
 * as is (c->reply NULL when out of memory). */
int fosd_response_result(struct fosd_opctx *c, int which, void *result, struct fosd_outs *o);

#endif
