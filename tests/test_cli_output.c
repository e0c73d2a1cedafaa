/* test_cli_output.c: what `fos` prints on success, the same way for every command: one summary
 * line on stdout (quantize, dequantize and linear, here and through fosd, forward and backward),
 * nothing with --quiet (the files still written), one JSON object with --json (parsed with
 * cli_json_parse, its "outputs" naming the files written with their shapes); global options
 * accepted after the command too (--server, --timeout, --json, --quiet), a missing value there a
 * usage error; the weight commands (put-weight, also --safetensors, drop-weight, list-weights) and
 * `fos load` under the global --json and --quiet, before or after the command (a JSON object, or
 * nothing on success; errors still on stderr); `fos --version`; the context file's trailing
 * newline; and the error for an ipc
 * socket this user may not use, which says "permission denied" and names the group to join
 * instead of suggesting fosd is not running. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>

#include "cli.h"
#include "fos_version.h"
#include "support_server.h"
#include "test_cli_harness.h"
#include "support_json.h"

static tsrv g_srv;

static int out_setup(void **state)
{
	if (th_setup(state))
		return -1;
	if (tsrv_start(&g_srv, NULL))
		return -1;
	unsetenv("FOS_SERVER"); /* every command names its server (or goes to the default) */
	uint16_t x[32 * 64], w[48 * 64], dy[32 * 48];
	tsrv_fill_bf16(x, 32 * 64, 1, 1.0f);
	tsrv_fill_bf16(w, 48 * 64, 2, 0.05f);
	tsrv_fill_bf16(dy, 32 * 48, 3, 0.01f);
	th_save(th_p("x.npy"), NPY_U2, 2, 32, 64, x);
	th_save(th_p("w.npy"), NPY_U2, 2, 48, 64, w);
	th_save(th_p("dy.npy"), NPY_U2, 2, 32, 48, dy);
	return 0;
}

static int out_teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

/* "--server=URL" of the test's fosd */
static const char *srv_flag(void)
{
	static char f[400];
	snprintf(f, sizeof f, "--server=%s", g_srv.url);
	return f;
}

/* Exit 0, nothing on stderr, and stdout exactly one line containing each needle (NULL-ended). */
static void expect_one_line(const th_result *r, ...)
{
	th_expect_ok(r);
	size_t n = strlen(r->out);
	const char *nl = strchr(r->out, '\n');
	if (n < 2 || !nl || nl != r->out + n - 1)
		fail_msg("stdout is not one line: [%s]", r->out);
	va_list ap;
	va_start(ap, r);
	for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
		if (!strstr(r->out, s))
			fail_msg("summary [%s] does not mention '%s'", r->out, s);
	va_end(ap);
}

static void expect_silent(const th_result *r)
{
	th_expect_ok(r);
	if (r->out[0])
		fail_msg("--quiet printed: [%s]", r->out);
}

/* A member's string / number / bool (fails when missing or of another type). */
static const char *jstr(const cli_jv *o, const char *key)
{
	const cli_jv *v = cli_json_get(o, key);
	if (!v || v->type != CLI_JSTR)
		fail_msg("no string \"%s\"", key);
	return v->str;
}

static int64_t jint(const cli_jv *o, const char *key)
{
	const cli_jv *v = cli_json_get(o, key);
	if (!v || v->type != CLI_JNUM)
		fail_msg("no number \"%s\"", key);
	return (int64_t)v->num;
}

static int jbool(const cli_jv *o, const char *key)
{
	const cli_jv *v = cli_json_get(o, key);
	if (!v || v->type != CLI_JBOOL)
		fail_msg("no bool \"%s\"", key);
	return v->b;
}

/* stdout is one JSON object (into *j; cli_json_free by the caller) with "command" cmd. */
static void expect_json(const th_result *r, const char *cmd, cli_jv *j)
{
	th_expect_ok(r);
	fos_err e = {0, ""};
	if (cli_json_parse(r->out, strlen(r->out), j, &e))
		fail_msg("stdout is not JSON (%s): [%s]", e.msg, r->out);
	if (j->type != CLI_JOBJ)
		fail_msg("stdout is not a JSON object: [%s]", r->out);
	if (cmd && strcmp(jstr(j, "command"), cmd))
		fail_msg("\"command\" is %s, expected %s", jstr(j, "command"), cmd);
}

