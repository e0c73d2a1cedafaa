/* test_e2e_chan.c: request channels (proto/fos_chan.h, server/transport/chan.c, client/libfos/libfos_chan.c)
 * against a real fosd (ipc; CPU backend unless $FOS_TEST_BACKEND): results through a channel are
 * the bytes of the same daemon's socket path (forward inline and from regions, backward, linear,
 * quantize, dequantize) and Stats counts exactly the calls that went through it; a reply that
 * overflows the channel is sent again over the socket, a request that does not fit takes the
 * socket; several threads share one handle's channel; bad registrations get precise statuses;
 * garbage placed in a channel by hand gets INVALID_ARGUMENT and the channel keeps serving;
 * unregistering the region, a client that dies and fosd's shutdown all end the channel and leave
 * nothing behind; a fosd with channel_spin_us 0 still serves channels; calls that time out never
 * get a request run that the next call was writing over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "fos_chan.h"
#include "fos_wire.h"
#include "libfos_internal.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

/* fosd's limit of channels per connection (server/transport/chan.h FOSD_CHAN_MAX_PER_PIPE) */
#define CHAN_MAX_PER_CONN 8

#define M 128
#define K 128
#define N 256

static tsrv g_srv;
static uint16_t g_w[N * K], g_x[M * K], g_b[N], g_dy[M * N];

static fos_client *chan_connect(const char *url)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(url, NULL, 20000, &c, &st);
	if (rc)
		fail_msg("connect %s: %s: %s", url, fos_code_name(rc), st.message);
	return c;
}

static int chan_put_weight(const char *url)
{
	fos_client *c;
	fos_status st;
	if (fos_connect(url, NULL, 20000, &c, &st))
		return -1;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	int rc = fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st);
	fos_close(c);
	return rc ? -1 : 0;
}

static int setup_server(void **state)
{
	(void)state;
	tsrv_fill_bf16(g_w, N * K, 21, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 22, 1.0f);
	tsrv_fill_bf16(g_b, N, 23, 0.5f);
	tsrv_fill_bf16(g_dy, M * N, 24, 0.1f);
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	return chan_put_weight(g_srv.url);
}

static int teardown_server(void **state)
{
	(void)state;
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

/* ---- what fosd's Stats says ----------------------------------------------------------------- */

typedef struct chan_snap {
	uint64_t channels, chan_requests, forwards, dequantizes;
	uint64_t regions, region_bytes, mapped;
} chan_snap;

/* Stats through c (a handle WITHOUT a channel, so that asking does not count as a channel request). */
static chan_snap chan_stats(fos_client *c)
{
	chan_snap s;
	memset(&s, 0, sizeof s);
	fos_stats_info *si = calloc(1, sizeof *si);
	assert_non_null(si);
	fos_status st;
	ASSERT_OK(fos_stats(c, si, &st), st);
	s.channels = si->channels;
	s.chan_requests = si->channel_requests;
	for (int i = 0; i < si->n_ops; i++)
		if (!strcmp(si->ops[i].op, "forward"))
			s.forwards = si->ops[i].requests;
		else if (!strcmp(si->ops[i].op, "dequantize"))
			s.dequantizes = si->ops[i].requests;
	free(si);
	ASSERT_OK(fos_region_stats(c, &s.regions, &s.region_bytes, &s.mapped, &st), st);
	return s;
}

/* Polls until fosd serves `want` channels (a channel's thread ends after the reply that ended it). */
static void wait_channels(fos_client *c, uint64_t want, int ms)
{
	uint64_t t0 = tsrv_now_ms();
	chan_snap s;
	do {
		s = chan_stats(c);
		if (s.channels == want)
			return;
		usleep(10000);
	} while (tsrv_now_ms() - t0 < (uint64_t)ms);
	fail_msg("fosd serves %llu channels after %d ms, expected %llu", (unsigned long long)s.channels, ms,
		 (unsigned long long)want);
}

/* No channel, no region, nothing registered or mapped (polled up to ms: teardown is async). */
static void expect_clean(fos_client *c, int ms)
{
	uint64_t t0 = tsrv_now_ms();
	chan_snap s;
	do {
		s = chan_stats(c);
		if (!s.channels && !s.regions && !s.region_bytes && !s.mapped)
			return;
		usleep(20000);
	} while (tsrv_now_ms() - t0 < (uint64_t)ms);
	fail_msg("after %d ms fosd still has %llu channels, %llu regions (%llu bytes registered, %llu mapped)", ms,
		 (unsigned long long)s.channels, (unsigned long long)s.regions, (unsigned long long)s.region_bytes,
		 (unsigned long long)s.mapped);
}

/* Lines of fosd's /proc/PID/maps that mention needle. */
static int chan_maps_count(const tsrv *s, const char *needle)
{
	char path[64], line[1024];
	snprintf(path, sizeof path, "/proc/%d/maps", (int)s->pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* y (m, N) of "w" for x (m, K) over c; *y malloc'd. */
static void chan_forward(fos_client *c, const uint16_t *x, int64_t m, uint16_t **y)
{
	fos_status st;
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, m, K, x), ty = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "w", &tx, NULL, NULL, &ty, NULL, &st), st);
	assert_int_equal(ty.size, (size_t)m * N * 2);
	*y = ty.data;
}

/* The daemon still answers a forward with the bytes its socket path gave before. */
static void check_still_serving(const uint16_t *y_expected)
{
	fos_client *c = chan_connect(g_srv.url);
	uint16_t *y;
	chan_forward(c, g_x, M, &y);
	assert_memory_equal(y, y_expected, M * N * 2);
	free(y);
	fos_close(c);
}

/* ---- a channel driven by hand (fos_chan.h's protocol) ----------------------------------------- */

typedef struct hchan {
	int fd;
	uint8_t *base;
	size_t size;
	uint64_t cap;
	char name[64];
	char key[32];
} hchan;

