/* test_trust_config_files.c: what fosd reads at start and on SIGHUP. Every duration key (found
 * in `fosd --help`, so a new one is covered too) refuses nan, inf, negative, exponent and
 * too-long values with the key named, in-process, as a flag and in the config file; accepted
 * durations fit in nanoseconds. Config lines of any length: the tail of a comment longer than
 * 4096 bytes is no setting, a long valid line works, NUL bytes and oversized files are refused.
 * A FIFO, a device or a directory as --config or --tokens stops fosd at once with a message (no
 * hang). A token is its whole byte string: the secret followed by a NUL and more is
 * UNAUTHENTICATED, a tokens file with a NUL is refused. SIGHUP reloads the tokens file and the
 * run-time settings: a tenant added works, a tenant removed is refused on an open connection, an
 * unchanged tenant keeps its weights (bit for bit), contexts and cache usage with its new quota, a
 * bad or non-regular new file keeps the old tenants, and fosd keeps running to a clean exit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "fos.h"
#include "fos_wire.h"
#include "tenants.h"
#include "support_assert.h"
#include "support_server.h"
#include "support_trust.h"

#define ALICE "alice-secret-0123456789abcdef"
#define BOB "bob-secret-fedcba9876543210-xyz"
#define CAROL "carol-secret-00112233445566778899"

/* Values no duration key may take, with what the message must say about each. */
static const struct {
	const char *v, *why;
} bad_durations[] = {
	{"nan", "not a decimal number"},
	{"NaN", "not a decimal number"},
	{"inf", "not a decimal number"},
	{"-inf", "negative"},
	{"-1", "negative"},
	{"-0", "negative"},
	{"18446744073710ms", "longer than 24 days"},
	{"18446744073709551616", "longer than 24 days"},
	{"1e300", "not a decimal number"},
	{"1e3", "not a decimal number"},
	{"0x10", "not a decimal number"},
	{" 5", "not a decimal number"},
	{"5 s", "not a decimal number"},
	{"577h", "longer than 24 days"},
	{"2073600001ms", "longer than 24 days"},
	{"3days", "its unit is not ms, s, m or h"},
	{"", "not a decimal number"},
	{"1.", "not a decimal number"},
};

/* The duration keys: the flags `fosd --help` lists with a DUR argument (as config keys). */
static int duration_keys(char keys[][64], int max)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	fosd_config_usage(f);
	fclose(f);
	int n = 0;
	for (char *p = text; (p = strstr(p, "  --")) && n < max; p++) {
		char *sp = strchr(p + 4, ' ');
		if (!sp || strncmp(sp, " DUR", 4))
			continue;
		size_t kl = (size_t)(sp - (p + 4));
		assert_true(kl < 64);
		memcpy(keys[n], p + 4, kl);
		keys[n][kl] = 0;
		for (char *q = keys[n]; *q; q++)
			if (*q == '-')
				*q = '_';
		n++;
	}
	free(text);
	return n;
}

