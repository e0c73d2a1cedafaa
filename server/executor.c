/* executor.c: the worker pool. Workers take queued requests in arrival order, drop those past their
 * deadline, and run each op holding the backend lock (one backend instance, whose ops are not
 * documented thread-safe). Context expiry sweeps are run by a worker too, since they free backend
 * memory. */
#include "server.h"
#include "deadline.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void run_sweep(fosd_server *srv)
{
	pthread_mutex_lock(&srv->be_mu);
	uint64_t n = fosd_contexts_sweep(&srv->cx, fosd_now_ns());
	pthread_mutex_unlock(&srv->be_mu);
	if (n)
		fosd_debug("contexts: %llu expired", (unsigned long long)n);
}

/* After an INTERNAL error: if the backend cannot even synchronize (a sticky CUDA error such as an
 * illegal address), every later request would fail too. Stop serving: drain and exit 1, so that a
 * supervisor restarts fosd with a fresh device context. */
static void check_backend(fosd_server *srv)
{
	fos_err e;
	memset(&e, 0, sizeof e);
	if (srv->be->sync(srv->be, &e) == FOS_OK || atomic_exchange(&srv->fatal, 1))
		return;
	fosd_error("the %s backend failed for good (%s): shutting down", srv->be->name, e.msg);
	kill(getpid(), SIGTERM);
}

static void run_one(fosd_server *srv, fosd_slot *s)
{
	uint32_t dl = s->rq->deadline_ms;
	if (dl && fosd_now_ns() > s->t_recv_ns + (uint64_t)dl * 1000000ull) {
		char msg[128];
		snprintf(msg, sizeof msg, "the request waited past its %u ms deadline", dl);
		fosd_finish(s, fosd_error_reply(s->req_id, FOS__CODE__DEADLINE_EXCEEDED, msg),
			    FOS__CODE__DEADLINE_EXCEEDED);
		return;
	}
	if (fosd_drop_if_client_gone(srv, s))
		return;
	int code = 0;
	uint64_t t0 = fosd_now_ns();
	if (fosd_backend_lock(srv, s)) { /* the deadline passed while another request held the backend */
		fosd_deadline_answer(s);
		return;
	}
	nng_msg *r = fosd_execute(srv, s, &code);
	if (code == FOS__CODE__INTERNAL)
		check_backend(srv);
	pthread_mutex_unlock(&srv->be_mu);
	fosd_debug("request %llu (%s): queued %llu us, ran %llu us, %s", (unsigned long long)s->req_id,
		   fosd_op_name(s->op), (unsigned long long)((t0 - s->t_recv_ns) / 1000),
		   (unsigned long long)((fosd_now_ns() - t0) / 1000), fosw_code_name(code));
	fosd_finish(s, r, code);
}

static void *worker_main(void *arg)
{
	fosd_server *srv = arg;
	for (;;) {
		pthread_mutex_lock(&srv->q_mu);
		while (!srv->q_head && !srv->sweep_pending && !srv->q_stop)
			pthread_cond_wait(&srv->q_cv, &srv->q_mu);
		if (srv->q_stop) {
			pthread_mutex_unlock(&srv->q_mu);
			return NULL;
		}
		if (srv->sweep_pending) {
			srv->sweep_pending = 0;
			pthread_mutex_unlock(&srv->q_mu);
			run_sweep(srv);
			continue;
		}
		fosd_slot *s = srv->q_head;
		srv->q_head = s->qnext;
		if (!srv->q_head)
			srv->q_tail = NULL;
		srv->queued--;
		pthread_mutex_unlock(&srv->q_mu);
		s->qnext = NULL;
		run_one(srv, s);
	}
}

int fosd_executor_start(fosd_server *srv, char *msg, size_t msgsz)
{
	int n = srv->cfg->workers;
	srv->workers = calloc((size_t)n, sizeof *srv->workers);
	if (!srv->workers) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		int rv = pthread_create(&srv->workers[i], NULL, worker_main, srv);
		if (rv) {
			snprintf(msg, msgsz, "cannot start worker thread %d: %s", i, strerror(rv));
			return -1;
		}
		srv->n_workers = i + 1;
	}
	return fosd_deadline_start(srv, msg, msgsz);
}

void fosd_executor_submit(fosd_server *srv, fosd_slot *s)
{
	pthread_mutex_lock(&srv->q_mu);
	s->qnext = NULL;
	if (srv->q_tail)
		srv->q_tail->qnext = s;
	else
		srv->q_head = s;
	srv->q_tail = s;
	srv->queued++;
	pthread_cond_signal(&srv->q_cv);
	fosd_deadline_queued(srv, s);
	pthread_mutex_unlock(&srv->q_mu);
}

void fosd_executor_request_sweep(fosd_server *srv)
{
	pthread_mutex_lock(&srv->q_mu);
	srv->sweep_pending = 1;
	pthread_cond_signal(&srv->q_cv);
	pthread_mutex_unlock(&srv->q_mu);
}

uint64_t fosd_executor_queued(fosd_server *srv)
{
	pthread_mutex_lock(&srv->q_mu);
	uint64_t n = srv->queued;
	pthread_mutex_unlock(&srv->q_mu);
	return n;
}

void fosd_executor_stop(fosd_server *srv)
{
	fosd_deadline_stop(srv);
	pthread_mutex_lock(&srv->q_mu);
	srv->q_stop = 1;
	pthread_cond_broadcast(&srv->q_cv);
	pthread_mutex_unlock(&srv->q_mu);
	for (int i = 0; i < srv->n_workers; i++)
		pthread_join(srv->workers[i], NULL);
	free(srv->workers);
	srv->workers = NULL;
	srv->n_workers = 0;
}
