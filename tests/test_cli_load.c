/* test_cli_load.c: `fos load` against a real fosd (CPU backend, private ipc socket; build/fos as a
 * subprocess): a short run of every op in closed loop and in open loop, each with zero errors and a
 * --json report that is checked for sanity (counts add up, percentiles ordered, bytes per request as
 * worked out by hand, the run's weight dropped afterwards); the text report; failed requests give a
 * non-zero exit with the failures counted by status code; the live progress line appears on a
 * terminal (and not elsewhere, nor with --quiet, which prints no report either: a failed run is
 * then its error line and exit status); Ctrl-C stops a run early and still reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <time.h>

#include "cli.h"
#include "support_server.h"
#include "test_cli_harness.h"
#include "support_json.h"

static tsrv g_srv;

static int load_setup(void **state)
{
	if (th_setup(state))
		return -1;
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	return 0;
}

static int load_teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

static double num(const cli_jv *root, const char *path)
{
	const cli_jv *v = cli_json_path(root, path);
	if (!v || v->type != CLI_JNUM)
		fail_msg("report has no number at %s", path);
	return v->num;
}

/* No weight whose name starts with fos-load- is left in the cache. */
static void expect_no_load_weights(void)
{
	th_result r;
	th_run(&r, "list-weights", "--json", NULL);
	th_expect_ok(&r);
	if (strstr(r.out, "fos-load-"))
		fail_msg("a load weight was left behind:\n%s", r.out);
}

/* Bytes moved per request, by hand (M = N = K = 128, bf16 = 2 bytes): forward x + y; backward dy
 * in, dx + dw out; linear x, w, dy in and y, dx, dw out; quantize x in, codes (M, K/2), scales
 * (M, K/16) and a 4-byte amax out. */
static double bytes_per_request(const char *op)
{
	double e = 128.0 * 128.0;
	if (!strcmp(op, "forward"))
		return 2 * (2 * e);
	if (!strcmp(op, "backward"))
		return 2 * (3 * e);
	if (!strcmp(op, "linear"))
		return 2 * (6 * e);
	return 2 * e + e / 2 + e / 16 + 4;
}

