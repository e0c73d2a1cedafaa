/* test_cli_four_over_six.c: `fos linear --four-over-six SCOPE` (build/fos as a subprocess, cpu
 * backend) for each of the four scopes, per tensor and row-scaled X, 16x16 and 1x16 W: its Y equals
 * the layer rebuilt from `fos quantize` of each operand with the recipe the scope gives it (4over6,
 * or nvfp4 with the operand's block shape: `--block 16x16` for W, `--row-scaled` for X; NUMERICS.md
 * section 11), decoded and multiplied by the cpu backend's GEMM with each operand's own D, bit for
 * bit (the cpu GEMM sums in k order, so both sides are the same sums). Through a fosd:
 * `fos put-weight --four-over-six S`, `fos forward` (the weight's scope, or another one named:
 * the other form of W made from the master) with --context-out and `fos backward` of that file,
 * also after the context expired (recomputed with the scope the file records), equal to
 * `fos linear --local` of the same scope. Bad scope names are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend.h"
#include "support_ref.h"
#include "support_server.h"
#include "test_cli_harness.h"

#include <signal.h>

static const char *const k_names[] = {"all", "weights", "activations", "none"};

/* `fos quantize SRC --out DIR --local --backend cpu` with the operand's recipe; returns its decoded
 * operand (value * scale, bf16) in dec and its amax (1 or rows floats) in amax. */
static void quantize_cli(const char *src, const char *dir, int plain, int w_block16, int row_scaled, int64_t rows,
			 int64_t cols, uint16_t *dec, float *amax)
{
	const char *args[20];
	int n = 0;
	args[n++] = "quantize";
	args[n++] = src;
	args[n++] = "--out";
	args[n++] = dir;
	args[n++] = "--local";
	args[n++] = "--backend";
	args[n++] = "cpu";
	args[n++] = "--recipe";
	args[n++] = plain ? "nvfp4" : "4over6";
	if (w_block16) {
		args[n++] = "--block";
		args[n++] = "16x16";
	}
	if (row_scaled)
		args[n++] = "--row-scaled";
	args[n] = NULL;
	th_result r;
	th_runv(&r, args);
	th_expect_ok(&r);
	char p[1200];
	npy_array c, s, a;
	snprintf(p, sizeof p, "%s/codes.npy", dir);
	th_load(p, &c, NPY_U1, 2, rows, cols / 2);
	snprintf(p, sizeof p, "%s/scales.npy", dir);
	th_load(p, &s, NPY_U1, 2, rows, cols / 16);
	snprintf(p, sizeof p, "%s/amax.npy", dir);
	th_load(p, &a, NPY_F4, row_scaled ? 1 : 0, rows, 0);
	float *f = malloc(sizeof(float) * (size_t)(rows * cols));
	assert_non_null(f);
	ref_decode(c.data, s.data, rows, cols, f);
	ref_f32_to_bf16_arr(f, dec, rows * cols);
	memcpy(amax, a.data, sizeof(float) * (size_t)(row_scaled ? rows : 1));
	free(f);
	npy_free(&c);
	npy_free(&s);
	npy_free(&a);
}

