/* executor.c: the worker pool and its lanes. Workers take queued requests in arrival order, drop
 * those past their deadline, and run each op on a lane: a backend instance of its own (on cuda its
 * own stream, cuBLASLt handle, plans and scratch; the device memory, weights and contexts are
 * shared, since every instance allocates from the same device context). A backend instance is not
 * thread-safe, so a lane runs one request at a time.
 *
 * Which ops run side by side: a Forward without a saved context, Quantize, Dequantize and Linear
 * only read shared state (the weight cache through references) and make their own buffers, so
 * they run on any free lane at once; asynchronous requests run on their connection's lane beside
 * the others (below). Every other op (PutWeight, DropWeight, Forward with a saved context,
 * Backward, ReleaseContext, the regions' ops, context sweeps) runs alone: it holds be_mu,
 * waits for the running lanes to finish and uses lane 0. be_mu is the gate both kinds take first
 * (deadline-bounded, deadline.c); a side-by-side op lets it go once it has a lane.
 *
 * Settling: every result is read back through the request's own lane, and a lane syncs after each
 * request (before its lane is given back, also when the answer went out as soon as the work was
 * queued: Response.cuda_done_event, run_early), so a result never depends on which lane ran it,
 * and an error on one lane (a failed allocation, a refused shape) leaves the others' state alone;
 * a lane that cannot even sync (a sticky CUDA error, which poisons the whole device context) stops
 * fosd. The exception is an asynchronous request (Request.done_word, run_async): it is answered
 * once its work and the write of its done word are queued, leaves its lane unsynchronized and its
 * held resources on that lane's pending list (pending.c: released when a mark recorded after its
 * work completes, polled by the deadline reaper). The invariant, per lane:
 *  - Which lane: an asynchronous request runs on its connection's lane (lanes.c
 *    fosd_lane_pick_async: the lane it used last while that lane holds its pending work, else a
 *    free one no other connection's pending work holds), beside other connections' asynchronous
 *    requests on other lanes; it takes be_mu only to pick the lane. So one connection's requests
 *    run in order on one stream, back to back with no synchronize, and a lane's pending list holds
 *    one connection's work. With one lane they run alone on lane 0 as any op that runs alone.
 *  - What is settled: a lane is settled (synchronized, its pending list released) before anything
 *    that is not an asynchronous request of its connection runs on it. Every other request
 *    settles every lane: run_one waits under be_mu until no asynchronous request runs (none can
 *    start meanwhile) and settles all lanes before it takes a lane (ops that free device memory
 *    outside stream order such as CloseDeviceMemory, host outputs, PutWeight and DropWeight, and
 *    side-by-side ops alike), as do the context sweep and the executor's stop; an asynchronous
 *    request that fails settles its own lane before it is answered, and no other.
 *    fosd_executor_try_now runs nothing at once while any asynchronous request runs or is pending.
 *  - What lanes share, between asynchronous requests running at once: a weight entry or saved
 *    context made by an asynchronous request carries a mark recorded on its lane after the work
 *    that made it; a request on another lane makes its stream wait on that mark before reading it
 *    (ops fosd_mark_made, fosd_wait_made; the device waits, not the host); another form of a weight
 *    (fosd_wcache_form) is synchronized before it is published. Memory the caches free (a replaced,
 *    dropped or evicted weight, a consumed, released, expired or evicted context) is not freed at
 *    once but retired (lanes.c): freed once every request that had begun on any lane when its last
 *    reference went has completed its work (the lanes' tickets), through an instance of its own;
 *    so no stream reads memory freed under it, whichever lane freed it. A context found by a
 *    backward may be evicted meanwhile by another lane's forward: removal is idempotent, and the
 *    retired free waits for that backward.
 *  - What still serializes: be_mu for the moment a lane is picked; every request that is not
 *    asynchronous (it settles all lanes first); one connection's requests (one lane, in order).
 * With one lane (the cpu default) every op holds be_mu throughout. Context expiry sweeps free
 * backend memory, so they run alone too.
 *
 * This file alone owns the queue, the lanes and be_mu: the deadline reaper (deadline.c) asks it to
 * answer the expired queued requests (fosd_executor_reap). An op learns its lane only through the
 * op context it is run with (optable.h); which ops run side by side, and which are small enough to
 * run at once on the receiving thread, the op table says. */
