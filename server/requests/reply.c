/* reply.c: the answering of requests (see reply.h). Invariant: a request is answered exactly once,
 * here, and its transport's send function is the only thing that runs after the answer. */
#include "reply.h"
#include "log.h"
#include "util.h"

#include <string.h>

void fosd_slot_reply(fosd_request *s, nng_msg *reply, int code)
{
	fosd_rqsrv *srv = s->srv;
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

void fosd_finish(fosd_job *j, nng_msg *reply, int code)
{
	fosd_request *s = fosd_request_of(j);
	fosd_rqsrv *srv = s->srv;
	if (s->dedup_owner) {
		fosd_request *w = fosd_dedup_end(&srv->dd, s->client_id, s->req_id, fosd_now_ns());
		s->dedup_owner = 0;
		while (w) {
			fosd_request *next = w->wnext;
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

int fosd_drop_if_client_gone(fosd_job *j)
{
	fosd_request *s = fosd_request_of(j);
	nng_pipe p = s->msg ? nng_msg_get_pipe(s->msg) : (nng_pipe)NNG_PIPE_INITIALIZER;
	nng_sockaddr sa;
	if (nng_pipe_id(p) <= 0 || nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != NNG_ENOENT)
		return 0; /* still connected (or unknown) */
	if (s->dedup_owner) {
		if (!fosd_dedup_abandon(&s->srv->dd, s->client_id, s->req_id))
			return 0; /* a copy resent on a new connection waits for this one */
		s->dedup_owner = 0;
	}
	fosd_debug("request %llu (%s): the client is gone; dropped before running", (unsigned long long)s->req_id,
		   s->def->name);
	fosd_slot_reply(s, NULL, FOS__CODE__CANCELLED);
	return 1;
}
