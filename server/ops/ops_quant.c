/* ops_quant.c: Quantize (bf16 or f32 -> E2M1 codes, E4M3 scales, amax) and Dequantize, one backend
 * call each, as the local CLI does. The quantized tensor's parts are op buffers (ops.h), so parts
 * asked into the client's GPU memory are written there in place. */
#include "ops.h"

#include <string.h>

/* Buffers of a quantized (rows, cols) tensor: each part the result named ("codes", "scales",
 * "amax") or fosd's own. 0, or -1 with e (what was made stays in q for q_free). */
static int q_alloc(fosd_opctx *c, fos_qtensor *q, int64_t rows, int64_t cols, int row_scaled, fos_err *e)
{
	memset(q, 0, sizeof *q);
	q->rows = rows;
	q->cols = cols;
	q->row_scaled = row_scaled;
	q->bound = 256;
	if (!(q->codes = fosd_dev_out(c, "codes", (size_t)(rows * cols / 2), e)) ||
	    !(q->scales = fosd_dev_out(c, "scales", (size_t)(rows * cols / 16), e)) ||
	    !(q->amax = fosd_dev_out(c, "amax", sizeof(float) * (size_t)(row_scaled ? rows : 1), e)))
		return -1;
	return 0;
}

static void q_free(fosd_opctx *c, fos_qtensor *q)
{
	fosd_dev_free(c, q->codes);
	fosd_dev_free(c, q->scales);
	fosd_dev_free(c, q->amax);
	memset(q, 0, sizeof *q);
}

int fosd_op_quantize(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	fosd_quant_args *a = &s->args.u.quant;
	fos_backend *be = c->be;
	fos_err e;
	int64_t rows = a->x.shape[0], cols = a->x.shape[1];
	fos_qtensor q;
	void *x = NULL, *amax = NULL;
	int r = 0;
	memset(&q, 0, sizeof q);
	if (!(x = fosd_dev_from(c, &a->x, &e)) || (a->has_amax && !(amax = fosd_dev_from(c, &a->amax, &e))) ||
	    q_alloc(c, &q, rows, cols, a->cfg.row_scaled, &e)) {
		r = fosd_fail_be(c, e.rc, NULL, &e);
		goto out;
	}
	int rc = be->quantize(be, x, a->dtype, rows, cols, &a->cfg, amax, &q, NULL, &e);
	if (rc) {
		r = fosd_fail_be(c, rc, "quantize", &e);
		goto out;
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	Fos__QuantizeResult qr = FOS__QUANTIZE_RESULT__INIT;
	qr.codes = fosd_out_add(&outs, FOS__DTYPE__DTYPE_U8, rows, cols / 2, q.codes);
	qr.scales = fosd_out_add(&outs, FOS__DTYPE__DTYPE_E4M3, rows, cols / 16, q.scales);
	qr.amax = fosd_out_add(&outs, FOS__DTYPE__DTYPE_F32, a->cfg.row_scaled ? rows : 1, 0, q.amax);
	qr.bound = (uint32_t)a->cfg.bound;
	r = fosd_result(c, FOS__RESPONSE__RESULT_QUANTIZE, &qr, &outs);
out:
	q_free(c, &q);
	fosd_dev_free(c, x);
	fosd_dev_free(c, amax);
	return r;
}

int fosd_op_dequantize(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	fosd_deq_args *a = &s->args.u.deq;
	fos_backend *be = c->be;
	fos_err e;
	fos_qtensor q;
	void *out = NULL;
	int r = 0;
	memset(&q, 0, sizeof q);
	size_t out_bytes = (size_t)(a->rows * a->cols) * fos_dtype_size(a->out_dtype);
	q.rows = a->rows;
	q.cols = a->cols;
	q.bound = a->bound;
	q.row_scaled = a->row_scaled;
	if (!(q.codes = fosd_dev_from(c, &a->codes, &e)) || !(q.scales = fosd_dev_from(c, &a->scales, &e)) ||
	    !(q.amax = fosd_dev_from(c, &a->amax, &e)) || !(out = fosd_dev_out(c, "out", out_bytes, &e))) {
		r = fosd_fail_be(c, e.rc, NULL, &e);
		goto out;
	}
	int rc = be->dequantize(be, &q, a->out_dtype, out, &e);
	if (rc) {
		r = fosd_fail_be(c, rc, "dequantize", &e);
		goto out;
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	Fos__DequantizeResult dr = FOS__DEQUANTIZE_RESULT__INIT;
	dr.out = fosd_out_add(&outs, a->out_dtype == FOS_F32 ? FOS__DTYPE__DTYPE_F32 : FOS__DTYPE__DTYPE_BF16, a->rows,
			      a->cols, out);
	r = fosd_result(c, FOS__RESPONSE__RESULT_DEQUANTIZE, &dr, &outs);
out:
	q_free(c, &q);
	fosd_dev_free(c, out);
	return r;
}
