/* libfos_client.c: libfos's handle (connect, close, timeout) and the request/reply machinery:
 * one nng context and aio per call, resend disabled, inputs copied once into the message, the
 * reply's tensors checked before they are copied out. */
#include "libfos_internal.h"
#include "fos_chan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <nng/protocol/reqrep0/req.h>

const char *fos_version(void) { return FOS_VERSION; }

const char *fos_code_name(int code)
{
	return fosw_code_name(code);
}

int fosc_status(fos_status *st, int code, const char *fmt, ...)
{
	if (st) {
		st->code = code;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(st->message, sizeof st->message, fmt, ap);
		va_end(ap);
	}
	return code;
}

fos_tensor fos_tensor_1d(int dtype, int64_t n, const void *data)
{
	fos_tensor t;
	memset(&t, 0, sizeof t);
	t.dtype = dtype;
	t.ndim = 1;
	t.shape[0] = n;
	t.data = (void *)data;
	t.size = fos_tensor_bytes(&t);
	return t;
}

fos_tensor fos_tensor_2d(int dtype, int64_t rows, int64_t cols, const void *data)
{
	fos_tensor t;
	memset(&t, 0, sizeof t);
	t.dtype = dtype;
	t.ndim = 2;
	t.shape[0] = rows;
	t.shape[1] = cols;
	t.data = (void *)data;
	t.size = fos_tensor_bytes(&t);
	return t;
}

fos_tensor fos_tensor_out(void)
{
	fos_tensor t;
	memset(&t, 0, sizeof t);
	return t;
}

size_t fos_tensor_bytes(const fos_tensor *t)
{
	size_t n = fosw_dtype_size(t->dtype);
	for (int i = 0; i < t->ndim && i < FOS_TENSOR_MAX_DIMS; i++)
		n *= t->shape[i] > 0 ? (size_t)t->shape[i] : 0;
	return n;
}

/* nng error -> status code */
static int fosc_code_of_nng(int rv)
{
	switch (rv) {
	case NNG_ETIMEDOUT:
		return FOS_CODE_DEADLINE_EXCEEDED;
	case NNG_EINVAL:
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP:
		return FOS_CODE_INVALID_ARGUMENT;
	case NNG_ENOMEM:
	case NNG_EMSGSIZE:
		return FOS_CODE_RESOURCE_EXHAUSTED;
	case NNG_ECANCELED:
		return FOS_CODE_CANCELLED;
	default:
		return FOS_CODE_UNAVAILABLE;
	}
}

static uint64_t fosc_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t fosc_now_ms(void)
{
	return fosc_now_us() / 1000u;
}

int fos_connect(const char *url, const char *token, int timeout_ms, fos_client **out, fos_status *st)
{
	fos_connect_opts o;
	memset(&o, 0, sizeof o);
	o.token = token;
	o.timeout_ms = timeout_ms;
	return fosc_connect(url, &o, out, st);
}

