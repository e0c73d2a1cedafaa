/* test_trust_tenants.c: tenants and tokens on a real fosd. Weights and contexts are per tenant:
 * another tenant's name or context id is NOT_FOUND with exactly the message of a missing one, the
 * same name in two tenants is two weights, duplicate detection is per tenant. Wrong, missing,
 * truncated, extended and oversized tokens are UNAUTHENTICATED (Health alone answers without a
 * token). No secret reaches the log. Bad tokens files stop fosd at start with the line and
 * without the secret; a readable tokens file is warned about. Without tokens: one anonymous
 * tenant on ipc only, a tcp listener needs --allow-insecure-tcp; the ipc socket's mode is 0600 by
 * default and --ipc-mode sets it. Cached weights are bit-identical at the end of each test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

#define ALICE "alice-secret-0123456789abcdef"
#define BOB "bob-secret-fedcba9876543210-xyz"

typedef struct env {
	char dir[256], tokens[320];
	tsrv s;
} env;

/* fosd with a tokens file of alice and bob (plus extra args). */
static void start_tenants(env *e, const char *const *extra)
{
	assert_int_equal(tt_tmpdir(e->dir), 0);
	snprintf(e->tokens, sizeof e->tokens, "%s/tokens", e->dir);
	assert_int_equal(tt_write_file(e->tokens,
				       "# tenants of the test\n"
				       "alice " ALICE "   # trailing comment\n"
				       "\n"
				       "bob\t" BOB "\n",
				       0600),
			 0);
	const char *args[32];
	int n = 0;
	args[n++] = "--tokens";
	args[n++] = e->tokens;
	args[n++] = "--log-level";
	args[n++] = "debug";
	for (int i = 0; extra && extra[i] && n < 30; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	assert_int_equal(tsrv_start(&e->s, args), 0);
}

static void stop_env(env *e)
{
	int status = tsrv_stop(&e->s, SIGTERM, 15000);
	if (status)
		tsrv_dump_log(&e->s);
	assert_int_equal(status, 0);
	/* no secret ever reaches the log, at debug level either */
	assert_false(tt_file_contains(e->s.log, ALICE));
	assert_false(tt_file_contains(e->s.log, BOB));
	assert_false(tt_file_contains(e->s.log, "secret-0123"));
	tsrv_cleanup(&e->s);
	tt_tmpdir_remove(e->dir);
}

/* Replaces every 16-hex-digit context id in msg by "ID". */
static void mask_ids(char *msg)
{
	for (char *p = msg; *p; p++) {
		int n = 0;
		while (p[n] && strchr("0123456789abcdef", p[n]))
			n++;
		if (n == 16) {
			memcpy(p, "ID", 2);
			memmove(p + 2, p + 16, strlen(p + 16) + 1);
		}
	}
}

static void test_isolation(void **state)
{
	(void)state;
	env e;
	start_tenants(&e, NULL);
	tt_weight wa, wb;
	assert_int_equal(tt_weight_make(&wa, "shared/name", 256, 128, 128, 1), 0);
	assert_int_equal(tt_weight_make(&wb, "shared/name", 256, 128, 128, 2), 0);
	fos_client *a = tt_connect(e.s.url, ALICE), *b = tt_connect(e.s.url, BOB);
	fos_status st;
	ASSERT_OK(tt_weight_put(a, &wa, 0, &st), st);

	/* bob does not see alice's weight: every op says NOT_FOUND as for a missing one */
	char fwd_other[600], drop_other[600], ver_other[600];
	ASSERT_CODE(tt_weight_check(b, &wa, &st), FOS_CODE_NOT_FOUND, st);
	snprintf(fwd_other, sizeof fwd_other, "%s", st.message);
	ASSERT_CODE(fos_drop_weight(b, "shared/name", &st), FOS_CODE_NOT_FOUND, st);
	snprintf(drop_other, sizeof drop_other, "%s", st.message);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, 128, 128, wa.x), y = fos_tensor_out();
	fos_forward_opts fo = {7, 0, 0, 0, 0}; /* a version: still NOT_FOUND, not a version mismatch */
	ASSERT_CODE(fos_forward(b, "shared/name", &x, NULL, &fo, &y, NULL, &st), FOS_CODE_NOT_FOUND, st);
	snprintf(ver_other, sizeof ver_other, "%s", st.message);
	fos_weight_info *list;
	size_t n;
	ASSERT_OK(fos_list_weights(b, &list, &n, &st), st);
	assert_int_equal(n, 0);
	free(list);
	ASSERT_OK(fos_list_weights(a, &list, &n, &st), st);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].name, "shared/name");
	free(list);

	/* the same name for bob is bob's own weight; alice's is untouched */
	ASSERT_OK(tt_weight_put(b, &wb, 0, &st), st);
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	ASSERT_OK(tt_weight_check(b, &wb, &st), st);
	/* bob drops his; alice's stays */
	ASSERT_OK(fos_drop_weight(b, "shared/name", &st), st);
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);

	/* once alice's is truly gone, bob's messages are the same as before, byte for byte */
	ASSERT_OK(fos_drop_weight(a, "shared/name", &st), st);
	ASSERT_CODE(tt_weight_check(b, &wa, &st), FOS_CODE_NOT_FOUND, st);
	assert_string_equal(st.message, fwd_other);
	ASSERT_CODE(fos_drop_weight(b, "shared/name", &st), FOS_CODE_NOT_FOUND, st);
	assert_string_equal(st.message, drop_other);
	ASSERT_CODE(fos_forward(b, "shared/name", &x, NULL, &fo, &y, NULL, &st), FOS_CODE_NOT_FOUND, st);
	assert_string_equal(st.message, ver_other);

	/* contexts: alice's context id is unknown to bob, with the message of an id that never was */
	ASSERT_OK(tt_weight_put(a, &wa, 0, &st), st);
	fos_forward_opts so = {0, 0, 0, 1, 0};
	fos_context ctx, stolen, never;
	ASSERT_OK(fos_forward(a, "shared/name", &x, NULL, &so, &y, &ctx, &st), st);
	assert_memory_equal(y.data, wa.y, (size_t)(128 * 256) * 2);
	free(y.data);
	stolen = ctx;
	never = ctx;
	never.id = ctx.id ^ 0x5a5a5a5a00000001ull;
	uint16_t *dy = malloc(128 * 256 * 2);
	tsrv_fill_bf16(dy, 128 * 256, 77, 0.5f);
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, 128, 256, dy), dx = fos_tensor_out(), dw = fos_tensor_out();
	char m_stolen[600], m_never[600];
	ASSERT_CODE(fos_backward(b, &stolen, &tdy, NULL, &dx, &dw, NULL, &st), FOS_CODE_NOT_FOUND, st);
	snprintf(m_stolen, sizeof m_stolen, "%s", st.message);
	ASSERT_CODE(fos_backward(b, &never, &tdy, NULL, &dx, &dw, NULL, &st), FOS_CODE_NOT_FOUND, st);
	snprintf(m_never, sizeof m_never, "%s", st.message);
	mask_ids(m_stolen);
	mask_ids(m_never);
	assert_string_equal(m_stolen, m_never);
	stolen = ctx;
	ASSERT_CODE(fos_release(b, &stolen, &st), FOS_CODE_NOT_FOUND, st);
	/* alice's backward still works and equals the in-process reference */
	uint16_t *rdx = malloc(128 * 128 * 2), *rdw = malloc(256 * 128 * 2), *ry = malloc(128 * 256 * 2);
	fos_linear_opts lo = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(wa.x, wa.w, NULL, dy, 128, 256, 128, &lo, ry, rdx, rdw, NULL), 0);
	ASSERT_OK(fos_backward(a, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
	assert_memory_equal(dx.data, rdx, 128 * 128 * 2);
	assert_memory_equal(dw.data, rdw, 256 * 128 * 2);
	free(dx.data), free(dw.data);
	/* consumed now; bob still hears "does not exist", not how it ended */
	stolen.id = never.id ^ 0x5a5a5a5a00000001ull;
	ASSERT_CODE(fos_release(b, &stolen, &st), FOS_CODE_NOT_FOUND, st);
	snprintf(m_stolen, sizeof m_stolen, "%s", st.message);
	mask_ids(m_stolen);
	assert_string_equal(m_stolen, m_never);
	assert_null(strstr(st.message, "consumed"));

	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	free(dy), free(rdx), free(rdw), free(ry);
	fos_close(a);
	fos_close(b);
	tt_weight_free(&wa);
	tt_weight_free(&wb);
	stop_env(&e);
}

/* A PutWeight through a bare socket with a given token, client id and request id. */
static int raw_put(const char *url, const char *token, uint64_t client_id, uint64_t id, const char *name,
		   const uint16_t *w, char *msg, size_t msgsz)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	Fos__Tensor tw;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	rq.id = id;
	rq.client_id = client_id;
	rq.auth_token = (ProtobufCBinaryData){strlen(token), (uint8_t *)token};
	pw.name = (char *)name;
	pw.version = 1;
	pw.w = &tw;
	tt_tensor t = {&tw, FOS__DTYPE__DTYPE_BF16, 2, {128, 128}, w};
	return tt_raw_call(url, &rq, &t, 1, 20000, msg, msgsz, NULL);
}

