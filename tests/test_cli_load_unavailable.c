/* test_cli_load_unavailable.c: `fos load` (a subprocess of build/fos) against a real fosd that goes
 * away under it (CPU backend, private ipc socket): killed with SIGKILL, or draining after SIGTERM
 * while a long Linear keeps it busy (requests answered UNAVAILABLE at once). Either way the load
 * backs off instead of spinning: it ends within a few seconds with "fosd is unavailable (draining
 * or gone): stopped after N requests" and exit status 1, its --json report says so, and it sent
 * only a handful of requests after the stop (far fewer than 1000). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "fos.h"
#include "support_server.h"
#include "support_assert.h"
#include "test_cli_harness.h"
#include "support_json.h"

enum { BIG = 4096 };

/* Forward requests fosd has received (Stats). */
static uint64_t forwards(fos_client *c)
{
	fos_stats_info si;
	fos_status st;
	ASSERT_OK(fos_stats(c, &si, &st), st);
	for (int i = 0; i < si.n_ops; i++)
		if (!strcmp(si.ops[i].op, "forward"))
			return si.ops[i].requests;
	return 0;
}

/* Starts `fos --server URL load ...` with stdout and stderr in files of s's directory. */
static pid_t start_load(const tsrv *s)
{
	char out[400], err[400];
	snprintf(out, sizeof out, "%s/load.json", s->dir);
	snprintf(err, sizeof err, "%s/load.err", s->dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
			_exit(99);
		const char *fos = th_fos();
		execl(fos, fos, "--server", s->url, "load", "--m", "128", "--n", "128", "--k", "128", "--concurrency", "2",
		      "--duration", "120s", "--warmup", "0", "--json", "--no-progress", (char *)NULL);
		_exit(98);
	}
	return pid;
}

static char *slurp(const tsrv *s, const char *name)
{
	char path[400];
	snprintf(path, sizeof path, "%s/%s", s->dir, name);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

/* Waits for the load to end after fosd was stopped at t_stop (ms); checks what it said. n0: the
 * forwards fosd had received just before the stop. */
static void expect_load_stopped(const tsrv *s, pid_t load, uint64_t t_stop, uint64_t n0)
{
	int status = 0;
	pid_t got = 0;
	while ((got = waitpid(load, &status, WNOHANG)) == 0 && tsrv_now_ms() - t_stop < 30000)
		usleep(20000);
	uint64_t took = tsrv_now_ms() - t_stop;
	if (got == 0) {
		kill(load, SIGKILL);
		waitpid(load, &status, 0);
		fail_msg("fos load was still running 30 s after fosd stopped; stderr: %s", slurp(s, "load.err"));
	}
	const char *err = slurp(s, "load.err");
	fprintf(stderr, "fos load ended %llu ms after the stop: %s", (unsigned long long)took, err);
	if (took > 12000)
		fail_msg("fos load took %llu ms to stop", (unsigned long long)took);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_non_null(strstr(err, "fosd is unavailable (draining or gone): stopped after "));
	const char *js = slurp(s, "load.json");
	cli_jv v;
	fos_err e = {0, ""};
	if (cli_json_parse(js, strlen(js), &v, &e))
		fail_msg("the --json report does not parse: %s\n%s", e.msg, js);
	assert_true(cli_json_get(&v, "unavailable")->b);
	assert_false(cli_json_get(&v, "interrupted")->b);
	double sent = cli_json_path(&v, "requests.measured")->num + cli_json_path(&v, "requests.warmup")->num;
	fprintf(stderr, "requests: %.0f in all, %llu before the stop\n", sent, (unsigned long long)n0);
	assert_true(sent >= (double)n0);
	if (sent - (double)n0 > 100)
		fail_msg("fos load sent %.0f requests after the stop", sent - (double)n0);
	cli_json_free(&v);
}

/* Starts fosd and a load against it; returns once fosd has served 200 of its forwards. */
static pid_t start_both(tsrv *s, const char *const *args, fos_client **c)
{
	assert_int_equal(tsrv_start(s, args), 0);
	fos_status st;
	ASSERT_OK(fos_connect(s->url, NULL, 20000, c, &st), st);
	pid_t load = start_load(s);
	uint64_t t0 = tsrv_now_ms();
	while (forwards(*c) < 200) {
		if (tsrv_now_ms() - t0 > 30000) {
			kill(load, SIGKILL);
			waitpid(load, NULL, 0);
			fail_msg("fos load did not get going; stderr: %s", slurp(s, "load.err"));
		}
		usleep(20000);
	}
	return load;
}

static void test_fosd_killed(void **state)
{
	(void)state;
	tsrv s;
	const char *args[] = {"--workers", "2", NULL};
	fos_client *c;
	pid_t load = start_both(&s, args, &c);
	uint64_t n0 = forwards(c);
	fos_close(c);
	uint64_t t_stop = tsrv_now_ms();
	assert_int_equal(tsrv_stop(&s, SIGKILL, 10000), 128 + SIGKILL);
	expect_load_stopped(&s, load, t_stop, n0);
	tsrv_cleanup(&s);
}

typedef struct long_arg {
	const char *url;
	uint16_t *x;
	int rc;
	atomic_int sent, done;
} long_arg;

/* A Linear of (BIG, BIG) with a backward: many seconds on the CPU backend. */
static void *long_main(void *p)
{
	long_arg *a = p;
	fos_client *c;
	fos_status st;
	if ((a->rc = fos_connect(a->url, NULL, 120000, &c, &st))) {
		atomic_store(&a->sent, 1);
		atomic_store(&a->done, 1);
		return NULL;
	}
	fos_set_reconnect_wait(c, 1000); /* fosd gone (it drained before the Linear arrived): fail soon */
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, BIG, BIG, a->x);
	fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
	atomic_store(&a->sent, 1);
	a->rc = fos_linear(c, &x, &x, NULL, &x, NULL, &y, &dx, &dw, NULL, &st);
	atomic_store(&a->done, 1);
	free(y.data);
	free(dx.data);
	free(dw.data);
	fos_close(c);
	return NULL;
}

