/* libfos_cuda_events.c: ordering device tensors by CUDA events instead of host waits
 * (fos_set_cuda_order, fos.h "device tensors"): before a call, an interprocess event recorded on
 * the caller's stream, whose handle fosd's stream waits on (Request.cuda_wait_event); with
 * FOS_CUDA_ORDER_OUTPUTS, after an early reply, the caller's stream made to wait for fosd's own
 * event (Response.cuda_done_event), so the call returns while fosd's GPU work may still run.
 *
 * Invariants: fos_set_cuda_order is the calling thread's (as a current stream is): kept in the
 * handle by thread, it overrides the handle-wide fos_set_cuda_stream for that thread only. The recorded events are pooled per handle and context (one per call in flight); a
 * call that asked for an early reply carries the stream and context it asked with, and only that
 * stream is made to wait. fosd's events are opened once per (handle, context) and kept, at most
 * FOSC_DONE_EVENTS_MAX of them (fosd has an event per executor lane; a restarted fosd has new
 * ones), the oldest destroyed first. Every driver call pushes the stream's context and pops it, so
 * the caller's current context never changes. */
#include "libfos_internal.h"

#include <stdlib.h>
#include <string.h>

#define FOSC_DONE_EVENTS_MAX 64

/* A pooled interprocess event of fos_set_cuda_order (fos_client.dev_events), with the stream and
 * context of the call it was last recorded for. */
typedef struct fosc_devev {
	void *ev, *ctx, *stream;
	int want_done;
	uint8_t handle[64];
	struct fosc_devev *next;
} fosc_devev;

/* One of fosd's done events opened here (fos_client.done_events, newest first). */
typedef struct fosc_doneev {
	void *ev, *ctx;
	uint8_t handle[64];
	struct fosc_doneev *next;
} fosc_doneev;

/* Destroys ev in ctx (a driver that cannot push ctx leaves it: the process ends it). */
static void event_destroy(const fosc_cuda_api *a, void *ctx, void *ev)
{
	if (a && ev && !a->CtxPushCurrent(ctx)) {
		a->EventDestroy(ev);
		void *prev;
		a->CtxPopCurrent(&prev);
	}
}

/* fos_set_cuda_order's settings, one per thread that made one (fos_client.orders, under cuda_mu),
 * keyed by a number each thread draws once from a process-wide counter, so that a thread made
 * after another exited never inherits its setting (as a reused pthread_t or TID would). Kept
 * until fos_close. */
typedef struct fosc_order {
	uint64_t thread;
	void *stream, *ctx;
	unsigned flags;
	struct fosc_order *next;
} fosc_order;
static _Thread_local uint64_t t_thread_key;
static atomic_uint_fast64_t g_thread_keys;

static uint64_t thread_key(void)
{
	if (!t_thread_key)
		t_thread_key = atomic_fetch_add(&g_thread_keys, 1) + 1;
	return t_thread_key;
}

/* The calling thread's setting in c, or NULL (under cuda_mu). */
static fosc_order *order_of_locked(const fos_client *c)
{
	uint64_t k = thread_key();
	for (fosc_order *o = c->orders; o; o = o->next)
		if (o->thread == k)
			return o;
	return NULL;
}

/* *ctx = the context of stream, *a the driver; a code (st) when there is none. */
static int stream_ctx(void *stream, void **ctx, const fosc_cuda_api **a, fos_status *st)
{
	if (!(*a = fosc_cuda_drv(st)))
		return FOS_CODE_FAILED_PRECONDITION;
	int rc = (*a)->StreamGetCtx(stream, ctx);
	if (rc || !*ctx)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "cuStreamGetCtx of stream %p: %s", stream,
				   rc ? fosc_cuda_err(*a, rc) : "no context");
	return FOS_CODE_OK;
}

