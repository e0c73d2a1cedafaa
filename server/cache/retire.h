/* retire.h: how the caches free device memory that several lanes may read (weight entries, saved
 * contexts). A device with several executor lanes reads that memory from several streams, and an
 * asynchronous request's reads may still be queued when its last reference goes, so the caches
 * hand each such free to the device's retirer (set by the executor, executor/retire.c), which runs
 * it once every request that had begun on any lane when it was handed over has completed its
 * device work. Without a retirer (no executor yet; the caches' own tests) the free runs at once.
 * The free function may run on any thread. */
#ifndef FOSD_RETIRE_H
#define FOSD_RETIRE_H

#include "backend.h"

/* Frees obj, which owner (a cache) kept. */
typedef void (*fosd_free_fn)(void *owner, void *obj);

typedef struct fosd_retirer {
	void (*defer)(void *arg, fosd_free_fn fn, void *owner, void *obj); /* NULL: free at once */
	/* Marks (backend events) of what a cache frees go back to a pool instead of being destroyed,
	 * and a new mark comes from it (NULL: none there, make one): a mark is recorded per weight
	 * put and per saved context of an asynchronous request. A pooled mark is recorded again only
	 * after the free ran, when no request can still wait on its old record. NULL: no pool. */
	void (*mark_put)(void *arg, void *ev);
	void *(*mark_get)(void *arg);
	void *arg;
} fosd_retirer;

/* Gives back mark ev of a freed object: to the pool, else destroyed through be. */
static inline void fosd_retire_mark(const fosd_retirer *r, fos_backend *be, void *ev)
{
	if (!ev)
		return;
	if (r->mark_put)
		r->mark_put(r->arg, ev);
	else if (be->mark_free)
		be->mark_free(be, ev);
}

static inline void fosd_retire(const fosd_retirer *r, fosd_free_fn fn, void *owner, void *obj)
{
	if (r->defer)
		r->defer(r->arg, fn, owner, obj);
	else
		fn(owner, obj);
}

#endif