#include "executor.h"
#include "deadline.h"
#include "lanes.h"
#include "ops.h"
#include "pending.h"
#include "response.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FOSD_PENDING_POLL_NS 1000000ull /* the reaper looks at pending asynchronous work this often */

/* Waits on lane_cv (lane_mu held) until woken or s's deadline; returns ETIMEDOUT once it passed. */
static int lane_wait(fosd_device *d, const fosd_job *s)
{
	uint64_t t = fosd_deadline_of(s);
	if (!t)
		return pthread_cond_wait(&d->lane_cv, &d->lane_mu);
	uint64_t now = fosd_now_ns();
	if (now >= t)
		return ETIMEDOUT;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + (t - now);
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	return pthread_cond_timedwait(&d->lane_cv, &d->lane_mu, &ts);
}

/* Takes be_mu, waiting no longer than s's deadline. Returns 0 with the lock held, or -1 (not
 * held) when the deadline passed first. */
static int backend_lock(fosd_device *d, const fosd_job *s)
{
	uint64_t t = fosd_deadline_of(s);
	if (!t) {
		pthread_mutex_lock(&d->be_mu);
		return 0;
	}
	struct timespec ts;
	fosd_deadline_abstime(&ts, CLOCK_REALTIME, t);
	int rv;
	while ((rv = pthread_mutex_timedlock(&d->be_mu, &ts)) == EINTR)
		;
	if (rv)
		return -1;
	if (fosd_now_ns() > t) {
		pthread_mutex_unlock(&d->be_mu);
		return -1;
	}
	return 0;
}

/* With be_mu held (backend_lock): a side-by-side op gets a free lane and lets be_mu go; an op
 * that runs alone waits until no lane runs and keeps be_mu. Returns the lane, or -1 (be_mu
 * released) when s's deadline passed while waiting. */
static int lane_take(fosd_device *d, fosd_job *s, int parallel)
{
	if (d->n_lanes <= 1)
		return 0; /* one lane: be_mu alone serializes everything */
	int lane = 0;
	pthread_mutex_lock(&d->lane_mu);
	if (parallel) {
		uint64_t all = d->n_lanes >= 64 ? ~0ull : (1ull << d->n_lanes) - 1;
		while ((d->lane_busy & all) == all)
			if (lane_wait(d, s) == ETIMEDOUT && fosd_past_deadline(s))
				goto late;
		while (d->lane_busy >> lane & 1)
			lane++;
		d->lane_busy |= 1ull << lane;
		d->lane_active++;
		pthread_mutex_unlock(&d->lane_mu);
		pthread_mutex_unlock(&d->be_mu);
		return lane;
	}
	while (d->lane_active)
		if (lane_wait(d, s) == ETIMEDOUT && fosd_past_deadline(s))
			goto late;
	pthread_mutex_unlock(&d->lane_mu);
	return 0;
late:
	pthread_mutex_unlock(&d->lane_mu);
	pthread_mutex_unlock(&d->be_mu);
	return -1;
}

static void lane_give(fosd_device *d, int lane, int parallel)
{
	if (d->n_lanes <= 1 || !parallel) {
		pthread_mutex_unlock(&d->be_mu);
		return;
	}
	pthread_mutex_lock(&d->lane_mu);
	d->lane_busy &= ~(1ull << lane);
	d->lane_active--;
	pthread_cond_broadcast(&d->lane_cv);
	pthread_mutex_unlock(&d->lane_mu);
}

static void check_backend(fosd_exec *srv, fos_backend *be);

/* With be_mu held and no asynchronous request running, before anything that is not an
 * asynchronous request runs on d: every lane's asynchronous work is done and its pending
 * resources are released (a failed sync: a broken device, check_backend). */
static void settle_all(fosd_device *d)
{
	for (int i = 0; i < d->n_lanes; i++) {
		fos_err e;
		memset(&e, 0, sizeof e);
		if (fosd_lane_settle_pending(d, i, &e)) {
			fosd_error("device %d lane %d: asynchronous requests' GPU work failed: %s", d->index, i, e.msg);
			check_backend(d->srv, d->lanes[i]);
		}
	}
}

