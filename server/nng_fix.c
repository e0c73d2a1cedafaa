/* nng_fix.c: a work-around for a bug of nng 1.5.2 (the version Debian 12 ships; nng issue #1518,
 * fixed upstream in 1.6.0), linked into every program of this tree with
 * -Wl,--wrap=nni_plat_errno (tests/trust.mk adds it to LINK).
 *
 * The bug: nng maps a write's EPIPE (the peer has closed) to NNG_ECLOSED, the code it also uses
 * for "this object was closed by its owner". When a peer connects and disconnects while the SP
 * handshake is under way, the listener's accept completes with NNG_ECLOSED, and the socket takes
 * it for its own listener being closed: it never accepts on that listener again. Any local user
 * (or, on tcp, anyone) can thus stop fosd from taking new connections by connecting and closing in
 * a loop, and the connections that pile up unaccepted make nng's poller spin on their hang-ups.
 * Dialers have the mirror problem: a dialer whose handshake meets EPIPE stops reconnecting.
 *
 * The fix: EPIPE becomes NNG_ECONNRESET, which nng already treats as a remote condition (the
 * listener accepts the next connection at once; the dialer retries; a pipe closes). */
#include <errno.h>

#include <nng/nng.h>

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