int fosc_connect(const char *url, const fos_connect_opts *o, fos_client **out, fos_status *st)
{
	const char *token = o->token;
	int timeout_ms = o->timeout_ms;
	*out = NULL;
	if (!url || !*url)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no server URL");
	int code = fosc_fork_check(st); /* nng would abort the process */
	if (code)
		return code;
	fos_client *c = calloc(1, sizeof *c);
	if (!c)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	atomic_init(&c->next_id, 1);
	atomic_init(&c->timeout_ms, timeout_ms > 0 ? timeout_ms : 30000);
	c->shm_mu_ok = pthread_mutex_init(&c->shm_mu, NULL) == 0;
	c->io_mu_ok = pthread_mutex_init(&c->io_mu, NULL) == 0;
	c->cuda_mu_ok = pthread_mutex_init(&c->cuda_mu, NULL) == 0;
	const char *spin = getenv("FOS_SPIN_US");
	atomic_init(&c->spin_us, spin ? atoi(spin) : 0);
	atomic_init(&c->last_device, -1);
	if (getrandom(&c->client_id, sizeof c->client_id, 0) != (ssize_t)sizeof c->client_id)
		c->client_id = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)c;
	if (!c->client_id)
		c->client_id = 1;
	c->url = strdup(url);
	c->token = token ? strdup(token) : NULL;
	if (!c->url || (token && !c->token)) {
		fos_close(c);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	}
	int rv = nng_req0_open(&c->sock);
	if (rv) {
		free(c->url);
		free(c->token);
		if (c->shm_mu_ok)
			pthread_mutex_destroy(&c->shm_mu);
		if (c->io_mu_ok)
			pthread_mutex_destroy(&c->io_mu);
		fosc_cuda_close(c);
		free(c);
		return fosc_status(st, FOS_CODE_INTERNAL, "cannot open a REQ socket: %s", nng_strerror(rv));
	}
	/* never resend: a slow request must not run twice */
	if ((rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
	    (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 50)) ||
	    (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 2000)) || (rv = fosc_conn_watch(c))) {
		fos_close(c);
		return fosc_status(st, FOS_CODE_INTERNAL, "cannot configure the REQ socket: %s", nng_strerror(rv));
	}
	code = fosc_dial(c, url, o, st); /* TLS and re-put set up there (libfos_trust.c) */
	if (code) {
		fos_close(c);
		return code;
	}
	fos_health_info h;
	code = fos_health(c, &h, st);
	if (code) {
		fos_close(c);
		return code;
	}
	c->max_message = h.max_message_bytes;
	atomic_store(&c->last_device, -1); /* the connect's own Health is no call of the caller's */
	*out = c;
	return fosc_status(st, FOS_CODE_OK, "connected to %s (%s on %s)", url, h.backend, h.device);
}

/* A kept nng context and its aio (fos_client.io_free). */
typedef struct fosc_io {
	nng_ctx ctx;
	nng_aio *aio;
	atomic_int done; /* set by the aio's callback: what a spinning caller polls */
	struct fosc_io *next;
} fosc_io;

static void fosc_io_done(void *arg)
{
	atomic_store_explicit(&((fosc_io *)arg)->done, 1, memory_order_release);
}

/* Polls for the reply up to spin_us before nng_aio_wait sleeps: a thread that sleeps through a
 * request is woken by the scheduler when the reply comes, which costs tens of microseconds on an
 * idle CPU; polling trades a core for that latency. */
static void fosc_io_spin(fosc_io *io, int spin_us)
{
	if (spin_us <= 0)
		return;
	uint64_t end = fosc_now_us() + (uint64_t)spin_us;
	while (!atomic_load_explicit(&io->done, memory_order_acquire) && fosc_now_us() < end)
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#else
		;
#endif
}

