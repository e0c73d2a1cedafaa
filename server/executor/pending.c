/* pending.c: one lane's requests that were answered before their GPU work ended (asynchronous
 * requests, executor.c) and the resources they still hold (their message, the client mappings
 * they use): a ring of at most FOSD_PENDING_MAX items, oldest first, each with a plain event (a
 * "mark") recorded on the lane after its work. An item is released when its mark has completed
 * (fosd_pending_poll, from the deadline reaper's thread) or at the next settle (the lane
 * synchronized: fosd_pending_settle, before anything that is not an asynchronous request runs on
 * the device, or when the lane's request fails). Marks complete in the order they were recorded
 * (one stream), so the ring is released from its head. A backend without marks (the cpu stand-in
 * of the tests) releases only at settles.
 *
 * Locking: mu guards the ring; add and settle are called by whoever holds the lane (its running
 * request, or the gate with no asynchronous request running); poll only queries events
 * (thread-safe) and may run beside them. Items are released outside mu. */
#include "pending.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct pend_slot {
	void *item;
	void *ev; /* the slot's mark, made on first use and reused */
} pend_slot;

struct fosd_pending {
	pthread_mutex_t mu;
	fos_backend *be;
	fosd_pending_release_fn release;
	pend_slot ring[FOSD_PENDING_MAX];
	size_t head, n; /* the oldest item's index; items held */
};

fosd_pending *fosd_pending_new(fos_backend *be0, fosd_pending_release_fn release)
{
	fosd_pending *p = calloc(1, sizeof *p);
	if (!p || pthread_mutex_init(&p->mu, NULL)) {
		free(p);
		return NULL;
	}
	p->be = be0;
	p->release = release;
	return p;
}

/* Takes the first k items out of the ring (under mu) into out. */
static size_t take_locked(fosd_pending *p, size_t k, void **out)
{
	for (size_t i = 0; i < k; i++) {
		pend_slot *s = &p->ring[(p->head + i) % FOSD_PENDING_MAX];
		out[i] = s->item;
		s->item = NULL;
	}
	p->head = (p->head + k) % FOSD_PENDING_MAX;
	p->n -= k;
	return k;
}

static void release_all(fosd_pending *p, void **items, size_t k)
{
	for (size_t i = 0; i < k; i++)
		p->release(items[i]);
}

int fosd_pending_settle(fosd_pending *p, fos_err *e)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	size_t n = p->n;
	pthread_mutex_unlock(&p->mu);
	if (!n)
		return 0;
	int rc = p->be->sync(p->be, e);
	void *items[FOSD_PENDING_MAX];
	pthread_mutex_lock(&p->mu);
	size_t k = take_locked(p, p->n, items);
	pthread_mutex_unlock(&p->mu);
	release_all(p, items, k);
	return rc ? -1 : 0;
}

int fosd_pending_add(fosd_pending *p, void *item, fos_err *e)
{
	pthread_mutex_lock(&p->mu);
	int full = p->n == FOSD_PENDING_MAX;
	pthread_mutex_unlock(&p->mu);
	if (full && fosd_pending_settle(p, e))
		return -1;
	pthread_mutex_lock(&p->mu);
	pend_slot *s = &p->ring[(p->head + p->n) % FOSD_PENDING_MAX];
	void *ev = s->ev;
	pthread_mutex_unlock(&p->mu);
	/* the slot is past the ring's end: only this caller (holding the gate) writes it */
	if (p->be->mark_record && p->be->mark_record(p->be, &ev, e))
		return -1;
	pthread_mutex_lock(&p->mu);
	s->ev = ev;
	s->item = item;
	p->n++;
	pthread_mutex_unlock(&p->mu);
	return 0;
}

size_t fosd_pending_poll(fosd_pending *p)
{
	if (!p || !p->be->mark_done)
		return 0;
	void *items[FOSD_PENDING_MAX];
	pthread_mutex_lock(&p->mu);
	size_t k = 0;
	while (k < p->n && p->be->mark_done(p->be, p->ring[(p->head + k) % FOSD_PENDING_MAX].ev) == 1)
		k++;
	take_locked(p, k, items);
	size_t left = p->n;
	pthread_mutex_unlock(&p->mu);
	release_all(p, items, k);
	return left;
}

size_t fosd_pending_count(fosd_pending *p)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	size_t n = p->n;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void fosd_pending_free(fosd_pending *p)
{
	if (!p)
		return;
	fos_err e;
	memset(&e, 0, sizeof e);
	(void)fosd_pending_settle(p, &e);
	for (size_t i = 0; i < FOSD_PENDING_MAX; i++)
		if (p->ring[i].ev && p->be->mark_free)
			p->be->mark_free(p->be, p->ring[i].ev);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