/* Runs a load, expects success and checks the JSON report; returns measured requests. */
static double run_load_json(const char *op, const char *mode, const char *const *extra, cli_jv *v)
{
	const char *args[40] = {"load", "--op", op, "--m", "128", "--k", "128", "--json"};
	int n = 8;
	if (strcmp(op, "quantize")) {
		args[n++] = "--n";
		args[n++] = "128";
	}
	for (int i = 0; extra[i]; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	th_result r;
	th_runv(&r, args);
	fos_err e = {0, ""};
	if (r.status != 0 || r.err[0] || cli_json_parse(r.out, strlen(r.out), v, &e))
		fail_msg("load %s %s: exit %d, stderr [%s], JSON [%s]:\n%s", op, mode, r.status, r.err, e.msg, r.out);
	assert_string_equal(cli_json_get(v, "op")->str, op);
	assert_string_equal(cli_json_get(v, "mode")->str, mode);
	double measured = num(v, "requests.measured"), ok = num(v, "requests.ok");
	assert_true(num(v, "requests.failed") == 0);
	assert_true(ok == measured);
	assert_true(measured > 0);
	assert_int_equal(cli_json_get(v, "errors")->n, 0);
	assert_int_equal(cli_json_get(v, "interrupted")->b, 0);
	/* latencies: one per OK request, in order */
	assert_true(num(v, "latency_us.count") == ok);
	static const char *const order[] = {"min", "p50", "p90", "p99", "p999", "max"};
	double prev = 0;
	for (int i = 0; i < 6; i++) {
		char p[40];
		snprintf(p, sizeof p, "latency_us.%s", order[i]);
		double x = num(v, p);
		if (!(x >= prev) || !(x > 0))
			fail_msg("%s %s: latency %s = %g after %g", op, mode, order[i], x, prev);
		prev = x;
	}
	double mean = num(v, "latency_us.mean");
	assert_true(mean >= num(v, "latency_us.min") && mean <= num(v, "latency_us.max"));
	/* throughput: requests/s and bytes/s agree with bytes per request */
	double bpr = num(v, "bytes_per_request"), rps = num(v, "throughput.requests_per_s");
	if (bpr != bytes_per_request(op))
		fail_msg("%s: bytes_per_request %g, by hand %g", op, bpr, bytes_per_request(op));
	assert_true(rps > 0);
	assert_true(fabs(num(v, "throughput.bytes_per_s") - rps * bpr) <= 1e-6 * rps * bpr + 1);
	assert_true(fabs(num(v, "throughput.gb_per_s") * 1e9 - rps * bpr) <= 1e-6 * rps * bpr + 1);
	assert_true(num(v, "elapsed_s") > 0);
	const cli_jv *w = cli_json_get(v, "weight");
	if (!strcmp(op, "forward") || !strcmp(op, "backward"))
		assert_true(w && w->type == CLI_JSTR && !strncmp(w->str, "fos-load-", 9));
	else
		assert_null(w);
	return measured;
}

static const char *const ops[] = {"forward", "backward", "linear", "quantize"};

static void test_closed_loop_each_op(void **state)
{
	(void)state;
	for (int i = 0; i < 4; i++) {
		cli_jv v;
		const char *extra[] = {"--concurrency", "2", "--requests", "12", "--warmup", "50ms", NULL};
		double measured = run_load_json(ops[i], "closed", extra, &v);
		assert_true(measured == 12);
		assert_true(num(&v, "concurrency") == 2);
		assert_int_equal(cli_json_get(&v, "rate")->type, CLI_JNULL);
		cli_json_free(&v);
	}
	expect_no_load_weights();
	/* by duration, two connections */
	cli_jv v;
	const char *extra[] = {"--concurrency", "3", "--connections", "2", "--duration", "300ms", "--warmup", "0", NULL};
	run_load_json("forward", "closed", extra, &v);
	assert_true(num(&v, "connections") == 2);
	assert_true(num(&v, "duration_s") == 0.3);
	assert_true(num(&v, "requests.warmup") == 0);
	cli_json_free(&v);
}

static void test_open_loop_each_op(void **state)
{
	(void)state;
	for (int i = 0; i < 4; i++) {
		cli_jv v;
		/* 100/s for 200 ms: requests due at 0, 10, ..., 190 ms: 20 */
		const char *extra[] = {"--rate", "100", "--duration", "200ms", "--warmup", "0", NULL};
		double measured = run_load_json(ops[i], "open", extra, &v);
		assert_true(num(&v, "requests.due") == 20);
		assert_true(num(&v, "requests.unsent") == 0);
		assert_true(measured == 20);
		assert_true(num(&v, "rate") == 100);
		assert_true(num(&v, "concurrency") == 16);
		assert_true(num(&v, "service_us.count") == measured);
		/* from the intended send time: never less than the service time */
		assert_true(num(&v, "latency_us.max") >= num(&v, "service_us.max"));
		assert_true(num(&v, "max_send_lag_us") >= 0);
		cli_json_free(&v);
	}
	/* --requests with a warmup: 200/s, warmup 50 ms = the 10 requests due at 0..45 ms */
	cli_jv v;
	const char *extra[] = {"--rate", "200", "--requests", "10", "--warmup", "50ms", "--concurrency", "4", NULL};
	assert_true(run_load_json("quantize", "open", extra, &v) == 10);
	assert_true(num(&v, "requests.warmup") == 10);
	cli_json_free(&v);
	expect_no_load_weights();
}

static void test_text_report(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "load", "--op", "forward", "--m", "128", "--n", "128", "--k", "128", "--requests", "5", "--warmup",
	       "0", NULL);
	th_expect_ok(&r);
	static const char *const want[] = {"fos load: forward M=128 N=128 K=128", "closed loop, 1 in flight",
					   "requests:    5 measured: 5 ok, 0 failed", "throughput:", "requests/s",
					   "GB/s", "64.0 KiB of tensors per request", "latency:", "p50", "p99.9",
					   "max", "errors:      none", "weight:      fos-load-"};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		if (!strstr(r.out, want[i]))
			fail_msg("text report lacks '%s':\n%s", want[i], r.out);
	th_run(&r, "load", "--op", "linear", "--m", "128", "--n", "128", "--k", "128", "--rate", "50", "--duration",
	       "100ms", "--warmup", "0", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "open loop at 50 requests/s"));
	assert_non_null(strstr(r.out, "intended send time"));
	assert_non_null(strstr(r.out, "service:"));
}