/* With be_mu held: waits until no asynchronous request runs on d (none can start meanwhile: they
 * take be_mu first). 0, or -1 (be_mu released) when s's deadline passed first. */
static int async_idle(fosd_device *d, const fosd_job *s)
{
	pthread_mutex_lock(&d->lane_mu);
	while (d->async_running)
		if (lane_wait(d, s) == ETIMEDOUT && fosd_past_deadline(s)) {
			pthread_mutex_unlock(&d->lane_mu);
			pthread_mutex_unlock(&d->be_mu);
			return -1;
		}
	pthread_mutex_unlock(&d->lane_mu);
	return 0;
}

/* The connection an asynchronous request came from (its lane's owner while it has pending work). */
static uint64_t async_key(const fosd_job *s)
{
	return s->shm.dev.pipe ? s->shm.dev.pipe : (uint64_t)(uintptr_t)s->shm.dev.word;
}

/* With be_mu held (backend_lock), on a device of several lanes: the lane of asynchronous request
 * s (fosd_lane_pick_async: its connection's, else a free one), taken; be_mu is let go. -1 (be_mu
 * released) when s's deadline passed first. A lane held by another connection's pending work
 * frees up when that work completes, which nobody signals: the wait looks again every ms. */
static int lane_take_async(fosd_device *d, fosd_job *s)
{
	uint64_t key = async_key(s);
	int lane;
	pthread_mutex_lock(&d->lane_mu);
	while ((lane = fosd_lane_pick_async(d, key)) < 0) {
		if (fosd_past_deadline(s)) {
			pthread_mutex_unlock(&d->lane_mu);
			pthread_mutex_unlock(&d->be_mu);
			return -1;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&d->lane_cv, &d->lane_mu, &ts);
		pthread_mutex_unlock(&d->lane_mu);
		fosd_lanes_poll(d);
		pthread_mutex_lock(&d->lane_mu);
	}
	d->lane_busy |= 1ull << lane;
	d->lane_active++;
	d->async_running++;
	d->lstate[lane].owner = key;
	d->lstate[lane].taken = fosd_now_ns();
	pthread_mutex_unlock(&d->lane_mu);
	pthread_mutex_unlock(&d->be_mu);
	return lane;
}

static void run_sweep(fosd_device *d)
{
	pthread_mutex_lock(&d->be_mu);
	if (d->n_lanes > 1) { /* alone: after the running lanes */
		pthread_mutex_lock(&d->lane_mu);
		while (d->lane_active)
			pthread_cond_wait(&d->lane_cv, &d->lane_mu);
		pthread_mutex_unlock(&d->lane_mu);
	}
	settle_all(d);
	uint64_t n = fosd_contexts_sweep(&d->cx, fosd_now_ns());
	pthread_mutex_unlock(&d->be_mu);
	if (n)
		fosd_debug("contexts of device %d: %llu expired", d->index, (unsigned long long)n);
}

/* After an INTERNAL error: if the backend cannot even synchronize (a sticky CUDA error such as an
 * illegal address), every later request would fail too. Stop serving: drain and exit 1, so that a
 * supervisor restarts fosd with a fresh device context. */
static void check_backend(fosd_exec *srv, fos_backend *be)
{
	fos_err e;
	memset(&e, 0, sizeof e);
	if (be->sync(be, &e) == FOS_OK || atomic_exchange(&srv->fatal, 1))
		return;
	fosd_error("the %s backend on %s failed for good (%s): shutting down", be->name, be->device, e.msg);
	kill(getpid(), SIGTERM);
}

/* Every request leaves its lane idle: work it queued without waiting (an h2d whose source is the
 * request's message or region, a forward without a saved context) is done before it is answered,
 * or, answered early (run_early), before its sources are freed and its lane is given back.
 * A failure there turns a successful reply into INTERNAL. */
