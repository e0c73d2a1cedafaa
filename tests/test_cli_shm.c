/* test_cli_shm.c: `fos forward`, `fos backward` and `fos linear` with --shm against a real fosd
 * (the backend of $FOS_TEST_BACKEND, cpu by default; build/fos as a subprocess): the inputs go
 * through a shared-memory region the CLI registers, fosd writes the results into it, and the .npy
 * files written are the same bytes as without --shm (inline tensors), under every override, with
 * and without a bias, and through --recompute. --shm with --local is a usage error, --shm with an
 * unknown weight fails like the inline forward, and no region is left registered on fosd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli.h"
#include "fos.h"
#include "support_server.h"
#include "test_cli_harness.h"

static tsrv g_srv;

static int shm_setup(void **state)
{
	if (th_setup(state))
		return -1;
	const char *args[] = {"--context-ttl", "30s", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	size_t nx = 128 * 128, nw = 256 * 128, ny = 128 * 256;
	uint16_t *x = malloc(nx * 2), *w = malloc(nw * 2), *dy = malloc(ny * 2), b[256];
	if (!x || !w || !dy)
		return -1;
	tsrv_fill_bf16(x, nx, 31, 1.0f);
	tsrv_fill_bf16(w, nw, 32, 0.05f);
	tsrv_fill_bf16(dy, ny, 33, 0.01f);
	tsrv_fill_bf16(b, 256, 34, 0.5f);
	th_save(th_p("x.npy"), NPY_U2, 2, 128, 128, x);
	th_save(th_p("w.npy"), NPY_U2, 2, 256, 128, w);
	th_save(th_p("dy.npy"), NPY_U2, 2, 128, 256, dy);
	th_save(th_p("b.npy"), NPY_U2, 1, 256, 0, b);
	free(x);
	free(w);
	free(dy);
	return 0;
}

static int shm_teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

static const char *in_dir(const char *dir, const char *name)
{
	static char buf[8][1200];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
	return buf[i];
}

/* No region of any connection is left on fosd. */
static void no_regions_left(void)
{
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(g_srv.url, NULL, 10000, &c, &st), FOS_CODE_OK);
	uint64_t n = 99, mapped = 99;
	assert_int_equal(fos_region_stats(c, &n, NULL, &mapped, &st), FOS_CODE_OK);
	assert_int_equal(n, 0);
	assert_int_equal(mapped, 0);
	fos_close(c);
}

/* Runs args with --out TAG and --out TAG.shm --shm; every listed output must be the same bytes. */
static void linear_both_ways(const char *tag, const char *const *args, const char *const *outputs)
{
	char inl[520], shm[600];
	snprintf(inl, sizeof inl, "%s", th_p(tag));
	snprintf(shm, sizeof shm, "%s.shm", inl);
	for (int pass = 0; pass < 2; pass++) {
		const char *argv[40];
		int n = 0;
		for (; args[n]; n++)
			argv[n] = args[n];
		argv[n++] = "--out";
		argv[n++] = pass ? shm : inl;
		if (pass)
			argv[n++] = "--shm";
		argv[n] = NULL;
		th_result r;
		th_runv(&r, argv);
		if (r.status != 0 || r.err[0])
			fail_msg("%s (%s): exit %d: %s", tag, pass ? "--shm" : "inline", r.status, r.err);
	}
	for (int i = 0; outputs[i]; i++) {
		if (!th_exists(in_dir(inl, outputs[i])))
			fail_msg("%s: no %s", tag, outputs[i]);
		th_same_file(in_dir(inl, outputs[i]), in_dir(shm, outputs[i]));
	}
}

static const char *const l_fwd[] = {"y.npy", NULL};
static const char *const l_bwd[] = {"y.npy", "dx.npy", "dw.npy", NULL};
static const char *const l_bwd_bias[] = {"y.npy", "dx.npy", "dw.npy", "db.npy", NULL};

static void test_linear_shm(void **state)
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
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		linear_both_ways(cases[i].tag, cases[i].args, cases[i].outputs);
	no_regions_left();
}

