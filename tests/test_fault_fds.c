/* test_fault_fds.c: fosd under a low descriptor limit (issue 12, finding 3; server/core/fdlimit.c,
 * server/observe/http_server.c, server/shm/regions.c).
 *  - the caps' arithmetic (fosd_fd_caps_compute) against values worked out by hand from the rule
 *    in fdlimit.h;
 *  - a region registration that meets EMFILE (this process's own limit lowered for the call) is
 *    RESOURCE_EXHAUSTED "out of file descriptors", not PERMISSION_DENIED, and takes no unit;
 *  - fosd started with soft limit 128 and hard limit 256 logs that it raised the soft limit and
 *    runs with 256 (/proc/PID/limits); the shm regions its log names as the total cap can be
 *    registered from several connections and the next one is RESOURCE_EXHAUSTED naming the
 *    limit, while Health and a forward (bit-identical) still answer; unregistering makes room;
 *  - fosd at 256:256 with the metrics endpoint: 320 idle TCP connections leave at most the cap
 *    open (the others are closed), ipc Health and GET /healthz on a fresh connection answer, the
 *    idle ones are closed after --metrics-idle-timeout, and fosd's CPU time stays low. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "fos.h"
#include "fdlimit.h"
#include "shm.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

/* ---- fosd's log ----------------------------------------------------------------------------- */

typedef struct logged_caps {
	unsigned long long limit, open, reserve, regions;
	int connections, http, channels;
} logged_caps;

/* The integer written just before phrase in line; -1 when the phrase is not there. */
static long long num_before(const char *line, const char *phrase)
{
	const char *p = strstr(line, phrase);
	if (!p)
		return -1;
	const char *e = p;
	while (p > line && p[-1] >= '0' && p[-1] <= '9')
		p--;
	return p == e ? -1 : strtoll(p, NULL, 10);
}

/* The "descriptors: limit ..." line of fosd's log. Returns 0 or -1. */
static int read_caps(const tsrv *s, logged_caps *c)
{
	FILE *f = fopen(s->log, "r");
	if (!f)
		return -1;
	char line[2048];
	int found = 0;
	memset(c, 0, sizeof *c);
	while (!found && fgets(line, sizeof line, f)) {
		const char *p = strstr(line, "descriptors: limit ");
		if (!p || sscanf(p, "descriptors: limit %llu, %llu open, %llu kept in reserve", &c->limit, &c->open,
				 &c->reserve) != 3)
			continue;
		c->connections = (int)num_before(p, " client connections");
		c->http = (int)num_before(p, " HTTP endpoint connections");
		c->regions = (unsigned long long)num_before(p, " shm regions in all");
		c->channels = (int)num_before(p, " request channels");
		found = c->connections > 0 && num_before(p, " shm regions in all") >= 0 && c->channels >= 0;
	}
	fclose(f);
	return found ? 0 : -1;
}

static int metrics_port(const tsrv *s)
{
	uint64_t t0 = tsrv_now_ms();
	const char *needle = "metrics on http://127.0.0.1:";
	while (tsrv_now_ms() - t0 < 10000) {
		FILE *f = fopen(s->log, "r");
		char line[1024];
		int port = 0;
		while (f && fgets(line, sizeof line, f)) {
			const char *m = strstr(line, needle);
			if (m)
				port = atoi(m + strlen(needle));
		}
		if (f)
			fclose(f);
		if (port > 0)
			return port;
		usleep(20000);
	}
	return -1;
}

/* utime + stime of pid in seconds. */
static double proc_cpu_s(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	unsigned long long ut = 0, st = 0;
	/* after the command: state (3), then fields 4..13, utime (14), stime (15) */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* This process needs descriptors for hundreds of sockets and regions. */
static void raise_own_limit(void)
{
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < 4096) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void stop_clean(tsrv *s)
{
	int rc = tsrv_stop(s, SIGTERM, 15000);
	if (rc != 0)
		tsrv_dump_log(s);
	tsrv_cleanup(s);
	assert_int_equal(rc, 0);
}

/* ---- HTTP over plain sockets ---------------------------------------------------------------- */

static int tcp_connect(int port)
{
	return tsrv_tcp_connect(port, 5);
}

/* GET path on a fresh connection: the status, the body in body (NUL-terminated). 0 or -1. */
static int http_get(int port, const char *path, int *status, char *body, size_t bodysz)
{
	int fd = tcp_connect(port);
	if (fd < 0)
		return -1;
	char req[256];
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
	if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
		close(fd);
		return -1;
	}
	static char buf[1 << 17];
	size_t len = 0;
	for (;;) {
		ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || len + (size_t)k >= sizeof buf - 1) {
			if (k > 0)
				len += (size_t)k;
			break;
		}
		len += (size_t)k;
	}
	close(fd);
	buf[len] = 0;
	char *sep = strstr(buf, "\r\n\r\n");
	if (!sep || sscanf(buf, "HTTP/1.1 %d", status) != 1)
		return -1;
	snprintf(body, bodysz, "%s", sep + 4);
	return 0;
}

