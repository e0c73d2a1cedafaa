/* dedup.c: duplicate request detection (see dedup.h): a hash table of (client_id, id) entries in
 * one fixed mapping (entries, then buckets); done entries are kept in arrival order and forgotten
 * after the window, or early when a new request needs their room. Invariants: n_live entries are
 * in the buckets, the others of [0, fresh) on the free list; n_done of the live ones are on the
 * fifo, oldest first. */
#include "dedup.h"
#include "dispatch.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* the config key's help (config.c) and PROTOCOL.md count 64 bytes an id */
_Static_assert(FOSD_DEDUP_ENTRY_BYTES == 64, "a remembered id costs 64 bytes");

int fosd_dedup_init(fosd_dedup *dd, uint64_t window_ms, uint64_t max_bytes)
{
	memset(dd, 0, sizeof *dd);
	if (max_bytes < FOSD_DEDUP_MIN_BYTES || max_bytes > ((uint64_t)1 << 40))
		return -1;
	dd->window_ns = window_ms * 1000000ull;
	dd->cap = (size_t)(max_bytes / FOSD_DEDUP_ENTRY_BYTES);
	dd->nbuckets = dd->cap;
	dd->map_bytes = dd->cap * FOSD_DEDUP_ENTRY_BYTES;
	/* zero-filled on first touch: only the entries and buckets used cost memory */
	dd->map = mmap(NULL, dd->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		       0);
	if (dd->map == MAP_FAILED) {
		dd->map = NULL;
		return -1;
	}
	dd->pool = dd->map;
	dd->buckets = (fosd_dedup_entry **)(dd->pool + dd->cap);
	if (pthread_mutex_init(&dd->mu, NULL)) {
		munmap(dd->map, dd->map_bytes);
		dd->map = NULL;
		return -1;
	}
	return 0;
}

void fosd_dedup_destroy(fosd_dedup *dd)
{
	if (!dd->map)
		return;
	munmap(dd->map, dd->map_bytes);
	dd->map = NULL;
	pthread_mutex_destroy(&dd->mu);
}

static size_t dd_bucket(const fosd_dedup *dd, uint64_t c, uint64_t r)
{
	uint64_t h = (c ^ (r * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
	return (size_t)(h >> 32) % dd->nbuckets;
}

static fosd_dedup_entry **dd_find(fosd_dedup *dd, uint64_t c, uint64_t r)
{
	fosd_dedup_entry **pp = &dd->buckets[dd_bucket(dd, c, r)];
	while (*pp && ((*pp)->client_id != c || (*pp)->req_id != r))
		pp = &(*pp)->hnext;
	return pp;
}

/* Unlinks e (in its chain) and puts it on the free list. Called with mu held. */
static void dd_forget(fosd_dedup *dd, fosd_dedup_entry *e)
{
	fosd_dedup_entry **pp = dd_find(dd, e->client_id, e->req_id);
	if (*pp == e)
		*pp = e->hnext;
	e->hnext = dd->free_list;
	dd->free_list = e;
	dd->n_live--;
}

/* Forgets the oldest done entry. Called with mu held and the fifo not empty. */
static void dd_pop_oldest(fosd_dedup *dd)
{
	fosd_dedup_entry *e = dd->fifo_head;
	dd->fifo_head = e->fnext;
	if (!dd->fifo_head)
		dd->fifo_tail = NULL;
	dd->n_done--;
	dd_forget(dd, e);
}

/* Forgets the done entries past the window. Called with mu held. */
static void dd_expire(fosd_dedup *dd, uint64_t now)
{
	while (dd->fifo_head && dd->fifo_head->done_ns + dd->window_ns < now)
		dd_pop_oldest(dd);
}

/* A free entry: a returned one, a never used one, or the oldest done one; NULL when every entry
 * holds a running request. Called with mu held. */
static fosd_dedup_entry *dd_take(fosd_dedup *dd)
{
	if (!dd->free_list) {
		if (dd->fresh < dd->cap)
			return &dd->pool[dd->fresh++];
		if (!dd->fifo_head)
			return NULL;
		dd_pop_oldest(dd);
		dd->evicted++;
	}
	fosd_dedup_entry *e = dd->free_list;
	dd->free_list = e->hnext;
	return e;
}

int fosd_dedup_begin(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, struct fosd_request *s, int *registered)
{
	*registered = 0;
	pthread_mutex_lock(&dd->mu);
	dd_expire(dd, fosd_now_ns());
	fosd_dedup_entry **pp = dd_find(dd, client_id, req_id);
	if (*pp) {
		fosd_dedup_entry *e = *pp;
		int rc = FOSD_DEDUP_DONE;
		if (!e->done) {
			s->wnext = e->waiters;
			e->waiters = s;
			rc = FOSD_DEDUP_WAIT;
		}
		pthread_mutex_unlock(&dd->mu);
		return rc;
	}
	fosd_dedup_entry *e = dd_take(dd);
	if (e) {
		memset(e, 0, sizeof *e);
		e->client_id = client_id;
		e->req_id = req_id;
		/* taking the oldest done entry may have changed the chain: find the end again */
		pp = dd_find(dd, client_id, req_id);
		*pp = e;
		dd->n_live++;
		*registered = 1;
	}
	pthread_mutex_unlock(&dd->mu);
	return FOSD_DEDUP_NEW;
}

int fosd_dedup_abandon(fosd_dedup *dd, uint64_t client_id, uint64_t req_id)
{
	int gone = 1;
	pthread_mutex_lock(&dd->mu);
	fosd_dedup_entry *e = *dd_find(dd, client_id, req_id);
	if (e && !e->done) {
		if (e->waiters)
			gone = 0;
		else
			dd_forget(dd, e);
	}
	pthread_mutex_unlock(&dd->mu);
	return gone;
}

struct fosd_request *fosd_dedup_end(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, uint64_t now_ns)
{
	struct fosd_request *w = NULL;
	pthread_mutex_lock(&dd->mu);
	fosd_dedup_entry *e = *dd_find(dd, client_id, req_id);
	if (e && !e->done) {
		w = e->waiters;
		e->waiters = NULL;
		e->done = 1;
		e->done_ns = now_ns;
		e->fnext = NULL;
		if (dd->fifo_tail)
			dd->fifo_tail->fnext = e;
		else
			dd->fifo_head = e;
		dd->fifo_tail = e;
		dd->n_done++;
		dd_expire(dd, now_ns);
	}
	pthread_mutex_unlock(&dd->mu);
	return w;
}

void fosd_dedup_get_stats(fosd_dedup *dd, fosd_dedup_stats *out)
{
	pthread_mutex_lock(&dd->mu);
	out->capacity = dd->cap;
	out->live = dd->n_live;
	out->done = dd->n_done;
	out->bytes = dd->map_bytes;
	/* the entries handed out so far, and the buckets (hashed anywhere: counted whole) */
	out->touched = dd->fresh * sizeof(fosd_dedup_entry) + dd->nbuckets * sizeof(fosd_dedup_entry *);
	out->evicted = dd->evicted;
	pthread_mutex_unlock(&dd->mu);
}
