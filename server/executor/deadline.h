/* deadline.h: dropping work nobody waits for, as early as possible.
 *  - Queued requests: a reaper thread answers DEADLINE_EXCEEDED the moment a queued request's
 *    deadline passes (its slot and message are freed then, not when a worker reaches it).
 *  - Taken requests: a worker checks the deadline when it takes one, waits for the backend lock no
 *    longer than the deadline, and checks again once it holds it (executor.c).
 *  - Running requests: ops made of several backend steps check between steps (fosd_past_deadline).
 *  - Vanished clients: a request whose connection is gone (the client exited or crashed) is
 *    dropped before it runs, unless a copy resent on a new connection waits on it (the executor
 *    asks the requests stage, fosd_exec.drop_if_gone, reply.c). */
#ifndef FOSD_DEADLINE_H
#define FOSD_DEADLINE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "executor.h"

int fosd_deadline_start(fosd_exec *srv, char *msg, size_t msgsz);
void fosd_deadline_stop(fosd_exec *srv);
/* Called by the executor after queuing s (its queue lock held): wakes the reaper if s has a
 * deadline. */
void fosd_deadline_queued(fosd_exec *srv, fosd_job *s);
/* Wakes the reaper to look at the executor again at once (an asynchronous request left resources
 * pending on a device: fosd_executor_reap polls them). */
void fosd_deadline_kick(fosd_exec *srv);

/* The request's deadline on the monotonic clock (ns), 0 for none. */
uint64_t fosd_deadline_of(const fosd_job *s);
/* 1 when the request has a deadline and it has passed. */
int fosd_past_deadline(const fosd_job *s);
/* Answers s DEADLINE_EXCEEDED (and any duplicates waiting on it). */
void fosd_deadline_answer(fosd_exec *srv, fosd_job *s);

/* *ts: the time on clock clk when the monotonic clock (fosd_now_ns) reaches mono_deadline_ns. */
void fosd_deadline_abstime(struct timespec *ts, clockid_t clk, uint64_t mono_deadline_ns);

#endif