static void lane_settle(fos_backend *be, fosd_job *s, nng_msg **r, int *code)
{
	fos_err e;
	memset(&e, 0, sizeof e);
	if (be->sync(be, &e) == FOS_OK || *code)
		return;
	if (*r)
		nng_msg_free(*r);
	*code = FOS__CODE__INTERNAL;
	fosd_error("%s request %llu failed: %s", s->def->name, (unsigned long long)s->req_id, e.msg);
	*r = fosd_error_reply(s->req_id, *code, e.msg);
}

/* The reply of an op that ended with code (fosd_op_run): its result's (c->reply), or the error
 * Response of c->msg; an op with no result of its own answers with its earlier stage's
 * (stage_reply: a PutWeight's drop stages). *code = code. */
static nng_msg *op_reply(fosd_job *s, fosd_opctx *c, int code, int *out)
{
	*out = code;
	if (code) {
		if (c->reply)
			nng_msg_free(c->reply);
		return fosd_error_reply(s->req_id, code, c->msg);
	}
	if (!c->reply && s->stage_reply) {
		c->reply = s->stage_reply;
		s->stage_reply = NULL;
	}
	return c->reply;
}

/* A request's lane is settled (ended: its work is done; else it waits on the lane's pending
 * list): gives it back and counts the request and its busy time on d. */
static void lane_end(fosd_device *d, int lane, int parallel, uint64_t busy_ns, int ended)
{
	if (ended)
		fosd_lane_ended(d, lane);
	lane_give(d, lane, parallel);
	atomic_fetch_add(&d->requests, 1);
	atomic_fetch_add(&d->busy_ns, busy_ns);
	atomic_fetch_sub(&d->running, 1);
}

/* Whether s may be answered before its GPU work ends (Response.cuda_done_event): the client asked
 * (its stream waits for the lane's event), the lane has such an event, and the op is one whose
 * results can all be in the client's GPU memory and that ends in one stage (a PutWeight over
 * several devices has more). The lane stays taken until the work is done (run_early), so
 * whatever runs next on the device still finds it settled. */
static const unsigned char *early_event(fosd_device *d, fosd_job *s, fos_backend *be, unsigned char h[64])
{
	if (!s->rq || !s->rq->cuda_done_event || !be->done_event_handle || !be->done_event_record)
		return NULL;
	if (s->op != FOSD_OP_FORWARD && s->op != FOSD_OP_BACKWARD && s->op != FOSD_OP_LINEAR &&
	    !(s->op == FOSD_OP_PUT_WEIGHT && d->srv->n_devs == 1))
		return NULL;
	fos_err e;
	memset(&e, 0, sizeof e);
	if (be->done_event_handle(be, h, &e)) {
		fosd_warn("device %d: no done event (%s): answering after the work", d->index, e.msg);
		return NULL;
	}
	return h;
}

/* The end of a request answered before its GPU work ended: the answer goes out first, then the
 * lane settles, and only then are the request's sources and client mappings freed and the lane
 * given back (a failed settle after an OK answer means a broken device: check_backend). */
static void run_early(fosd_device *d, fosd_job *s, nng_msg *r, int lane, int parallel, atomic_int *gate)
{
	fos_backend *be = d->lanes ? d->lanes[lane] : d->be;
	fosd_exec *srv = d->srv;
	uint64_t id = s->req_id, t_lane = s->t_lane_ns;
	const char *name = s->def->name;
	fosd_held held;
	fosd_job_hold(s, &held);
	s->t_done_ns = fosd_now_ns();
	if (gate)
		atomic_store(gate, 0);
	srv->finish(s, r, 0); /* s is the transport's again */
	fos_err e;
	memset(&e, 0, sizeof e);
	if (be->sync(be, &e) != FOS_OK) {
		fosd_error("%s request %llu, answered before its GPU work ended, then failed: %s", name,
			   (unsigned long long)id, e.msg);
		check_backend(srv, be);
	}
	uint64_t t_end = fosd_now_ns();
	fosd_held_end(&held);
	lane_end(d, lane, parallel, t_end - t_lane, 1);
	fosd_debug("request %llu (%s): answered early, ran %llu us on device %d lane %d", (unsigned long long)id, name,
		   (unsigned long long)((t_end - t_lane) / 1000), d->index, lane);
}

