/* response.c: the Response builders of response.h, and the reply of an op's result
 * (fosd_response_result: the op context's result function). The op's tensors are read from
 * backend memory through the op's lane while the op still holds them; results asked into a shared
 * region or the client's GPU memory are written there; a reply whose results are all in the
 * client's GPU memory may carry the lane's done event (an early answer, executor.c). */
#include "response.h"
#include "ops.h"
#include "log.h"

#include <string.h>

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

static int outs_reply(fosd_opctx *c, Fos__Response *resp, fosd_outs *o)
{
	fosd_opsrv *srv = c->srv;
	fosd_opreq *s = c->s;
	uint64_t t0 = fosd_now_ns(); /* the output copy part of the request's time (metrics.h) */
	resp->id = s->req_id;
	resp->device = c->dev ? (uint32_t)c->dev->index : 0;
	char smsg[FOSD_MSG_MAX];
	/* results asked into shm */
	int sc = fosd_shm_outs_place(&s->shm, &resp->base, o ? o->t : NULL, o ? o->n : 0, o ? &o->pl : NULL, smsg,
				     sizeof smsg);
	if (sc)
		return fosd_fail(c, sc, "%s", smsg);
	if (o && o->pl.cursor + 4096 > srv->cfg->max_message_bytes)
		return fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED,
				 "the reply would be %llu bytes, over the %llu-byte message limit",
				 (unsigned long long)o->pl.cursor, (unsigned long long)srv->cfg->max_message_bytes);
	for (int i = 0; s->shm.dev.word && o && i < o->n; i++) /* asynchronous: the client no longer waits */
		if (!o->t[i].cuda)
			return fosd_fail(c, FOS__CODE__FAILED_PRECONDITION,
					 "an asynchronous request (done_word) needs every result in the client's GPU memory, "
					 "but result %d would come back in the reply (a Backward's db: give it a device "
					 "output); send it without done_word",
					 i);
	int early = c->done_event != NULL; /* only when no result goes to the reply or a region */
	for (int i = 0; early && o && i < o->n; i++)
		early = o->t[i].cuda != NULL;
	if (early) {
		resp->cuda_done_event.len = 64;
		resp->cuda_done_event.data = (uint8_t *)c->done_event;
	}
	uint8_t *data = NULL;
	nng_msg *m = fosd_build_reply(resp, o ? &o->pl : NULL, &data);
	if (!m)
		return fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory allocating the reply");
	for (int i = 0; o && i < o->n; i++)
		if (!o->t[i].cuda) { /* a copy to the host follows: the op's last device work is waited for
				      * first and counted as compute, not output copy */
			fos_err se;
			uint64_t ts = fosd_now_ns();
			(void)c->be->sync(c->be, &se);
			t0 += fosd_now_ns() - ts;
			break;
		}
	for (int i = 0; o && i < o->n; i++) {
		fos_err e;
		if (o->t[i].shm || o->t[i].cuda) {
			sc = fosd_shm_out_write(c->be, &srv->regions, &s->shm, i, o->dev[i], (size_t)o->t[i].length, smsg, sizeof smsg);
			if (sc) {
				nng_msg_free(m);
				return fosd_fail(c, sc, "writing result %d into %s: %s", i,
						 o->t[i].cuda ? "the client's GPU memory" : "shared memory", smsg);
			}
			continue;
		}
		if (c->be->d2h(c->be, data + o->t[i].offset, o->dev[i], (size_t)o->t[i].length, &e)) {
			nng_msg_free(m);
			return fosd_fail(c, fosd_code_of_rc(e.rc), "copying the result out: %s", e.msg);
		}
	}
	if (early) { /* after the op's last work on the stream, the device outputs' copies included */
		fos_err e;
		memset(&e, 0, sizeof e);
		if (c->be->done_event_record(c->be, &e)) {
			nng_msg_free(m);
			return fosd_fail(c, FOS__CODE__INTERNAL, "recording the reply's done event: %s", e.msg);
		}
		c->early = 1;
	}
	fosd_metrics_copy_time(s, FOSD_COPY_OUT, t0);
	c->reply = m;
	return 0;
}

int fosd_response_result(fosd_opctx *c, int which, void *result, fosd_outs *o)
{
	/* a oneof case is its member's field number; the member is stored at the field's offset */
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field(&fos__response__descriptor, (unsigned)which);
	if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE || ((ProtobufCMessage *)result)->descriptor != f->descriptor)
		return fosd_fail(c, FOS__CODE__INTERNAL, "result %d is not a Response result", (int)which);
	Fos__Response resp = FOS__RESPONSE__INIT;
	resp.result_case = (Fos__Response__ResultCase)which;
	memcpy((char *)&resp + f->offset, &result, sizeof result);
	if (c->s->def->flags & FOSD_OPF_INLINE) { /* no tensors, no device: packed as is */
		resp.id = c->s->req_id;
		c->reply = fosd_build_reply(&resp, NULL, NULL);
		return 0; /* NULL: out of memory, answered by the caller */
	}
	return outs_reply(c, &resp, o);
}