static void run_scope(int scope, int row_scaled, int block16, int64_t m, int64_t n, int64_t k, uint64_t seed)
{
	int w46 = scope == 0 || scope == 1, x46 = scope == 0 || scope == 2;
	uint16_t *x = malloc((size_t)(m * k) * 2), *w = malloc((size_t)(n * k) * 2);
	uint16_t *xd = malloc((size_t)(m * k) * 2), *wd = malloc((size_t)(n * k) * 2), *y = malloc((size_t)(m * n) * 2);
	float *xa = malloc(sizeof(float) * (size_t)m), wa;
	assert_true(x && w && xd && wd && y && xa);
	ref_gen_bf16(REF_RANDN, m, k, seed, x);
	ref_gen_bf16(REF_HEAVY, n, k, seed + 1, w);
	th_save(th_p("sx.npy"), NPY_U2, 2, m, k, x);
	th_save(th_p("sw.npy"), NPY_U2, 2, n, k, w);
	quantize_cli(th_p("sx.npy"), th_p("sqx"), !x46, 0, row_scaled, m, k, xd, xa);
	quantize_cli(th_p("sw.npy"), th_p("sqw"), !w46, block16, 0, n, k, wd, &wa);
	/* the layer rebuilt: decoded operands, each scale with its own D (4over6 bound 256, nvfp4 448) */
	fos_backend *be = ref_cpu(2);
	assert_non_null(be);
	fos_err e = {0, ""};
	float dx = 1.0f / (x46 ? 1536.0f : 2688.0f), dw = 1.0f / (w46 ? 1536.0f : 2688.0f);
	assert_int_equal(ref_be_gemm(be, xd, wd, m, n, k, row_scaled ? NULL : xa, dx, &wa, dw, row_scaled ? xa : NULL, NULL,
				     y, &e),
			 FOS_OK);
	be->destroy(be);

	char dir[1100], rm[1200];
	snprintf(dir, sizeof dir, "%s", th_p("sout"));
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	assert_int_equal(system(rm), 0);
	const char *args[20];
	int a = 0;
	args[a++] = "linear";
	args[a++] = th_p("sx.npy");
	args[a++] = th_p("sw.npy");
	args[a++] = "--out";
	args[a++] = dir;
	args[a++] = "--local";
	args[a++] = "--backend";
	args[a++] = "cpu";
	args[a++] = "--four-over-six";
	args[a++] = k_names[scope];
	args[a++] = "--weight-block";
	args[a++] = block16 ? "16x16" : "1x16";
	if (row_scaled)
		args[a++] = "--row-scaled";
	args[a] = NULL;
	th_result r;
	th_runv(&r, args);
	th_expect_ok(&r);
	char p[1200];
	snprintf(p, sizeof p, "%s/y.npy", dir);
	th_check_file(p, NPY_U2, 2, m, n, y);
	free(x);
	free(w);
	free(xd);
	free(wd);
	free(y);
	free(xa);
}

static void test_linear_scopes_equal_quantize(void **state)
{
	(void)state;
	for (int s = 0; s < 4; s++) {
		run_scope(s, 0, 1, 48, 32, 128, 10 + (uint64_t)s);
		run_scope(s, 1, 1, 33, 48, 64, 20 + (uint64_t)s);
		run_scope(s, 0, 0, 16, 16, 256, 30 + (uint64_t)s);
	}
}

static void test_bad_scope_names(void **state)
{
	(void)state;
	uint16_t x[16 * 16];
	for (int i = 0; i < 256; i++)
		x[i] = 0x3F80;
	th_save(th_p("bx.npy"), NPY_U2, 2, 16, 16, x);
	th_result r;
	th_run(&r, "linear", th_p("bx.npy"), th_p("bx.npy"), "--out", th_p("bo"), "--local", "--four-over-six", "both",
	       NULL);
	th_expect_fail(&r, 2, "both");
	th_run(&r, "linear", th_p("bx.npy"), th_p("bx.npy"), "--out", th_p("bo"), "--local", "--four-over-six", "ALLX",
	       NULL);
	th_expect_fail(&r, 2, "activations");
	th_run(&r, "forward", "w", th_p("bx.npy"), "--out", th_p("bo.npy"), "--four-over-six", "weight", NULL);
	th_expect_fail(&r, 2, "weight");
	th_run(&r, "put-weight", "w", th_p("bx.npy"), "--four-over-six", "", NULL);
	th_expect_fail(&r, 2, "--four-over-six");
	th_run(&r, "put-weight", "w", th_p("bx.npy"), "--four-over-six", "plain", NULL);
	th_expect_fail(&r, 2, "none");
	/* nvfp4 (plain) keeps bound 448 */
	th_run(&r, "quantize", th_p("bx.npy"), "--out", th_p("bq"), "--local", "--recipe", "nvfp4", "--block", "16x16",
	       "--bound", "256", NULL);
	th_expect_fail(&r, 2, "448");
}

/* `fos linear --local` of scope (name), quantized backward, from the files saved: into dir */
static void linear_local(const char *scope, const char *dir)
{
	th_result r;
	th_run(&r, "linear", th_p("rx.npy"), th_p("rw.npy"), "--dy", th_p("rdy.npy"), "--out", dir, "--local", "--backend",
	       tsrv_backend_name(), "--override", "quantized", "--four-over-six", scope, NULL);
	th_expect_ok(&r);
}