/* The end of an asynchronous request (Request.done_word, PROTOCOL.md "Asynchronous requests")
 * on its lane: the done word is written in stream order after whatever the op queued, success or
 * failure. An OK request is answered at once, its lane left unsynchronized and its sources and
 * mappings kept on the lane's pending list until its work is done; a failed one (or one whose word
 * or mark could not be queued) settles its lane first, as any error path does. */
static void run_async(fosd_device *d, fosd_job *s, fos_backend *be, nng_msg *r, int code, int lane, atomic_int *gate)
{
	fos_err e;
	memset(&e, 0, sizeof e);
	if (be->write_u32(be, s->shm.dev.word_ptr, s->shm.dev.word_value, &e) && !code) {
		if (r)
			nng_msg_free(r);
		char m[320];
		snprintf(m, sizeof m, "writing the done word: %s", e.msg);
		code = FOS__CODE__INTERNAL;
		r = fosd_error_reply(s->req_id, code, m);
	}
	int held = 0;
	if (!code && r) {
		memset(&e, 0, sizeof e);
		if (fosd_lane_hold(d, lane, s, &e)) /* no mark: settled, then let go */
			fosd_warn("device %d lane %d: request %llu: %s; the lane was synchronized", d->index, lane,
				  (unsigned long long)s->req_id, e.msg);
		else
			held = 1;
	} else { /* an error path: its lane settles before the answer */
		lane_settle(be, s, &r, &code);
		memset(&e, 0, sizeof e);
		if (fosd_lane_settle_pending(d, lane, &e)) {
			fosd_error("device %d lane %d: asynchronous requests' GPU work failed: %s", d->index, lane, e.msg);
			check_backend(d->srv, be);
		}
		fosd_lane_ended(d, lane);
	}
	s->t_done_ns = fosd_now_ns();
	if (code == FOS__CODE__INTERNAL)
		check_backend(d->srv, be);
	if (d->n_lanes > 1) {
		pthread_mutex_lock(&d->lane_mu);
		d->async_running--; /* lane_end wakes whoever waits for that */
		pthread_mutex_unlock(&d->lane_mu);
	}
	lane_end(d, lane, d->n_lanes > 1, s->t_done_ns - s->t_lane_ns, 0);
	fosd_debug("request %llu (%s): asynchronous, queued %llu us, ran %llu us on device %d lane %d, %s",
		   (unsigned long long)s->req_id, s->def->name, (unsigned long long)((s->t_lane_ns - s->t_recv_ns) / 1000),
		   (unsigned long long)((s->t_done_ns - s->t_lane_ns) / 1000), d->index, lane, fosw_code_name(code));
	if (gate)
		atomic_store(gate, 0);
	if (held)
		fosd_deadline_kick(d->srv); /* the reaper polls the pending lists */
	d->srv->finish(s, r, code);
}

/* Runs s on lane (already taken) of d and answers it, or, when the op has a stage on another
 * device left (placement.c), queues it there. gate: a flag to clear before the reply goes out
 * (fosd_executor_try_now's running_now), so that the client's next request finds it clear; NULL:
 * none. */
