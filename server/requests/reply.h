/* reply.h: the answer of a request: recording it and handing the reply to the transport it came
 * from (the Response itself is built by response.h's builders).
 *
 * Every transport (the nng socket, transport.c; a request channel, chan.c) sets its reply function
 * on each of its requests (fosd_request.send). fosd_slot_reply records the request's metrics, frees
 * what the request decoded and calls that function, which sends the reply (or nothing), then,
 * once the reply has left, releases the slot. Nothing upstream of this file knows which transport a
 * request came from. The executor reaches fosd_finish and fosd_drop_if_client_gone through its
 * hooks (fosd_exec.finish, .drop_if_gone, set by the server). */
#ifndef FOSD_REPLY_H
#define FOSD_REPLY_H

#include <stdint.h>

#include <nng/nng.h>

#include "dispatch.h"
#include "response.h"

/* Answers the request with reply (NULL: none, the client times out) and code, through its
 * transport; the slot then serves the next request. Takes reply. Safe from any thread. */
void fosd_slot_reply(fosd_request *r, nng_msg *reply, int code);
/* Completes a request: answers it and every duplicate that waited on it (each gets a copy), then
 * ends its duplicate-detection entry. (fosd_exec.finish) */
void fosd_finish(fosd_job *j, nng_msg *reply, int code);
/* Drops the request if its client's connection is gone and no resent copy waits on it: the slot
 * serves again, nothing is sent. Returns 1 when dropped, 0 to run it. (fosd_exec.drop_if_gone) */
int fosd_drop_if_client_gone(fosd_job *j);

#endif
