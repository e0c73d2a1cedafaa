/* cli_forward.c: `fos forward NAME X.npy --out Y.npy`: Y = X W^T (+ bias) against the weight NAME in
 * fosd's cache; with --context-out FILE fosd keeps what the backward needs and FILE records the
 * context (see cli_context.c) for `fos backward`; with --shm X (and the bias) go to fosd through a
 * shared-memory region and fosd writes Y into it (cli_shm.h). */
#include "cli.h"
#include "cli_shm.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { FF_OUT, FF_CTX, FF_VERSION, FF_OVERRIDE, FF_ROW, FF_BIAS, FF_SHM, FF_SCOPE, FF_COUNT };

/* The cached weight's N (0 when fosd lists no weight of that name: the forward then fails with
 * fosd's own message). */
static int cli_forward_weight_n(fos_client *c, const char *name, int64_t *n, fos_err *err)
{
	fos_weight_info *l = NULL;
	size_t cnt = 0;
	fos_status st;
	*n = 0;
	if (fos_list_weights(c, &l, &cnt, &st))
		return cli_status_err(&st, "--shm: listing the cached weights", err);
	for (size_t i = 0; i < cnt; i++)
		if (!strcmp(l[i].name, name))
			*n = l[i].n;
	free(l);
	return FOS_OK;
}