static void run_on_lane(fosd_device *d, fosd_job *s, int lane, int parallel, atomic_int *gate)
{
	fosd_exec *srv = d->srv;
	int code;
	fos_backend *be = d->lanes ? d->lanes[lane] : d->be;
	fosd_opctx c = {fosd_exec_ops(srv), fosd_job_op(s), be, d->lanes ? lane : -1, NULL, fosd_device_res(d), NULL, 0,
			fosd_deadline_of(s), fosd_response_result, NULL, ""};
	if (d->lanes && d->lane_bufs)
		c.buf = &d->lane_bufs[lane];
	unsigned char done_h[64];
	const int async = s->shm.dev.word != NULL; /* on its connection's lane (run_one) */
	c.done_event = async ? NULL : early_event(d, s, be, done_h);
	atomic_fetch_add(&d->running, 1);
	fosd_lane_begun(d, lane);
	s->t_lane_ns = fosd_now_ns();
	be->defer_sync = async; /* other lanes wait on its marks; the rest on its settle */
	nng_msg *r = op_reply(s, &c, fosd_op_run(&c), &code);
	be->defer_sync = 0;
	if (async) {
		run_async(d, s, be, r, code, lane, gate);
		return;
	}
	if (!code && c.early && r) {
		run_early(d, s, r, lane, parallel, gate);
		return;
	}
	lane_settle(be, s, &r, &code);
	s->t_done_ns = fosd_now_ns();
	if (code == FOS__CODE__INTERNAL)
		check_backend(srv, be);
	lane_end(d, lane, parallel, s->t_done_ns - s->t_lane_ns, 1);
	fosd_debug("request %llu (%s): queued %llu us, ran %llu us on device %d lane %d, %s",
		   (unsigned long long)s->req_id, s->def->name, (unsigned long long)((s->t_lane_ns - s->t_recv_ns) / 1000),
		   (unsigned long long)((s->t_done_ns - s->t_lane_ns) / 1000), d->index, lane, fosw_code_name(code));
	if (gate)
		atomic_store(gate, 0);
	if (!code && fosd_place_next_stage(s)) { /* the same op on its next device */
		if (r) { /* the reply so far (a PutWeight's drop stages send it) */
			if (s->stage_reply)
				nng_msg_free(s->stage_reply);
			s->stage_reply = r;
		}
		fosd_executor_submit(srv, s);
		return;
	}
	srv->finish(s, r, code);
}

static void run_one(fosd_device *d, fosd_job *s)
{
	uint32_t dl = s->rq->deadline_ms;
	if (dl && fosd_now_ns() > s->t_recv_ns + (uint64_t)dl * 1000000ull) {
		char msg[128];
		snprintf(msg, sizeof msg, "the request waited past its %u ms deadline", dl);
		d->srv->finish(s, fosd_error_reply(s->req_id, FOS__CODE__DEADLINE_EXCEEDED, msg),
			       FOS__CODE__DEADLINE_EXCEEDED);
		return;
	}
	if (d->srv->drop_if_gone(s))
		return;
	if (backend_lock(d, s)) { /* the deadline passed while another request held the backend */
		fosd_deadline_answer(d->srv, s);
		return;
	}
	const int async = s->shm.dev.word != NULL;
	if (async && d->n_lanes > 1) { /* on its connection's lane, beside the others */
		int lane = lane_take_async(d, s);
		if (lane < 0) {
			fosd_deadline_answer(d->srv, s);
			return;
		}
		run_on_lane(d, s, lane, 1, NULL);
		return;
	}
	int parallel = !async && fosd_def_beside(s->def, &s->args);
	if (!async) { /* after every lane's asynchronous work */
		if (d->n_lanes > 1 && async_idle(d, s)) {
			fosd_deadline_answer(d->srv, s);
			return;
		}
		settle_all(d);
	}
	int lane = lane_take(d, s, parallel);
	if (lane < 0) { /* the deadline passed while the lanes were busy */
		fosd_deadline_answer(d->srv, s);
		return;
	}
	run_on_lane(d, s, lane, parallel, NULL);
}

/* Nobody who came first is waiting on d: its queue is empty and no sweep is due. */
static int queue_idle(fosd_device *d)
{
	pthread_mutex_lock(&d->q_mu);
	int idle = !d->q_head && !d->sweep_pending;
	pthread_mutex_unlock(&d->q_mu);
	return idle;
}

