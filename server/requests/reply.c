/* reply.c: reply builders and the answering of requests (see reply.h). Invariant: a slot is
 * answered exactly once, here, and its transport's send function is the only thing that runs after
 * the answer. */
#include "reply.h"
#include "server.h"
#include "log.h"
#include "util.h"

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

void fosd_slot_reply(fosd_slot *s, nng_msg *reply, int code)
{
	fosd_server *srv = s->srv;
	uint64_t out = reply ? nng_msg_len(reply) : 0;
	uint64_t us = (fosd_now_ns() - s->t_recv_ns) / 1000u;
	fosd_req_sample rs = {.op = s->op, .code = code, .latency_us = us, .t_recv_ns = s->t_recv_ns,
			      .t_lane_ns = s->t_lane_ns, .t_done_ns = s->t_done_ns, .ran_now = s->ran_now,
			      .bytes_in = s->bytes_in, .bytes_out = out, .tenant_key = s->tenant,
			      .tenant = s->tenant ? s->tenant->name : NULL, .req = s};
	fosd_metrics_record_req(&srv->metrics, &rs);
	if (code && fosd_log_get_level() >= FOSD_LOG_DEBUG)
		fosd_debug("request %llu (%s) -> %s", (unsigned long long)s->req_id, s->def->name,
			   fosw_code_name(code));
	fosd_shm_req_end(&s->shm); /* the request's region references (before rq, which it points into) */
	if (s->stage_reply) {
		nng_msg_free(s->stage_reply);
		s->stage_reply = NULL;
	}
	if (s->rq) {
		fos__request__free_unpacked(s->rq, NULL);
		s->rq = NULL;
	}
	if (s->msg) {
		nng_msg_free(s->msg);
		s->msg = NULL;
	}
	s->send(s, reply);
}

void fosd_finish(fosd_slot *s, nng_msg *reply, int code)
{
	fosd_server *srv = s->srv;
	if (s->dedup_owner) {
		fosd_slot *w = fosd_dedup_end(&srv->dd, s->client_id, s->req_id, fosd_now_ns());
		s->dedup_owner = 0;
		while (w) {
			fosd_slot *next = w->wnext;
			nng_msg *copy = NULL;
			if (reply && nng_msg_dup(&copy, reply))
				copy = NULL;
			fosd_metrics_count_duplicate(&srv->metrics);
			fosd_slot_reply(w, copy, code);
			w = next;
		}
	}
	fosd_slot_reply(s, reply, code);
}

void fosd_slot_hold(fosd_slot *s, fosd_held *h)
{
	h->msg = s->msg;
	h->rq = s->rq;
	h->shm = s->shm;
	s->msg = NULL;
	s->rq = NULL;
	memset(&s->shm, 0, sizeof s->shm);
}

void fosd_held_end(fosd_held *h)
{
	fosd_shm_req_end(&h->shm);
	if (h->rq)
		fos__request__free_unpacked(h->rq, NULL);
	if (h->msg)
		nng_msg_free(h->msg);
	memset(h, 0, sizeof *h);
}
