/* qtensor.c: quantized tensors and weights in backend memory: a tensor's codes, scales and amax
 * (fos_qtensor_*), a weight quantized for the uses asked of it (fos_qweight_*: the rowwise codes
 * always, the columnwise codes and the bf16 master by use, never a bf16 operand) and the scratch a
 * caller lends for decoding W (fos_wscratch_*). linear.c composes these into the layer.
 *
 * Invariants: every function leaves nothing allocated on failure (a half-made weight is freed);
 * a weight's codes are made by the backend's own quantize, so its bits are the backend's; a make
 * returns after the backend synced, so its source may be freed at once. */
#include "backend.h"
#include "fos_format.h"

#include <stdio.h>
#include <string.h>

/* ---- quantized tensors --------------------------------------------------------------------- */

size_t fos_qtensor_bytes(int64_t rows, int64_t cols, int row_scaled)
{
	return (size_t)(rows * cols / 2 + rows * cols / 16) + sizeof(float) * (size_t)(row_scaled ? rows : 1);
}

int fos_qtensor_alloc(fos_backend *be, fos_qtensor *q, int64_t rows, int64_t cols, int row_scaled, fos_err *err)
{
	memset(q, 0, sizeof *q);
	q->rows = rows;
	q->cols = cols;
	q->row_scaled = row_scaled;
	q->bound = 256;
	q->codes = be->alloc(be, (size_t)(rows * cols / 2));
	q->scales = be->alloc(be, (size_t)(rows * cols / 16));
	q->amax = be->alloc(be, sizeof(float) * (size_t)(row_scaled ? rows : 1));
	if (!q->codes || !q->scales || !q->amax) {
		fos_qtensor_free(be, q);
		return fos_seterr(err, FOS_ENOMEM, "out of backend memory for a quantized (%lld, %lld) tensor",
				  (long long)rows, (long long)cols);
	}
	return FOS_OK;
}

void fos_qtensor_free(fos_backend *be, fos_qtensor *q)
{
	if (q->codes)
		be->free(be, q->codes);
	if (q->scales)
		be->free(be, q->scales);
	if (q->amax)
		be->free(be, q->amax);
	q->codes = q->scales = 0;
	q->amax = 0;
}

/* (backend.h) The backend's quantize_t reads a transposed x in place when it has one, else a
 * transposed copy is made here. */
int fos_qtensor_quantize_new(fos_backend *be, const void *x, int trans, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			     const float *amax_in, fos_qtensor *q, uint16_t **dec, fos_err *err)
{
	int rc = fos_qtensor_alloc(be, q, rows, cols, cfg->row_scaled, err);
	if (rc)
		return rc;
	if (dec) {
		*dec = be->alloc(be, (size_t)(rows * cols) * 2);
		if (!*dec) {
			fos_qtensor_free(be, q);
			return fos_seterr(err, FOS_ENOMEM, "out of backend memory for a (%lld, %lld) bf16 operand",
					  (long long)rows, (long long)cols);
		}
	}
	if (!trans) {
		rc = be->quantize(be, x, FOS_BF16, rows, cols, cfg, amax_in, q, dec ? *dec : 0, err);
	} else if (be->quantize_t) {
		rc = be->quantize_t(be, x, FOS_BF16, rows, cols, cfg, amax_in, q, dec ? *dec : 0, err);
	} else {
		uint16_t *xt = be->alloc(be, (size_t)(rows * cols) * 2);
		rc = xt ? be->transpose(be, x, xt, cols, rows, 2, err)
			: fos_seterr(err, FOS_ENOMEM, "out of backend memory for a transposed (%lld, %lld) operand",
				     (long long)rows, (long long)cols);
		if (!rc)
			rc = be->quantize(be, xt, FOS_BF16, rows, cols, cfg, amax_in, q, dec ? *dec : 0, err);
		if (!rc)
			rc = be->sync(be, err); /* xt is freed next */
		if (xt)
			be->free(be, xt);
	}
	if (rc) {
		fos_qtensor_free(be, q);
		if (dec) {
			be->free(be, *dec);
			*dec = 0;
		}
	}
	return rc;
}

/* ---- weights ------------------------------------------------------------------------------- */

const char *fos_use_name(int use)
{
	switch (use) {
	case FOS_USE_FORWARD:
		return "forward";
	case FOS_USE_QUANTIZED:
		return "quantized";
	case FOS_USE_HIGH_PRECISION:
		return "high_precision";
	case FOS_USE_DEQUANTIZED:
		return "dequantized";
	default:
		return "?";
	}
}

char *fos_uses_str(int uses, char *buf, size_t bufsz)
{
	static const int order[] = {FOS_USE_FORWARD, FOS_USE_QUANTIZED, FOS_USE_HIGH_PRECISION, FOS_USE_DEQUANTIZED};
	size_t at = 0;
	if (bufsz)
		buf[0] = 0;
	for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
		if (!(uses & order[i]) || !bufsz)
			continue;
		int w = snprintf(buf + at, bufsz - at, "%s%s", at ? "," : "", fos_use_name(order[i]));
		if (w < 0 || (size_t)w >= bufsz - at)
			break;
		at += (size_t)w;
	}
	return buf;
}