/* A memfd of size bytes, mapped here; magic: write the channel's magic; seal: F_SEAL_SHRINK|GROW. */
static void hchan_make(hchan *h, const char *name, size_t size, int magic, int seal)
{
	memset(h, 0, sizeof *h);
	h->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(h->fd >= 0);
	assert_int_equal(ftruncate(h->fd, (off_t)size), 0);
	if (seal)
		assert_int_equal(fcntl(h->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	h->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, 0);
	assert_true(h->base != MAP_FAILED);
	h->size = size;
	h->cap = fos_chan_cap(size);
	if (magic)
		((fos_chan_ctl *)h->base)->magic = FOS_CHAN_MAGIC;
	snprintf(h->name, sizeof h->name, "%s", name);
	snprintf(h->key, sizeof h->key, "fd:%d", h->fd);
}

static void hchan_free(hchan *h)
{
	if (h->base)
		munmap(h->base, h->size);
	if (h->fd >= 0)
		close(h->fd);
	h->base = NULL;
	h->fd = -1;
}

static fos_chan_ctl *hctl(hchan *h)
{
	return (fos_chan_ctl *)h->base;
}

static uint32_t hld32(uint32_t *w)
{
	return __atomic_load_n(w, __ATOMIC_SEQ_CST);
}

/* Registers h as a channel on c (over c's socket unless c has a channel of its own). */
static void hchan_register(fos_client *c, hchan *h, uint32_t spin_us)
{
	fos_status st;
	uint64_t cap = 0;
	ASSERT_OK(fosc_region_register(c, h->name, h->key, h->size, 1, spin_us, &cap, &st), st);
	assert_int_equal(cap, h->cap);
	assert_int_equal(hld32(&hctl(h)->state), FOS_CHAN_SERVING);
}

/* Places n bytes of req with req_len as the length word (which may lie), rings; returns the seq. */
static uint32_t hchan_ring(hchan *h, const void *req, size_t n, uint64_t req_len)
{
	fos_chan_ctl *ctl = hctl(h);
	assert_true(n <= h->cap);
	if (n)
		memcpy(h->base + FOS_CHAN_HDR, req, n);
	__atomic_store_n(&ctl->req_len, req_len, __ATOMIC_SEQ_CST);
	uint32_t seq = hld32(&ctl->req_seq) + 1;
	__atomic_store_n(&ctl->req_seq, seq, __ATOMIC_SEQ_CST);
	if (hld32(&ctl->srv_sleeping))
		syscall(SYS_futex, &ctl->req_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
	return seq;
}

/* Waits (polling) for the reply to seq: 1, 0 if the channel closed without answering, -1 after ms. */
static int hchan_wait(hchan *h, uint32_t seq, int ms)
{
	fos_chan_ctl *ctl = hctl(h);
	uint64_t t0 = tsrv_now_ms();
	for (;;) {
		if (hld32(&ctl->rep_seq) == seq)
			return 1;
		if (hld32(&ctl->state) != FOS_CHAN_SERVING)
			return hld32(&ctl->rep_seq) == seq ? 1 : 0;
		if (tsrv_now_ms() - t0 > (uint64_t)ms)
			return -1;
		usleep(50);
	}
}

typedef struct hreply {
	uint8_t *buf;
	Fos__Response *resp;
	const uint8_t *data;
	size_t dlen;
	int code;
	const char *msg;
} hreply;

static void hreply_free(hreply *r)
{
	if (r->resp)
		fos__response__free_unpacked(r->resp, NULL);
	free(r->buf);
	memset(r, 0, sizeof *r);
}

/* One exchange by hand; the reply parsed into *r (free with hreply_free). */
static void hchan_call(hchan *h, const void *req, size_t n, uint64_t req_len, hreply *r)
{
	memset(r, 0, sizeof *r);
	uint32_t seq = hchan_ring(h, req, n, req_len);
	int w = hchan_wait(h, seq, 10000);
	if (w != 1)
		fail_msg("no reply through the channel (%s)", w ? "timed out" : "it closed");
	uint64_t len = __atomic_load_n(&hctl(h)->rep_len, __ATOMIC_SEQ_CST);
	if (len < 4 || len > h->cap)
		fail_msg("reply length %llu in a channel of %llu", (unsigned long long)len, (unsigned long long)h->cap);
	r->buf = malloc(len);
	assert_non_null(r->buf);
	memcpy(r->buf, h->base + FOS_CHAN_HDR + h->cap, len);
	const uint8_t *hdr;
	size_t hlen;
	char why[256];
	if (fosw_split(r->buf, len, &hdr, &hlen, &r->data, &r->dlen, why, sizeof why))
		fail_msg("malformed reply through the channel: %s", why);
	r->resp = fos__response__unpack(NULL, hlen, hdr);
	assert_non_null(r->resp);
	r->code = r->resp->status ? r->resp->status->code : 0;
	r->msg = r->resp->status && r->resp->status->message ? r->resp->status->message : "";
}

static void hexpect(hchan *h, const void *req, size_t n, uint64_t req_len, int code, const char *needle,
		    const char *needle2)
{
	hreply r;
	hchan_call(h, req, n, req_len, &r);
	if (r.code != code)
		fail_msg("req_len %llu: got %s (%s), expected %s", (unsigned long long)req_len, fos_code_name(r.code), r.msg,
			 fos_code_name(code));
	if (needle && !strstr(r.msg, needle))
		fail_msg("message '%s' does not mention '%s'", r.msg, needle);
	if (needle2 && !strstr(r.msg, needle2))
		fail_msg("message '%s' does not mention '%s'", r.msg, needle2);
	hreply_free(&r);
}

/* A Forward of "w" with x (m, K) inline, built as libfos builds it (fosw_msg_build); nng_msg_free it. */
static nng_msg *build_forward(uint64_t id, uint64_t client_id, const uint16_t *x, int64_t m)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	int64_t shape_store[2], shape[2] = {m, K};
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&t, shape_store, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape);
	fr.weight = (char *)"w";
	fr.x = &t;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	rq.id = id;
	rq.client_id = client_id;
	rq.auth_token = (ProtobufCBinaryData){0, NULL};
	rq.deadline_ms = 20000;
	nng_msg *msg;
	uint8_t *data;
	assert_int_equal(fosw_msg_build(&rq.base, &pl, &msg, &data), 0);
	memcpy(data + t.offset, x, (size_t)m * K * 2);
	return msg;
}

/* ---- 1. the same bytes as the socket, and Stats counts the channel's calls -------------------- */

static void test_bit_identical(void **state)
{
	(void)state;
	fos_client *c0 = chan_connect(g_srv.url), *c1 = chan_connect(g_srv.url);
	fos_status st;
	enum { R = 64, C = 256 };
	static float xf[R * C], am[R];
	for (int i = 0; i < R * C; i++)
		xf[i] = (float)((i * 37) % 101 - 50) * 0.173f;
	for (int i = 0; i < R; i++)
		am[i] = 30.0f + (float)i;

	/* over the socket (c0 has no channel) */
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), b = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_tensor w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), dy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	fos_tensor y0 = fos_tensor_out(), dx0 = fos_tensor_out(), dw0 = fos_tensor_out(), db0 = fos_tensor_out();
	fos_forward_opts fo = {0, FOS_OVERRIDE_DEFAULT, 0, 1, 0};
	fos_context ctx;
	ASSERT_OK(fos_forward(c0, "w", &x, &b, &fo, &y0, &ctx, &st), st);
	ASSERT_OK(fos_backward(c0, &ctx, &dy, NULL, &dx0, &dw0, &db0, &st), st);
	fos_linear_config lc = {FOS_OVERRIDE_QUANTIZED, 0, 0, 0, 0, 0};
	fos_tensor ly0 = fos_tensor_out(), ldx0 = fos_tensor_out(), ldw0 = fos_tensor_out(), ldb0 = fos_tensor_out();
	ASSERT_OK(fos_linear(c0, &x, &w, &b, &dy, &lc, &ly0, &ldx0, &ldw0, &ldb0, &st), st);
	fos_quant_config qc = {FOS_QRECIPE_4OVER6, FOS_BLOCKS_1X16, FOS_ERRMODE_MSE, 256, 1};
	fos_tensor qx = fos_tensor_2d(FOS_DTYPE_F32, R, C, xf), qa = fos_tensor_1d(FOS_DTYPE_F32, R, am);
	fos_tensor codes0 = fos_tensor_out(), scales0 = fos_tensor_out(), amax0 = fos_tensor_out(), deq0 = fos_tensor_out();
	ASSERT_OK(fos_quantize(c0, &qx, &qc, &qa, &codes0, &scales0, &amax0, &st), st);
	ASSERT_OK(fos_dequantize(c0, &codes0, &scales0, &amax0, 256, 1, FOS_DTYPE_BF16, &deq0, &st), st);
	/* the forward also equals the in-process reference (as in test_e2e_shm) */
	uint16_t *yr = malloc(M * N * 2);
	assert_non_null(yr);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, g_b, NULL, M, N, K, &o, yr, NULL, NULL, NULL), 0);
	assert_memory_equal(y0.data, yr, M * N * 2);
	free(yr);

	/* through the channel */
	assert_int_equal(fos_channel_bytes(c1), 0);
	ASSERT_OK(fos_channel_open(c1, 0, 0, &st), st);
	assert_int_equal(fos_channel_bytes(c1), fos_chan_cap((size_t)4 << 20));
	chan_snap s0 = chan_stats(c0);
	assert_int_equal(s0.channels, 1);
	assert_int_equal(s0.regions, 1); /* the channel's region */
	int calls = 0;

	fos_tensor y1 = fos_tensor_out(), dx1 = fos_tensor_out(), dw1 = fos_tensor_out(), db1 = fos_tensor_out();
	fos_context ctx1;
	ASSERT_OK(fos_forward(c1, "w", &x, &b, &fo, &y1, &ctx1, &st), st);
	calls++;
	assert_true(ctx1.id != 0);
	assert_int_equal(y1.size, M * N * 2);
	assert_memory_equal(y1.data, y0.data, M * N * 2);
	ASSERT_OK(fos_backward(c1, &ctx1, &dy, NULL, &dx1, &dw1, &db1, &st), st);
	calls++;
	assert_memory_equal(dx1.data, dx0.data, M * K * 2);
	assert_memory_equal(dw1.data, dw0.data, N * K * 2);
	assert_memory_equal(db1.data, db0.data, N * 2);

	/* X, bias, dY and every result in a region (registered and used through the channel) */
	fos_region *r;
	size_t sz = (M * K + N + M * N) * 2 + (M * N + M * K + N * K + N) * 2 + 16 * 64;
	ASSERT_OK(fos_region_create(c1, "chan-io", sz, FOS_REGION_MEMFD, &r, &st), st);
	calls++;
	uint8_t *p = fos_region_data(r);
	memset(p, 0xA5, sz);
	size_t off = 0;
