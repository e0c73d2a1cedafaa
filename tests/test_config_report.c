/* test_config_report.c: fosd's configuration report (server/core/config_report.c, issue 30 item 5):
 * `fosd --check-config` parses everything and opens nothing (exit 0 with the notes and warnings,
 * or 1 with the first error), the settings that do nothing are named, and a started fosd logs
 * which source won when its flags replace the config file's listeners (the systemd unit passes
 * --listen) and serves only the flag's listener. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"
#include "support_trust.h"

static char dir[256];

static const char *path(const char *name)
{
	static char buf[8][512];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
	return buf[i];
}

static void write_file(const char *name, const char *text)
{
	FILE *f = fopen(path(name), "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static char *slurp(const char *p)
{
	static char buf[16384];
	buf[0] = 0;
	FILE *f = fopen(p, "r");
	if (f) {
		buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
		fclose(f);
	}
	return buf;
}

static int setup(void **state)
{
	(void)state;
	const char *t = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/fos-cfgrep-XXXXXX", t && t[0] ? t : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* fosd ARGS... --check-config; its exit status, its output in *out. */
static int check(const char *const *args, char **out)
{
	const char *argv[32];
	int n = 0;
	for (; args[n]; n++)
		argv[n] = args[n];
	argv[n++] = "--check-config";
	argv[n] = NULL;
	int rc = tt_fosd_run(argv, path("check.log"), 10000);
	*out = slurp(path("check.log"));
	return rc;
}

static void expect_in(const char *out, const char *needle)
{
	if (!strstr(out, needle))
		fail_msg("want '%s' in:\n%s", needle, out);
}

static void test_check_ok_with_notes_and_warnings(void **state)
{
	(void)state;
	char conf[2048];
	snprintf(conf, sizeof conf,
		 "listen = ipc://%s/file1.sock\nlisten = ipc://%s/file2.sock\n"
		 "tls_cert = %s/absent.pem   # no tls+tcp listener: never read\n"
		 "tenant_inflight = 4\ncache_bytes = 1G\nbackend = cuda\n",
		 dir, dir, dir);
	write_file("a.conf", conf);
	char flag[400];
	snprintf(flag, sizeof flag, "ipc://%s/flag.sock", dir);
	const char *args[] = {"--config", path("a.conf"), "--listen", flag, "--cache-bytes", "2G", NULL};
	char *out;
	int rc = check(args, &out);
	if (rc != 0)
		fail_msg("exit %d:\n%s", rc, out);
	char want[1200];
	snprintf(want, sizeof want, "listen: the command line's --listen %s replaces every listen of %s (ipc://%s/file1.sock ipc://%s/file2.sock",
		 flag, path("a.conf"), dir, dir);
	expect_in(out, want);
	expect_in(out, "cache_bytes: the command line's --cache-bytes 2G wins over cache_bytes = 1073741824 in");
	expect_in(out, "warning: tls_cert is set but no listener is tls+tcp://: it does nothing");
	expect_in(out, "warning: tenant_inflight is set but there is no tokens file");
	expect_in(out, "configuration OK");
	expect_in(out, "(2 warnings)");
	/* opened nothing: no socket (file's or flag's), and backend cuda was not opened (no GPU needed) */
	assert_int_not_equal(access(path("file1.sock"), F_OK), 0);
	assert_int_not_equal(access(path("flag.sock"), F_OK), 0);
}

static void test_check_first_error(void **state)
{
	(void)state;
	char *out;
	write_file("bad.conf", "workers = 2\nbogus = 1\nthreads = many\n");
	const char *a1[] = {"--config", path("bad.conf"), NULL};
	assert_int_equal(check(a1, &out), 1);
	char want[600];
	snprintf(want, sizeof want, "fosd: ERROR: %s:2: unknown setting 'bogus'", path("bad.conf"));
	expect_in(out, want);
	assert_null(strstr(out, "threads")); /* the first error only */
	assert_null(strstr(out, "configuration OK"));

	write_file("tokens", "alice short\n");
	const char *a2[] = {"--tokens", path("tokens"), NULL};
	assert_int_equal(check(a2, &out), 1);
	expect_in(out, "fosd: ERROR: tokens: ");

	const char *a3[] = {"--listen", "tls+tcp://127.0.0.1:1", "--allow-insecure-tcp", "--tls-cert", path("bad.conf"),
			    "--tls-key", path("bad.conf"), NULL};
	assert_int_equal(check(a3, &out), 1);
	expect_in(out, "fosd: ERROR: tls_cert ");
	expect_in(out, "not a readable PEM certificate");

	const char *a4[] = {"--listen", "tcp://127.0.0.1:1", NULL};
	assert_int_equal(check(a4, &out), 1);
	expect_in(out, "without a tokens file");
}

static void test_start_logs_which_source_won(void **state)
{
	(void)state;
	char conf[1024];
	snprintf(conf, sizeof conf, "listen = ipc://%s/fromfile.sock\nipc_mode = 0660\n", dir);
	write_file("b.conf", conf);
	tsrv s;
	const char *extra[] = {"--config", path("b.conf"), NULL};
	assert_int_equal(tsrv_start(&s, extra), 0);
	char want[1200];
	snprintf(want, sizeof want, "listen: the command line's --listen %s replaces every listen of %s (ipc://%s/fromfile.sock",
		 s.url, path("b.conf"), dir);
	int ok = tsrv_log_contains(&s, want);
	int sock = access(path("fromfile.sock"), F_OK) == 0;
	assert_int_equal(tsrv_stop(&s, SIGTERM, 20000), 0);
	if (!ok)
		tsrv_dump_log(&s);
	tsrv_cleanup(&s);
	assert_true(ok);
	assert_false(sock); /* the flag's listener replaced the file's */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_ok_with_notes_and_warnings),
		cmocka_unit_test(test_check_first_error),
		cmocka_unit_test(test_start_logs_which_source_won),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