static void test_failures_exit_nonzero(void **state)
{
	(void)state;
	/* a fosd whose message limit (64 KiB) is below a 128^3 linear request (x, w, dy: 96 KiB) */
	tsrv small;
	const char *args[] = {"--max-message-bytes", "64K", NULL};
	assert_int_equal(tsrv_start(&small, args), 0);
	th_result r;
	th_run(&r, "--server", small.url, "load", "--op", "linear", "--m", "128", "--n", "128", "--k", "128",
	       "--requests", "5", "--warmup", "0", "--json", NULL);
	/* --quiet: the failure is the error line and the exit status, no report */
	th_result rq;
	th_run(&rq, "--quiet", "--server", small.url, "load", "--op", "linear", "--m", "128", "--n", "128", "--k", "128",
	       "--requests", "3", "--warmup", "0", NULL);
	th_expect_fail(&rq, 1, "load: 3 of 3 requests failed; first: RESOURCE_EXHAUSTED");
	if (rq.out[0])
		fail_msg("--quiet printed the report of a failing run: [%s]", rq.out);
	int status = tsrv_stop(&small, SIGTERM, 10000);
	tsrv_cleanup(&small);
	assert_int_equal(status, 0);
	assert_int_equal(r.status, 1);
	static const char want[] = "fos: load: 5 of 5 requests failed; first: RESOURCE_EXHAUSTED";
	if (strncmp(r.err, want, strlen(want)) ||
	    strchr(r.err, '\n') != r.err + strlen(r.err) - 1)
		fail_msg("stderr: [%s]", r.err);
	cli_jv v;
	fos_err e = {0, ""};
	if (cli_json_parse(r.out, strlen(r.out), &v, &e))
		fail_msg("the report of a failing run does not parse (%s):\n%s", e.msg, r.out);
	assert_true(num(&v, "requests.failed") == 5);
	assert_true(num(&v, "requests.ok") == 0);
	assert_true(num(&v, "errors.RESOURCE_EXHAUSTED") == 5);
	assert_int_equal(cli_json_get(&v, "errors")->n, 1);
	assert_non_null(strstr(cli_json_get(&v, "first_error")->str, "RESOURCE_EXHAUSTED"));
	cli_json_free(&v);
	/* no server at all: a setup failure, nothing on stdout */
	char url[600];
	snprintf(url, sizeof url, "ipc://%s", th_p("nobody.sock"));
	th_run(&r, "--server", url, "load", "--requests", "1", NULL);
	th_expect_fail(&r, 1, "no fosd answers at ipc://");
}

/* Starts fos with args, stdout into TMP/name and stderr on a pseudo-terminal (tty) or a pipe;
 * returns its pid (-1 when no pseudo-terminal can be had) and the reading end in *fd. */
static pid_t spawn_fos(const char *const *args, const char *name, int tty, int *fd)
{
	int rd, wr;
	if (tty) {
		if (openpty(&rd, &wr, NULL, NULL, NULL))
			return -1;
	} else {
		int p[2];
		assert_int_equal(pipe(p), 0);
		rd = p[0];
		wr = p[1];
	}
	const char *argv[40];
	int n = 0;
	argv[n++] = th_fos();
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	char outp[600];
	snprintf(outp, sizeof outp, "%s", th_p(name));
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (o < 0 || dup2(o, 1) < 0 || dup2(wr, 2) < 0)
			_exit(126);
		close(rd);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(wr);
	*fd = rd;
	return pid;
}