/* A context for one request: a kept one, or a new one. Returns an nng error. */
static int fosc_io_take(fos_client *c, fosc_io **out)
{
	fosc_io *io = NULL;
	if (c->io_mu_ok) {
		pthread_mutex_lock(&c->io_mu);
		io = c->io_free;
		if (io)
			c->io_free = io->next;
		pthread_mutex_unlock(&c->io_mu);
	}
	if (!io) {
		int rv;
		if (!(io = calloc(1, sizeof *io)))
			return NNG_ENOMEM;
		if ((rv = nng_ctx_open(&io->ctx, c->sock))) {
			free(io);
			return rv;
		}
		if ((rv = nng_aio_alloc(&io->aio, fosc_io_done, io))) {
			nng_ctx_close(io->ctx);
			free(io);
			return rv;
		}
		nng_ctx_set_ms(io->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	}
	*out = io;
	return 0;
}

static void fosc_io_close(fosc_io *io)
{
	nng_aio_free(io->aio);
	nng_ctx_close(io->ctx);
	free(io);
}

/* After a request: a context whose exchange completed is kept; one that failed (timed out, lost
 * its connection) is closed, so that a late reply can never meet a later request. */
static void fosc_io_give(fos_client *c, fosc_io *io, int completed)
{
	if (!completed || !c->io_mu_ok) {
		fosc_io_close(io);
		return;
	}
	pthread_mutex_lock(&c->io_mu);
	io->next = c->io_free;
	c->io_free = io;
	pthread_mutex_unlock(&c->io_mu);
}

/* fos_close of a handle inherited across fork: the child's copies of the channel and regions are
 * unmapped, nothing of nng is touched (its state in a forked child is not usable), so neither
 * fosd nor the parent sees anything; nng's memory of the handle stays (the child's copy). */
static void fosc_abandon(fos_client *c)
{
	fosc_async_close(c, 1);
	fosc_chan_abandon(c);
	fosc_shm_close(c);
	for (fosc_io *io = c->io_free, *n; io; io = n) {
		n = io->next;
		free(io);
	}
	fosc_reput_free(c);
	free(c->url);
	free(c->token);
	free(c);
}

void fos_close(fos_client *c)
{
	if (!c)
		return;
	if (fosc_inherited(c)) {
		fosc_abandon(c);
		return;
	}
	fosc_async_close(c, 0); /* its calls answered first */
	fosc_chan_free_all(c); /* unregisters over the socket: first */
	while (c->io_free) {
		fosc_io *n = c->io_free->next;
		fosc_io_close(c->io_free);
		c->io_free = n;
	}
	if (c->io_mu_ok)
		pthread_mutex_destroy(&c->io_mu);
	if (nng_socket_id(c->sock) > 0)
		nng_close(c->sock);
	fosc_shm_close(c);
	fosc_cuda_close(c);
	fosc_reput_free(c);
	if (c->shm_mu_ok)
		pthread_mutex_destroy(&c->shm_mu);
	free(c->url);
	free(c->token);
	free(c);
}

void fos_set_spin(fos_client *c, int spin_us)
{
	atomic_store(&c->spin_us, spin_us > 0 ? spin_us : 0);
}

void fos_set_timeout(fos_client *c, int timeout_ms)
{
	if (timeout_ms > 0)
		atomic_store(&c->timeout_ms, timeout_ms);
}

void fos_set_reconnect_wait(fos_client *c, int wait_ms)
{
	if (wait_ms >= 0)
		atomic_store(&c->reconnect_wait_ms, wait_ms);
}

uint64_t fos_max_message_bytes(const fos_client *c)
{
	return c->max_message;
}

int fos_last_device(const fos_client *c)
{
	return c ? atomic_load(&c->last_device) : -1;
}

void fosc_reply_free(fosc_reply *r)
{
	if (r->resp)
		fos__response__free_unpacked(r->resp, NULL);
	if (r->msg)
		nng_msg_free(r->msg);
	memset(r, 0, sizeof *r);
}

static int fosc_check_in(const fosc_in *in, fos_status *st)
{
	const fos_tensor *t = in->in;
	if (!t)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s is missing", in->what);
	if (!fosw_dtype_size(t->dtype))
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: dtype %d is not valid", in->what, t->dtype);
	if (t->ndim < 1 || t->ndim > FOS_TENSOR_MAX_DIMS)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s has %d dimensions (1 or 2 expected)",
				   in->what, t->ndim);
	for (int i = 0; i < t->ndim; i++)
		if (t->shape[i] < 1)
			return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: dimension %d is %lld (must be >= 1)",
					   in->what, i, (long long)t->shape[i]);
	if (!t->data)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s has no data", in->what);
	if (t->mem != FOS_MEM_HOST && t->mem != FOS_MEM_CUDA)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "tensor %s: mem %d is neither FOS_MEM_HOST nor FOS_MEM_CUDA",
				   in->what, t->mem);
	return FOS_CODE_OK;
}

