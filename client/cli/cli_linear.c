/* cli_linear.c: `fos linear`: one NVFP4 four-over-six linear layer on .npy files: Y = X W^T (+ bias),
 * and with --dy the backward dX, dW (and db) under the chosen override (NUMERICS.md sections 7-8),
 * in this process (--local) or through fosd's one-shot Linear (with --shm, its tensors through a
 * shared-memory region: cli_shm.h). */
#include "cli.h"
#include "cli_shm.h"

#include <stdlib.h>
#include <string.h>

int cli_linear_local(const cli_linear_job *job, cli_linear_out *out, fos_err *err)
{
	int resolved;
	int rc = fos_linear_check(&job->opts, job->m, job->n, job->k, &resolved, err);
	if (rc)
		return rc;
	fos_backend *be = cli_backend_open(job->backend, err);
	if (!be)
		return err->rc;
	size_t m = (size_t)job->m, n = (size_t)job->n, k = (size_t)job->k, b2 = sizeof(uint16_t);
	int backward = job->dy != NULL, made = 0, saved_ok = 0;
	fos_qweight qw;
	fos_saved saved;
	memset(&qw, 0, sizeof qw);
	memset(&saved, 0, sizeof saved);
	uint16_t *d_w = NULL, *d_x = NULL, *d_bias = NULL, *d_y = NULL, *d_dy = NULL, *d_dx = NULL, *d_dw = NULL,
		 *d_db = NULL;

	if (!(d_w = cli_upload(be, job->w, n * k * b2, err)))
		goto fail;
	if ((rc = fos_qweight_make(be, d_w, job->n, job->k, &job->opts, backward && resolved == FOS_OVR_HIGH_PRECISION,
				   backward && resolved == FOS_OVR_QUANTIZED, &qw, err)))
		goto done;
	made = 1;
	if (!(d_x = cli_upload(be, job->x, m * k * b2, err)) || !(d_y = cli_dev_alloc(be, m * n * b2, err)))
		goto fail;
	if (job->bias && !(d_bias = cli_upload(be, job->bias, n * b2, err)))
		goto fail;
	if ((rc = fos_linear_forward(be, d_x, job->m, &qw, &job->opts, d_bias, d_y, backward ? &saved : NULL, err)))
		goto done;
	saved_ok = backward;
	if ((rc = be->d2h(be, out->y, d_y, m * n * b2, err)))
		goto done;
	if (backward) {
		if (!(d_dy = cli_upload(be, job->dy, m * n * b2, err)) || !(d_dx = cli_dev_alloc(be, m * k * b2, err)) ||
		    !(d_dw = cli_dev_alloc(be, n * k * b2, err)))
			goto fail;
		if (job->bias && !(d_db = cli_dev_alloc(be, n * b2, err)))
			goto fail;
		if ((rc = fos_linear_backward(be, &saved, &qw, d_dy, d_dx, d_dw, d_db, err)))
			goto done;
		if ((rc = be->d2h(be, out->dx, d_dx, m * k * b2, err)) || (rc = be->d2h(be, out->dw, d_dw, n * k * b2, err)))
			goto done;
		if (d_db && (rc = be->d2h(be, out->db, d_db, n * b2, err)))
			goto done;
	}
	goto done;
fail:
	rc = err->rc ? err->rc : FOS_EINTERNAL;
done:
	if (saved_ok)
		fos_saved_free(be, &saved);
	if (made)
		fos_qweight_free(be, &qw);
	cli_dev_free(be, d_db);
	cli_dev_free(be, d_dw);
	cli_dev_free(be, d_dx);
	cli_dev_free(be, d_dy);
	cli_dev_free(be, d_y);
	cli_dev_free(be, d_bias);
	cli_dev_free(be, d_x);
	cli_dev_free(be, d_w);
	be->destroy(be);
	return rc;
}