#define PLACE(name, bytes) size_t name = off; off += ((bytes) + 63) / 64 * 64 + 64
	PLACE(ox, M * K * 2);
	PLACE(ob, N * 2);
	PLACE(ody, M * N * 2);
	PLACE(oy, M * N * 2);
	PLACE(odx, M * K * 2);
	PLACE(odw, N * K * 2);
	PLACE(odb, N * 2);
#undef PLACE
	assert_true(off <= sz);
	memcpy(p + ox, g_x, M * K * 2);
	memcpy(p + ob, g_b, N * 2);
	memcpy(p + ody, g_dy, M * N * 2);
	fos_tensor sx = fos_tensor_shm(r, ox, FOS_DTYPE_BF16, M, K), sb = fos_tensor_shm(r, ob, FOS_DTYPE_BF16, N, 0);
	fos_tensor sdy = fos_tensor_shm(r, ody, FOS_DTYPE_BF16, M, N), sy = fos_tensor_shm(r, oy, FOS_DTYPE_BF16, M, N);
	fos_tensor sdx = fos_tensor_shm(r, odx, FOS_DTYPE_BF16, M, K), sdw = fos_tensor_shm(r, odw, FOS_DTYPE_BF16, N, K);
	fos_tensor sdb = fos_tensor_shm(r, odb, FOS_DTYPE_BF16, N, 0);
	fos_context ctx2;
	ASSERT_OK(fos_forward(c1, "w", &sx, &sb, &fo, &sy, &ctx2, &st), st);
	calls++;
	assert_ptr_equal(sy.data, p + oy);
	assert_memory_equal(p + oy, y0.data, M * N * 2);
	ASSERT_OK(fos_backward(c1, &ctx2, &sdy, NULL, &sdx, &sdw, &sdb, &st), st);
	calls++;
	assert_memory_equal(p + odx, dx0.data, M * K * 2);
	assert_memory_equal(p + odw, dw0.data, N * K * 2);
	assert_memory_equal(p + odb, db0.data, N * 2);
	assert_int_equal(p[oy - 1], 0xA5);
	assert_int_equal(p[odb + N * 2], 0xA5);
	ASSERT_OK(fos_region_destroy(r, &st), st);
	calls++;

	fos_tensor ly1 = fos_tensor_out(), ldx1 = fos_tensor_out(), ldw1 = fos_tensor_out(), ldb1 = fos_tensor_out();
	ASSERT_OK(fos_linear(c1, &x, &w, &b, &dy, &lc, &ly1, &ldx1, &ldw1, &ldb1, &st), st);
	calls++;
	assert_memory_equal(ly1.data, ly0.data, M * N * 2);
	assert_memory_equal(ldx1.data, ldx0.data, M * K * 2);
	assert_memory_equal(ldw1.data, ldw0.data, N * K * 2);
	assert_memory_equal(ldb1.data, ldb0.data, N * 2);
	fos_tensor codes1 = fos_tensor_out(), scales1 = fos_tensor_out(), amax1 = fos_tensor_out(), deq1 = fos_tensor_out();
	ASSERT_OK(fos_quantize(c1, &qx, &qc, &qa, &codes1, &scales1, &amax1, &st), st);
	calls++;
	assert_int_equal(codes1.size, R * C / 2);
	assert_memory_equal(codes1.data, codes0.data, R * C / 2);
	assert_memory_equal(scales1.data, scales0.data, R * C / 16);
	assert_int_equal(amax1.size, amax0.size);
	assert_memory_equal(amax1.data, amax0.data, amax0.size);
	ASSERT_OK(fos_dequantize(c1, &codes1, &scales1, &amax1, 256, 1, FOS_DTYPE_BF16, &deq1, &st), st);
	calls++;
	assert_memory_equal(deq1.data, deq0.data, R * C * 2);

	chan_snap s1 = chan_stats(c0);
	assert_int_equal(s1.channels, 1);
	if (s1.chan_requests - s0.chan_requests != (uint64_t)calls)
		fail_msg("channel_requests grew by %llu for %d calls through the channel",
			 (unsigned long long)(s1.chan_requests - s0.chan_requests), calls);

	/* closed: 0 channels, the region gone, and calls go over the socket */
	ASSERT_OK(fos_channel_close(c1, &st), st);
	assert_int_equal(fos_channel_bytes(c1), 0);
	wait_channels(c0, 0, 1000);
	uint16_t *y2;
	chan_forward(c1, g_x, M, &y2);
	fos_tensor ym = fos_tensor_out();
	ASSERT_OK(fos_forward(c1, "w", &x, &b, NULL, &ym, NULL, &st), st);
	assert_memory_equal(ym.data, y0.data, M * N * 2);
	chan_snap s2 = chan_stats(c0);
	assert_int_equal(s2.chan_requests, s1.chan_requests);
	assert_int_equal(s2.forwards, s1.forwards + 2);
	ASSERT_OK(fos_channel_close(c1, &st), st); /* again: nothing to do */
	expect_clean(c0, 2000);

	fos_tensor *all[] = {&y0, &dx0, &dw0, &db0, &ly0, &ldx0, &ldw0, &ldb0, &codes0, &scales0, &amax0, &deq0,
			     &y1, &dx1, &dw1, &db1, &ly1, &ldx1, &ldw1, &ldb1, &codes1, &scales1, &amax1, &deq1, &ym};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		free(all[i]->data);
	free(y2);
	fos_close(c1);
	fos_close(c0);
}

/* ---- 2. a reply that does not fit: libfos sends the request again over the socket ------------ */

/* Channel areas of 40 KiB: an inline forward's request (X 128x128 bf16: 32 KiB + header) fits,
 * its reply (Y 128x256 bf16: 64 KiB) does not. */
#define CHAN_40K (FOS_CHAN_HDR + 2 * 40960)

/* codes, scales, amax of x (rows, cols) bf16 or f32 over c (outputs malloc'd by libfos). */
static void chan_quantize(fos_client *c, int dtype, const void *x, int64_t rows, int64_t cols, fos_tensor *codes,
			  fos_tensor *scales, fos_tensor *amax)
{
	fos_status st;
	fos_tensor tx = fos_tensor_2d(dtype, rows, cols, x);
	*codes = fos_tensor_out();
	*scales = fos_tensor_out();
	*amax = fos_tensor_out();
	ASSERT_OK(fos_quantize(c, &tx, NULL, NULL, codes, scales, amax, &st), st);
}

static void expect_same_quant(const fos_tensor *a, const fos_tensor *b)
{
	for (int i = 0; i < 3; i++) {
		const fos_tensor *x = &a[i], *y = &b[i];
		assert_int_equal(x->size, y->size);
		assert_memory_equal(x->data, y->data, x->size);
	}
}

static void free_tensors(fos_tensor *t, int n)
{
	for (int i = 0; i < n; i++)
		free(t[i].data);
}