int fosd_executor_try_now(fosd_exec *srv, fosd_job *s)
{
	fosd_device *d = &srv->devs[s->dev];
	/* one receiving thread of the socket at a time (they also move everyone's messages); a slot
	 * with a thread of its own needs no gate */
	const int gate = !s->own_thread;
	if (s->own_thread && !fosd_def_small(s->def, &s->args)) {
		/* a channel's thread waits for this client's reply anyway: when nobody who came first is
		 * waiting, it runs the request itself as a worker would (lane, or the backend alone),
		 * without the hand-off to a worker thread */
		if (!queue_idle(d))
			return 0;
		s->ran_now = 1;
		run_one(d, s);
		return 1;
	}
	if (d->n_lanes <= 1 || !fosd_def_small(s->def, &s->args) || s->shm.dev.word || fosd_lanes_pending(d) ||
	    (gate && atomic_exchange(&srv->running_now, 1)))
		return 0; /* an asynchronous request, or one that must settle lane 0 first: run_one */
	int idle = queue_idle(d);
	int lane = -1;
	if (idle && !pthread_mutex_trylock(&d->be_mu)) { /* no op that runs alone holds or waits for it */
		pthread_mutex_lock(&d->lane_mu);
		if (d->async_running || fosd_lanes_pending(d)) { /* asynchronous work: run_one settles */
			pthread_mutex_unlock(&d->lane_mu);
			pthread_mutex_unlock(&d->be_mu);
			if (gate)
				atomic_store(&srv->running_now, 0);
			return 0;
		}
		for (int i = 0; i < d->n_lanes; i++)
			if (!(d->lane_busy >> i & 1)) {
				lane = i;
				break;
			}
		if (lane >= 0) {
			d->lane_busy |= 1ull << lane;
			d->lane_active++;
		}
		pthread_mutex_unlock(&d->lane_mu);
		pthread_mutex_unlock(&d->be_mu);
	}
	if (lane >= 0) {
		s->ran_now = 1;
		run_on_lane(d, s, lane, 1, gate ? &srv->running_now : NULL); /* clears it before the reply */
	} else if (gate) {
		atomic_store(&srv->running_now, 0);
	}
	return lane >= 0;
}

static void *worker_main(void *arg)
{
	fosd_device *d = arg;
	for (;;) {
		pthread_mutex_lock(&d->q_mu);
		while (!d->q_head && !d->sweep_pending && !d->q_stop)
			pthread_cond_wait(&d->q_cv, &d->q_mu);
		if (d->q_stop) {
			pthread_mutex_unlock(&d->q_mu);
			return NULL;
		}
		if (d->sweep_pending) {
			d->sweep_pending = 0;
			pthread_mutex_unlock(&d->q_mu);
			run_sweep(d);
			continue;
		}
		fosd_job *s = d->q_head;
		d->q_head = s->qnext;
		if (!d->q_head)
			d->q_tail = NULL;
		d->queued--;
		pthread_mutex_unlock(&d->q_mu);
		s->qnext = NULL;
		run_one(d, s);
	}
}

static int device_start(fosd_exec *srv, fosd_device *d, char *msg, size_t msgsz)
{
	if (fosd_lanes_open(srv, d, msg, msgsz))
		return -1;
	int n = srv->cfg->workers > d->n_lanes ? srv->cfg->workers : d->n_lanes; /* a worker per lane at least */
	d->workers = calloc((size_t)n, sizeof *d->workers);
	if (!d->workers) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		int rv = pthread_create(&d->workers[i], NULL, worker_main, d);
		if (rv) {
			snprintf(msg, msgsz, "cannot start worker thread %d of device %d: %s", i, d->index, strerror(rv));
			return -1;
		}
		d->n_workers = i + 1;
	}
	return 0;
}

int fosd_executor_start(fosd_exec *srv, char *msg, size_t msgsz)
{
	for (int i = 0; i < srv->n_devs; i++)
		if (device_start(srv, &srv->devs[i], msg, msgsz))
			return -1;
	return fosd_deadline_start(srv, msg, msgsz);
}

void fosd_executor_submit(fosd_exec *srv, fosd_job *s)
{
	fosd_device *d = &srv->devs[s->dev];
	pthread_mutex_lock(&d->q_mu);
	s->qnext = NULL;
	if (d->q_tail)
		d->q_tail->qnext = s;
	else
		d->q_head = s;
	d->q_tail = s;
	d->queued++;
	pthread_cond_signal(&d->q_cv);
	fosd_deadline_queued(srv, s);
	pthread_mutex_unlock(&d->q_mu);
}

