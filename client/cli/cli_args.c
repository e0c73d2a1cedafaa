/* cli_args.c: the fos flag parser (--flag VALUE, --flag=VALUE, switches, positionals, --help), the
 * global options (accepted before the command and, through cli_parse, after it), the per-command
 * help printer, and the parsers of option values shared by several subcommands. A command's own
 * flag of the same name wins over a global option. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static cli_global *cli_bound_global;

void cli_global_bind(cli_global *g)
{
	cli_bound_global = g;
}

/* "" in the environment counts as unset. */
static const char *cli_env(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] ? v : NULL;
}

static int cli_set_timeout(cli_global *g, const char *src, const char *v, fos_err *err)
{
	uint64_t ns;
	if (cli_parse_duration(src, v, &ns, err))
		return FOS_EINVAL;
	if (ns < 1000000 || ns > (uint64_t)24 * 3600 * 1000000000)
		return cli_errf(err, "%s %s is out of range (1ms to 24h)", src, v);
	g->timeout_ms = (int)(ns / 1000000);
	return FOS_OK;
}

int cli_global_init(cli_global *g, fos_err *err)
{
	memset(g, 0, sizeof *g);
	g->server = cli_env("FOS_SERVER");
	g->server_given = g->server != NULL;
	if (!g->server)
		g->server = CLI_DEFAULT_SERVER;
	g->token = cli_env("FOS_TOKEN");
	g->tls_ca = cli_env("FOS_TLS_CA");
	g->timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
	const char *t = cli_env("FOS_TIMEOUT");
	return t ? cli_set_timeout(g, "FOS_TIMEOUT", t, err) : FOS_OK;
}

/* --name VALUE or --name=VALUE at argv[*i]: 1 matched (value in *out), 0 not, -1 value missing. */
static int cli_global_value(int argc, char **argv, int *i, const char *name, const char **out)
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

int cli_global_arg(cli_global *g, int argc, char **argv, int *i, fos_err *err)
{
	static const char *const names[] = {"--server", "--token", "--timeout", "--tls-ca", "--tls-server-name"};
	const char *a = argv[*i];
	if (!strcmp(a, "--quiet") || !strcmp(a, "--json")) {
		*(a[2] == 'q' ? &g->quiet : &g->json) = 1;
		return 1;
	}
	for (int k = 0; k < 5; k++) {
		const char *v = NULL;
		int r = cli_global_value(argc, argv, i, names[k], &v);
		if (!r)
			continue;
		if (r < 0) {
			cli_errf(err, "option %s needs a value", names[k]);
			return -1;
		}
		switch (k) {
		case 0: g->server = v, g->server_given = 1; break;
		case 1: g->token = v; break;
		case 2:
			if (cli_set_timeout(g, "--timeout", v, err))
				return -1;
			break;
		case 3: g->tls_ca = v; break;
		default: g->tls_server_name = v; break;
		}
		return 1;
	}
	return 0;
}

static cli_flag *cli_find_flag(cli_cmd *c, const char *arg, size_t len)
{
	for (int i = 0; i < c->nflags; i++)
		if (strlen(c->flags[i].name) == len && !strncmp(c->flags[i].name, arg, len))
			return &c->flags[i];
	return NULL;
}

int cli_parse(cli_cmd *c, int argc, char **argv, fos_err *err)
{
	int npos = 0, only_pos = 0;
	for (int i = 0; i < c->nflags; i++) {
		c->flags[i].given = 0;
		c->flags[i].value = NULL;
	}
	for (int i = 0; i < CLI_MAX_POS; i++)
		c->pos[i] = NULL;
	/* --help anywhere before "--" wins over everything else on the line */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			cli_print_help(c, stdout);
			return CLI_HELP_SHOWN;
		}
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
			if (npos >= c->npos)
				return cli_errf(err, "%s: unexpected argument '%s' (see 'fos %s --help')", c->name, a,
						c->name);
			c->pos[npos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = 1;
			continue;
		}
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		cli_flag *f = a[1] == '-' ? cli_find_flag(c, a, len) : NULL;
		if (!f && cli_bound_global) {
			int r = cli_global_arg(cli_bound_global, argc, argv, &i, err);
			if (r < 0)
				return cli_err_prefix(err, c->name);
			if (r > 0)
				continue;
		}
		if (!f)
			return cli_errf(err, "%s: unknown option '%.*s' (see 'fos %s --help')", c->name, (int)len, a,
					c->name);
		if (f->given)
			return cli_errf(err, "%s: option %s given twice", c->name, f->name);
		f->given = 1;
		if (!f->metavar) {
			if (eq)
				return cli_errf(err, "%s: option %s takes no value", c->name, f->name);
			continue;
		}
		if (eq) {
			f->value = eq + 1;
		} else {
			if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-'))
				return cli_errf(err, "%s: option %s needs a value (%s)", c->name, f->name, f->metavar);
			f->value = argv[++i];
		}
		if (!f->value[0])
			return cli_errf(err, "%s: option %s has an empty value (expected %s)", c->name, f->name,
					f->metavar);
	}
	if (npos < c->npos)
		return cli_errf(err, "%s: missing argument %s (see 'fos %s --help')", c->name, c->pos_names[npos],
				c->name);
	for (int i = 0; i < c->nflags && cli_bound_global; i++) {
		if (c->flags[i].given && !strcmp(c->flags[i].name, "--json"))
			cli_bound_global->json = 1;
		if (c->flags[i].given && !strcmp(c->flags[i].name, "--quiet"))
			cli_bound_global->quiet = 1;
	}
	return FOS_OK;
}