static void test_reply_overflow(void **state)
{
	(void)state;
	fos_client *c0 = chan_connect(g_srv.url), *c1 = chan_connect(g_srv.url);
	fos_status st;
	uint16_t *ys, *y;
	chan_forward(c0, g_x, M, &ys);
	ASSERT_OK(fos_channel_open(c1, CHAN_40K, 0, &st), st);
	assert_int_equal(fos_channel_bytes(c1), 40960);
	chan_snap s0 = chan_stats(c0);
	chan_forward(c1, g_x, M, &y);
	assert_memory_equal(y, ys, M * N * 2);
	free(y);
	chan_snap s1 = chan_stats(c0);
	assert_int_equal(s1.chan_requests - s0.chan_requests, 1); /* tried through the channel */
	assert_int_equal(s1.forwards - s0.forwards, 2);           /* ran there, and again over the socket */
	assert_int_equal(s1.channels, 1);
	/* the channel goes on serving what fits: a quantize of 8 x 128 bf16 */
	fos_tensor q0[3], q1[3];
	chan_quantize(c0, FOS_DTYPE_BF16, g_x, 8, K, &q0[0], &q0[1], &q0[2]);
	chan_quantize(c1, FOS_DTYPE_BF16, g_x, 8, K, &q1[0], &q1[1], &q1[2]);
	expect_same_quant(q0, q1);
	free_tensors(q1, 3);
	chan_snap s2 = chan_stats(c0);
	assert_int_equal(s2.chan_requests - s1.chan_requests, 1);
	assert_int_equal(fos_channel_bytes(c1), 40960);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	wait_channels(c0, 0, 1000);

	/* the smallest channel (areas of 4096 bytes): a dequantize whose request (codes 32 x 64, scales
	 * 32 x 8: about 2.4 KiB) fits and whose result (f32 32 x 128: 16 KiB) does not */
	enum { QR = 32, QC = 128 };
	static float xf[QR * QC];
	for (int i = 0; i < QR * QC; i++)
		xf[i] = (float)((i * 53) % 97 - 48) * 0.211f;
	fos_tensor q[3], out0 = fos_tensor_out(), out1 = fos_tensor_out();
	chan_quantize(c0, FOS_DTYPE_F32, xf, QR, QC, &q[0], &q[1], &q[2]);
	ASSERT_OK(fos_dequantize(c0, &q[0], &q[1], &q[2], 256, 0, FOS_DTYPE_F32, &out0, &st), st);
	ASSERT_OK(fos_channel_open(c1, FOS_CHAN_MIN_SIZE, 0, &st), st);
	assert_int_equal(fos_channel_bytes(c1), 4096);
	chan_snap s3 = chan_stats(c0);
	ASSERT_OK(fos_dequantize(c1, &q[0], &q[1], &q[2], 256, 0, FOS_DTYPE_F32, &out1, &st), st);
	assert_int_equal(out1.size, QR * QC * 4);
	assert_memory_equal(out1.data, out0.data, QR * QC * 4);
	chan_snap s4 = chan_stats(c0);
	assert_int_equal(s4.chan_requests - s3.chan_requests, 1);
	assert_int_equal(s4.dequantizes - s3.dequantizes, 2);
	/* and a small one still through it */
	chan_quantize(c1, FOS_DTYPE_BF16, g_x, 8, K, &q1[0], &q1[1], &q1[2]);
	expect_same_quant(q0, q1);
	chan_snap s5 = chan_stats(c0);
	assert_int_equal(s5.chan_requests - s4.chan_requests, 1);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	expect_clean(c0, 2000);
	free_tensors(q0, 3);
	free_tensors(q1, 3);
	free_tensors(q, 3);
	free(out0.data);
	free(out1.data);
	free(ys);
	fos_close(c1);
	fos_close(c0);
}

/* ---- 3. a request that does not fit goes over the socket ------------------------------------ */

static void test_request_too_large(void **state)
{
	(void)state;
	fos_client *c0 = chan_connect(g_srv.url), *c1 = chan_connect(g_srv.url);
	fos_status st;
	uint16_t *ys, *y;
	chan_forward(c0, g_x, M, &ys);
	fos_tensor q0[3], q1[3], p0[3], p1[3];
	chan_quantize(c0, FOS_DTYPE_BF16, g_x, 32, K, &q0[0], &q0[1], &q0[2]);
	chan_quantize(c0, FOS_DTYPE_BF16, g_x, 8, K, &p0[0], &p0[1], &p0[2]);
	ASSERT_OK(fos_channel_open(c1, FOS_CHAN_MIN_SIZE, 0, &st), st);
	chan_snap s0 = chan_stats(c0);
	/* a forward (X: 32 KiB) and a quantize of 32 x 128 bf16 (8 KiB): over the 4096-byte area */
	chan_forward(c1, g_x, M, &y);
	assert_memory_equal(y, ys, M * N * 2);
	free(y);
	chan_quantize(c1, FOS_DTYPE_BF16, g_x, 32, K, &q1[0], &q1[1], &q1[2]);
	expect_same_quant(q0, q1);
	chan_snap s1 = chan_stats(c0);
	assert_int_equal(s1.chan_requests, s0.chan_requests);
	assert_int_equal(s1.forwards - s0.forwards, 1);
	assert_int_equal(s1.channels, 1);
	/* while one that fits takes the channel */
	chan_quantize(c1, FOS_DTYPE_BF16, g_x, 8, K, &p1[0], &p1[1], &p1[2]);
	expect_same_quant(p0, p1);
	chan_snap s2 = chan_stats(c0);
	assert_int_equal(s2.chan_requests - s1.chan_requests, 1);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	expect_clean(c0, 2000);
	free_tensors(q0, 3);
	free_tensors(q1, 3);
	free_tensors(p0, 3);
	free_tensors(p1, 3);
	free(ys);
	fos_close(c1);
	fos_close(c0);
}

/* ---- 4. threads sharing one handle's channel ------------------------------------------------ */

#define TH_N 4
#define TH_CALLS 50
#define TH_M M
#define TH_VARIANTS 2

typedef struct th_arg {
	fos_client *c;
	const uint16_t *x[TH_VARIANTS];
	const uint16_t *y[TH_VARIANTS];
	int bad;
	char why[600];
} th_arg;

static void *th_main(void *p)
{
	th_arg *a = p;
	for (int i = 0; i < TH_CALLS && !a->bad; i++) {
		int v = i % TH_VARIANTS;
		fos_status st;
		fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, TH_M, K, a->x[v]), ty = fos_tensor_out();
		int rc = fos_forward(a->c, "w", &tx, NULL, NULL, &ty, NULL, &st);
		if (rc) {
			a->bad = 1;
			snprintf(a->why, sizeof a->why, "call %d: %s: %s", i, fos_code_name(rc), st.message);
		} else if (ty.size != TH_M * N * 2 || memcmp(ty.data, a->y[v], TH_M * N * 2)) {
			a->bad = 1;
			snprintf(a->why, sizeof a->why, "call %d: wrong result (%zu bytes)", i, ty.size);
		}
		free(ty.data);
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	fos_client *c0 = chan_connect(g_srv.url), *c1 = chan_connect(g_srv.url);
	fos_status st;
	static uint16_t xs[TH_N][TH_VARIANTS][TH_M * K];
	uint16_t *ys[TH_N][TH_VARIANTS];
	th_arg args[TH_N];
	for (int t = 0; t < TH_N; t++) {
		memset(&args[t], 0, sizeof args[t]);
		args[t].c = c1;
		for (int v = 0; v < TH_VARIANTS; v++) {
			tsrv_fill_bf16(xs[t][v], TH_M * K, 100 + (uint64_t)(t * TH_VARIANTS + v), 1.0f);
			chan_forward(c0, xs[t][v], TH_M, &ys[t][v]);
			args[t].x[v] = xs[t][v];
			args[t].y[v] = ys[t][v];
		}
	}
	ASSERT_OK(fos_channel_open(c1, 0, 0, &st), st);
	chan_snap s0 = chan_stats(c0);
	pthread_t th[TH_N];
	for (int t = 0; t < TH_N; t++)
		assert_int_equal(pthread_create(&th[t], NULL, th_main, &args[t]), 0);
	for (int t = 0; t < TH_N; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < TH_N; t++)
		if (args[t].bad)
			fail_msg("thread %d: %s", t, args[t].why);
	chan_snap s1 = chan_stats(c0);
	uint64_t via = s1.chan_requests - s0.chan_requests;
	assert_int_equal(s1.forwards - s0.forwards, TH_N * TH_CALLS);
	assert_true(via >= 1 && via <= TH_N * TH_CALLS);
	print_message("   %llu of %d forwards went through the channel, the rest over the socket\n",
		      (unsigned long long)via, TH_N * TH_CALLS);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	wait_channels(c0, 0, 1000);

	/* again, and the channel is closed while the threads call: every call still succeeds */
	ASSERT_OK(fos_channel_open(c1, 0, 0, &st), st);
	for (int t = 0; t < TH_N; t++)
		args[t].bad = 0;
	s0 = chan_stats(c0);
	for (int t = 0; t < TH_N; t++)
		assert_int_equal(pthread_create(&th[t], NULL, th_main, &args[t]), 0);
	uint64_t t0 = tsrv_now_ms();
	while (chan_stats(c0).chan_requests - s0.chan_requests < 5 && tsrv_now_ms() - t0 < 5000)
		usleep(1000);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	assert_int_equal(fos_channel_bytes(c1), 0);
	for (int t = 0; t < TH_N; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < TH_N; t++)
		if (args[t].bad)
			fail_msg("thread %d (channel closed meanwhile): %s", t, args[t].why);
	s1 = chan_stats(c0);
	assert_int_equal(s1.forwards - s0.forwards, TH_N * TH_CALLS);
	expect_clean(c0, 2000);
	for (int t = 0; t < TH_N; t++)
		for (int v = 0; v < TH_VARIANTS; v++)
			free(ys[t][v]);
	fos_close(c1);
	fos_close(c0);
}