int cli_linear_remote(const cli_linear_job *job, cli_linear_out *out, fos_err *err)
{
	int rc = fos_linear_check(&job->opts, job->m, job->n, job->k, NULL, err);
	if (rc)
		return rc;
	fos_client *c;
	if (cli_connect(job->g, &c, err))
		return err->rc;
	int64_t M = job->m, N = job->n, K = job->k;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, job->x), w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, job->w);
	fos_tensor bias = fos_tensor_1d(FOS_DTYPE_BF16, N, job->bias), dy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, job->dy);
	fos_tensor y = fos_tensor_2d(FOS_DTYPE_BF16, M, N, out->y), dx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, out->dx);
	fos_tensor dw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, out->dw), db = fos_tensor_1d(FOS_DTYPE_BF16, N, out->db);
	fos_linear_config cfg = {job->opts.override, fos_block_to_wire(job->opts.weight_block), job->opts.err_mode,
				 job->opts.bound, job->opts.row_scaled, fos_scope_to_wire(job->opts.four_over_six)};
	int bwd = job->dy != NULL, has_bias = job->bias != NULL;
	fos_tensor *t[8] = {&x, &w, &bias, &dy, &y, &dx, &dw, &db}, st_[8];
	cli_shm sh;
	memset(&sh, 0, sizeof sh);
	if (job->shm) { /* the inputs copied once into a region, the outputs written there by fosd */
		int used[8] = {1, 1, has_bias, bwd, 1, bwd, bwd, bwd && has_bias};
		size_t need = 0;
		for (int i = 0; i < 8; i++)
			need += used[i] ? cli_shm_slot(fos_tensor_bytes(t[i])) : 0;
		if ((rc = cli_shm_open(c, need, &sh, err))) {
			fos_close(c);
			return rc;
		}
		for (int i = 0; i < 8; i++)
			if (used[i]) {
				st_[i] = i < 4 ? cli_shm_in(&sh, t[i])
					       : cli_shm_out(&sh, t[i]->dtype, t[i]->shape[0], t[i]->ndim == 2 ? t[i]->shape[1] : 0);
				t[i] = &st_[i];
			}
	}
	fos_status st;
	if (fos_linear(c, t[0], t[1], has_bias ? t[2] : NULL, bwd ? t[3] : NULL, &cfg, t[4], bwd ? t[5] : NULL,
		       bwd ? t[6] : NULL, bwd && has_bias ? t[7] : NULL, &st))
		rc = cli_status_err(&st, "fosd", err);
	for (int i = 4; !rc && job->shm && i < 8; i++) /* the results, out of the region */
		if (t[i] == &st_[i]) {
			fos_tensor *o = i == 4 ? &y : i == 5 ? &dx : i == 6 ? &dw : &db;
			size_t want = (size_t)(i == 4 ? M * N : i == 5 ? M * K : i == 6 ? N * K : N) * 2;
			void *dst = o->data;
			*o = *t[i];
			if (o->data && o->size == want)
				memcpy(dst, o->data, want);
			else
				o->size = (size_t)-1; /* refused below */
			o->data = dst;
		}
	cli_shm_close(&sh);
	if (!rc && (y.size != (size_t)(M * N) * 2 ||
		    (bwd && (dx.size != (size_t)(M * K) * 2 || dw.size != (size_t)(N * K) * 2 ||
			     (has_bias && db.size != (size_t)N * 2)))))
		rc = fos_seterr(err, FOS_EINTERNAL, "fosd: the reply's outputs have unexpected sizes");
	fos_close(c);
	return rc;
}

enum { LF_OUT, LF_LOCAL, LF_BACKEND, LF_BIAS, LF_DY, LF_OVERRIDE, LF_WBLOCK, LF_ROW, LF_ERR, LF_BOUND, LF_SHM, LF_SCOPE,
       LF_COUNT };

