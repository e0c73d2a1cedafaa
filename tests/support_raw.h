/* support_raw.h: a bare REQ socket to fosd for the tests that send hand-built requests (fields
 * libfos never sets, malformed references): open one, send a Fos__Request with an optional data
 * section and get the unpacked Response back, or expect a status code and a message part. Every
 * transport or framing failure fails the test (cmocka); include after cmocka.h. */
#ifndef FOS_SUPPORT_RAW_H
#define FOS_SUPPORT_RAW_H

#include <stddef.h>

#include <nng/nng.h>

#include "fos_wire.h"

/* Opens a REQ socket in *s dialed to url with resending off (each request goes out once).
 * Returns 0, or -1 with nothing left open. */
int traw_open(nng_socket *s, const char *url);

/* Sends rq (its id set to a fresh one) over s; with pl not NULL the message gets pl's data
 * section, whose first n bytes are copied from bytes. Returns the reply, unpacked (free it with
 * fos__response__free_unpacked), after checking that it answers rq's id. */
Fos__Response *traw_call(nng_socket s, Fos__Request *rq, const fosw_placer *pl, const void *bytes, size_t n);

/* traw_call that also gives the reply's data section: a malloc'd copy in *data (free it), *dlen
 * bytes. */
Fos__Response *traw_call_data(nng_socket s, Fos__Request *rq, const fosw_placer *pl, const void *bytes, size_t n,
			      uint8_t **data, size_t *dlen);

/* Frees the reply r, failing the test first unless its code is code (0: OK) and, with needle
 * not NULL, its message contains needle. */
void traw_check(Fos__Response *r, int code, const char *needle);

/* traw_check of the reply to rq (sent over s without a data section). */
void traw_expect(nng_socket s, Fos__Request *rq, int code, const char *needle);

#endif
