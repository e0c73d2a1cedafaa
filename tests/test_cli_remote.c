/* test_cli_remote.c: `fos` against a real fosd (CPU backend, or $FOS_TEST_BACKEND; private ipc
 * socket; build/fos as a subprocess): quantize, dequantize and linear through the daemon write the same bytes as --local
 * under every option; health, stats, put-weight, list-weights, drop-weight, forward and backward
 * (context file, --keep-context, --recompute) with their text and --json outputs; forward/backward
 * results bit-identical to `fos linear --local`; and bad input that only the daemon can catch
 * (unknown weight, wrong shapes, versions, consumed contexts): exit 1 with one "fos: " line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli.h"
#include "support_server.h"
#include "test_cli_harness.h"
#include "support_json.h"

static tsrv g_srv;

static int remote_setup(void **state)
{
	if (th_setup(state))
		return -1;
	const char *args[] = {"--context-ttl", "30s", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	/* inputs: bf16 X (128, 128) and (64, 128), float32 X (32, 64), W (256, 128), bias, dY */
	size_t nx = 128 * 128, nw = 256 * 128, ny = 128 * 256;
	uint16_t *x = malloc(nx * 2), *w = malloc(nw * 2), *dy = malloc(ny * 2), b[256];
	float *xf = malloc(32 * 64 * 4), amax = 3.5f, amax_r[64];
	if (!x || !w || !dy || !xf)
		return -1;
	tsrv_fill_bf16(x, nx, 1, 1.0f);
	tsrv_fill_bf16(w, nw, 2, 0.05f);
	tsrv_fill_bf16(dy, ny, 3, 0.01f);
	tsrv_fill_bf16(b, 256, 4, 0.5f);
	uint64_t s = 77;
	for (int i = 0; i < 32 * 64; i++)
		xf[i] = (float)((int64_t)(th_rand(&s) % 20001) - 10000) / 997.0f;
	for (int i = 0; i < 64; i++)
		amax_r[i] = 2.0f + (float)i / 8.0f;
	th_save(th_p("x.npy"), NPY_U2, 2, 128, 128, x);
	th_save(th_p("x64.npy"), NPY_U2, 2, 64, 128, x);
	th_save(th_p("w.npy"), NPY_U2, 2, 256, 128, w);
	th_save(th_p("dy.npy"), NPY_U2, 2, 128, 256, dy);
	th_save(th_p("b.npy"), NPY_U2, 1, 256, 0, b);
	th_save(th_p("xf.npy"), NPY_F4, 2, 32, 64, xf);
	th_save(th_p("amax.npy"), NPY_F4, 0, 0, 0, &amax);
	th_save(th_p("amax64.npy"), NPY_F4, 1, 64, 0, amax_r);
	th_save(th_p("u8.npy"), NPY_U1, 1, 64, 0, amax_r);
	/* float32 copies of X and W (rounded to bf16 by the CLI) */
	float *xff = malloc(nx * 4), *wf = malloc(nw * 4);
	for (size_t i = 0; i < nx; i++) {
		uint32_t u = (uint32_t)x[i] << 16;
		memcpy(&xff[i], &u, 4);
	}
	for (size_t i = 0; i < nw; i++) {
		uint32_t u = (uint32_t)w[i] << 16;
		memcpy(&wf[i], &u, 4);
	}
	th_save(th_p("x_f32.npy"), NPY_F4, 2, 128, 128, xff);
	th_save(th_p("w_f32.npy"), NPY_F4, 2, 256, 128, wf);
	/* a (128, 100) W: K = 100 is not a multiple of 16 */
	th_save(th_p("w100.npy"), NPY_U2, 2, 128, 100, w);
	th_save(th_p("x256.npy"), NPY_U2, 2, 128, 256, w);
	free(x);
	free(w);
	free(dy);
	free(xf);
	free(xff);
	free(wf);
	return 0;
}

static int remote_teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