int cli_linear_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[LF_COUNT] = {
		[LF_OUT] = {"--out", "DIR", "write DIR/y.npy, and with --dy DIR/dx.npy, DIR/dw.npy\n"
					    "(and DIR/db.npy with --bias); required, created if missing", 0, 0},
		[LF_LOCAL] = {"--local", NULL, "compute in this process instead of sending the request\n"
					       "to fosd (--server); the files written are the same", 0, 0},
		[LF_BACKEND] = {"--backend", "cpu|cuda|auto", "numerics backend for --local (default auto: cuda when a\n"
								"GPU is usable, else cpu)", 0, 0},
		[LF_BIAS] = {"--bias", "B.npy", "bias, shape (N,), bf16 or float32: Y = bf16(Y + bf16(bias))", 0, 0},
		[LF_DY] = {"--dy", "DY.npy", "output gradient, shape (M, N), bf16 or float32: also run\n"
					     "the backward and write dX, dW (and db)", 0, 0},
		[LF_OVERRIDE] = {"--override", "MODE", "backward override: default (quantized, or high_precision\n"
							"with --row-scaled), quantized, high_precision or\n"
							"dequantized (NUMERICS.md 8)", 0, 0},
		[LF_WBLOCK] = {"--weight-block", "16x16|1x16", "block shape of the weight's scales (default 16x16)", 0, 0},
		[LF_ROW] = {"--row-scaled", NULL, "one amax per row of X instead of one per tensor (not with\n"
						  "--override quantized)", 0, 0},
		[LF_ERR] = {"--err", "mae|mse", "how 4/6 compares its two candidates (default mae)", 0, 0},
		[LF_BOUND] = {"--bound", "256|448", "E4M3 scale bound of the 4/6 quantizers (default 256)", 0, 0},
		[LF_SHM] = {"--shm", NULL, "move the tensors through a shared-memory region instead of\n"
					   "the messages (an ipc:// fosd on this host; not with --local);\n"
					   "same results", 0, 0},
		[LF_SCOPE] = {"--four-over-six", "SCOPE", "which operands use 4/6: all (default), weights, activations\n"
							  "or none; the others plain NVFP4 (NUMERICS.md 11)", 0, 0},
	};
	static const char *const pos_names[] = {"X.npy", "W.npy"};
	static const char *const pos_help[] = {"activations, shape (M, K), bf16 ('<u2') or float32 ('<f4')",
					       "weight, shape (N, K), bf16 or float32"};
	cli_cmd cmd = {
		.name = "linear",
		.synopsis = "X.npy W.npy --out DIR [--local] [--bias B.npy] [--dy DY.npy]\n"
			    "           [--override default|quantized|high_precision|dequantized]\n"
			    "           [--weight-block 16x16|1x16] [--row-scaled] [--err mae|mse] [--bound 256|448]\n"
			    "           [--four-over-six all|weights|activations|none] [--backend cpu|cuda|auto] [--shm]",
		.summary = "Run one NVFP4 four-over-six linear layer: Y = X W^T, and its backward with --dy.",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
		.about = "X is quantized 1x16 (per tensor, or per row with --row-scaled), W with --weight-block;\n"
			 "float32 inputs are rounded to bf16 (nearest even) first. The backward gives\n"
			 "dX = dY W, dW = dY^T X and db = sum over M of dY, computed as the override says.\n"
			 "Shapes: any M >= 1, N and K multiples of 16; the results are those of the same\n"
			 "layer on inputs zero-padded to multiples of 128 (NUMERICS.md 8).",
		.footer = "Outputs (all bf16 '<u2'): DIR/y.npy (M, N); with --dy DIR/dx.npy (M, K),\n"
			  "DIR/dw.npy (N, K), and with --bias too DIR/db.npy (N,).",
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;

	fos_linear_opts o = fos_linear_opts_default();
	const char *backend = "auto";
	if (cli_opt_override(&flags[LF_OVERRIDE], &o.override, &err) ||
	    cli_opt_block(&flags[LF_WBLOCK], &o.weight_block, &err) || cli_opt_err_mode(&flags[LF_ERR], &o.err_mode, &err) ||
	    cli_opt_bound(&flags[LF_BOUND], &o.bound, &err) || cli_opt_scope(&flags[LF_SCOPE], &o.four_over_six, &err) ||
	    cli_opt_backend(&flags[LF_BACKEND], &backend, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	o.row_scaled = flags[LF_ROW].given;
	if (o.override == FOS_OVR_QUANTIZED && o.row_scaled)
		return cli_fail(CLI_EXIT_USAGE, "--override quantized cannot be used with --row-scaled (row-scaled X "
						"has no columnwise form)");
	if (fos_linear_check(&o, 128, 128, 128, NULL, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	const char *out_dir = flags[LF_OUT].value, *xp = cmd.pos[0], *wp = cmd.pos[1], *bp = flags[LF_BIAS].value,
		   *dp = flags[LF_DY].value;
	if (!out_dir)
		return cli_fail(CLI_EXIT_USAGE, "linear: --out DIR is required");
	if (cli_check_backend_local(&flags[LF_BACKEND], &flags[LF_LOCAL], &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	if (flags[LF_SHM].given && flags[LF_LOCAL].given)
		return cli_fail(CLI_EXIT_USAGE, "linear: --shm is for fosd (it cannot be used with --local)");

	npy_array x = {0}, w = {0}, bias = {0}, dy = {0};
	cli_linear_out out = {NULL, NULL, NULL, NULL};
	int code = CLI_EXIT_FAIL;
	char xs[64], ws[64], sb[200];
	if (cli_load_float(xp, 2, "(M, K)", &x, &err) || cli_load_float(wp, 2, "(N, K)", &w, &err))
		goto fail;
	npy_shape_str(2, x.shape, xs, sizeof xs);
	npy_shape_str(2, w.shape, ws, sizeof ws);
	int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
	if (w.shape[1] != K) {
		cli_errf(&err, "%s: shape %s has K = %lld columns but %s %s has K = %lld (W is (N, K))", wp, ws,
			 (long long)w.shape[1], xp, xs, (long long)K);
		goto fail;
	}
	if (fos_linear_check(&o, M, N, K, NULL, &err)) {
		char pre[400];
		snprintf(pre, sizeof pre, "X=%s %s, W=%s %s", xp, xs, wp, ws);
		cli_err_prefix(&err, pre);
		goto fail;
	}
	if (bp) {
		if (cli_load_float(bp, 1, "(N,)", &bias, &err))
			goto fail;
		if (bias.shape[0] != N) {
			cli_errf(&err, "%s: shape %s does not match N = %lld (%s %s)", bp,
				 npy_shape_str(1, bias.shape, sb, sizeof sb), (long long)N, wp, ws);
			goto fail;
		}
	}
	if (dp) {
		if (cli_load_float(dp, 2, "(M, N)", &dy, &err))
			goto fail;
		if (dy.shape[0] != M || dy.shape[1] != N) {
			cli_errf(&err, "%s: shape %s does not match (M, N) = (%lld, %lld)", dp,
				 npy_shape_str(2, dy.shape, sb, sizeof sb), (long long)M, (long long)N);
			goto fail;
		}
	}
	if (cli_to_bf16(&x, &err) || cli_to_bf16(&w, &err) || (bp && cli_to_bf16(&bias, &err)) ||
	    (dp && cli_to_bf16(&dy, &err)))
		goto fail;

	size_t b2 = sizeof(uint16_t);
	out.y = malloc((size_t)M * (size_t)N * b2);
	if (dp) {
		out.dx = malloc((size_t)M * (size_t)K * b2);
		out.dw = malloc((size_t)N * (size_t)K * b2);
		if (bp)
			out.db = malloc((size_t)N * b2);
	}
	if (!out.y || (dp && (!out.dx || !out.dw || (bp && !out.db)))) {
		fos_seterr(&err, FOS_ENOMEM, "out of memory for the outputs");
		goto fail;
	}
	cli_linear_job job = {g, backend, M, N, K, x.data, w.data, bp ? bias.data : NULL, dp ? dy.data : NULL, o,
			      flags[LF_SHM].given};
	if (flags[LF_LOCAL].given ? cli_linear_local(&job, &out, &err) : cli_linear_remote(&job, &out, &err)) {
		cli_err_prefix(&err, "linear");
		goto fail;
	}
	int64_t yshape[2] = {M, N}, xshape[2] = {M, K}, wshape[2] = {N, K}, bshape[1] = {N};
	if (cli_mkdirs(out_dir, &err) || cli_write(out_dir, "y.npy", NPY_U2, 2, yshape, out.y, &err))
		goto fail;
	if (dp && (cli_write(out_dir, "dx.npy", NPY_U2, 2, xshape, out.dx, &err) ||
		   cli_write(out_dir, "dw.npy", NPY_U2, 2, wshape, out.dw, &err) ||
		   (bp && cli_write(out_dir, "db.npy", NPY_U2, 1, bshape, out.db, &err))))
		goto fail;
	int local = flags[LF_LOCAL].given;
	if (g->json && !g->quiet) {
		cli_jw w;
		cli_json_begin(&w, g, "linear", local, backend);
		cli_jw_str(&w, "x", xp);
		cli_jw_str(&w, "w", wp);
		cli_jw_i64(&w, "m", M);
		cli_jw_i64(&w, "n", N);
		cli_jw_i64(&w, "k", K);
		cli_jw_str(&w, "weight_block", o.weight_block == FOS_BLOCK_16X16 ? "16x16" : "1x16");
		cli_jw_bool(&w, "row_scaled", o.row_scaled);
		if (dp)
			cli_jw_str(&w, "override", flags[LF_OVERRIDE].given ? flags[LF_OVERRIDE].value : "default");
		cli_json_outputs_begin(&w);
		cli_json_output(&w, "y", out_dir, "y.npy", "bf16", 2, yshape);
		if (dp) {
			cli_json_output(&w, "dx", out_dir, "dx.npy", "bf16", 2, xshape);
			cli_json_output(&w, "dw", out_dir, "dw.npy", "bf16", 2, wshape);
			if (bp)
				cli_json_output(&w, "db", out_dir, "db.npy", "bf16", 1, bshape);
		}
		cli_json_outputs_end(&w);
	}
	char where[600], grads[200] = "";
	if (dp)
		snprintf(grads, sizeof grads, ", dx.npy (%lld, %lld), dw.npy (%lld, %lld)%s", (long long)M, (long long)K,
			 (long long)N, (long long)K, bp ? ", db.npy" : "");
	cli_summary(g, "%s: y.npy (%lld, %lld)%s; %s", out_dir, (long long)M, (long long)N, grads,
		    cli_where(g, local, backend, where, sizeof where));
	code = cli_flush_stdout("linear");
	if (code)
		goto done;
fail:
	if (code != CLI_EXIT_OK)
		cli_report(&err, code);
done:
	free(out.y);
	free(out.dx);
	free(out.dw);
	free(out.db);
	npy_free(&x);
	npy_free(&w);
	npy_free(&bias);
	npy_free(&dy);
	return code;
}
