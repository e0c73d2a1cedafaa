/* server.h: the fosd server object that ties the stages together (server.c: its making, the
 * devices and the hooks through which a lower stage reaches the one above it).
 *
 * A request goes one way:
 *   transport (transport.c: the nng socket; chan.c: a request channel) receives it into a slot
 *   -> dispatch.c decodes it, checks the connection's share and the token, validates it
 *      (validate.c, through the op's row of the op table, optable.c), answers inline ops at once
 *      and hands the rest to the executor
 *   -> executor.c queues it, gives it a lane and runs the op's handler (ops_*.c) with the lane's
 *      backend in an op context (optable.h)
 *   -> the executor answers through its finish hook: reply.c records the request and calls the
 *      send function its transport set, which sends the reply and frees the slot once it has
 *      left. */
#ifndef FOSD_SERVER_H
#define FOSD_SERVER_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "transport.h"

/* The server: one struct whose parts are the stages' own (each begins with the part of the stage
 * below it, embedded unnamed, so every field is reached by its name from here):
 *   fosd_opsrv  (ops.h)       what an op sees: configuration, devices' resources, regions, hooks
 *   fosd_exec   (executor.h)  the devices' executors, the deadline reaper, the answering hooks
 *   fosd_rqsrv  (dispatch.h)  metrics, duplicate detection, tenants, connection shares
 *   fosd_tpsrv  (transport.h) the socket, its listeners and slots, request channels, counts
 * and a request's state (fosd_slot, transport.h) likewise: fosd_opreq, fosd_job, fosd_request.
 * A lower stage is handed the pointer to its own part (fosd_srv_tp and the stages' converters);
 * the upcalls it needs are the hooks fosd_server_init sets (stats_result, chan_start, finish,
 * drop_if_gone). */
typedef struct fosd_server {
	fosd_tpsrv;
} fosd_server;

static inline fosd_tpsrv *fosd_srv_tp(fosd_server *srv)
{
	return (fosd_tpsrv *)srv;
}
static inline fosd_rqsrv *fosd_srv_rq(fosd_server *srv)
{
	return (fosd_rqsrv *)srv;
}
static inline fosd_exec *fosd_srv_exec(fosd_server *srv)
{
	return (fosd_exec *)srv;
}
static inline fosd_opsrv *fosd_srv_ops(fosd_server *srv)
{
	return (fosd_opsrv *)srv;
}

/* Initializes everything but the transport and the executors, with one device per backend of be
 * (n of them, 1 <= n <= FOSD_MAX_DEVICES; ordinals: their CUDA ordinals or stand-in numbers); the
 * backends are owned by the server after, also on failure. */
int fosd_server_init(fosd_server *srv, fosd_config *cfg, fos_backend **be, const int *ordinals, int n, char *msg,
		     size_t msgsz);
/* Frees the caches and the backend (after transport and executor are stopped). */
void fosd_server_destroy(fosd_server *srv);

/* the stages' functions, each in its folder's header */
#include "deadline.h"
#include "reply.h"
#include "control.h"

#endif