/* 1 while the peer has not closed fd (what it sent is read and dropped). */
static int still_open(int fd)
{
	char b[512];
	for (;;) {
		ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
		if (k > 0)
			continue;
		if (k < 0 && errno == EINTR)
			continue;
		return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	}
}

static int count_open(const int *fds, int n)
{
	int open = 0;
	for (int i = 0; i < n; i++)
		open += fds[i] >= 0 && still_open(fds[i]);
	return open;
}

/* ---- the caps' arithmetic ------------------------------------------------------------------- */

static void test_caps_compute(void **state)
{
	(void)state;
	fosd_fd_caps c;
	/* 1024, 10 open: reserve 64 + 1024/16 = 128, 886 left; HTTP min(64, 886/8 = 110) = 64; 822
	 * left: 411 connections, 411 regions; channels min(411, 64) */
	fosd_fd_caps_compute(1024, 10, 0, 64, 1, &c);
	assert_int_equal(c.reserve, 128);
	assert_int_equal(c.http, 64);
	assert_int_equal(c.connections, 411);
	assert_int_equal(c.regions, 411);
	assert_int_equal(c.channels, 64);
	assert_int_equal(c.over_budget, 0);
	/* 256, 12 open: reserve 80, 164 left; HTTP min(64, 20) = 20; 144: 72 and 72 */
	fosd_fd_caps_compute(256, 12, 0, 64, 1, &c);
	assert_int_equal(c.reserve, 80);
	assert_int_equal(c.http, 20);
	assert_int_equal(c.connections, 72);
	assert_int_equal(c.regions, 72);
	assert_int_equal(c.channels, 64);
	/* no endpoint: 164 split 82 / 82 */
	fosd_fd_caps_compute(256, 12, 0, 64, 0, &c);
	assert_int_equal(c.http, 0);
	assert_int_equal(c.connections, 82);
	assert_int_equal(c.regions, 82);
	/* an explicit max_connections below its share leaves the rest to regions: 822 - 10 */
	fosd_fd_caps_compute(1024, 10, 10, 64, 1, &c);
	assert_int_equal(c.connections, 10);
	assert_int_equal(c.regions, 812);
	assert_int_equal(c.over_budget, 0);
	/* above its share: kept, regions keep their half, and it is over the budget */
	fosd_fd_caps_compute(1024, 10, 1000, 64, 1, &c);
	assert_int_equal(c.connections, 1000);
	assert_int_equal(c.regions, 411);
	assert_int_equal(c.over_budget, 1);
	/* 65536, 20 open: reserve 4160, 61356 left; HTTP 64; 61292: 30646 connections, regions at
	 * their ceiling */
	fosd_fd_caps_compute(65536, 20, 0, 64, 1, &c);
	assert_int_equal(c.reserve, 4160);
	assert_int_equal(c.connections, 30646);
	assert_int_equal(c.regions, FOSD_SHM_MAX_TOTAL);
	/* a limit below the reserve: the minimums, no regions, flagged */
	fosd_fd_caps_compute(64, 10, 0, 64, 1, &c);
	assert_int_equal(c.http, 1);
	assert_int_equal(c.connections, FOSD_FD_MIN_CONNECTIONS);
	assert_int_equal(c.regions, 0);
	assert_int_equal(c.channels, 0);
	assert_int_equal(c.over_budget, 1);
}

/* ---- EMFILE in a registration --------------------------------------------------------------- */

