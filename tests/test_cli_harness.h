/* test_cli_harness.h: what the CLI tests (tests/test_cli_*.c) share: a temporary directory, running
 * build/fos as a subprocess with its exit status, stdout and stderr captured, the "one clear error
 * line" check, and small .npy helpers. build/fos is found through $FOS_BUILD (tests/run-tests.sh sets
 * it), else next to the test binary (BUILD/tests/x -> BUILD/fos), else "build". All functions are
 * static inline so each test file uses what it needs. Include after <cmocka.h>. */
#ifndef FOS_TEST_CLI_HARNESS_H
#define FOS_TEST_CLI_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npy.h"

typedef struct th_result {
	int status;   /* exit status, or 128 + signal */
	char out[16384];
	char err[16384];
} th_result;

static inline char *th_dir(void)
{
	static char dir[256];
	return dir;
}

static inline const char *th_fos(void)
{
	static char path[PATH_MAX + 8];
	if (path[0])
		return path;
	const char *b = getenv("FOS_BUILD");
	if (b && b[0]) {
		snprintf(path, sizeof path, "%s/fos", b);
		return path;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		for (int i = 0; i < 2; i++) {
			char *s = strrchr(exe, '/');
			if (s)
				*s = 0;
		}
		snprintf(path, sizeof path, "%s/fos", exe);
		if (access(path, X_OK) == 0)
			return path;
	}
	snprintf(path, sizeof path, "build/fos");
	return path;
}

/* Group setup / teardown: a fresh temporary directory, removed afterwards. */
static inline int th_setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(th_dir(), 256, "%s/fos-test-cli-XXXXXX", base && base[0] ? base : "/tmp");
	if (!mkdtemp(th_dir()))
		return -1;
	if (access(th_fos(), X_OK)) {
		fprintf(stderr, "test_cli: %s is not there (build it first: make)\n", th_fos());
		return -1;
	}
	return 0;
}

static inline int th_teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", th_dir());
	return system(cmd) == 0 ? 0 : -1;
}

/* TMPDIR/name, from a ring of buffers (valid for the next 31 calls). */
static inline const char *th_p(const char *name)
{
	static char buf[32][512];
	static int i;
	i = (i + 1) % 32;
	snprintf(buf[i], sizeof buf[i], "%s/%s", th_dir(), name);
	return buf[i];
}

static inline void th_slurp(const char *path, char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	fclose(f);
}

/* Runs fos with the given arguments (argv[0] is added). Environment: inherited, plus env_kv
 * ("NAME=VALUE" strings, NULL-terminated, may be NULL). */
static inline void th_runv_env(th_result *r, const char *const *env_kv, const char *const *args)
{
	const char *argv[64];
	int n = 0;
	argv[n++] = th_fos();
	while (args[n - 1] && n < 63) {
		argv[n] = args[n - 1];
		n++;
	}
	argv[n] = NULL;
	char op[600], ep[600];
	snprintf(op, sizeof op, "%s/.stdout", th_dir());
	snprintf(ep, sizeof ep, "%s/.stderr", th_dir());
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		for (int i = 0; env_kv && env_kv[i]; i++)
			putenv((char *)env_kv[i]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	th_slurp(op, r->out, sizeof r->out);
	th_slurp(ep, r->err, sizeof r->err);
}

static inline void th_runv(th_result *r, const char *const *args)
{
	th_runv_env(r, NULL, args);
}

/* th_run(&r, "quantize", "x.npy", ..., NULL) */
static inline void th_run(th_result *r, ...)
{
	const char *args[64];
	int n = 0;
	va_list ap;
	va_start(ap, r);
	for (const char *a; n < 63 && (a = va_arg(ap, const char *)) != NULL;)
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	th_runv(r, args);
}

/* Success: exit 0 and nothing on stderr. */
static inline void th_expect_ok(const th_result *r)
{
	if (r->status != 0 || r->err[0])
		fail_msg("fos exited %d, stderr: %s", r->status, r->err);
}

/* Failure: exit status `code` (or any nonzero when code < 0), nothing on stdout, and stderr exactly
 * one line "fos: ..." that contains needle. */
static inline void th_expect_fail(const th_result *r, int code, const char *needle)
{
	if (r->status == 0)
		fail_msg("fos succeeded, expected an error mentioning '%s'", needle);
	if (r->status >= 128)
		fail_msg("fos died of signal %d (stderr: %s)", r->status - 128, r->err);
	if (code >= 0 && r->status != code)
		fail_msg("fos exited %d, expected %d (stderr: %s)", r->status, code, r->err);
	size_t n = strlen(r->err);
	const char *nl = strchr(r->err, '\n');
	if (strncmp(r->err, "fos: ", 5) || !nl || nl != r->err + n - 1 || n < 8)
		fail_msg("stderr is not one 'fos: ...' line: [%s]", r->err);
	if (!strstr(r->err, needle))
		fail_msg("error line does not mention '%s': %s", needle, r->err);
	if (r->out[0])
		fail_msg("fos wrote to stdout on an error: %s", r->out);
}

/* ---- .npy helpers ---- */

static inline void th_save(const char *path, int dtype, int ndim, int64_t d0, int64_t d1, const void *data)
{
	int64_t shape[2] = {d0, d1};
	fos_err e = {0, ""};
	if (npy_write(path, dtype, ndim, shape, data, &e))
		fail_msg("npy_write %s: %s", path, e.msg);
}

/* Loads path and checks its dtype and shape (ndim 0..2). */
static inline void th_load(const char *path, npy_array *a, int dtype, int ndim, int64_t d0, int64_t d1)
{
	fos_err e = {0, ""};
	if (npy_read(path, a, &e))
		fail_msg("npy_read %s: %s", path, e.msg);
	if (a->dtype != dtype || a->ndim != ndim || (ndim > 0 && a->shape[0] != d0) || (ndim > 1 && a->shape[1] != d1))
		fail_msg("%s: dtype %d ndim %d shape (%lld, %lld), expected dtype %d ndim %d (%lld, %lld)", path, a->dtype,
			 a->ndim, (long long)a->shape[0], (long long)a->shape[1], dtype, ndim, (long long)d0,
			 (long long)d1);
}

/* Loads path, checks dtype and shape, and compares its bytes with want. */
static inline void th_check_file(const char *path, int dtype, int ndim, int64_t d0, int64_t d1, const void *want)
{
	npy_array a;
	th_load(path, &a, dtype, ndim, d0, d1);
	const unsigned char *g = (const unsigned char *)a.data, *w = (const unsigned char *)want;
	size_t es = npy_dtype_size(dtype);
	for (size_t i = 0; i < a.nbytes; i++)
		if (g[i] != w[i])
			fail_msg("%s: element %zu differs (byte %zu: got 0x%02x, want 0x%02x)", path, i / es, i, g[i], w[i]);
	npy_free(&a);
}

static inline int th_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* The two files have the same bytes (a remote result against a --local one, say). */
static inline void th_same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	if (!fa || !fb)
		fail_msg("cannot open %s", fa ? b : a);
	long off = 0;
	for (;; off++) {
		int ca = fgetc(fa), cb = fgetc(fb);
		if (ca != cb) {
			fclose(fa);
			fclose(fb);
			fail_msg("%s and %s differ at byte %ld (%d vs %d)", a, b, off, ca, cb);
		}
		if (ca == EOF)
			break;
	}
	fclose(fa);
	fclose(fb);
}

/* xorshift64 */
static inline uint64_t th_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

#endif