int fos_set_cuda_order(fos_client *c, void *stream, unsigned flags, fos_status *st)
{
	if (!c || !c->cuda_mu_ok)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	if ((flags & ~(FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS | FOS_CUDA_ORDER_ASYNC)) ||
	    ((flags & FOS_CUDA_ORDER_OUTPUTS) && !(flags & FOS_CUDA_ORDER_INPUTS)) ||
	    ((flags & FOS_CUDA_ORDER_ASYNC) && !(flags & FOS_CUDA_ORDER_OUTPUTS)))
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
				   "fos_set_cuda_order: flags %#x (FOS_CUDA_ORDER_OUTPUTS needs FOS_CUDA_ORDER_INPUTS, "
				   "FOS_CUDA_ORDER_ASYNC needs both)",
				   flags);
	if (!stream)
		flags = 0;
	void *ctx = NULL;
	const fosc_cuda_api *a = NULL;
	int code = flags ? stream_ctx(stream, &ctx, &a, st) : FOS_CODE_OK;
	if (code)
		return code;
	if ((flags & FOS_CUDA_ORDER_OUTPUTS) && (!a->IpcOpenEventHandle || !a->StreamWaitEvent))
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
				   "the CUDA driver has no cuIpcOpenEventHandle or cuStreamWaitEvent");
	if ((flags & FOS_CUDA_ORDER_ASYNC) && (!a->StreamWaitValue32 || !a->StreamWriteValue32 || !a->StreamCreate ||
					       !a->MemsetD32 || !a->MemAlloc))
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
				   "the CUDA driver has no cuStreamWaitValue32, cuStreamWriteValue32, cuStreamCreate or "
				   "cuMemsetD32: FOS_CUDA_ORDER_ASYNC needs them");
	pthread_mutex_lock(&c->cuda_mu);
	fosc_order *o = order_of_locked(c);
	if (!o && (o = calloc(1, sizeof *o))) {
		o->thread = thread_key();
		o->next = c->orders;
		c->orders = o;
	}
	if (o) {
		o->stream = flags ? stream : NULL;
		o->ctx = ctx;
		o->flags = flags;
	}
	pthread_mutex_unlock(&c->cuda_mu);
	if (!o)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory for the thread's stream order");
	if (!flags)
		return fosc_status(st, FOS_CODE_OK, "this thread's device tensors must be synchronized by the caller");
	return fosc_status(st, FOS_CODE_OK, "this thread's device inputs%s are ordered by events on stream %p%s",
			   (flags & FOS_CUDA_ORDER_OUTPUTS) ? " and outputs" : "", stream,
			   (flags & FOS_CUDA_ORDER_ASYNC) ? "; calls on device tensors return before fosd answers" : "");
}

int fosc_cuda_order_async(fos_client *c, void **stream, void **ctx)
{
	if (!c->cuda_mu_ok)
		return 0;
	pthread_mutex_lock(&c->cuda_mu);
	const fosc_order *o = order_of_locked(c);
	int on = o && (o->flags & FOS_CUDA_ORDER_ASYNC);
	if (on) {
		*stream = o->stream;
		*ctx = o->ctx;
	}
	pthread_mutex_unlock(&c->cuda_mu);
	return on;
}

int fos_set_cuda_stream(fos_client *c, void *stream, fos_status *st)
{
	if (!c || !c->cuda_mu_ok)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	void *ctx = NULL;
	const fosc_cuda_api *a = NULL;
	int code = stream ? stream_ctx(stream, &ctx, &a, st) : FOS_CODE_OK;
	if (code)
		return code;
	pthread_mutex_lock(&c->cuda_mu);
	c->cuda_stream_on = stream != NULL;
	c->cuda_stream = stream;
	c->cuda_stream_ctx = ctx;
	pthread_mutex_unlock(&c->cuda_mu);
	if (!stream)
		return fosc_status(st, FOS_CODE_OK, "device inputs must be synchronized by the caller");
	return fosc_status(st, FOS_CODE_OK, "device inputs are ordered by events on stream %p", stream);
}

int fosc_cuda_wait_event(fos_client *c, Fos__Request *rq, fosc_devev **out, fos_status *st)
{
	*out = NULL;
	rq->cuda_wait_event.len = 0;
	rq->cuda_wait_event.data = NULL;
	rq->cuda_done_event = 0;
	if (!c->cuda_mu_ok)
		return FOS_CODE_OK;
	fosc_devev *e = NULL, *old = NULL;
	pthread_mutex_lock(&c->cuda_mu);
	const fosc_order *mine = order_of_locked(c); /* this thread's fos_set_cuda_order, else the handle's */
	int on = mine ? mine->flags != 0 : c->cuda_stream_on;
	int want_done = mine && (mine->flags & FOS_CUDA_ORDER_OUTPUTS);
	void *stream = mine ? mine->stream : c->cuda_stream, *ctx = mine ? mine->ctx : c->cuda_stream_ctx;
	while (on && c->dev_events && !e) {
		fosc_devev *g = c->dev_events;
		c->dev_events = g->next;
		if (g->ctx == ctx) {
			e = g;
		} else { /* of a stream set before, in another context */
			g->next = old;
			old = g;
		}
	}
	pthread_mutex_unlock(&c->cuda_mu);
	if (!on)
		return FOS_CODE_OK;
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	while (old) {
		fosc_devev *n = old->next;
		event_destroy(a, old->ctx, old->ev);
		free(old);
		old = n;
	}
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	int rc = a->CtxPushCurrent(ctx);
	if (rc)
		return fosc_status(st, FOS_CODE_INTERNAL, "cuCtxPushCurrent for the stream's event: %s",
				   fosc_cuda_err(a, rc));
	if (!e && (e = calloc(1, sizeof *e))) {
		e->ctx = ctx;
		rc = a->EventCreate(&e->ev, FOSC_CU_EVENT_INTERPROCESS | FOSC_CU_EVENT_DISABLE_TIMING);
		if (!rc)
			rc = a->IpcGetEventHandle(e->handle, e->ev);
		if (rc) {
			if (e->ev)
				a->EventDestroy(e->ev);
			free(e);
			e = NULL;
		}
	}
	if (e && !rc)
		rc = a->EventRecord(e->ev, stream);
	void *prev;
	a->CtxPopCurrent(&prev);
	if (!e || rc) {
		int code = fosc_status(st, e ? FOS_CODE_INTERNAL : FOS_CODE_RESOURCE_EXHAUSTED,
				       "the interprocess event on stream %p: %s", stream,
				       e ? fosc_cuda_err(a, rc) : "out of memory");
		if (e)
			fosc_cuda_event_done(c, e);
		return code;
	}
	e->stream = stream;
	e->want_done = want_done;
	rq->cuda_wait_event.len = sizeof e->handle;
	rq->cuda_wait_event.data = e->handle;
	rq->cuda_done_event = want_done != 0;
	*out = e;
	return FOS_CODE_OK;
}