/* Prints text with every line after a newline indented by indent spaces. */
static void cli_print_indented(FILE *f, const char *text, int indent)
{
	for (const char *p = text; *p; p++) {
		fputc(*p, f);
		if (*p == '\n' && p[1])
			fprintf(f, "%*s", indent, "");
	}
}

void cli_print_help(const cli_cmd *c, FILE *f)
{
	const int col = 24;
	fprintf(f, "usage: fos [global options] %s %s\n\n", c->name, c->synopsis);
	fprintf(f, "%s\n", c->summary);
	if (c->about)
		fprintf(f, "\n%s\n", c->about);
	if (c->npos) {
		fprintf(f, "\nArguments:\n");
		for (int i = 0; i < c->npos; i++) {
			int w = fprintf(f, "  %s", c->pos_names[i]);
			fprintf(f, "%*s", w < col ? col - w : 1, "");
			cli_print_indented(f, c->pos_help[i], col);
			fputc('\n', f);
		}
	}
	fprintf(f, "\nOptions:\n");
	for (int i = 0; i < c->nflags; i++) {
		const cli_flag *fl = &c->flags[i];
		int w = fl->metavar ? fprintf(f, "  %s %s", fl->name, fl->metavar) : fprintf(f, "  %s", fl->name);
		if (w >= col) {
			fprintf(f, "\n%*s", col, "");
		} else {
			fprintf(f, "%*s", col - w, "");
		}
		cli_print_indented(f, fl->help, col);
		fputc('\n', f);
	}
	int w = fprintf(f, "  -h, --help");
	fprintf(f, "%*sthis help\n", col - w, "");
	if (c->footer)
		fprintf(f, "\n%s\n", c->footer);
	fprintf(f, "\n%s\n", CLI_GLOBAL_FLAGS_HELP);
}

int cli_choice(const cli_flag *f, int n, const char *const *names, const int *values, int *out, fos_err *err)
{
	if (!f->given)
		return FOS_OK;
	for (int i = 0; i < n; i++) {
		if (!strcmp(f->value, names[i])) {
			*out = values[i];
			return FOS_OK;
		}
	}
	char list[160];
	size_t used = 0;
	list[0] = 0;
	for (int i = 0; i < n && used < sizeof list; i++) {
		int w = snprintf(list + used, sizeof list - used, "%s%s", i == 0 ? "" : (i == n - 1 ? " or " : ", "),
				 names[i]);
		if (w < 0)
			break;
		used += (size_t)w;
	}
	return cli_errf(err, "bad value '%s' for %s (expected %s)", f->value, f->name, list);
}

int cli_opt_backend(const cli_flag *f, const char **out, fos_err *err)
{
	static const char *const names[] = {"cpu", "cuda", "auto"};
	static const int vals[] = {0, 1, 2};
	int v = 2;
	int rc = cli_choice(f, 3, names, vals, &v, err);
	if (rc == FOS_OK)
		*out = names[v];
	return rc;
}

int cli_opt_err_mode(const cli_flag *f, int *out, fos_err *err)
{
	static const char *const names[] = {"mae", "mse"};
	static const int vals[] = {FOS_ERR_MAE, FOS_ERR_MSE};
	return cli_choice(f, 2, names, vals, out, err);
}

int cli_opt_bound(const cli_flag *f, int *out, fos_err *err)
{
	static const char *const names[] = {"256", "448"};
	static const int vals[] = {256, 448};
	return cli_choice(f, 2, names, vals, out, err);
}

int cli_opt_scope(const cli_flag *f, int *out, fos_err *err)
{
	static const char *const names[] = {"all", "weights", "activations", "none"};
	static const int vals[] = {FOS_SCOPE_ALL, FOS_SCOPE_WEIGHTS, FOS_SCOPE_ACTIVATIONS, FOS_SCOPE_NONE};
	return cli_choice(f, 4, names, vals, out, err);
}

int cli_opt_block(const cli_flag *f, int *out, fos_err *err)
{
	static const char *const names[] = {"1x16", "16x16"};
	static const int vals[] = {FOS_BLOCK_1X16, FOS_BLOCK_16X16};
	return cli_choice(f, 2, names, vals, out, err);
}

int cli_opt_override(const cli_flag *f, int *out, fos_err *err)
{
	static const char *const names[] = {"default", "quantized", "high_precision", "dequantized"};
	static const int vals[] = {FOS_OVR_DEFAULT, FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION,
				   FOS_OVR_DEQUANTIZED};
	return cli_choice(f, 4, names, vals, out, err);
}

int cli_parse_main(cli_cmd *c, int argc, char **argv, fos_err *err)
{
	int rc = cli_parse(c, argc, argv, err);
	if (rc == CLI_HELP_SHOWN)
		return CLI_EXIT_OK;
	if (rc)
		return cli_report(err, CLI_EXIT_USAGE);
	return -1;
}
