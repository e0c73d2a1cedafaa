/* libfos_async.c: calls that return before fosd has read them (fos.h FOS_CUDA_ORDER_ASYNC;
 * PROTOCOL.md "Asynchronous requests").
 *
 * At call time, on the caller's thread: the inputs are exported (device tensors), the input event
 * is recorded on the thread's stream (pooled; back in the pool when the reply came, since fosd's
 * stream has waited on it by then), a done word is taken from the (handle, CUDA context)'s word
 * buffer and the stream is made to wait until the word reaches the call's value
 * (cuStreamWaitValue32 GEQ), and the request message is built and queued. The handle's sender
 * thread (started on the first such call) takes the queued messages one at a time in call order,
 * sends each (through the request channel when the handle has one, else the socket; the same id
 * again after a lost connection, as fosc_call does), reads its reply and records a failure; fosd
 * writes the word in its stream order after the call's work. When the reply is a failure or never
 * comes, the sender writes the word itself on a stream of its own, so the caller's stream never
 * waits for good.
 *
 * Invariants: a word slot belongs to one call from submit until its reply (or final failure); a
 * slot's value only grows (by one per use, never 0), so a wait of an earlier use ends at any later
 * write (GEQ is a cyclic comparison in the driver). One handle's calls reach fosd in call order:
 * one queue, one sender, and the next message leaves only after the previous one's reply. Every
 * other call of the handle first waits until the queue is empty and answered (fosc_async_drain),
 * and returns the first failure not yet reported instead of running. Driver calls push the word
 * buffer's context and pop it. */
#include "libfos_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define FOSC_WORDS 1024 /* done words per (handle, context): calls in flight at once */

/* A word buffer: FOSC_WORDS 32-bit words of device memory in ctx, exported to fosd once. */
typedef struct fosc_words {
	void *ctx;
	uint64_t base;
	void *own;                   /* a non-blocking stream for libfos's own writes of a word (NULL: none) */
	uint8_t handle[64], uuid[16]; /* its IPC export, as fosc_cuda_in gives it */
	uint64_t offset;             /* of base in the exported allocation (0: its own) */
	uint32_t val[FOSC_WORDS];    /* each slot's last value */
	int free[FOSC_WORDS];
	int n_free;
	struct fosc_words *next;
} fosc_words;

/* One queued call. */
typedef struct fosc_ajob {
	nng_msg *msg;
	uint64_t id;
	struct fosc_devev *ev;
	fosc_words *wb;
	int slot;
	uint32_t value;
	char what[192]; /* "Forward of weight 'w'" */
	struct fosc_ajob *next;
} fosc_ajob;

struct fosc_async {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a job queued, a job answered, a slot freed, stop */
	fosc_ajob *head, *tail;
	int inflight; /* queued or being sent */
	int started, stop, lost;
	pthread_t thread;
	fosc_words *words;
	int err_code;
	char err_msg[sizeof(((fos_status *)0)->message)];
	uint64_t err_more; /* failures after the first one not yet reported */
	uint64_t ctx_seq, ctx_key;
};

static _Thread_local int t_sender; /* the calling thread is a sender: never waits for its own queue */
static _Thread_local int t_quiet;  /* libfos's own requests: wait for the queue, report nothing */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* c's state, made on first use (NULL: out of memory). */
static struct fosc_async *async_of(fos_client *c)
{
	struct fosc_async *as = atomic_load(&c->async);
	if (as)
		return as;
	pthread_mutex_lock(&c->cuda_mu);
	if (!(as = atomic_load(&c->async)) && (as = calloc(1, sizeof *as))) {
		if (pthread_mutex_init(&as->mu, NULL) || pthread_cond_init(&as->cv, NULL)) {
			free(as);
			as = NULL;
		} else {
			if (getrandom(&as->ctx_key, sizeof as->ctx_key, 0) != (ssize_t)sizeof as->ctx_key)
				as->ctx_key = c->client_id * 0x9E3779B97F4A7C15ull;
			atomic_store(&c->async, as);
		}
	}
	pthread_mutex_unlock(&c->cuda_mu);
	return as;
}