/* outputs.NAME is {"path": path, "dtype": dtype, "shape": [d0, d1 (when ndim 2)]}, and the file is there. */
static void expect_output(const cli_jv *j, const char *name, const char *path, const char *dtype, int ndim, int64_t d0,
			  int64_t d1)
{
	const cli_jv *outs = cli_json_get(j, "outputs"), *o = outs ? cli_json_get(outs, name) : NULL;
	if (!o)
		fail_msg("no outputs.%s", name);
	assert_string_equal(jstr(o, "path"), path);
	assert_string_equal(jstr(o, "dtype"), dtype);
	const cli_jv *sh = cli_json_get(o, "shape");
	assert_non_null(sh);
	assert_int_equal(sh->type, CLI_JARR);
	assert_int_equal(sh->n, ndim);
	if (ndim > 0)
		assert_int_equal((int64_t)sh->items[0].num, d0);
	if (ndim > 1)
		assert_int_equal((int64_t)sh->items[1].num, d1);
	assert_true(th_exists(path));
}

static void test_quantize_dequantize(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "quantize", th_p("x.npy"), "--out", th_p("q"), srv_flag(), NULL);
	expect_one_line(&r, "quantized", th_p("q"), "(32, 64)", "4over6 1x16", "bound 256", g_srv.url, NULL);
	th_run(&r, "quantize", th_p("x.npy"), "--out", th_p("ql"), "--local", "--backend", "cpu", NULL);
	expect_one_line(&r, "quantized", "here (--local, backend cpu)", NULL);
	th_same_file(th_p("q/codes.npy"), th_p("ql/codes.npy"));

	th_run(&r, "--quiet", "quantize", th_p("x.npy"), "--out", th_p("qq"), srv_flag(), NULL);
	expect_silent(&r);
	th_same_file(th_p("q/codes.npy"), th_p("qq/codes.npy"));

	th_run(&r, "quantize", th_p("x.npy"), "--out", th_p("qj"), "--row-scaled", srv_flag(), "--json", NULL);
	cli_jv j;
	expect_json(&r, "quantize", &j);
	assert_string_equal(jstr(&j, "where"), "fosd");
	assert_string_equal(jstr(&j, "server"), g_srv.url);
	assert_true(jbool(&j, "row_scaled"));
	expect_output(&j, "codes", th_p("qj/codes.npy"), "uint8", 2, 32, 32);
	expect_output(&j, "scales", th_p("qj/scales.npy"), "uint8", 2, 32, 4);
	expect_output(&j, "amax", th_p("qj/amax.npy"), "float32", 1, 32, 0);
	cli_json_free(&j);

	const char *codes = th_p("q/codes.npy"), *scales = th_p("q/scales.npy"), *amax = th_p("q/amax.npy");
	th_run(&r, "dequantize", "--codes", codes, "--scales", scales, "--amax", amax, "--out", th_p("d.npy"),
	       srv_flag(), NULL);
	expect_one_line(&r, "dequantized", th_p("d.npy"), "(32, 64) bf16", "per-tensor", NULL);
	th_run(&r, "dequantize", "--codes", codes, "--scales", scales, "--amax", amax, "--out", th_p("dq.npy"),
	       "--dtype", "f32", "--quiet", srv_flag(), NULL);
	expect_silent(&r);
	assert_true(th_exists(th_p("dq.npy")));
	th_run(&r, "--json", "dequantize", "--codes", codes, "--scales", scales, "--amax", amax, "--out",
	       th_p("dj.npy"), "--local", NULL);
	expect_json(&r, "dequantize", &j);
	assert_string_equal(jstr(&j, "where"), "local");
	expect_output(&j, "out", th_p("dj.npy"), "bf16", 2, 32, 64);
	cli_json_free(&j);
	th_same_file(th_p("d.npy"), th_p("dj.npy"));
}

