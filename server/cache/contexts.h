/* contexts.h: saved forward contexts (what a backward needs, NUMERICS.md section 8) by random
 * 64-bit id, with a TTL and a memory budget (oldest evicted first). A context holds a reference on
 * its weight entry, so the backward uses exactly the weight of its forward.
 *
 * Locking: cx->mu guards the table; asynchronous requests on different lanes add, find and remove
 * contexts at once, so a context found (get) may be evicted by another lane's add before its
 * backward removes it: removal is idempotent (linked), and the free is retired (retire.h) until
 * every request begun before it ended, the backward that still reads it included. */
#ifndef FOSD_CONTEXTS_H
#define FOSD_CONTEXTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "retire.h"
#include "wcache.h"

typedef struct fosd_context {
	uint64_t id;
	fos_saved saved;
	fosd_weight *w; /* reference held */
	size_t bytes;
	uint64_t expires_ns;
	int linked;     /* in the table (a backward on one lane may find it evicted by another's add) */
	/* Saved by an asynchronous forward: a mark recorded on its lane's stream after the saved
	 * operands' work (a backward on another lane makes its stream wait for it), and that lane;
	 * NULL: the forward synchronized. Freed with the context. */
	void *made_ev;
	int made_lane;
	struct fosd_context *hnext;       /* hash chain */
	struct fosd_context *prev, *next; /* age list, oldest first */
} fosd_context;

#define FOSD_CTX_TOMBSTONES 1024

typedef struct fosd_contexts {
	pthread_mutex_t mu;
	fos_backend *be;     /* frees saved operands (any thread may use it) */
	fosd_retirer retire; /* contexts are freed through it (retire.h) */
	fosd_wcache *wc;
	uint64_t budget, bytes, count, ttl_ms;
	uint64_t expired, evicted;
	fosd_context **buckets;
	size_t nbuckets;
	fosd_context *oldest, *newest;
	/* recently removed ids and why, for precise NOT_FOUND messages */
	uint64_t tomb_id[FOSD_CTX_TOMBSTONES];
	uint8_t tomb_why[FOSD_CTX_TOMBSTONES];
	const fosd_tenant *tomb_owner[FOSD_CTX_TOMBSTONES];
	unsigned tomb_next;
} fosd_contexts;

enum { FOSD_CTX_RELEASED = 1, FOSD_CTX_EXPIRED = 2, FOSD_CTX_EVICTED = 3, FOSD_CTX_CONSUMED = 4 };

int fosd_contexts_init(fosd_contexts *cx, fos_backend *be, fosd_wcache *wc, uint64_t budget, uint64_t ttl_ms);
void fosd_contexts_destroy(fosd_contexts *cx);

/* 2: owner's context id is here; 1: it was here recently (released, expired, evicted or used up:
 * its NOT_FOUND message says which); 0: neither. For readers without the backend lock (placement). */
int fosd_contexts_knows(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id);
/* Takes ownership of c (its saved operands and its weight reference): evicts the oldest contexts
 * until it fits the budget, assigns its id (c->id when nonzero: an id the client chose, else a random
 * one) and expiry. Returns 0, or RESOURCE_EXHAUSTED or (a chosen id that is live) ALREADY_EXISTS
 * with msg (c is then freed).
 * A context belongs to the tenant of its weight (c->w->owner). Its tenant's context quota is
 * applied first, by evicting only that tenant's oldest contexts; then the global budget, evicting
 * the tenant's own oldest contexts before anyone else's. */
int fosd_contexts_add(fosd_contexts *cx, fosd_context *c, char *msg, size_t msgsz);
/* The live context of this id, or NOT_FOUND with msg (an expired one is freed here). */
int fosd_contexts_get(fosd_contexts *cx, uint64_t id, fosd_context **out, char *msg, size_t msgsz);
/* Removes and frees a context (why: FOSD_CTX_*); nothing when another already removed it. */
void fosd_contexts_remove(fosd_contexts *cx, fosd_context *c, int why);
/* ReleaseContext: 0 or NOT_FOUND with msg. */
int fosd_contexts_release(fosd_contexts *cx, uint64_t id, char *msg, size_t msgsz);
/* The same for the contexts of tenant owner (NULL: anonymous; the two above are these with NULL).
 * Another tenant's context is NOT_FOUND with the message of an id that never existed. */
int fosd_contexts_get_in(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id, fosd_context **out, char *msg,
			 size_t msgsz);
int fosd_contexts_release_in(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id, char *msg, size_t msgsz);
/* Frees every context past its expiry; returns how many. */
uint64_t fosd_contexts_sweep(fosd_contexts *cx, uint64_t now_ns);
/* Frees a context that was never added (its saved operands and weight reference). */
void fosd_context_free(fosd_contexts *cx, fosd_context *c);

typedef struct fosd_contexts_stats {
	uint64_t count, bytes, budget, expired, evicted;
} fosd_contexts_stats;
void fosd_contexts_stats_get(fosd_contexts *cx, fosd_contexts_stats *st);

#endif
