/* test_fault_fairness.c: one client must never stall the others (a real CPU fosd).
 *   - a client speaking SP by hand on a unix socket floods Health requests and never reads a
 *     reply: another client keeps being answered at its normal latency, and the flooder's
 *     connection is dropped and counted;
 *   - a client that asks for large replies and does not read them: its connection is dropped
 *     after send_timeout, the others are served meanwhile;
 *   - one connection with more requests in progress than its share gets RESOURCE_EXHAUSTED
 *     naming connection_requests, while another connection is unaffected;
 *   - SIGTERM while 4 clients keep sending back to back (through UNAVAILABLE): fosd exits 0 as
 *     soon as the requests it had accepted are answered, long before drain_timeout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fos.h"
#include "fos.pb-c.h"
#include "fos_wire.h"
#include "support_assert.h"
#include "support_server.h"

/* ---- a client speaking the SP protocol by hand (nng's ipc framing) ------------------------- */

/* Connects to the ipc socket of url and sends the SP header of a REQ (protocol 0x30) peer. */
static int sp_open(const char *url)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", url + strlen("ipc://"));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	const unsigned char hdr[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};
	assert_int_equal(write(fd, hdr, sizeof hdr), (ssize_t)sizeof hdr);
	return fd;
}

/* Writes all of buf within timeout_ms; 0, or -1 when the peer closed or it could not be written. */
static int write_all(int fd, const void *buf, size_t len, int timeout_ms)
{
	const uint8_t *p = buf;
	uint64_t end = tsrv_now_ms() + (uint64_t)timeout_ms;
	while (len) {
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		uint64_t now = tsrv_now_ms();
		if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0 || (pf.revents & (POLLERR | POLLHUP)))
			return -1;
		ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One SP message: the ipc frame (type 1, 64-bit length), the request id, the fos body. */
static int sp_send(int fd, uint32_t id, const uint8_t *body, size_t len, int timeout_ms)
{
	size_t n = 1 + 8 + 4 + len;
	uint8_t *f = malloc(n);
	uint64_t plen = 4 + len;
	f[0] = 1;
	for (int i = 0; i < 8; i++)
		f[1 + i] = (uint8_t)(plen >> (56 - 8 * i));
	uint32_t rid = id | 0x80000000u;
	for (int i = 0; i < 4; i++)
		f[9 + i] = (uint8_t)(rid >> (24 - 8 * i));
	memcpy(f + 13, body, len);
	int rc = write_all(fd, f, n, timeout_ms);
	free(f);
	return rc;
}

/* Packs rq and data (dlen bytes) as a fos message body; returns a malloc'd buffer. */
static uint8_t *fos_body(Fos__Request *rq, const void *data, size_t dlen, size_t *len)
{
	size_t h = fos__request__get_packed_size(rq);
	size_t ds = (size_t)fosw_data_start(h);
	uint8_t *b = calloc(1, ds + dlen);
	b[0] = (uint8_t)h, b[1] = (uint8_t)(h >> 8), b[2] = (uint8_t)(h >> 16), b[3] = (uint8_t)(h >> 24);
	fos__request__pack(rq, b + 4);
	if (dlen)
		memcpy(b + ds, data, dlen);
	*len = ds + dlen;
	return b;
}

static uint8_t *health_body(size_t *len)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
	rq.id = 1;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &h;
	return fos_body(&rq, NULL, 0, len);
}

static fos_client *connect_or_fail(const char *url)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(url, NULL, 10000, &c, &st);
	if (rc)
		fail_msg("connect: %s: %s", fos_code_name(rc), st.message);
	return c;
}

static fos_stats_info stats_of(const char *url)
{
	fos_client *c = connect_or_fail(url);
	fos_stats_info si;
	fos_status st;
	ASSERT_OK(fos_stats(c, &si, &st), st);
	fos_close(c);
	return si;
}

/* ---- a well-behaved client timing its Health calls ------------------------------------------ */

typedef struct prober {
	const char *url;
	atomic_int *stop;
	int ok, failed, last_code;
	uint64_t max_ms;
	char last_msg[512];
} prober;

static void *probe_main(void *p)
{
	prober *a = p;
	fos_client *c = connect_or_fail(a->url);
	while (!atomic_load(a->stop)) {
		fos_health_info h;
		fos_status st;
		uint64_t t0 = tsrv_now_ms();
		int rc = fos_health(c, &h, &st);
		uint64_t ms = tsrv_now_ms() - t0;
		if (ms > a->max_ms)
			a->max_ms = ms;
		if (rc == FOS_CODE_OK) {
			a->ok++;
		} else {
			a->failed++;
			a->last_code = rc;
			snprintf(a->last_msg, sizeof a->last_msg, "%s", st.message);
		}
		usleep(2000);
	}
	fos_close(c);
	return NULL;
}