static void test_linear_forward_backward(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--dy", th_p("dy.npy"), "--out", th_p("l"), srv_flag(), NULL);
	expect_one_line(&r, "y.npy (32, 48)", "dx.npy (32, 64)", "dw.npy (48, 64)", g_srv.url, NULL);
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--out", th_p("lq"), "--quiet", srv_flag(), NULL);
	expect_silent(&r);
	th_same_file(th_p("l/y.npy"), th_p("lq/y.npy"));
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--dy", th_p("dy.npy"), "--out", th_p("lj"), "--json",
	       "--local", NULL);
	cli_jv j;
	expect_json(&r, "linear", &j);
	assert_int_equal(jint(&j, "m"), 32);
	assert_int_equal(jint(&j, "n"), 48);
	assert_int_equal(jint(&j, "k"), 64);
	expect_output(&j, "y", th_p("lj/y.npy"), "bf16", 2, 32, 48);
	expect_output(&j, "dx", th_p("lj/dx.npy"), "bf16", 2, 32, 64);
	expect_output(&j, "dw", th_p("lj/dw.npy"), "bf16", 2, 48, 64);
	assert_null(cli_json_get(cli_json_get(&j, "outputs"), "db"));
	cli_json_free(&j);

	th_run(&r, "put-weight", "W", th_p("w.npy"), srv_flag(), NULL);
	th_expect_ok(&r);
	th_run(&r, "forward", "W", th_p("x.npy"), "--out", th_p("y.npy"), "--context-out", th_p("ctx"), srv_flag(),
	       "--json", NULL);
	expect_json(&r, "forward", &j);
	expect_output(&j, "y", th_p("y.npy"), "bf16", 2, 32, 48);
	const cli_jv *ctx = cli_json_get(&j, "context");
	assert_non_null(ctx);
	assert_string_equal(jstr(ctx, "file"), th_p("ctx"));
	assert_int_equal(strlen(jstr(ctx, "id")), 16);
	cli_json_free(&j);
	char text[8192];
	th_slurp(th_p("ctx"), text, sizeof text); /* the context file ends with a newline */
	assert_true(strlen(text) > 2 && text[strlen(text) - 1] == '\n' && text[strlen(text) - 2] == '}');
	th_run(&r, "--quiet", "backward", th_p("ctx"), th_p("dy.npy"), "--out", th_p("b"), "--keep-context", srv_flag(),
	       NULL);
	expect_silent(&r);
	th_run(&r, "backward", th_p("ctx"), th_p("dy.npy"), "--out", th_p("bj"), srv_flag(), "--json", NULL);
	expect_json(&r, "backward", &j);
	expect_output(&j, "dx", th_p("bj/dx.npy"), "bf16", 2, 32, 64);
	expect_output(&j, "dw", th_p("bj/dw.npy"), "bf16", 2, 48, 64);
	cli_json_free(&j);
	th_same_file(th_p("b/dx.npy"), th_p("bj/dx.npy"));
	th_run(&r, "forward", "W", th_p("x.npy"), "--out", th_p("y2.npy"), "--server", g_srv.url, NULL);
	expect_one_line(&r, th_p("y2.npy"), "(32, 48) bf16", NULL);
}

static void test_global_flags_after_command(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "health", "--server", g_srv.url, NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "serving"));
	th_run(&r, "health", "--server", g_srv.url, "--timeout", "5s", "--json", NULL);
	cli_jv j;
	expect_json(&r, NULL, &j);
	assert_string_equal(jstr(&j, "status"), "serving");
	cli_json_free(&j);
	th_run(&r, "stats", "--quiet", "--server=", NULL);
	th_expect_fail(&r, 2, "--server");
	th_run(&r, "health", "--server", NULL);
	th_expect_fail(&r, 2, "--server needs a value");
	th_run(&r, "health", "--timeout", "soon", "--server", g_srv.url, NULL);
	th_expect_fail(&r, 2, "--timeout");
	th_run(&r, "health", "--bogus", NULL);
	th_expect_fail(&r, 2, "unknown option '--bogus'");
	/* a command's own flag of the same name wins: forward --version V is the weight's version */
	th_run(&r, "forward", "W", th_p("x.npy"), "--out", th_p("y3.npy"), "--version", "999", srv_flag(), NULL);
	th_expect_fail(&r, 1, "FAILED_PRECONDITION");
	th_run(&r, "--quiet", "health", srv_flag(), NULL);
	expect_silent(&r);
	th_run(&r, "stats", srv_flag(), "--quiet", NULL);
	expect_silent(&r);
	/* every command's help says global options may follow it */
	th_run(&r, "linear", "--help", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "may come before or after the command"));
}

/* weights[] of a list-weights --json object: the entry named name, or NULL. */
static const cli_jv *find_weight(const cli_jv *j, const char *name)
{
	const cli_jv *ws = cli_json_get(j, "weights");
	if (!ws || ws->type != CLI_JARR)
		fail_msg("no array \"weights\"");
	for (size_t i = 0; i < ws->n; i++)
		if (!strcmp(jstr(&ws->items[i], "name"), name))
			return &ws->items[i];
	return NULL;
}

