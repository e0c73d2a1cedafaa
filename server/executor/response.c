/* response.c: the Response builders of response.h. */
#include "response.h"

nng_msg *fosd_build_reply(Fos__Response *resp, const fosw_placer *pl, uint8_t **data)
{
	nng_msg *m = NULL;
	if (fosw_msg_build(&resp->base, pl, &m, data))
		return NULL;
	return m;
}

nng_msg *fosd_error_reply(uint64_t id, int code, const char *message)
{
	Fos__Response resp = FOS__RESPONSE__INIT;
	Fos__Status st = FOS__STATUS__INIT;
	resp.id = id;
	st.code = code;
	st.message = (char *)message;
	resp.status = &st;
	return fosd_build_reply(&resp, NULL, NULL);
}