static void test_duplicates_per_tenant(void **state)
{
	(void)state;
	env e;
	start_tenants(&e, NULL);
	uint16_t *w = malloc(128 * 128 * 2);
	tsrv_fill_bf16(w, 128 * 128, 5, 0.05f);
	char msg[600];
	/* the same (client id, request id) from two tenants: two requests, both run */
	assert_int_equal(raw_put(e.s.url, ALICE, 42, 7, "d", w, msg, sizeof msg), 0);
	assert_int_equal(raw_put(e.s.url, BOB, 42, 7, "d", w, msg, sizeof msg), 0);
	/* within a tenant it is a duplicate */
	assert_int_equal(raw_put(e.s.url, ALICE, 42, 7, "d2", w, msg, sizeof msg), FOS_CODE_ABORTED);
	fos_client *b = tt_connect(e.s.url, BOB);
	fos_weight_info *list;
	size_t n;
	fos_status st;
	ASSERT_OK(fos_list_weights(b, &list, &n, &st), st);
	assert_int_equal(n, 1);
	free(list);
	fos_close(b);
	free(w);
	stop_env(&e);
}

static void test_bad_tokens(void **state)
{
	(void)state;
	env e;
	start_tenants(&e, NULL);
	tt_weight wa;
	assert_int_equal(tt_weight_make(&wa, "keep", 256, 128, 128, 3), 0);
	fos_client *a = tt_connect(e.s.url, ALICE);
	fos_status st;
	ASSERT_OK(tt_weight_put(a, &wa, 0, &st), st);

	/* no token: Health answers (probes), nothing else does */
	fos_client *anon = tt_connect(e.s.url, NULL);
	fos_health_info h;
	ASSERT_OK(fos_health(anon, &h, &st), st);
	fos_stats_info si;
	ASSERT_CODE(fos_stats(anon, &si, &st), FOS_CODE_UNAUTHENTICATED, st);
	fos_weight_info *list;
	size_t n;
	ASSERT_CODE(fos_list_weights(anon, &list, &n, &st), FOS_CODE_UNAUTHENTICATED, st);
	ASSERT_CODE(tt_weight_check(anon, &wa, &st), FOS_CODE_UNAUTHENTICATED, st);
	ASSERT_CODE(tt_weight_put(anon, &wa, 0, &st), FOS_CODE_UNAUTHENTICATED, st);
	ASSERT_CODE(fos_drop_weight(anon, "keep", &st), FOS_CODE_UNAUTHENTICATED, st);
	fos_close(anon);

	/* wrong tokens fail at connect (its Health carries the token) and in any request */
	char long_tok[6000];
	memset(long_tok, 'a', sizeof long_tok - 1);
	long_tok[sizeof long_tok - 1] = 0;
	const char *bad[] = {ALICE "x",     "x" ALICE,	"alice-secret-0123456789abcde", "ALICE-SECRET-0123456789ABCDEF",
			     "alice",	    "a",	long_tok,			"alice " ALICE,
			     BOB ALICE, ""};
	char first[600] = "";
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fos_client *c = NULL;
		int rc = fos_connect(e.s.url, bad[i], 10000, &c, &st);
		if (!bad[i][0]) { /* empty token = none: Health is fine */
			ASSERT_OK(rc, st);
			ASSERT_CODE(tt_weight_check(c, &wa, &st), FOS_CODE_UNAUTHENTICATED, st);
			fos_close(c);
			continue;
		}
		ASSERT_CODE(rc, FOS_CODE_UNAUTHENTICATED, st);
		assert_null(c);
		if (!first[0])
			snprintf(first, sizeof first, "%s", st.message);
		assert_string_equal(st.message, first); /* one message whatever was wrong */
		assert_null(strstr(st.message, "alice"));
		/* and through a bare socket, a put with that token */
		char msg[600];
		assert_int_equal(raw_put(e.s.url, bad[i], 9, 1, "keep", wa.w, msg, sizeof msg), FOS_CODE_UNAUTHENTICATED);
	}
	/* the refusals are counted in the log, rate-limited, without any token */
	assert_true(tsrv_log_contains(&e.s, "auth: "));
	assert_false(tt_file_contains(e.s.log, long_tok + 5900));
	ASSERT_OK(tt_weight_check(a, &wa, &st), st);
	fos_close(a);
	tt_weight_free(&wa);
	stop_env(&e);
}

