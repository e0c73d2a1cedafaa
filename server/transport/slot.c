/* slot.c: the bookkeeping every transport does around a request, whichever transport it came
 * from (transport.c, chan.c): counting it in flight and for the drain when it arrives, and giving
 * back what it held (tenant quota, the connection's share, the drain's count) once its reply has
 * left. Invariant: fosd_slot_end runs exactly once for each fosd_slot_begin. */
#include "transport.h"
#include "auth.h"

void fosd_slot_begin(fosd_tpsrv *srv, fosd_slot *s)
{
	atomic_fetch_add(&srv->inflight, 1);
	/* counted before draining is read: the drain (control.c) stores draining, then reads
	 * accepted, so a request is either refused or waited for */
	atomic_fetch_add(&srv->accepted, 1);
	s->accepted = 1;
	if (atomic_load(&srv->draining)) {
		atomic_fetch_sub(&srv->accepted, 1);
		s->accepted = 0;
	}
}

void fosd_slot_end(fosd_slot *s)
{
	fosd_tpsrv *srv = fosd_tp_of(s->srv);
	fosd_auth_done(fosd_slot_request(s));
	if (s->unauth_held) {
		fosd_conns_unauth_release(&srv->conns, nng_pipe_id(s->pipe));
		s->unauth_held = 0;
	}
	if (s->conn_held) {
		fosd_conns_release(&srv->conns, nng_pipe_id(s->pipe));
		s->conn_held = 0;
	}
	if (s->accepted) {
		atomic_fetch_sub(&srv->accepted, 1);
		s->accepted = 0;
	}
	atomic_fetch_sub(&srv->inflight, 1);
}
