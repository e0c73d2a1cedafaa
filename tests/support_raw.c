/* support_raw.c: a bare REQ socket to fosd (support_raw.h). Request ids come from one counter,
 * so the ids a test binary sends are distinct across all its sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "fos.h"
#include "support_raw.h"

int traw_open(nng_socket *s, const char *url)
{
	if (nng_req0_open(s))
		return -1;
	if (nng_socket_set_ms(*s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE) || nng_dial(*s, url, NULL, 0)) {
		nng_close(*s);
		return -1;
	}
	return 0;
}

Fos__Response *traw_call_data(nng_socket s, Fos__Request *rq, const fosw_placer *pl, const void *bytes, size_t n,
			      uint8_t **data_out, size_t *dlen_out)
{
	static uint64_t id = 1000;
	rq->id = ++id;
	nng_msg *m, *rep;
	uint8_t *out = NULL;
	assert_int_equal(fosw_msg_build(&rq->base, pl, &m, pl ? &out : NULL), 0);
	if (pl && n)
		memcpy(out, bytes, n);
	assert_int_equal(nng_sendmsg(s, m, 0), 0);
	assert_int_equal(nng_recvmsg(s, &rep, 0), 0);
	const uint8_t *hdr, *data;
	size_t hlen, dlen;
	char why[256];
	assert_int_equal(fosw_split(nng_msg_body(rep), nng_msg_len(rep), &hdr, &hlen, &data, &dlen, why, sizeof why), 0);
	Fos__Response *resp = fos__response__unpack(NULL, hlen, hdr);
	if (data_out) {
		*data_out = malloc(dlen ? dlen : 1);
		assert_non_null(*data_out);
		memcpy(*data_out, data, dlen);
		*dlen_out = dlen;
	}
	nng_msg_free(rep);
	assert_non_null(resp);
	assert_int_equal(resp->id, rq->id);
	return resp;
}

Fos__Response *traw_call(nng_socket s, Fos__Request *rq, const fosw_placer *pl, const void *bytes, size_t n)
{
	return traw_call_data(s, rq, pl, bytes, n, NULL, NULL);
}

void traw_check(Fos__Response *r, int code, const char *needle)
{
	int got = r->status ? r->status->code : 0;
	const char *msg = r->status && r->status->message ? r->status->message : "";
	if (got != code)
		fail_msg("got %s (%s), expected %s", fos_code_name(got), msg, fos_code_name(code));
	if (needle && !strstr(msg, needle))
		fail_msg("message '%s' does not mention '%s'", msg, needle);
	fos__response__free_unpacked(r, NULL);
}

void traw_expect(nng_socket s, Fos__Request *rq, int code, const char *needle)
{
	traw_check(traw_call(s, rq, NULL, NULL, 0), code, needle);
}
