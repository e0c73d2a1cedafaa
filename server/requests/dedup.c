/* dedup.c: duplicate request detection (see dedup.h): a hash table of (client_id, id) entries;
 * done entries are kept in arrival order and forgotten after the window or past max_done. */
#include "dedup.h"
#include "server.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

int fosd_dedup_init(fosd_dedup *dd, uint64_t window_ms, size_t max_done)
{
	memset(dd, 0, sizeof *dd);
	dd->nbuckets = 16384;
	dd->max_done = max_done;
	dd->window_ns = window_ms * 1000000ull;
	dd->buckets = calloc(dd->nbuckets, sizeof *dd->buckets);
	if (!dd->buckets)
		return -1;
	if (pthread_mutex_init(&dd->mu, NULL)) {
		free(dd->buckets);
		return -1;
	}
	return 0;
}

void fosd_dedup_destroy(fosd_dedup *dd)
{
	for (size_t b = 0; b < dd->nbuckets; b++) {
		fosd_dedup_entry *e = dd->buckets[b];
		while (e) {
			fosd_dedup_entry *n = e->hnext;
			free(e);
			e = n;
		}
	}
	free(dd->buckets);
	dd->buckets = NULL;
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

/* Forgets the oldest done entries past the window or the count limit. Called with mu held. */
static void dd_trim(fosd_dedup *dd, uint64_t now)
{
	while (dd->fifo_head && (dd->n_done > dd->max_done || dd->fifo_head->done_ns + dd->window_ns < now)) {
		fosd_dedup_entry *e = dd->fifo_head;
		dd->fifo_head = e->fnext;
		if (!dd->fifo_head)
			dd->fifo_tail = NULL;
		fosd_dedup_entry **pp = dd_find(dd, e->client_id, e->req_id);
		if (*pp == e)
			*pp = e->hnext;
		free(e);
		dd->n_done--;
	}
}

int fosd_dedup_begin(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, struct fosd_slot *s, int *registered)
{
	*registered = 0;
	pthread_mutex_lock(&dd->mu);
	dd_trim(dd, fosd_now_ns());
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
	fosd_dedup_entry *e = calloc(1, sizeof *e);
	if (e) {
		e->client_id = client_id;
		e->req_id = req_id;
		*pp = e;
		*registered = 1;
	}
	pthread_mutex_unlock(&dd->mu);
	return FOSD_DEDUP_NEW;
}

int fosd_dedup_abandon(fosd_dedup *dd, uint64_t client_id, uint64_t req_id)
{
	int gone = 1;
	pthread_mutex_lock(&dd->mu);
	fosd_dedup_entry **pp = dd_find(dd, client_id, req_id);
	fosd_dedup_entry *e = *pp;
	if (e && !e->done) {
		if (e->waiters) {
			gone = 0;
		} else {
			*pp = e->hnext;
			free(e);
		}
	}
	pthread_mutex_unlock(&dd->mu);
	return gone;
}

struct fosd_slot *fosd_dedup_end(fosd_dedup *dd, uint64_t client_id, uint64_t req_id, uint64_t now_ns)
{
	struct fosd_slot *w = NULL;
	pthread_mutex_lock(&dd->mu);
	fosd_dedup_entry **pp = dd_find(dd, client_id, req_id);
	fosd_dedup_entry *e = *pp;
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
		dd_trim(dd, now_ns);
	}
	pthread_mutex_unlock(&dd->mu);
	return w;
}