static void save_text(const char *name, const char *text)
{
	FILE *f = fopen(th_p(name), "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static const char *in_dir(const char *dir, const char *name)
{
	static char buf[8][1200];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
	return buf[i];
}

/* Runs args twice, with "--local" appended and without, each with OUTFLAG set to its own output
 * (a directory, or a file when file_out), and checks that every listed output is the same bytes. */
static void same_both_ways(const char *tag, const char *const *args, const char *outflag, int file_out,
			   const char *const *outputs)
{
	char local[520], remote[600];
	snprintf(local, sizeof local, "%s", th_p(tag));
	snprintf(remote, sizeof remote, "%s.remote", local);
	if (file_out) {
		strcat(local, ".npy");
		strcat(remote, ".npy");
	}
	for (int pass = 0; pass < 2; pass++) {
		const char *argv[40];
		int n = 0;
		for (; args[n]; n++)
			argv[n] = args[n];
		argv[n++] = outflag;
		argv[n++] = pass ? remote : local;
		if (!pass) { /* in-process on the test fosd's backend (cpu, or $FOS_TEST_BACKEND) */
			argv[n++] = "--local";
			argv[n++] = "--backend";
			argv[n++] = tsrv_backend_name();
		}
		argv[n] = NULL;
		th_result r;
		th_runv(&r, argv);
		if (r.status != 0 || r.err[0])
			fail_msg("%s (%s): exit %d: %s", tag, pass ? "remote" : "--local", r.status, r.err);
	}
	if (file_out) {
		th_same_file(local, remote);
		return;
	}
	for (int i = 0; outputs[i]; i++) {
		char a[1300], b[1300];
		snprintf(a, sizeof a, "%s/%s", local, outputs[i]);
		snprintf(b, sizeof b, "%s/%s", remote, outputs[i]);
		if (!th_exists(a))
			fail_msg("%s: --local wrote no %s", tag, outputs[i]);
		th_same_file(a, b);
	}
}

static const char *const q_outputs[] = {"codes.npy", "scales.npy", "amax.npy", NULL};

static void test_quantize_remote_equals_local(void **state)
{
	(void)state;
	const char *x = th_p("x64.npy"), *xf = th_p("xf.npy");
	struct {
		const char *tag;
		const char *args[12];
	} cases[] = {
		{"q_default", {"quantize", x, NULL}},
		{"q_f32", {"quantize", xf, NULL}},
		{"q_row", {"quantize", x, "--row-scaled", NULL}},
		{"q_tile", {"quantize", x, "--block", "16x16", NULL}},
		{"q_nvfp4", {"quantize", xf, "--recipe", "nvfp4", NULL}},
		{"q_mse448", {"quantize", x, "--err", "mse", "--bound", "448", NULL}},
		{"q_amax", {"quantize", x, "--amax", th_p("amax.npy"), NULL}},
		{"q_amax_row", {"quantize", x, "--row-scaled", "--amax", th_p("amax64.npy"), NULL}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		same_both_ways(cases[i].tag, cases[i].args, "--out", 0, q_outputs);
}

static void test_dequantize_remote_equals_local(void **state)
{
	(void)state;
	/* inputs: --local quantize outputs */
	th_result r;
	th_run(&r, "quantize", th_p("x64.npy"), "--out", th_p("dq_in"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r);
	th_run(&r, "quantize", th_p("x64.npy"), "--row-scaled", "--out", th_p("dq_in_row"), "--local", "--backend", "cpu",
	       NULL);
	th_expect_ok(&r);
	th_run(&r, "quantize", th_p("xf.npy"), "--recipe", "nvfp4", "--out", th_p("dq_in_nv"), "--local", "--backend",
	       "cpu", NULL);
	th_expect_ok(&r);
	const char *d = th_p("dq_in"), *dr = th_p("dq_in_row"), *dn = th_p("dq_in_nv");
	char c[3][1200], s[3][1200], a[3][1200];
	const char *dirs[3] = {d, dr, dn};
	for (int i = 0; i < 3; i++) {
		snprintf(c[i], sizeof c[i], "%s/codes.npy", dirs[i]);
		snprintf(s[i], sizeof s[i], "%s/scales.npy", dirs[i]);
		snprintf(a[i], sizeof a[i], "%s/amax.npy", dirs[i]);
	}
	struct {
		const char *tag;
		const char *args[14];
	} cases[] = {
		{"dq_bf16", {"dequantize", "--codes", c[0], "--scales", s[0], "--amax", a[0], NULL}},
		{"dq_f32", {"dequantize", "--codes", c[0], "--scales", s[0], "--amax", a[0], "--dtype", "f32", NULL}},
		{"dq_row", {"dequantize", "--codes", c[1], "--scales", s[1], "--amax", a[1], NULL}},
		{"dq_nv", {"dequantize", "--codes", c[2], "--scales", s[2], "--amax", a[2], "--bound", "448", "--dtype", "f32",
			   NULL}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		same_both_ways(cases[i].tag, cases[i].args, "--out", 1, NULL);
}

static const char *const l_fwd[] = {"y.npy", NULL};
static const char *const l_bwd[] = {"y.npy", "dx.npy", "dw.npy", NULL};
static const char *const l_bwd_bias[] = {"y.npy", "dx.npy", "dw.npy", "db.npy", NULL};

static void test_linear_remote_equals_local(void **state)
{
	(void)state;
	const char *x = th_p("x.npy"), *w = th_p("w.npy"), *dy = th_p("dy.npy"), *b = th_p("b.npy");
	struct {
		const char *tag;
		const char *const *outputs;
		const char *args[16];
	} cases[] = {
		{"l_fwd", l_fwd, {"linear", x, w, NULL}},
		{"l_fwd_bias", l_fwd, {"linear", x, w, "--bias", b, NULL}},
		{"l_default", l_bwd_bias, {"linear", x, w, "--dy", dy, "--bias", b, NULL}},
		{"l_quantized", l_bwd, {"linear", x, w, "--dy", dy, "--override", "quantized", NULL}},
		{"l_hp", l_bwd_bias, {"linear", x, w, "--dy", dy, "--bias", b, "--override", "high_precision", NULL}},
		{"l_deq", l_bwd, {"linear", x, w, "--dy", dy, "--override", "dequantized", NULL}},
		{"l_row", l_bwd, {"linear", x, w, "--dy", dy, "--row-scaled", NULL}},
		{"l_1x16", l_bwd, {"linear", x, w, "--dy", dy, "--weight-block", "1x16", "--err", "mse", "--bound", "448", NULL}},
		{"l_f32", l_bwd, {"linear", th_p("x_f32.npy"), th_p("w_f32.npy"), "--dy", dy, NULL}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		same_both_ways(cases[i].tag, cases[i].args, "--out", 0, cases[i].outputs);
	/* float32 inputs are rounded to bf16 first: the same bytes as the bf16 inputs */
	th_same_file(th_p("l_f32.remote/y.npy"), th_p("l_quantized.remote/y.npy"));
	th_same_file(th_p("l_f32.remote/dw.npy"), th_p("l_quantized.remote/dw.npy"));
}

static void parse_json(const th_result *r, cli_jv *v)
{
	fos_err e = {0, ""};
	if (r->status != 0 || r->err[0] || cli_json_parse(r->out, strlen(r->out), v, &e))
		fail_msg("exit %d, stderr [%s], JSON: %s\n%s", r->status, r->err, e.msg, r->out);
}

static void test_health_and_stats(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "health", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "serving"));
	char want_backend[64];
	snprintf(want_backend, sizeof want_backend, "backend:     %s", tsrv_backend_name());
	assert_non_null(strstr(r.out, want_backend));
	assert_non_null(strstr(r.out, g_srv.url));
	/* MPS: not applicable on the cpu backend; on cuda whatever the host's daemon makes it */
	int cpu = !strcmp(tsrv_backend_name(), "cpu");
	const char *mps_line = strstr(r.out, "\n  mps:         ");
	assert_non_null(mps_line);
	if (cpu)
		assert_true(!strncmp(mps_line, "\n  mps:         not applicable\n", strlen("\n  mps:         not applicable\n")));
	cli_jv v;
	th_run(&r, "health", "--json", NULL);
	parse_json(&r, &v);
	const char *mps = cli_json_get(&v, "mps")->str;
	if (cpu)
		assert_string_equal(mps, "not applicable");
	else
		assert_true(!strcmp(mps, "on") || !strcmp(mps, "off") || !strcmp(mps, "unknown"));
	assert_string_equal(cli_json_get(&v, "status")->str, "serving");
	assert_string_equal(cli_json_get(&v, "backend")->str, tsrv_backend_name());
	assert_true(cli_json_get(&v, "max_message_bytes")->num > 0);
	cli_json_free(&v);
	/* --server wins over FOS_SERVER */
	const char *env[] = {"FOS_SERVER=ipc:///nonexistent/fosd.sock", NULL};
	const char *args[] = {"--server", g_srv.url, "health", NULL};
	th_runv_env(&r, env, args);
	th_expect_ok(&r);

	/* two quantize requests, then the counters show them */
	for (int i = 0; i < 2; i++) {
		th_run(&r, "quantize", th_p("x64.npy"), "--out", th_p("st_q"), NULL);
		th_expect_ok(&r);
	}
	th_run(&r, "stats", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "quantize"));
	assert_non_null(strstr(r.out, "weight cache:"));
	assert_non_null(strstr(r.out, "contexts:"));
	assert_non_null(strstr(r.out, "where the time goes"));
	assert_non_null(strstr(r.out, "message pool:"));
	th_run(&r, "stats", "--json", NULL);
	parse_json(&r, &v);
	const cli_jv *ops = cli_json_get(&v, "ops");
	assert_non_null(ops);
	int found = 0;
	for (size_t i = 0; i < ops->n; i++) {
		const cli_jv *o = &ops->items[i];
		if (strcmp(cli_json_get(o, "op")->str, "quantize"))
			continue;
		found = 1;
		assert_true(cli_json_get(o, "requests")->num >= 2);
		assert_true(cli_json_path(o, "codes.OK")->num >= 2);
		assert_true(cli_json_path(o, "latency_us.count")->num >= 2);
		assert_true(cli_json_get(o, "bytes_in")->num >= 2 * 64 * 128 * 2);
		/* every OK quantize ran on an executor lane: its queue and run parts are counted as often */
		double n = cli_json_path(o, "latency_us.count")->num;
		assert_true(cli_json_path(o, "queue_us.count")->num == n);
		assert_true(cli_json_path(o, "run_us.count")->num == n);
		assert_true(cli_json_path(o, "run_us.max")->num <= cli_json_path(o, "latency_us.max")->num);
		assert_true(cli_json_path(o, "queue_us.p99")->num <= cli_json_path(o, "latency_us.p99")->num);
		assert_non_null(cli_json_path(o, "run_us.p50"));
	}
	assert_true(found);
	/* health is answered without the executor: latency, but no queue or run */
	found = 0;
	for (size_t i = 0; i < ops->n; i++) {
		const cli_jv *o = &ops->items[i];
		if (strcmp(cli_json_get(o, "op")->str, "health"))
			continue;
		found = 1;
		assert_true(cli_json_path(o, "latency_us.count")->num >= 1);
		assert_true(cli_json_path(o, "queue_us.count")->num == 0);
		assert_true(cli_json_path(o, "run_us.count")->num == 0);
	}
	assert_true(found);
	/* the message pool's counters, consistent with each other */
	assert_non_null(cli_json_path(&v, "msg_pool.active"));
	double taken = cli_json_path(&v, "msg_pool.taken")->num;
	assert_true(taken == cli_json_path(&v, "msg_pool.reused")->num + cli_json_path(&v, "msg_pool.mapped_new")->num);
	assert_true(cli_json_path(&v, "msg_pool.bytes_pinned")->num <=
		    cli_json_path(&v, "msg_pool.bytes_free")->num + cli_json_path(&v, "msg_pool.bytes_used")->num);
	assert_non_null(cli_json_path(&v, "msg_pool.pin_failures"));
	assert_non_null(cli_json_path(&v, "cache.budget"));
	assert_non_null(cli_json_path(&v, "contexts.live"));
	assert_true(cli_json_path(&v, "executor.workers")->num >= 1);
	cli_json_free(&v);
}

static const cli_jv *find_weight(const cli_jv *list, const char *name)
{
	const cli_jv *ws = cli_json_get(list, "weights");
	assert_non_null(ws);
	for (size_t i = 0; i < ws->n; i++)
		if (!strcmp(cli_json_get(&ws->items[i], "name")->str, name))
			return &ws->items[i];
	return NULL;
}

static void test_weight_cache(void **state)
{
	(void)state;
	th_result r;
	cli_jv v;
	th_run(&r, "put-weight", "wc.a", th_p("w_f32.npy"), NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "cached wc.a version 1: (256, 128), 16x16 blocks, mae, bound 256"));
	th_run(&r, "put-weight", "wc.a", th_p("w.npy"), NULL);
	th_expect_fail(&r, 1, "ALREADY_EXISTS");
	th_run(&r, "put-weight", "wc.a", th_p("w.npy"), "--version", "2", "--weight-block", "1x16", "--err", "mse",
	       "--bound", "448", "--pin", "--json", NULL);
	parse_json(&r, &v);
	assert_string_equal(cli_json_get(&v, "name")->str, "wc.a");
	assert_true(cli_json_get(&v, "version")->num == 2);
	assert_string_equal(cli_json_get(&v, "weight_block")->str, "1x16");
	assert_string_equal(cli_json_get(&v, "err")->str, "mse");
	assert_true(cli_json_get(&v, "bound")->num == 448);
	assert_int_equal(cli_json_get(&v, "pinned")->b, 1);
	cli_json_free(&v);
	th_run(&r, "put-weight", "wc/b", th_p("w.npy"), "--drop-master", "--eager-columnwise", NULL);
	th_expect_ok(&r);

	th_run(&r, "list-weights", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "wc.a"));
	assert_non_null(strstr(r.out, "wc/b"));
	assert_non_null(strstr(r.out, "(256, 128)"));
	th_run(&r, "list-weights", "--json", NULL);
	parse_json(&r, &v);
	const cli_jv *a = find_weight(&v, "wc.a"), *b = find_weight(&v, "wc/b");
	assert_non_null(a);
	assert_non_null(b);
	assert_true(cli_json_get(a, "version")->num == 2);
	const cli_jv *shape = cli_json_get(a, "shape");
	assert_true(shape->n == 2 && shape->items[0].num == 256 && shape->items[1].num == 128);
	assert_int_equal(cli_json_get(b, "has_master")->b, 0);
	assert_int_equal(cli_json_get(b, "has_columnwise")->b, 1);
	assert_true(cli_json_get(b, "bytes")->num > 0);
	cli_json_free(&v);

	th_run(&r, "drop-weight", "wc.a", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "dropped wc.a"));
	th_run(&r, "drop-weight", "wc.a", NULL);
	th_expect_fail(&r, 1, "NOT_FOUND");
	th_run(&r, "drop-weight", "wc/b", NULL);
	th_expect_ok(&r);
	th_run(&r, "list-weights", "--json", NULL);
	parse_json(&r, &v);
	assert_null(find_weight(&v, "wc.a"));
	assert_null(find_weight(&v, "wc/b"));
	cli_json_free(&v);
}

/* forward + backward through the cache equal `fos linear --local` bit for bit. */
static void fwd_bwd_case(const char *tag, const char *override, int row, int bias)
{
	th_result r;
	char wname[64];
	snprintf(wname, sizeof wname, "fb.%s", tag);
	th_run(&r, "put-weight", wname, th_p("w.npy"), NULL);
	th_expect_ok(&r);
	/* the reference */
	char ref[512], ctx[600], y[600], bw[600];
	snprintf(ref, sizeof ref, "%s", th_p(tag));
	snprintf(ctx, sizeof ctx, "%s.ctx.json", ref);
	snprintf(y, sizeof y, "%s.y.npy", ref);
	snprintf(bw, sizeof bw, "%s.bw", ref);
	const char *largs[20] = {"linear", th_p("x.npy"), th_p("w.npy"), "--dy", th_p("dy.npy"), "--out", ref, "--local",
				 "--backend", tsrv_backend_name()};
	const char *fargs[20] = {"forward", wname, th_p("x.npy"), "--out", y, "--context-out", ctx};
	int nl = 10, nf = 7;
	if (override) {
		largs[nl++] = fargs[nf++] = "--override";
		largs[nl++] = fargs[nf++] = override;
	}
	if (row)
		largs[nl++] = fargs[nf++] = "--row-scaled";
	if (bias) {
		largs[nl++] = fargs[nf++] = "--bias";
		largs[nl++] = fargs[nf++] = th_p("b.npy");
	}
	th_runv(&r, largs);
	th_expect_ok(&r);
	th_runv(&r, fargs);
	th_expect_ok(&r);
	th_same_file(y, in_dir(ref, "y.npy"));
	th_run(&r, "backward", ctx, th_p("dy.npy"), "--out", bw, NULL);
	th_expect_ok(&r);
	th_same_file(in_dir(bw, "dx.npy"), in_dir(ref, "dx.npy"));
	th_same_file(in_dir(bw, "dw.npy"), in_dir(ref, "dw.npy"));
	if (bias)
		th_same_file(in_dir(bw, "db.npy"), in_dir(ref, "db.npy"));
	else
		assert_false(th_exists(in_dir(bw, "db.npy")));
	th_run(&r, "drop-weight", wname, NULL);
	th_expect_ok(&r);
}

static void test_forward_backward_equal_linear(void **state)
{
	(void)state;
	fwd_bwd_case("default", NULL, 0, 1);
	fwd_bwd_case("quantized", "quantized", 0, 0);
	fwd_bwd_case("hp", "high_precision", 0, 1);
	fwd_bwd_case("deq", "dequantized", 0, 0);
	fwd_bwd_case("row", NULL, 1, 1);
}

static void test_context_file(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "ctxw", th_p("w.npy"), "--version", "5", NULL);
	th_expect_ok(&r);
	const char *ctx = th_p("c.json"), *bw = th_p("c.bw");
	th_run(&r, "forward", "ctxw", th_p("x.npy"), "--out", th_p("c.y.npy"), "--context-out", ctx, "--bias",
	       th_p("b.npy"), "--version", "5", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "quantized backward"));
	/* the file: what fos_backward needs */
	char text[4096];
	th_slurp(ctx, text, sizeof text);
	cli_jv v;
	fos_err e = {0, ""};
	if (cli_json_parse(text, strlen(text), &v, &e))
		fail_msg("context file: %s\n%s", e.msg, text);
	assert_string_equal(cli_json_get(&v, "format")->str, "fos-context/1");
	assert_int_equal(cli_json_get(&v, "id")->type, CLI_JSTR);
	assert_true(strlen(cli_json_get(&v, "id")->str) > 0);
	assert_string_equal(cli_json_get(&v, "weight")->str, "ctxw");
	assert_true(cli_json_get(&v, "weight_version")->num == 5);
	assert_string_equal(cli_json_get(&v, "override")->str, "default");
	assert_string_equal(cli_json_get(&v, "resolved_override")->str, "quantized");
	assert_true(cli_json_get(&v, "m")->num == 128 && cli_json_get(&v, "n")->num == 256 &&
		    cli_json_get(&v, "k")->num == 128);
	assert_int_equal(cli_json_get(&v, "has_bias")->b, 1);
	assert_int_equal(cli_json_get(&v, "row_scaled")->b, 0);
	assert_string_equal(cli_json_get(&v, "server")->str, g_srv.url);
	assert_non_null(strstr(cli_json_get(&v, "x")->str, "x.npy"));
	cli_json_free(&v);

	/* kept: two backwards give the same bytes */
	th_run(&r, "backward", ctx, th_p("dy.npy"), "--out", bw, "--keep-context", NULL);
	th_expect_ok(&r);
	th_run(&r, "backward", ctx, th_p("dy.npy"), "--out", th_p("c.bw2"), NULL);
	th_expect_ok(&r);
	th_same_file(in_dir(bw, "dx.npy"), in_dir(th_p("c.bw2"), "dx.npy"));
	th_same_file(in_dir(bw, "db.npy"), in_dir(th_p("c.bw2"), "db.npy"));
	/* consumed now: NOT_FOUND, and the error says how to recover */
	th_run(&r, "backward", ctx, th_p("dy.npy"), "--out", th_p("c.bw3"), NULL);
	th_expect_fail(&r, 1, "--recompute");
	assert_non_null(strstr(r.err, "NOT_FOUND"));
	/* --recompute re-runs the forward from the recorded X and bias: the same bytes */
	th_run(&r, "backward", ctx, th_p("dy.npy"), "--out", th_p("c.bw4"), "--recompute", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "recomputed"));
	th_same_file(in_dir(bw, "dx.npy"), in_dir(th_p("c.bw4"), "dx.npy"));
	th_same_file(in_dir(bw, "dw.npy"), in_dir(th_p("c.bw4"), "dw.npy"));
	/* without --server the backward goes to the server recorded in the file */
	const char *env[] = {"FOS_SERVER=", NULL};
	th_run(&r, "forward", "ctxw", th_p("x.npy"), "--out", th_p("c.y.npy"), "--context-out", ctx, "--bias",
	       th_p("b.npy"), NULL);
	th_expect_ok(&r);
	const char *args[] = {"backward", ctx, th_p("dy.npy"), "--out", th_p("c.bw5"), NULL};
	th_runv_env(&r, env, args);
	th_expect_ok(&r);
	/* a newer version of the weight: the old context's recompute is refused */
	th_run(&r, "put-weight", "ctxw", th_p("w.npy"), "--version", "6", NULL);
	th_expect_ok(&r);
	th_run(&r, "backward", ctx, th_p("dy.npy"), "--out", th_p("c.bw6"), "--recompute", NULL);
	th_expect_fail(&r, 1, "FAILED_PRECONDITION");
	th_run(&r, "drop-weight", "ctxw", NULL);
	th_expect_ok(&r);
}


