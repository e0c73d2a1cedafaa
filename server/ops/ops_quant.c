/* ops_quant.c: Quantize (bf16 or f32 -> E2M1 codes, E4M3 scales, amax) and Dequantize, one backend
 * call each, as the local CLI does. */
#include "ops.h"

#include <string.h>

nng_msg *fosd_op_quantize(fosd_opctx *c, int *code)
{
	fosd_slot *s = c->s;
	fosd_quant_args *a = &s->args.u.quant;
	fos_backend *be = c->be;
	fos_err e;
	int64_t rows = a->x.shape[0], cols = a->x.shape[1];
	fos_qtensor q;
	int have_q = 0;
	void *x = NULL, *amax = NULL;
	nng_msg *r = NULL;
	memset(&q, 0, sizeof q);
	if (!(x = fosd_dev_from(c, &a->x, &e)) || (a->has_amax && !(amax = fosd_dev_from(c, &a->amax, &e))) ||
	    fos_qtensor_alloc(be, &q, rows, cols, a->cfg.row_scaled, &e)) {
		r = fosd_fail_be(s, code, e.rc, NULL, &e);
		goto out;
	}
	have_q = 1;
	int rc = be->quantize(be, x, a->dtype, rows, cols, &a->cfg, amax, &q, NULL, &e);
	if (rc) {
		r = fosd_fail_be(s, code, rc, "quantize", &e);
		goto out;
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	Fos__QuantizeResult qr = FOS__QUANTIZE_RESULT__INIT;
	qr.codes = fosd_out_add(&outs, FOS__DTYPE__DTYPE_U8, rows, cols / 2, q.codes);
	qr.scales = fosd_out_add(&outs, FOS__DTYPE__DTYPE_E4M3, rows, cols / 16, q.scales);
	qr.amax = fosd_out_add(&outs, FOS__DTYPE__DTYPE_F32, a->cfg.row_scaled ? rows : 1, 0, q.amax);
	qr.bound = (uint32_t)a->cfg.bound;
	r = fosd_result_reply(c, FOS__RESPONSE__RESULT_QUANTIZE, &qr, &outs, code);
out:
	if (have_q)
		fos_qtensor_free(be, &q);
	fosd_dev_free(c, x);
	fosd_dev_free(c, amax);
	return r;
}

nng_msg *fosd_op_dequantize(fosd_opctx *c, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
	fosd_deq_args *a = &s->args.u.deq;
	fos_backend *be = c->be;
	fos_err e;
	fos_qtensor q;
	int have_q = 0;
	void *out = NULL;
	nng_msg *r = NULL;
	memset(&q, 0, sizeof q);
	size_t out_bytes = (size_t)(a->rows * a->cols) * fos_dtype_size(a->out_dtype);
	if (fos_qtensor_alloc(be, &q, a->rows, a->cols, a->row_scaled, &e)) {
		r = fosd_fail_be(s, code, e.rc, NULL, &e);
		goto out;
	}
	have_q = 1;
	q.rows = a->rows;
	q.cols = a->cols;
	q.bound = a->bound;
	q.row_scaled = a->row_scaled;
	if (fosd_tensor_h2d(c->be, srv, q.codes, &a->codes, &e) || fosd_tensor_h2d(c->be, srv, q.scales, &a->scales, &e) ||
	    fosd_tensor_h2d(c->be, srv, q.amax, &a->amax, &e) || !(out = fosd_dev_alloc(c, out_bytes, &e))) {
		r = fosd_fail_be(s, code, e.rc, NULL, &e);
		goto out;
	}
	int rc = be->dequantize(be, &q, a->out_dtype, out, &e);
	if (rc) {
		r = fosd_fail_be(s, code, rc, "dequantize", &e);
		goto out;
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	Fos__DequantizeResult dr = FOS__DEQUANTIZE_RESULT__INIT;
	dr.out = fosd_out_add(&outs, a->out_dtype == FOS_F32 ? FOS__DTYPE__DTYPE_F32 : FOS__DTYPE__DTYPE_BF16, a->rows,
			      a->cols, out);
	r = fosd_result_reply(c, FOS__RESPONSE__RESULT_DEQUANTIZE, &dr, &outs, code);
out:
	if (have_q)
		fos_qtensor_free(be, &q);
	fosd_dev_free(c, out);
	return r;
}