/* fosd must refuse to start on this tokens file text: exit 2, a message with needle, no secret. */
static void expect_bad_tokens(const char *dir, const char *text, const char *needle, const char *secret)
{
	char tokens[320], log[320];
	snprintf(tokens, sizeof tokens, "%s/bad-tokens", dir);
	snprintf(log, sizeof log, "%s/bad.log", dir);
	assert_int_equal(tt_write_file(tokens, text, 0600), 0);
	char url[320];
	snprintf(url, sizeof url, "ipc://%s/bad.sock", dir);
	const char *args[] = {"--backend", "cpu", "--listen", url, "--tokens", tokens, NULL};
	int rc = tt_fosd_run(args, log, 10000);
	if (rc != 2 || !tt_file_contains(log, needle)) {
		FILE *f = fopen(log, "r");
		char line[1024];
		while (f && fgets(line, sizeof line, f))
			fputs(line, stderr);
		if (f)
			fclose(f);
		fail_msg("tokens file %s: exit %d, expected 2 with '%s'", text, rc, needle);
	}
	if (secret)
		assert_false(tt_file_contains(log, secret));
}

static void test_tokens_file(void **state)
{
	(void)state;
	char dir[256];
	assert_int_equal(tt_tmpdir(dir), 0);
	expect_bad_tokens(dir, "alice " ALICE "\nalice " BOB "\n", ":2: tenant 'alice' is listed twice", BOB);
	expect_bad_tokens(dir, "alice " ALICE "\nbob " ALICE "\n", ":2: tenant 'bob' has the same secret as", ALICE);
	expect_bad_tokens(dir, "alice short-secret\n", ":1: the secret of tenant 'alice' is 12 bytes", "short-secret");
	expect_bad_tokens(dir, "al/ice " ALICE "\n", ":1: the tenant name", ALICE);
	expect_bad_tokens(dir, "alice\n", "has no secret", NULL);
	expect_bad_tokens(dir, "# only comments\n\n", "no tenants", NULL);
	expect_bad_tokens(dir, "alice " ALICE " quota=5\n", "unknown option 'quota'", ALICE);
	expect_bad_tokens(dir, "alice " ALICE " " BOB "\n", "unexpected field", BOB);
	expect_bad_tokens(dir, "alice " ALICE " cache=lots\n", "cache=lots is not a size", ALICE);
	/* a missing file */
	char log[320], url[320];
	snprintf(log, sizeof log, "%s/missing.log", dir);
	snprintf(url, sizeof url, "ipc://%s/m.sock", dir);
	const char *args[] = {"--backend", "cpu", "--listen", url, "--tokens", "/nonexistent/tokens", NULL};
	assert_int_equal(tt_fosd_run(args, log, 10000), 2);
	assert_true(tt_file_contains(log, "/nonexistent/tokens"));
	tt_tmpdir_remove(dir);

	/* a tokens file others may read is warned about; one that only fosd's user reads is not */
	env e;
	start_tenants(&e, NULL);
	assert_false(tsrv_log_contains(&e.s, "may be read"));
	assert_true(tsrv_log_contains(&e.s, "tenants: 2 from"));
	stop_env(&e);
	assert_int_equal(tt_tmpdir(e.dir), 0);
	snprintf(e.tokens, sizeof e.tokens, "%s/tokens", e.dir);
	assert_int_equal(tt_write_file(e.tokens, "alice " ALICE "\n", 0644), 0);
	const char *a2[] = {"--tokens", e.tokens, NULL};
	assert_int_equal(tsrv_start(&e.s, a2), 0);
	assert_true(tsrv_log_contains(&e.s, "may be read or written by group or others"));
	stop_env(&e);
}