int cli_forward_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[FF_COUNT] = {
		[FF_OUT] = {"--out", "Y.npy", "where to write Y, bf16 (M, N) (required; its directory is\n"
					      "created if missing)", 0, 0},
		[FF_CTX] = {"--context-out", "FILE", "ask fosd to keep what the backward needs and write the\n"
						     "context (id, weight, options, shapes) to FILE, a small JSON\n"
						     "file for `fos backward FILE DY.npy`; the context lives for\n"
						     "fosd's --context-ttl", 0, 0},
		[FF_VERSION] = {"--version", "V", "use the cached weight only if it has version V (else\n"
						  "FAILED_PRECONDITION); default: whatever version is cached", 0, 0},
		[FF_OVERRIDE] = {"--override", "MODE", "the backward the context is for: default (quantized, or\n"
							"high_precision with --row-scaled), quantized,\n"
							"high_precision or dequantized (NUMERICS.md 8)", 0, 0},
		[FF_ROW] = {"--row-scaled", NULL, "one amax per row of X instead of one per tensor (not with\n"
						  "--override quantized)", 0, 0},
		[FF_BIAS] = {"--bias", "B.npy", "bias, shape (N,), bf16 or float32: Y = bf16(Y + bf16(bias))", 0, 0},
		[FF_SHM] = {"--shm", NULL, "move X, the bias and Y through a shared-memory region instead\n"
					   "of the messages (an ipc:// fosd on this host); same result", 0, 0},
		[FF_SCOPE] = {"--four-over-six", "SCOPE", "which operands use 4/6: all, weights, activations or none\n"
							  "(default: the weight's, as put); a scope quantizing W\n"
							  "otherwise needs the weight's master (NUMERICS.md 11)", 0, 0},
	};
	static const char *const pos_names[] = {"NAME", "X.npy"};
	static const char *const pos_help[] = {"a weight cached with `fos put-weight NAME W.npy`",
					       "activations, shape (M, K), bf16 ('<u2') or float32 ('<f4',\n"
					       "rounded to bf16); any M >= 1, K the weight's K"};
	cli_cmd cmd = {
		.name = "forward",
		.synopsis = "NAME X.npy --out Y.npy [--context-out FILE] [--version V]\n"
			    "           [--override default|quantized|high_precision|dequantized] [--row-scaled]\n"
			    "           [--bias B.npy] [--four-over-six all|weights|activations|none] [--shm]",
		.summary = "Run a linear layer's forward with a weight from fosd's cache: Y = X W^T (+ bias).",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
		.about = "X is quantized 1x16 (per tensor, or per row with --row-scaled) with the weight's err\n"
			 "mode and bound; the result is bit-identical to `fos linear` with the same weight and\n"
			 "options.",
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;
	int ovr = FOS_OVR_DEFAULT, scope = -1;
	uint64_t version = 0;
	if (cli_opt_override(&flags[FF_OVERRIDE], &ovr, &err) ||
	    (flags[FF_SCOPE].given && cli_opt_scope(&flags[FF_SCOPE], &scope, &err)) ||
	    (flags[FF_VERSION].given && cli_parse_u64("--version", flags[FF_VERSION].value, 1, UINT64_MAX, &version, &err)))
		return cli_report(&err, CLI_EXIT_USAGE);
	int row = flags[FF_ROW].given;
	if (ovr == FOS_OVR_QUANTIZED && row)
		return cli_fail(CLI_EXIT_USAGE, "--override quantized cannot be used with --row-scaled (row-scaled X "
						"has no columnwise form)");
	if (!flags[FF_OUT].given)
		return cli_fail(CLI_EXIT_USAGE, "forward: --out Y.npy is required");
	const char *name = cmd.pos[0], *xp = cmd.pos[1], *yp = flags[FF_OUT].value, *bp = flags[FF_BIAS].value,
		   *cp = flags[FF_CTX].value;

	npy_array x = {0}, bias = {0};
	fos_client *c = NULL;
	cli_shm sh;
	memset(&sh, 0, sizeof sh);
	fos_tensor y = fos_tensor_out();
	fos_context ctx;
	memset(&ctx, 0, sizeof ctx);
	int code = CLI_EXIT_FAIL;
	if (cli_load_bf16(xp, 2, "(M, K)", &x, &err) || cli_check_nonempty(&x, xp, &err))
		goto fail;
	if (cli_load_bias(bp, &bias, &err) || cli_connect(g, &c, &err))
		goto fail;
	fos_tensor tx = cli_tensor_bf16(&x);
	fos_tensor tb = fos_tensor_1d(FOS_DTYPE_BF16, bp ? bias.shape[0] : 1, bias.data);
	fos_tensor *px = &tx, *pb = bp ? &tb : NULL, *py = &y, sx, sb, sy;
	if (flags[FF_SHM].given) { /* X (and the bias) copied once into a region; Y written there */
		int64_t n;
		if (cli_forward_weight_n(c, name, &n, &err))
			goto fail;
		size_t need = cli_shm_slot(fos_tensor_bytes(&tx)) + (bp ? cli_shm_slot(fos_tensor_bytes(&tb)) : 0) +
			      cli_shm_slot((size_t)(x.shape[0] * n) * 2);
		if (cli_shm_open(c, need, &sh, &err))
			goto fail;
		sx = cli_shm_in(&sh, &tx);
		px = &sx;
		if (bp) {
			sb = cli_shm_in(&sh, &tb);
			pb = &sb;
		}
		if (n > 0) {
			sy = cli_shm_out(&sh, FOS_DTYPE_BF16, x.shape[0], n);
			py = &sy;
		}
	}
	fos_forward_opts o = {version, ovr, row, cp != NULL,
			      scope < 0 ? FOS_FOUR_OVER_SIX_DEFAULT : fos_scope_to_wire(scope)};
	fos_status st;
	if (fos_forward(c, name, px, pb, &o, py, cp ? &ctx : NULL, &st)) {
		char what[200];
		snprintf(what, sizeof what, "forward %s", name);
		cli_status_err(&st, what, &err);
		goto fail;
	}
	if (cli_mkparent(yp, &err) || (cp && cli_mkparent(cp, &err)) ||
	    npy_write(yp, NPY_U2, 2, py->shape, py->data, &err))
		goto fail;
	if (cp) {
		cli_ctxfile cf;
		memset(&cf, 0, sizeof cf);
		cf.ctx = ctx;
		snprintf(cf.server, sizeof cf.server, "%s", g->server);
		char real[PATH_MAX];
		if (realpath(xp, real))
			snprintf(cf.x_path, sizeof cf.x_path, "%s", real);
		if (bp && realpath(bp, real))
			snprintf(cf.bias_path, sizeof cf.bias_path, "%s", real);
		if (cli_ctxfile_write(cp, &cf, &err))
			goto fail;
	}
	if (g->json && !g->quiet) {
		cli_jw w;
		cli_json_begin(&w, g, "forward", 0, NULL);
		cli_jw_str(&w, "weight", name);
		cli_jw_str(&w, "x", xp);
		if (cp) {
			char id[24];
			snprintf(id, sizeof id, "%016llx", (unsigned long long)ctx.id);
			cli_jw_obj(&w, "context");
			cli_jw_str(&w, "file", cp);
			cli_jw_str(&w, "id", id);
			cli_jw_str(&w, "backward", cli_override_name(ctx.resolved_override));
			cli_jw_u64(&w, "ttl_ms", ctx.ttl_ms);
			cli_jw_end(&w, '}');
		}
		cli_json_outputs_begin(&w);
		cli_json_output(&w, "y", NULL, yp, "bf16", 2, py->shape);
		cli_json_outputs_end(&w);
	}
	if (cp)
		cli_summary(g, "%s: (%lld, %lld) bf16; context %016llx (%s backward, kept %.0f s) in %s", yp,
			    (long long)py->shape[0], (long long)py->shape[1], (unsigned long long)ctx.id,
			    cli_override_name(ctx.resolved_override), (double)ctx.ttl_ms / 1000.0, cp);
	else
		cli_summary(g, "%s: (%lld, %lld) bf16", yp, (long long)py->shape[0], (long long)py->shape[1]);
	code = cli_flush_stdout("forward");
	goto done;
fail:
	cli_report(&err, code);
	if (c && ctx.id) {
		fos_status rst;
		fos_release(c, &ctx, &rst); /* no file names it: nobody could use it */
	}
done:
	cli_shm_close(&sh); /* before the connection goes */
	fos_close(c);
	free(y.data);
	npy_free(&x);
	npy_free(&bias);
	return code;
}