/* fosc_call_once: the request went through the channel and its reply did not fit there: the
 * operation ran, and the caller sends the request again over the socket (with a new id). */
#define FOSC_RETRY_SOCKET (-1)
/* Timeouts shorter than this are too close to the clock's millisecond to call early. */
#define FOSC_EARLY_TIMEOUT_MIN_MS 100

int fosc_exchange(fos_client *c, nng_msg *msg, int timeout, int nochan, int same_id, nng_msg **reply,
		  int *via_chan_out, fos_status *st)
{
	int code = 0, rv;
	*reply = NULL;
	*via_chan_out = 0;
	fosc_io *io = NULL;
	int completed = 0;
	if (!nochan && fosc_chan_exchange(c, msg, timeout, reply, &code, st)) {
		nng_msg_free(msg);
		*via_chan_out = !code;
		return code;
	}
	if ((rv = fosc_io_take(c, &io))) {
		nng_msg_free(msg);
		return fosc_status(st, fosc_code_of_nng(rv), "cannot open an nng context: %s", nng_strerror(rv));
	}
	nng_ctx ctx = io->ctx;
	nng_aio *aio = io->aio;
	uint64_t t0 = fosc_now_ms();
	/* the send waits for a connection at most reconnect_wait_ms when that is set, then, if the
	 * handle is connected after all (a slow hand-over to the pipe), for the rest of the timeout */
	int send_timeout = timeout, wait = atomic_load(&c->reconnect_wait_ms);
	if (wait > 0 && wait < timeout)
		send_timeout = wait;
	nng_aio_set_timeout(aio, send_timeout);
	nng_aio_set_msg(aio, msg);
	atomic_store(&io->done, 0);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	rv = nng_aio_result(aio);
	if (rv == NNG_ETIMEDOUT && send_timeout < timeout && fosc_connected(c)) {
		nng_aio_set_timeout(aio, timeout - send_timeout);
		send_timeout = timeout;
		atomic_store(&io->done, 0);
		nng_ctx_send(ctx, aio); /* the message is still the aio's */
		nng_aio_wait(aio);
		rv = nng_aio_result(aio);
	}
	if (rv) {
		nng_msg_free(nng_aio_get_msg(aio));
		if (rv == NNG_ETIMEDOUT && !fosc_connected(c))
			code = fosc_status(st, FOS_CODE_UNAVAILABLE, "no connection to %s within %d ms (is "
					   "fosd running? the handle keeps redialling)", c->url, send_timeout);
		else
			code = fosc_status(st, fosc_code_of_nng(rv), "sending to %s: %s", c->url, nng_strerror(rv));
		goto done;
	}
	uint64_t spent = fosc_now_ms() - t0;
	nng_aio_set_timeout(aio, spent >= (uint64_t)timeout ? 1 : (nng_duration)(timeout - (int)spent));
	atomic_store(&io->done, 0);
	nng_ctx_recv(ctx, aio);
	fosc_io_spin(io, atomic_load(&c->spin_us));
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio))) {
		code = fosc_status(st, fosc_code_of_nng(rv), "waiting for the reply from %s: %s", c->url,
				   rv == NNG_ECONNRESET ? "the connection was lost" : nng_strerror(rv));
		if (rv == NNG_ETIMEDOUT && !same_id && timeout >= FOSC_EARLY_TIMEOUT_MIN_MS &&
		    (fosc_now_ms() - t0) * 2 < (uint64_t)timeout)
			code = FOSC_RETRY_SAME_ID;
		if (rv == NNG_ECONNRESET)
			code = FOSC_LOST; /* fosc_call sends it again once reconnected */
		goto done;
	}
	*reply = nng_aio_get_msg(aio);
	nng_aio_set_msg(aio, NULL);
	completed = 1;
done:
	fosc_io_give(c, io, completed);
	return code;
}

