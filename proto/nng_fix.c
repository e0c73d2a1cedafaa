/* nng_fix.c: work-arounds for two bugs of nng 1.5.2 (the version Debian 12 ships), linked into
 * every program of this tree with -Wl,--wrap (NNG_FIX in the Makefile).
 *
 * 1. (nng issue #1518, fixed upstream in 1.6.0)
 * The bug: nng maps a write's EPIPE (the peer has closed) to NNG_ECLOSED, the code it also uses
 * for "this object was closed by its owner". When a peer connects and disconnects while the SP
 * handshake is under way, the listener's accept completes with NNG_ECLOSED, and the socket takes
 * it for its own listener being closed: it never accepts on that listener again. Any local user
 * (or, on tcp, anyone) can thus stop fosd from taking new connections by connecting and closing in
 * a loop, and the connections that pile up unaccepted make nng's poller spin on their hang-ups.
 * Dialers have the mirror problem: a dialer whose handshake meets EPIPE stops reconnecting.
 *
 * The fix: EPIPE becomes NNG_ECONNRESET, which nng already treats as a remote condition (the
 * listener accepts the next connection at once; the dialer retries; a pipe closes).
 *
 * 2. A pipe closed by its own side in the middle of a partial write or read never finishes
 * closing. The ipc and tcp transports send (and receive) a message as several stream operations
 * when the socket buffer takes only part of it; closing the pipe stops their stream aio, and the
 * next part's nng_stream_send/recv then returns at once without ever completing it (nni_aio_begin
 * refuses a stopped aio and nothing calls back). The message's own aio stays busy, so the pipe's
 * teardown (rep0 pipe_stop) waits for it forever, and with it nng's one reaper thread: no later
 * connection is ever cleaned up and nng_close hangs. fosd closes exactly such pipes when a client
 * does not read its replies. The fix: when the wrapped call left the aio unstarted (result
 * NNG_ECANCELED, which the transports' own cancellation cannot produce here: they hold the pipe's
 * lock around the call and close with NNG_ECLOSED), it is completed with NNG_ECONNRESET, so the
 * transport sees a broken stream and fails the message's aio. Not NNG_ECLOSED: the TLS layer stops
 * its TCP stream's aios when the peer hangs up, and its next read (a handshake whose SP header
 * exchange is still under way, e.g. a client that completes the TLS handshake and closes at once)
 * lands here; its error becomes the negotiation's, and from there the listener's accept, where
 * NNG_ECLOSED would stop the listener for good, as in 1. (tests/test_trust_tls.c
 * test_tls_peers_that_hang_up).
 *
 * 3. (nng issue #1713, fixed upstream after 1.7) A protocol that hands a message to a pipe whose
 * send aio its close has already stopped loses the message: the transport's send returns at once
 * (nni_aio_begin refuses the aio) and nothing frees it. Seen as leaked request messages in clients
 * whose connection fosd closed during a drain. The fix, as upstream: when the wrapped
 * nni_pipe_send left the aio unstarted with its message, the message is freed. */
#include <errno.h>

#include <nng/nng.h>

void __real_nng_stream_send(nng_stream *s, nng_aio *aio);
void __real_nng_stream_recv(nng_stream *s, nng_aio *aio);
void __wrap_nng_stream_send(nng_stream *s, nng_aio *aio);
void __wrap_nng_stream_recv(nng_stream *s, nng_aio *aio);
void nni_aio_finish_error(nng_aio *aio, int rv); /* nng's internal completion (src/core/aio.c) */

struct nni_pipe;
void __real_nni_pipe_send(struct nni_pipe *p, nng_aio *aio);
void __wrap_nni_pipe_send(struct nni_pipe *p, nng_aio *aio);

void __wrap_nni_pipe_send(struct nni_pipe *p, nng_aio *aio)
{
	__real_nni_pipe_send(p, aio);
	nng_msg *m;
	if (nng_aio_result(aio) == NNG_ECANCELED && (m = nng_aio_get_msg(aio)) != NULL) {
		nng_aio_set_msg(aio, NULL);
		nng_msg_free(m);
	}
}

void __wrap_nng_stream_send(nng_stream *s, nng_aio *aio)
{
	__real_nng_stream_send(s, aio);
	if (nng_aio_result(aio) == NNG_ECANCELED)
		nni_aio_finish_error(aio, NNG_ECONNRESET);
}

void __wrap_nng_stream_recv(nng_stream *s, nng_aio *aio)
{
	__real_nng_stream_recv(s, aio);
	if (nng_aio_result(aio) == NNG_ECANCELED)
		nni_aio_finish_error(aio, NNG_ECONNRESET);
}

int __real_nni_plat_errno(int errnum);
int __wrap_nni_plat_errno(int errnum);
int fosd_nng_fix_active(void);
int nni_plat_errno(int errnum);

int __wrap_nni_plat_errno(int errnum)
{
	if (errnum == EPIPE)
		return NNG_ECONNRESET;
	return __real_nni_plat_errno(errnum);
}

/* 1 when this program was linked with the wrap (our reference to nni_plat_errno goes through it). */
int fosd_nng_fix_active(void)
{
	return nni_plat_errno(EPIPE) == NNG_ECONNRESET;
}