/* Reads fd until the child closes its end (EOF, or EIO for a terminal) or timeout_ms, into buf. */
static void read_all(int master, char *buf, size_t cap, int timeout_ms)
{
	size_t used = 0;
	uint64_t t0 = tsrv_now_ms();
	while (used + 1 < cap && tsrv_now_ms() - t0 < (uint64_t)timeout_ms) {
		struct pollfd p = {master, POLLIN, 0};
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t k = read(master, buf + used, cap - 1 - used);
		if (k <= 0)
			break; /* EIO once the child is gone */
		used += (size_t)k;
	}
	buf[used] = 0;
}

static int wait_exit(pid_t pid, int timeout_ms)
{
	uint64_t t0 = tsrv_now_ms();
	for (;;) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (tsrv_now_ms() - t0 > (uint64_t)timeout_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(10000);
	}
}

static void test_progress_line_on_a_terminal(void **state)
{
	(void)state;
	const char *args[] = {"load", "--op", "quantize", "--m", "128", "--k", "128", "--rate", "40", "--duration", "1200ms",
			      "--warmup", "0", NULL};
	int master;
	pid_t pid = spawn_fos(args, "tty.out", 1, &master);
	if (pid < 0)
		skip(); /* no pseudo-terminals here */
	static char tty[65536];
	read_all(master, tty, sizeof tty, 20000);
	close(master);
	assert_int_equal(wait_exit(pid, 10000), 0);
	if (!strstr(tty, "\r\033[K") || !strstr(tty, "req/s") || !strstr(tty, "quantize open loop") ||
	    !strstr(tty, "done"))
		fail_msg("no progress line on the terminal: [%s]", tty);
	char out[16384];
	th_slurp(th_p("tty.out"), out, sizeof out);
	assert_non_null(strstr(out, "requests:    48 measured: 48 ok"));
	/* --quiet on a terminal: no progress line, no report */
	const char *qargs[] = {"load", "--op", "quantize", "--m", "128", "--k", "128", "--rate", "40", "--duration",
			       "1200ms", "--warmup", "0", "--quiet", NULL}; /* past the first progress tick */
	pid = spawn_fos(qargs, "ttyq.out", 1, &master);
	assert_true(pid >= 0);
	read_all(master, tty, sizeof tty, 20000);
	close(master);
	assert_int_equal(wait_exit(pid, 10000), 0);
	if (tty[0])
		fail_msg("--quiet wrote to the terminal: [%s]", tty);
	th_slurp(th_p("ttyq.out"), out, sizeof out);
	if (out[0])
		fail_msg("--quiet printed a report: [%s]", out);
	/* not a terminal: no progress line (the harness gives stderr a file) */
	th_result r;
	th_run(&r, "load", "--op", "quantize", "--m", "128", "--k", "128", "--duration", "600ms", "--warmup", "0", NULL);
	th_expect_ok(&r);
}

static void test_interrupt_reports(void **state)
{
	(void)state;
	const char *args[] = {"load", "--op", "forward", "--m", "128", "--n", "128", "--k", "128", "--rate", "20",
			      "--duration", "60s", "--warmup", "0", NULL};
	int errfd;
	pid_t pid = spawn_fos(args, "int.out", 0, &errfd);
	usleep(700000);
	kill(pid, SIGINT);
	char err[4096];
	read_all(errfd, err, sizeof err, 10000);
	close(errfd);
	uint64_t t0 = tsrv_now_ms();
	assert_int_equal(wait_exit(pid, 10000), 1);
	assert_true(tsrv_now_ms() - t0 < 5000);
	if (strcmp(err, "fos: load: interrupted; the report covers what ran\n"))
		fail_msg("stderr: [%s]", err);
	char out[16384];
	th_slurp(th_p("int.out"), out, sizeof out);
	assert_non_null(strstr(out, "interrupted: the run was stopped early"));
	assert_non_null(strstr(out, "errors:      none"));
	expect_no_load_weights();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_closed_loop_each_op),
		cmocka_unit_test(test_open_loop_each_op),
		cmocka_unit_test(test_text_report),
		cmocka_unit_test(test_failures_exit_nonzero),
		cmocka_unit_test(test_progress_line_on_a_terminal),
		cmocka_unit_test(test_interrupt_reports),
	};
	return cmocka_run_group_tests_name("cli_load", tests, load_setup, load_teardown);
}