static void test_register_emfile(void **state)
{
	(void)state;
	fosd_regions rg;
	assert_int_equal(fosd_regions_init(&rg, NULL), 0);
	fosd_regions_pipe_opened(&rg, 7);
	int mfd = memfd_create("fds-test", MFD_CLOEXEC);
	assert_true(mfd >= 0);
	assert_int_equal(ftruncate(mfd, 4096), 0);
	char key[32], msg[512];
	snprintf(key, sizeof key, "fd:%d", mfd);
	fosd_region_info info;
	/* the lowest free descriptor number becomes the limit: any open fails with EMFILE */
	int lowest = dup(0);
	assert_true(lowest >= 0);
	close(lowest);
	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)lowest;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	int rc = fosd_regions_register(&rg, 7, NULL, (int)getpid(), (int)getuid(), "r", key, 4096, &info, msg,
				       sizeof msg);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	if (rc != FOS__CODE__RESOURCE_EXHAUSTED || !strstr(msg, "out of file descriptors"))
		fail_msg("register at the descriptor limit: code %d: %s", rc, msg);
	assert_int_equal(rg.fds, 0);
	assert_int_equal(rg.count, 0);
	/* with descriptors again it registers */
	rc = fosd_regions_register(&rg, 7, NULL, (int)getpid(), (int)getuid(), "r", key, 4096, &info, msg, sizeof msg);
	if (rc)
		fail_msg("register: code %d: %s", rc, msg);
	assert_int_equal(rg.fds, 1);
	fosd_regions_destroy(&rg);
	close(mfd);
}

/* ---- regions up to the total cap ------------------------------------------------------------ */

#define PER_CONN 60 /* below the 64 per connection: only the total cap refuses */

static void test_regions_total_cap(void **state)
{
	(void)state;
	raise_own_limit();
	tsrv s;
	assert_int_equal(tt_start_nofile(&s, 128, 256, NULL), 0);
	/* the soft limit was raised to the hard one, and said so */
	if (!tsrv_log_contains(&s, "descriptors: soft limit raised from 128 to 256 (hard limit 256)")) {
		tsrv_dump_log(&s);
		fail_msg("no 'soft limit raised' line in fosd's log");
	}
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/limits", (int)s.pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	unsigned long long soft = 0, hard = 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "Max open files", 14))
			sscanf(line + 14, "%llu %llu", &soft, &hard);
	fclose(f);
	assert_int_equal(soft, 256);
	assert_int_equal(hard, 256);

	logged_caps c;
	if (read_caps(&s, &c)) {
		tsrv_dump_log(&s);
		fail_msg("no 'descriptors: limit ... caps: ...' line in fosd's log");
	}
	assert_int_equal(c.limit, 256);
	assert_true(c.reserve >= FOSD_FD_RESERVE_MIN);
	assert_true(c.regions > 0);
	assert_true(c.open + c.reserve + (unsigned long long)c.connections + c.regions <= c.limit);
	assert_true(c.channels <= (int)c.regions);

	const int cap = (int)c.regions, nconn = cap / PER_CONN + 2;
	fos_client **cl = calloc((size_t)nconn, sizeof *cl);
	fos_region **rs = calloc((size_t)cap + 2, sizeof *rs);
	int *on = calloc((size_t)nconn, sizeof *on);
	assert_non_null(cl);
	assert_non_null(rs);
	assert_non_null(on);
	for (int i = 0; i < nconn; i++)
		cl[i] = tt_connect(s.url, NULL);
	fos_status st;
	int total = 0;
	for (int i = 0; total < cap; i = (i + 1) % nconn) {
		if (on[i] == PER_CONN)
			continue;
		char name[32];
		snprintf(name, sizeof name, "r%d", total);
		int rc = fos_region_create(cl[i], name, 4096, FOS_REGION_MEMFD, &rs[total], &st);
		if (rc)
			fail_msg("region %d of %d (connection %d): %s: %s", total + 1, cap, i, fos_code_name(rc), st.message);
		on[i]++;
		total++;
	}
	/* the next one, on a connection with room of its own */
	int spare = 0;
	while (on[spare] == PER_CONN)
		spare++;
	fos_region *over = NULL;
	int rc = fos_region_create(cl[spare], "over", 4096, FOS_REGION_MEMFD, &over, &st);
	char most[48];
	snprintf(most, sizeof most, "at most %d", cap);
	if (rc != FOS_CODE_RESOURCE_EXHAUSTED || !strstr(st.message, "regions in all") || !strstr(st.message, most))
		fail_msg("region %d past the cap of %d: %s: %s", cap + 1, cap, fos_code_name(rc), st.message);
	assert_null(over);
	uint64_t n_regions = 0;
	ASSERT_OK(fos_region_stats(cl[0], &n_regions, NULL, NULL, &st), st);
	assert_int_equal(n_regions, (uint64_t)cap);

	/* fosd keeps answering: Health on a new connection, a forward with the reference's bits */
	fos_client *h = tt_connect(s.url, NULL);
	fos_health_info hi;
	ASSERT_OK(fos_health(h, &hi, &st), st);
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "fds.w", 128, 128, 128, 21), 0);
	ASSERT_OK(tt_weight_put(h, &w, 0, &st), st);
	ASSERT_OK(tt_weight_check(h, &w, &st), st);
	tt_weight_free(&w);
	fos_close(h);

	/* a region given back makes room for one more */
	ASSERT_OK(fos_region_destroy(rs[0], &st), st);
	rs[0] = NULL;
	ASSERT_OK(fos_region_create(cl[spare], "again", 4096, FOS_REGION_MEMFD, &rs[cap], &st), st);
	rc = fos_region_create(cl[spare], "over2", 4096, FOS_REGION_MEMFD, &over, &st);
	assert_int_equal(rc, FOS_CODE_RESOURCE_EXHAUSTED);

	for (int i = 0; i <= cap; i++)
		if (rs[i])
			fos_region_destroy(rs[i], &st);
	for (int i = 0; i < nconn; i++)
		fos_close(cl[i]);
	free(cl);
	free(rs);
	free(on);
	stop_clean(&s);
}

