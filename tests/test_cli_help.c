/* test_cli_help.c: `fos --help` lists every command and global option, and `fos CMD --help` (and
 * `fos help CMD`) explains every flag of CMD with each of its values, as the issue lists them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_cli_harness.h"

/* Help goes to stdout, exit 0, nothing on stderr. */
static void expect_help(const th_result *r)
{
	if (r->status != 0 || r->err[0] || strncmp(r->out, "usage: fos", 10))
		fail_msg("help: exit %d, stderr [%s], stdout starts [%.40s]", r->status, r->err, r->out);
}

static void expect_has(const char *text, const char *needle)
{
	if (!strstr(text, needle))
		fail_msg("help does not mention '%s':\n%s", needle, text);
}

/* The flag has its own line in the Options section ("  --flag ...") with an explanation after it. */
static void expect_flag_line(const char *text, const char *flag)
{
	const char *opts = strstr(text, "\nOptions:\n");
	assert_non_null(opts);
	char pat[64];
	snprintf(pat, sizeof pat, "\n  %s", flag);
	const char *p = strstr(opts, pat);
	if (!p)
		fail_msg("no option line for %s:\n%s", flag, text);
	p += strlen(pat);
	if (*p != ' ' && *p != '\n')
		fail_msg("option line for %s is a different flag", flag);
	/* the explanation: some words on this line or the next */
	const char *eol = strchr(p, '\n');
	assert_non_null(eol);
	int words = 0;
	for (const char *q = p; q < eol + 40 && *q; q++)
		words += (*q == ' ' && q[1] >= 'a' && q[1] <= 'z');
	if (words < 2)
		fail_msg("option %s has no explanation", flag);
}

static void test_top_level_help(void **state)
{
	(void)state;
	const char *forms[3][2] = {{"--help", NULL}, {"-h", NULL}, {"help", NULL}};
	for (int i = 0; i < 3; i++) {
		th_result r;
		th_runv(&r, forms[i]);
		expect_help(&r);
		expect_has(r.out, "quantize");
		expect_has(r.out, "dequantize");
		expect_has(r.out, "linear");
		static const char *const cmds[] = {"health", "stats", "put-weight", "drop-weight", "list-weights",
						   "forward", "backward", "check", "load"};
		for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
			char line[40];
			snprintf(line, sizeof line, "\n  %s ", cmds[c]);
			expect_has(r.out, line);
		}
		expect_has(r.out, "--timeout DUR");
		expect_has(r.out, "FOS_TIMEOUT");
		expect_has(r.out, "--server URL");
		expect_has(r.out, "--token");
		expect_has(r.out, "FOS_SERVER");
		expect_has(r.out, "--local");
		expect_has(r.out, "'<u2'");
		expect_has(r.out, "'<f4'");
		expect_has(r.out, "Exit status");
	}
}

typedef struct cmd_help {
	const char *cmd;
	const char *flags[16];
	const char *words[24];
} cmd_help;

