/* libfos_conn.c: the handle's connection and what hangs on it (fos.h "losing fosd"): nng's pipe
 * events counted into fos_client.pipes (connections now) and .losses (connections lost so far:
 * the request channel of a lost connection is dead, libfos_chan.c compares), calls that only
 * release something of the connection not waiting for a connection that is not there, the re-put
 * of a weight fosd lost (the handle's copies, else the caller's hook), and fork: nng marks a
 * forked child unusable (any later use aborts the process), so libfos registers its own fork
 * handler at the first connect and refuses, with FAILED_PRECONDITION, calls on a handle made
 * before the fork and connects in the child.
 * Invariants: the pipe callbacks touch only the two atomics (nng_close returns after the last
 * one, so the handle outlives them); nothing here calls nng on an inherited handle. */
#include "libfos_internal.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* Forks since libfos first connected in this process's ancestry (the child handler counts). */
static atomic_uint fosc_fork_gen;
/* Set once libfos connected in this process or an ancestor: from then on a fork poisons nng. */
static atomic_int fosc_nng_used;
static pthread_once_t fosc_atfork_once = PTHREAD_ONCE_INIT;

static void fosc_atfork_child(void)
{
	atomic_fetch_add(&fosc_fork_gen, 1);
}

static void fosc_atfork_register(void)
{
	pthread_atfork(NULL, NULL, fosc_atfork_child);
}

static void fosc_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	fos_client *c = arg;
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		atomic_fetch_add(&c->pipes, 1);
	} else if (ev == NNG_PIPE_EV_REM_POST) { /* also for a pipe refused after ADD_PRE */
		atomic_fetch_sub(&c->pipes, 1);
		atomic_fetch_add(&c->losses, 1);
	}
}

int fosc_conn_watch(fos_client *c)
{
	pthread_once(&fosc_atfork_once, fosc_atfork_register);
	atomic_store(&fosc_nng_used, 1);
	c->fork_gen = atomic_load(&fosc_fork_gen);
	int rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, fosc_pipe_event, c);
	if (!rv)
		rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, fosc_pipe_event, c);
	return rv;
}

int fosc_connected(const fos_client *c)
{
	return atomic_load(&((fos_client *)c)->pipes) > 0;
}

int fosc_inherited(const fos_client *c)
{
	return c->fork_gen != atomic_load(&fosc_fork_gen);
}

int fosc_inherited_status(const fos_client *c, fos_status *st)
{
	return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
			   "this handle to %s was connected before the process forked: nng cannot be used in a "
			   "forked child, so a child must not use its parent's handle (close it, then connect in a "
			   "process that did not inherit libfos: exec, or a spawned process)",
			   c->url ? c->url : "fosd");
}

int fos_after_fork(void)
{
	return atomic_load(&fosc_nng_used) && atomic_load(&fosc_fork_gen) > 0;
}

int fosc_fork_check(fos_status *st)
{
	if (!fos_after_fork())
		return FOS_CODE_OK;
	return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
			   "this process was forked from one where libfos had connected, and nng cannot be used "
			   "after fork: connect in a process that did not inherit libfos (exec, a spawned process, "
			   "or another copy of libfos.so)");
}

int fosc_call_cleanup(fos_client *c, Fos__Request *rq, fosc_reply *out, fos_status *st)
{
	if (!fosc_connected(c)) {
		memset(out, 0, sizeof *out);
		return fosc_status(st, FOS_CODE_UNAVAILABLE, "no connection to %s now (fosd let go of what it held "
				   "for the last one)", c->url);
	}
	return fosc_call(c, rq, NULL, 0, out, st);
}

void fos_set_reput_hook(fos_client *c, fos_reput_hook fn, void *user)
{
	if (!c)
		return;
	c->reput_user = user;
	c->reput_hook = fn;
}

int fosc_reput_any(fos_client *c, const char *name, uint64_t version)
{
	if (!name)
		return FOS_CODE_NOT_FOUND;
	if (fosc_reput_restore(c, name) == FOS_CODE_OK)
		return FOS_CODE_OK;
	if (!c->reput_hook)
		return FOS_CODE_NOT_FOUND;
	int code = c->reput_hook(c, name, version, c->reput_user);
	if (code == FOS_CODE_OK)
		atomic_fetch_add(&c->hook_reputs, 1);
	if (code == FOS_CODE_ALREADY_EXISTS) /* another thread's call put that version first */
		code = FOS_CODE_OK;
	return code;
}