/* ---- idle connections to the HTTP endpoint -------------------------------------------------- */

#define IDLE_CONNS 320
#define IDLE_TIMEOUT_MS 1500

static void test_http_idle_flood(void **state)
{
	(void)state;
	raise_own_limit();
	tsrv s;
	const char *args[] = {"--metrics-listen", "http://127.0.0.1:0", "--metrics-idle-timeout", "1500ms", NULL};
	assert_int_equal(tt_start_nofile(&s, 256, 256, args), 0);
	int port = metrics_port(&s);
	logged_caps c;
	if (port <= 0 || read_caps(&s, &c)) {
		tsrv_dump_log(&s);
		fail_msg("no metrics port or descriptor caps in fosd's log");
	}
	assert_true(c.http >= 1 && c.http <= 64);
	assert_true(c.open + c.reserve + (unsigned long long)c.http <= c.limit);

	double cpu0 = proc_cpu_s(s.pid);
	uint64_t t0 = tsrv_now_ms();
	static int fds[IDLE_CONNS];
	for (int i = 0; i < IDLE_CONNS; i++) {
		fds[i] = tcp_connect(port);
		if (fds[i] < 0)
			fail_msg("connection %d to the metrics endpoint: %s", i, strerror(errno));
	}
	/* fosd answers meanwhile: over ipc, and over HTTP on a fresh connection */
	fos_client *h = tt_connect(s.url, NULL);
	fos_health_info hi;
	fos_status st;
	ASSERT_OK(fos_health(h, &hi, &st), st);
	int status = 0;
	char body[256];
	if (http_get(port, "/healthz", &status, body, sizeof body) || status != 200 || strcmp(body, "ok\n")) {
		tsrv_dump_log(&s);
		fail_msg("GET /healthz beside %d idle connections: status %d '%s'", IDLE_CONNS, status, body);
	}
	/* at most the cap stays open: the others are closed (as fosd accepts them) */
	int open = IDLE_CONNS;
	while ((open = count_open(fds, IDLE_CONNS)) > c.http && tsrv_now_ms() - t0 < 10000)
		usleep(20000);
	if (open > c.http)
		fail_msg("%d of %d idle connections still open, the cap is %d", open, IDLE_CONNS, c.http);
	/* the idle ones are closed after the idle timeout */
	while ((open = count_open(fds, IDLE_CONNS)) > 0 && tsrv_now_ms() - t0 < IDLE_TIMEOUT_MS + 8000)
		usleep(20000);
	if (open)
		fail_msg("%d idle connections still open %llu ms after they connected (idle timeout %d ms)", open,
			 (unsigned long long)(tsrv_now_ms() - t0), IDLE_TIMEOUT_MS);
	uint64_t elapsed = tsrv_now_ms() - t0;
	assert_true(elapsed >= IDLE_TIMEOUT_MS - 100);
	/* nothing spun meanwhile */
	double cpu = proc_cpu_s(s.pid) - cpu0;
	if (cpu0 < 0 || cpu > 1.0)
		fail_msg("fosd used %.2f s of CPU over %llu ms of idle connections", cpu, (unsigned long long)elapsed);
	for (int i = 0; i < IDLE_CONNS; i++)
		close(fds[i]);
	/* and still serves */
	ASSERT_OK(fos_health(h, &hi, &st), st);
	fos_close(h);
	assert_int_equal(http_get(port, "/metrics", &status, body, sizeof body), 0);
	assert_int_equal(status, 200);
	stop_clean(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_caps_compute),
		cmocka_unit_test(test_register_emfile),
		cmocka_unit_test(test_regions_total_cap),
		cmocka_unit_test(test_http_idle_flood),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
