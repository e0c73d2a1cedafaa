/* cli_weights.c: fosd's weight cache from the command line: `fos put-weight` (quantize a .npy
 * weight once and cache it under a name and version), `fos drop-weight` and `fos list-weights`. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Weight names as fosd accepts them: 1..128 bytes of [A-Za-z0-9._:/-]. */
static int cli_check_weight_name(const char *name, fos_err *err)
{
	size_t n = strlen(name);
	if (n < 1 || n > FOS_NAME_MAX)
		return cli_errf(err, "weight name '%.40s%s' is %zu bytes long (1 to %d allowed)", name, n > 40 ? "..." : "", n,
				FOS_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._:/-", c)))
			return cli_errf(err, "weight name '%s' has a character outside [A-Za-z0-9._:/-] at byte %zu", name, i);
	}
	return FOS_OK;
}

static void cli_weight_json(cli_jw *w, const char *key, const fos_weight_info *wi)
{
	cli_jw_obj(w, key);
	cli_jw_str(w, "name", wi->name);
	cli_jw_u64(w, "version", wi->version);
	cli_jw_arr(w, "shape");
	cli_jw_i64(w, NULL, wi->n);
	cli_jw_i64(w, NULL, wi->k);
	cli_jw_end(w, ']');
	cli_jw_str(w, "weight_block", cli_block_name(wi->weight_block, 1));
	cli_jw_str(w, "err", cli_errmode_name(wi->err_mode));
	cli_jw_i64(w, "bound", wi->bound ? wi->bound : 256);
	cli_jw_u64(w, "bytes", wi->bytes);
	cli_jw_bool(w, "pinned", wi->pinned);
	cli_jw_bool(w, "has_master", wi->has_master);
	cli_jw_bool(w, "has_columnwise", wi->has_columnwise);
	cli_jw_u64(w, "uses", wi->uses);
	cli_jw_u64(w, "idle_ms", wi->idle_ms);
	cli_jw_end(w, '}');
}

/* ---- put-weight ------------------------------------------------------------------------------- */

enum { PF_VERSION, PF_WBLOCK, PF_ERR, PF_BOUND, PF_PIN, PF_DROP_MASTER, PF_EAGER, PF_JSON, PF_COUNT };

