/* cli_main.c: main() of `fos`: global options, the command table, top-level help. Only main lives
 * here (tests link the other CLI objects and must not pull this one in). */
#include "cli.h"

#include <stdlib.h>
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
};
#define CLI_NCOMMANDS ((int)(sizeof cli_commands / sizeof cli_commands[0]))

static void cli_main_help(FILE *f)
{
	fprintf(f, "usage: fos [global options] COMMAND [ARGS...]\n"
		   "       fos COMMAND --help      (every flag of COMMAND)\n"
		   "\n"
		   "fos quantizes, dequantizes and runs NVFP4 four-over-six linear layers on .npy files,\n"
		   "bit-exact to NUMERICS.md. With --local the numbers are computed in this process;\n"
		   "without it the request goes to a running fosd (not available in this build yet).\n"
		   "\n"
		   "Commands:\n");
	for (int i = 0; i < CLI_NCOMMANDS; i++)
		fprintf(f, "  %-12s %s\n", cli_commands[i].name, cli_commands[i].summary);
	fprintf(f, "\n"
		   "Global options (before COMMAND):\n"
		   "  --server URL   the fosd to use without --local (default $FOS_SERVER, else\n"
		   "                 " CLI_DEFAULT_SERVER ")\n"
		   "  --token T      auth token for fosd (default $FOS_TOKEN)\n"
		   "  -h, --help     this help\n"
		   "\n"
		   "Arrays are .npy files (format 1.0-3.0, C order): bf16 as '<u2' holding bf16 bit\n"
		   "patterns, float32 as '<f4', codes and scales as uint8 '|u1'. Inputs may be bf16 or\n"
		   "float32.\n"
		   "\n"
		   "Exit status: 0 success; 1 bad input file or failed computation; 2 bad command line.\n"
		   "Every error is one line on stderr starting with \"fos: \".\n");
}

/* --name VALUE or --name=VALUE at argv[*i]; returns 1 when matched (value in *out), 0 when not, -1
 * when the value is missing. */
static int cli_global_opt(int argc, char **argv, int *i, const char *name, const char **out)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, n))
		return 0;
	if (a[n] == '=') {
		*out = a + n + 1;
		return **out ? 1 : -1;
	}
	if (a[n])
		return 0;
	if (*i + 1 >= argc || !argv[*i + 1][0] || !strncmp(argv[*i + 1], "--", 2))
		return -1;
	*out = argv[++*i];
	return 1;
}

int main(int argc, char **argv)
{
	cli_global g = {getenv("FOS_SERVER"), getenv("FOS_TOKEN")};
	if (!g.server || !g.server[0])
		g.server = CLI_DEFAULT_SERVER;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			cli_main_help(stdout);
			return CLI_EXIT_OK;
		}
		int r = cli_global_opt(argc, argv, &i, "--server", &g.server);
		if (!r)
			r = cli_global_opt(argc, argv, &i, "--token", &g.token);
		if (r < 0)
			return cli_fail(CLI_EXIT_USAGE, "option %s needs a value", a);
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