uint64_t fosc_async_context_id(fos_client *c)
{
	struct fosc_async *as = async_of(c);
	if (!as)
		return 0;
	pthread_mutex_lock(&as->mu);
	uint64_t z = as->ctx_key + ++as->ctx_seq * 0x9E3779B97F4A7C15ull; /* splitmix64: distinct per seq */
	pthread_mutex_unlock(&as->mu);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return z ? z : 1;
}

int fosc_async_wanted(fos_client *c, const fosc_in *ins, int nin, fos_tensor *const *outs, int nout)
{
	void *stream, *ctx;
	if (fosc_inherited(c) || !fosc_cuda_order_async(c, &stream, &ctx))
		return 0;
	for (int i = 0; i < nin; i++)
		if (ins[i].in && ins[i].in->mem != FOS_MEM_CUDA)
			return 0;
	for (int i = 0; i < nout; i++)
		if (outs[i] && (outs[i]->mem != FOS_MEM_CUDA || !outs[i]->data))
			return 0;
	return 1;
}

/* Takes the first failure not reported into st (as->mu held); OK when there is none. */
static int take_error_locked(struct fosc_async *as, fos_status *st)
{
	int code = as->err_code;
	if (!code)
		return FOS_CODE_OK;
	if (as->err_more)
		fosc_status(st, code, "%s (and %llu later asynchronous call%s failed too)", as->err_msg,
			    (unsigned long long)as->err_more, as->err_more == 1 ? "" : "s");
	else
		fosc_status(st, code, "%s", as->err_msg);
	as->err_code = 0;
	as->err_more = 0;
	return code;
}

int fosc_async_drain(fos_client *c, fos_status *st)
{
	struct fosc_async *as = atomic_load(&c->async);
	if (!as || t_sender)
		return FOS_CODE_OK;
	pthread_mutex_lock(&as->mu);
	while (as->inflight)
		pthread_cond_wait(&as->cv, &as->mu);
	int code = t_quiet ? FOS_CODE_OK : take_error_locked(as, st);
	pthread_mutex_unlock(&as->mu);
	return code;
}

void fosc_async_quiet(int on)
{
	t_quiet = on;
}

int fosc_async_inflight(fos_client *c)
{
	struct fosc_async *as = atomic_load(&c->async);
	if (!as)
		return 0;
	pthread_mutex_lock(&as->mu);
	int n = as->inflight;
	pthread_mutex_unlock(&as->mu);
	return n;
}

int fosc_async_check(fos_client *c, fos_status *st)
{
	struct fosc_async *as = atomic_load(&c->async);
	if (!as)
		return FOS_CODE_OK;
	pthread_mutex_lock(&as->mu);
	int code = take_error_locked(as, st);
	pthread_mutex_unlock(&as->mu);
	return code;
}

int fos_sync(fos_client *c, fos_status *st)
{
	if (!c)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	int code = fosc_async_drain(c, st);
	return code ? code : fosc_status(st, FOS_CODE_OK, "every asynchronous call was answered");
}

uint64_t fos_async_count(const fos_client *c)
{
	return c ? atomic_load(&c->async_calls) : 0;
}

/* The word buffer of ctx (as->mu held), or NULL. */
static fosc_words *words_find_locked(struct fosc_async *as, void *ctx)
{
	for (fosc_words *w = as->words; w; w = w->next)
		if (w->ctx == ctx)
			return w;
	return NULL;
}

static void words_free(const fosc_cuda_api *a, fosc_words *w)
{
	if (a && !a->CtxPushCurrent(w->ctx)) {
		if (w->own && a->StreamDestroy)
			a->StreamDestroy(w->own);
		a->MemFree(w->base);
		void *prev;
		a->CtxPopCurrent(&prev);
	}
	free(w);
}