static void test_durations_in_process(void **state)
{
	(void)state;
	char keys[32][64];
	int nk = duration_keys(keys, 32);
	/* at least the ones of today */
	const char *known[] = {"context_ttl",  "drain_timeout", "sweep_interval",
			       "dedup_window", "send_timeout",  "metrics_idle_timeout"};
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
		int found = 0;
		for (int k = 0; k < nk; k++)
			found |= !strcmp(keys[k], known[i]);
		if (!found)
			fail_msg("--help lists no DUR flag for %s", known[i]);
	}
	for (int k = 0; k < nk; k++) {
		for (size_t i = 0; i < sizeof bad_durations / sizeof bad_durations[0]; i++) {
			fosd_config c;
			fosd_config_defaults(&c);
			fosd_config d;
			memcpy(&d, &c, sizeof d);
			char msg[512], want[160];
			if (!fosd_config_set(&c, keys[k], bad_durations[i].v, msg, sizeof msg))
				fail_msg("%s = '%s' was accepted", keys[k], bad_durations[i].v);
			snprintf(want, sizeof want, "%.63s: '%s' is not a duration: %s", keys[k], bad_durations[i].v,
				 bad_durations[i].why);
			if (strncmp(msg, want, strlen(want)))
				fail_msg("%s = '%s': message '%s', expected '%s...'", keys[k], bad_durations[i].v, msg, want);
			assert_memory_equal(&c, &d, sizeof c); /* nothing changed */
			fosd_config_free(&c);
		}
		/* the edges that are accepted, and what they are in ms */
		static const struct {
			const char *v;
			uint64_t ms;
		} good[] = {
			{"0", 0},		 {"250ms", 250},	{"1.5s", 1500},	   {"0.0004s", 0},
			{"0.0005s", 1},		 {"5m", 300000},	{"2min", 120000},  {"1h", 3600000},
			{"576h", 2073600000ull}, {"2073600000ms", 2073600000ull}, {"30", 30000},
			{"0.123456789123s", 123},
		};
		for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
			fosd_config c;
			fosd_config_defaults(&c);
			char msg[512];
			if (fosd_config_set(&c, keys[k], good[i].v, msg, sizeof msg))
				fail_msg("%s = '%s': %s", keys[k], good[i].v, msg);
			fosd_config_free(&c);
			uint64_t v = 1;
			assert_int_equal(fosd_parse_duration_ms(good[i].v, &v), 0);
			assert_int_equal(v, good[i].ms);
		}
	}
	/* the longest duration in ns, added to a monotonic clock of 100 years, stays below 2^64 */
	uint64_t ns = FOSD_DURATION_MAX_MS * 1000000ull;
	assert_true(ns / 1000000ull == FOSD_DURATION_MAX_MS);
	assert_true(ns < UINT64_MAX - 100ull * 365 * 86400 * 1000000000ull);
	assert_true(FOSD_DURATION_MAX_MS <= 2147483647ull); /* an nng_duration (int32 ms) */
	const char *why = NULL;
	uint64_t v;
	assert_int_equal(fosd_parse_duration_why("nan", &v, &why), -1);
	assert_string_equal(why, "not a decimal number");
}

/* fosd must stop at once with exit 2 and a message containing needle. */
static void expect_start_refused(const char *const *args, const char *log, const char *needle)
{
	uint64_t t0 = tsrv_now_ms();
	int rc = tt_fosd_run(args, log, 8000);
	uint64_t ms = tsrv_now_ms() - t0;
	if (rc != 2 || !tt_file_contains(log, needle)) {
		FILE *f = fopen(log, "r");
		char line[1024];
		while (f && fgets(line, sizeof line, f))
			fputs(line, stderr);
		if (f)
			fclose(f);
		fail_msg("fosd %s %s: exit %d after %llu ms, expected 2 with '%s'", args[4], args[5], rc,
			 (unsigned long long)ms, needle);
	}
	assert_true(ms < 5000); /* a generous bound: it never waited on the file */
}

static void test_durations_fosd(void **state)
{
	(void)state;
	char dir[256], log[320], url[320], conf[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(log, sizeof log, "%s/fosd.log", dir);
	snprintf(url, sizeof url, "ipc://%s/x.sock", dir);
	snprintf(conf, sizeof conf, "%s/fosd.conf", dir);
	char keys[32][64];
	int nk = duration_keys(keys, 32);
	const char *values[] = {"nan", "inf", "-1", "18446744073710ms", "1e300"};
	for (int k = 0; k < nk; k++) {
		char flag[80], needle[200];
		snprintf(flag, sizeof flag, "--%.63s", keys[k]);
		for (char *q = flag + 2; *q; q++)
			if (*q == '_')
				*q = '-';
		for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
			const char *args[] = {"--backend", "cpu", "--listen", url, flag, values[i], NULL};
			snprintf(needle, sizeof needle, "%.63s: '%s' is not a duration", keys[k], values[i]);
			expect_start_refused(args, log, needle);
		}
		/* and in the config file, with its line */
		char text[200];
		snprintf(text, sizeof text, "# durations\n%.63s = nan\n", keys[k]);
		assert_int_equal(tt_write_file(conf, text, 0600), 0);
		const char *args[] = {"--backend", "cpu", "--listen", url, "--config", conf, NULL};
		snprintf(needle, sizeof needle, "fosd.conf:2: %.63s: 'nan' is not a duration", keys[k]);
		expect_start_refused(args, log, needle);
	}
	tt_tmpdir_remove(dir);
}

/* Writes text (len bytes) to path. */
static void write_bytes(const char *path, const char *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
}