static const cmd_help helps[] = {
	{"quantize",
	 {"--out", "--local", "--backend", "--recipe", "--block", "--err", "--bound", "--row-scaled", "--amax", "--help",
	  NULL},
	 {"X.npy", "DIR", "4over6", "nvfp4", "1x16", "16x16", "mae", "mse", "256", "448", "cpu", "cuda", "auto",
	  "codes.npy", "scales.npy", "amax.npy", "(R, C/2)", "(R, C/16)", "AMAX.npy", NULL}},
	{"dequantize",
	 {"--codes", "--scales", "--amax", "--out", "--local", "--backend", "--bound", "--dtype", "--help", NULL},
	 {"C.npy", "S.npy", "A.npy", "OUT.npy", "256", "448", "bf16", "f32", "cpu", "cuda", "auto", "(R,)", NULL}},
	{"linear",
	 {"--out", "--local", "--backend", "--bias", "--dy", "--override", "--weight-block", "--row-scaled", "--err",
	  "--bound", "--help", NULL},
	 {"X.npy", "W.npy", "B.npy", "DY.npy", "default", "quantized", "high_precision", "dequantized", "16x16", "1x16",
	  "mae", "mse", "256", "448", "y.npy", "dx.npy", "dw.npy", "db.npy", "128", NULL}},
	{"health", {"--json", "--help", NULL}, {"serving", "draining", "Exit status", NULL}},
	{"stats", {"--json", "--help", NULL}, {"latencies", "cache", "contexts", NULL}},
	{"put-weight",
	 {"--version", "--weight-block", "--err", "--bound", "--pin", "--drop-master", "--eager-columnwise", "--json",
	  "--help", NULL},
	 {"NAME", "W.npy", "16x16", "1x16", "mae", "mse", "256", "448", "ALREADY_EXISTS", "(N, K)", NULL}},
	{"drop-weight", {"--json", "--help", NULL}, {"NAME", "NOT_FOUND", NULL}},
	{"list-weights", {"--json", "--help", NULL}, {"order of their names", "pages", NULL}},
	{"forward",
	 {"--out", "--context-out", "--version", "--override", "--row-scaled", "--bias", "--help", NULL},
	 {"NAME", "X.npy", "Y.npy", "FILE", "default", "quantized", "high_precision", "dequantized", "(M, K)",
	  "fos backward", NULL}},
	{"backward",
	 {"--out", "--keep-context", "--recompute", "--help", NULL},
	 {"CONTEXT", "DY.npy", "dx.npy", "dw.npy", "db.npy", "(M, N)", "FOS_SERVER", NULL}},
	{"check",
	 {"--bitwise", "--min-sqnr", "--max-ulps", "--json", "--remote", "--bias", "--row-scaled", "--version", "--shm",
	  "--help", NULL},
	 {"OURS.npy", "REFERENCE.npy", "ulps", "SQNR", "bf16", "float32", "uint8", "0 consistent", "1 not consistent",
	  "2 the comparison could not be made", NULL}},
	{"load",
	 {"--op", "--m", "--n", "--k", "--concurrency", "--rate", "--duration", "--requests", "--warmup", "--connections",
	  "--override", "--json", "--no-progress", "--help", NULL},
	 {"forward", "backward", "linear", "quantize", "check", "closed loop", "open loop", "coordinated omission", "p99.9",
	  "GB/s", "status code", "Exit status", NULL}},
};

static void test_command_help(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof helps / sizeof helps[0]; c++) {
		th_result r[4];
		th_run(&r[0], helps[c].cmd, "--help", NULL);
		th_run(&r[1], helps[c].cmd, "-h", NULL);
		th_run(&r[2], "help", helps[c].cmd, NULL);
		/* --help wins over anything else on the line, bad flags included */
		th_run(&r[3], helps[c].cmd, "--no-such-flag", "x.npy", "--help", NULL);
		for (int i = 0; i < 4; i++) {
			expect_help(&r[i]);
			assert_string_equal(r[i].out, r[0].out);
		}
		char usage[64];
		snprintf(usage, sizeof usage, "usage: fos [global options] %s ", helps[c].cmd);
		expect_has(r[0].out, usage);
		for (int f = 0; helps[c].flags[f]; f++) {
			expect_has(r[0].out, helps[c].flags[f]);
			if (strcmp(helps[c].flags[f], "--help"))
				expect_flag_line(r[0].out, helps[c].flags[f]);
		}
		for (int w = 0; helps[c].words[w]; w++)
			expect_has(r[0].out, helps[c].words[w]);
	}
}

/* Global options before the command are accepted with help too. */
static void test_help_after_global_options(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "--server", "ipc:///tmp/s", "--token=abc", "linear", "--help", NULL);
	expect_help(&r);
	expect_has(r.out, "--weight-block");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_top_level_help),
		cmocka_unit_test(test_command_help),
		cmocka_unit_test(test_help_after_global_options),
	};
	return cmocka_run_group_tests_name("cli_help", tests, th_setup, th_teardown);
}
