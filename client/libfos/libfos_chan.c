/* libfos_chan.c: the client side of a request channel (fos.h "request channel"; the layout and
 * the doorbell are in fos_chan.h): creating the sealed memfd, registering it with channel = true,
 * one exchange at a time (write the request, ring, poll then sleep on the reply's futex word), and
 * closing. */
#include "libfos_internal.h"
#include "fos_chan.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FOSC_CHAN_DEFAULT_BYTES ((size_t)4 << 20)

typedef struct fosc_chan {
	pthread_mutex_t mu;   /* one exchange at a time; closed, base */
	atomic_int closed;
	int fd;
	uint8_t *base;
	size_t size;
	uint64_t cap;
	int spin_us;
	uint64_t conn; /* fos_client.losses when it was opened: another value, its connection is gone */
	char name[64];
	struct fosc_chan *next; /* fos_client.chan_old */
} fosc_chan;

static uint64_t fosc_chan_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static fos_chan_ctl *ctl_of(fosc_chan *ch)
{
	return (fos_chan_ctl *)ch->base;
}

static void fosc_chan_unmap(fosc_chan *ch)
{
	if (ch->base)
		munmap(ch->base, ch->size);
	if (ch->fd >= 0)
		close(ch->fd);
	ch->base = NULL;
	ch->fd = -1;
}

static void fosc_chan_free(fosc_chan *ch)
{
	fosc_chan_unmap(ch);
	pthread_mutex_destroy(&ch->mu);
	free(ch);
}

/* Unregisters (a server that is gone, or a connection replaced, already let it go) and unmaps.
 * ch->mu held or ch not yet shared. */
static int fosc_chan_end(fos_client *c, fosc_chan *ch, fos_status *st)
{
	ch->closed = 1;
	fos_status ust;
	int code = fosc_region_unregister(c, ch->name, &ust);
	if (code == FOS_CODE_NOT_FOUND || code == FOS_CODE_UNAVAILABLE || code == FOS_CODE_DEADLINE_EXCEEDED)
		code = FOS_CODE_OK;
	fosc_chan_unmap(ch);
	if (code)
		return fosc_status(st, code, "closing the channel: %s", ust.message);
	return fosc_status(st, FOS_CODE_OK, "channel closed");
}

int fos_channel_open(fos_client *c, size_t bytes, int spin_us, fos_status *st)
{
	if (!c)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	if (!bytes)
		bytes = FOSC_CHAN_DEFAULT_BYTES;
	if (bytes < FOS_CHAN_MIN_SIZE || bytes > ((size_t)1 << 34))
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "a channel needs %u bytes to 16 GiB, not %zu",
				   FOS_CHAN_MIN_SIZE, bytes);
	if (spin_us < 0 || spin_us > FOS_CHANNEL_SPIN_MAX_US)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "spin_us %d is not in 0 .. %d", spin_us,
				   FOS_CHANNEL_SPIN_MAX_US);
	if (atomic_load(&c->chan))
		return fosc_status(st, FOS_CODE_ALREADY_EXISTS, "the handle has a channel open already");
	static atomic_uint seq;
	fosc_chan *ch = calloc(1, sizeof *ch);
	if (!ch)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	ch->fd = -1;
	ch->size = bytes;
	ch->spin_us = spin_us ? spin_us : FOS_CHANNEL_SPIN_DEFAULT_US;
	snprintf(ch->name, sizeof ch->name, "libfos.chan.%d.%u", (int)getpid(), atomic_fetch_add(&seq, 1));
	if (pthread_mutex_init(&ch->mu, NULL)) {
		free(ch);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cannot make a mutex");
	}
	int code;
	ch->fd = memfd_create(ch->name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (ch->fd < 0 || ftruncate(ch->fd, (off_t)bytes) ||
	    fcntl(ch->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "making the channel's memfd of %zu bytes: %s", bytes,
				   strerror(errno));
		fosc_chan_free(ch);
		return code;
	}
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ch->fd, 0);
	if (p == MAP_FAILED) {
		code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "mapping %zu bytes: %s", bytes, strerror(errno));
		fosc_chan_free(ch);
		return code;
	}
	ch->base = p;
	ctl_of(ch)->magic = FOS_CHAN_MAGIC;
	ch->conn = atomic_load(&c->losses); /* before registering: a loss meanwhile shows */
	char key[32];
	snprintf(key, sizeof key, "fd:%d", ch->fd);
	uint64_t cap = 0;
	code = fosc_region_register(c, ch->name, key, bytes, 1, (uint32_t)spin_us, &cap, st);
	if (code) {
		fosc_chan_free(ch);
		return code;
	}
	ch->cap = cap;
	if (cap != fos_chan_cap(bytes) || __atomic_load_n(&ctl_of(ch)->state, __ATOMIC_SEQ_CST) != FOS_CHAN_SERVING) {
		fosc_chan_end(c, ch, NULL);
		fosc_chan_free(ch);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the server answered the channel's registration but does not serve it");
	}
	fosc_chan *none = NULL;
	if (!atomic_compare_exchange_strong(&c->chan, &none, ch)) { /* another thread opened one meanwhile */
		fosc_chan_end(c, ch, NULL);
		fosc_chan_free(ch);
		return fosc_status(st, FOS_CODE_ALREADY_EXISTS, "the handle has a channel open already");
	}
	atomic_store(&c->chan_want_bytes, bytes);
	atomic_store(&c->chan_want_spin, spin_us);
	return fosc_status(st, FOS_CODE_OK, "channel open (%llu-byte request and reply areas)", (unsigned long long)cap);
}