static void test_long_lines_in_process(void **state)
{
	(void)state;
	char dir[256], path[320], msg[512];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(path, sizeof path, "%s/long.conf", dir);
	size_t cap = 3 << 20;
	char *t = malloc(cap);
	/* a comment of 10000 bytes whose bytes from 4096 on read as a setting; then a long valid line
	 * (a key, 6000 blanks, its value) and a value of 5000 bytes */
	size_t n = 0;
	n += (size_t)sprintf(t + n, "# ");
	while (n < 4095)
		t[n++] = 'x';
	n += (size_t)sprintf(t + n, "workers = 7 ");
	while (n < 10000)
		t[n++] = 'y';
	t[n++] = '\n';
	n += (size_t)sprintf(t + n, "log_level");
	for (int i = 0; i < 6000; i++)
		t[n++] = i % 2 ? ' ' : '\t';
	n += (size_t)sprintf(t + n, "= debug   # and a comment\ntls_key_password = ");
	for (int i = 0; i < 5000; i++)
		t[n++] = (char)('a' + i % 26);
	t[n++] = '\n';
	write_bytes(path, t, n);
	fosd_config c;
	fosd_config_defaults(&c);
	if (fosd_config_load_file(&c, path, msg, sizeof msg))
		fail_msg("%s", msg);
	assert_int_equal(c.workers, 2); /* the default: the comment's tail set nothing */
	assert_int_equal(c.log_level, 3);
	assert_non_null(c.tls_key_password);
	assert_int_equal(strlen(c.tls_key_password), 5000);
	assert_int_equal(c.tls_key_password[4999], (char)('a' + 4999 % 26));
	fosd_config_free(&c);

	/* a NUL byte, anywhere: refused with its line */
	const char nul[] = "workers = 3\n# a comment \0 with a NUL\n";
	write_bytes(path, nul, sizeof nul - 1);
	fosd_config_defaults(&c);
	assert_int_equal(fosd_config_load_file(&c, path, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "long.conf:2: a NUL byte"));
	fosd_config_free(&c);
	const char nul2[] = "workers = 3\0 junk\n";
	write_bytes(path, nul2, sizeof nul2 - 1);
	fosd_config_defaults(&c);
	assert_int_equal(fosd_config_load_file(&c, path, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "long.conf:1: a NUL byte"));
	fosd_config_free(&c);

	/* over 1 MiB: refused (blank lines, which would otherwise be fine) */
	memset(t, '\n', cap);
	write_bytes(path, t, ((size_t)1 << 20) + 1);
	fosd_config_defaults(&c);
	assert_int_equal(fosd_config_load_file(&c, path, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "larger than 1024 KiB"));
	fosd_config_free(&c);
	write_bytes(path, t, (size_t)1 << 20); /* exactly 1 MiB is fine */
	fosd_config_defaults(&c);
	if (fosd_config_load_file(&c, path, msg, sizeof msg))
		fail_msg("%s", msg);
	fosd_config_free(&c);

	/* the special files, in-process */
	char fifo[320];
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	const struct {
		const char *path, *kind;
	} special[] = {{fifo, "(a FIFO)"}, {"/dev/zero", "(a character device)"}, {dir, "(a directory)"}};
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
		fosd_config_defaults(&c);
		assert_int_equal(fosd_config_load_file(&c, special[i].path, msg, sizeof msg), -1);
		assert_non_null(strstr(msg, "not a regular file"));
		assert_non_null(strstr(msg, special[i].kind));
		fosd_config_free(&c);
		fosd_tenants *ts;
		int insecure;
		assert_int_equal(fosd_tenants_load(special[i].path, NULL, &ts, &insecure, msg, sizeof msg), -1);
		assert_non_null(strstr(msg, special[i].kind));
	}
	free(t);
	tt_tmpdir_remove(dir);
}

