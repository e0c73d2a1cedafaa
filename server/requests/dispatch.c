/* dispatch.c: what happens to a received message before the executor: split and decode the
 * header, check the connection's share and the token, refuse while draining, validate, answer the
 * inline ops (the op table's FOSD_OPF_INLINE) at once, detect duplicates and hand the rest to the
 * executor. Every answer goes through reply.h; what an op is, the op table says. */
#include "dispatch.h"
#include "auth.h"
#include "ops.h"
#include "optable.h"
#include "reply.h"
#include "validate.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same-host check of the device data plane: the connection's peer credentials (ipc://). */
static int pipe_has_peer(nng_pipe p)
{
	uint64_t pid = 0;
	return nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) == 0 && pid != 0;
}

static void reply_error(fosd_request *s, uint64_t id, int code, const char *message)
{
	fosd_finish(fosd_request_job(s), fosd_error_reply(id, code, message), code);
}

/* The message refusing a request on a connection over its share (FOSD_CONN_OVER_SHARE) or past
 * max_connections (FOSD_CONN_OVER_MAX); both are answered RESOURCE_EXHAUSTED. */
static void conn_refusal(const fosd_rqsrv *srv, int verdict, char *msg, size_t msgsz)
{
	if (verdict == FOSD_CONN_OVER_SHARE)
		snprintf(msg, msgsz,
			 "this connection already has %d requests in progress, the most one connection may have "
			 "(connection_requests): wait for replies or open another connection",
			 srv->conns.share);
	else
		snprintf(msg, msgsz,
			 "fosd already serves %d connections, its limit (max_connections): close this one and "
			 "retry later",
			 srv->conns.max);
}

/* An inline op (FOSD_OPF_INLINE): run here, on the receiving thread, without a lane. */
static void run_inline(fosd_rqsrv *srv, fosd_request *s)
{
	fosd_opctx c = {fosd_exec_ops(fosd_rq_exec(srv)), fosd_job_op(fosd_request_job(s)), srv->devs[0].be, -1, NULL,
			fosd_device_res(&srv->devs[0]), NULL, 0, 0, fosd_response_result, NULL, ""};
	int code = fosd_op_run(&c);
	nng_msg *r = c.reply;
	if (code) {
		if (r)
			nng_msg_free(r);
		r = fosd_error_reply(s->req_id, code, c.msg);
	} else if (!r) {
		code = FOS__CODE__RESOURCE_EXHAUSTED;
		r = fosd_error_reply(s->rq->id, code, "out of memory building the reply");
	}
	fosd_finish(fosd_request_job(s), r, code);
}

void fosd_dispatch_refuse(fosd_request *s, int code, const char *message)
{
	s->op = FOSD_OP_INVALID;
	s->def = fosd_op_def_of(s->op);
	s->msg = NULL;
	fosd_slot_reply(s, fosd_error_reply(0, code, message), code);
}

void fosd_dispatch(fosd_request *s)
{
	fosd_rqsrv *srv = s->srv;
	fosd_exec *ex = fosd_rq_exec(srv);
	char msg[FOSD_MSG_MAX];
	const uint8_t *hdr;
	size_t hlen;
	s->op = FOSD_OP_INVALID;
	s->def = fosd_op_def_of(s->op);
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
	s->def = fosd_op_def_of(s->op);
	if (s->conn_verdict == FOSD_CONN_OVER_SHARE || s->conn_verdict == FOSD_CONN_OVER_MAX) {
		conn_refusal(srv, s->conn_verdict, msg, sizeof msg);
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
	const unsigned flags = s->def->flags;
	if (atomic_load(&srv->draining) && !(flags & FOSD_OPF_DRAINING)) {
		reply_error(s, rq->id, FOS__CODE__UNAVAILABLE, "fosd is shutting down");
		return;
	}
	/* the device it runs on (placement.c) opens its device tensors; shared-memory references are
	 * resolved for this connection and tenant (shm_req.c) */
	int code = fosd_place(ex, fosd_request_job(s), msg, sizeof msg);
	nng_pipe pipe = nng_msg_get_pipe(s->msg);
	s->bound_dev = s->dev;
	fosd_shm_req_begin(&s->shm, &srv->regions, &srv->devs[s->dev].devmaps, nng_pipe_id(pipe), s->op,
			   fosd_tenant_name(s->tenant));
	fosd_dev_req_set_peer(&s->shm.dev, pipe_has_peer(pipe));
	if (!code)
		code = fosd_dev_event_check(&s->shm.dev, rq, msg, sizeof msg); /* before inputs validation reads */
	if (!code)
		code = fosd_validate_shm(rq, s->data, s->dlen, srv->cfg->max_message_bytes, &s->shm, &s->args, msg,
					 sizeof msg);
	if (!code)
		code = fosd_shm_outputs_check(&s->shm, rq, msg, sizeof msg);
	if (!code) /* an asynchronous request: its done word (dev_async.c) */
		code = fosd_dev_async_check(&s->shm.dev, rq, srv->n_devs, msg, sizeof msg);
	if (code) {
		reply_error(s, rq->id, code, msg);
		return;
	}
	if (flags & FOSD_OPF_INLINE) {
		run_inline(srv, s);
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
	if (!fosd_executor_try_now(ex, fosd_request_job(s))) /* small, and nothing waits: on this thread, no hand-off */
		fosd_executor_submit(ex, fosd_request_job(s));
}
