/* dispatch.h: the requests stage's entry (dispatch.c), called by a transport with a received
 * message in a slot. */
#ifndef FOSD_DISPATCH_H
#define FOSD_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct fosd_server fosd_server;
typedef struct fosd_slot fosd_slot;
typedef struct fosd_device fosd_device;

/* dispatch.c: called by a transport with s->msg set (and s->send, s->pipe). */
void fosd_dispatch(fosd_slot *s);
/* For a transport that could not even make a message of what arrived: answers code and message
 * (request id 0) as an invalid op. */
void fosd_dispatch_refuse(fosd_slot *s, int code, const char *message);

#endif
