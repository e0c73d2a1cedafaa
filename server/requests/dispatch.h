/* dispatch.h: the requests stage's part of the server's and of a request's state, and its entry
 * (dispatch.c), called by a transport with a received message.
 *
 * fosd_request begins with the executor's fosd_job and fosd_rqsrv with its fosd_exec (executor.h),
 * embedded unnamed: the fields keep their names, and a pointer to the whole is a pointer to that
 * first part (fosd_request_job, fosd_rq_exec; back: fosd_request_of). The transport's slot and
 * server (transport.h) begin with these in turn. */
#ifndef FOSD_DISPATCH_H
#define FOSD_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "conns.h"
#include "dedup.h"
#include "executor.h"
#include "metrics.h"
#include "tenants.h"

struct fosd_rqsrv;

/* A request as the requests stage keeps it. The transport sets srv, send, pipe, conn_verdict
 * (and the job's msg, t_recv_ns, own_thread) before fosd_dispatch; dispatch.c, auth.c and dedup.c
 * the rest. */
typedef struct fosd_request {
	fosd_job;
	struct fosd_rqsrv *srv;
	/* the transport's reply function (reply.h): sends reply (NULL: none), then, once it has left,
	 * releases what the transport holds and serves the next request */
	void (*send)(struct fosd_request *r, nng_msg *reply);
	uint64_t bytes_in;
	nng_pipe pipe;              /* the connection the request came from */
	int conn_verdict;           /* enum fosd_conn_verdict of the request's arrival (conns.h) */
	int unauth_held;            /* counted as an unauthenticated request of the pipe */
	uint64_t client_id;         /* for duplicate detection (0: none) */
	int dedup_owner;            /* this request executes the one others may wait on */
	struct fosd_request *wnext; /* waiters on a duplicate in flight */
	int tenant_counted;         /* counted in tenant->inflight until answered */
} fosd_request;

/* What the requests stage keeps of the server. */
typedef struct fosd_rqsrv {
	fosd_exec;
	fosd_metrics metrics;
	fosd_dedup dd;
	fosd_tenants *tenants; /* NULL: no tokens file, one anonymous tenant (auth.c) */
	fosd_conns conns;      /* per-connection shares of the slots (conns.c) */
} fosd_rqsrv;

static inline fosd_job *fosd_request_job(fosd_request *r)
{
	return (fosd_job *)r;
}
/* The request a job of this stage's is the first part of (every job is). */
static inline fosd_request *fosd_request_of(fosd_job *j)
{
	return (fosd_request *)j;
}
static inline fosd_exec *fosd_rq_exec(fosd_rqsrv *r)
{
	return (fosd_exec *)r;
}

/* dispatch.c: called by a transport with r->msg set (and r->send, r->pipe). */
void fosd_dispatch(fosd_request *r);
/* For a transport that could not even make a message of what arrived: answers code and message
 * (request id 0) as an invalid op. */
void fosd_dispatch_refuse(fosd_request *r, int code, const char *message);

#endif
