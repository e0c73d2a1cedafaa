/* reply.h: the last stage of a request: building its Response message and handing it to the
 * transport the request came from.
 *
 * Every transport (the nng socket, transport.c; a request channel, chan.c) sets its reply function
 * on each of its slots (fosd_slot.send). fosd_slot_reply records the request's metrics, frees what
 * the request decoded and calls that function, which sends the reply (or nothing), then, once the
 * reply has left, calls fosd_slot_end. Nothing upstream of this file knows which transport a
 * request came from. */
#ifndef FOSD_REPLY_H
#define FOSD_REPLY_H

#include <stdint.h>

#include <nng/nng.h>

#include "backend.h"
#include "fos_wire.h"
#include "fos.pb-c.h"
#include "shm.h"
#include "rc_code.h"

struct fosd_slot;

/* Packs a Response whose tensors are placed by pl (NULL: none); *data gets the data section.
 * NULL when out of memory. */
nng_msg *fosd_build_reply(Fos__Response *resp, const fosw_placer *pl, uint8_t **data);
/* An error Response for request id. Never NULL unless out of memory. */
nng_msg *fosd_error_reply(uint64_t id, int code, const char *message);

/* Answers the slot's request with reply (NULL: none, the client times out) and code, through the
 * slot's transport; the slot then serves the next request. Takes reply. Safe from any thread. */
void fosd_slot_reply(struct fosd_slot *s, nng_msg *reply, int code);
/* Completes a request: answers it and every duplicate that waited on it (each gets a copy), then
 * ends its duplicate-detection entry. */
void fosd_finish(struct fosd_slot *s, nng_msg *reply, int code);

/* What a request answered before its GPU work ended (executor.c, Response.cuda_done_event) still
 * needs until that work is done: its message (a source of queued h2d copies), its decoded request
 * and its references to shared-memory regions and to the client's GPU memory (which keep those
 * mapped). fosd_slot_hold moves them out of the slot, whose answer then frees none of them;
 * fosd_held_end frees them. */
typedef struct fosd_held {
	nng_msg *msg;
	Fos__Request *rq;
	fosd_shm_req shm;
} fosd_held;
void fosd_slot_hold(struct fosd_slot *s, fosd_held *h);
void fosd_held_end(fosd_held *h);

#endif