int cli_put_weight_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[PF_COUNT] = {
		[PF_VERSION] = {"--version", "V", "the weight's version, a whole number >= 1 (default 1); a\n"
						  "new version replaces the cached one, the same one is refused\n"
						  "(ALREADY_EXISTS)", 0, 0},
		[PF_WBLOCK] = {"--weight-block", "16x16|1x16", "block shape of the weight's scales (default 16x16)", 0, 0},
		[PF_ERR] = {"--err", "mae|mse", "how 4/6 compares its two candidates (default mae); a\n"
						"forward's X is quantized the same way", 0, 0},
		[PF_BOUND] = {"--bound", "256|448", "E4M3 scale bound (default 256)", 0, 0},
		[PF_PIN] = {"--pin", NULL, "never evict it to make room (drop-weight still drops it)", 0, 0},
		[PF_DROP_MASTER] = {"--drop-master", NULL, "keep no bf16 copy of W: less memory, but no\n"
							   "high_precision backward", 0, 0},
		[PF_EAGER] = {"--eager-columnwise", NULL, "build the columnwise copy (quantized backward) now\n"
							  "instead of at the first backward that needs it", 0, 0},
		[PF_JSON] = {"--json", NULL, "print the cached entry as one JSON object", 0, 0},
	};
	static const char *const pos_names[] = {"NAME", "W.npy"};
	static const char *const pos_help[] = {"the name forwards will use: 1 to 128 of [A-Za-z0-9._:/-]",
					       "the weight, shape (N, K), bf16 ('<u2') or float32 ('<f4',\n"
					       "rounded to bf16); N and K multiples of 16"};
	cli_cmd cmd = {
		.name = "put-weight",
		.synopsis = "NAME W.npy [--version V] [--weight-block 16x16|1x16] [--err mae|mse]\n"
			    "           [--bound 256|448] [--pin] [--drop-master] [--eager-columnwise] [--json]",
		.summary = "Quantize a weight once into fosd's cache; `fos forward NAME ...` then uses it.",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;
	int block = FOS_BLOCK_16X16, errm = FOS_ERR_MAE, bound = 256;
	uint64_t version = 1;
	if (cli_opt_block(&flags[PF_WBLOCK], &block, &err) || cli_opt_err_mode(&flags[PF_ERR], &errm, &err) ||
	    cli_opt_bound(&flags[PF_BOUND], &bound, &err) ||
	    (flags[PF_VERSION].given && cli_parse_u64("--version", flags[PF_VERSION].value, 1, UINT64_MAX, &version, &err)) ||
	    cli_check_weight_name(cmd.pos[0], &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	const char *name = cmd.pos[0], *wp = cmd.pos[1];
	npy_array w = {0};
	if (cli_load_bf16(wp, 2, "(N, K)", &w, &err) || cli_check_nonempty(&w, wp, &err)) {
		npy_free(&w);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	fos_client *c;
	if (cli_connect(g, &c, &err)) {
		npy_free(&w);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	fos_tensor t = cli_tensor_bf16(&w);
	fos_weight_config cfg = {fos_block_to_wire(block), errm, bound,
				 flags[PF_PIN].given, flags[PF_DROP_MASTER].given, flags[PF_EAGER].given};
	fos_weight_info info;
	fos_status st;
	int code = fos_put_weight(c, name, version, &t, &cfg, &info, &st);
	fos_close(c);
	npy_free(&w);
	if (code) {
		char what[200];
		snprintf(what, sizeof what, "put-weight %s", name);
		cli_status_err(&st, what, &err);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (flags[PF_JSON].given) {
		cli_jw jw;
		cli_jw_init(&jw, stdout, 1);
		cli_weight_json(&jw, NULL, &info);
	} else {
		char bb[32];
		printf("cached %s version %llu: (%lld, %lld), %s blocks, %s, bound %d, %s%s\n", info.name,
		       (unsigned long long)info.version, (long long)info.n, (long long)info.k,
		       cli_block_name(info.weight_block, 1), cli_errmode_name(info.err_mode), info.bound ? info.bound : 256,
		       cli_human_bytes(info.bytes, bb, sizeof bb), info.pinned ? ", pinned" : "");
	}
	return fflush(stdout) ? cli_fail(CLI_EXIT_FAIL, "put-weight: cannot write to stdout") : CLI_EXIT_OK;
}

/* ---- drop-weight ------------------------------------------------------------------------------ */

int cli_drop_weight_main(const cli_global *g, int argc, char **argv)
{
	static const char *const pos_names[] = {"NAME"};
	static const char *const pos_help[] = {"the cached weight to remove (forwards and contexts already\n"
					       "using it finish with it)"};
	cli_cmd cmd = {
		.name = "drop-weight",
		.synopsis = "NAME",
		.summary = "Remove a weight from fosd's cache.",
		CLI_CMD_POS(pos_names, pos_help),
		.footer = "Exit status: 0 dropped; 1 no such weight (NOT_FOUND) or fosd error; 2 bad command line.",
	};
	fos_err err = {0, ""};
	int rc = cli_parse(&cmd, argc, argv, &err);
	if (rc == CLI_HELP_SHOWN)
		return CLI_EXIT_OK;
	if (rc || cli_check_weight_name(cmd.pos[0], &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	fos_client *c;
	if (cli_connect(g, &c, &err))
		return cli_report(&err, CLI_EXIT_FAIL);
	fos_status st;
	int code = fos_drop_weight(c, cmd.pos[0], &st);
	fos_close(c);
	if (code) {
		char what[200];
		snprintf(what, sizeof what, "drop-weight %s", cmd.pos[0]);
		cli_status_err(&st, what, &err);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	printf("dropped %s\n", cmd.pos[0]);
	return fflush(stdout) ? cli_fail(CLI_EXIT_FAIL, "drop-weight: cannot write to stdout") : CLI_EXIT_OK;
}

/* ---- list-weights ----------------------------------------------------------------------------- */

enum { LWF_JSON, LWF_COUNT };

int cli_list_weights_main(const cli_global *g, int argc, char **argv)
{
	cli_flag flags[LWF_COUNT] = {
		[LWF_JSON] = {"--json", NULL, "print {\"weights\": [...]} as JSON", 0, 0},
	};
	cli_cmd cmd = {
		.name = "list-weights",
		.synopsis = "[--json]",
		.summary = "List the weights in fosd's cache, in byte order of their names.",
		CLI_CMD_FLAGS(flags),
		.about = "fosd answers in pages of up to 1000 weights; all pages are fetched and listed.",
	};
	fos_client *c;
	int ex;
	if (!cli_parse_connect(g, &cmd, argc, argv, &c, &ex))
		return ex;
	fos_err err = {0, ""};
	fos_weight_info *list = NULL;
	size_t n = 0;
	fos_status st;
	int code = fos_list_weights(c, &list, &n, &st);
	fos_close(c);
	if (code) {
		cli_status_err(&st, "list-weights", &err);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (flags[LWF_JSON].given) {
		cli_jw w;
		cli_jw_init(&w, stdout, 1);
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "server", g->server);
		cli_jw_arr(&w, "weights");
		for (size_t i = 0; i < n; i++)
			cli_weight_json(&w, NULL, &list[i]);
		cli_jw_end(&w, ']');
		cli_jw_end(&w, '}');
	} else if (n == 0) {
		printf("no weights cached at %s\n", g->server);
	} else {
		printf("%-24s %8s %-14s %-6s %-4s %5s %10s %s\n", "NAME", "VERSION", "SHAPE (N, K)", "BLOCK", "ERR", "BOUND",
		       "BYTES", "FLAGS");
		for (size_t i = 0; i < n; i++) {
			const fos_weight_info *wi = &list[i];
			char shape[64], bb[32], fl[96];
			snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)wi->n, (long long)wi->k);
			snprintf(fl, sizeof fl, "%s%s%suses=%llu idle=%.1fs", wi->pinned ? "pinned " : "",
				 wi->has_master ? "master " : "", wi->has_columnwise ? "columnwise " : "",
				 (unsigned long long)wi->uses, (double)wi->idle_ms / 1000.0);
			printf("%-24s %8llu %-14s %-6s %-4s %5d %10s %s\n", wi->name, (unsigned long long)wi->version, shape,
			       cli_block_name(wi->weight_block, 1), cli_errmode_name(wi->err_mode), wi->bound ? wi->bound : 256,
			       cli_human_bytes(wi->bytes, bb, sizeof bb), fl);
		}
	}
	free(list);
	return fflush(stdout) ? cli_fail(CLI_EXIT_FAIL, "list-weights: cannot write to stdout") : CLI_EXIT_OK;
}