/* Moves the handle's channel, if any, to chan_old (a caller may still hold it; freed by fos_close)
 * and returns whether there was one. */
static int fosc_chan_retire(fos_client *c, fosc_chan *ch)
{
	if (!ch)
		return 0;
	if (c->io_mu_ok)
		pthread_mutex_lock(&c->io_mu);
	ch->next = c->chan_old;
	c->chan_old = ch;
	if (c->io_mu_ok)
		pthread_mutex_unlock(&c->io_mu);
	return 1;
}

static uint64_t fosc_chan_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void fosc_chan_revive(fos_client *c)
{
	size_t bytes = atomic_load(&c->chan_want_bytes);
	if (!bytes)
		return;
	fosc_chan *ch = atomic_load(&c->chan);
	if (ch && !ch->closed)
		return;
	uint64_t now = fosc_chan_now_ms(), last = atomic_load(&c->chan_tried_ms);
	if (now - last < 1000 || atomic_exchange(&c->chan_reopening, 1))
		return;
	atomic_store(&c->chan_tried_ms, now);
	ch = atomic_load(&c->chan);
	if (!ch || ch->closed) { /* fosd let it go (a reconnect, a restart): a new one */
		if (ch && atomic_compare_exchange_strong(&c->chan, &ch, NULL)) {
			pthread_mutex_lock(&ch->mu);
			fosc_chan_end(c, ch, NULL); /* unregisters if fosd still has it; unmaps */
			pthread_mutex_unlock(&ch->mu);
			fosc_chan_retire(c, ch);
		}
		fos_status st;
		int spin = atomic_load(&c->chan_want_spin);
		if (fos_channel_open(c, bytes, spin, &st) && st.code != FOS_CODE_ALREADY_EXISTS)
			atomic_store(&c->chan_want_bytes, bytes); /* still wanted: tried again a second later */
	}
	atomic_store(&c->chan_reopening, 0);
}

int fos_channel_close(fos_client *c, fos_status *st)
{
	if (!c)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	atomic_store(&c->chan_want_bytes, 0); /* not wanted any more: not opened again */
	fosc_chan *ch = atomic_exchange(&c->chan, NULL);
	if (!ch)
		return fosc_status(st, FOS_CODE_OK, "no channel open");
	pthread_mutex_lock(&ch->mu); /* a call using it finishes first */
	int code = ch->closed ? fosc_status(st, FOS_CODE_OK, "channel closed") : fosc_chan_end(c, ch, st);
	pthread_mutex_unlock(&ch->mu);
	fosc_chan_retire(c, ch); /* a caller may still hold it: freed by fos_close */
	return code;
}

size_t fos_channel_bytes(const fos_client *c)
{
	fosc_chan *ch = c ? atomic_load(&((fos_client *)c)->chan) : NULL;
	return ch && !ch->closed ? (size_t)ch->cap : 0;
}

void fosc_chan_abandon(fos_client *c)
{
	fosc_chan *ch = atomic_exchange(&c->chan, NULL);
	if (ch) {
		ch->next = c->chan_old;
		c->chan_old = ch;
	}
	while (c->chan_old) {
		fosc_chan *n = c->chan_old->next;
		fosc_chan_unmap(c->chan_old);
		free(c->chan_old); /* its mutex is the child's copy: not destroyed, a parent's thread may have held it */
		c->chan_old = n;
	}
}

void fosc_chan_free_all(fos_client *c)
{
	atomic_store(&c->chan_want_bytes, 0);
	fosc_chan *ch = atomic_exchange(&c->chan, NULL);
	if (ch) {
		if (!ch->closed)
			fosc_chan_end(c, ch, NULL);
		fosc_chan_free(ch);
	}
	while (c->chan_old) {
		fosc_chan *n = c->chan_old->next;
		fosc_chan_free(c->chan_old);
		c->chan_old = n;
	}
}

/* ---- one exchange --------------------------------------------------------------------------- */

static uint32_t ld32(uint32_t *w)
{
	return __atomic_load_n(w, __ATOMIC_SEQ_CST);
}

static void st32(uint32_t *w, uint32_t v)
{
	__atomic_store_n(w, v, __ATOMIC_SEQ_CST);
}

/* Waits until rep_seq == seq (1), the channel closed without taking the request (0), the
 * deadline passed (-1), or the connection the channel belongs to was lost (-2: a fosd that was
 * killed never closes it; the pipe events say so). */