size_t fos_qweight_bytes_for(int64_t n, int64_t k, int uses, fos_qweight_parts *p)
{
	fos_qweight_parts q;
	q.codes = fos_qtensor_bytes(n, k, 0);
	q.columnwise = (uses & FOS_USE_QUANTIZED) ? fos_qtensor_bytes(k, n, 0) : 0;
	q.master = (uses & FOS_USE_HIGH_PRECISION) ? (size_t)(n * k) * 2 : 0;
	if (p)
		*p = q;
	return q.codes + q.columnwise + q.master;
}

size_t fos_qweight_bytes(const fos_qweight *qw)
{
	return fos_qweight_bytes_for(qw->n, qw->k, qw->uses, NULL);
}

/* The columnwise copy: W's recipe (4/6 or plain) on W^T (K x N), w_amax, weight_block, from w. */
static int qweight_make_col(fos_backend *be, fos_qweight *qw, const uint16_t *w, fos_err *err)
{
	fos_qcfg c = fos_linear_wcfg(&qw->opts);
	int rc = fos_qtensor_quantize_new(be, w, 1, qw->k, qw->n, &c, qw->q.amax, &qw->qcol, NULL, err);
	return rc || be->defer_sync ? rc : be->sync(be, err);
}

int fos_qweight_make_uses(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
			  int uses, fos_qweight *qw, fos_err *err)
{
	memset(qw, 0, sizeof *qw);
	if (uses <= 0 || (uses & ~FOS_USES_ALL))
		return fos_seterr(err, FOS_EINVAL, "weight uses 0x%x: give one or more of forward, quantized, "
				  "high_precision, dequantized", (unsigned)uses);
	int rc = fos_linear_check(o, 1, n, k, 0, err); /* any M: only N and K matter here */
	if (rc)
		return rc;
	qw->n = n;
	qw->k = k;
	qw->opts = *o;
	qw->opts.override = FOS_OVR_DEFAULT;
	qw->opts.row_scaled = 0;
	qw->uses = uses;
	fos_qcfg c = fos_linear_wcfg(o);
	rc = fos_qtensor_quantize_new(be, w, 0, n, k, &c, 0, &qw->q, NULL, err);
	if (!rc && (uses & FOS_USE_HIGH_PRECISION)) {
		qw->master = be->alloc(be, (size_t)(n * k) * 2);
		rc = qw->master ? be->d2d(be, qw->master, w, (size_t)(n * k) * 2, err)
				: fos_seterr(err, FOS_ENOMEM, "out of backend memory for the weight master copy");
	}
	if (!rc && (uses & FOS_USE_QUANTIZED))
		rc = qweight_make_col(be, qw, w, err);
	if (!rc && !be->defer_sync)
		rc = be->sync(be, err);
	if (rc)
		fos_qweight_free(be, qw);
	return rc;
}

int fos_qweight_make(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
		     int keep_master, int want_col, fos_qweight *qw, fos_err *err)
{
	int uses = FOS_USE_FORWARD | FOS_USE_DEQUANTIZED;
	if (keep_master)
		uses |= FOS_USE_HIGH_PRECISION | FOS_USE_QUANTIZED;
	if (want_col)
		uses |= FOS_USE_QUANTIZED;
	return fos_qweight_make_uses(be, w, n, k, o, uses, qw, err);
}

void fos_qweight_free(fos_backend *be, fos_qweight *qw)
{
	fos_qtensor_free(be, &qw->q);
	fos_qtensor_free(be, &qw->qcol);
	if (qw->master)
		be->free(be, qw->master);
	qw->master = 0;
}

int fos_qweight_decode(fos_backend *be, const fos_qweight *qw, int col, uint16_t *out, fos_err *err)
{
	if (col && !qw->qcol.codes)
		return fos_seterr(err, FOS_EINVAL, "the weight was not made for the quantized use: no columnwise codes");
	return be->decode(be, col ? &qw->qcol : &qw->q, out, err);
}

void *fos_wscratch_get(fos_backend *be, fos_wscratch *ws, size_t n, fos_err *err)
{
	if (ws->cap < n) {
		if (ws->p)
			be->free(be, ws->p); /* stream-ordered: after the work queued on it */
		ws->p = be->alloc(be, n);
		ws->cap = ws->p ? n : 0;
		if (!ws->p)
			fos_seterr(err, FOS_ENOMEM, "out of backend memory for a %zu-byte decode buffer", n);
	}
	return ws->p;
}

void fos_wscratch_free(fos_backend *be, fos_wscratch *ws)
{
	if (ws->p)
		be->free(be, ws->p);
	ws->p = 0;
	ws->cap = 0;
}
