/* transport.c: the nng side of fosd: one REP socket listening on every configured URL, with a
 * receive size limit, and a fixed set of slots, each an nng context with its own aio, so that
 * `concurrency` requests from any number of clients are in progress at once.
 *
 * A slot is held from the receive until its reply has left (the send completed or failed): only
 * then are the tenant's in-flight quota, the connection's share (conns.c) and the drain's count
 * given back. A send waits at most send_timeout for a client that does not read; then, or when a
 * connection holds more slots than its share allows, the connection is dropped (closed), never
 * the service. A received message goes to fosd_dispatch; its reply comes back through the slot's
 * send function (socket_send), never by a branch on where the request came from. */
#include "transport.h"
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

#define FOSD_DROP_WARN_NS (1000000000ull) /* at most one drop warning a second */

static void slot_post_recv(fosd_slot *s)
{
	if (atomic_load(&fosd_tp_of(s->srv)->closing)) {
		s->state = FOSD_SLOT_IDLE;
		return;
	}
	s->state = FOSD_SLOT_RECV;
	nng_aio_set_timeout(s->aio, NNG_DURATION_INFINITE);
	nng_ctx_recv(s->ctx, s->aio);
}

/* Closes a connection that does not take its replies; counted, and logged at most once a second. */
static void drop_pipe(fosd_tpsrv *srv, nng_pipe p, const char *why)
{
	static _Atomic unsigned long long warned_ns, warned_count;
	unsigned long long n = fosd_conns_note_dropped(&srv->conns);
	nng_pipe_close(p); /* its sends and receives fail; their slots are freed (nng_fix.c, 2.) */
	unsigned long long now = fosd_now_ns(), last = atomic_load(&warned_ns);
	if ((last == 0 || now - last >= FOSD_DROP_WARN_NS) && atomic_compare_exchange_strong(&warned_ns, &last, now)) {
		unsigned long long before = atomic_exchange(&warned_count, n);
		fosd_warn("dropped connection %u: %s (%llu dropped since the last report, %llu in all)",
			  (unsigned)nng_pipe_id(p), why, n - before, n);
	}
}

static void slot_cb(void *arg)
{
	fosd_slot *s = arg;
	fosd_tpsrv *srv = fosd_tp_of(s->srv);
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
		s->msg = nng_aio_get_msg(s->aio);
		nng_aio_set_msg(s->aio, NULL);
		s->state = FOSD_SLOT_BUSY;
		s->t_recv_ns = fosd_now_ns();
		s->pipe = nng_msg_get_pipe(s->msg);
		fosd_slot_begin(srv, s);
		int held;
		s->conn_verdict = fosd_conns_take(&srv->conns, nng_pipe_id(s->pipe), &held);
		s->conn_held = 1;
		if (s->conn_verdict == FOSD_CONN_DROP) {
			char why[160];
			snprintf(why, sizeof why, "it holds %d request slots without reading its replies (share %d)", held,
				 srv->conns.share);
			drop_pipe(srv, s->pipe, why);
			nng_msg_free(s->msg);
			s->msg = NULL;
			fosd_slot_end(s);
			slot_post_recv(s);
			return;
		}
		fosd_dispatch(fosd_slot_request(s));
		return;
	}
	if (s->state == FOSD_SLOT_SEND) {
		if (rv) {
			nng_msg *m = nng_aio_get_msg(s->aio);
			if (m)
				nng_msg_free(m);
			if (rv == NNG_ETIMEDOUT) {
				char why[160];
				snprintf(why, sizeof why, "a reply waited %llu ms for it to read (send_timeout)",
					 (unsigned long long)srv->cfg->send_timeout_ms);
				drop_pipe(srv, s->pipe, why);
			} else {
				fosd_debug("transport: reply not sent: %s", nng_strerror(rv));
			}
		}
		nng_aio_set_msg(s->aio, NULL);
		fosd_slot_end(s);
		slot_post_recv(s);
	}
}

/* The socket's reply function (fosd_request.send, dispatch.h): sends reply on the slot's nng context,
 * waiting at most send_timeout for the client to read it; slot_cb frees the slot once it left. */
static void socket_send(fosd_request *r, nng_msg *reply)
{
	fosd_slot *s = fosd_slot_of(r);
	fosd_tpsrv *srv = fosd_tp_of(s->srv);
	if (!reply) {
		/* nothing could be built: the client times out; the slot goes on serving */
		fosd_slot_end(s);
		slot_post_recv(s);
		return;
	}
	s->state = FOSD_SLOT_SEND;
	nng_aio_set_msg(s->aio, reply);
	nng_aio_set_timeout(s->aio, srv->cfg->send_timeout_ms ? (nng_duration)srv->cfg->send_timeout_ms
							     : NNG_DURATION_INFINITE);
	nng_ctx_send(s->ctx, s->aio);
}

/* Counts connections, and refuses new ones while draining (closing a listener would also close
 * the connections it accepted, and with them the replies still in flight) or far past
 * max_connections (conns.h). Every pipe that saw ADD_PRE also sees REM_POST, even one closed here. */
static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	fosd_tpsrv *srv = arg;
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		fosd_debug("connection %u opened", (unsigned)nng_pipe_id(p));
		atomic_fetch_add(&srv->pipes, 1);
		fosd_regions_pipe_opened(&srv->regions, nng_pipe_id(p));
		for (int i = 0; i < srv->n_devs; i++)
			fosd_devmaps_pipe_opened(&srv->devs[i].devmaps, nng_pipe_id(p));
		if (fosd_conns_opened(&srv->conns, nng_pipe_id(p)) || atomic_load(&srv->draining))
			nng_pipe_close(p);
	} else if (ev == NNG_PIPE_EV_REM_POST) {
		fosd_debug("connection %u closed", (unsigned)nng_pipe_id(p));
		atomic_fetch_sub(&srv->pipes, 1);
		fosd_conns_closed(&srv->conns, nng_pipe_id(p));
		fosd_regions_pipe_closed(&srv->regions, nng_pipe_id(p)); /* client gone: its regions too */
		for (int i = 0; i < srv->n_devs; i++) /* and its GPU memory mappings */
			fosd_devmaps_pipe_closed(&srv->devs[i].devmaps, nng_pipe_id(p));
	}
}

int fosd_transport_start(fosd_tpsrv *srv, char *msg, size_t msgsz)
{
	fosd_config *cfg = srv->cfg;
	int rv;
	if ((rv = nng_rep0_open(&srv->sock))) {
		snprintf(msg, msgsz, "cannot open the REP socket: %s", nng_strerror(rv));
		return -1;
	}
	srv->sock_open = 1;
	int share = cfg->connection_requests ? cfg->connection_requests : cfg->concurrency / 4;
	if (fosd_conns_init(&srv->conns, share > 0 ? share : 1, cfg->max_connections)) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	char maxs[32] = "no limit";
	if (cfg->max_connections)
		snprintf(maxs, sizeof maxs, "%d", cfg->max_connections);
	fosd_info("connections: %s; %d requests in progress each (connection_requests); a reply waits %llu ms for its "
		  "reader (send_timeout)",
		  maxs, srv->conns.share, (unsigned long long)cfg->send_timeout_ms);
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
		s->srv = fosd_tp_rq(srv);
		s->send = socket_send;
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

void fosd_transport_stop_listening(fosd_tpsrv *srv)
{
	for (int i = 0; i < srv->n_listeners; i++)
		nng_listener_close(srv->listeners[i]);
	srv->n_listeners = 0;
}

void fosd_transport_close(fosd_tpsrv *srv)
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
	fosd_conns_destroy(&srv->conns);
}
