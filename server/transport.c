/* transport.c: the nng side of fosd: one REP socket listening on every configured URL, with a
 * receive size limit, and a fixed set of slots, each an nng context with its own aio, so that
 * `concurrency` requests from any number of clients are in progress at once. */
#include "server.h"
#include "auth.h"
#include "log.h"
#include "tls.h"
#include "trust_config.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nng/protocol/reqrep0/rep.h>
#include <nng/transport/ipc/ipc.h>
#include <nng/transport/tcp/tcp.h>

static void slot_post_recv(fosd_slot *s)
{
	if (atomic_load(&s->srv->closing)) {
		s->state = FOSD_SLOT_IDLE;
		return;
	}
	s->state = FOSD_SLOT_RECV;
	nng_ctx_recv(s->ctx, s->aio);
}

static void slot_cb(void *arg)
{
	fosd_slot *s = arg;
	fosd_server *srv = s->srv;
	int rv = nng_aio_result(s->aio);
	if (s->state == FOSD_SLOT_RECV) {
		if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
			s->state = FOSD_SLOT_IDLE;
			return;
		}
		if (rv) {
			fosd_debug("transport: receive failed: %s", nng_strerror(rv));
			slot_post_recv(s);
			return;
		}
		atomic_fetch_add(&srv->inflight, 1);
		s->msg = nng_aio_get_msg(s->aio);
		nng_aio_set_msg(s->aio, NULL);
		s->state = FOSD_SLOT_BUSY;
		s->t_recv_ns = fosd_now_ns();
		fosd_dispatch(s);
		return;
	}
	if (s->state == FOSD_SLOT_SEND) {
		if (rv) {
			nng_msg *m = nng_aio_get_msg(s->aio);
			if (m)
				nng_msg_free(m);
			fosd_debug("transport: reply not sent: %s", nng_strerror(rv));
		}
		nng_aio_set_msg(s->aio, NULL);
		atomic_fetch_sub(&srv->inflight, 1);
		slot_post_recv(s);
	}
}

void fosd_slot_reply(fosd_slot *s, nng_msg *reply, int code)
{
	fosd_server *srv = s->srv;
	fosd_auth_done(s);
	uint64_t out = reply ? nng_msg_len(reply) : 0;
	uint64_t us = (fosd_now_ns() - s->t_recv_ns) / 1000u;
	fosd_metrics_record(&srv->metrics, s->op, code, us, s->t_recv_ns, s->t_lane_ns, s->t_done_ns, s->ran_now,
			    s->bytes_in, out);
	if (code && fosd_log_get_level() >= FOSD_LOG_DEBUG)
		fosd_debug("request %llu (%s) -> %s", (unsigned long long)s->req_id, fosd_op_name(s->op),
			   fosw_code_name(code));
	fosd_shm_req_end(&s->shm); /* the request's region references (before rq, which it points into) */
	if (s->rq) {
		fos__request__free_unpacked(s->rq, NULL);
		s->rq = NULL;
	}
	if (s->msg) {
		nng_msg_free(s->msg);
		s->msg = NULL;
	}
	if (s->chan) { /* a channel's request: the reply goes back into its region (chan.c) */
		fosd_chan_reply(s, reply);
		return;
	}
	if (!reply) {
		/* nothing could be built: the client times out; the slot goes on serving */
		atomic_fetch_sub(&srv->inflight, 1);
		slot_post_recv(s);
		return;
	}
	s->state = FOSD_SLOT_SEND;
	nng_aio_set_msg(s->aio, reply);
	nng_ctx_send(s->ctx, s->aio);
}

/* Counts connections, and refuses new ones while draining (closing a listener would also close
 * the connections it accepted, and with them the replies still in flight). Every pipe that saw
 * ADD_PRE also sees REM_POST, even one closed here. */
static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	fosd_server *srv = arg;
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		atomic_fetch_add(&srv->pipes, 1);
		fosd_regions_pipe_opened(&srv->regions, nng_pipe_id(p));
		if (atomic_load(&srv->draining))
			nng_pipe_close(p);
	} else if (ev == NNG_PIPE_EV_REM_POST) {
		atomic_fetch_sub(&srv->pipes, 1);
		fosd_regions_pipe_closed(&srv->regions, nng_pipe_id(p)); /* client gone: its regions too */
	}
}

