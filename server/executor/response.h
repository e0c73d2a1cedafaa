/* response.h: Response messages: packing one (its header and the data section its tensors are
 * placed in), and the error Response of a request id. Pure builders: nothing here sends, records or
 * frees a request (reply.h answers; the executor decides what the answer is). */
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

#endif
