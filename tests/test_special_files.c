/* test_special_files.c: every file fosd and fos read is taken only as a regular file of bounded
 * size, checked before any read (formats/regfile.c): a FIFO (whose blocking open waited for a
 * writer forever), /dev/zero (endless), a directory and an oversized sparse file are refused at
 * once with a message naming the path and what it is. Each reader is tried: fosd's TLS
 * certificate and key, weights.conf (fosd exits), the weight repository's files (each rejected
 * with its log line, fosd serves the rest, also FIFOs, links to /dev/zero, dangling links, loops
 * of links and a directory named *.safetensors), a tensor over the PutWeight limit refused from
 * its header (a sparse file that claims 1.5 GiB, and a real 2 MiB tensor under a 1 MiB
 * max_message_bytes), 20,000 tensors of one file all cached, and fos's .npy, .safetensors and
 * context files and its --tls-ca file. Every process runs under a deadline: a hang is a failure,
 * not a stuck test.
 * (The config and tokens files: test_trust_config_files.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "support_safetensors.h"
#include "support_server.h"
#include "support_trust.h"

#define DEADLINE_MS 10000

static char g_dir[256];

static const char *p(const char *name)
{
	static char buf[8][512];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%s/%s", g_dir, name);
	return buf[i];
}

static void sparse(const char *path, off_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	close(fd);
}

/* Runs BUILD/fos args (NULL-terminated) with stderr into err; the exit status, or -1 when it had
 * to be killed at the deadline. */
static int run_fos(char *err, size_t errsz, const char *const *args)
{
	char bin[1200], ep[600];
	snprintf(bin, sizeof bin, "%s/fos", tsrv_build_dir());
	snprintf(ep, sizeof ep, "%s/fos.err", g_dir);
	const char *argv[32];
	int n = 0;
	argv[n++] = bin;
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	uint64_t t0 = tsrv_now_ms();
	int st, rc = -1;
	for (;;) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			break;
		}
		if (tsrv_now_ms() - t0 > DEADLINE_MS) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		usleep(5000);
	}
	err[0] = 0;
	FILE *f = fopen(ep, "r");
	if (f) {
		size_t got = fread(err, 1, errsz - 1, f);
		err[got] = 0;
		fclose(f);
	}
	return rc;
}

static void expect_fos_refuses(const char *needle, const char *const *args)
{
	char err[4096];
	int rc = run_fos(err, sizeof err, args);
	if (rc <= 0 || rc >= 128 || !strstr(err, needle))
		fail_msg("fos %s %s: exit %d (-1: killed at the %d ms deadline), expected a failure naming '%s'; said: %s",
			 args[0], args[1], rc, DEADLINE_MS, needle, err);
}

/* fosd with args must exit (not 0) before the deadline, its log naming needle. */
static void expect_fosd_refuses(const char *const *args, const char *needle)
{
	char log[600];
	snprintf(log, sizeof log, "%s/fosd.log", g_dir);
	int rc = tt_fosd_run(args, log, DEADLINE_MS);
	if (rc <= 0 || !tt_file_contains(log, needle)) {
		char cmd[800];
		snprintf(cmd, sizeof cmd, "cat '%s' >&2", log);
		if (system(cmd)) {
		}
		fail_msg("fosd exited %d (-1: killed at the %d ms deadline), expected a refusal naming '%s'", rc,
			 DEADLINE_MS, needle);
	}
}

static int setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof g_dir, "/tmp/fos-special-XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	return mkfifo(p("fifo"), 0600);
}

static int teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
	return getenv("FOS_TEST_KEEP") ? 0 : system(cmd);
}