/* d's part of fosd_executor_reap. */
static uint64_t reap_device(fosd_device *d, uint64_t now, uint64_t *reaped)
{
	uint64_t next = 0;
	pthread_mutex_lock(&d->q_mu);
	fosd_job *expired = NULL, **pp = &d->q_head, *prev = NULL;
	while (*pp) {
		fosd_job *s = *pp;
		uint64_t t = fosd_deadline_of(s);
		if (t && t <= now) {
			*pp = s->qnext;
			if (d->q_tail == s)
				d->q_tail = prev;
			d->queued--;
			s->qnext = expired;
			expired = s;
			continue;
		}
		if (t && (!next || t < next))
			next = t;
		prev = s;
		pp = &s->qnext;
	}
	pthread_mutex_unlock(&d->q_mu);
	while (expired) {
		fosd_job *n = expired->qnext;
		expired->qnext = NULL;
		(*reaped)++;
		fosd_debug("request %llu (%s): deadline passed while queued", (unsigned long long)expired->req_id,
			   expired->def->name);
		fosd_deadline_answer(d->srv, expired);
		expired = n;
	}
	return next;
}

uint64_t fosd_executor_reap(fosd_exec *srv, uint64_t now, uint64_t *reaped)
{
	uint64_t next = 0;
	for (int i = 0; i < srv->n_devs; i++) {
		uint64_t t = reap_device(&srv->devs[i], now, reaped);
		/* asynchronous requests' resources whose work is done; the rest looked at again soon */
		if (fosd_lanes_poll(&srv->devs[i]) && (!t || t > now + FOSD_PENDING_POLL_NS))
			t = now + FOSD_PENDING_POLL_NS;
		if (t && (!next || t < next))
			next = t;
	}
	return next;
}

void fosd_executor_request_sweep(fosd_exec *srv)
{
	for (int i = 0; i < srv->n_devs; i++) {
		fosd_device *d = &srv->devs[i];
		pthread_mutex_lock(&d->q_mu);
		d->sweep_pending = 1;
		pthread_cond_signal(&d->q_cv);
		pthread_mutex_unlock(&d->q_mu);
	}
}

uint64_t fosd_device_queued(fosd_device *d)
{
	pthread_mutex_lock(&d->q_mu);
	uint64_t n = d->queued;
	pthread_mutex_unlock(&d->q_mu);
	return n;
}

void fosd_device_exec_snapshot(fosd_device *d, fosd_exec_snap *out)
{
	out->lanes = (uint64_t)d->n_lanes;
	int running = atomic_load(&d->running);
	out->lanes_busy = running > 0 ? (uint64_t)running : 0;
	out->queued = fosd_device_queued(d);
	out->requests = atomic_load(&d->requests);
	out->busy_us = atomic_load(&d->busy_ns) / 1000u;
	out->workers = (uint64_t)d->n_workers;
}

uint64_t fosd_executor_queued(fosd_exec *srv)
{
	uint64_t n = 0;
	for (int i = 0; i < srv->n_devs; i++)
		n += fosd_device_queued(&srv->devs[i]);
	return n;
}

void fosd_executor_stop(fosd_exec *srv)
{
	fosd_deadline_stop(srv);
	for (int i = 0; i < srv->n_devs; i++) {
		fosd_device *d = &srv->devs[i];
		pthread_mutex_lock(&d->q_mu);
		d->q_stop = 1;
		pthread_cond_broadcast(&d->q_cv);
		pthread_mutex_unlock(&d->q_mu);
	}
	for (int i = 0; i < srv->n_devs; i++) {
		fosd_device *d = &srv->devs[i];
		for (int w = 0; w < d->n_workers; w++)
			pthread_join(d->workers[w], NULL);
		free(d->workers);
		d->workers = NULL;
		d->n_workers = 0;
		fosd_lanes_close(d);
	}
}

void fosd_job_hold(fosd_job *s, fosd_held *h)
{
	h->msg = s->msg;
	h->rq = s->rq;
	h->shm = s->shm;
	s->msg = NULL;
	s->rq = NULL;
	memset(&s->shm, 0, sizeof s->shm);
	fosd_dev_req_event_done(&h->shm.dev); /* its wait is queued: pending work holds no event */
}

void fosd_held_end(fosd_held *h)
{
	fosd_shm_req_end(&h->shm);
	if (h->rq)
		fos__request__free_unpacked(h->rq, NULL);
	if (h->msg)
		nng_msg_free(h->msg);
	memset(h, 0, sizeof *h);
}
