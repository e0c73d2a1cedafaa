/* cli_quantize.c: `fos quantize`: four-over-six (or plain NVFP4) quantize of a bf16/f32 .npy
 * matrix into DIR/codes.npy, DIR/scales.npy and DIR/amax.npy (NUMERICS.md sections 1-5), in this
 * process (--local) or through fosd. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_quantize_local(const cli_quantize_job *job, cli_qhost *out, fos_err *err)
{
	fos_backend *be = cli_backend_open(job->backend, err);
	if (!be)
		return err->rc;
	int rs = job->cfg.row_scaled;
	size_t n = (size_t)job->rows * (size_t)job->cols;
	size_t n_amax = rs ? (size_t)job->rows : 1;
	fos_qtensor q;
	memset(&q, 0, sizeof q);
	void *d_x = NULL;
	float *d_amax = NULL;
	int rc = FOS_OK;

	d_x = cli_upload(be, job->x, n * fos_dtype_size(job->x_dtype), err);
	if (!d_x) {
		rc = err->rc;
		goto done;
	}
	if (job->amax && !(d_amax = cli_upload(be, job->amax, n_amax * sizeof(float), err))) {
		rc = err->rc;
		goto done;
	}
	if ((rc = fos_qtensor_alloc(be, &q, job->rows, job->cols, rs, err)))
		goto done;
	if ((rc = be->quantize(be, d_x, job->x_dtype, job->rows, job->cols, &job->cfg, d_amax, &q, NULL, err)))
		goto done;
	if ((rc = be->d2h(be, out->codes, q.codes, n / 2, err)) ||
	    (rc = be->d2h(be, out->scales, q.scales, n / 16, err)) ||
	    (rc = be->d2h(be, out->amax, q.amax, n_amax * sizeof(float), err)))
		goto done;
	out->rows = job->rows;
	out->cols = job->cols;
	out->row_scaled = rs;
done:
	if (q.codes || q.scales || q.amax)
		fos_qtensor_free(be, &q);
	cli_dev_free(be, d_amax);
	cli_dev_free(be, d_x);
	be->destroy(be);
	return rc;
}

int cli_quantize_remote(const cli_quantize_job *job, cli_qhost *out, fos_err *err)
{
	fos_client *c;
	if (cli_connect(job->g, &c, err))
		return err->rc;
	int rs = job->cfg.row_scaled;
	int64_t R = job->rows, C = job->cols, na = rs ? R : 1;
	fos_tensor x = fos_tensor_2d(fos_dtype_to_wire(job->x_dtype), R, C, job->x);
	fos_tensor amax_in = fos_tensor_1d(FOS_DTYPE_F32, na, job->amax);
	fos_tensor codes = fos_tensor_2d(FOS_DTYPE_U8, R, C / 2, out->codes);
	fos_tensor scales = fos_tensor_2d(FOS_DTYPE_E4M3, R, C / 16, out->scales);
	fos_tensor amax = fos_tensor_1d(FOS_DTYPE_F32, na, out->amax);
	fos_quant_config qc = {job->cfg.recipe, fos_block_to_wire(job->cfg.block), job->cfg.err_mode, job->cfg.bound, rs};
	fos_status st;
	int rc = FOS_OK;
	if (fos_quantize(c, &x, &qc, job->amax ? &amax_in : NULL, &codes, &scales, &amax, &st))
		rc = cli_status_err(&st, "fosd", err);
	else if (codes.size != (size_t)(R * C / 2) || scales.size != (size_t)(R * C / 16) ||
		 amax.size != (size_t)na * sizeof(float))
		rc = fos_seterr(err, FOS_EINTERNAL, "fosd: the reply's outputs have unexpected sizes");
	if (!rc) {
		out->rows = R;
		out->cols = C;
		out->row_scaled = rs;
	}
	fos_close(c);
	return rc;
}

enum { QF_OUT, QF_LOCAL, QF_BACKEND, QF_RECIPE, QF_BLOCK, QF_ERR, QF_BOUND, QF_ROW, QF_AMAX, QF_COUNT };

int cli_quantize_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[QF_COUNT] = {
		[QF_OUT] = {"--out", "DIR", "write DIR/codes.npy, DIR/scales.npy and DIR/amax.npy (required;\n"
					    "DIR is created if missing)", 0, 0},
		[QF_LOCAL] = {"--local", NULL, "compute in this process instead of sending the request\n"
					       "to fosd (--server); the files written are the same", 0, 0},
		[QF_BACKEND] = {"--backend", "cpu|cuda|auto", "numerics backend for --local (default auto: cuda when a\n"
								"GPU is usable, else cpu)", 0, 0},
		[QF_RECIPE] = {"--recipe", "4over6|nvfp4", "4over6 (default): four-over-six, for activations and\n"
							   "weights; nvfp4: plain NVFP4, the gradient quantizer\n"
							   "(always bound 448; with --block 16x16 or --row-scaled\n"
							   "a plain operand of `--four-over-six`, NUMERICS.md 11)", 0, 0},
		[QF_BLOCK] = {"--block", "1x16|16x16", "one scale per 1x16 row block (default) or per 16x16 tile\n"
						       "(the weight mode; rows must be divisible by 16)", 0, 0},
		[QF_ERR] = {"--err", "mae|mse", "how 4/6 compares its two candidates: mean absolute\n"
						"(default) or squared error (4over6 only)", 0, 0},
		[QF_BOUND] = {"--bound", "256|448", "E4M3 scale bound: 256 (default for 4over6) or 448\n"
						    "(nvfp4 uses 448)", 0, 0},
		[QF_ROW] = {"--row-scaled", NULL, "one amax per row instead of one per tensor\n"
						  "(1x16 blocks only)", 0, 0},
		[QF_AMAX] = {"--amax", "AMAX.npy", "use this float32 amax instead of computing it: shape ()\n"
						   "per tensor, (R,) with --row-scaled; values >= 0, not NaN", 0, 0},
	};
	static const char *const pos_names[] = {"X.npy"};
	static const char *const pos_help[] = {"the matrix to quantize, shape (R, C), C divisible by 16;\n"
					       "bf16 as '<u2' bit patterns or float32 '<f4'"};
	cli_cmd cmd = {
		.name = "quantize",
		.synopsis = "X.npy --out DIR [--local] [--recipe 4over6|nvfp4] [--block 1x16|16x16]\n"
			    "           [--err mae|mse] [--bound 256|448] [--row-scaled] [--amax AMAX.npy]\n"
			    "           [--backend cpu|cuda|auto]",
		.summary = "Quantize a matrix to NVFP4 with four-over-six block scaling (NUMERICS.md 3-5).",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
		.footer = "Outputs:\n"
			  "  DIR/codes.npy   uint8 (R, C/2): two E2M1 codes per byte, element 2j in the low nibble\n"
			  "  DIR/scales.npy  uint8 (R, C/16): one E4M3 scale byte per 16 elements of a row\n"
			  "                  (16x16: the tile's byte repeated on each of its 16 rows)\n"
			  "  DIR/amax.npy    float32, shape () per tensor or (R,) row-scaled: the raw amax",
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;

	/* ---- options ---- */
	fos_qcfg cfg = fos_qcfg_default();
	const char *backend = "auto";
	static const char *const recipes[] = {"4over6", "nvfp4"};
	static const int recipe_vals[] = {FOS_RECIPE_4OVER6, FOS_RECIPE_NVFP4};
	if (cli_choice(&flags[QF_RECIPE], 2, recipes, recipe_vals, &cfg.recipe, &err) ||
	    cli_opt_block(&flags[QF_BLOCK], &cfg.block, &err) || cli_opt_err_mode(&flags[QF_ERR], &cfg.err_mode, &err) ||
	    cli_opt_bound(&flags[QF_BOUND], &cfg.bound, &err) || cli_opt_backend(&flags[QF_BACKEND], &backend, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	cfg.row_scaled = flags[QF_ROW].given;
	if (cfg.recipe == FOS_RECIPE_NVFP4) {
		if (flags[QF_BOUND].given && cfg.bound != 448)
			cli_errf(&err, "--bound %d cannot be used with --recipe nvfp4 (plain NVFP4 uses bound 448)",
				 cfg.bound);
		else if (flags[QF_ERR].given)
			cli_errf(&err, "--err cannot be used with --recipe nvfp4 (plain NVFP4 makes no 4/6 choice)");
		if (err.msg[0])
			return cli_report(&err, CLI_EXIT_USAGE);
		cfg.bound = 448;
	}
	if (cfg.row_scaled && cfg.block == FOS_BLOCK_16X16)
		return cli_fail(CLI_EXIT_USAGE, "--row-scaled cannot be used with --block 16x16 (row-scaled is 1x16 only)");
	if (fos_qcfg_check(&cfg, 16, 16, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	const char *x_path = cmd.pos[0], *amax_path = flags[QF_AMAX].value, *out_dir = flags[QF_OUT].value;
	if (!out_dir)
		return cli_fail(CLI_EXIT_USAGE, "quantize: --out DIR is required");
	if (cli_check_backend_local(&flags[QF_BACKEND], &flags[QF_LOCAL], &err))
		return cli_report(&err, CLI_EXIT_USAGE);

	/* ---- inputs ---- */
	npy_array x = {0}, amax = {0};
	cli_qhost q;
	memset(&q, 0, sizeof q);
	int code = CLI_EXIT_FAIL;
	if (cli_load_float(x_path, 2, "(R, C)", &x, &err) || cli_check_nonempty(&x, x_path, &err))
		goto fail;
	int64_t R = x.shape[0], C = x.shape[1];
	if (fos_qcfg_check(&cfg, R, C, &err)) {
		char sb[64], pre[512];
		snprintf(pre, sizeof pre, "%s: shape %s", x_path, npy_shape_str(2, x.shape, sb, sizeof sb));
		cli_err_prefix(&err, pre);
		goto fail;
	}
	if (amax_path) {
		static const int f4[] = {NPY_F4};
		if (cli_load(amax_path, &amax, &err) || cli_check_dtype(&amax, amax_path, 1, f4, &err))
			goto fail;
		if (cfg.row_scaled && (amax.ndim != 1 || amax.shape[0] != R)) {
			char sb[200];
			cli_errf(&err, "%s: with --row-scaled the amax must have shape (%lld,) (one per row of %s), got %s",
				 amax_path, (long long)R, x_path, npy_shape_str(amax.ndim, amax.shape, sb, sizeof sb));
			goto fail;
		}
		if (!cfg.row_scaled && amax.ndim != 0) {
			char sb[200];
			cli_errf(&err, "%s: a per-tensor amax must have shape (), got %s%s", amax_path,
				 npy_shape_str(amax.ndim, amax.shape, sb, sizeof sb),
				 amax.ndim == 1 ? " (a per-row amax needs --row-scaled)" : "");
			goto fail;
		}
		if (cli_check_amax_values(&amax, amax_path, &err))
			goto fail;
	}

	/* ---- run ---- */
	size_t n = (size_t)R * (size_t)C, n_amax = cfg.row_scaled ? (size_t)R : 1;
	q.codes = malloc(n / 2);
	q.scales = malloc(n / 16);
	q.amax = malloc(n_amax * sizeof(float));
	if (!q.codes || !q.scales || !q.amax) {
		fos_seterr(&err, FOS_ENOMEM, "out of memory for the quantized output of %s", x_path);
		goto fail;
	}
	cli_quantize_job job = {g, backend, x.data, x.dtype == NPY_F4 ? FOS_F32 : FOS_BF16, R, C, cfg,
				amax_path ? (const float *)amax.data : NULL};
	if (flags[QF_LOCAL].given ? cli_quantize_local(&job, &q, &err) : cli_quantize_remote(&job, &q, &err)) {
		cli_err_prefix(&err, "quantize");
		goto fail;
	}

	/* ---- outputs (the directory is made only now: a failed run leaves nothing behind) ---- */
	if (cli_mkdirs(out_dir, &err))
		goto fail;
	int64_t cshape[2] = {R, C / 2}, sshape[2] = {R, C / 16}, ashape[1] = {R};
	if (cli_write(out_dir, "codes.npy", NPY_U1, 2, cshape, q.codes, &err) ||
	    cli_write(out_dir, "scales.npy", NPY_U1, 2, sshape, q.scales, &err) ||
	    cli_write(out_dir, "amax.npy", NPY_F4, cfg.row_scaled ? 1 : 0, ashape, q.amax, &err))
		goto fail;
	int local = flags[QF_LOCAL].given;
	const char *recipe = recipes[cfg.recipe == FOS_RECIPE_NVFP4], *block = cfg.block == FOS_BLOCK_16X16 ? "16x16" : "1x16",
		   *errm = cfg.err_mode == FOS_ERR_MSE ? "mse" : "mae";
	if (g->json && !g->quiet) {
		cli_jw w;
		cli_json_begin(&w, g, "quantize", local, backend);
		cli_jw_str(&w, "input", x_path);
		cli_jw_shape(&w, "shape", 2, x.shape);
		cli_jw_str(&w, "recipe", recipe);
		cli_jw_str(&w, "block", block);
		cli_jw_str(&w, "err", errm);
		cli_jw_i64(&w, "bound", cfg.bound);
		cli_jw_bool(&w, "row_scaled", cfg.row_scaled);
		if (!cfg.row_scaled)
			cli_jw_dbl(&w, "amax", q.amax[0]);
		cli_json_outputs_begin(&w);
		cli_json_output(&w, "codes", out_dir, "codes.npy", "uint8", 2, cshape);
		cli_json_output(&w, "scales", out_dir, "scales.npy", "uint8", 2, sshape);
		cli_json_output(&w, "amax", out_dir, "amax.npy", "float32", cfg.row_scaled ? 1 : 0, ashape);
		cli_json_outputs_end(&w);
	}
	char where[600], am[64];
	if (cfg.row_scaled)
		snprintf(am, sizeof am, "amax per row");
	else
		snprintf(am, sizeof am, "amax %.9g", (double)q.amax[0]);
	cli_summary(g, "quantized %s (%lld, %lld) into %s/{codes,scales,amax}.npy: %s %s, %s, bound %d, %s; %s", x_path,
		    (long long)R, (long long)C, out_dir, recipe, block, errm, cfg.bound, am,
		    cli_where(g, local, backend, where, sizeof where));
	code = cli_flush_stdout("quantize");
	if (code)
		goto done;
fail:
	if (code != CLI_EXIT_OK)
		cli_report(&err, code);
done:
	free(q.codes);
	free(q.scales);
	free(q.amax);
	npy_free(&x);
	npy_free(&amax);
	return code;
}
