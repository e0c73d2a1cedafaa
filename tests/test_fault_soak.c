/* test_fault_soak.c: a soak of fosd under `fos load` (the CLI's load tester) with two tenants:
 * forwards, backwards on saved contexts, one-shot linears and quantizes at once, while this test
 * churns connections and sends requests with a wrong token. It runs $FOS_SOAK_SECONDS (180 s by
 * default, 20 s under AddressSanitizer). At the end every load run reports no failed request,
 * fosd's resident memory has stayed flat (the last third of the run is no higher than the middle
 * third, within 10% + 32 MiB), the cache is back to the one pinned weight (the load runs drop
 * theirs), the saved contexts have expired, no request is in flight, no descriptor has leaked, and
 * the pinned weight gives bit-identical results. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

#define ALICE "alice-secret-0123456789abcdef"
#define BOB "bob-secret-fedcba9876543210-xyz"

typedef struct load_run {
	const char *token, *op, *conc, *m, *n, *k;
	char out[320];
	pid_t pid;
} load_run;

static pid_t start_load(load_run *r, const char *url, int seconds)
{
	char fos[1200], dur[32];
	snprintf(fos, sizeof fos, "%s/fos", tsrv_build_dir());
	snprintf(dur, sizeof dur, "%ds", seconds);
	const char *argv[32];
	int a = 0;
	const char *fixed[] = {fos,	  "--server", url,   "--token",	r->token, "--timeout",	   "60s",   "load",
			       "--op", r->op,     "--duration", dur,	"--warmup", "0", "--concurrency", r->conc,
			       "--m",  r->m,      "--k",	r->k,	"--json",   "--no-progress"};
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		argv[a++] = fixed[i];
	if (r->n) { /* quantize has no N */
		argv[a++] = "--n";
		argv[a++] = r->n;
	}
	argv[a] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(r->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(fos, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

typedef struct churn {
	const char *url;
	const tt_weight *keep;
	atomic_int *stop;
	int rounds, failures;
	char msg[600];
} churn;

static void *churn_main(void *p)
{
	churn *a = p;
	while (!atomic_load(a->stop)) {
		fos_client *c;
		fos_status st;
		if (fos_connect(a->url, ALICE, 30000, &c, &st) || tt_weight_check(c, a->keep, &st)) {
			a->failures++;
			snprintf(a->msg, sizeof a->msg, "%s", st.message);
		}
		if (c)
			fos_close(c);
		c = NULL;
		/* a wrong token: refused, and harmless */
		if (fos_connect(a->url, "wrong-token-000000000000", 30000, &c, &st) != FOS_CODE_UNAUTHENTICATED) {
			a->failures++;
			snprintf(a->msg, sizeof a->msg, "a wrong token was not refused: %s", st.message);
		}
		if (c)
			fos_close(c);
		a->rounds++;
		usleep(100 * 1000);
	}
	return NULL;
}

static long max_of(const long *v, int from, int to)
{
	long m = 0;
	for (int i = from; i < to; i++)
		if (v[i] > m)
			m = v[i];
	return m;
}

static void test_soak(void **state)
{
	(void)state;
	int seconds = tt_env_seconds("FOS_SOAK_SECONDS", tt_under_asan() ? 20 : 180);
	char dir[256], tokens[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	assert_int_equal(tt_write_file(tokens, "alice " ALICE "\nbob " BOB " inflight=8\n", 0600), 0);
	const char *args[] = {"--tokens",	 tokens, "--workers", "2",     "--context-ttl", "3s",
			      "--cache-bytes", "256M", "--log-level", "warn", NULL};
	tsrv s;
	assert_int_equal(tsrv_start(&s, args), 0);
	tt_weight keep;
	assert_int_equal(tt_weight_make(&keep, "keep", 256, 256, 128, 900), 0);
	fos_client *c = tt_connect(s.url, ALICE);
	fos_status st;
	ASSERT_OK(tt_weight_put(c, &keep, 1, &st), st);
	fos_stats_info si0;
	ASSERT_OK(fos_stats(c, &si0, &st), st);
	int fd0 = tt_fd_count(s.pid);

	load_run runs[] = {
		{ALICE, "forward", "3", "128", "512", "512", "", 0},
		{BOB, "backward", "2", "128", "512", "512", "", 0},
		{ALICE, "linear", "1", "256", "256", "256", "", 0},
		{BOB, "quantize", "2", "256", NULL, "1024", "", 0},
	};
	enum { NR = sizeof runs / sizeof runs[0] };
	for (int i = 0; i < NR; i++) {
		snprintf(runs[i].out, sizeof runs[i].out, "%s/load-%d.json", dir, i);
		runs[i].pid = start_load(&runs[i], s.url, seconds);
		assert_true(runs[i].pid > 0);
	}
	atomic_int stop = 0;
	churn ch = {s.url, &keep, &stop, 0, 0, ""};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, churn_main, &ch), 0);

	/* RSS and cache bytes once a second */
	int cap = seconds + 60, n = 0;
	long *rss = calloc((size_t)cap, sizeof *rss);
	uint64_t t0 = tsrv_now_ms();
	int running = NR;
	while (running && n < cap) {
		usleep(1000 * 1000);
		rss[n++] = tt_rss_kb(s.pid);
		running = 0;
		for (int i = 0; i < NR; i++)
			if (runs[i].pid > 0) {
				int status;
				pid_t r = waitpid(runs[i].pid, &status, WNOHANG);
				if (r == runs[i].pid) {
					runs[i].pid = -(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) - 1;
				} else {
					running++;
				}
			}
		if (tsrv_now_ms() - t0 > (uint64_t)(seconds + 60) * 1000)
			break;
	}
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	for (int i = 0; i < NR; i++) {
		if (runs[i].pid > 0) {
			kill(runs[i].pid, SIGKILL);
			waitpid(runs[i].pid, NULL, 0);
			fail_msg("fos load --op %s did not finish", runs[i].op);
		}
		int rc = -runs[i].pid - 1;
		if (rc != 0 || !tt_file_contains(runs[i].out, "\"failed\": 0")) {
			FILE *f = fopen(runs[i].out, "r");
			char line[512];
			while (f && fgets(line, sizeof line, f))
				fputs(line, stderr);
			if (f)
				fclose(f);
			fail_msg("fos load --op %s: exit %d or failed requests", runs[i].op, rc);
		}
	}
	if (ch.failures)
		fail_msg("connection churn: %d of %d rounds failed (%s)", ch.failures, ch.rounds, ch.msg);

	/* flat memory: the last third no higher than the middle third (10% + 32 MiB slack) */
	assert_true(n >= 6);
	long mid = max_of(rss, n / 3, 2 * n / 3), last = max_of(rss, 2 * n / 3, n);
	fprintf(stderr, "soak %d s: fosd RSS max %ld KiB in the middle third, %ld KiB in the last; %d churn rounds\n",
		seconds, mid, last, ch.rounds);
	if (last > mid + mid / 10 + 32 * 1024)
		fail_msg("fosd's RSS grew from %ld KiB to %ld KiB during the soak", mid, last);

	/* back to idle: the pinned weight only, contexts expired, nothing in flight, no leaked fd */
	fos_stats_info si;
	uint64_t t1 = tsrv_now_ms();
	for (;;) {
		ASSERT_OK(fos_stats(c, &si, &st), st);
		if (si.cache_bytes == si0.cache_bytes && si.contexts == 0 && si.inflight <= 1 && si.queued == 0 &&
		    tt_fd_count(s.pid) <= fd0)
			break;
		if (tsrv_now_ms() - t1 > 15000)
			fail_msg("not idle after the soak: cache %llu bytes (%llu before), %llu contexts, %llu in flight, %d "
				 "fds (%d before)",
				 (unsigned long long)si.cache_bytes, (unsigned long long)si0.cache_bytes,
				 (unsigned long long)si.contexts, (unsigned long long)si.inflight, tt_fd_count(s.pid), fd0);
		usleep(100 * 1000);
	}
	assert_int_equal(si.cache_entries, 1);
	ASSERT_OK(tt_weight_check(c, &keep, &st), st);
	fos_close(c);
	free(rss);
	tt_weight_free(&keep);
	int rc = tsrv_stop(&s, SIGTERM, 20000);
	if (rc)
		tsrv_dump_log(&s);
	assert_int_equal(rc, 0);
	tsrv_cleanup(&s);
	tt_tmpdir_remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_soak),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
