/* lanes.c: a device's per-lane state (lanes.h) and its retire list.
 *
 * Tickets: begun counts the requests that took the lane, ended those whose device work completed
 * (a synchronous request's once its lane synchronized, an asynchronous one's when its pending item
 * is released: its mark completed or the lane was settled). A lane runs one request at a time and
 * its asynchronous requests' marks complete in their order, and nothing else runs on a lane until
 * its pending list is settled, so ended is always a prefix of begun.
 *
 * Retire list: a free the caches hand over (retire.h) is stamped with every lane's begun count and
 * runs once every lane's ended count reached its stamp: every request that could have read the
 * memory (it held a reference before the free was handed over, so it had begun) has completed its
 * device work, on whichever lane. The frees themselves go through the free instance (wc.be, cx.be),
 * whose stream nothing else uses, so any thread may run them. The caches count the bytes as free
 * at once (their budgets), the device's memory follows when the retired free runs: at most the
 * frees of the work in flight later. The marks of freed objects go to a
 * pool (retire.h) that fosd_mark_made takes from, so that a put or a saved context costs no event
 * made and destroyed. */
#include "lanes.h"
#include "pending.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef FOS_HAVE_CUDA
#include "cuda_backend.h"
#endif

#define FOSD_MAX_LANES 64

typedef struct fosd_retired {
	fosd_free_fn fn;
	void *owner, *obj;
	struct fosd_retired *next;
	uint64_t stamp[]; /* per lane: begun when handed over */
} fosd_retired;

typedef struct fosd_lane_held {
	fosd_held h;
	fosd_device *d;
	int lane;
} fosd_lane_held;

static void held_release(void *item)
{
	fosd_lane_held *x = item;
	fosd_held_end(&x->h);
	fosd_lane_ended(x->d, x->lane);
	free(x);
}

static void retire_defer(void *arg, fosd_free_fn fn, void *owner, void *obj)
{
	fosd_device *d = arg;
	fosd_retired *r = malloc(sizeof *r + (size_t)d->n_lanes * sizeof(uint64_t));
	if (!r) { /* out of memory: settle every lane the hard way, then free */
		fosd_error("device %d: out of memory retiring a free: waiting for the device", d->index);
		fos_err e;
		for (int i = 0; i < d->n_lanes; i++)
			(void)d->lanes[i]->sync(d->lanes[i], &e);
		fn(owner, obj);
		return;
	}
	r->fn = fn;
	r->owner = owner;
	r->obj = obj;
	for (int i = 0; i < d->n_lanes; i++)
		r->stamp[i] = atomic_load(&d->lstate[i].begun);
	pthread_mutex_lock(&d->retire_mu);
	r->next = d->retired;
	d->retired = r;
	pthread_mutex_unlock(&d->retire_mu);
	fosd_lane_ended(d, -1); /* ready at once when nothing had begun and not ended */
}

/* Runs the retired frees that are ready (all of them with force). */
static void retire_run(fosd_device *d, int force)
{
	fosd_retired *ready = NULL;
	pthread_mutex_lock(&d->retire_mu);
	for (fosd_retired **pp = &d->retired; *pp;) {
		fosd_retired *r = *pp;
		int ok = 1;
		for (int i = 0; ok && !force && i < d->n_lanes; i++)
			ok = atomic_load(&d->lstate[i].ended) >= r->stamp[i];
		if (!ok) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		r->next = ready;
		ready = r;
	}
	pthread_mutex_unlock(&d->retire_mu);
	while (ready) { /* outside retire_mu: a free may retire more (a context's weight reference) */
		fosd_retired *n = ready->next;
		ready->fn(ready->owner, ready->obj);
		free(ready);
		ready = n;
	}
}

#define FOSD_MARK_POOL 1024 /* marks kept for reuse per device; more are destroyed */

static void mark_put(void *arg, void *ev)
{
	fosd_device *d = arg;
	pthread_mutex_lock(&d->retire_mu);
	int kept = d->mark_n < FOSD_MARK_POOL;
	if (kept)
		d->mark_pool[d->mark_n++] = ev;
	pthread_mutex_unlock(&d->retire_mu);
	if (!kept && d->free_be->mark_free)
		d->free_be->mark_free(d->free_be, ev);
}

static void *mark_get(void *arg)
{
	fosd_device *d = arg;
	pthread_mutex_lock(&d->retire_mu);
	void *ev = d->mark_n ? d->mark_pool[--d->mark_n] : NULL;
	pthread_mutex_unlock(&d->retire_mu);
	return ev;
}

void fosd_lane_begun(fosd_device *d, int lane)
{
	atomic_fetch_add(&d->lstate[lane].begun, 1);
}

void fosd_lane_ended(fosd_device *d, int lane)
{
	if (lane >= 0)
		atomic_fetch_add(&d->lstate[lane].ended, 1);
	pthread_mutex_lock(&d->retire_mu);
	int any = d->retired != NULL;
	pthread_mutex_unlock(&d->retire_mu);
	if (any)
		retire_run(d, 0);
}