int fosd_transport_start(fosd_server *srv, char *msg, size_t msgsz)
{
	fosd_config *cfg = srv->cfg;
	int rv;
	if ((rv = nng_rep0_open(&srv->sock))) {
		snprintf(msg, msgsz, "cannot open the REP socket: %s", nng_strerror(rv));
		return -1;
	}
	srv->sock_open = 1;
	if ((rv = nng_socket_set_size(srv->sock, NNG_OPT_RECVMAXSZ, (size_t)cfg->max_message_bytes))) {
		snprintf(msg, msgsz, "cannot set the receive size limit: %s", nng_strerror(rv));
		return -1;
	}
	nng_pipe_notify(srv->sock, NNG_PIPE_EV_ADD_PRE, pipe_cb, srv);
	nng_pipe_notify(srv->sock, NNG_PIPE_EV_REM_POST, pipe_cb, srv);

	srv->slots = calloc((size_t)cfg->concurrency, sizeof *srv->slots);
	if (!srv->slots) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	for (int i = 0; i < cfg->concurrency; i++) {
		fosd_slot *s = &srv->slots[i];
		s->srv = srv;
		if ((rv = nng_aio_alloc(&s->aio, slot_cb, s)) || (rv = nng_ctx_open(&s->ctx, srv->sock))) {
			snprintf(msg, msgsz, "cannot create nng context %d: %s", i, nng_strerror(rv));
			return -1;
		}
		srv->n_slots = i + 1;
	}
	for (int i = 0; i < cfg->n_listen; i++) {
		const char *url = cfg->listen[i];
		nng_listener l;
		if ((rv = nng_listener_create(&l, srv->sock, url))) {
			snprintf(msg, msgsz, "cannot listen on %s: %s", url, nng_strerror(rv));
			return -1;
		}
		srv->listeners[srv->n_listeners++] = l;
		nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)cfg->max_message_bytes);
		if (!strncmp(url, "ipc://", 6) && (rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, cfg->ipc_mode))) {
			snprintf(msg, msgsz, "cannot set permissions %o on %s: %s", cfg->ipc_mode, url, nng_strerror(rv));
			return -1;
		}
		if (fosd_url_is_tls(url) && fosd_tls_listener_setup(l, cfg, msg, msgsz))
			return -1;
		/* the socket file is created with no access for group and others, then given ipc_mode:
		 * nobody can connect in between */
		mode_t um = umask(0177);
		rv = nng_listener_start(l, 0);
		umask(um);
		if (rv) {
			snprintf(msg, msgsz, "cannot listen on %s: %s", url, nng_strerror(rv));
			return -1;
		}
		int port = 0;
		if (fosd_url_is_network(url) && !nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port))
			fosd_info("listening on %s (port %d)", url, port);
		else
			fosd_info("listening on %s", url);
	}
	for (int i = 0; i < srv->n_slots; i++)
		slot_post_recv(&srv->slots[i]);
	return 0;
}

void fosd_transport_stop_listening(fosd_server *srv)
{
	for (int i = 0; i < srv->n_listeners; i++)
		nng_listener_close(srv->listeners[i]);
	srv->n_listeners = 0;
}

void fosd_transport_close(fosd_server *srv)
{
	atomic_store(&srv->closing, 1);
	fosd_transport_stop_listening(srv);
	if (srv->sock_open) {
		nng_close(srv->sock);
		srv->sock_open = 0;
	}
	for (int i = 0; i < srv->n_slots; i++) {
		fosd_slot *s = &srv->slots[i];
		nng_aio_stop(s->aio);
		nng_msg *m = nng_aio_get_msg(s->aio);
		if (m && s->state == FOSD_SLOT_SEND)
			nng_msg_free(m);
		nng_aio_free(s->aio);
		fosd_shm_req_end(&s->shm);
		if (s->rq)
			fos__request__free_unpacked(s->rq, NULL);
		if (s->msg)
			nng_msg_free(s->msg);
	}
	free(srv->slots);
	srv->slots = NULL;
	srv->n_slots = 0;
}