/* The word buffer of ctx, made and exported on first use. Called without as->mu: the export may
 * send a request (fosc_cuda_in closes fosd's mapping of an allocation that was at this address). */
static fosc_words *words_of(fos_client *c, struct fosc_async *as, const fosc_cuda_api *a, void *ctx, fos_status *st)
{
	pthread_mutex_lock(&as->mu);
	fosc_words *found = words_find_locked(as, ctx);
	pthread_mutex_unlock(&as->mu);
	if (found)
		return found;
	fosc_words *w = calloc(1, sizeof *w);
	if (!w) {
		fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory for the done words");
		return NULL;
	}
	int rc = a->CtxPushCurrent(ctx);
	if (!rc) {
		if (!(rc = a->MemAlloc(&w->base, FOSC_WORDS * 4)) && (rc = a->MemsetD32(w->base, 0, FOSC_WORDS)))
			a->MemFree(w->base);
		void *prev;
		a->CtxPopCurrent(&prev);
	}
	if (rc) {
		fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cuMemAlloc of the %d done words: %s", FOSC_WORDS,
			    fosc_cuda_err(a, rc));
		free(w);
		return NULL;
	}
	/* exported like any device tensor (the handle's cache of exports keeps it) */
	fos_tensor t = fos_tensor_cuda(FOS_DTYPE_F32, FOSC_WORDS, 0, (void *)(uintptr_t)w->base);
	Fos__Tensor wt;
	int64_t shape[FOSW_MAX_DIMS];
	Fos__CudaRef cref;
	fosc_dev_ref r;
	if (fosc_cuda_in(c, &t, "the done words", &wt, shape, &cref, &r, st)) {
		if (!a->CtxPushCurrent(ctx)) {
			void *prev;
			a->MemFree(w->base);
			a->CtxPopCurrent(&prev);
		}
		free(w);
		return NULL;
	}
	memcpy(w->handle, r.handle, 64);
	memcpy(w->uuid, r.uuid, 16);
	w->offset = r.offset;
	w->ctx = ctx;
	if (!a->CtxPushCurrent(ctx)) { /* the stream of the sender's own writes, made now: no race later */
		if (a->StreamCreate(&w->own, FOSC_CU_STREAM_NON_BLOCKING))
			w->own = NULL;
		void *prev;
		a->CtxPopCurrent(&prev);
	}
	for (int i = 0; i < FOSC_WORDS; i++)
		w->free[i] = FOSC_WORDS - 1 - i;
	w->n_free = FOSC_WORDS;
	pthread_mutex_lock(&as->mu);
	if ((found = words_find_locked(as, ctx))) { /* another thread made one meanwhile */
		pthread_mutex_unlock(&as->mu);
		t_quiet = 1;
		fos_cuda_release(c, (void *)(uintptr_t)w->base, NULL);
		t_quiet = 0;
		words_free(a, w);
		return found;
	}
	w->next = as->words;
	as->words = w;
	pthread_mutex_unlock(&as->mu);
	return w;
}

/* The sender's own write of a job's word (its stream waits no longer): on a non-blocking stream
 * of the word buffer's context, after nothing of the caller's. */
static void word_write_self(const fosc_cuda_api *a, fosc_words *w, int slot, uint32_t value)
{
	if (!a || a->CtxPushCurrent(w->ctx))
		return;
	/* (never cuMemsetD32: on the legacy stream it would wait behind the very wait it is to end) */
	if (w->own)
		a->StreamWriteValue32(w->own, w->base + 4u * (uint64_t)slot, value, 0);
	void *prev;
	a->CtxPopCurrent(&prev);
}

/* A job is over: its failure (code, msg) recorded, its word written by us on failure, its event
 * and slot back. */