/* One round trip (through the handle's request channel unless nochan, else the socket), ending by
 * deadline_ms (fosc_now_ms); *used_shm is set when a tensor of the request named a region. */
static int fosc_call_once(fos_client *c, Fos__Request *rq, fosc_in *ins, int nin, fosc_reply *out, fos_status *st,
			  int *used_shm, int nochan, uint64_t same_id, uint64_t deadline_ms)
{
	memset(out, 0, sizeof *out);
	out->c = c;
	int64_t shapes[FOSW_MAX_TENSORS][FOSW_MAX_DIMS];
	Fos__ShmRef refs[FOSW_MAX_TENSORS];
	Fos__CudaRef crefs[FOSW_MAX_TENSORS];
	fosc_dev_ref devs[FOSW_MAX_TENSORS];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	*used_shm = rq->n_shm_outputs > 0;
	int device = 0; /* a device tensor in or out: ordered by fos_set_cuda_stream's event */
	for (size_t k = 0; k < rq->n_shm_outputs; k++)
		device |= rq->shm_outputs[k]->cuda != NULL;
	if (nin > FOSW_MAX_TENSORS)
		return fosc_status(st, FOS_CODE_INTERNAL, "too many tensors");
	for (int i = 0; i < nin; i++) {
		int code = fosc_check_in(&ins[i], st);
		if (code)
			return code;
		if (ins[i].in->mem == FOS_MEM_CUDA) { /* in the caller's GPU memory: by IPC handle */
			if ((code = fosc_cuda_in(c, ins[i].in, ins[i].what, ins[i].t, shapes[i], &crefs[i], &devs[i], st)))
				return code;
			device = 1;
			continue;
		}
		if (fosc_shm_in(c, ins[i].in, ins[i].t, shapes[i], &refs[i])) { /* in a region: by reference */
			*used_shm = 1;
			continue;
		}
		fosw_tensor_init(ins[i].t, shapes[i], &pl, ins[i].in->dtype, ins[i].in->ndim, ins[i].in->shape);
	}
	struct fosc_devev *ev = NULL;
	int code = device ? fosc_cuda_wait_event(c, rq, &ev, st) : FOS_CODE_OK;
	if (code)
		return code;
	uint64_t now = fosc_now_ms();
	int timeout = deadline_ms > now ? (int)(deadline_ms - now) : 1;
	rq->id = same_id ? same_id : atomic_fetch_add(&c->next_id, 1);
	rq->client_id = c->client_id;
	rq->auth_token.len = c->token ? strlen(c->token) : 0; /* a C string: it holds no NUL */
	rq->auth_token.data = (uint8_t *)c->token;
	rq->deadline_ms = (uint32_t)timeout;

	nng_msg *msg;
	uint8_t *data;
	int rv = fosw_msg_build(&rq->base, &pl, &msg, &data);
	if (rv) {
		fosc_cuda_event_done(c, ev);
		return fosc_status(st, fosc_code_of_nng(rv), "cannot build the request: %s", nng_strerror(rv));
	}
	if (c->max_message && nng_msg_len(msg) > c->max_message) {
		size_t len = nng_msg_len(msg);
		nng_msg_free(msg);
		fosc_cuda_event_done(c, ev);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED,
				   "the request is %zu bytes, over the server's limit of %llu bytes", len,
				   (unsigned long long)c->max_message);
	}
	for (int i = 0; i < nin; i++)
		if (!ins[i].t->shm && !ins[i].t->cuda)
			memcpy(data + ins[i].t->offset, ins[i].in->data, (size_t)ins[i].t->length);

	int via_chan = 0;
	code = fosc_exchange(c, msg, timeout, nochan, same_id != 0, &out->msg, &via_chan, st);
	if (code)
		goto done;
	const uint8_t *hdr;
	size_t hlen;
	char why[256];
	if (fosw_split(nng_msg_body(out->msg), nng_msg_len(out->msg), &hdr, &hlen, &out->data, &out->dlen, why,
		       sizeof why)) {
		code = fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply: %s", why);
		goto done;
	}
	out->resp = fos__response__unpack(NULL, hlen, hdr);
	if (!out->resp) {
		code = fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply: the header is not a fos.Response");
		goto done;
	}
	if (out->resp->id != rq->id) {
		code = fosc_status(st, FOS_CODE_DATA_LOSS, "reply id %llu does not match request id %llu",
				   (unsigned long long)out->resp->id, (unsigned long long)rq->id);
		goto done;
	}
	if (out->resp->status && out->resp->status->code != FOS__CODE__OK) {
		code = out->resp->status->code;
		const char *m = out->resp->status->message ? out->resp->status->message : "";
		fosc_status(st, code, "%s", m);
		if (via_chan && code == FOS_CODE_RESOURCE_EXHAUSTED && !strncmp(m, FOS_CHAN_OVERFLOW, strlen(FOS_CHAN_OVERFLOW)))
			code = FOSC_RETRY_SOCKET;
		goto done;
	}
	if (out->resp->cuda_done_event.len && (code = fosc_cuda_done_wait(c, ev, &out->resp->cuda_done_event, st)))
		goto done; /* answered before its GPU work ended: the caller's stream waits for it */
	atomic_store(&c->last_device, out->resp->device <= INT32_MAX ? (int)out->resp->device : -1);
	fosc_status(st, FOS_CODE_OK, "ok");
