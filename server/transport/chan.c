/* chan.c: request channels (see chan.h and proto/fos_chan.h): starting and stopping a channel's
 * thread, the doorbell (polling, then a futex on the shared sequence word), handing a request to
 * fosd_dispatch as a message of the registering connection, and writing the reply back (the slot's
 * send function, chan_send). */
#include "chan.h"
#include "transport.h"
#include "response.h"
#include "log.h"
#include "util.h"
#include "fos_chan.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct fosd_chan {
	fosd_slot slot;            /* the request in progress (first: a slot's address is the channel's) */
	fosd_tpsrv *srv;
	struct fosd_region *r;     /* referenced until the thread ends */
	nng_pipe pipe;
	uint32_t pipe_id;
	fos_chan_ctl *ctl;
	uint8_t *req, *rep;
	uint64_t cap;
	uint32_t spin_us;
	uint32_t seq;              /* the request in progress / last answered */
	atomic_int stop;
	pthread_mutex_t mu;        /* done */
	pthread_cond_t cv;
	int done;                  /* the reply of the request in progress is written */
	pthread_t th;
	fosd_chan *next;
};

/* ---- futex words in the shared region ------------------------------------------------------- */

static void futex_wait_us(uint32_t *w, uint32_t val, long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0); /* shared (not PRIVATE): another process wakes it */
}

