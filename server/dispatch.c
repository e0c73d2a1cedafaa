/* dispatch.c: what happens to a received message before the executor: split and decode the
 * header, validate, refuse while draining, detect duplicates, answer the cheap read-only
 * operations at once and queue the rest; and the reply builders. */
#include "server.h"
#include "auth.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
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

/* Answers s and every duplicate that waited on it, then ends its duplicate-detection entry. */
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

static void reply_error(fosd_slot *s, uint64_t id, int code, const char *message)
{
	fosd_finish(s, fosd_error_reply(id, code, message), code);
}

static int is_inline(int op)
{
	return op == FOSD_OP_HEALTH || op == FOSD_OP_STATS || op == FOSD_OP_LIST_WEIGHTS;
}

void fosd_dispatch(fosd_slot *s)
{
	fosd_server *srv = s->srv;
	char msg[FOSD_MSG_MAX];
	const uint8_t *hdr;
	size_t hlen;
	s->op = FOSD_OP_INVALID;
	s->rq = NULL;
	s->client_id = s->req_id = 0;
	s->dedup_owner = 0;
	s->t_lane_ns = s->t_done_ns = 0;
	s->ran_now = 0;
	s->bytes_in = nng_msg_len(s->msg);
	if (fosw_split(nng_msg_body(s->msg), nng_msg_len(s->msg), &hdr, &hlen, &s->data, &s->dlen, msg, sizeof msg)) {
		reply_error(s, 0, FOS__CODE__INVALID_ARGUMENT, msg);
		return;
	}
	s->rq = fos__request__unpack(NULL, hlen, hdr);
	if (!s->rq) {
		reply_error(s, 0, FOS__CODE__INVALID_ARGUMENT, "the header is not a valid fos.Request protobuf");
		return;
	}
	Fos__Request *rq = s->rq;
	s->req_id = rq->id;
	s->client_id = rq->client_id;
	s->op = fosd_request_op(rq);
	if (s->conn_verdict == FOSD_CONN_OVER_SHARE) {
		snprintf(msg, sizeof msg,
			 "this connection already has %d requests in progress, the most one connection may have "
			 "(connection_requests): wait for replies or open another connection",
			 srv->conns.share);
		reply_error(s, rq->id, FOS__CODE__RESOURCE_EXHAUSTED, msg);
		return;
	}
	if (s->conn_verdict == FOSD_CONN_OVER_MAX) {
		snprintf(msg, sizeof msg,
			 "fosd already serves %d connections, its limit (max_connections): close this one and "
			 "retry later",
			 srv->conns.max);
		reply_error(s, rq->id, FOS__CODE__RESOURCE_EXHAUSTED, msg);
		return;
	}
	int acode = fosd_auth_request(srv, s, msg, sizeof msg); /* sets s->tenant */
	if (acode) {
		reply_error(s, rq->id, acode, msg);
		return;
	}
	if (srv->tenants && !s->tenant) { /* Health without a token: a few at a time per connection */
		if (fosd_conns_unauth_take(&srv->conns, nng_pipe_id(s->pipe))) {
			snprintf(msg, sizeof msg,
				 "this connection already has %d requests without a token in progress, the most "
				 "allowed",
				 FOSD_CONN_UNAUTH);
			reply_error(s, rq->id, FOS__CODE__RESOURCE_EXHAUSTED, msg);
			return;
		}
		s->unauth_held = 1;
	}
	if (atomic_load(&srv->draining) && s->op != FOSD_OP_HEALTH && s->op != FOSD_OP_STATS) {
		reply_error(s, rq->id, FOS__CODE__UNAVAILABLE, "fosd is shutting down");
		return;
	}
	/* shared-memory references are resolved for this connection and tenant (shm_req.c) */
	fosd_shm_req_begin(&s->shm, &srv->regions, nng_pipe_id(nng_msg_get_pipe(s->msg)), s->op,
			   fosd_tenant_name(s->tenant));
	int code = fosd_validate_shm(rq, s->data, s->dlen, srv->cfg->max_message_bytes, &s->shm, &s->args, msg,
				     sizeof msg);
	if (!code)
		code = fosd_shm_outputs_check(&s->shm, rq, msg, sizeof msg);
	if (code) {
		reply_error(s, rq->id, code, msg);
		return;
	}
	if (is_inline(s->op)) {
		nng_msg *r;
		code = 0;
		if (s->op == FOSD_OP_HEALTH)
			r = fosd_op_health(srv, s);
		else if (s->op == FOSD_OP_STATS)
			r = fosd_op_stats(srv, s);
		else
			r = fosd_op_list_weights(srv, s, &code);
		if (!r) {
			code = FOS__CODE__RESOURCE_EXHAUSTED;
			r = fosd_error_reply(rq->id, code, "out of memory building the reply");
		}
		fosd_finish(s, r, code);
		return;
	}
	if (s->client_id) {
		int registered;
		int d = fosd_dedup_begin(&srv->dd, s->client_id, s->req_id, s, &registered);
		if (d == FOSD_DEDUP_WAIT) {
			fosd_debug("request %llu of client %016llx is a duplicate of one in progress: waiting for it",
				   (unsigned long long)s->req_id, (unsigned long long)s->client_id);
			return; /* answered by fosd_finish of the running copy */
		}
		if (d == FOSD_DEDUP_DONE) {
			fosd_metrics_count_duplicate(&srv->metrics);
			snprintf(msg, sizeof msg, "request %llu of client %016llx was already executed; not repeated",
				 (unsigned long long)s->req_id, (unsigned long long)s->client_id);
			reply_error(s, rq->id, FOS__CODE__ABORTED, msg);
			return;
		}
		s->dedup_owner = registered;
	}
	if (!fosd_executor_try_now(srv, s)) /* small, and nothing waits: on this thread, no hand-off */
		fosd_executor_submit(srv, s);
}
