/* deadline.c: the deadline reaper of queued requests, deadline-bounded backend locking and the
 * dropping of requests whose client is gone (see deadline.h). */
#include "deadline.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fosd_deadlines {
	pthread_cond_t cv; /* on srv->q_mu, CLOCK_MONOTONIC */
	pthread_t thread;
	int stop;
	uint64_t reaped;
} fosd_deadlines;

uint64_t fosd_deadline_of(const fosd_slot *s)
{
	uint32_t dl = s->rq ? s->rq->deadline_ms : 0;
	return dl ? s->t_recv_ns + (uint64_t)dl * 1000000ull : 0;
}

int fosd_past_deadline(const fosd_slot *s)
{
	uint64_t d = fosd_deadline_of(s);
	return d && fosd_now_ns() > d;
}

void fosd_deadline_answer(fosd_slot *s)
{
	char msg[128];
	snprintf(msg, sizeof msg, "the request passed its %u ms deadline before it could run", s->rq->deadline_ms);
	fosd_finish(s, fosd_error_reply(s->req_id, FOS__CODE__DEADLINE_EXCEEDED, msg), FOS__CODE__DEADLINE_EXCEEDED);
}

static void dl_abstime(struct timespec *ts, clockid_t clk, uint64_t mono_deadline_ns)
{
	uint64_t now = fosd_now_ns();
	uint64_t left = mono_deadline_ns > now ? mono_deadline_ns - now : 0;
	clock_gettime(clk, ts);
	uint64_t ns = (uint64_t)ts->tv_nsec + left % 1000000000ull;
	ts->tv_sec += (time_t)(left / 1000000000ull + ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

static void *dl_main(void *arg)
{
	fosd_server *srv = arg;
	fosd_deadlines *d = srv->deadlines;
	pthread_mutex_lock(&srv->q_mu);
	while (!d->stop) {
		uint64_t now = fosd_now_ns(), next = 0;
		fosd_slot *expired = NULL, **pp = &srv->q_head, *prev = NULL;
		while (*pp) {
			fosd_slot *s = *pp;
			uint64_t t = fosd_deadline_of(s);
			if (t && t <= now) {
				*pp = s->qnext;
				if (srv->q_tail == s)
					srv->q_tail = prev;
				srv->queued--;
				s->qnext = expired;
				expired = s;
				continue;
			}
			if (t && (!next || t < next))
				next = t;
			prev = s;
			pp = &s->qnext;
		}
		if (expired) {
			pthread_mutex_unlock(&srv->q_mu);
			while (expired) {
				fosd_slot *n = expired->qnext;
				expired->qnext = NULL;
				d->reaped++;
				fosd_debug("request %llu (%s): deadline passed while queued", (unsigned long long)expired->req_id,
					   fosd_op_name(expired->op));
				fosd_deadline_answer(expired);
				expired = n;
			}
			pthread_mutex_lock(&srv->q_mu);
			continue;
		}
		if (next) {
			struct timespec ts;
			dl_abstime(&ts, CLOCK_MONOTONIC, next + 1000000ull); /* 1 ms past it */
			pthread_cond_timedwait(&d->cv, &srv->q_mu, &ts);
		} else {
			pthread_cond_wait(&d->cv, &srv->q_mu);
		}
	}
	pthread_mutex_unlock(&srv->q_mu);
	return NULL;
}

int fosd_deadline_start(fosd_server *srv, char *msg, size_t msgsz)
{
	fosd_deadlines *d = calloc(1, sizeof *d);
	pthread_condattr_t ca;
	if (!d || pthread_condattr_init(&ca)) {
		free(d);
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rv = pthread_cond_init(&d->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rv) {
		free(d);
		snprintf(msg, msgsz, "cannot create a condition variable: %s", strerror(rv));
		return -1;
	}
	srv->deadlines = d;
	if ((rv = pthread_create(&d->thread, NULL, dl_main, srv))) {
		pthread_cond_destroy(&d->cv);
		free(d);
		srv->deadlines = NULL;
		snprintf(msg, msgsz, "cannot start the deadline thread: %s", strerror(rv));
		return -1;
	}
	return 0;
}

void fosd_deadline_stop(fosd_server *srv)
{
	fosd_deadlines *d = srv->deadlines;
	if (!d)
		return;
	pthread_mutex_lock(&srv->q_mu);
	d->stop = 1;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&srv->q_mu);
	pthread_join(d->thread, NULL);
	pthread_cond_destroy(&d->cv);
	free(d);
	srv->deadlines = NULL;
}

void fosd_deadline_queued(fosd_server *srv, fosd_slot *s)
{
	if (srv->deadlines && fosd_deadline_of(s))
		pthread_cond_signal(&srv->deadlines->cv);
}

int fosd_backend_lock(fosd_server *srv, fosd_slot *s)
{
	uint64_t t = fosd_deadline_of(s);
	if (!t) {
		pthread_mutex_lock(&srv->be_mu);
		return 0;
	}
	struct timespec ts;
	dl_abstime(&ts, CLOCK_REALTIME, t);
	int rv;
	while ((rv = pthread_mutex_timedlock(&srv->be_mu, &ts)) == EINTR)
		;
	if (rv)
		return -1;
	if (fosd_now_ns() > t) {
		pthread_mutex_unlock(&srv->be_mu);
		return -1;
	}
	return 0;
}

int fosd_drop_if_client_gone(fosd_server *srv, fosd_slot *s)
{
	nng_pipe p = s->msg ? nng_msg_get_pipe(s->msg) : (nng_pipe)NNG_PIPE_INITIALIZER;
	nng_sockaddr sa;
	if (nng_pipe_id(p) <= 0 || nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != NNG_ENOENT)
		return 0; /* still connected (or unknown) */
	if (s->dedup_owner) {
		if (!fosd_dedup_abandon(&srv->dd, s->client_id, s->req_id))
			return 0; /* a copy resent on a new connection waits for this one */
		s->dedup_owner = 0;
	}
	fosd_debug("request %llu (%s): the client is gone; dropped before running", (unsigned long long)s->req_id,
		   fosd_op_name(s->op));
	fosd_slot_reply(s, NULL, FOS__CODE__CANCELLED);
	return 1;
}