static void futex_wake_all(uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

static uint32_t ld32(uint32_t *w)
{
	return __atomic_load_n(w, __ATOMIC_SEQ_CST);
}

static void st32(uint32_t *w, uint32_t v)
{
	__atomic_store_n(w, v, __ATOMIC_SEQ_CST);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* ---- the channel's thread ------------------------------------------------------------------- */

/* Waits for req_seq to move past c->seq: polls for spin_us, then sleeps on the futex (waking every
 * 20 ms to look at stop). Returns 0 when a request is there, -1 to stop. */
static int wait_request(fosd_chan *c)
{
	uint64_t end = fosd_now_ns() + (uint64_t)c->spin_us * 1000u;
	for (;;) {
		if (atomic_load(&c->stop))
			return -1;
		if (ld32(&c->ctl->req_seq) != c->seq)
			return 0;
		if (fosd_now_ns() < end) {
			cpu_relax();
			continue;
		}
		st32(&c->ctl->srv_sleeping, 1);
		if (ld32(&c->ctl->req_seq) == c->seq && !atomic_load(&c->stop))
			futex_wait_us(&c->ctl->req_seq, c->seq, 20000);
		st32(&c->ctl->srv_sleeping, 0);
	}
}

/* Writes reply (or, if it does not fit, an overflow error) into the reply area and rings. */
static void publish(fosd_chan *c, nng_msg *reply)
{
	nng_msg *own = NULL;
	if (reply && nng_msg_len(reply) > c->cap) {
		char m[256];
		snprintf(m, sizeof m,
			 FOS_CHAN_OVERFLOW " the reply is %zu bytes and this channel's reply area holds %llu (the "
			 "operation ran; send large results to a region or over the socket)",
			 nng_msg_len(reply), (unsigned long long)c->cap);
		own = fosd_error_reply(c->slot.req_id, FOS__CODE__RESOURCE_EXHAUSTED, m);
		reply = own;
	}
	size_t n = reply && nng_msg_len(reply) <= c->cap ? nng_msg_len(reply) : 0; /* 0: the client sees a bad reply */
	if (n)
		memcpy(c->rep, nng_msg_body(reply), n);
	__atomic_store_n(&c->ctl->rep_len, (uint64_t)n, __ATOMIC_SEQ_CST);
	st32(&c->ctl->rep_seq, c->seq);
	if (ld32(&c->ctl->cli_sleeping))
		futex_wake_all(&c->ctl->rep_seq);
	if (own)
		nng_msg_free(own);
}

/* The channel's reply function (fosd_request.send, dispatch.h): the reply goes back into the region. */
static void chan_send(fosd_request *r, nng_msg *reply)
{
	fosd_slot *s = fosd_slot_of(r);
	fosd_chan *c = (fosd_chan *)s; /* the slot is the channel's first member */
	publish(c, reply);
	if (reply)
		nng_msg_free(reply);
	fosd_slot_end(s);
	pthread_mutex_lock(&c->mu);
	c->done = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* One request: copied out of the region into a message of the registering connection, then
 * dispatched like a received one; returns when its reply is written. */
static void serve_one(fosd_chan *c)
{
	fosd_tpsrv *srv = c->srv;
	fosd_slot *s = &c->slot;
	c->seq = ld32(&c->ctl->req_seq);
	uint64_t len = __atomic_load_n(&c->ctl->req_len, __ATOMIC_SEQ_CST);
	atomic_fetch_add(&srv->chans.requests, 1);
	fosd_slot_begin(srv, s);
	s->conn_held = 0; /* a channel serves one request at a time: no share of the slots */
	s->conn_verdict = FOSD_CONN_OK;
	c->done = 0;
	s->t_recv_ns = fosd_now_ns();
	s->state = FOSD_SLOT_BUSY;
	s->req_id = 0;
	nng_msg *m = NULL;
	if (len < 4 || len > c->cap || nng_msg_alloc(&m, (size_t)len)) {
		char e[160];
		snprintf(e, sizeof e, "channel request of %llu bytes: a message of 4 to %llu bytes expected",
			 (unsigned long long)len, (unsigned long long)c->cap);
		fosd_dispatch_refuse(fosd_slot_request(s), len > c->cap || len < 4 ? FOS__CODE__INVALID_ARGUMENT : FOS__CODE__RESOURCE_EXHAUSTED,
				     e);
	} else {
		memcpy(nng_msg_body(m), c->req, (size_t)len); /* the client may go on writing: fosd reads its copy */
		nng_msg_set_pipe(m, c->pipe);
		s->pipe = c->pipe;
		s->msg = m;
		fosd_dispatch(fosd_slot_request(s));
	}
	pthread_mutex_lock(&c->mu);
	while (!c->done)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

static void *chan_main(void *arg)
{
	fosd_chan *c = arg;
	fosd_tpsrv *srv = c->srv;
	while (!wait_request(c))
		serve_one(c);
	st32(&c->ctl->state, FOS_CHAN_CLOSED);
	futex_wake_all(&c->ctl->rep_seq);
	fosd_debug("channel '%s' of connection %u closed", fosd_region_name(c->r), (unsigned)c->pipe_id);
	fosd_region_set_chan(&srv->regions, c->r, NULL, NULL);
	fosd_regions_release(&srv->regions, c->r);
	pthread_mutex_lock(&srv->chans.mu);
	fosd_chan **pp = &srv->chans.head;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	srv->chans.count--;
	pthread_cond_broadcast(&srv->chans.cv);
	pthread_mutex_unlock(&srv->chans.mu);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
	return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------- */

int fosd_chan_start_op(fosd_opsrv *srv, fosd_opreq *s, struct fosd_region *r, uint32_t spin_us, uint64_t *bytes,
		       char *msg, size_t msgsz)
{
	return fosd_chan_start((fosd_tpsrv *)srv, s, r, spin_us, bytes, msg, msgsz); /* its first part */
}

int fosd_chan_start(fosd_tpsrv *srv, fosd_opreq *s, struct fosd_region *r, uint32_t spin_us, uint64_t *bytes,
		    char *msg, size_t msgsz)
{
	fosd_chans *cs = &srv->chans;
	uint64_t size = fosd_region_size(r), cap = fos_chan_cap(size);
	fos_chan_ctl *ctl = (fos_chan_ctl *)fosd_region_base(r);
	int code = 0;
	if (!fosd_region_sealed(r)) {
		snprintf(msg, msgsz, "region '%s': a channel needs an object that cannot shrink (a memfd sealed with "
			 "F_SEAL_SHRINK)", fosd_region_name(r));
		code = FOS__CODE__INVALID_ARGUMENT;
	} else if (!cap) {
		snprintf(msg, msgsz, "region '%s' is %llu bytes: a channel needs at least %u", fosd_region_name(r),
			 (unsigned long long)size, FOS_CHAN_MIN_SIZE);
		code = FOS__CODE__INVALID_ARGUMENT;
	} else if (__atomic_load_n(&ctl->magic, __ATOMIC_SEQ_CST) != FOS_CHAN_MAGIC) {
		snprintf(msg, msgsz, "region '%s' does not start with a channel's magic number (fos_chan.h)",
			 fosd_region_name(r));
		code = FOS__CODE__INVALID_ARGUMENT;
	}
	fosd_chan *c = code ? NULL : calloc(1, sizeof *c);
	if (!code && !c) {
		snprintf(msg, msgsz, "out of memory");
		code = FOS__CODE__RESOURCE_EXHAUSTED;
	}
	if (code) {
		fosd_regions_release(&srv->regions, r);
		return code;
	}
	c->srv = srv;
	c->r = r;
	c->pipe = nng_msg_get_pipe(s->msg);
	c->pipe_id = nng_pipe_id(c->pipe);
	c->ctl = ctl;
	c->cap = cap;
	c->req = fosd_region_base(r) + FOS_CHAN_HDR;
	c->rep = c->req + cap;
	const uint32_t most = (uint32_t)srv->cfg->channel_spin_us;
	c->spin_us = spin_us && spin_us < most ? spin_us : most;
	c->slot.srv = fosd_tp_rq(srv);
	c->slot.send = chan_send;
	c->slot.own_thread = 1; /* the channel's thread serves only this slot */
	atomic_init(&c->stop, 0);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);

	pthread_mutex_lock(&cs->mu);
	int mine = 0;
	for (fosd_chan *o = cs->head; o; o = o->next)
		mine += o->pipe_id == c->pipe_id;
	if (cs->closed) {
		snprintf(msg, msgsz, "fosd is shutting down");
		code = FOS__CODE__UNAVAILABLE;
	} else if (mine >= FOSD_CHAN_MAX_PER_PIPE || cs->count >= cs->max_total) {
		snprintf(msg, msgsz, "too many channels (%d on this connection, at most %d; %d in all, at most %d)", mine,
			 FOSD_CHAN_MAX_PER_PIPE, cs->count, cs->max_total);
		code = FOS__CODE__RESOURCE_EXHAUSTED;
	} else if (fosd_region_set_chan(&srv->regions, r, c, fosd_chan_signal)) {
		snprintf(msg, msgsz, "region '%s' is gone or already a channel", fosd_region_name(r));
		code = FOS__CODE__FAILED_PRECONDITION;
	} else {
		/* serving from here on (before the reply, so the client's first request counts): the
		 * client places nothing before it has the reply */
		c->seq = ld32(&ctl->req_seq);
		st32(&ctl->rep_seq, c->seq);
		st32(&ctl->state, FOS_CHAN_SERVING);
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&c->th, &at, chan_main, c)) {
			st32(&ctl->state, FOS_CHAN_CLOSED);
			fosd_region_set_chan(&srv->regions, r, NULL, NULL);
			snprintf(msg, msgsz, "cannot start the channel's thread");
			code = FOS__CODE__RESOURCE_EXHAUSTED;
		} else {
			c->next = cs->head;
			cs->head = c;
			cs->count++;
		}
		pthread_attr_destroy(&at);
	}
	pthread_mutex_unlock(&cs->mu);
	if (code) {
		fosd_regions_release(&srv->regions, r);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
		return code;
	}
	*bytes = cap;
	fosd_info("channel '%s' of connection %u: %llu-byte request and reply areas, polling %u us",
		  fosd_region_name(r), (unsigned)c->pipe_id, (unsigned long long)cap, c->spin_us);
	return 0;
}

void fosd_chan_signal(fosd_chan *c)
{
	atomic_store(&c->stop, 1);
	futex_wake_all(&c->ctl->req_seq);
}

int fosd_chans_init(fosd_chans *cs)
{
	memset(cs, 0, sizeof *cs);
	cs->max_total = FOSD_CHAN_MAX_TOTAL;
	atomic_init(&cs->requests, 0);
	if (pthread_mutex_init(&cs->mu, NULL))
		return -1;
	if (pthread_cond_init(&cs->cv, NULL)) {
		pthread_mutex_destroy(&cs->mu);
		return -1;
	}
	return 0;
}

void fosd_chans_stop_all(fosd_tpsrv *srv)
{
	fosd_chans *cs = &srv->chans;
	pthread_mutex_lock(&cs->mu);
	cs->closed = 1;
	for (fosd_chan *c = cs->head; c; c = c->next)
		fosd_chan_signal(c);
	while (cs->count > 0)
		pthread_cond_wait(&cs->cv, &cs->mu);
	pthread_mutex_unlock(&cs->mu);
}

void fosd_chans_destroy(fosd_chans *cs)
{
	pthread_cond_destroy(&cs->cv);
	pthread_mutex_destroy(&cs->mu);
}

uint64_t fosd_chans_count(fosd_chans *cs)
{
	pthread_mutex_lock(&cs->mu);
	uint64_t n = (uint64_t)cs->count;
	pthread_mutex_unlock(&cs->mu);
	return n;
}