static void test_tls_files(void **state)
{
	(void)state;
	char msg[300], url[600];
	assert_int_equal(tt_make_certs(g_dir, "localhost", msg, sizeof msg), 0);
	snprintf(url, sizeof url, "ipc://%s/t.sock", g_dir);
	char fifo[600], cert[600], key[600], big[600];
	snprintf(fifo, sizeof fifo, "%s", p("fifo"));
	snprintf(cert, sizeof cert, "%s", p("server.pem"));
	snprintf(key, sizeof key, "%s", p("server.key"));
	snprintf(big, sizeof big, "%s", p("big.pem"));
	sparse(big, ((off_t)1 << 20) + 1);
	const struct {
		const char *cert, *key, *needle;
	} cases[] = {
		{fifo, key, "fifo: not a regular file (a FIFO)"},
		{cert, fifo, "fifo: not a regular file (a FIFO)"},
		{"/dev/zero", key, "/dev/zero: not a regular file (a character device)"},
		{cert, "/dev/zero", "/dev/zero: not a regular file (a character device)"},
		{g_dir, key, "not a regular file (a directory)"},
		{big, key, "big.pem: larger than 1024 KiB"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *args[] = {"--backend",    "cpu",      "--listen",  url,	  "--listen",
				      "tls+tcp://127.0.0.1:0", "--allow-insecure-tcp", "--tls-cert", cases[i].cert,
				      "--tls-key",  cases[i].key, NULL};
		expect_fosd_refuses(args, cases[i].needle);
	}
}

static void test_weights_conf(void **state)
{
	(void)state;
	char url[600];
	snprintf(url, sizeof url, "ipc://%s/w.sock", g_dir);
	const char *conf = p("repo/weights.conf");
	assert_int_equal(mkdir(p("repo"), 0700), 0);
	const char *needles[] = {"weights.conf: not a regular file (a FIFO)",
				 "weights.conf: not a regular file (a character device)",
				 "weights.conf: not a regular file (a directory)", "weights.conf: larger than 1024 KiB",
				 "weights.conf: cannot open: No such file or directory"};
	for (int i = 0; i < 5; i++) {
		unlink(conf);
		rmdir(conf);
		if (i == 0)
			assert_int_equal(mkfifo(conf, 0600), 0);
		else if (i == 1)
			assert_int_equal(symlink("/dev/zero", conf), 0);
		else if (i == 2)
			assert_int_equal(mkdir(conf, 0700), 0);
		else if (i == 3)
			sparse(conf, ((off_t)1 << 20) + 1);
		else
			assert_int_equal(symlink(p("repo/nothere"), conf), 0); /* dangling */
		const char *args[] = {"--backend", "cpu", "--listen", url, "--weights", p("repo"), NULL};
		expect_fosd_refuses(args, needles[i]);
	}
	unlink(conf);
	rmdir(p("repo"));
}

/* The repository's files: each bad one rejected with its own log line, the good one served. */
static void test_repo_files(void **state)
{
	(void)state;
	assert_int_equal(mkdir(p("r"), 0700), 0);
	uint16_t w[32 * 32];
	tsrv_fill_bf16(w, 32 * 32, 5, 0.05f);
	tst_in good = {"good.w", "BF16", 2, 32, 32, w, sizeof w};
	assert_int_equal(tst_write(p("r/good.safetensors"), &good, 1, 0, NULL), 0);
	assert_int_equal(mkfifo(p("r/fifo.safetensors"), 0600), 0);
	assert_int_equal(mkfifo(p("r/fifo.npy"), 0600), 0);
	assert_int_equal(symlink("/dev/zero", p("r/zero.npy")), 0);
	assert_int_equal(symlink("/dev/zero", p("r/zero.safetensors")), 0);
	assert_int_equal(symlink(p("r/loop-b.npy"), p("r/loop-a.npy")), 0);
	assert_int_equal(symlink(p("r/loop-a.npy"), p("r/loop-b.npy")), 0);
	assert_int_equal(symlink(p("r/gone"), p("r/dangling.safetensors")), 0);
	assert_int_equal(mkdir(p("r/dir.safetensors"), 0700), 0);
	/* a header that claims one 49152 x 16384 BF16 tensor, 1.5 GiB, over the 1 GiB limit: a sparse
	 * file of that size, so only the header check can refuse it without reading it */
	char hdr[200];
	uint64_t big = (uint64_t)49152 * 16384 * 2;
	int hl = snprintf(hdr, sizeof hdr, "{\"huge.w\": {\"dtype\": \"BF16\", \"shape\": [49152, 16384], \"data_offsets\": [0, %llu]}}",
			  (unsigned long long)big);
	while (hl % 8)
		hdr[hl++] = ' ';
	unsigned char lenb[8];
	for (int i = 0; i < 8; i++)
		lenb[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	int fd = open(p("r/huge.safetensors"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, lenb, 8), 8);
	assert_int_equal(write(fd, hdr, (size_t)hl), hl);
	assert_int_equal(ftruncate(fd, (off_t)(8 + (uint64_t)hl + big)), 0);
	close(fd);

	tsrv s;
	const char *args[] = {"--weights", p("r"), NULL};
	uint64_t t0 = tsrv_now_ms();
	assert_int_equal(tsrv_start(&s, args), 0);
	assert_true(tsrv_now_ms() - t0 < DEADLINE_MS);
	const struct {
		const char *file, *why;
	} rejected[] = {
		{"fifo.safetensors", "not a regular file (a FIFO)"},
		{"fifo.npy", "not a regular file (a FIFO)"},
		{"zero.npy", "not a regular file (a character device)"},
		{"zero.safetensors", "not a regular file (a character device)"},
		{"loop-a.npy", "cannot open: a loop of symbolic links"},
		{"loop-b.npy", "cannot open: a loop of symbolic links"},
		{"dangling.safetensors", "cannot open: No such file or directory"},
		{"dir.safetensors", "not a regular file (a directory)"},
		{"huge.safetensors", "tensor 'huge.w' has shape (49152, 16384), 805306368 elements: more than 536870912"},
	};
	for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
		char line[700];
		snprintf(line, sizeof line, "weights: rejected %s/%s: %s", p("r"), rejected[i].file, rejected[i].why);
		if (!tsrv_log_contains(&s, line)) {
			tsrv_dump_log(&s);
			fail_msg("no log line '%s'", line);
		}
	}
	assert_true(tsrv_log_contains(&s, "weights: 1 weights from 1 of 10 files"));
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(s.url, NULL, 5000, &c, &st), FOS_CODE_OK);
	fos_weight_info *list;
	size_t n;
	assert_int_equal(fos_list_weights(c, &list, &n, &st), FOS_CODE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].name, "good.w");
	free(list);
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