/* forward (+ context) and backward, inline and --shm: the same files. */
static void fwd_bwd_case(const char *tag, const char *override, int bias)
{
	char y0[600], y1[600], c0[600], c1[600], d0[600], d1[600], d2[600];
	snprintf(y0, sizeof y0, "%s.y.npy", th_p(tag));
	snprintf(y1, sizeof y1, "%s.y.shm.npy", th_p(tag));
	snprintf(c0, sizeof c0, "%s.ctx.json", th_p(tag));
	snprintf(c1, sizeof c1, "%s.ctx.shm.json", th_p(tag));
	snprintf(d0, sizeof d0, "%s.bwd", th_p(tag));
	snprintf(d1, sizeof d1, "%s.bwd.shm", th_p(tag));
	snprintf(d2, sizeof d2, "%s.bwd.recompute.shm", th_p(tag));
	for (int pass = 0; pass < 2; pass++) {
		const char *argv[24];
		int n = 0;
		argv[n++] = "forward";
		argv[n++] = "shm.w";
		argv[n++] = th_p("x.npy");
		argv[n++] = "--out";
		argv[n++] = pass ? y1 : y0;
		argv[n++] = "--context-out";
		argv[n++] = pass ? c1 : c0;
		if (override) {
			argv[n++] = "--override";
			argv[n++] = override;
		}
		if (bias) {
			argv[n++] = "--bias";
			argv[n++] = th_p("b.npy");
		}
		if (pass)
			argv[n++] = "--shm";
		argv[n] = NULL;
		th_result r;
		th_runv(&r, argv);
		th_expect_ok(&r);
		const char *bargv[] = {"backward", pass ? c1 : c0, th_p("dy.npy"), "--out", pass ? d1 : d0,
				       pass ? "--shm" : NULL, NULL};
		th_runv(&r, bargv);
		th_expect_ok(&r);
	}
	th_same_file(y0, y1);
	th_same_file(in_dir(d0, "dx.npy"), in_dir(d1, "dx.npy"));
	th_same_file(in_dir(d0, "dw.npy"), in_dir(d1, "dw.npy"));
	if (bias)
		th_same_file(in_dir(d0, "db.npy"), in_dir(d1, "db.npy"));
	else
		assert_false(th_exists(in_dir(d1, "db.npy")));
	/* the --shm context was consumed: --recompute through shm re-runs its forward, same bytes */
	th_result r;
	const char *rargv[] = {"backward", c1, th_p("dy.npy"), "--out", d2, "--recompute", "--shm", NULL};
	th_runv(&r, rargv);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "recomputed"));
	th_same_file(in_dir(d0, "dx.npy"), in_dir(d2, "dx.npy"));
	th_same_file(in_dir(d0, "dw.npy"), in_dir(d2, "dw.npy"));
	if (bias)
		th_same_file(in_dir(d0, "db.npy"), in_dir(d2, "db.npy"));
}

static void test_forward_backward_shm(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "shm.w", th_p("w.npy"), NULL);
	th_expect_ok(&r);
	fwd_bwd_case("fb_default", NULL, 1);
	fwd_bwd_case("fb_quantized", "quantized", 0);
	fwd_bwd_case("fb_hp", "high_precision", 1);
	fwd_bwd_case("fb_deq", "dequantized", 0);
	/* a forward without a context, and the same as `fos linear` of the same weight */
	th_run(&r, "forward", "shm.w", th_p("x.npy"), "--out", th_p("plain.shm.npy"), "--shm", NULL);
	th_expect_ok(&r);
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--out", th_p("plain.lin"), "--shm", NULL);
	th_expect_ok(&r);
	th_same_file(th_p("plain.shm.npy"), th_p("plain.lin/y.npy"));
	no_regions_left();
}

static void test_shm_errors(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--out", th_p("bad.lin"), "--local", "--shm", NULL);
	th_expect_fail(&r, 2, "--shm");
	/* an unknown weight: the same NOT_FOUND as inline */
	th_run(&r, "forward", "no.such.weight", th_p("x.npy"), "--out", th_p("bad.y.npy"), "--shm", NULL);
	th_expect_fail(&r, 1, "NOT_FOUND");
	assert_false(th_exists(th_p("bad.y.npy")));
	no_regions_left();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_shm),
		cmocka_unit_test(test_forward_backward_shm),
		cmocka_unit_test(test_shm_errors),
	};
	return cmocka_run_group_tests(tests, shm_setup, shm_teardown);
}
