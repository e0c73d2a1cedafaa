/* libfos_internal.h: what libfos's files share: the handle, and one request/reply round trip with
 * input tensors placed into the message and output tensors checked and copied out. */
#ifndef FOS_LIBFOS_INTERNAL_H
#define FOS_LIBFOS_INTERNAL_H

#include <stdatomic.h>

#include "fos.h"
#include "fos_wire.h"

struct fos_client {
	nng_socket sock;
	nng_dialer dialer;
	uint64_t client_id;
	atomic_uint_fast64_t next_id;
	atomic_int timeout_ms;
	uint64_t max_message;
	char *token;
	char *url;
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

/* Copies a reply tensor into an output: checks it against the data section and the expected dtype
 * and shape (exp_d1 <= 0: 1-D of exp_d0; exp_d0 < 0: any shape), then allocates or checks the
 * caller's buffer. t NULL gives DATA_LOSS. */
int fosc_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
	     fos_tensor *out, fos_status *st);
/* Marks an output absent (ndim 0, size 0). */
void fosc_out_none(fos_tensor *out);

#endif
