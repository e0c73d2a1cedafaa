/* conns.h: the per-connection share of fosd's request slots (conns.c).
 *
 * Every nng pipe (client connection) has an entry from the pipe's ADD_PRE event to its REM_POST
 * event. A slot that received a request from a pipe holds one unit of that pipe's share from the
 * receive until the reply has left (its send completed or failed) or no reply is sent. The policy
 * (proto/PROTOCOL.md "Fairness"):
 *   - a connection may have `share` requests in progress; one more is answered RESOURCE_EXHAUSTED
 *     at once (the refusal holds a slot until it is sent);
 *   - a connection holding `share + FOSD_CONN_REFUSALS` slots is not reading its replies: it is
 *     dropped (closed), which fails its pending sends and frees its slots;
 *   - unauthenticated requests (Health without a token on a fosd with tenants) are limited to
 *     FOSD_CONN_UNAUTH in progress per connection, within the share;
 *   - connections past `max` (max_connections) have every request answered RESOURCE_EXHAUSTED;
 *     past max + FOSD_CONN_OVER_KEPT they are closed as they connect.
 * The counters feed Stats and /metrics. All functions are thread-safe. */
#ifndef FOSD_CONNS_H
#define FOSD_CONNS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define FOSD_CONN_REFUSALS 4 /* refusals a connection may leave unread before it is dropped */
#define FOSD_CONN_UNAUTH 4   /* unauthenticated requests in progress per connection */
#define FOSD_CONN_OVER_KEPT 32 /* connections past max kept to be told so; beyond, closed at once */

enum fosd_conn_verdict {
	FOSD_CONN_OK = 0,
	FOSD_CONN_OVER_SHARE, /* answer RESOURCE_EXHAUSTED */
	FOSD_CONN_OVER_MAX,   /* answer RESOURCE_EXHAUSTED: connected past max_connections */
	FOSD_CONN_DROP,       /* close the connection now, no reply */
};

struct fosd_conn;

typedef struct fosd_conns {
	pthread_mutex_t mu;
	struct fosd_conn **buckets;
	uint32_t n_buckets;
	int share; /* requests in progress per connection */
	int max;   /* connections at once; 0: no limit */
	int count; /* connections with an entry */
	atomic_ullong dropped;  /* connections closed for not reading their replies */
	atomic_ullong refused;  /* requests answered RESOURCE_EXHAUSTED by this policy */
	atomic_ullong rejected; /* connections past max */
} fosd_conns;

int fosd_conns_init(fosd_conns *cs, int share, int max);
void fosd_conns_destroy(fosd_conns *cs);
/* A pipe connected: 0 to serve it, -1 to close it at once (past max + FOSD_CONN_OVER_KEPT). */
int fosd_conns_opened(fosd_conns *cs, uint32_t pipe);
void fosd_conns_closed(fosd_conns *cs, uint32_t pipe);
/* A request arrived from pipe: takes one unit of its share (to be given back with
 * fosd_conns_release, whatever the verdict) and says what to do with it; *held gets the units
 * the pipe then holds. */
int fosd_conns_take(fosd_conns *cs, uint32_t pipe, int *held);
void fosd_conns_release(fosd_conns *cs, uint32_t pipe);
/* An unauthenticated request of pipe: 0 when within FOSD_CONN_UNAUTH (give it back with
 * fosd_conns_unauth_release), -1 when over. */
int fosd_conns_unauth_take(fosd_conns *cs, uint32_t pipe);
void fosd_conns_unauth_release(fosd_conns *cs, uint32_t pipe);
/* Counts a connection closed for not reading; returns the new total. */
unsigned long long fosd_conns_note_dropped(fosd_conns *cs);

#endif
