/* chan.h: request channels (proto/fos_chan.h has the layout; PROTOCOL.md "Request channels"): a
 * registered region through which a same-host client hands fosd whole request messages with a
 * doorbell instead of the socket. fosd serves each channel on a thread of its own, which takes a
 * request, runs it exactly as one received on the connection that registered the region, and
 * writes the reply back; the thread polls for the next request for a while after each reply, then
 * sleeps on a futex. */
#ifndef FOSD_CHAN_H
#define FOSD_CHAN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>

struct fosd_tpsrv;
struct fosd_opsrv;
struct fosd_opreq;
struct fosd_region;

#define FOSD_CHAN_MAX_PER_PIPE 8
#define FOSD_CHAN_MAX_TOTAL 64

typedef struct fosd_chan fosd_chan;

/* The server's channels (in fosd_tpsrv, transport.h). */
typedef struct fosd_chans {
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* a channel's thread ended */
	fosd_chan *head;
	int count;
	int max_total;          /* channels in all: FOSD_CHAN_MAX_TOTAL, or fewer (fdlimit.c) */
	int closed;             /* fosd_chans_stop_all ran: no new channel starts */
	atomic_uint_fast64_t requests;
} fosd_chans;

int fosd_chans_init(fosd_chans *cs);
/* Stops every channel and waits for their threads (before the executor stops). */
void fosd_chans_stop_all(struct fosd_tpsrv *srv);
void fosd_chans_destroy(fosd_chans *cs);
uint64_t fosd_chans_count(fosd_chans *cs);

/* Starts serving region r (referenced by the caller; the reference passes to the channel, also on
 * failure) as a channel of the request s's connection and tenant; spin_us 0: the default. Returns
 * 0 with *bytes (each area's size), or a gRPC code with msg. */
int fosd_chan_start(struct fosd_tpsrv *srv, struct fosd_opreq *s, struct fosd_region *r, uint32_t spin_us,
		    uint64_t *bytes, char *msg, size_t msgsz);
/* fosd_chan_start as the RegisterRegion op reaches it (fosd_opsrv.chan_start, set by the server):
 * srv is the transport's server, s the op's request of one of its slots. */
int fosd_chan_start_op(struct fosd_opsrv *srv, struct fosd_opreq *s, struct fosd_region *r, uint32_t spin_us,
		       uint64_t *bytes, char *msg, size_t msgsz);
/* Asks a channel to stop (its region was unregistered or its connection closed). Does not block;
 * called with the region table's lock held. */
void fosd_chan_signal(fosd_chan *c);

#endif
