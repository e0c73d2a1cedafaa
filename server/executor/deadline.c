/* deadline.c: the deadline reaper of queued requests (a thread that asks the executor to answer
 * the expired ones, fosd_executor_reap, and sleeps until the next deadline), the deadline queries
 * (see deadline.h). The queue and the backend lock are the executor's. */
#include "deadline.h"
#include "response.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fosd_deadlines {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC: a request with a deadline was queued, or stop */
	pthread_t thread;
	int stop;
	int kicked;        /* a request with a deadline was queued since the last look */
	uint64_t reaped;
} fosd_deadlines;

uint64_t fosd_deadline_of(const fosd_job *s)
{
	uint32_t dl = s->rq ? s->rq->deadline_ms : 0;
	return dl ? s->t_recv_ns + (uint64_t)dl * 1000000ull : 0;
}

int fosd_past_deadline(const fosd_job *s)
{
	uint64_t d = fosd_deadline_of(s);
	return d && fosd_now_ns() > d;
}

void fosd_deadline_answer(fosd_exec *srv, fosd_job *s)
{
	char msg[128];
	snprintf(msg, sizeof msg, "the request passed its %u ms deadline before it could run", s->rq->deadline_ms);
	srv->finish(s, fosd_error_reply(s->req_id, FOS__CODE__DEADLINE_EXCEEDED, msg), FOS__CODE__DEADLINE_EXCEEDED);
}

void fosd_deadline_abstime(struct timespec *ts, clockid_t clk, uint64_t mono_deadline_ns)
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
	fosd_exec *srv = arg;
	fosd_deadlines *d = srv->deadlines;
	pthread_mutex_lock(&d->mu);
	while (!d->stop) {
		d->kicked = 0;
		pthread_mutex_unlock(&d->mu);
		uint64_t reaped = 0;
		uint64_t next = fosd_executor_reap(srv, fosd_now_ns(), &reaped);
		pthread_mutex_lock(&d->mu);
		d->reaped += reaped;
		if (d->kicked || d->stop)
			continue; /* queued while the queue was looked at: look again */
		if (next) {
			struct timespec ts;
			fosd_deadline_abstime(&ts, CLOCK_MONOTONIC, next + 1000000ull); /* 1 ms past it */
			pthread_cond_timedwait(&d->cv, &d->mu, &ts);
		} else {
			pthread_cond_wait(&d->cv, &d->mu);
		}
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

int fosd_deadline_start(fosd_exec *srv, char *msg, size_t msgsz)
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
	if (!rv && (rv = pthread_mutex_init(&d->mu, NULL)))
		pthread_cond_destroy(&d->cv);
	if (rv) {
		free(d);
		snprintf(msg, msgsz, "cannot create a condition variable: %s", strerror(rv));
		return -1;
	}
	srv->deadlines = d;
	if ((rv = pthread_create(&d->thread, NULL, dl_main, srv))) {
		pthread_cond_destroy(&d->cv);
		pthread_mutex_destroy(&d->mu);
		free(d);
		srv->deadlines = NULL;
		snprintf(msg, msgsz, "cannot start the deadline thread: %s", strerror(rv));
		return -1;
	}
	return 0;
}

void fosd_deadline_stop(fosd_exec *srv)
{
	fosd_deadlines *d = srv->deadlines;
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->thread, NULL);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	free(d);
	srv->deadlines = NULL;
}

void fosd_deadline_kick(fosd_exec *srv)
{
	fosd_deadlines *d = srv->deadlines;
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->kicked = 1;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

void fosd_deadline_queued(fosd_exec *srv, fosd_job *s)
{
	fosd_deadlines *d = srv->deadlines;
	if (!d || !fosd_deadline_of(s))
		return;
	pthread_mutex_lock(&d->mu);
	d->kicked = 1;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
}