done:
	fosc_cuda_event_done(c, ev);
	if (code)
		fosc_reply_free(out);
	return code;
}

/* Sends of one request after its connection was lost (each waits for the next connection). */
#define FOSC_LOST_TRIES 4

int fosc_call(fos_client *c, Fos__Request *rq, fosc_in *ins, int nin, fosc_reply *out, fos_status *st)
{
	int used_shm = 0;
	fos_status local, *sp = st ? st : &local;
	if (fosc_inherited(c)) {
		memset(out, 0, sizeof *out);
		return fosc_inherited_status(c, sp);
	}
	/* after the handle's asynchronous calls, and not at all when one of them failed unreported */
	int acode = fosc_async_drain(c, sp);
	if (acode) {
		memset(out, 0, sizeof *out);
		return acode;
	}
	uint64_t deadline = fosc_now_ms() + (uint64_t)atomic_load(&c->timeout_ms);
	int code = fosc_call_once(c, rq, ins, nin, out, sp, &used_shm, 0, 0, deadline);
	if (code == FOSC_RETRY_SOCKET) /* too large a reply for the channel: again over the socket */
		code = fosc_call_once(c, rq, ins, nin, out, sp, &used_shm, 1, 0, deadline);
	if (code == FOSC_RETRY_SAME_ID) { /* a spurious early timeout: once more, the same id */
		code = fosc_call_once(c, rq, ins, nin, out, sp, &used_shm, 1, rq->id, deadline);
		if (code == FOSC_RETRY_SAME_ID)
			code = FOS_CODE_DEADLINE_EXCEEDED;
	}
	/* the connection was lost with the request out: the same id again on the next connection, so
	 * that a fosd that ran it does not run it twice (the channel died with the connection) */
	for (int i = 0; code == FOSC_LOST && i < FOSC_LOST_TRIES && fosc_now_ms() < deadline; i++)
		code = fosc_call_once(c, rq, ins, nin, out, sp, &used_shm, 1, rq->id, deadline);
	/* a region the server does not know (a reconnect dropped it): register again, retry once */
	if (code == FOS_CODE_NOT_FOUND && used_shm && strstr(sp->message, "shm region") &&
	    strstr(sp->message, "not registered")) {
		fos_status st2;
		if (fosc_shm_reregister(c, &st2) == FOS_CODE_OK)
			code = fosc_call_once(c, rq, ins, nin, out, sp, &used_shm, 0, 0,
					      fosc_now_ms() + (uint64_t)atomic_load(&c->timeout_ms));
	}
	if (code == FOSC_LOST)
		code = fosc_status(sp, FOS_CODE_UNAVAILABLE, "the connection to %s was lost while waiting for the reply",
				   c->url);
	if (code == FOS_CODE_OK)
		fosc_chan_revive(c); /* the channel the caller opened, if fosd stopped serving it */
	return code;
}