static void job_end(fos_client *c, struct fosc_async *as, fosc_ajob *j, int code, const char *msg)
{
	if (code)
		word_write_self(fosc_cuda_drv(NULL), j->wb, j->slot, j->value);
	fosc_cuda_event_done(c, j->ev);
	if (j->msg)
		nng_msg_free(j->msg);
	pthread_mutex_lock(&as->mu);
	if (code && !as->err_code) {
		as->err_code = code;
		snprintf(as->err_msg, sizeof as->err_msg, "asynchronous %.180s (request %llu) failed: %.270s", j->what,
			 (unsigned long long)j->id, msg);
	} else if (code) {
		as->err_more++;
	}
	j->wb->free[j->wb->n_free++] = j->slot;
	as->inflight--;
	pthread_cond_broadcast(&as->cv);
	pthread_mutex_unlock(&as->mu);
	free(j);
}

/* One job's round trip: OK, or a code with st. Lost connections: the same id again, as fosc_call. */
static int job_send(fos_client *c, fosc_ajob *j, fos_status *st)
{
	uint64_t deadline = now_ms() + (uint64_t)atomic_load(&c->timeout_ms);
	int code = FOSC_LOST, same = 0, via_chan = 0;
	nng_msg *reply = NULL;
	for (int tries = 0; tries < 5 && (code == FOSC_LOST || code == FOSC_RETRY_SAME_ID); tries++) {
		uint64_t now = now_ms();
		if (tries && now >= deadline)
			break;
		nng_msg *m;
		if (nng_msg_dup(&m, j->msg))
			return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory for the request");
		code = fosc_exchange(c, m, (int)(deadline > now ? deadline - now : 1), same, same, &reply, &via_chan, st);
		same = 1; /* a copy of a request that may have run: the same id, never the channel */
	}
	if (code == FOSC_LOST || code == FOSC_RETRY_SAME_ID)
		return fosc_status(st, FOS_CODE_UNAVAILABLE, "the connection to %s was lost while waiting for the reply",
				   c->url);
	if (code)
		return code;
	const uint8_t *hdr, *data;
	size_t hlen, dlen;
	char why[256];
	Fos__Response *resp = NULL;
	if (fosw_split(nng_msg_body(reply), nng_msg_len(reply), &hdr, &hlen, &data, &dlen, why, sizeof why))
		code = fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply: %s", why);
	else if (!(resp = fos__response__unpack(NULL, hlen, hdr)))
		code = fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply: the header is not a fos.Response");
	else if (resp->id != j->id)
		code = fosc_status(st, FOS_CODE_DATA_LOSS, "reply id %llu does not match request id %llu",
				   (unsigned long long)resp->id, (unsigned long long)j->id);
	else if (resp->status && resp->status->code != FOS__CODE__OK)
		code = fosc_status(st, resp->status->code, "%s", resp->status->message ? resp->status->message : "");
	else
		atomic_store(&c->last_device, resp->device <= INT32_MAX ? (int)resp->device : -1);
	if (resp)
		fos__response__free_unpacked(resp, NULL);
	nng_msg_free(reply);
	return code;
}

static void *sender_main(void *arg)
{
	fos_client *c = arg;
	struct fosc_async *as = atomic_load(&c->async);
	t_sender = 1;
	pthread_mutex_lock(&as->mu);
	for (;;) {
		while (!as->head && !as->stop)
			pthread_cond_wait(&as->cv, &as->mu);
		if (!as->head)
			break;
		fosc_ajob *j = as->head;
		as->head = j->next;
		if (!as->head)
			as->tail = NULL;
		int lost = as->lost;
		pthread_mutex_unlock(&as->mu);
		fos_status st;
		int code;
		if (lost) /* the connection was lost for good with an earlier call out: none of the queued go */
			code = fosc_status(&st, FOS_CODE_UNAVAILABLE, "not sent: an earlier asynchronous call lost the "
					   "connection to %s", c->url);
		else
			code = job_send(c, j, &st);
		pthread_mutex_lock(&as->mu);
		if (code == FOS_CODE_UNAVAILABLE || code == FOS_CODE_DEADLINE_EXCEEDED)
			as->lost = 1;
		pthread_mutex_unlock(&as->mu);
		job_end(c, as, j, code, st.message);
		if (!code)
			fosc_chan_revive(c); /* the channel the caller opened, if fosd stopped serving it */
		pthread_mutex_lock(&as->mu);
		if (!as->head)
			as->lost = 0; /* the next call tries the connection again */
	}
	pthread_mutex_unlock(&as->mu);
	return NULL;
}