/* ---- 5. bad registrations ------------------------------------------------------------------- */

static void expect_reg(fos_client *c, const hchan *h, uint64_t size, int channel, uint32_t spin_us, int code,
		       const char *needle)
{
	fos_status st;
	uint64_t cap = 12345;
	int rc = fosc_region_register(c, h->name, h->key, size, channel, spin_us, &cap, &st);
	if (rc != code)
		fail_msg("register '%s' (size %llu, channel %d, spin_us %u): %s (%s), expected %s", h->name,
			 (unsigned long long)size, channel, spin_us, fos_code_name(rc), st.message, fos_code_name(code));
	if (needle && !strstr(st.message, needle))
		fail_msg("message '%s' does not mention '%s'", st.message, needle);
}

static void test_bad_registrations(void **state)
{
	(void)state;
	fos_client *c = chan_connect(g_srv.url);
	fos_status st;
	char name[64];

	/* a POSIX object (it could shrink under fosd) */
	{
		snprintf(name, sizeof name, "/fos-test-chan-%d", (int)getpid());
		hchan h;
		memset(&h, 0, sizeof h);
		h.fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		assert_true(h.fd >= 0);
		shm_unlink(name);
		assert_int_equal(ftruncate(h.fd, 16384), 0);
		h.base = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, h.fd, 0);
		assert_true(h.base != MAP_FAILED);
		h.size = 16384;
		((fos_chan_ctl *)h.base)->magic = FOS_CHAN_MAGIC;
		snprintf(h.name, sizeof h.name, "posix-chan");
		snprintf(h.key, sizeof h.key, "fd:%d", h.fd);
		expect_reg(c, &h, 16384, 1, 0, FOS_CODE_INVALID_ARGUMENT, "F_SEAL_SHRINK");
		expect_reg(c, &h, 16384, 0, 0, FOS_CODE_OK, NULL); /* as a plain region it is fine */
		ASSERT_OK(fosc_region_unregister(c, h.name, &st), st);
		hchan_free(&h);
	}
	/* a memfd that is not sealed */
	{
		hchan h;
		hchan_make(&h, "unsealed-chan", 16384, 1, 0);
		expect_reg(c, &h, 16384, 1, 0, FOS_CODE_INVALID_ARGUMENT, "F_SEAL_SHRINK");
		hchan_free(&h);
	}
	/* no magic */
	{
		hchan h;
		hchan_make(&h, "nomagic-chan", 16384, 0, 1);
		expect_reg(c, &h, 16384, 1, 0, FOS_CODE_INVALID_ARGUMENT, "magic");
		hctl(&h)->magic = FOS_CHAN_MAGIC ^ 1;
		expect_reg(c, &h, 16384, 1, 0, FOS_CODE_INVALID_ARGUMENT, "magic");
		hchan_free(&h);
	}
	/* too small: the request says so, and so does an object of exactly the minimum minus one */
	{
		hchan h;
		hchan_make(&h, "small-chan", FOS_CHAN_MIN_SIZE - 1, 1, 1);
		expect_reg(c, &h, FOS_CHAN_MIN_SIZE - 1, 1, 0, FOS_CODE_INVALID_ARGUMENT, "8704");
		expect_reg(c, &h, 4096, 1, 0, FOS_CODE_INVALID_ARGUMENT, "8704");
		hchan_free(&h);
	}
	/* spin_us without a channel, and too much spin */
	{
		hchan h;
		hchan_make(&h, "spin-chan", 16384, 1, 1);
		expect_reg(c, &h, 16384, 0, 10, FOS_CODE_INVALID_ARGUMENT, "not a channel");
		expect_reg(c, &h, 16384, 1, 1000001, FOS_CODE_INVALID_ARGUMENT, "1000000");
		expect_reg(c, &h, 16384, 1, 1000000, FOS_CODE_OK, NULL); /* the most allowed (capped by fosd) */
		expect_reg(c, &h, 16384, 1, 0, FOS_CODE_ALREADY_EXISTS, NULL);
		ASSERT_OK(fosc_region_unregister(c, h.name, &st), st);
		hchan_free(&h);
	}
	/* nothing the failures made stays */
	wait_channels(c, 0, 1000);
	chan_snap s = chan_stats(c);
	assert_int_equal(s.regions, 0);

	/* 8 channels on one connection, not 9 */
	{
		hchan hs[CHAN_MAX_PER_CONN + 1];
		for (int i = 0; i <= CHAN_MAX_PER_CONN; i++) {
			snprintf(name, sizeof name, "many-chan-%d", i);
			hchan_make(&hs[i], name, FOS_CHAN_MIN_SIZE, 1, 1);
		}
		for (int i = 0; i < CHAN_MAX_PER_CONN; i++)
			hchan_register(c, &hs[i], 0);
		expect_reg(c, &hs[CHAN_MAX_PER_CONN], FOS_CHAN_MIN_SIZE, 1, 0, FOS_CODE_RESOURCE_EXHAUSTED,
			   "too many channels");
		s = chan_stats(c);
		assert_int_equal(s.channels, CHAN_MAX_PER_CONN);
		assert_int_equal(s.regions, CHAN_MAX_PER_CONN);
		/* another connection may still have its own */
		fos_client *c2 = chan_connect(g_srv.url);
		ASSERT_OK(fos_channel_open(c2, FOS_CHAN_MIN_SIZE, 0, &st), st);
		uint16_t *y0, *y1;
		chan_forward(c, g_x, M, &y0);
		chan_forward(c2, g_x, M, &y1);
		assert_memory_equal(y0, y1, M * N * 2);
		free(y0);
		free(y1);
		fos_close(c2); /* closes its channel */
		for (int i = 0; i < CHAN_MAX_PER_CONN; i++)
			ASSERT_OK(fosc_region_unregister(c, hs[i].name, &st), st);
		for (int i = 0; i <= CHAN_MAX_PER_CONN; i++)
			hchan_free(&hs[i]);
		wait_channels(c, 0, 2000);
	}

	/* libfos: a second channel on one handle, and bad sizes */
	{
		fos_client *c2 = chan_connect(g_srv.url);
		ASSERT_OK(fos_channel_open(c2, FOS_CHAN_MIN_SIZE, 0, &st), st);
		ASSERT_CODE(fos_channel_open(c2, FOS_CHAN_MIN_SIZE, 0, &st), FOS_CODE_ALREADY_EXISTS, st);
		assert_non_null(strstr(st.message, "already"));
		assert_int_equal(fos_channel_bytes(c2), 4096); /* the first one still serves */
		ASSERT_OK(fos_channel_close(c2, &st), st);
		ASSERT_CODE(fos_channel_open(c2, FOS_CHAN_MIN_SIZE - 1, 0, &st), FOS_CODE_INVALID_ARGUMENT, st);
		ASSERT_CODE(fos_channel_open(c2, 0, 1000001, &st), FOS_CODE_INVALID_ARGUMENT, st);
		ASSERT_OK(fos_channel_open(c2, 0, 0, &st), st); /* after a close, a new one */
		ASSERT_OK(fos_channel_close(c2, &st), st);
		fos_close(c2);
	}
	expect_clean(c, 3000);
	uint16_t *y;
	chan_forward(c, g_x, M, &y);
	check_still_serving(y);
	free(y);
	fos_close(c);
}