static int fosc_chan_wait(fos_client *c, fosc_chan *ch, uint32_t seq, int spin_us, uint64_t deadline_us)
{
	fos_chan_ctl *ctl = ctl_of(ch);
	uint64_t spin_end = fosc_chan_now_us() + (uint64_t)spin_us;
	for (;;) {
		if (ld32(&ctl->rep_seq) == seq)
			return 1;
		if (ld32(&ctl->state) != FOS_CHAN_SERVING)
			return ld32(&ctl->rep_seq) == seq ? 1 : 0;
		if (atomic_load(&c->losses) != ch->conn)
			return ld32(&ctl->rep_seq) == seq ? 1 : -2;
		uint64_t now = fosc_chan_now_us();
		if (now >= deadline_us)
			return -1;
		if (now < spin_end) {
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#endif
			continue;
		}
		uint32_t seen = ld32(&ctl->rep_seq);
		st32(&ctl->cli_sleeping, 1);
		if (seen != seq && ld32(&ctl->rep_seq) == seen && ld32(&ctl->state) == FOS_CHAN_SERVING) {
			uint64_t left = deadline_us - now;
			if (left > 20000)
				left = 20000; /* look at state and the connection now and then: a server that
					       * stopped says so there, a lost connection in c->losses */
			struct timespec ts = {(time_t)(left / 1000000u), (long)(left % 1000000u) * 1000};
			syscall(SYS_futex, &ctl->rep_seq, FUTEX_WAIT, seen, &ts, NULL, 0);
		}
		st32(&ctl->cli_sleeping, 0);
	}
}

int fosc_chan_exchange(fos_client *c, const nng_msg *req, int timeout_ms, nng_msg **reply, int *code,
		       fos_status *st)
{
	fosc_chan *ch = atomic_load(&c->chan);
	size_t len = nng_msg_len((nng_msg *)req);
	if (!ch || len > ch->cap || pthread_mutex_trylock(&ch->mu))
		return 0;
	if (ch->closed || ld32(&ctl_of(ch)->state) != FOS_CHAN_SERVING || atomic_load(&c->losses) != ch->conn) {
		ch->closed = 1; /* fosd stopped serving it (connection lost, shutdown): the socket from now on */
		pthread_mutex_unlock(&ch->mu);
		return 0;
	}
	fos_chan_ctl *ctl = ctl_of(ch);
	if (ld32(&ctl->rep_seq) != ld32(&ctl->req_seq)) {
		/* an earlier call timed out and fosd has not answered it yet: it may still be copying that
		 * request out of the area, so nothing is written there until it has; the socket meanwhile */
		pthread_mutex_unlock(&ch->mu);
		return 0;
	}
	uint8_t *rq = ch->base + FOS_CHAN_HDR, *rp = rq + ch->cap;
	memcpy(rq, nng_msg_body((nng_msg *)req), len);
	__atomic_store_n(&ctl->req_len, (uint64_t)len, __ATOMIC_SEQ_CST);
	uint32_t seq = ld32(&ctl->req_seq) + 1;
	st32(&ctl->req_seq, seq);
	if (ld32(&ctl->srv_sleeping))
		syscall(SYS_futex, &ctl->req_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
	int spin = atomic_load(&c->spin_us);
	if (spin < ch->spin_us)
		spin = ch->spin_us;
	int w = fosc_chan_wait(c, ch, seq, spin, fosc_chan_now_us() + (uint64_t)timeout_ms * 1000u);
	if (w == -2) { /* the request may have been taken: the same id again once reconnected */
		ch->closed = 1;
		*code = FOSC_LOST;
		fosc_status(st, FOS_CODE_UNAVAILABLE, "the connection was lost while waiting for the reply through the "
			    "channel");
		pthread_mutex_unlock(&ch->mu);
		return 1;
	}
	if (w == 0) { /* closed before it took the request: nothing ran, the socket may carry it */
		ch->closed = 1;
		pthread_mutex_unlock(&ch->mu);
		return 0;
	}
	if (w < 0) {
		*code = fosc_status(st, FOS_CODE_DEADLINE_EXCEEDED, "waiting for the reply through the channel: no reply "
				    "within %d ms", timeout_ms);
		pthread_mutex_unlock(&ch->mu);
		return 1;
	}
	uint64_t n = __atomic_load_n(&ctl->rep_len, __ATOMIC_SEQ_CST);
	nng_msg *m = NULL;
	int rv;
	if (n < 4 || n > ch->cap) {
		*code = fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply through the channel (%llu bytes)",
				    (unsigned long long)n);
	} else if ((rv = nng_msg_alloc(&m, (size_t)n))) {
		*code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cannot hold the reply: %s", nng_strerror(rv));
	} else {
		memcpy(nng_msg_body(m), rp, (size_t)n);
		*reply = m;
		*code = FOS_CODE_OK;
	}
	pthread_mutex_unlock(&ch->mu);
	return 1;
}
