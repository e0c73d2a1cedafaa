/* cli_backward.c: `fos backward CONTEXT DY.npy --out DIR`: dX, dW (and db) of a forward run with
 * `fos forward --context-out CONTEXT`, from fosd's saved context; --recompute re-runs that forward
 * from its recorded X (and bias) when the context has expired, bit-identically; --shm moves dY (and
 * the recompute's inputs) and the results through a shared-memory region (cli_shm.h). */
#include "cli.h"
#include "cli_shm.h"

#include <stdlib.h>
#include <string.h>

enum { BF_OUT, BF_KEEP, BF_RECOMPUTE, BF_SHM, BF_COUNT };

int cli_backward_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[BF_COUNT] = {
		[BF_OUT] = {"--out", "DIR", "write DIR/dx.npy (M, K), DIR/dw.npy (N, K) and, when the\n"
					    "forward had a bias, DIR/db.npy (N,); all bf16 (required;\n"
					    "DIR is created if missing)", 0, 0},
		[BF_KEEP] = {"--keep-context", NULL, "keep the context for another backward (by default the\n"
						     "backward consumes it)", 0, 0},
		[BF_RECOMPUTE] = {"--recompute", NULL, "if the context has expired or was evicted, re-run its\n"
						       "forward from the X (and bias) files recorded in CONTEXT\n"
						       "against the same weight version, then the backward", 0, 0},
		[BF_SHM] = {"--shm", NULL, "move dY (and X, the bias of --recompute) and the results\n"
					   "through a shared-memory region instead of the messages (an\n"
					   "ipc:// fosd on this host); same results", 0, 0},
	};
	static const char *const pos_names[] = {"CONTEXT", "DY.npy"};
	static const char *const pos_help[] = {"the file `fos forward --context-out` wrote",
					       "the output gradient, shape (M, N), bf16 ('<u2') or float32\n"
					       "('<f4', rounded to bf16)"};
	cli_cmd cmd = {
		.name = "backward",
		.synopsis = "CONTEXT DY.npy --out DIR [--keep-context] [--recompute] [--shm]",
		.summary = "Run a linear layer's backward from a saved forward context: dX, dW and db.",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
		.about = "dX = dY W, dW = dY^T X, db = sum over M of dY, computed as the context's override\n"
			 "says (NUMERICS.md 8). The request goes to --server / FOS_SERVER when given, else to the\n"
			 "server recorded in CONTEXT.",
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;
	if (!flags[BF_OUT].given)
		return cli_fail(CLI_EXIT_USAGE, "backward: --out DIR is required");
	const char *cp = cmd.pos[0], *dp = cmd.pos[1], *out_dir = flags[BF_OUT].value;
	int keep = flags[BF_KEEP].given, recompute = flags[BF_RECOMPUTE].given;

	static cli_ctxfile cf;
	npy_array dy = {0}, x = {0}, bias = {0};
	fos_client *c = NULL;
	cli_shm sh;
	memset(&sh, 0, sizeof sh);
	fos_tensor dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
	int code = CLI_EXIT_FAIL;
	if (cli_ctxfile_read(cp, &cf, &err))
		goto fail;
	fos_context *ctx = &cf.ctx;
	if (cli_load_bf16(dp, 2, "(M, N)", &dy, &err))
		goto fail;
	if (dy.shape[0] != ctx->m || dy.shape[1] != ctx->n) {
		char sb[64];
		cli_errf(&err, "%s: shape %s does not match the forward's (M, N) = (%lld, %lld) in %s", dp,
			 npy_shape_str(2, dy.shape, sb, sizeof sb), (long long)ctx->m, (long long)ctx->n, cp);
		goto fail;
	}
	fos_tensor tx, tb;
	fos_backward_opts bo = {keep, NULL, NULL};
	if (recompute) {
		if (!cf.x_path[0] || (ctx->has_bias && !cf.bias_path[0])) {
			cli_errf(&err, "%s: --recompute needs the forward's %s file, which the context file does not name", cp,
				 cf.x_path[0] ? "bias" : "X");
			goto fail;
		}
		if (cli_load_bf16(cf.x_path, 2, "(M, K)", &x, &err))
			goto fail;
		if (x.shape[0] != ctx->m || x.shape[1] != ctx->k) {
			char sb[64];
			cli_errf(&err, "%s: shape %s is no longer the forward's (M, K) = (%lld, %lld); cannot recompute",
				 cf.x_path, npy_shape_str(2, x.shape, sb, sizeof sb), (long long)ctx->m, (long long)ctx->k);
			goto fail;
		}
		tx = cli_tensor_bf16(&x);
		bo.recompute_x = &tx;
		if (ctx->has_bias) {
			if (cli_load_bf16(cf.bias_path, 1, "(N,)", &bias, &err))
				goto fail;
			if (bias.shape[0] != ctx->n) {
				cli_errf(&err, "%s: shape (%lld,) is no longer the forward's (N,) = (%lld,); cannot recompute",
					 cf.bias_path, (long long)bias.shape[0], (long long)ctx->n);
				goto fail;
			}
			tb = cli_tensor_bf16(&bias);
			bo.recompute_bias = &tb;
		}
	}
	cli_global rg = *g;
	if (!g->server_given && cf.server[0])
		rg.server = cf.server;
	if (cli_connect(&rg, &c, &err))
		goto fail;
	int old_recomputed = ctx->recomputed;
	fos_tensor tdy = cli_tensor_bf16(&dy);
	fos_tensor *pdy = &tdy, *pdx = &dx, *pdw = &dw, *pdb = &db, sdy, sdx, sdw, sdb, srx, srb;
	if (flags[BF_SHM].given) { /* inputs copied once into a region; fosd writes the results there */
		size_t need = cli_shm_slot(fos_tensor_bytes(&tdy)) + cli_shm_slot((size_t)(ctx->m * ctx->k) * 2) +
			      cli_shm_slot((size_t)(ctx->n * ctx->k) * 2) + (ctx->has_bias ? cli_shm_slot((size_t)ctx->n * 2) : 0);
		if (bo.recompute_x)
			need += cli_shm_slot(fos_tensor_bytes(bo.recompute_x));
		if (bo.recompute_bias)
			need += cli_shm_slot(fos_tensor_bytes(bo.recompute_bias));
		if (cli_shm_open(c, need, &sh, &err))
			goto fail;
		sdy = cli_shm_in(&sh, &tdy);
		pdy = &sdy;
		if (bo.recompute_x) {
			srx = cli_shm_in(&sh, bo.recompute_x);
			bo.recompute_x = &srx;
		}
		if (bo.recompute_bias) {
			srb = cli_shm_in(&sh, bo.recompute_bias);
			bo.recompute_bias = &srb;
		}
		sdx = cli_shm_out(&sh, FOS_DTYPE_BF16, ctx->m, ctx->k);
		sdw = cli_shm_out(&sh, FOS_DTYPE_BF16, ctx->n, ctx->k);
		pdx = &sdx;
		pdw = &sdw;
		if (ctx->has_bias) {
			sdb = cli_shm_out(&sh, FOS_DTYPE_BF16, ctx->n, 0);
			pdb = &sdb;
		}
	}
	fos_status st;
	if (fos_backward(c, ctx, pdy, &bo, pdx, pdw, pdb, &st)) {
		cli_status_err(&st, "backward", &err);
		if (st.code == FOS_CODE_NOT_FOUND && !recompute && cf.x_path[0]) {
			char more[sizeof err.msg];
			snprintf(more, sizeof more, "%.150s (add --recompute to re-run its forward from X)", err.msg);
			snprintf(err.msg, sizeof err.msg, "%s", more);
		}
		goto fail;
	}
	if (cli_mkdirs(out_dir, &err) || cli_write(out_dir, "dx.npy", NPY_U2, 2, pdx->shape, pdx->data, &err) ||
	    cli_write(out_dir, "dw.npy", NPY_U2, 2, pdw->shape, pdw->data, &err) ||
	    (pdb->ndim == 1 && cli_write(out_dir, "db.npy", NPY_U2, 1, pdb->shape, pdb->data, &err)))
		goto fail;
	/* a kept context that was recomputed has a new id: keep the file usable */
	int recomputed = ctx->recomputed > old_recomputed;
	if (keep && recomputed && cli_ctxfile_write(cp, &cf, &err))
		goto fail;
	if (g->json && !g->quiet) {
		cli_jw w;
		cli_json_begin(&w, &rg, "backward", 0, NULL);
		cli_jw_str(&w, "context", cp);
		cli_jw_str(&w, "dy", dp);
		cli_jw_bool(&w, "recomputed", recomputed);
		cli_jw_bool(&w, "kept", keep);
		cli_json_outputs_begin(&w);
		cli_json_output(&w, "dx", out_dir, "dx.npy", "bf16", 2, pdx->shape);
		cli_json_output(&w, "dw", out_dir, "dw.npy", "bf16", 2, pdw->shape);
		if (pdb->ndim == 1)
			cli_json_output(&w, "db", out_dir, "db.npy", "bf16", 1, pdb->shape);
		cli_json_outputs_end(&w);
	}
	cli_summary(g, "%s: dx.npy (%lld, %lld), dw.npy (%lld, %lld)%s%s", out_dir, (long long)pdx->shape[0],
		    (long long)pdx->shape[1], (long long)pdw->shape[0], (long long)pdw->shape[1],
		    pdb->ndim == 1 ? ", db.npy" : "", recomputed ? " (the expired context was recomputed)" : "");
	code = cli_flush_stdout("backward");
	goto done;
fail:
	cli_report(&err, code);
done:
	cli_shm_close(&sh); /* before the connection goes */
	fos_close(c);
	free(dx.data);
	free(dw.data);
	free(db.data);
	npy_free(&dy);
	npy_free(&x);
	npy_free(&bias);
	return code;
}