/* A .safetensors file with one BF16 (16, 32) tensor named name (8-byte header length, the JSON
 * header, the data). */
static void save_safetensors(const char *path, const char *name)
{
	char hdr[256];
	int h = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"BF16\",\"shape\":[16,32],\"data_offsets\":[0,1024]}}",
			 name);
	unsigned char len[8] = {0};
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)h >> (8 * i));
	uint16_t w[16 * 32];
	tsrv_fill_bf16(w, 16 * 32, 4, 0.1f);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(len, 1, 8, f), 8);
	assert_int_equal(fwrite(hdr, 1, (size_t)h, f), (size_t)h);
	assert_int_equal(fwrite(w, 1, sizeof w, f), sizeof w);
	assert_int_equal(fclose(f), 0);
}

static void test_weights_json_quiet(void **state)
{
	(void)state;
	th_result r;
	cli_jv j;
	/* put-weight: --json before the command is the weight's object (the same as put-weight --json) */
	th_run(&r, "--json", "put-weight", "wq.a", th_p("w.npy"), srv_flag(), NULL);
	expect_json(&r, NULL, &j);
	assert_string_equal(jstr(&j, "name"), "wq.a");
	assert_int_equal(jint(&j, "version"), 1);
	const cli_jv *sh = cli_json_get(&j, "shape");
	assert_true(sh && sh->n == 2 && sh->items[0].num == 48 && sh->items[1].num == 64);
	cli_json_free(&j);
	th_run(&r, "put-weight", "wq.a", th_p("w.npy"), "--version", "2", srv_flag(), "--json", NULL);
	expect_json(&r, NULL, &j);
	assert_int_equal(jint(&j, "version"), 2);
	cli_json_free(&j);
	th_run(&r, "put-weight", "wq.a", th_p("w.npy"), "--version", "3", "--json", srv_flag(), NULL);
	expect_json(&r, NULL, &j);
	assert_int_equal(jint(&j, "version"), 3);
	cli_json_free(&j);
	th_run(&r, "put-weight", "wq.b", th_p("w.npy"), srv_flag(), NULL);
	expect_one_line(&r, "cached wq.b version 1: (48, 64), 16x16 blocks, mae, bound 256", NULL);
	th_run(&r, "--quiet", "put-weight", "wq.b", th_p("w.npy"), "--version", "2", srv_flag(), NULL);
	expect_silent(&r);
	th_run(&r, "put-weight", "wq.b", th_p("w.npy"), "--version", "3", srv_flag(), "--quiet", "--json", NULL);
	expect_silent(&r); /* --quiet wins */
	th_run(&r, "--quiet", "put-weight", "wq.b", th_p("w.npy"), "--version", "3", srv_flag(), NULL);
	th_expect_fail(&r, 1, "ALREADY_EXISTS"); /* errors still show */

	/* list-weights: --json either side, nothing with --quiet */
	th_run(&r, "list-weights", srv_flag(), "--quiet", NULL);
	expect_silent(&r);
	th_run(&r, "--json", "list-weights", srv_flag(), NULL);
	expect_json(&r, NULL, &j);
	assert_string_equal(jstr(&j, "server"), g_srv.url);
	const cli_jv *a = find_weight(&j, "wq.a"), *b = find_weight(&j, "wq.b");
	assert_true(a && b);
	assert_int_equal(jint(a, "version"), 3); /* the --quiet puts happened */
	assert_int_equal(jint(b, "version"), 3);
	cli_json_free(&j);
	th_run(&r, "list-weights", srv_flag(), NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "wq.b"));

	/* drop-weight: a summary line, a JSON object naming the weight, or nothing */
	th_run(&r, "drop-weight", "wq.a", srv_flag(), "--json", NULL);
	expect_json(&r, "drop-weight", &j);
	assert_string_equal(jstr(&j, "where"), "fosd");
	assert_string_equal(jstr(&j, "server"), g_srv.url);
	assert_string_equal(jstr(&j, "weight"), "wq.a");
	cli_json_free(&j);
	th_run(&r, "--quiet", "drop-weight", "wq.b", srv_flag(), NULL);
	expect_silent(&r);
	th_run(&r, "--quiet", "drop-weight", "wq.b", srv_flag(), NULL);
	th_expect_fail(&r, 1, "NOT_FOUND");
	th_run(&r, "put-weight", "wq.c", th_p("w.npy"), srv_flag(), "--quiet", NULL);
	expect_silent(&r);
	th_run(&r, "drop-weight", "wq.c", srv_flag(), NULL);
	expect_one_line(&r, "dropped wq.c", g_srv.url, NULL);
	th_run(&r, "--json", "list-weights", srv_flag(), NULL);
	expect_json(&r, NULL, &j);
	assert_null(find_weight(&j, "wq.a"));
	assert_null(find_weight(&j, "wq.b"));
	assert_null(find_weight(&j, "wq.c"));
	cli_json_free(&j);

	/* put-weight --safetensors */
	save_safetensors(th_p("one.safetensors"), "wq.st");
	th_run(&r, "--json", "put-weight", "--safetensors", th_p("one.safetensors"), srv_flag(), NULL);
	expect_json(&r, NULL, &j);
	assert_string_equal(jstr(&j, "safetensors"), th_p("one.safetensors"));
	const cli_jv *ws = cli_json_get(&j, "weights");
	assert_true(ws && ws->n == 1);
	assert_string_equal(jstr(&ws->items[0], "name"), "wq.st");
	assert_int_equal(jint(&j, "skipped"), 0);
	cli_json_free(&j);
	th_run(&r, "put-weight", "--safetensors", th_p("one.safetensors"), "--version", "2", srv_flag(), "--quiet", NULL);
	expect_silent(&r);
	th_run(&r, "--quiet", "drop-weight", "wq.st", srv_flag(), NULL);
	expect_silent(&r);
}