/* One limit for PutWeight and the repository: under --max-message-bytes 1M, a 1024 x 1024 bf16
 * tensor (2 MiB) is refused from its header, by name and size, and a 256 x 1024 one (512 KiB)
 * loads. */
static void test_repo_limit(void **state)
{
	(void)state;
	assert_int_equal(mkdir(p("lim"), 0700), 0);
	uint16_t *w = calloc(1024 * 1024, 2);
	assert_non_null(w);
	tsrv_fill_bf16(w, 1024 * 1024, 7, 0.05f);
	tst_in big = {"big.w", "BF16", 2, 1024, 1024, w, (size_t)1024 * 1024 * 2};
	tst_in fits = {"fits.w", "BF16", 2, 256, 1024, w, (size_t)256 * 1024 * 2};
	assert_int_equal(tst_write(p("lim/a.safetensors"), &big, 1, 0, NULL), 0);
	assert_int_equal(tst_write(p("lim/b.safetensors"), &fits, 1, 0, NULL), 0);
	free(w);
	tsrv s;
	const char *args[] = {"--weights", p("lim"), "--max-message-bytes", "1M", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	char line[700];
	snprintf(line, sizeof line,
		 "weights: rejected %s/a.safetensors: tensor 'big.w' has shape (1024, 1024), 1048576 elements: more than "
		 "524288 (1048576 bf16 bytes at most: max_message_bytes",
		 p("lim"));
	if (!tsrv_log_contains(&s, line)) {
		tsrv_dump_log(&s);
		fail_msg("no log line '%s'", line);
	}
	assert_true(tsrv_log_contains(&s, "weights: 1 weights from 1 of 2 files"));
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

/* 20,000 tensors of one file are all cached (the cache's cost per put: test_wcache_scale.c). */
static void test_repo_many_tensors(void **state)
{
	(void)state;
	enum { NT = 20000 };
	assert_int_equal(mkdir(p("many"), 0700), 0);
	static uint16_t w[16 * 16];
	tsrv_fill_bf16(w, 16 * 16, 9, 0.05f);
	tst_in *t = calloc(NT, sizeof *t);
	char(*names)[32] = calloc(NT, 32);
	assert_non_null(t);
	assert_non_null(names);
	for (int i = 0; i < NT; i++) {
		snprintf(names[i], 32, "t.%05d", i);
		t[i] = (tst_in){names[i], "BF16", 2, 16, 16, w, sizeof w};
	}
	assert_int_equal(tst_write(p("many/m.safetensors"), t, NT, 0, NULL), 0);
	free(t);
	free(names);
	tsrv s;
	const char *args[] = {"--weights", p("many"), "--log-level", "warn", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(s.url, NULL, 5000, &c, &st), FOS_CODE_OK);
	fos_stats_info si;
	assert_int_equal(fos_stats(c, &si, &st), FOS_CODE_OK);
	assert_int_equal(si.cache_entries, NT);
	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

/* fos: the .npy inputs, --safetensors and the context file. */
static void test_cli_files(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	const char *fifo = p("fifo");
	{
		const char *a[] = {"put-weight", "--safetensors", fifo, "--server", s.url, NULL};
		expect_fos_refuses("fifo: not a regular file (a FIFO)", a);
	}
	{
		const char *a[] = {"put-weight", "--safetensors", "/dev/zero", "--server", s.url, NULL};
		expect_fos_refuses("/dev/zero: not a regular file (a character device)", a);
	}
	{
		const char *a[] = {"put-weight", "w", fifo, "--server", s.url, NULL};
		expect_fos_refuses("fifo: not a regular file (a FIFO)", a);
	}
	{
		const char *a[] = {"put-weight", "w", "/dev/zero", "--server", s.url, NULL};
		expect_fos_refuses("/dev/zero: not a regular file (a character device)", a);
	}
	{
		const char *a[] = {"quantize", fifo, "--out", p("q"), "--local", NULL};
		expect_fos_refuses("fifo: not a regular file (a FIFO)", a);
	}
	{
		const char *a[] = {"linear", "/dev/zero", fifo, "--out", p("l"), "--local", NULL};
		expect_fos_refuses("/dev/zero: not a regular file (a character device)", a);
	}
	{
		const char *a[] = {"backward", fifo, fifo, "--out", p("b"), "--server", s.url, NULL};
		expect_fos_refuses("fifo: not a regular file (a FIFO)", a);
	}
	{ /* --tls-ca: checked before libfos reads it */
		const char *a[] = {"health", "--server", "tls+tcp://127.0.0.1:1", "--tls-ca", fifo, NULL};
		expect_fos_refuses("--tls-ca " , a);
		expect_fos_refuses("fifo: not a regular file (a FIFO)", a);
	}
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_files),   cmocka_unit_test(test_weights_conf),
		cmocka_unit_test(test_repo_files),  cmocka_unit_test(test_repo_limit),
		cmocka_unit_test(test_repo_many_tensors), cmocka_unit_test(test_cli_files),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
