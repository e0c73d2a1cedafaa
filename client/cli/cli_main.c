/* cli_main.c: main() of `fos`: global options, the command table, top-level help. Only main lives
 * here (tests link the other CLI objects and must not pull this one in). */
#include "cli.h"

#include <string.h>

typedef struct cli_command {
	const char *name;
	int (*main)(const cli_global *g, int argc, char **argv);
	const char *summary;
} cli_command;

static const cli_command cli_commands[] = {
	{"quantize", cli_quantize_main, "quantize a matrix (.npy) to NVFP4 codes, scales and amax (4/6 or nvfp4)"},
	{"dequantize", cli_dequantize_main, "turn codes, scales and amax back into a bf16 or float32 matrix"},
	{"linear", cli_linear_main, "one NVFP4 linear layer: Y = X W^T (+ bias), and dX, dW, db with --dy"},
	{"health", cli_health_main, "is fosd up? its version, backend, device and uptime"},
	{"stats", cli_stats_main, "fosd's counters: requests and latencies by op, cache, contexts"},
	{"put-weight", cli_put_weight_main, "quantize a weight (.npy) once into fosd's cache under a name"},
	{"drop-weight", cli_drop_weight_main, "remove a weight from fosd's cache"},
	{"list-weights", cli_list_weights_main, "the weights in fosd's cache"},
	{"forward", cli_forward_main, "Y = X W^T (+ bias) with a cached weight; --context-out for a backward"},
	{"backward", cli_backward_main, "dX, dW (and db) from a forward's context file and dY"},
	{"check", cli_check_main, "compare two .npy results (or, --remote, a Y with fosd's): differ, ulps, SQNR"},
	{"load", cli_load_main, "load-test fosd: closed loop or fixed rate, latency percentiles, throughput"},
};
#define CLI_NCOMMANDS ((int)(sizeof cli_commands / sizeof cli_commands[0]))

static void cli_main_help(FILE *f)
{
	fprintf(f, "usage: fos [global options] COMMAND [ARGS...]\n"
		   "       fos COMMAND --help      (every flag of COMMAND)\n"
		   "\n"
		   "fos quantizes, dequantizes and runs NVFP4 four-over-six linear layers on .npy files,\n"
		   "bit-exact to NUMERICS.md, through a running fosd (quantize, dequantize and linear also\n"
		   "in this process with --local: the same bytes either way). It also manages fosd's weight\n"
		   "cache, runs forward/backward against it, checks results for consistency and load-tests.\n"
		   "\n"
		   "Commands:\n");
	for (int i = 0; i < CLI_NCOMMANDS; i++)
		fprintf(f, "  %-13s %s\n", cli_commands[i].name, cli_commands[i].summary);
	fprintf(f, "\n"
		   "Global options (before or after COMMAND):\n"
		   "  --server URL   the fosd to talk to: ipc://PATH, tcp://HOST:PORT or\n"
		   "                 tls+tcp://HOST:PORT (default $FOS_SERVER, else\n"
		   "                 " CLI_DEFAULT_SERVER ")\n"
		   "  --token T      the tenant's secret, for a fosd with a tokens file (default\n"
		   "                 $FOS_TOKEN)\n"
		   "  --timeout DUR  how long one request to fosd may take, e.g. 30s, 500ms (default\n"
		   "                 $FOS_TIMEOUT, else 60s)\n"
		   "  --tls-ca FILE  tls+tcp: PEM file of the CAs that may sign fosd's certificate\n"
		   "                 (default $FOS_TLS_CA, else the system's)\n"
		   "  --tls-server-name NAME\n"
		   "                 tls+tcp: the name fosd's certificate must carry (default: the\n"
		   "                 URL's host)\n"
		   "  --quiet        print nothing on success (errors still go to stderr; the exit\n"
		   "                 status tells)\n"
		   "  --json         print what the command reports as one JSON object\n"
		   "  -h, --help     this help\n"
		   "  --version      print fos's version (that of libfos) and exit\n"
		   "\n"
		   "Arrays are .npy files (format 1.0-3.0, C order): bf16 as '<u2' holding bf16 bit\n"
		   "patterns, float32 as '<f4', codes and scales as uint8 '|u1'. Inputs may be bf16 or\n"
		   "float32.\n"
		   "\n"
		   "Exit status: 0 success; 1 bad input file, failed computation or fosd error; 2 bad\n"
		   "command line (fos check: 0 consistent, 1 not consistent, 2 could not compare).\n"
		   "Every error is one line on stderr starting with \"fos: \".\n");
}

int main(int argc, char **argv)
{
	cli_global g;
	fos_err e = {0, ""};
	if (cli_global_init(&g, &e))
		return cli_report(&e, CLI_EXIT_USAGE);
	cli_global_bind(&g); /* global options after the command too */
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			cli_main_help(stdout);
			return CLI_EXIT_OK;
		}
		if (!strcmp(a, "--version")) {
			printf("fos %s\n", fos_version());
			return CLI_EXIT_OK;
		}
		int r = cli_global_arg(&g, argc, argv, &i, &e);
		if (r < 0)
			return cli_report(&e, CLI_EXIT_USAGE);
		if (!r)
			return cli_fail(CLI_EXIT_USAGE, "unknown global option '%s' (see 'fos --help')", a);
	}
	if (i >= argc)
		return cli_fail(CLI_EXIT_USAGE, "no command given (see 'fos --help')");
	const char *name = argv[i];
	if (!strcmp(name, "help")) {
		if (i + 1 >= argc) {
			cli_main_help(stdout);
			return CLI_EXIT_OK;
		}
		for (int c = 0; c < CLI_NCOMMANDS; c++) {
			if (!strcmp(argv[i + 1], cli_commands[c].name)) {
				char *hv[2] = {argv[i + 1], "--help"};
				return cli_commands[c].main(&g, 2, hv);
			}
		}
		return cli_fail(CLI_EXIT_USAGE, "unknown command '%s' (see 'fos --help')", argv[i + 1]);
	}
	for (int c = 0; c < CLI_NCOMMANDS; c++)
		if (!strcmp(name, cli_commands[c].name))
			return cli_commands[c].main(&g, argc - i, argv + i);
	return cli_fail(CLI_EXIT_USAGE, "unknown command '%s' (see 'fos --help')", name);
}
