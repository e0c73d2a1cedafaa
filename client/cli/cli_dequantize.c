/* cli_dequantize.c: `fos dequantize`: codes + scales + amax (.npy) back to a bf16 or float32 matrix
 * (NUMERICS.md section 6); row-scaled when the amax has one value per row. In this process (--local)
 * or through fosd. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_dequantize_local(const cli_dequantize_job *job, void *out, fos_err *err)
{
	fos_backend *be = cli_backend_open(job->backend, err);
	if (!be)
		return err->rc;
	const cli_qhost *h = &job->q;
	size_t n = (size_t)h->rows * (size_t)h->cols;
	size_t n_amax = h->row_scaled ? (size_t)h->rows : 1;
	fos_qtensor q = {h->rows, h->cols, job->bound, h->row_scaled, NULL, NULL, NULL};
	void *d_out = NULL;
	int rc = FOS_OK;
	if (!(q.codes = cli_upload(be, h->codes, n / 2, err)) || !(q.scales = cli_upload(be, h->scales, n / 16, err)) ||
	    !(q.amax = cli_upload(be, h->amax, n_amax * sizeof(float), err)) ||
	    !(d_out = cli_dev_alloc(be, n * fos_dtype_size(job->out_dtype), err))) {
		rc = err->rc;
		goto done;
	}
	if ((rc = be->dequantize(be, &q, job->out_dtype, d_out, err)))
		goto done;
	rc = be->d2h(be, out, d_out, n * fos_dtype_size(job->out_dtype), err);
done:
	cli_dev_free(be, d_out);
	cli_dev_free(be, q.amax);
	cli_dev_free(be, q.scales);
	cli_dev_free(be, q.codes);
	be->destroy(be);
	return rc;
}

int cli_dequantize_remote(const cli_dequantize_job *job, void *out, fos_err *err)
{
	fos_client *c;
	if (cli_connect(job->g, &c, err))
		return err->rc;
	const cli_qhost *h = &job->q;
	int64_t R = h->rows, C = h->cols;
	int od = fos_dtype_to_wire(job->out_dtype);
	fos_tensor codes = fos_tensor_2d(FOS_DTYPE_U8, R, C / 2, h->codes);
	fos_tensor scales = fos_tensor_2d(FOS_DTYPE_E4M3, R, C / 16, h->scales);
	fos_tensor amax = fos_tensor_1d(FOS_DTYPE_F32, h->row_scaled ? R : 1, h->amax);
	fos_tensor o = fos_tensor_2d(od, R, C, out);
	size_t want = o.size;
	fos_status st;
	int rc = FOS_OK;
	if (fos_dequantize(c, &codes, &scales, &amax, job->bound, h->row_scaled, od, &o, &st))
		rc = cli_status_err(&st, "fosd", err);
	else if (o.size != want)
		rc = fos_seterr(err, FOS_EINTERNAL, "fosd: the reply's output has %zu bytes, expected %zu", o.size, want);
	fos_close(c);
	return rc;
}

enum { DF_CODES, DF_SCALES, DF_AMAX, DF_OUT, DF_LOCAL, DF_BACKEND, DF_BOUND, DF_DTYPE, DF_COUNT };

/* Scale bytes come from a quantizer: never negative (sign bit) and never the E4M3 NaN 0x7F. */
static int cli_check_scale_bytes(const npy_array *s, const char *path, fos_err *err)
{
	const uint8_t *b = (const uint8_t *)s->data;
	int64_t cols = s->shape[1];
	for (size_t i = 0; i < s->count; i++)
		if (b[i] >= 0x7F)
			return cli_errf(err, "%s: byte 0x%02X at [%lld, %lld] is not a valid E4M3 scale (%s)", path, b[i],
					(long long)(i / (size_t)cols), (long long)(i % (size_t)cols),
					b[i] == 0x7F ? "NaN" : "negative");
	return FOS_OK;
}