static void test_long_lines_fosd(void **state)
{
	(void)state;
	char dir[256], conf[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(conf, sizeof conf, "%s/long.conf", dir);
	/* read in 4096-byte pieces, the comment's tail would be a backend fosd refuses, and the long
	 * log_level line would be no 'key = value' */
	size_t cap = 32768, n = 0;
	char *t = malloc(cap);
	n += (size_t)sprintf(t + n, "# ");
	while (n < 4095)
		t[n++] = '-';
	n += (size_t)sprintf(t + n, "backend = bogus\n");
	n += (size_t)sprintf(t + n, "log_level");
	while (n < 12000)
		t[n++] = ' ';
	n += (size_t)sprintf(t + n, "= debug\n");
	write_bytes(conf, t, n);
	free(t);
	tsrv s;
	const char *args[] = {"--config", conf, NULL};
	if (tsrv_start(&s, args))
		fail_msg("fosd did not start with a long comment and a long line");
	fos_client *c = tt_connect(s.url, NULL);
	fos_health_info h;
	fos_status st;
	ASSERT_OK(fos_health(c, &h, &st), st);
	fos_close(c);
	assert_true(tsrv_log_contains(&s, " DEBUG ")); /* log_level = debug took effect */
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
	tt_tmpdir_remove(dir);
}

static void test_special_files_fosd(void **state)
{
	(void)state;
	char dir[256], log[320], url[320], fifo[320], tokens[320], big[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(log, sizeof log, "%s/fosd.log", dir);
	snprintf(url, sizeof url, "ipc://%s/x.sock", dir);
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	snprintf(big, sizeof big, "%s/big", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	const struct {
		const char *flag, *path, *needle;
	} cases[] = {
		{"--tokens", fifo, "not a regular file (a FIFO)"},
		{"--config", fifo, "not a regular file (a FIFO)"},
		{"--config", "/dev/zero", "not a regular file (a character device)"},
		{"--tokens", "/dev/zero", "not a regular file (a character device)"},
		{"--config", dir, "not a regular file (a directory)"},
		{"--tokens", dir, "not a regular file (a directory)"},
		{"--config", big, "larger than 1024 KiB"},
		{"--tokens", big, "larger than 16384 KiB"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* a sparse file: 1 MiB + 1 for the config, 16 MiB + 1 for the tokens */
		int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, (off_t)(strcmp(cases[i].flag, "--config") ? (16 << 20) : (1 << 20)) + 1), 0);
		close(fd);
		const char *args[] = {"--backend", "cpu", "--listen", url, cases[i].flag, cases[i].path, NULL};
		char needle[400];
		snprintf(needle, sizeof needle, "%s: %s", cases[i].path, cases[i].needle);
		expect_start_refused(args, log, needle);
	}
	(void)tokens;
	tt_tmpdir_remove(dir);
}

/* A Stats request whose auth_token is the len bytes at tok, through a bare socket. */
static int raw_stats(const char *url, const void *tok, size_t len, char *msg, size_t msgsz)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_STATS;
	rq.stats = &sr;
	rq.id = 1;
	rq.auth_token.len = len;
	rq.auth_token.data = (uint8_t *)tok;
	return tt_raw_call(url, &rq, NULL, 0, 20000, msg, msgsz, NULL);
}

static void test_nul_tokens(void **state)
{
	(void)state;
	/* in-process: matching uses every byte */
	fosd_tenants *ts;
	char msg[600];
	const char text[] = "alice " ALICE "\n";
	assert_int_equal(fosd_tenants_parse(text, sizeof text - 1, "t", NULL, &ts, msg, sizeof msg), 0);
	const char ext[] = ALICE "\0junk", tail[] = ALICE "\0", lead[] = "\0" ALICE;
	assert_non_null(fosd_tenants_match(ts, ALICE, strlen(ALICE)));
	assert_null(fosd_tenants_match(ts, ext, sizeof ext - 1));
	assert_null(fosd_tenants_match(ts, tail, sizeof tail - 1));
	assert_null(fosd_tenants_match(ts, lead, sizeof lead - 1));
	fosd_tenants_free(ts);
	/* a tokens file with a NUL, in a secret or in a comment: refused with its line */
	const char nul1[] = "alice " ALICE "\0x\n", nul2[] = "bob " BOB "\n# note \0\n";
	assert_int_equal(fosd_tenants_parse(nul1, sizeof nul1 - 1, "t", NULL, &ts, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "t:1: a NUL byte"));
	assert_null(strstr(msg, ALICE));
	assert_int_equal(fosd_tenants_parse(nul2, sizeof nul2 - 1, "t", NULL, &ts, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "t:2: a NUL byte"));

	/* a real fosd */
	char dir[256], tokens[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	assert_int_equal(tt_write_file(tokens, "alice " ALICE "\n", 0600), 0);
	tsrv s;
	const char *args[] = {"--tokens", tokens, NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	assert_int_equal(raw_stats(s.url, ALICE, strlen(ALICE), msg, sizeof msg), FOS_CODE_OK);
	assert_int_equal(raw_stats(s.url, ext, sizeof ext - 1, msg, sizeof msg), FOS_CODE_UNAUTHENTICATED);
	assert_non_null(strstr(msg, "not valid"));
	assert_int_equal(raw_stats(s.url, tail, sizeof tail - 1, msg, sizeof msg), FOS_CODE_UNAUTHENTICATED);
	assert_int_equal(raw_stats(s.url, lead, sizeof lead - 1, msg, sizeof msg), FOS_CODE_UNAUTHENTICATED);
	/* Health too: a token given is checked */
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &hr;
	rq.auth_token.len = sizeof ext - 1;
	rq.auth_token.data = (uint8_t *)ext;
	assert_int_equal(tt_raw_call(s.url, &rq, NULL, 0, 20000, msg, sizeof msg, NULL), FOS_CODE_UNAUTHENTICATED);
	assert_int_equal(raw_stats(s.url, ALICE, strlen(ALICE), msg, sizeof msg), FOS_CODE_OK);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	assert_false(tt_file_contains(s.log, ALICE));
	tsrv_cleanup(&s);
	tt_tmpdir_remove(dir);
}

/* ---- SIGHUP ------------------------------------------------------------------------------------ */

static int log_count(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	int n = 0;
	while (getline(&line, &cap, f) >= 0)
		n += strstr(line, needle) != NULL;
	free(line);
	fclose(f);
	return n;
}

/* Waits (up to 15 s) until the log holds needle more than `before` times. */
static void wait_log(const tsrv *s, const char *needle, int before)
{
	uint64_t t0 = tsrv_now_ms();
	while (log_count(s->log, needle) <= before) {
		if (tsrv_now_ms() - t0 > 15000) {
			tsrv_dump_log(s);
			fail_msg("no '%s' in the log", needle);
		}
		usleep(5000);
	}
}

/* Sends SIGHUP and waits for the reload's last line; checks that fosd still runs. */
static void hup(const tsrv *s, int want_ok)
{
	const char *done = want_ok ? "SIGHUP: reload done" : "SIGHUP: reload refused";
	int before = log_count(s->log, done);
	assert_int_equal(kill(s->pid, SIGHUP), 0);
	wait_log(s, done, before);
	assert_int_equal(kill(s->pid, 0), 0);
}

/* Replaces path by a file of text atomically (as editors and config tools do). */
static void replace_file(const char *dir, const char *path, const char *text)
{
	char tmp[400];
	snprintf(tmp, sizeof tmp, "%s/new-file", dir);
	assert_int_equal(tt_write_file(tmp, text, 0600), 0);
	assert_int_equal(rename(tmp, path), 0);
}

static void test_sighup_reload(void **state)
{
	(void)state;
	char dir[256], tokens[320], conf[320], fifo[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	snprintf(conf, sizeof conf, "%s/fosd.conf", dir);
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	assert_int_equal(tt_write_file(tokens, "alice " ALICE "\nbob " BOB "\n", 0600), 0);
	assert_int_equal(tt_write_file(conf, "log_level = info\nworkers = 2\n", 0600), 0);
	tsrv s;
	const char *args[] = {"--config", conf, "--tokens", tokens, NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	wait_log(&s, "ready", 0);

	tt_weight wa, wb;
	assert_int_equal(tt_weight_make(&wa, "kept", 256, 128, 128, 11), 0);
	assert_int_equal(tt_weight_make(&wb, "second", 256, 128, 128, 12), 0);
	fos_client *a = tt_connect(s.url, ALICE), *b = tt_connect(s.url, BOB);
	fos_status st;
	ASSERT_OK(tt_weight_put(a, &wa, 1, &st), st);
	ASSERT_OK(tt_weight_put(b, &wb, 0, &st), st);
	fos_context ctx;
	ASSERT_OK(tt_weight_save_context(a, &wa, &ctx, &st), st);
	fos_weight_info *list;
	size_t n;
	ASSERT_OK(fos_list_weights(a, &list, &n, &st), st);
	assert_int_equal(n, 1);
	uint64_t wa_bytes = list[0].bytes;
	free(list);

	/* 1: bob goes, carol comes, alice stays with a cache quota below what she holds; the config
	 * turns on debug logging and changes a key that needs a restart */
	char text[600];
	snprintf(text, sizeof text, "alice " ALICE " cache=1K\ncarol " CAROL "\n");
	replace_file(dir, tokens, text);
	assert_int_equal(tt_write_file(conf, "log_level = debug\nworkers = 3\n", 0600), 0);
	hup(&s, 1);
	assert_true(tsrv_log_contains(&s, "reload: tenant 'carol' added"));
	assert_true(tsrv_log_contains(&s, "reload: tenant 'bob' removed"));
	assert_true(tsrv_log_contains(&s, "(1 added, 1 removed, 1 unchanged"));
	assert_true(tsrv_log_contains(&s, "reload: log_level debug (was info)"));
	assert_true(tsrv_log_contains(&s, "reload: changed, waiting for a restart: workers ("));
	/* bob's open connection is refused from its next request on, and so is a new one */
	ASSERT_CODE(fos_list_weights(b, &list, &n, &st), FOS_CODE_UNAUTHENTICATED, st);
	ASSERT_CODE(tt_weight_check(b, &wb, &st), FOS_CODE_UNAUTHENTICATED, st);
	fos_client *b2 = NULL;
	ASSERT_CODE(fos_connect(s.url, BOB, 10000, &b2, &st), FOS_CODE_UNAUTHENTICATED, st);
	/* carol works, in a namespace of her own */
	fos_client *c = tt_connect(s.url, CAROL);
	ASSERT_OK(fos_list_weights(c, &list, &n, &st), st);
	assert_int_equal(n, 0);
	free(list);
	ASSERT_CODE(tt_weight_check(c, &wa, &st), FOS_CODE_NOT_FOUND, st);
	/* alice: the same weight, bit for bit, her context, and her usage under the new quota */
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	ASSERT_CODE(tt_weight_put(a, &wb, 0, &st), FOS_CODE_RESOURCE_EXHAUSTED, st);
	char want[200];
	snprintf(want, sizeof want, "%llu of its 1024 in use", (unsigned long long)wa_bytes);
	if (!strstr(st.message, want))
		fail_msg("quota message '%s' lacks '%s'", st.message, want);
	ASSERT_OK(fos_release(a, &ctx, &st), st);
	size_t debug_before = (size_t)log_count(s.log, " DEBUG ");
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	assert_true((size_t)log_count(s.log, " DEBUG ") > debug_before); /* debug logging is on */

	/* 2: a bad file keeps everything, and says why */
	replace_file(dir, tokens, "alice " ALICE "\nalice " CAROL "\n");
	hup(&s, 0);
	assert_true(tsrv_log_contains(&s, "tenant 'alice' is listed twice; nothing changed, the 2 tenants of before stay"));
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	ASSERT_OK(fos_list_weights(c, &list, &n, &st), st);
	free(list);
	ASSERT_CODE(fos_list_weights(b, &list, &n, &st), FOS_CODE_UNAUTHENTICATED, st);
	/* a FIFO in its place: refused at once, no hang */
	assert_int_equal(unlink(tokens), 0);
	assert_int_equal(mkfifo(tokens, 0600), 0);
	uint64_t t0 = tsrv_now_ms();
	hup(&s, 0);
	assert_true(tsrv_log_contains(&s, "not a regular file (a FIFO); nothing changed"));
	assert_true(tsrv_now_ms() - t0 < 10000);
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	/* a missing file, and a bad config file, likewise */
	assert_int_equal(unlink(tokens), 0);
	hup(&s, 0);
	ASSERT_OK(fos_list_weights(c, &list, &n, &st), st);
	free(list);
	snprintf(text, sizeof text, "alice " ALICE "\nbob " BOB "\n");
	replace_file(dir, tokens, text);
	assert_int_equal(tt_write_file(conf, "log_level = debug\ncontext_ttl = nan\n", 0600), 0);
	hup(&s, 0);
	assert_true(tsrv_log_contains(&s, "reload: configuration: "));
	ASSERT_CODE(fos_list_weights(b, &list, &n, &st), FOS_CODE_UNAUTHENTICATED, st);

	/* 3: bob back with his secret (his object, and his weight, come back); carol gone; alice's
	 * quota lifted */
	assert_int_equal(tt_write_file(conf, "log_level = info\n", 0600), 0);
	hup(&s, 1);
	ASSERT_OK(tt_weight_check(b, &wb, &st), st); /* the connection opened before it all */
	ASSERT_CODE(fos_list_weights(c, &list, &n, &st), FOS_CODE_UNAUTHENTICATED, st);
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	tt_weight wc;
	assert_int_equal(tt_weight_make(&wc, "third", 256, 128, 128, 13), 0);
	ASSERT_OK(tt_weight_put(a, &wc, 0, &st), st);
	ASSERT_OK(tt_weight_check(a, &wc, &st), st);

	fos_close(a);
	fos_close(b);
	fos_close(c);
	tt_weight_free(&wa);
	tt_weight_free(&wb);
	tt_weight_free(&wc);
	int status = tsrv_stop(&s, SIGTERM, 15000);
	if (status)
		tsrv_dump_log(&s);
	assert_int_equal(status, 0);
	assert_false(tt_file_contains(s.log, ALICE));
	assert_false(tt_file_contains(s.log, BOB));
	assert_false(tt_file_contains(s.log, CAROL));
	tsrv_cleanup(&s);
	(void)fifo;
	tt_tmpdir_remove(dir);
}

/* In-process: fosd_tenants_replace keeps the objects of unchanged tenants, retires and reuses. */
static void test_replace_units(void **state)
{
	(void)state;
	fosd_tenants *ts, *fresh;
	char msg[256];
	const char t1[] = "alice " ALICE " inflight=2\nbob " BOB "\n";
	assert_int_equal(fosd_tenants_parse(t1, sizeof t1 - 1, "t", NULL, &ts, msg, sizeof msg), 0);
	fosd_tenant *a = fosd_tenants_find(ts, "alice"), *b = fosd_tenants_find(ts, "bob");
	a->cache_bytes = 777; /* usage stays with the object */
	/* alice unchanged (new quota), bob with another secret: a new bob; carol new */
	const char t2[] = "carol " CAROL "\nalice " ALICE " inflight=5\nbob " CAROL "x\n";
	assert_int_equal(fosd_tenants_parse(t2, sizeof t2 - 1, "t", NULL, &fresh, msg, sizeof msg), 0);
	assert_int_equal(fosd_tenants_replace(ts, fresh, NULL, NULL, msg, sizeof msg), 0);
	assert_int_equal(ts->n, 3);
	assert_ptr_equal(fosd_tenants_find(ts, "alice"), a);
	assert_int_equal(a->cache_bytes, 777);
	assert_int_equal(a->quota_inflight, 5);
	assert_ptr_equal(fosd_tenants_match(ts, ALICE, strlen(ALICE)), a);
	assert_null(fosd_tenants_match(ts, BOB, strlen(BOB)));
	fosd_tenant *b2 = fosd_tenants_find(ts, "bob");
	assert_non_null(b2);
	assert_ptr_not_equal(b2, b);
	assert_ptr_equal(fosd_tenants_match(ts, CAROL "x", strlen(CAROL) + 1), b2);
	assert_string_equal(b->name, "bob"); /* the retired object is intact */
	/* the old bob back: his object again */
	const char t3[] = "bob " BOB "\n";
	assert_int_equal(fosd_tenants_parse(t3, sizeof t3 - 1, "t", NULL, &fresh, msg, sizeof msg), 0);
	assert_int_equal(fosd_tenants_replace(ts, fresh, NULL, NULL, msg, sizeof msg), 0);
	assert_int_equal(ts->n, 1);
	assert_ptr_equal(fosd_tenants_match(ts, BOB, strlen(BOB)), b);
	assert_null(fosd_tenants_match(ts, ALICE, strlen(ALICE)));
	assert_null(fosd_tenants_find(ts, "alice"));
	assert_int_equal(ts->n_all, 4); /* alice, bob, carol, the other bob */
	fosd_tenants_free(ts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durations_in_process), cmocka_unit_test(test_durations_fosd),
		cmocka_unit_test(test_long_lines_in_process), cmocka_unit_test(test_long_lines_fosd),
		cmocka_unit_test(test_special_files_fosd),    cmocka_unit_test(test_nul_tokens),
		cmocka_unit_test(test_replace_units),	      cmocka_unit_test(test_sighup_reload),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
