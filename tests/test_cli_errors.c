/* test_cli_errors.c: every kind of bad input to `fos` (bad command line, bad option values and
 * combinations, missing / non-.npy / malformed files, wrong dtype, rank or shape, bad amax and scale
 * values, unusable output paths, no daemon, the daemon-only subcommands' command lines) exits
 * non-zero with exactly one "fos: ..." line on stderr naming the problem: 2 for the command line,
 * 1 for inputs and failures. Errors only a running fosd can find are in test_cli_remote.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "backend.h"
#include "test_cli_harness.h"

/* ---- fixtures ---------------------------------------------------------------------------------- */

static void save_zeros(const char *name, int dtype, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
	int64_t shape[3] = {d0, d1, d2};
	size_t n = 1;
	for (int i = 0; i < ndim; i++)
		n *= (size_t)shape[i];
	void *z = calloc(n + 1, 4);
	assert_non_null(z);
	fos_err e = {0, ""};
	if (npy_write(th_p(name), dtype, ndim, shape, z, &e))
		fail_msg("%s", e.msg);
	free(z);
}

static void save_raw(const char *name, const char *bytes, size_t n)
{
	FILE *f = fopen(th_p(name), "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(bytes, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* A version 1.0 file with the given header dict (padded to 128 bytes) and ndata zero bytes. */
static void save_npy_text(const char *name, const char *dict, size_t ndata)
{
	char *b = calloc(1, 128 + ndata);
	assert_non_null(b);
	size_t dl = strlen(dict);
	assert_true(dl < 100);
	memcpy(b, "\x93NUMPY\x01\x00\x76\x00", 10);
	memset(b + 10, ' ', 118);
	memcpy(b + 10, dict, dl);
	b[127] = '\n';
	save_raw(name, b, 128 + ndata);
	free(b);
}

static int errors_setup(void **state)
{
	if (th_setup(state))
		return -1;
	/* quantize inputs */
	save_zeros("q.npy", NPY_U2, 2, 32, 64, 0);
	save_zeros("u8.npy", NPY_U1, 2, 32, 64, 0);
	save_zeros("v1.npy", NPY_U2, 1, 64, 0, 0);
	save_zeros("v3.npy", NPY_F4, 3, 2, 16, 16);
	save_zeros("s0.npy", NPY_F4, 0, 0, 0, 0);
	save_zeros("c20.npy", NPY_U2, 2, 4, 20, 0);
	save_zeros("q8.npy", NPY_F4, 2, 8, 32, 0);
	save_zeros("empty.npy", NPY_U2, 2, 0, 16, 0);
	save_raw("text.npy", "this is not a .npy file\n", 24);
	save_npy_text("badhdr.npy", "{'descr': '<u2' 'fortran_order': False, 'shape': (32, 64), }", 32 * 64 * 2);
	save_npy_text("fortran.npy", "{'descr': '<u2', 'fortran_order': True, 'shape': (2, 16), }", 64);
	save_npy_text("trunc.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 16), }", 63);
	assert_int_equal(mkdir(th_p("adir"), 0755), 0);
	/* amax overrides */
	float a[40];
	for (int i = 0; i < 40; i++)
		a[i] = 1.0f;
	th_save(th_p("amax0.npy"), NPY_F4, 0, 0, 0, a);
	th_save(th_p("amaxR.npy"), NPY_F4, 1, 32, 0, a);
	th_save(th_p("amaxR1.npy"), NPY_F4, 1, 33, 0, a);
	th_save(th_p("amax2d.npy"), NPY_F4, 2, 32, 1, a);
	uint16_t one_bf = 0x3F80;
	th_save(th_p("amaxbf.npy"), NPY_U2, 0, 0, 0, &one_bf);
	float nan = NAN;
	th_save(th_p("amaxnan.npy"), NPY_F4, 0, 0, 0, &nan);
	a[7] = -1.0f;
	th_save(th_p("amaxneg.npy"), NPY_F4, 1, 32, 0, a);
	/* dequantize inputs */
	save_zeros("codes.npy", NPY_U1, 2, 32, 32, 0);
	save_zeros("scales.npy", NPY_U1, 2, 32, 4, 0);
	save_zeros("scales3.npy", NPY_U1, 2, 32, 3, 0);
	save_zeros("scales31.npy", NPY_U1, 2, 31, 4, 0);
	save_zeros("codes_f32.npy", NPY_F4, 2, 32, 32, 0);
	save_zeros("codes_1d.npy", NPY_U1, 1, 32, 0, 0);
	save_zeros("codes_odd.npy", NPY_U1, 2, 2, 4, 0);
	save_zeros("scales_odd.npy", NPY_U1, 2, 2, 1, 0);
	save_zeros("codes_empty.npy", NPY_U1, 2, 0, 8, 0);
	uint8_t sc[32 * 4];
	memset(sc, 0x38, sizeof sc);
	sc[4 * 5 + 2] = 0x7F;
	th_save(th_p("scales_nan.npy"), NPY_U1, 2, 32, 4, sc);
	sc[4 * 5 + 2] = 0x38;
	sc[4 * 31 + 3] = 0xB8;
	th_save(th_p("scales_neg.npy"), NPY_U1, 2, 32, 4, sc);
	/* linear inputs */
	save_zeros("lx.npy", NPY_U2, 2, 128, 128, 0);
	save_zeros("lw.npy", NPY_F4, 2, 128, 128, 0);
	save_zeros("lw96.npy", NPY_U2, 2, 128, 96, 0);
	save_zeros("lx64.npy", NPY_U2, 2, 64, 128, 0);
	save_zeros("lw100.npy", NPY_U2, 2, 100, 128, 0);
	save_zeros("lx104.npy", NPY_U2, 2, 128, 104, 0);
	save_zeros("lw104.npy", NPY_U2, 2, 128, 104, 0);
	save_zeros("lw_u8.npy", NPY_U1, 2, 128, 128, 0);
	save_zeros("lb.npy", NPY_U2, 1, 128, 0, 0);
	save_zeros("lb129.npy", NPY_U2, 1, 129, 0, 0);
	save_zeros("lb2d.npy", NPY_U2, 2, 1, 128, 0);
	save_zeros("ldy.npy", NPY_U2, 2, 128, 128, 0);
	save_zeros("ldy64.npy", NPY_U2, 2, 128, 64, 0);
	save_zeros("ldy_u8.npy", NPY_U1, 2, 128, 128, 0);
	return 0;
}

/* ---- the table ----------------------------------------------------------------------------------
 * Arguments starting with '@' name files in the test directory. Each case: exit status, a piece of
 * the error line that names the problem. */
typedef struct ecase {
	int code;
	const char *needle;
	const char *args[20];
} ecase;

static void run_table(const ecase *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *args[24];
		int k = 0;
		for (; k < 20 && cases[i].args[k]; k++)
			args[k] = cases[i].args[k][0] == '@' ? th_p(cases[i].args[k] + 1) : cases[i].args[k];
		args[k] = NULL;
		th_result r;
		th_runv(&r, args);
		char ctx[512] = "";
		size_t used = 0;
		for (int j = 0; j < k && used < sizeof ctx - 1; j++) {
			int w = snprintf(ctx + used, sizeof ctx - used, " %s", cases[i].args[j]);
			if (w < 0)
				break;
			used += (size_t)w;
		}
		if (r.status == 0 || r.status != cases[i].code || !strstr(r.err, cases[i].needle))
			print_error("case %zu: fos%s\n", i, ctx);
		th_expect_fail(&r, cases[i].code, cases[i].needle);
	}
}

#define Q "quantize"
#define DQ "dequantize"
#define L "linear"

static void test_global_usage(void **state)
{
	(void)state;
	static const ecase cases[] = {
		{2, "no command", {NULL}},
		{2, "unknown command 'frobnicate'", {"frobnicate", NULL}},
		{2, "unknown global option '--bogus'", {"--bogus", Q, NULL}},
		{2, "needs a value", {"--server", NULL}},
		{2, "needs a value", {"--token", "--help", NULL}},
		{2, "unknown command 'nosuch'", {"help", "nosuch", NULL}},
		{2, "no command", {"--server", "ipc:///tmp/x", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
}

static void test_quantize_command_line(void **state)
{
	(void)state;
	static const ecase cases[] = {
		{2, "missing argument X.npy", {Q, "--out", "@o", "--local", NULL}},
		{2, "unexpected argument 'extra'", {Q, "@q.npy", "extra", "--out", "@o", "--local", NULL}},
		{2, "unknown option '--blok'", {Q, "@q.npy", "--out", "@o", "--local", "--blok", "1x16", NULL}},
		{2, "unknown option '-x'", {Q, "@q.npy", "--out", "@o", "--local", "-x", NULL}},
		{2, "--block given twice", {Q, "@q.npy", "--out", "@o", "--local", "--block", "1x16", "--block", "1x16", NULL}},
		{2, "--block needs a value", {Q, "@q.npy", "--out", "@o", "--local", "--block", NULL}},
		{2, "--block needs a value", {Q, "@q.npy", "--out", "@o", "--block", "--local", NULL}},
		{2, "--block has an empty value", {Q, "@q.npy", "--out", "@o", "--local", "--block=", NULL}},
		{2, "--local takes no value", {Q, "@q.npy", "--out", "@o", "--local=yes", NULL}},
		{2, "bad value '4x4' for --block", {Q, "@q.npy", "--out", "@o", "--local", "--block", "4x4", NULL}},
		{2, "bad value 'mad' for --err", {Q, "@q.npy", "--out", "@o", "--local", "--err", "mad", NULL}},
		{2, "bad value '300' for --bound", {Q, "@q.npy", "--out", "@o", "--local", "--bound", "300", NULL}},
		{2, "bad value '256.0' for --bound", {Q, "@q.npy", "--out", "@o", "--local", "--bound=256.0", NULL}},
		{2, "bad value 'mxfp4' for --recipe", {Q, "@q.npy", "--out", "@o", "--local", "--recipe", "mxfp4", NULL}},
		{2, "bad value 'tpu' for --backend", {Q, "@q.npy", "--out", "@o", "--local", "--backend", "tpu", NULL}},
		{2, "--bound 256 cannot be used with --recipe nvfp4",
		 {Q, "@q.npy", "--out", "@o", "--local", "--recipe", "nvfp4", "--bound", "256", NULL}},
		{2, "--err cannot be used with --recipe nvfp4",
		 {Q, "@q.npy", "--out", "@o", "--local", "--recipe", "nvfp4", "--err", "mse", NULL}},
		{2, "--row-scaled cannot be used with --block 16x16",
		 {Q, "@q.npy", "--out", "@o", "--local", "--row-scaled", "--block", "16x16", NULL}},
		{2, "--out DIR is required", {Q, "@q.npy", "--local", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
	assert_false(th_exists(th_p("o")));
}

static void test_quantize_inputs(void **state)
{
	(void)state;
	static const ecase cases[] = {
		{1, "nothere.npy: cannot open: No such file", {Q, "@nothere.npy", "--out", "@o", "--local", NULL}},
		{1, "text.npy: not a .npy file", {Q, "@text.npy", "--out", "@o", "--local", NULL}},
		{1, "adir: not a regular file (a directory)", {Q, "@adir", "--out", "@o", "--local", NULL}},
		{1, "badhdr.npy: bad .npy header: expected ',' or '}'", {Q, "@badhdr.npy", "--out", "@o", "--local", NULL}},
		{1, "fortran_order True is not supported", {Q, "@fortran.npy", "--out", "@o", "--local", NULL}},
		{1, "trunc.npy: truncated .npy data", {Q, "@trunc.npy", "--out", "@o", "--local", NULL}},
		{1, "u8.npy: dtype uint8 ('|u1') is not accepted here (expected bf16 ('<u2') or float32 ('<f4'))",
		 {Q, "@u8.npy", "--out", "@o", "--local", NULL}},
		{1, "v1.npy: expected a 2-d array (R, C), got shape (64,)", {Q, "@v1.npy", "--out", "@o", "--local", NULL}},
		{1, "got shape (2, 16, 16)", {Q, "@v3.npy", "--out", "@o", "--local", NULL}},
		{1, "got shape ()", {Q, "@s0.npy", "--out", "@o", "--local", NULL}},
		{1, "c20.npy: shape (4, 20): columns 20 not divisible by 16", {Q, "@c20.npy", "--out", "@o", "--local", NULL}},
		{1, "q8.npy: shape (8, 32): rows 8 not divisible by 16",
		 {Q, "@q8.npy", "--out", "@o", "--local", "--block", "16x16", NULL}},
		{1, "empty.npy: shape (0, 16)", {Q, "@empty.npy", "--out", "@o", "--local", NULL}},
		/* --amax */
		{1, "nope.npy: cannot open", {Q, "@q.npy", "--out", "@o", "--local", "--amax", "@nope.npy", NULL}},
		{1, "amaxbf.npy: dtype bf16 ('<u2') is not accepted here (expected float32 ('<f4'))",
		 {Q, "@q.npy", "--out", "@o", "--local", "--amax", "@amaxbf.npy", NULL}},
		{1, "a per-row amax needs --row-scaled", {Q, "@q.npy", "--out", "@o", "--local", "--amax", "@amaxR.npy", NULL}},
		{1, "a per-tensor amax must have shape (), got (32, 1)",
		 {Q, "@q.npy", "--out", "@o", "--local", "--amax", "@amax2d.npy", NULL}},
		{1, "must have shape (32,)",
		 {Q, "@q.npy", "--out", "@o", "--local", "--row-scaled", "--amax", "@amax0.npy", NULL}},
		{1, "got (33,)", {Q, "@q.npy", "--out", "@o", "--local", "--row-scaled", "--amax", "@amaxR1.npy", NULL}},
		{1, "amax = nan is not a valid amax", {Q, "@q.npy", "--out", "@o", "--local", "--amax", "@amaxnan.npy", NULL}},
		{1, "amax[7] = -1 is not a valid amax",
		 {Q, "@q.npy", "--out", "@o", "--local", "--row-scaled", "--amax", "@amaxneg.npy", NULL}},
		/* output paths */
		{1, "text.npy: exists and is not a directory", {Q, "@q.npy", "--out", "@text.npy", "--local", NULL}},
		{1, "cannot create directory", {Q, "@q.npy", "--out", "@text.npy/sub", "--local", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
	assert_false(th_exists(th_p("o")));
}

static void test_dequantize_errors(void **state)
{
	(void)state;
#define DQOK "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amax0.npy"
	static const ecase cases[] = {
		{2, "--codes C.npy is required", {DQ, "--scales", "@scales.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{2, "--scales S.npy is required", {DQ, "--codes", "@codes.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{2, "--amax A.npy is required", {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--out", "@d.npy", "--local", NULL}},
		{2, "--out OUT.npy is required", {DQ, DQOK, "--local", NULL}},
		{2, "unexpected argument", {DQ, "@codes.npy", DQOK, "--out", "@d.npy", "--local", NULL}},
		{2, "bad value 'f16' for --dtype", {DQ, DQOK, "--out", "@d.npy", "--local", "--dtype", "f16", NULL}},
		{2, "bad value '512' for --bound", {DQ, DQOK, "--out", "@d.npy", "--local", "--bound", "512", NULL}},
		{2, "unknown option '--recipe'", {DQ, DQOK, "--out", "@d.npy", "--local", "--recipe", "nvfp4", NULL}},
		{1, "codes_f32.npy: dtype float32 ('<f4') is not accepted here (expected uint8 ('|u1'))",
		 {DQ, "--codes", "@codes_f32.npy", "--scales", "@scales.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "codes_1d.npy: expected a 2-d array (R, C/2), got shape (32,)",
		 {DQ, "--codes", "@codes_1d.npy", "--scales", "@scales.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "scales3.npy: shape (32, 3) does not match codes (32, 32) (expected (32, 4)",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales3.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "scales31.npy: shape (31, 4) does not match",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales31.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "not a whole number of 16-element blocks",
		 {DQ, "--codes", "@codes_odd.npy", "--scales", "@scales_odd.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "codes_empty.npy: shape (0, 8) is empty",
		 {DQ, "--codes", "@codes_empty.npy", "--scales", "@scales.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "codes_1d.npy: expected a 2-d array (R, C/16)",
		 {DQ, "--codes", "@codes.npy", "--scales", "@codes_1d.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "amaxR1.npy: shape (33,) matches neither () (per-tensor) nor (32,)",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amaxR1.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "amax2d.npy: shape (32, 1) matches neither",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amax2d.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "amaxbf.npy: dtype bf16",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amaxbf.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "amax = nan is not a valid amax",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amaxnan.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "amax[7] = -1",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amaxneg.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "byte 0x7F at [5, 2] is not a valid E4M3 scale (NaN)",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales_nan.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "byte 0xB8 at [31, 3] is not a valid E4M3 scale (negative)",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales_neg.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "text.npy: not a .npy file",
		 {DQ, "--codes", "@codes.npy", "--scales", "@text.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "missing.npy: cannot open",
		 {DQ, "--codes", "@missing.npy", "--scales", "@scales.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--local", NULL}},
		{1, "text.npy: exists and is not a directory", {DQ, DQOK, "--out", "@text.npy/d.npy", "--local", NULL}},
		{1, "cannot write", {DQ, DQOK, "--out", "@adir", "--local", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
	assert_false(th_exists(th_p("d.npy")));
#undef DQOK
}

static void test_linear_errors(void **state)
{
	(void)state;
	static const ecase cases[] = {
		{2, "missing argument W.npy", {L, "@lx.npy", "--out", "@lo", "--local", NULL}},
		{2, "missing argument X.npy", {L, "--out", "@lo", "--local", NULL}},
		{2, "--out DIR is required", {L, "@lx.npy", "@lw.npy", "--local", NULL}},
		{2, "bad value 'fast' for --override (expected default, quantized, high_precision or dequantized)",
		 {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--override", "fast", NULL}},
		{2, "bad value '8x8' for --weight-block", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--weight-block", "8x8", NULL}},
		{2, "bad value 'l1' for --err", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--err", "l1", NULL}},
		{2, "bad value '0' for --bound", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--bound", "0", NULL}},
		{2, "--override quantized cannot be used with --row-scaled",
		 {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--override", "quantized", "--row-scaled", NULL}},
		{2, "unknown option '--block'", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--block", "1x16", NULL}},
		{2, "--dy needs a value", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--dy", NULL}},
		{1, "v1.npy: expected a 2-d array (M, K), got shape (64,)", {L, "@v1.npy", "@lw.npy", "--out", "@lo", "--local", NULL}},
		{1, "lw_u8.npy: dtype uint8", {L, "@lx.npy", "@lw_u8.npy", "--out", "@lo", "--local", NULL}},
		{1, "lw96.npy: shape (128, 96) has K = 96 columns but", {L, "@lx.npy", "@lw96.npy", "--out", "@lo", "--local", NULL}},
		{1, "N = 100 is not a positive multiple of 16", {L, "@lx64.npy", "@lw100.npy", "--out", "@lo", "--local", NULL}},
		{1, "K = 104 is not a positive multiple of 16", {L, "@lx104.npy", "@lw104.npy", "--out", "@lo", "--local", NULL}},
		{1, "lb129.npy: shape (129,) does not match N = 128",
		 {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--bias", "@lb129.npy", NULL}},
		{1, "lb2d.npy: expected a 1-d array (N,), got shape (1, 128)",
		 {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--bias", "@lb2d.npy", NULL}},
		{1, "ldy64.npy: shape (128, 64) does not match (M, N) = (128, 128)",
		 {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--dy", "@ldy64.npy", NULL}},
		{1, "ldy_u8.npy: dtype uint8", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--dy", "@ldy_u8.npy", NULL}},
		{1, "nody.npy: cannot open", {L, "@lx.npy", "@lw.npy", "--out", "@lo", "--local", "--dy", "@nody.npy", NULL}},
		{1, "fortran_order True", {L, "@fortran.npy", "@lw.npy", "--out", "@lo", "--local", NULL}},
		{1, "exists and is not a directory", {L, "@lx.npy", "@lw.npy", "--out", "@text.npy", "--local", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
	assert_false(th_exists(th_p("lo")));
}

/* Without --local the request goes to fosd: with none listening, exit 1 naming the URL that was
 * tried (--server over $FOS_SERVER); option errors still come first, and --backend needs --local. */
static void test_no_daemon(void **state)
{
	(void)state;
	char url[600], env_url[700];
	snprintf(url, sizeof url, "ipc://%s", th_p("nobody.sock"));
	snprintf(env_url, sizeof env_url, "FOS_SERVER=ipc://%s", th_p("nobody-env.sock"));
	const char *env[] = {env_url, NULL};
	const char *cmds[][12] = {
		{Q, th_p("q.npy"), "--out", th_p("o"), NULL},
		{DQ, "--codes", th_p("codes.npy"), "--scales", th_p("scales.npy"), "--amax", th_p("amax0.npy"), "--out",
		 th_p("d.npy"), NULL},
		{L, th_p("lx.npy"), th_p("lx.npy"), "--out", th_p("lo"), NULL},
		{"health", NULL},
		{"stats", "--json", NULL},
		{"put-weight", "w", th_p("lx.npy"), NULL},
		{"drop-weight", "w", NULL},
		{"list-weights", NULL},
		{"forward", "w", th_p("lx.npy"), "--out", th_p("y.npy"), NULL},
		{"load", "--requests", "1", NULL},
	};
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		const char *args[16] = {"--server", url};
		int n = 2;
		for (int k = 0; cmds[i][k]; k++)
			args[n++] = cmds[i][k];
		args[n] = NULL;
		th_result r;
		/* FOS_SERVER names another socket: --server wins */
		th_runv_env(&r, env, args);
		char want[700];
		snprintf(want, sizeof want, "no fosd answers at %s", url);
		if (r.status != 1)
			print_error("case %zu: %s\n", i, cmds[i][0]);
		th_expect_fail(&r, 1, want);
		/* and $FOS_SERVER alone is used */
		th_runv_env(&r, env, args + 2);
		th_expect_fail(&r, 1, env_url + strlen("FOS_SERVER="));
	}
	assert_false(th_exists(th_p("o")));
	assert_false(th_exists(th_p("lo")));
	assert_false(th_exists(th_p("d.npy")));
	assert_false(th_exists(th_p("y.npy")));
	static const ecase cases[] = {
		{2, "--backend needs --local", {Q, "@q.npy", "--out", "@o", "--backend", "cpu", NULL}},
		{2, "--backend needs --local", {L, "@lx.npy", "@lx.npy", "--out", "@lo", "--backend", "auto", NULL}},
		{2, "--backend needs --local",
		 {DQ, "--codes", "@codes.npy", "--scales", "@scales.npy", "--amax", "@amax0.npy", "--out", "@d.npy", "--backend",
		  "cpu", NULL}},
		/* option errors are still reported first */
		{2, "bad value '4x4' for --block", {Q, "@q.npy", "--out", "@o", "--block", "4x4", NULL}},
		{2, "bad value 'soon' for --timeout", {"--timeout", "soon", "health", NULL}},
		{2, "--timeout 0.1ms is out of range", {"--timeout=0.1ms", "health", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
	const char *tenv[] = {"FOS_TIMEOUT=never", NULL};
	const char *targs[] = {"health", NULL};
	th_result r;
	th_runv_env(&r, tenv, targs);
	th_expect_fail(&r, 2, "bad value 'never' for FOS_TIMEOUT");
}

/* The daemon-only subcommands: command-line mistakes are caught before anything is sent (exit 2). */
static void test_daemon_commands_usage(void **state)
{
	(void)state;
	static const ecase cases[] = {
		{2, "health: unexpected argument 'now'", {"health", "now", NULL}},
		{2, "health: unknown option '--verbose'", {"health", "--verbose", NULL}},
		{2, "stats: unknown option '--yaml'", {"stats", "--yaml", NULL}},
		{2, "list-weights: unexpected argument 'x'", {"list-weights", "x", NULL}},
		{2, "put-weight: missing argument W.npy", {"put-weight", "w", NULL}},
		{2, "put-weight: missing argument NAME", {"put-weight", NULL}},
		{2, "bad value '0' for --version", {"put-weight", "w", "@lx.npy", "--version", "0", NULL}},
		{2, "bad value 'v2' for --version", {"put-weight", "w", "@lx.npy", "--version", "v2", NULL}},
		{2, "bad value '8x8' for --weight-block", {"put-weight", "w", "@lx.npy", "--weight-block", "8x8", NULL}},
		{2, "bad value '512' for --bound", {"put-weight", "w", "@lx.npy", "--bound", "512", NULL}},
		{2, "weight name 'my weight' has a character outside", {"put-weight", "my weight", "@lx.npy", NULL}},
		{2, "is 129 bytes long", {"drop-weight",
					  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
					  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
					  NULL}},
		{2, "drop-weight: missing argument NAME", {"drop-weight", NULL}},
		{2, "forward: --out Y.npy is required", {"forward", "w", "@lx.npy", NULL}},
		{2, "forward: missing argument X.npy", {"forward", "w", NULL}},
		{2, "--override quantized cannot be used with --row-scaled",
		 {"forward", "w", "@lx.npy", "--out", "@y.npy", "--override", "quantized", "--row-scaled", NULL}},
		{2, "bad value 'fast' for --override", {"forward", "w", "@lx.npy", "--out", "@y.npy", "--override", "fast", NULL}},
		{2, "bad value '-1' for --version", {"forward", "w", "@lx.npy", "--out", "@y.npy", "--version", "-1", NULL}},
		{2, "backward: --out DIR is required", {"backward", "@c.json", "@ldy.npy", NULL}},
		{2, "backward: missing argument DY.npy", {"backward", "@c.json", NULL}},
		{2, "backward: option --recompute takes no value", {"backward", "@c.json", "@ldy.npy", "--out", "@b", "--recompute=1", NULL}},
		{2, "bad value 'gemm' for --op", {"load", "--op", "gemm", NULL}},
		{2, "load: K = 24 is not a positive multiple of 16", {"load", "--m", "100", "--k", "24", NULL}},
		{2, "bad value '0' for --m", {"load", "--m", "0", NULL}},
		{2, "load: --k 24 is not divisible by 16", {"load", "--op", "quantize", "--k", "24", NULL}},
		{2, "load: --n has no meaning for --op quantize", {"load", "--op", "quantize", "--n", "128", NULL}},
		{2, "load: --override has no meaning for --op quantize", {"load", "--op", "quantize", "--override", "quantized", NULL}},
		{2, "load: give --duration or --requests, not both", {"load", "--duration", "1s", "--requests", "5", NULL}},
		{2, "bad value '0' for --rate", {"load", "--rate", "0", NULL}},
		{2, "bad value 'fast' for --rate", {"load", "--rate", "fast", NULL}},
		{2, "bad value '0' for --concurrency", {"load", "--concurrency", "0", NULL}},
		{2, "bad value '5x' for --duration", {"load", "--duration", "5x", NULL}},
		{2, "bad value '-1s' for --warmup", {"load", "--warmup", "-1s", NULL}},
		{2, "bad value '0' for --requests", {"load", "--requests", "0", NULL}},
		{2, "bad value '65' for --connections", {"load", "--connections", "65", NULL}},
		{2, "load: unexpected argument 'now'", {"load", "now", NULL}},
	};
	run_table(cases, sizeof cases / sizeof cases[0]);
	assert_false(th_exists(th_p("y.npy")));
	assert_false(th_exists(th_p("b")));
}

/* --backend cuda where no GPU is usable: exit 1 naming the backend. (Skipped where CUDA works.) */
static void test_backend_unavailable(void **state)
{
	(void)state;
	fos_err e = {0, ""};
	fos_backend *be = fos_backend_open("cuda", &e);
	if (be) {
		be->destroy(be);
		skip();
	}
	th_result r;
	th_run(&r, Q, th_p("q.npy"), "--out", th_p("o"), "--local", "--backend", "cuda", NULL);
	th_expect_fail(&r, 1, "cannot open backend 'cuda'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_global_usage),
		cmocka_unit_test(test_quantize_command_line),
		cmocka_unit_test(test_quantize_inputs),
		cmocka_unit_test(test_dequantize_errors),
		cmocka_unit_test(test_linear_errors),
		cmocka_unit_test(test_no_daemon),
		cmocka_unit_test(test_daemon_commands_usage),
		cmocka_unit_test(test_backend_unavailable),
	};
	return cmocka_run_group_tests_name("cli_errors", tests, errors_setup, th_teardown);
}
