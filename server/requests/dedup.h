/* dedup.h: duplicate request detection. A request is identified by (client_id, id); a second copy
 * arriving while the first runs waits for the first's reply, and one arriving after it finished
 * (within the window, up to a bounded number of remembered ids) is answered ABORTED and never
 * executed again. */
#ifndef FOSD_DEDUP_H
#define FOSD_DEDUP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct fosd_slot;

typedef struct fosd_dedup_entry {
	uint64_t client_id, req_id;
	int done;
	uint64_t done_ns;
	struct fosd_slot *waiters;          /* linked by slot->wnext */
	struct fosd_dedup_entry *hnext;     /* hash chain */
	struct fosd_dedup_entry *fnext;     /* done entries, oldest first */
} fosd_dedup_entry;

typedef struct fosd_dedup {
	pthread_mutex_t mu;
	fosd_dedup_entry **buckets;
	size_t nbuckets;
	fosd_dedup_entry *fifo_head, *fifo_tail;
	size_t n_done, max_done;
	uint64_t window_ns;
} fosd_dedup;

enum { FOSD_DEDUP_NEW = 0, FOSD_DEDUP_WAIT = 1, FOSD_DEDUP_DONE = 2 };

int fosd_dedup_init(fosd_dedup *dd, uint64_t window_ms, size_t max_done);
void fosd_dedup_destroy(fosd_dedup *dd);
/* NEW: registered as running (call fosd_dedup_end when answered); WAIT: s was queued behind the
 * running copy (it is answered by whoever ends it); DONE: executed before. On out of memory the
 * request is treated as NEW without registration (*registered = 0). */
int fosd_dedup_begin(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, struct fosd_slot *s, int *registered);
/* The request will not be executed (its client is gone): forgets it so that a later copy runs,
 * unless copies already wait on it. Returns 1 when forgotten, 0 when copies wait (run it). */
int fosd_dedup_abandon(fosd_dedup *dd, uint64_t client_id, uint64_t req_id);
/* Marks the request done; returns the slots that waited on it (linked by wnext). */
struct fosd_slot *fosd_dedup_end(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, uint64_t now_ns);

#endif