/* ---- 6. garbage placed in a channel by hand ------------------------------------------------- */

static void test_garbage(void **state)
{
	(void)state;
	fos_client *c = chan_connect(g_srv.url);
	fos_status st;
	uint16_t *ys;
	chan_forward(c, g_x, M, &ys);
	hchan h;
	hchan_make(&h, "hand-chan", 256 << 10, 1, 1);
	hchan_register(c, &h, 20);
	chan_snap s0 = chan_stats(c);
	assert_int_equal(s0.channels, 1);
	int calls = 0;

	/* random bytes (deterministic), several lengths */
	static uint8_t junk[4096];
	uint64_t z = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < sizeof junk; i++) {
		z ^= z << 13;
		z ^= z >> 7;
		z ^= z << 17;
		junk[i] = (uint8_t)z;
	}
	const size_t lens[] = {4, 5, 63, 1000, sizeof junk};
	for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
		hexpect(&h, junk, lens[i], lens[i], FOS_CODE_INVALID_ARGUMENT, NULL, NULL);
		calls++;
	}
	/* a plausible header length, then bytes that are not a fos.Request */
	{
		uint8_t m[256];
		memset(m, 0xff, sizeof m);
		m[0] = 64;
		m[1] = m[2] = m[3] = 0;
		hexpect(&h, m, sizeof m, sizeof m, FOS_CODE_INVALID_ARGUMENT, "protobuf", NULL);
		calls++;
	}
	/* lengths that lie: past the area, zero, huge, under 4 */
	{
		char big[32], cap[32];
		snprintf(big, sizeof big, "%llu bytes", (unsigned long long)(h.cap + 1));
		snprintf(cap, sizeof cap, "%llu", (unsigned long long)h.cap);
		hexpect(&h, NULL, 0, h.cap + 1, FOS_CODE_INVALID_ARGUMENT, big, cap);
		hexpect(&h, NULL, 0, 0, FOS_CODE_INVALID_ARGUMENT, "0 bytes", cap);
		hexpect(&h, NULL, 0, UINT64_MAX, FOS_CODE_INVALID_ARGUMENT, "18446744073709551615 bytes", cap);
		hexpect(&h, junk, 3, 3, FOS_CODE_INVALID_ARGUMENT, "3 bytes", cap);
		calls += 4;
	}
	/* a real request through the same channel, then the same id again (not run twice) */
	{
		uint64_t cid = 0x0123456789abcdefull ^ (uint64_t)getpid();
		nng_msg *m = build_forward(4242, cid, g_x, M);
		hreply r;
		hchan_call(&h, nng_msg_body(m), nng_msg_len(m), nng_msg_len(m), &r);
		calls++;
		if (r.code)
			fail_msg("forward through the hand channel: %s: %s", fos_code_name(r.code), r.msg);
		assert_int_equal(r.resp->id, 4242);
		assert_int_equal(r.resp->result_case, FOS__RESPONSE__RESULT_FORWARD);
		fosw_tensor v;
		int code;
		char why[256];
		if (fosw_tensor_get(r.resp->forward->y, r.data, r.dlen, "y", &v, NULL, &code, why, sizeof why))
			fail_msg("the reply's y: %s", why);
		assert_int_equal(v.len, M * N * 2);
		assert_memory_equal(v.ptr, ys, M * N * 2);
		hreply_free(&r);
		hexpect(&h, nng_msg_body(m), nng_msg_len(m), nng_msg_len(m), FOS_CODE_ABORTED, "already executed", NULL);
		calls++;
		/* the length word shorter than the message: a truncated message */
		hexpect(&h, nng_msg_body(m), nng_msg_len(m), nng_msg_len(m) - 100, FOS_CODE_INVALID_ARGUMENT, NULL, NULL);
		calls++;
		nng_msg_free(m);
		/* and a fresh id works again */
		m = build_forward(4243, cid, g_x, M);
		hchan_call(&h, nng_msg_body(m), nng_msg_len(m), nng_msg_len(m), &r);
		calls++;
		assert_int_equal(r.code, 0);
		hreply_free(&r);
		nng_msg_free(m);
	}
	chan_snap s1 = chan_stats(c);
	assert_int_equal(s1.chan_requests - s0.chan_requests, (uint64_t)calls);
	assert_int_equal(s1.channels, 1);
	ASSERT_OK(fosc_region_unregister(c, h.name, &st), st);
	expect_clean(c, 2000);
	assert_int_equal(hld32(&hctl(&h)->state), FOS_CHAN_CLOSED);
	hchan_free(&h);
	uint16_t *y;
	chan_forward(c, g_x, M, &y);
	check_still_serving(y);
	free(y);
	free(ys);
	fos_close(c);
}

/* ---- 7. unregistering the region ends the channel ------------------------------------------- */

static int wait_state(hchan *h, uint32_t want, int ms)
{
	uint64_t t0 = tsrv_now_ms();
	while (hld32(&hctl(h)->state) != want) {
		if (tsrv_now_ms() - t0 > (uint64_t)ms)
			return -1;
		usleep(1000);
	}
	return 0;
}

static void test_unregister_stops(void **state)
{
	(void)state;
	fos_client *c0 = chan_connect(g_srv.url), *c1 = chan_connect(g_srv.url);
	fos_status st;
	uint16_t *ys;
	chan_forward(c0, g_x, M, &ys);

	/* a hand-made channel, unregistered by name over the socket */
	hchan h;
	hchan_make(&h, "unreg-chan", FOS_CHAN_MIN_SIZE, 1, 1);
	hchan_register(c1, &h, 1000);
	assert_int_equal(chan_stats(c0).channels, 1);
	hexpect(&h, "xxxx", 4, 4, FOS_CODE_INVALID_ARGUMENT, NULL, NULL); /* it serves */
	ASSERT_OK(fosc_region_unregister(c1, h.name, &st), st);
	if (wait_state(&h, FOS_CHAN_CLOSED, 1000))
		fail_msg("the channel's state is %u a second after its region was unregistered", hld32(&hctl(&h)->state));
	expect_clean(c0, 2000);
	/* a request placed now is not taken */
	uint32_t seq = hchan_ring(&h, "xxxx", 4, 4);
	assert_int_equal(hchan_wait(&h, seq, 200), 0);
	hchan_free(&h);

	/* libfos's own channel, unregistered through itself: libfos notices and takes the socket */
	ASSERT_OK(fos_channel_open(c1, 0, 0, &st), st);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ListRegionsRequest lr = FOS__LIST_REGIONS_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_LIST_REGIONS;
	rq.list_regions = &lr;
	fosc_reply r;
	ASSERT_OK(fosc_call(c1, &rq, NULL, 0, &r, &st), st);
	assert_int_equal(r.resp->result_case, FOS__RESPONSE__RESULT_LIST_REGIONS);
	assert_int_equal(r.resp->list_regions->n_regions, 1);
	const Fos__RegionInfo *ri = r.resp->list_regions->regions[0];
	assert_int_equal(ri->channel_bytes, fos_chan_cap((size_t)4 << 20));
	assert_true(ri->sealed);
	char name[FOS_NAME_MAX + 1];
	snprintf(name, sizeof name, "%s", ri->name);
	fosc_reply_free(&r);
	chan_snap s0 = chan_stats(c0);
	ASSERT_OK(fosc_region_unregister(c1, name, &st), st);
	chan_snap s1 = chan_stats(c0);
	assert_int_equal(s1.chan_requests - s0.chan_requests, 1); /* the unregister went through the channel */
	wait_channels(c0, 0, 1000);
	uint16_t *y;
	chan_forward(c1, g_x, M, &y);
	assert_memory_equal(y, ys, M * N * 2);
	free(y);
	chan_snap s2 = chan_stats(c0);
	assert_int_equal(s2.chan_requests, s1.chan_requests);
	/* the caller still wants its channel: after that call libfos opened a new one */
	assert_int_equal(fos_channel_bytes(c1), fos_chan_cap((size_t)4 << 20));
	chan_forward(c1, g_x, M, &y);
	assert_memory_equal(y, ys, M * N * 2);
	free(y);
	assert_int_equal(chan_stats(c0).chan_requests - s2.chan_requests, 1);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	expect_clean(c0, 2000);
	free(ys);
	fos_close(c1);
	fos_close(c0);
}