/* Errors the daemon finds, and errors in what the daemon-only subcommands are given. */
static void test_remote_bad_input(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "bad.w", th_p("w.npy"), NULL);
	th_expect_ok(&r);
	th_run(&r, "forward", "no.such.weight", th_p("x.npy"), "--out", th_p("e.y.npy"), NULL);
	th_expect_fail(&r, 1, "NOT_FOUND");
	th_run(&r, "forward", "bad.w", th_p("x256.npy"), "--out", th_p("e.y.npy"), NULL);
	th_expect_fail(&r, 1, "INVALID_ARGUMENT");
	th_run(&r, "forward", "bad.w", th_p("x.npy"), "--out", th_p("e.y.npy"), "--version", "9", NULL);
	th_expect_fail(&r, 1, "FAILED_PRECONDITION");
	th_run(&r, "forward", "bad.w", th_p("x.npy"), "--out", th_p("e.y.npy"), "--bias", th_p("amax64.npy"), NULL);
	th_expect_fail(&r, 1, "INVALID_ARGUMENT");
	assert_non_null(strstr(r.err, "bias"));
	th_run(&r, "forward", "bad.w", th_p("x.npy"), "--out", th_p("e.y.npy"), "--bias", th_p("u8.npy"), NULL);
	th_expect_fail(&r, 1, "u8.npy: dtype uint8 ('|u1') is not accepted here");
	th_run(&r, "forward", "bad.w", th_p("nothere.npy"), "--out", th_p("e.y.npy"), NULL);
	th_expect_fail(&r, 1, "nothere.npy: cannot open");
	assert_false(th_exists(th_p("e.y.npy")));
	th_run(&r, "put-weight", "w100", th_p("w100.npy"), NULL);
	th_expect_fail(&r, 1, "INVALID_ARGUMENT");
	th_run(&r, "put-weight", "wv", th_p("amax64.npy"), NULL);
	th_expect_fail(&r, 1, "expected a 2-d array (N, K)");
	/* backward: context files that are not, or no longer, usable */
	save_text("garbage.json", "{\"format\": \"fos-context/1\", \"id\": ");
	save_text("notctx.json", "{\"hello\": 1}");
	save_text("noid.json", "{\"format\": \"fos-context/1\", \"weight\": \"bad.w\"}");
	th_run(&r, "backward", th_p("garbage.json"), th_p("dy.npy"), "--out", th_p("e.bw"), NULL);
	th_expect_fail(&r, 1, "not a fos context file (bad JSON");
	th_run(&r, "backward", th_p("notctx.json"), th_p("dy.npy"), "--out", th_p("e.bw"), NULL);
	th_expect_fail(&r, 1, "not a fos context file");
	th_run(&r, "backward", th_p("noid.json"), th_p("dy.npy"), "--out", th_p("e.bw"), NULL);
	th_expect_fail(&r, 1, "\"id\" is missing or invalid");
	th_run(&r, "backward", th_p("nothere.json"), th_p("dy.npy"), "--out", th_p("e.bw"), NULL);
	th_expect_fail(&r, 1, "nothere.json: cannot open");
	th_run(&r, "forward", "bad.w", th_p("x.npy"), "--out", th_p("e.y.npy"), "--context-out", th_p("e.ctx"), NULL);
	th_expect_ok(&r);
	th_run(&r, "backward", th_p("e.ctx"), th_p("x.npy"), "--out", th_p("e.bw"), NULL);
	th_expect_fail(&r, 1, "does not match the forward's (M, N) = (128, 256)");
	assert_false(th_exists(th_p("e.bw")));
	/* a live context keeps its weight even when the weight is dropped from the cache */
	th_run(&r, "drop-weight", "bad.w", NULL);
	th_expect_ok(&r);
	th_run(&r, "backward", th_p("e.ctx"), th_p("dy.npy"), "--out", th_p("e.bw"), NULL);
	th_expect_ok(&r);
	/* now the context is consumed and the weight is gone: recompute cannot find the weight */
	th_run(&r, "backward", th_p("e.ctx"), th_p("dy.npy"), "--out", th_p("e.bw"), "--recompute", NULL);
	th_expect_fail(&r, 1, "NOT_FOUND");
	/* the daemon is still serving */
	th_run(&r, "health", NULL);
	th_expect_ok(&r);
}