static void test_load_json_quiet(void **state)
{
	(void)state;
	th_result r;
	cli_jv j;
	/* --json before the command: the report as JSON (as load --json) */
	th_run(&r, "--json", "load", "--op", "quantize", "--m", "16", "--k", "64", "--requests", "5", "--warmup", "0",
	       srv_flag(), NULL);
	expect_json(&r, NULL, &j);
	assert_string_equal(jstr(&j, "op"), "quantize");
	const cli_jv *mv = cli_json_path(&j, "requests.measured"), *ok = cli_json_path(&j, "requests.ok");
	assert_true(mv && ok && mv->num == 5 && ok->num == 5);
	cli_json_free(&j);
	/* --quiet: no report; with --json too */
	th_run(&r, "load", "--op", "forward", "--m", "16", "--n", "32", "--k", "64", "--requests", "5", "--warmup", "0",
	       srv_flag(), "--quiet", NULL);
	expect_silent(&r);
	th_run(&r, "--quiet", "load", "--op", "quantize", "--m", "16", "--k", "64", "--requests", "5", "--warmup", "0",
	       "--json", srv_flag(), NULL);
	expect_silent(&r);
	/* the forward's weight was dropped at the end all the same */
	th_run(&r, "list-weights", srv_flag(), NULL);
	th_expect_ok(&r);
	assert_null(strstr(r.out, "fos-load-"));
}

static void test_version(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "--version", NULL);
	th_expect_ok(&r);
	assert_string_equal(r.out, "fos " FOS_VERSION "\n");
}

/* An ipc socket this user may not use: as root the client drops to nobody (root passes every
 * permission check), else the socket is made read-only for its owner. */
static void test_permission_denied(void **state)
{
	(void)state;
	tsrv s;
	memset(&s, 0, sizeof s);
	const char *args[] = {"--ipc-mode", geteuid() == 0 ? "0660" : "0400", NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	chmod(s.dir, 0755); /* the directory lets anybody reach the socket: its mode decides */
	char op[600], ep[600];
	snprintf(op, sizeof op, "%s/.stdout", th_dir());
	snprintf(ep, sizeof ep, "%s/.stderr", th_dir());
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0666), e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
			_exit(125);
		execl(th_fos(), th_fos(), "health", "--server", s.url, (char *)NULL);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	th_result r;
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	th_slurp(op, r.out, sizeof r.out);
	th_slurp(ep, r.err, sizeof r.err);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
	th_expect_fail(&r, 1, "permission denied on the socket");
	if (strstr(r.err, "is it running"))
		fail_msg("the permission error still suggests fosd is not running: %s", r.err);
	assert_non_null(strstr(r.err, geteuid() == 0 ? "join it" : "--ipc-mode 0660"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quantize_dequantize),
		cmocka_unit_test(test_linear_forward_backward),
		cmocka_unit_test(test_global_flags_after_command),
		cmocka_unit_test(test_weights_json_quiet),
		cmocka_unit_test(test_load_json_quiet),
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_permission_denied),
	};
	return cmocka_run_group_tests(tests, out_setup, out_teardown);
}