static void test_anonymous_and_listeners(void **state)
{
	(void)state;
	/* no tokens: one anonymous tenant, said at start; tokens sent anyway are ignored */
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	assert_true(tsrv_log_contains(&s, "one anonymous tenant"));
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "anon", 128, 128, 128, 4), 0);
	fos_client *c1 = tt_connect(s.url, NULL), *c2 = tt_connect(s.url, "any-token-at-all-0000");
	fos_status st;
	ASSERT_OK(tt_weight_put(c1, &w, 0, &st), st);
	ASSERT_OK(tt_weight_check(c2, &w, &st), st); /* the same (anonymous) namespace */
	fos_close(c1);
	fos_close(c2);
	/* the ipc socket is 0600 by default */
	char sock[400];
	snprintf(sock, sizeof sock, "%s/fosd.sock", s.dir);
	struct stat sb;
	assert_int_equal(stat(sock, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);

	/* --ipc-mode */
	const char *m[] = {"--ipc-mode", "0660", NULL};
	assert_int_equal(tsrv_start(&s, m), 0);
	snprintf(sock, sizeof sock, "%s/fosd.sock", s.dir);
	assert_int_equal(stat(sock, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0660);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);

	/* a tcp or tls+tcp listener without tokens needs --allow-insecure-tcp */
	char dir[256], log[320], url[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(log, sizeof log, "%s/fosd.log", dir);
	snprintf(url, sizeof url, "ipc://%s/x.sock", dir);
	const char *t1[] = {"--backend", "cpu", "--listen", url, "--listen", "tcp://127.0.0.1:0", NULL};
	assert_int_equal(tt_fosd_run(t1, log, 10000), 2);
	assert_true(tt_file_contains(log, "--allow-insecure-tcp"));
	const char *t2[] = {"--backend",    "cpu",	 "--listen", url, "--listen", "tls+tcp://127.0.0.1:0",
			    "--tls-cert", "/nonexistent", "--tls-key", "/nonexistent", NULL};
	assert_int_equal(tt_fosd_run(t2, log, 10000), 2);
	assert_true(tt_file_contains(log, "--allow-insecure-tcp"));
	const char *t3[] = {"--backend", "cpu", "--listen", "ws://127.0.0.1:0", "--allow-insecure-tcp", NULL};
	assert_int_equal(tt_fosd_run(t3, log, 10000), 2);
	assert_true(tt_file_contains(log, "only ipc://, tcp:// and tls+tcp://"));
	tt_tmpdir_remove(dir);
	const char *t4[] = {"--listen", "tcp://127.0.0.1:0", "--allow-insecure-tcp", NULL};
	assert_int_equal(tsrv_start(&s, t4), 0);
	assert_true(tsrv_log_contains(&s, "anyone who can reach"));
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
	/* with tokens, plain tcp starts but is warned about */
	env e;
	const char *t5[] = {"--listen", "tcp://127.0.0.1:0", NULL};
	start_tenants(&e, t5);
	assert_true(tsrv_log_contains(&e.s, "tokens travel in clear"));
	stop_env(&e);
	tt_weight_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isolation),
		cmocka_unit_test(test_duplicates_per_tenant),
		cmocka_unit_test(test_bad_tokens),
		cmocka_unit_test(test_tokens_file),
		cmocka_unit_test(test_anonymous_and_listeners),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