/* --token / $FOS_TOKEN reach a fosd that has a tokens file. */
static void test_tokens(void **state)
{
	(void)state;
	save_text("tokens", "alice s3cret-alice-0123456789\n");
	char tokens_arg[600];
	snprintf(tokens_arg, sizeof tokens_arg, "%s", th_p("tokens"));
	tsrv t;
	const char *args[] = {"--tokens", tokens_arg, NULL};
	assert_int_equal(tsrv_start(&t, args), 0);
	th_result r;
	th_run(&r, "--server", t.url, "--token", "s3cret-alice-0123456789", "list-weights", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "no weights cached"));
	const char *env[] = {"FOS_TOKEN=s3cret-alice-0123456789", NULL};
	const char *a1[] = {"--server", t.url, "put-weight", "tok.w", th_p("w.npy"), NULL};
	th_runv_env(&r, env, a1);
	th_expect_ok(&r);
	th_run(&r, "--server", t.url, "--token", "wrong", "list-weights", NULL);
	th_expect_fail(&r, 1, "UNAUTHENTICATED");
	th_run(&r, "--server", t.url, "list-weights", NULL);
	th_expect_fail(&r, 1, "UNAUTHENTICATED");
	int status = tsrv_stop(&t, SIGTERM, 10000);
	if (status)
		tsrv_dump_log(&t);
	tsrv_cleanup(&t);
	assert_int_equal(status, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quantize_remote_equals_local),
		cmocka_unit_test(test_dequantize_remote_equals_local),
		cmocka_unit_test(test_linear_remote_equals_local),
		cmocka_unit_test(test_health_and_stats),
		cmocka_unit_test(test_weight_cache),
		cmocka_unit_test(test_forward_backward_equal_linear),
		cmocka_unit_test(test_context_file),
		cmocka_unit_test(test_remote_bad_input),
		cmocka_unit_test(test_tokens),
	};
	return cmocka_run_group_tests_name("cli_remote", tests, remote_setup, remote_teardown);
}