/* *out = fosd's event of handle h in ctx (the current context), opened now if this handle has not
 * opened it yet. Returns a code (st set on failure). */
static int done_event_get(fos_client *c, const fosc_cuda_api *a, void *ctx, const uint8_t *h, void **out,
			  fos_status *st)
{
	pthread_mutex_lock(&c->cuda_mu);
	for (fosc_doneev *d = c->done_events; d; d = d->next)
		if (d->ctx == ctx && !memcmp(d->handle, h, sizeof d->handle)) {
			*out = d->ev;
			pthread_mutex_unlock(&c->cuda_mu);
			return FOS_CODE_OK;
		}
	pthread_mutex_unlock(&c->cuda_mu);
	fosc_doneev *d = calloc(1, sizeof *d);
	if (!d)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory for fosd's done event");
	fosc_cu_ipc_event_handle hv;
	memcpy(hv.reserved, h, sizeof hv.reserved);
	int rc = a->IpcOpenEventHandle(&d->ev, hv);
	if (rc) {
		free(d);
		return fosc_status(st, FOS_CODE_INTERNAL, "cuIpcOpenEventHandle of fosd's done event: %s",
				   fosc_cuda_err(a, rc));
	}
	d->ctx = ctx;
	memcpy(d->handle, h, sizeof d->handle);
	fosc_doneev *drop = NULL;
	pthread_mutex_lock(&c->cuda_mu);
	d->next = c->done_events;
	c->done_events = d;
	int n = 0;
	for (fosc_doneev **pp = &c->done_events; *pp; pp = &(*pp)->next)
		if (++n == FOSC_DONE_EVENTS_MAX) { /* keep the newest */
			drop = (*pp)->next;
			(*pp)->next = NULL;
			break;
		}
	pthread_mutex_unlock(&c->cuda_mu);
	while (drop) { /* destroyed in the current context: the caller pushed it (every entry's is the same
			* stream context unless the stream was changed) */
		fosc_doneev *nx = drop->next;
		if (drop->ctx == ctx)
			a->EventDestroy(drop->ev);
		else
			event_destroy(a, drop->ctx, drop->ev);
		free(drop);
		drop = nx;
	}
	*out = d->ev;
	return FOS_CODE_OK;
}

int fosc_cuda_done_wait(fos_client *c, const fosc_devev *ev, const ProtobufCBinaryData *h, fos_status *st)
{
	if (!ev || !ev->want_done)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply carries a done event the request did not ask for");
	if (h->len != 64)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's done event is %zu bytes; a CUDA IPC event handle is 64",
				   h->len);
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	int rc = a->CtxPushCurrent(ev->ctx);
	if (rc)
		return fosc_status(st, FOS_CODE_INTERNAL, "cuCtxPushCurrent for fosd's done event: %s", fosc_cuda_err(a, rc));
	void *done = NULL;
	int code = done_event_get(c, a, ev->ctx, h->data, &done, st);
	if (!code && (rc = a->StreamWaitEvent(ev->stream, done, 0)))
		code = fosc_status(st, FOS_CODE_INTERNAL, "cuStreamWaitEvent on fosd's done event: %s", fosc_cuda_err(a, rc));
	void *prev;
	a->CtxPopCurrent(&prev);
	if (!code)
		atomic_fetch_add(&c->done_waits, 1);
	return code;
}

void fosc_cuda_event_done(fos_client *c, fosc_devev *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&c->cuda_mu);
	e->next = c->dev_events;
	c->dev_events = e;
	pthread_mutex_unlock(&c->cuda_mu);
}

void fosc_cuda_events_close(fos_client *c)
{
	pthread_mutex_lock(&c->cuda_mu);
	fosc_devev *e = c->dev_events;
	fosc_doneev *d = c->done_events;
	fosc_order *o = c->orders;
	c->dev_events = NULL;
	c->done_events = NULL;
	c->orders = NULL;
	pthread_mutex_unlock(&c->cuda_mu);
	while (o) {
		fosc_order *n = o->next;
		free(o);
		o = n;
	}
	const fosc_cuda_api *a = e || d ? fosc_cuda_drv(NULL) : NULL;
	while (e) {
		fosc_devev *n = e->next;
		event_destroy(a, e->ctx, e->ev);
		free(e);
		e = n;
	}
	while (d) {
		fosc_doneev *n = d->next;
		event_destroy(a, d->ctx, d->ev);
		free(d);
		d = n;
	}
}