int fosc_async_call(fos_client *c, Fos__Request *rq, const opcall *oc, fos_status *st)
{
	struct fosc_async *as = async_of(c);
	if (!as)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory for asynchronous calls");
	int code = fosc_async_check(c, st); /* an earlier call's failure: this one does not run */
	if (code)
		return code;
	void *stream, *ctx;
	const fosc_cuda_api *a = fosc_cuda_drv(st);
	if (!a)
		return FOS_CODE_FAILED_PRECONDITION;
	if (!fosc_cuda_order_async(c, &stream, &ctx))
		return fosc_status(st, FOS_CODE_INTERNAL, "asynchronous call without FOS_CUDA_ORDER_ASYNC");
	/* the inputs by IPC handle, the outputs as device targets */
	int64_t shapes[FOSW_MAX_TENSORS][FOSW_MAX_DIMS];
	Fos__CudaRef crefs[FOSW_MAX_TENSORS];
	fosc_dev_ref devs[FOSW_MAX_TENSORS];
	for (int i = 0; i < oc->nin; i++) {
		const fos_tensor *t = oc->ins[i].in;
		if (!t->data || t->ndim < 1 || t->ndim > FOS_TENSOR_MAX_DIMS || !fosw_dtype_size(t->dtype))
			return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: no data, or a bad dtype or shape",
					   oc->ins[i].what);
		if ((code = fosc_cuda_in(c, t, oc->ins[i].what, oc->ins[i].t, shapes[i], &crefs[i], &devs[i], st)))
			return code;
	}
	fosc_shm_outs so;
	if (oc->nout && (code = fosc_cuda_outputs(c, rq, &so, oc->names, oc->outs, oc->nout, st)))
		return code;
	/* a word slot (waits while every slot is in flight) */
	fosc_words *w = words_of(c, as, a, ctx, st);
	pthread_mutex_lock(&as->mu);
	while (w && !w->n_free)
		pthread_cond_wait(&as->cv, &as->mu);
	int slot = w ? w->free[--w->n_free] : -1;
	uint32_t value = 0;
	if (w) {
		value = ++w->val[slot];
		if (!value)
			value = w->val[slot] = 1; /* 0 is the buffer's start: never a call's value */
	}
	pthread_mutex_unlock(&as->mu);
	if (!w)
		return st ? st->code : FOS_CODE_RESOURCE_EXHAUSTED;
	struct fosc_devev *ev = NULL;
	fosc_ajob *j = calloc(1, sizeof *j);
	if (!j)
		code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory for an asynchronous call");
	if (!code)
		code = fosc_cuda_wait_event(c, rq, &ev, st); /* the input event, on stream */
	rq->cuda_done_event = 0;
	int waiting = 0;
	if (!code) { /* then the stream waits for the word */
		int rc = a->CtxPushCurrent(ctx);
		if (!rc) {
			rc = a->StreamWaitValue32(stream, w->base + 4u * (uint64_t)slot, value, FOSC_CU_WAIT_VALUE_GEQ);
			void *prev;
			a->CtxPopCurrent(&prev);
		}
		if (rc)
			code = fosc_status(st, FOS_CODE_INTERNAL, "cuStreamWaitValue32 on stream %p: %s", stream,
					   fosc_cuda_err(a, rc));
		waiting = !rc;
	}
	Fos__CudaRef word = FOS__CUDA_REF__INIT;
	word.ipc_handle.len = 64;
	word.ipc_handle.data = w->handle;
	word.gpu_uuid.len = 16;
	word.gpu_uuid.data = w->uuid;
	word.offset = w->offset + 4u * (uint64_t)slot;
	rq->done_word = &word;
	rq->done_value = value;
	rq->id = atomic_fetch_add(&c->next_id, 1);
	rq->client_id = c->client_id;
	rq->auth_token.len = c->token ? strlen(c->token) : 0;
	rq->auth_token.data = (uint8_t *)c->token;
	rq->deadline_ms = (uint32_t)atomic_load(&c->timeout_ms);
	if (!code) {
		fosw_placer pl;
		memset(&pl, 0, sizeof pl);
		uint8_t *data;
		int rv = fosw_msg_build(&rq->base, &pl, &j->msg, &data);
		if (rv)
			code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cannot build the request: %s", nng_strerror(rv));
	}
	rq->done_word = NULL;
	if (code) { /* nothing queued: the stream must not wait for a word nobody writes */
		if (waiting)
			word_write_self(a, w, slot, value);
		fosc_cuda_event_done(c, ev);
		if (j && j->msg)
			nng_msg_free(j->msg);
		free(j);
		pthread_mutex_lock(&as->mu);
		w->free[w->n_free++] = slot;
		pthread_cond_broadcast(&as->cv);
		pthread_mutex_unlock(&as->mu);
		return code;
	}
	j->id = rq->id;
	j->ev = ev;
	j->wb = w;
	j->slot = slot;
	j->value = value;
	const fosc_async_desc *d = oc->async;
	if (d->weight)
		snprintf(j->what, sizeof j->what, "%s of weight '%s'", d->op, d->weight);
	else if (d->context)
		snprintf(j->what, sizeof j->what, "%s of context %016llx", d->op, (unsigned long long)d->context);
	else
		snprintf(j->what, sizeof j->what, "%s", d->op);
	pthread_mutex_lock(&as->mu);
	if (!as->started) {
		int rv = pthread_create(&as->thread, NULL, sender_main, c);
		as->started = !rv;
		if (rv) {
			pthread_mutex_unlock(&as->mu);
			j->msg = (nng_msg_free(j->msg), NULL);
			fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cannot start the sender thread: %s", strerror(rv));
			word_write_self(a, w, slot, value);
			fosc_cuda_event_done(c, ev);
			pthread_mutex_lock(&as->mu);
			w->free[w->n_free++] = slot;
			pthread_mutex_unlock(&as->mu);
			free(j);
			return FOS_CODE_RESOURCE_EXHAUSTED;
		}
	}
	if (as->tail)
		as->tail->next = j;
	else
		as->head = j;
	as->tail = j;
	as->inflight++;
	uint64_t id = j->id; /* j is the sender's once queued (it may be answered and freed at once) */
	pthread_cond_broadcast(&as->cv);
	pthread_mutex_unlock(&as->mu);
	atomic_fetch_add(&c->async_calls, 1);
	return fosc_status(st, FOS_CODE_OK, "queued (request %llu)", (unsigned long long)id);
}

void fosc_async_close(fos_client *c, int inherited)
{
	struct fosc_async *as = atomic_load(&c->async);
	if (!as)
		return;
	if (!inherited) {
		pthread_mutex_lock(&as->mu);
		while (as->inflight)
			pthread_cond_wait(&as->cv, &as->mu);
		as->stop = 1;
		pthread_cond_broadcast(&as->cv);
		int started = as->started;
		pthread_mutex_unlock(&as->mu);
		if (started)
			pthread_join(as->thread, NULL);
	}
	const fosc_cuda_api *a = inherited ? NULL : fosc_cuda_drv(NULL);
	while (as->words) {
		fosc_words *w = as->words;
		as->words = w->next;
		if (a) /* fosd lets go of its mapping before the memory goes (a gone fosd is no error) */
			fos_cuda_release(c, (void *)(uintptr_t)w->base, NULL);
		words_free(a, w);
	}
	pthread_cond_destroy(&as->cv);
	pthread_mutex_destroy(&as->mu);
	free(as);
	atomic_store(&c->async, NULL);
}