/* The probe's calls must all succeed, each well under its 3 s timeout. */
static void probe_check(const prober *a)
{
	if (a->failed)
		fail_msg("%d of %d Health calls failed (last %s: %s)", a->failed, a->ok + a->failed,
			 fos_code_name(a->last_code), a->last_msg);
	assert_true(a->ok > 20);
	if (a->max_ms > 1500)
		fail_msg("a Health call took %llu ms while another client misbehaved", (unsigned long long)a->max_ms);
}

static void probe_start(prober *a, pthread_t *th, const char *url, atomic_int *stop)
{
	memset(a, 0, sizeof *a);
	a->url = url;
	a->stop = stop;
	assert_int_equal(pthread_create(th, NULL, probe_main, a), 0);
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void test_flooder_never_reads(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--workers", "1", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	atomic_int stop = 0;
	prober a;
	pthread_t th;
	probe_start(&a, &th, s.url, &stop);
	int fd = sp_open(s.url);
	size_t blen;
	uint8_t *body = health_body(&blen);
	int sent = 0, closed = 0;
	uint64_t t0 = tsrv_now_ms();
	/* until fosd closes the connection (its replies pile up unread), at most 10 s */
	while (sent < 200000 && tsrv_now_ms() - t0 < 10000) {
		if (sp_send(fd, (uint32_t)sent + 1, body, blen, 2000)) {
			closed = 1;
			break;
		}
		sent++;
	}
	usleep(300 * 1000); /* the probe keeps going after the flood */
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	free(body);
	close(fd);
	if (!closed)
		tsrv_dump_log(&s);
	assert_true(closed);
	probe_check(&a);
	fos_stats_info si = stats_of(s.url);
	assert_true(si.connections_dropped >= 1);
	assert_true(tsrv_log_contains(&s, "without reading its replies"));
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

enum { BN = 4096, BK = 128, BM = 128 };
static uint16_t g_bw[BN * BK], g_bx[BM * BK];

/* Puts the weight "big" (BN x BK) whose forwards of g_bx give 1 MiB replies. */
static void put_big(const char *url)
{
	tsrv_fill_bf16(g_bw, BN * BK, 3, 0.05f);
	tsrv_fill_bf16(g_bx, BM * BK, 4, 1.0f);
	fos_client *c = connect_or_fail(url);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, BN, BK, g_bw);
	fos_status st;
	ASSERT_OK(fos_put_weight(c, "big", 1, &tw, NULL, NULL, &st), st);
	fos_close(c);
}

/* A client that asks for 1 MiB replies and does not read them. */
static void test_slow_reader_send_timeout(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--workers", "1", "--send-timeout", "1s", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	put_big(s.url);

	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	int64_t shape[2] = {BM, BK};
	t.dtype = FOS__DTYPE__DTYPE_BF16;
	t.n_shape = 2;
	t.shape = shape;
	t.offset = 0;
	t.length = sizeof g_bx;
	fr.weight = (char *)"big";
	fr.x = &t;
	rq.id = 9;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	size_t blen;
	uint8_t *body = fos_body(&rq, g_bx, sizeof g_bx, &blen);

	atomic_int stop = 0;
	prober a;
	pthread_t th;
	probe_start(&a, &th, s.url, &stop);
	int fd = sp_open(s.url);
	for (uint32_t i = 0; i < 4; i++) /* 4 MiB of replies: more than the socket buffers hold */
		assert_int_equal(sp_send(fd, i + 1, body, blen, 2000), 0);
	/* fosd gives up on the unread replies after send_timeout and drops the connection */
	uint64_t t0 = tsrv_now_ms();
	fos_stats_info si = stats_of(s.url);
	while (si.connections_dropped == 0 && tsrv_now_ms() - t0 < 8000) {
		usleep(100 * 1000);
		si = stats_of(s.url);
	}
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	free(body);
	close(fd);
	if (si.connections_dropped == 0)
		tsrv_dump_log(&s);
	assert_true(si.connections_dropped >= 1);
	assert_true(tsrv_log_contains(&s, "send_timeout"));
	probe_check(&a);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

/* ---- the per-connection share --------------------------------------------------------------- */

enum { SM = 512, SN = 512, SK = 512, SHARE_THREADS = 6 };
static uint16_t g_sw[SN * SK], g_sx[SM * SK];

typedef struct share_arg {
	fos_client *c;
	int ok, refused, other;
	char msg[512];
} share_arg;

static void *share_main(void *p)
{
	share_arg *a = p;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, SM, SK, g_sx);
	fos_tensor w = fos_tensor_2d(FOS_DTYPE_BF16, SN, SK, g_sw);
	for (int i = 0; i < 3; i++) {
		fos_tensor y = fos_tensor_out();
		fos_status st;
		int rc = fos_linear(a->c, &x, &w, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st);
		free(y.data);
		if (rc == FOS_CODE_OK) {
			a->ok++;
		} else if (rc == FOS_CODE_RESOURCE_EXHAUSTED && strstr(st.message, "connection_requests")) {
			a->refused++;
			snprintf(a->msg, sizeof a->msg, "%s", st.message);
		} else {
			a->other++;
			snprintf(a->msg, sizeof a->msg, "%s: %.400s", fos_code_name(rc), st.message);
		}
	}
	return NULL;
}

static void test_connection_share(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--workers", "1", "--connection-requests", "2", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	tsrv_fill_bf16(g_sw, SN * SK, 5, 0.05f);
	tsrv_fill_bf16(g_sx, SM * SK, 6, 1.0f);
	fos_client *c = connect_or_fail(s.url);
	pthread_t th[SHARE_THREADS];
	share_arg a[SHARE_THREADS];
	for (int i = 0; i < SHARE_THREADS; i++) {
		memset(&a[i], 0, sizeof a[i]);
		a[i].c = c;
		assert_int_equal(pthread_create(&th[i], NULL, share_main, &a[i]), 0);
	}
	/* another connection meanwhile: its own share */
	fos_client *c2 = connect_or_fail(s.url);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, SM, SK, g_sx);
	fos_tensor w = fos_tensor_2d(FOS_DTYPE_BF16, SN, SK, g_sw);
	fos_tensor y = fos_tensor_out();
	fos_status st;
	ASSERT_OK(fos_linear(c2, &x, &w, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st), st);
	free(y.data);
	fos_close(c2);
	int ok = 0, refused = 0;
	for (int i = 0; i < SHARE_THREADS; i++) {
		pthread_join(th[i], NULL);
		if (a[i].other)
			fail_msg("thread %d: unexpected %s", i, a[i].msg);
		ok += a[i].ok;
		refused += a[i].refused;
	}
	fos_close(c);
	assert_true(ok >= 2);
	assert_true(refused >= 1);
	fos_stats_info si = stats_of(s.url);
	assert_true(si.connection_refusals >= (uint64_t)refused);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

/* ---- drain while clients keep sending ------------------------------------------------------- */

enum { DRAIN_THREADS = 4 };

typedef struct busy_arg {
	const char *url;
	atomic_int *stop;
	int ok, unavailable, other;
	char msg[512];
} busy_arg;

static void *busy_main(void *p)
{
	busy_arg *a = p;
	fos_client *c = NULL;
	fos_status st;
	if (fos_connect(a->url, NULL, 3000, &c, &st))
		return NULL;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, BM, BK, g_bx);
	while (!atomic_load(a->stop)) {
		fos_tensor y = fos_tensor_out();
		int rc = fos_forward(c, "big", &x, NULL, NULL, &y, NULL, &st);
		free(y.data);
		if (rc == FOS_CODE_OK)
			a->ok++;
		else if (rc == FOS_CODE_UNAVAILABLE || rc == FOS_CODE_DEADLINE_EXCEEDED)
			a->unavailable++; /* and keeps sending, as a careless client would */
		else {
			a->other++;
			snprintf(a->msg, sizeof a->msg, "%s: %.400s", fos_code_name(rc), st.message);
		}
	}
	fos_close(c);
	return NULL;
}

