/* dedup.h: duplicate request detection. A request is identified by (client_id, id); a second copy
 * arriving while the first runs waits for the first's reply, and one arriving after it finished
 * (within the window, while the table has room) is answered ABORTED and never executed again.
 *
 * The table's memory is fixed at init: max_bytes buys max_bytes / FOSD_DEDUP_ENTRY_BYTES entries
 * (an entry and its hash bucket), mapped once outside the malloc heap and touched as they are
 * first used, so it never exceeds max_bytes and its long-lived entries do not pin heap pages
 * between the message buffers. When every entry is taken, the oldest done id is forgotten early. */
#ifndef FOSD_DEDUP_H
#define FOSD_DEDUP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct fosd_request;

typedef struct fosd_dedup_entry {
	uint64_t client_id, req_id;
	int done;
	uint64_t done_ns;
	struct fosd_request *waiters;       /* linked by request->wnext */
	struct fosd_dedup_entry *hnext;     /* hash chain; the free list's link when unused */
	struct fosd_dedup_entry *fnext;     /* done entries, oldest first */
} fosd_dedup_entry;

/* the bytes one remembered id costs: its entry and its bucket */
#define FOSD_DEDUP_ENTRY_BYTES (sizeof(fosd_dedup_entry) + sizeof(fosd_dedup_entry *))
/* the least max_bytes (about a thousand ids: more than the requests in flight at once) */
#define FOSD_DEDUP_MIN_BYTES ((uint64_t)64 << 10)

typedef struct fosd_dedup {
	pthread_mutex_t mu;
	void *map;                          /* buckets then entries, map_bytes <= max_bytes */
	size_t map_bytes;
	fosd_dedup_entry **buckets;
	size_t nbuckets;
	fosd_dedup_entry *pool;             /* cap entries; [0, fresh) have been used */
	size_t cap, fresh;
	fosd_dedup_entry *free_list;        /* returned entries, linked by hnext */
	fosd_dedup_entry *fifo_head, *fifo_tail;
	size_t n_live, n_done;              /* entries in the table; of them done */
	uint64_t window_ns;
	uint64_t evicted;                   /* done ids forgotten before their window for room */
} fosd_dedup;

enum { FOSD_DEDUP_NEW = 0, FOSD_DEDUP_WAIT = 1, FOSD_DEDUP_DONE = 2 };

/* max_bytes: the table's memory (below FOSD_DEDUP_MIN_BYTES: -1). -1 also when it cannot be
 * mapped. */
int fosd_dedup_init(fosd_dedup *dd, uint64_t window_ms, uint64_t max_bytes);
void fosd_dedup_destroy(fosd_dedup *dd);
/* NEW: registered as running (call fosd_dedup_end when answered); WAIT: s was queued behind the
 * running copy (it is answered by whoever ends it); DONE: executed before. When no entry is free
 * (every one holds a running request) the request is treated as NEW without registration
 * (*registered = 0). */
int fosd_dedup_begin(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, struct fosd_request *s, int *registered);
/* The request will not be executed (its client is gone): forgets it so that a later copy runs,
 * unless copies already wait on it. Returns 1 when forgotten, 0 when copies wait (run it). */
int fosd_dedup_abandon(fosd_dedup *dd, uint64_t client_id, uint64_t req_id);
/* Marks the request done; returns the requests that waited on it (linked by wnext). */
struct fosd_request *fosd_dedup_end(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, uint64_t now_ns);

typedef struct fosd_dedup_stats {
	size_t capacity, live, done; /* entries the bytes buy; in the table; of them done */
	size_t bytes, touched;       /* mapped; of them used so far (the high-water mark) */
	uint64_t evicted;
} fosd_dedup_stats;
void fosd_dedup_get_stats(fosd_dedup *dd, fosd_dedup_stats *out);

#endif