void fosc_out_none(fos_tensor *out)
{
	if (!out)
		return;
	out->ndim = 0;
	out->shape[0] = out->shape[1] = 0;
	out->size = 0;
}

int fosc_out_expect(const fosw_tensor *v, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
		    fos_status *st)
{
	int exp_ndim = exp_d1 > 0 ? 2 : 1;
	if (v->dtype != dtype || (exp_d0 >= 0 && (v->ndim != exp_ndim || v->shape[0] != exp_d0 ||
						   (exp_ndim == 2 && v->shape[1] != exp_d1))))
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's %s has an unexpected dtype or shape", what);
	return FOS_CODE_OK;
}

int fosc_out_describe(fos_tensor *out, const fosw_tensor *v)
{
	out->dtype = v->dtype;
	out->ndim = v->ndim;
	out->shape[0] = v->shape[0];
	out->shape[1] = v->ndim > 1 ? v->shape[1] : 0;
	out->size = v->len;
	return FOS_CODE_OK;
}

int fosc_out_ref_check(const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
		       const char *bad, fosw_tensor *v, fos_status *st)
{
	Fos__Tensor tmp = *t;
	if (t->shm)
		tmp.shm = NULL;
	else
		tmp.cuda = NULL;
	tmp.offset = 0;
	static const uint8_t none;
	int code;
	char why[256];
	if (bad || fosw_tensor_get(&tmp, &none, (size_t)t->length, what, v, NULL, &code, why, sizeof why))
		return fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply: %s", bad ? bad : why);
	return fosc_out_expect(v, what, dtype, exp_d0, exp_d1, st);
}

int fosc_out_fits(fos_tensor *out, const fosw_tensor *v, const char *what, fos_status *st)
{
	if (out->size < v->len)
		return fosc_status(st, FOS_CODE_OUT_OF_RANGE, "output %s needs %zu bytes, the buffer has %zu", what, v->len,
				   out->size);
	return fosc_out_describe(out, v);
}

int fosc_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0, int64_t exp_d1,
	     fos_tensor *out, fos_status *st)
{
	fosw_tensor v;
	int code;
	char why[256];
	if (!t)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no %s", what);
	if (t->shm) /* written into a region of ours */
		return fosc_shm_out(r, t, what, dtype, exp_d0, exp_d1, out, st);
	if (t->cuda) /* written into our GPU memory */
		return fosc_cuda_out(r, t, what, dtype, exp_d0, exp_d1, out, st);
	if (out && out->mem == FOS_MEM_CUDA)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's %s came inline, not written into its device buffer",
				   what);
	if (fosw_tensor_get(t, r->data, r->dlen, what, &v, NULL, &code, why, sizeof why))
		return fosc_status(st, FOS_CODE_DATA_LOSS, "malformed reply: %s", why);
	if ((code = fosc_out_expect(&v, what, dtype, exp_d0, exp_d1, st)) || !out)
		return code;
	if (out->data) {
		if (out->size < v.len)
			return fosc_status(st, FOS_CODE_OUT_OF_RANGE, "output %s needs %zu bytes, the buffer has %zu", what,
					   v.len, out->size);
	} else {
		out->data = malloc(v.len ? v.len : 1);
		if (!out->data)
			return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "cannot allocate %zu bytes for %s", v.len, what);
	}
	memcpy(out->data, v.ptr, v.len);
	return fosc_out_describe(out, &v);
}