int fosd_lanes_state_open(fosd_device *d, fos_backend *free_be, char *msg, size_t msgsz)
{
	d->lstate = calloc((size_t)d->n_lanes, sizeof *d->lstate);
	d->mark_pool = calloc(FOSD_MARK_POOL, sizeof *d->mark_pool);
	d->mark_n = 0;
	if (!d->lstate || !d->mark_pool || pthread_mutex_init(&d->retire_mu, NULL)) {
		free(d->lstate);
		free(d->mark_pool);
		d->lstate = NULL;
		d->mark_pool = NULL;
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	for (int i = 0; i < d->n_lanes; i++)
		if (!(d->lstate[i].pend = fosd_pending_new(d->lanes[i], held_release))) {
			snprintf(msg, msgsz, "out of memory");
			return -1;
		}
	d->free_be = free_be;
	d->wc.be = d->cx.be = free_be;
	d->wc.retire.arg = d->cx.retire.arg = d;
	d->wc.retire.defer = d->cx.retire.defer = retire_defer;
	d->wc.retire.mark_put = d->cx.retire.mark_put = mark_put;
	d->wc.retire.mark_get = d->cx.retire.mark_get = mark_get;
	return 0;
}

void fosd_lanes_state_close(fosd_device *d)
{
	if (!d->lstate)
		return;
	for (int i = 0; i < d->n_lanes; i++) {
		fosd_pending_free(d->lstate[i].pend); /* settled first */
		d->lstate[i].pend = NULL;
	}
	d->wc.retire.defer = d->cx.retire.defer = NULL;
	retire_run(d, 1); /* every lane settled: nothing reads them (their marks go to the pool) */
	memset(&d->wc.retire, 0, sizeof d->wc.retire);
	memset(&d->cx.retire, 0, sizeof d->cx.retire);
	for (int i = 0; i < d->mark_n; i++)
		if (d->free_be->mark_free)
			d->free_be->mark_free(d->free_be, d->mark_pool[i]);
	free(d->mark_pool);
	d->mark_pool = NULL;
	d->mark_n = 0;
	d->wc.be = d->cx.be = d->be;
	pthread_mutex_destroy(&d->retire_mu);
	free(d->lstate);
	d->lstate = NULL;
}

int fosd_lane_hold(fosd_device *d, int lane, fosd_job *s, fos_err *e)
{
	fosd_lane_held *x = malloc(sizeof *x);
	fos_err se;
	if (!x) { /* the job keeps its resources (freed with its answer, after this sync) */
		snprintf(e->msg, sizeof e->msg, "out of memory holding the request's resources");
		(void)fosd_lane_settle_pending(d, lane, &se);
		(void)d->lanes[lane]->sync(d->lanes[lane], &se);
		fosd_lane_ended(d, lane);
		return -1;
	}
	fosd_job_hold(s, &x->h);
	x->d = d;
	x->lane = lane;
	if (!fosd_pending_add(d->lstate[lane].pend, x, e))
		return 0;
	/* no mark: the lane is synchronized, then the request is let go */
	(void)fosd_lane_settle_pending(d, lane, &se);
	(void)d->lanes[lane]->sync(d->lanes[lane], &se);
	held_release(x);
	return -1;
}

int fosd_lane_settle_pending(fosd_device *d, int lane, fos_err *e)
{
	return fosd_pending_settle(d->lstate[lane].pend, e);
}

size_t fosd_lanes_pending(fosd_device *d)
{
	size_t n = 0;
	for (int i = 0; d->lstate && i < d->n_lanes; i++)
		n += fosd_pending_count(d->lstate[i].pend);
	return n;
}

size_t fosd_lanes_poll(fosd_device *d)
{
	size_t n = 0;
	for (int i = 0; d->lstate && i < d->n_lanes; i++)
		n += fosd_pending_poll(d->lstate[i].pend);
	return n;
}

int fosd_lane_pick_async(fosd_device *d, uint64_t key)
{
	for (int i = 0; i < d->n_lanes; i++)
		if (d->lstate[i].owner == key) {
			if (!(d->lane_busy >> i & 1))
				return i;
			if (fosd_pending_count(d->lstate[i].pend))
				return -1; /* (not seen: one request of a connection at a time) */
			d->lstate[i].owner = 0; /* its work is done: any lane will do */
			break;
		}
	/* a lane nobody holds; else the least recently taken one whose owner's work is done (an
	 * owner that comes back then finds its own lane, or another it took least recently) */
	int best = -1;
	for (int i = 0; i < d->n_lanes; i++) {
		if (d->lane_busy >> i & 1)
			continue;
		if (!d->lstate[i].owner)
			return i;
		if ((best < 0 || d->lstate[i].taken < d->lstate[best].taken) && !fosd_pending_count(d->lstate[i].pend))
			best = i;
	}
	return best;
}

/* Opens d's lanes 1.. like d->be (lane 0): the same backend and device; on the cpu, the threads
 * shared out between the lanes (the results do not depend on the thread count). */
int fosd_lanes_open(fosd_exec *srv, fosd_device *d, char *msg, size_t msgsz)
{
	int n = srv->cfg->streams > 0 ? srv->cfg->streams : (!strcmp(d->be->name, "cuda") ? 8 : 1);
	if (n > FOSD_MAX_LANES)
		n = FOSD_MAX_LANES;
	d->lanes = calloc((size_t)n, sizeof *d->lanes);
	if (!d->lanes || pthread_mutex_init(&d->lane_mu, NULL)) {
		free(d->lanes);
		d->lanes = NULL;
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	pthread_condattr_t ca;
	int rv = pthread_condattr_init(&ca);
	if (!rv) {
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		rv = pthread_cond_init(&d->lane_cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (rv) {
		pthread_mutex_destroy(&d->lane_mu);
		free(d->lanes);
		d->lanes = NULL;
		snprintf(msg, msgsz, "cannot create a condition variable: %s", strerror(rv));
		return -1;
	}
	d->lane_bufs = calloc((size_t)n, sizeof *d->lane_bufs);
	if (!d->lane_bufs) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	d->lanes[0] = d->be;
	d->n_lanes = 1;
	int cpu = strcmp(d->be->name, "cuda") != 0;
	int threads = 0;
	if (cpu && n > 1) {
		long online = sysconf(_SC_NPROCESSORS_ONLN);
		int total = srv->cfg->threads > 0 ? srv->cfg->threads : (online > 0 ? (int)online : 1);
		threads = total / n > 0 ? total / n : 1;
	}
	for (int i = 1; i < n; i++) {
		fos_err e;
		memset(&e, 0, sizeof e);
		fos_backend *b = srv->lane_open ? srv->lane_open(srv, d, i, &e)
				 : cpu	  ? fos_backend_cpu(threads, &e)
					  : fos_backend_cuda(d->ordinal, &e);
		if (!b) {
			snprintf(msg, msgsz, "device %d: cannot open backend instance %d of %d for the executor's lanes: %s",
				 d->index, i + 1, n, e.msg);
			return -1;
		}
		d->lanes[d->n_lanes++] = b;
	}
#ifdef FOS_HAVE_CUDA
	/* Every lane syncs after each request and every source (message, region) lives until then
	 * (run_early holds them past an early answer): h2d need not wait for its copy (cuda_backend.h). */
	for (int i = 0; !cpu && i < d->n_lanes; i++) {
		fos_err e;
		if (fos_cuda_set_h2d_nowait(d->lanes[i], 1, &e)) {
			snprintf(msg, msgsz, "device %d lane %d: %s", d->index, i, e.msg);
			return -1;
		}
	}
#endif
	fos_err fe;
	memset(&fe, 0, sizeof fe);
	fos_backend *free_be = srv->lane_open ? srv->lane_open(srv, d, 0, &fe)
			       : cpu	      ? fos_backend_cpu(1, &fe)
					      : fos_backend_cuda(d->ordinal, &fe);
	if (!free_be) {
		snprintf(msg, msgsz, "device %d: cannot open the backend instance the caches free through: %s", d->index,
			 fe.msg);
		return -1;
	}
#ifdef FOS_HAVE_CUDA
	/* it frees only what the retire list found idle (and, out of memory, after settling every
	 * lane): its blocks may go to every lane (cuda_blocks.cu) */
	if (!cpu && !strcmp(free_be->name, "cuda") && fos_cuda_set_frees_idle(free_be, 1, &fe)) {
		snprintf(msg, msgsz, "device %d: %s", d->index, fe.msg);
		free_be->destroy(free_be);
		return -1;
	}
#endif
	if (fosd_lanes_state_open(d, free_be, msg, msgsz)) {
		free_be->destroy(free_be);
		return -1;
	}
	char of[224] = "";
	if (srv->n_devs > 1)
		snprintf(of, sizeof of, " of device %d, %s", d->index, d->name);
	fosd_info("executor%s: %d lane%s (%s backend instances%s), %d workers", of, d->n_lanes, d->n_lanes == 1 ? "" : "s",
		  d->be->name, cpu ? "" : ", one stream each",
		  srv->cfg->workers > d->n_lanes ? srv->cfg->workers : d->n_lanes);
	return 0;
}

void fosd_lanes_close(fosd_device *d)
{
	fosd_lanes_state_close(d); /* every lane settled, every retired free run */
	if (d->free_be)
		d->free_be->destroy(d->free_be);
	d->free_be = NULL;
	if (!d->lanes)
		return;
	for (int i = 0; d->lane_bufs && i < d->n_lanes; i++)
		for (int w = 0; w < 2; w++)
			if (d->lane_bufs[i].p[w])
				d->lanes[i]->free(d->lanes[i], d->lane_bufs[i].p[w]);
	free(d->lane_bufs);
	d->lane_bufs = NULL;
	for (int i = 1; i < d->n_lanes; i++) /* lane 0 is d->be, destroyed with the server */
		d->lanes[i]->destroy(d->lanes[i]);
	free(d->lanes);
	d->lanes = NULL;
	d->n_lanes = 0;
	pthread_cond_destroy(&d->lane_cv);
	pthread_mutex_destroy(&d->lane_mu);
}