static void test_fosd_draining(void **state)
{
	(void)state;
	tsrv s;
	/* two lanes: the Linear keeps one, the load's forwards run on the other (and no context sweep,
	 * which would run alone and so wait for the Linear, holding up everything behind it) */
	const char *args[] = {"--workers", "3", "--streams", "2", "--sweep-interval", "1h", "--drain-timeout", "120s", NULL};
	fos_client *c;
	pid_t load = start_both(&s, args, &c);
	long_arg a = {s.url, malloc((size_t)BIG * BIG * 2), -1, 0, 0};
	assert_non_null(a.x);
	tsrv_fill_bf16(a.x, (size_t)BIG * BIG, 7, 1.0f);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, long_main, &a), 0);
	/* let the Linear's 96 MiB arrive and start: it then keeps a lane busy for many seconds */
	while (!atomic_load(&a.sent))
		usleep(10000);
	usleep(1500000);
	if (atomic_load(&a.done))
		fprintf(stderr, "the Linear ended before the SIGTERM: fosd will be gone rather than draining\n");
	uint64_t n0 = forwards(c);
	fos_close(c);
	uint64_t t_stop = tsrv_now_ms();
	assert_int_equal(kill(s.pid, SIGTERM), 0);
	expect_load_stopped(&s, load, t_stop, n0);
	/* while the Linear runs fosd drains: the load stopped on that, not on a fosd gone (on a busy
	 * machine the Linear may not have been accepted before the SIGTERM: then fosd drained at once
	 * and exited, and the load rightly saw it gone) */
	int status, fosd_alive = 1;
	if (waitpid(s.pid, &status, WNOHANG) == s.pid) {
		fosd_alive = 0;
		s.pid = 0; /* reaped here: tsrv_stop below has nothing to stop */
	}
	if (!atomic_load(&a.done) && fosd_alive) {
		const char *err = slurp(&s, "load.err");
		if (!strstr(err, "Health: fosd is draining") && !strstr(err, "fosd is shutting down"))
			fail_msg("the load stopped while fosd drained, but says: %s", err);
	}
	/* fosd is not needed any more */
	tsrv_stop(&s, SIGKILL, 10000);
	pthread_join(th, NULL);
	free(a.x);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fosd_killed),
		cmocka_unit_test(test_fosd_draining),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