int cli_dequantize_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[DF_COUNT] = {
		[DF_CODES] = {"--codes", "C.npy", "uint8 (R, C/2) E2M1 codes, as fos quantize writes them\n(required)",
			      0, 0},
		[DF_SCALES] = {"--scales", "S.npy", "uint8 (R, C/16) E4M3 scale bytes (required)", 0, 0},
		[DF_AMAX] = {"--amax", "A.npy", "float32 amax: shape () per tensor, or (R,) for a row-scaled\n"
						"tensor (required; values >= 0, not NaN)", 0, 0},
		[DF_OUT] = {"--out", "OUT.npy", "where to write the (R, C) result (required; its directory\n"
						"is created if missing)", 0, 0},
		[DF_LOCAL] = {"--local", NULL, "compute in this process instead of sending the request\n"
					       "to fosd (--server); the file written is the same", 0, 0},
		[DF_BACKEND] = {"--backend", "cpu|cuda|auto", "numerics backend for --local (default auto: cuda when a\n"
								"GPU is usable, else cpu)", 0, 0},
		[DF_BOUND] = {"--bound", "256|448", "the E4M3 scale bound the tensor was quantized with\n"
						    "(default 256; 448 for --recipe nvfp4 output)", 0, 0},
		[DF_DTYPE] = {"--dtype", "bf16|f32", "output dtype: bf16 as '<u2' bit patterns (default) or\n"
						     "float32 '<f4'", 0, 0},
	};
	cli_cmd cmd = {
		.name = "dequantize",
		.synopsis = "--codes C.npy --scales S.npy --amax A.npy --out OUT.npy [--local]\n"
			    "           [--bound 256|448] [--dtype bf16|f32] [--backend cpu|cuda|auto]",
		.summary = "Dequantize NVFP4 codes, scales and amax back to a matrix (NUMERICS.md 6).",
		CLI_CMD_FLAGS(flags),
		.about = "out[r, c] = e2m1(code[r, c]) * rn(rn(e4m3(scale[r, c/16]) * amax) * rn(1/(6*bound)))",
		.npos = 0,
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;

	int bound = 256, dtype = FOS_BF16;
	const char *backend = "auto";
	static const char *const dnames[] = {"bf16", "f32"};
	static const int dvals[] = {FOS_BF16, FOS_F32};
	if (cli_opt_bound(&flags[DF_BOUND], &bound, &err) || cli_choice(&flags[DF_DTYPE], 2, dnames, dvals, &dtype, &err) ||
	    cli_opt_backend(&flags[DF_BACKEND], &backend, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	static const int req[] = {DF_CODES, DF_SCALES, DF_AMAX, DF_OUT};
	for (int i = 0; i < 4; i++)
		if (!flags[req[i]].given)
			return cli_fail(CLI_EXIT_USAGE, "dequantize: %s %s is required", flags[req[i]].name,
					flags[req[i]].metavar);
	if (cli_check_backend_local(&flags[DF_BACKEND], &flags[DF_LOCAL], &err))
		return cli_report(&err, CLI_EXIT_USAGE);

	const char *cp = flags[DF_CODES].value, *sp = flags[DF_SCALES].value, *ap = flags[DF_AMAX].value,
		   *op = flags[DF_OUT].value;
	npy_array codes = {0}, scales = {0}, amax = {0};
	void *out = NULL;
	int code = CLI_EXIT_FAIL;
	static const int u1[] = {NPY_U1}, f4[] = {NPY_F4};
	if (cli_load(cp, &codes, &err) || cli_check_dtype(&codes, cp, 1, u1, &err) ||
	    cli_check_rank(&codes, cp, 2, "(R, C/2)", &err))
		goto fail;
	if (cli_load(sp, &scales, &err) || cli_check_dtype(&scales, sp, 1, u1, &err) ||
	    cli_check_rank(&scales, sp, 2, "(R, C/16)", &err))
		goto fail;
	if (cli_load(ap, &amax, &err) || cli_check_dtype(&amax, ap, 1, f4, &err))
		goto fail;
	char cs[64], ss[64], as[200];
	npy_shape_str(2, codes.shape, cs, sizeof cs);
	npy_shape_str(2, scales.shape, ss, sizeof ss);
	npy_shape_str(amax.ndim, amax.shape, as, sizeof as);
	if (codes.count == 0) {
		cli_errf(&err, "%s: shape %s is empty", cp, cs);
		goto fail;
	}
	/* nonempty, so both dimensions are bounded by the bytes actually read */
	int64_t R = codes.shape[0], C = codes.shape[1] * 2;
	if (C % 16) {
		cli_errf(&err, "%s: shape %s: %lld bytes per row hold %lld codes, not a whole number of 16-element "
			       "blocks",
			 cp, cs, (long long)codes.shape[1], (long long)C);
		goto fail;
	}
	if (scales.shape[0] != R || scales.shape[1] != C / 16) {
		cli_errf(&err, "%s: shape %s does not match codes %s (expected (%lld, %lld): one scale byte per 16 "
			       "elements)",
			 sp, ss, cs, (long long)R, (long long)(C / 16));
		goto fail;
	}
	int row_scaled;
	if (amax.ndim == 0) {
		row_scaled = 0;
	} else if (amax.ndim == 1 && amax.shape[0] == R) {
		row_scaled = 1;
	} else {
		cli_errf(&err, "%s: shape %s matches neither () (per-tensor) nor (%lld,) (row-scaled, one per row of %s)",
			 ap, as, (long long)R, cp);
		goto fail;
	}
	if (cli_check_amax_values(&amax, ap, &err) || cli_check_scale_bytes(&scales, sp, &err))
		goto fail;
	fos_qcfg cfg = fos_qcfg_default();
	cfg.bound = bound;
	cfg.row_scaled = row_scaled;
	if (fos_qcfg_check(&cfg, R, C, &err)) {
		cli_err_prefix(&err, cp);
		goto fail;
	}

	size_t n = (size_t)R * (size_t)C;
	out = malloc(n * fos_dtype_size(dtype));
	if (!out) {
		fos_seterr(&err, FOS_ENOMEM, "out of memory for the (%lld, %lld) output", (long long)R, (long long)C);
		goto fail;
	}
	cli_dequantize_job job = {g, backend, {R, C, row_scaled, codes.data, scales.data, amax.data}, bound, dtype};
	if (flags[DF_LOCAL].given ? cli_dequantize_local(&job, out, &err) : cli_dequantize_remote(&job, out, &err)) {
		cli_err_prefix(&err, "dequantize");
		goto fail;
	}
	int64_t oshape[2] = {R, C};
	if (cli_mkparent(op, &err) || npy_write(op, dtype == FOS_F32 ? NPY_F4 : NPY_U2, 2, oshape, out, &err))
		goto fail;
	int local = flags[DF_LOCAL].given;
	const char *dname = dtype == FOS_F32 ? "float32" : "bf16";
	if (g->json && !g->quiet) {
		cli_jw w;
		cli_json_begin(&w, g, "dequantize", local, backend);
		cli_jw_str(&w, "codes", cp);
		cli_jw_str(&w, "scales", sp);
		cli_jw_str(&w, "amax", ap);
		cli_jw_bool(&w, "row_scaled", row_scaled);
		cli_jw_i64(&w, "bound", bound);
		cli_json_outputs_begin(&w);
		cli_json_output(&w, "out", NULL, op, dname, 2, oshape);
		cli_json_outputs_end(&w);
	}
	char where[600];
	cli_summary(g, "dequantized %s into %s: (%lld, %lld) %s, %s amax, bound %d; %s", cp, op, (long long)R,
		    (long long)C, dname, row_scaled ? "per-row" : "per-tensor", bound,
		    cli_where(g, local, backend, where, sizeof where));
	code = cli_flush_stdout("dequantize");
	if (code)
		goto done;
fail:
	if (code != CLI_EXIT_OK)
		cli_report(&err, code);
done:
	free(out);
	npy_free(&codes);
	npy_free(&scales);
	npy_free(&amax);
	return code;
}