/* ---- 8. a client that dies with its channel open -------------------------------------------- */

/* The children: fresh processes (THIS_BINARY --chan-exit|--chan-loop URL). */
static int child_main(const char *mode, const char *url)
{
	fos_client *c;
	fos_status st;
	if (fos_connect(url, NULL, 20000, &c, &st))
		return 10;
	if (fos_channel_open(c, 0, 0, &st))
		return 11;
	static uint16_t x[M * K];
	tsrv_fill_bf16(x, M * K, 7, 1.0f);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, x);
	static uint16_t ybuf[M * N];
	for (;;) {
		fos_tensor ty = fos_tensor_2d(FOS_DTYPE_BF16, M, N, ybuf);
		if (fos_forward(c, "w", &tx, NULL, NULL, &ty, NULL, &st))
			_exit(12);
		if (!strcmp(mode, "--chan-exit"))
			_exit(0); /* no fos_close, no channel close */
	}
}

static pid_t spawn_child(const char *mode)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "test_e2e_chan", mode, g_srv.url, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void test_client_death(void **state)
{
	(void)state;
	fos_client *c = chan_connect(g_srv.url);
	uint16_t *yref;
	chan_forward(c, g_x, M, &yref);

	/* exits after one call through its channel */
	chan_snap s0 = chan_stats(c);
	pid_t pid = spawn_child("--chan-exit");
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the exiting child failed (status 0x%x)", status);
	chan_snap s1 = chan_stats(c);
	assert_int_equal(s1.chan_requests - s0.chan_requests, 1);
	expect_clean(c, 5000);
	assert_int_equal(chan_maps_count(&g_srv, "libfos.chan"), 0);

	/* killed in the middle of a loop of calls */
	pid = spawn_child("--chan-loop");
	uint64_t t0 = tsrv_now_ms();
	chan_snap s2;
	do {
		usleep(5000);
		s2 = chan_stats(c);
		if (waitpid(pid, &status, WNOHANG) == pid)
			fail_msg("the looping child ended by itself (status 0x%x)", status);
	} while (s2.chan_requests - s1.chan_requests < 20 && tsrv_now_ms() - t0 < 15000);
	assert_true(s2.chan_requests - s1.chan_requests >= 20);
	assert_int_equal(s2.channels, 1);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	expect_clean(c, 5000);
	assert_int_equal(chan_maps_count(&g_srv, "libfos.chan"), 0);
	check_still_serving(yref);
	free(yref);
	fos_close(c);
}

/* ---- 9. fosd's shutdown with a channel open ------------------------------------------------- */

/* A fosd of the test's own (besides the shared one), with the weight "w", and a handle on it. */
static fos_client *second_fosd(tsrv *s)
{
	if (tsrv_start(s, NULL))
		fail_msg("cannot start a second fosd");
	assert_int_equal(chan_put_weight(s->url), 0);
	return chan_connect(s->url);
}

static void test_shutdown(void **state)
{
	(void)state;
	tsrv s;
	fos_client *c = second_fosd(&s);
	fos_status st;
	hchan h; /* one by hand too, to watch its state word */
	hchan_make(&h, "shut-chan", FOS_CHAN_MIN_SIZE, 1, 1);
	hchan_register(c, &h, 0);
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	uint16_t *y;
	chan_forward(c, g_x, M, &y);
	free(y);
	uint64_t t0 = tsrv_now_ms();
	int rc = tsrv_stop(&s, SIGTERM, 10000);
	uint64_t took = tsrv_now_ms() - t0;
	if (rc)
		tsrv_dump_log(&s);
	assert_int_equal(rc, 0);
	if (took > 3000)
		fail_msg("fosd took %llu ms to stop with channels open", (unsigned long long)took);
	assert_int_equal(hld32(&hctl(&h)->state), FOS_CHAN_CLOSED);
	fos_set_timeout(c, 1000);
	t0 = tsrv_now_ms();
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), ty = fos_tensor_out();
	rc = fos_forward(c, "w", &tx, NULL, NULL, &ty, NULL, &st);
	took = tsrv_now_ms() - t0;
	if (rc != FOS_CODE_UNAVAILABLE && rc != FOS_CODE_DEADLINE_EXCEEDED)
		fail_msg("a call after fosd stopped: %s (%s)", fos_code_name(rc), st.message);
	if (took > 3000)
		fail_msg("a call after fosd stopped took %llu ms", (unsigned long long)took);
	t0 = tsrv_now_ms();
	fos_close(c);
	took = tsrv_now_ms() - t0;
	if (took > 3000)
		fail_msg("fos_close after fosd stopped took %llu ms", (unsigned long long)took);
	hchan_free(&h);
	tsrv_cleanup(&s);
}

/* ---- 9b. fosd restarted: libfos opens the channel again --------------------------------------- */

