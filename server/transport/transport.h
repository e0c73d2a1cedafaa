/* transport.h: the transport's functions (transport.c: the nng socket and its listeners;
 * slot.c: a request's arrival and end). The slot's fields the transport keeps: server.h. */
#ifndef FOSD_TRANSPORT_H
#define FOSD_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct fosd_server fosd_server;
typedef struct fosd_slot fosd_slot;
typedef struct fosd_device fosd_device;

/* transport.c */
int fosd_transport_start(fosd_server *srv, char *msg, size_t msgsz);
void fosd_transport_stop_listening(fosd_server *srv);
void fosd_transport_close(fosd_server *srv);
/* slot.c: a request arrived on slot s (nng or channel): counts it in flight, and as accepted
 * unless a drain has begun. */
void fosd_slot_begin(fosd_server *srv, fosd_slot *s);
/* The slot's reply has left (sent, failed, written into a channel, or none was made): releases
 * what the request held (tenant quota, connection share, the drain's count). */
void fosd_slot_end(fosd_slot *s);

#endif
