/* transport.h: the transport's part of the server's and of a request's state, and its functions
 * (transport.c: the nng socket and its listeners; chan.c: request channels; slot.c: a request's
 * arrival and end).
 *
 * fosd_slot begins with the requests stage's fosd_request and fosd_tpsrv with its fosd_rqsrv
 * (dispatch.h), embedded unnamed: a slot is the whole of a request's state, each stage reaching
 * its own part and the parts below it by their names; a pointer to a slot is a pointer to its
 * request, its job and its op's request (fosd_slot_request; back: fosd_slot_of). */
#ifndef FOSD_TRANSPORT_H
#define FOSD_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "chan.h"
#include "config.h"
#include "dispatch.h"

enum fosd_slot_state { FOSD_SLOT_IDLE = 0, FOSD_SLOT_RECV, FOSD_SLOT_BUSY, FOSD_SLOT_SEND };

/* A request slot: the request (dispatch.h) and what the transport keeps of it. */
typedef struct fosd_slot {
	fosd_request;
	nng_ctx ctx;
	nng_aio *aio;
	int state;
	int conn_held;      /* holds a unit of the pipe's share (conns.h) until the reply left */
	int accepted;       /* received before a drain began: the drain waits for its reply */
} fosd_slot;

/* What the transport keeps of the server. */
typedef struct fosd_tpsrv {
	fosd_rqsrv;
	nng_socket sock;
	int sock_open;
	nng_listener listeners[FOSD_MAX_LISTEN];
	int n_listeners;
	fosd_slot *slots;
	int n_slots;
	fosd_chans chans;       /* request channels in regions (chan.c) */
	atomic_int pipes;       /* connected clients */
	atomic_int inflight;    /* requests received and not yet answered */
	atomic_int accepted;    /* of them, received before a drain began (control.c waits for these) */
	atomic_int closing;
} fosd_tpsrv;

static inline fosd_request *fosd_slot_request(fosd_slot *s)
{
	return (fosd_request *)s;
}
/* The slot a request of this transport's is the first part of (every request is). */
static inline fosd_slot *fosd_slot_of(fosd_request *r)
{
	return (fosd_slot *)r;
}
static inline fosd_rqsrv *fosd_tp_rq(fosd_tpsrv *t)
{
	return (fosd_rqsrv *)t;
}
/* The transport's server a requests-stage server is the first part of (the one server is). */
static inline fosd_tpsrv *fosd_tp_of(fosd_rqsrv *r)
{
	return (fosd_tpsrv *)r;
}

/* transport.c */
int fosd_transport_start(fosd_tpsrv *srv, char *msg, size_t msgsz);
void fosd_transport_stop_listening(fosd_tpsrv *srv);
void fosd_transport_close(fosd_tpsrv *srv);
/* slot.c: a request arrived on slot s (nng or channel): counts it in flight, and as accepted
 * unless a drain has begun. */
void fosd_slot_begin(fosd_tpsrv *srv, fosd_slot *s);
/* The slot's reply has left (sent, failed, written into a channel, or none was made): releases
 * what the request held (tenant quota, connection share, the drain's count). */
void fosd_slot_end(fosd_slot *s);

#endif