static void test_restart_reopens(void **state)
{
	(void)state;
	tsrv s;
	fos_client *c = second_fosd(&s);
	fos_status st;
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	uint16_t *y0, *y;
	chan_forward(c, g_x, M, &y0);
	fos_client *watch = chan_connect(s.url);
	assert_int_equal(chan_stats(watch).channels, 1);
	fos_close(watch);
	if (tt_restart(&s, SIGTERM, NULL))
		fail_msg("cannot restart fosd");
	assert_int_equal(chan_put_weight(s.url), 0); /* a new daemon: the weight again */
	/* the handle reconnects; its first call that succeeds (over the socket) opens the channel again */
	uint64_t t0 = tsrv_now_ms();
	fos_health_info h;
	int rc;
	while ((rc = fos_health(c, &h, &st)) != FOS_CODE_OK && tsrv_now_ms() - t0 < 10000)
		usleep(20 * 1000);
	assert_int_equal(rc, FOS_CODE_OK);
	t0 = tsrv_now_ms();
	while (fos_channel_bytes(c) == 0 && tsrv_now_ms() - t0 < 5000) { /* at most one attempt a second */
		ASSERT_OK(fos_health(c, &h, &st), st);
		usleep(50 * 1000);
	}
	assert_int_equal(fos_channel_bytes(c), fos_chan_cap((size_t)4 << 20));
	watch = chan_connect(s.url);
	chan_snap s0 = chan_stats(watch);
	assert_int_equal(s0.channels, 1);
	chan_forward(c, g_x, M, &y);
	assert_memory_equal(y, y0, M * N * 2);
	assert_int_equal(chan_stats(watch).chan_requests - s0.chan_requests, 1); /* through the new channel */
	free(y);
	free(y0);
	ASSERT_OK(fos_channel_close(c, &st), st);
	fos_close(c);
	wait_channels(watch, 0, 2000);
	fos_close(watch);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

/* ---- 10. channel_spin_us 0: fosd sleeps at once and still serves ----------------------------- */

static void test_spin_zero(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--channel-spin-us", "0", NULL};
	if (tsrv_start(&s, args))
		fail_msg("cannot start fosd --channel-spin-us 0");
	assert_int_equal(chan_put_weight(s.url), 0);
	fos_client *c0 = chan_connect(s.url), *c1 = chan_connect(s.url);
	fos_status st;
	enum { CALLS = 10 };
	static uint16_t xs[CALLS][M * K];
	uint16_t *ys[CALLS];
	for (int i = 0; i < CALLS; i++) {
		tsrv_fill_bf16(xs[i], M * K, 300 + (uint64_t)i, 1.0f);
		chan_forward(c0, xs[i], M, &ys[i]);
	}
	ASSERT_OK(fos_channel_open(c1, 0, 500, &st), st); /* asks for 500 us: capped to 0 */
	assert_true(tsrv_log_contains(&s, "polling 0 us"));
	chan_snap s0 = chan_stats(c0);
	for (int i = 0; i < CALLS; i++) {
		uint16_t *y;
		chan_forward(c1, xs[i], M, &y);
		assert_memory_equal(y, ys[i], M * N * 2);
		free(y);
		if (i == CALLS / 2)
			usleep(50000); /* let fosd's channel thread fall asleep on the futex */
	}
	chan_snap s1 = chan_stats(c0);
	assert_int_equal(s1.chan_requests - s0.chan_requests, CALLS);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	expect_clean(c0, 2000);
	for (int i = 0; i < CALLS; i++)
		free(ys[i]);
	fos_close(c1);
	fos_close(c0);
	int rc = tsrv_stop(&s, SIGTERM, 10000);
	if (rc)
		tsrv_dump_log(&s);
	tsrv_cleanup(&s);
	assert_int_equal(rc, 0);
}

/* ---- 11. calls that time out: fosd must never run a request torn by the next one ----------- */

#define TO_ROWS 1024
#define TO_COLS 2048
#define TO_SLOTS 64
#define TO_CODES ((size_t)TO_ROWS * TO_COLS / 2)
#define TO_ROUNDS 4
#define TO_ROUND_MS 1500

/* A client whose calls time out (1 ms) goes on calling through its channel: quantizes of two
 * inputs A and B (same shape, different values, inline), call i of input i % 2 with its codes
 * written to slot i % TO_SLOTS of a region (so a slot only ever receives codes of one input).
 * fosd runs some of them (those it takes while the client waits). Each call places its request
 * after the previous one gave up, possibly while fosd still has not taken the previous one; fosd
 * must never run a request made of parts of two, so every slot that fosd wrote must hold exactly
 * the codes of its input. Then the channel answers a call that waits. A torn request shows in
 * some rounds only (it needs fosd to take a request while the next is being written): up to
 * TO_ROUNDS rounds, stopping at the first that finds one. */
static void test_timeout_reuse(void **state)
{
	(void)state;
	fos_client *c0 = chan_connect(g_srv.url), *c1 = chan_connect(g_srv.url);
	fos_status st;
	uint16_t *xs[2];
	uint8_t *want[2];
	for (int v = 0; v < 2; v++) {
		xs[v] = malloc((size_t)TO_ROWS * TO_COLS * 2);
		assert_non_null(xs[v]);
		tsrv_fill_bf16(xs[v], (size_t)TO_ROWS * TO_COLS, 500 + (uint64_t)v, v ? 2.0f : 1.0f);
		fos_tensor q[3];
		chan_quantize(c0, FOS_DTYPE_BF16, xs[v], TO_ROWS, TO_COLS, &q[0], &q[1], &q[2]);
		assert_int_equal(q[0].size, TO_CODES);
		want[v] = q[0].data;
		free(q[1].data);
		free(q[2].data);
	}
	assert_memory_not_equal(want[0], want[1], TO_CODES);
	ASSERT_OK(fos_channel_open(c1, (size_t)24 << 20, 0, &st), st);
	fos_region *r;
	ASSERT_OK(fos_region_create(c1, "slots", TO_SLOTS * TO_CODES, FOS_REGION_MEMFD, &r, &st), st);
	uint8_t *slots = fos_region_data(r);
	int counts[3] = {0, 0, 0}; /* OK, DEADLINE_EXCEEDED, other */
	char other[600] = "";
	int written = 0, wrong = 0, first_wrong = -1, round = 0;
	chan_snap s0 = chan_stats(c0);
	while (round < TO_ROUNDS && !wrong && !counts[2]) {
		round++;
		memset(slots, 0xA5, TO_SLOTS * TO_CODES);
		fos_set_timeout(c1, 1);
		uint64_t t0 = tsrv_now_ms();
		for (int i = 0; tsrv_now_ms() - t0 < TO_ROUND_MS; i++) {
			fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, TO_ROWS, TO_COLS, xs[i % 2]);
			fos_tensor co = fos_tensor_shm(r, (size_t)(i % TO_SLOTS) * TO_CODES, FOS_DTYPE_U8, TO_ROWS,
						       TO_COLS / 2);
			fos_tensor sc = fos_tensor_out(), am = fos_tensor_out();
			int rc = fos_quantize(c1, &tx, NULL, NULL, &co, &sc, &am, &st);
			if (rc == FOS_CODE_OK) {
				counts[0]++;
				free(sc.data);
				free(am.data);
			} else if (rc == FOS_CODE_DEADLINE_EXCEEDED) {
				counts[1]++;
			} else {
				counts[2]++;
				snprintf(other, sizeof other, "%s: %s", fos_code_name(rc), st.message);
			}
		}
		/* a call that waits: fosd serves a channel's requests in turn, so all of the above are done */
		fos_set_timeout(c1, 20000);
		fos_tensor q1[3];
		chan_quantize(c1, FOS_DTYPE_BF16, xs[0], TO_ROWS, TO_COLS, &q1[0], &q1[1], &q1[2]);
		assert_memory_equal(q1[0].data, want[0], TO_CODES);
		free_tensors(q1, 3);
		for (int k = 0; k < TO_SLOTS; k++) {
			const uint8_t *p = slots + (size_t)k * TO_CODES;
			if (p[0] == 0xA5 && p[TO_CODES - 1] == 0xA5 && p[TO_CODES / 2] == 0xA5)
				continue; /* never written */
			written++;
			if (memcmp(p, want[k % 2], TO_CODES)) {
				wrong++;
				if (first_wrong < 0)
					first_wrong = k;
			}
		}
	}
	chan_snap s1 = chan_stats(c0);
	print_message("   %d round(s): %d ok, %d timed out, %d other; %llu taken from the channel; %d slots written, "
		      "%d wrong\n", round, counts[0], counts[1], counts[2],
		      (unsigned long long)(s1.chan_requests - s0.chan_requests), written, wrong);
	/* clean up first: a failure below must not leave leaks for the sanitizer run to report */
	ASSERT_OK(fos_region_destroy(r, &st), st);
	ASSERT_OK(fos_channel_close(c1, &st), st);
	expect_clean(c0, 5000);
	for (int v = 0; v < 2; v++) {
		free(xs[v]);
		free(want[v]);
	}
	fos_close(c1);
	fos_close(c0);
	if (counts[2])
		fail_msg("%d calls failed otherwise than by their deadline, e.g. %s", counts[2], other);
	if (wrong)
		fail_msg("%d of %d slots fosd wrote hold codes of neither input (slot %d of round %d first): fosd ran "
			 "requests that libfos was overwriting in the channel after a timed-out call", wrong, written,
			 first_wrong, round);
}

int main(int argc, char **argv)
{
	if (argc == 3 && (!strcmp(argv[1], "--chan-exit") || !strcmp(argv[1], "--chan-loop")))
		return child_main(argv[1], argv[2]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bit_identical),
		cmocka_unit_test(test_reply_overflow),
		cmocka_unit_test(test_request_too_large),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_bad_registrations),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_unregister_stops),
		cmocka_unit_test(test_client_death),
		cmocka_unit_test(test_shutdown),
		cmocka_unit_test(test_restart_reopens),
		cmocka_unit_test(test_spin_zero),
		cmocka_unit_test(test_timeout_reuse),
	};
	return cmocka_run_group_tests(tests, setup_server, teardown_server);
}