static void test_drain_under_busy_clients(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--workers", "2", "--drain-timeout", "30s", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	put_big(s.url);
	atomic_int stop = 0;
	pthread_t th[DRAIN_THREADS];
	busy_arg a[DRAIN_THREADS];
	for (int i = 0; i < DRAIN_THREADS; i++) {
		memset(&a[i], 0, sizeof a[i]);
		a[i].url = s.url;
		a[i].stop = &stop;
		assert_int_equal(pthread_create(&th[i], NULL, busy_main, &a[i]), 0);
	}
	usleep(500 * 1000);
	uint64_t t0 = tsrv_now_ms();
	int status = tsrv_stop(&s, SIGTERM, 25000);
	uint64_t took = tsrv_now_ms() - t0;
	atomic_store(&stop, 1);
	int ok = 0;
	for (int i = 0; i < DRAIN_THREADS; i++) {
		pthread_join(th[i], NULL);
		ok += a[i].ok;
		if (a[i].other)
			fail_msg("thread %d: unexpected %s", i, a[i].msg);
	}
	if (status != 0 || took > 8000)
		tsrv_dump_log(&s);
	assert_int_equal(status, 0);
	assert_true(ok > 0);
	if (took > 8000)
		fail_msg("the drain took %llu ms with clients sending", (unsigned long long)took);
	assert_true(tsrv_log_contains(&s, "drained: all requests answered"));
	tsrv_cleanup(&s);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flooder_never_reads),
		cmocka_unit_test(test_slow_reader_send_timeout),
		cmocka_unit_test(test_connection_share),
		cmocka_unit_test(test_drain_under_busy_clients),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