static void same_files(const char *a, const char *b)
{
	th_same_file(a, b);
}

static void test_fosd_put_forward_backward(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	const int64_t m = 32, n = 48, k = 64;
	uint16_t x[32 * 64], w[48 * 64], dy[32 * 48];
	tsrv_fill_bf16(x, sizeof x / 2, 71, 1.0f);
	tsrv_fill_bf16(w, sizeof w / 2, 72, 0.05f);
	tsrv_fill_bf16(dy, sizeof dy / 2, 73, 0.5f);
	th_save(th_p("rx.npy"), NPY_U2, 2, m, k, x);
	th_save(th_p("rw.npy"), NPY_U2, 2, n, k, w);
	th_save(th_p("rdy.npy"), NPY_U2, 2, m, n, dy);
	char p1[1300], p2[1300], ctx[1100], out[1100];
	th_result r;
	for (int put = 0; put < 4; put++) {
		char name[32];
		snprintf(name, sizeof name, "w_%s", k_names[put]);
		th_run(&r, "--server", s.url, "put-weight", name, th_p("rw.npy"), "--four-over-six", k_names[put], NULL);
		th_expect_ok(&r);
		for (int fw = -1; fw < 4; fw++) { /* -1: no scope named, the weight's */
			const char *scope = fw < 0 ? k_names[put] : k_names[fw];
			snprintf(out, sizeof out, "%s", th_p("lin"));
			linear_local(scope, out);
			snprintf(ctx, sizeof ctx, "%s", th_p("ctx.json"));
			const char *fa[16] = {"--server", s.url, "forward", name, th_p("rx.npy"), "--out", th_p("ry.npy"),
					      "--override", "quantized", "--context-out", ctx, NULL};
			if (fw >= 0) {
				fa[11] = "--four-over-six";
				fa[12] = k_names[fw];
				fa[13] = NULL;
			}
			th_runv(&r, fa);
			th_expect_ok(&r);
			snprintf(p1, sizeof p1, "%s/y.npy", out);
			same_files(th_p("ry.npy"), p1);
			th_run(&r, "--server", s.url, "backward", ctx, th_p("rdy.npy"), "--out", th_p("rb"), NULL);
			th_expect_ok(&r);
			snprintf(p1, sizeof p1, "%s/dx.npy", out);
			snprintf(p2, sizeof p2, "%s/dx.npy", th_p("rb"));
			same_files(p2, p1);
			snprintf(p1, sizeof p1, "%s/dw.npy", out);
			snprintf(p2, sizeof p2, "%s/dw.npy", th_p("rb"));
			same_files(p2, p1);
		}
	}
	/* a context gone (consumed by the first backward): recomputed from X with the scope the file records */
	th_run(&r, "--server", s.url, "forward", "w_all", th_p("rx.npy"), "--out", th_p("ry.npy"), "--override",
	       "quantized", "--four-over-six", "none", "--context-out", ctx, NULL);
	th_expect_ok(&r);
	th_slurp(ctx, p1, sizeof p1);
	assert_non_null(strstr(p1, "\"four_over_six\": \"none\""));
	th_run(&r, "--server", s.url, "backward", ctx, th_p("rdy.npy"), "--out", th_p("rb"), NULL);
	th_expect_ok(&r);
	th_run(&r, "--server", s.url, "backward", ctx, th_p("rdy.npy"), "--out", th_p("rb2"), "--recompute", NULL);
	th_expect_ok(&r);
	linear_local("none", th_p("lin"));
	snprintf(p1, sizeof p1, "%s/dw.npy", th_p("lin"));
	snprintf(p2, sizeof p2, "%s/dw.npy", th_p("rb2"));
	same_files(p2, p1);
	snprintf(p1, sizeof p1, "%s/dx.npy", th_p("lin"));
	snprintf(p2, sizeof p2, "%s/dx.npy", th_p("rb2"));
	same_files(p2, p1);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_scopes_equal_quantize),
		cmocka_unit_test(test_bad_scope_names),
		cmocka_unit_test(test_fosd_put_forward_backward),
	};
	return cmocka_run_group_tests(tests, th_setup, th_teardown);
}
