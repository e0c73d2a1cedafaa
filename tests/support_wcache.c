/* support_wcache.c: the layer-level pieces of the weight-cache-uses suites (support_wcache.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_ref.h"
#include "support_wcache.h"

const int twc_one_use[3] = {FOS_USE_QUANTIZED, FOS_USE_HIGH_PRECISION, FOS_USE_DEQUANTIZED};
const int twc_overrides[3] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
const char *const twc_use_names[3] = {"quantized", "high_precision", "dequantized"};

void *twc_put(fos_backend *be, const void *h, size_t n)
{
	void *d = ref_dev_put(be, h, n);
	assert_non_null(d);
	return d;
}

void *twc_get(fos_backend *be, const void *d, size_t n)
{
	void *h = malloc(n);
	assert_non_null(h);
	assert_int_equal(ref_dev_get(be, h, d, n), FOS_OK);
	return h;
}

void twc_old_operands(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
		      uint16_t **rowdec, uint16_t **coldec, fos_qtensor *qrow)
{
	fos_err e;
	fos_qcfg c = {FOS_RECIPE_4OVER6, o->weight_block, o->err_mode, o->bound, 0};
	uint16_t *wt = malloc((size_t)(n * k) * 2);
	assert_non_null(wt);
	ref_transpose_u16(w, wt, n, k);
	void *wd = twc_put(be, w, (size_t)(n * k) * 2), *wtd = twc_put(be, wt, (size_t)(n * k) * 2);
	fos_qtensor qcol;
	assert_int_equal(fos_qtensor_alloc(be, qrow, n, k, 0, &e), FOS_OK);
	assert_int_equal(fos_qtensor_alloc(be, &qcol, k, n, 0, &e), FOS_OK);
	*rowdec = be->alloc(be, (size_t)(n * k) * 2);
	*coldec = be->alloc(be, (size_t)(n * k) * 2);
	assert_true(*rowdec && *coldec);
	assert_int_equal(be->quantize(be, wd, FOS_BF16, n, k, &c, NULL, qrow, *rowdec, &e), FOS_OK);
	assert_int_equal(be->quantize(be, wtd, FOS_BF16, k, n, &c, qrow->amax, &qcol, *coldec, &e), FOS_OK);
	assert_int_equal(be->sync(be, &e), FOS_OK);
	fos_qtensor_free(be, &qcol);
	be->free(be, wd);
	be->free(be, wtd);
	free(wt);
}

uint16_t *twc_old_forward(fos_backend *be, const void *xd, int64_t m, int64_t n, int64_t k,
			  const fos_linear_opts *o, const fos_qtensor *qrow, const uint16_t *rowdec, const uint16_t *bias)
{
	fos_err e;
	fos_qcfg c = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, o->err_mode, o->bound, o->row_scaled};
	fos_qtensor xq;
	assert_int_equal(fos_qtensor_alloc(be, &xq, m, k, o->row_scaled, &e), FOS_OK);
	uint16_t *xdec = be->alloc(be, (size_t)(m * k) * 2), *y = be->alloc(be, (size_t)(m * n) * 2);
	assert_int_equal(be->quantize(be, xd, FOS_BF16, m, k, &c, NULL, &xq, xdec, &e), FOS_OK);
	float dinv = 1.0f / (6.0f * (float)o->bound);
	fos_gemm_epi epi = {xq.amax, dinv, qrow->amax, dinv, 0, bias};
	if (o->row_scaled) {
		epi.a_amax = 0;
		epi.row_scale = xq.amax;
	}
	assert_int_equal(be->gemm(be, xdec, rowdec, m, n, k, &epi, y, &e), FOS_OK);
	uint16_t *h = twc_get(be, y, (size_t)(m * n) * 2);
	fos_qtensor_free(be, &xq);
	be->free(be, xdec);
	be->free(be, y);
	return h;
}

void twc_check_forward_old_path(fos_backend *be, int64_t n, int64_t k, const int64_t *ms, int nm, const int *uses,
				int nu, int reps, fos_wscratch *ws)
{
	int64_t mmax = ms[nm - 1];
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(mmax * k) * 2), *b = malloc((size_t)n * 2);
	assert_true(w && x && b);
	ref_gen_bf16(REF_RANDN, n, k, 21, w);
	ref_gen_bf16(REF_RANDN, mmax, k, 22, x);
	ref_gen_bf16(REF_RANDN, 1, n, 23, b);
	void *wd = twc_put(be, w, (size_t)(n * k) * 2), *bd = twc_put(be, b, (size_t)n * 2);
	for (int rs = 0; rs < 2; rs++) {
		fos_linear_opts o = fos_linear_opts_default();
		o.row_scaled = rs;
		uint16_t *rd, *cd;
		fos_qtensor qrow;
		twc_old_operands(be, w, n, k, &o, &rd, &cd, &qrow);
		for (int mi = 0; mi < nm; mi++) {
			int64_t m = ms[mi];
			size_t yb = (size_t)(m * n) * 2;
			void *xd = twc_put(be, x, (size_t)(m * k) * 2);
			uint16_t *yo = twc_old_forward(be, xd, m, n, k, &o, &qrow, rd, bd);
			uint16_t *yd = be->alloc(be, yb);
			for (int ui = 0; ui < nu; ui++) {
				fos_qweight qw;
				fos_err e;
				assert_int_equal(fos_qweight_make_uses(be, wd, n, k, &o, uses[ui], &qw, &e), FOS_OK);
				for (int how = 0; how < 3; how++) /* a buffer per call, the scratch, a decoded copy */
					for (int rep = 0; rep < reps; rep++) {
						fos_wops wo = {how == 1 ? ws : NULL, how == 2 ? rd : NULL, NULL};
						assert_int_equal(be->zero(be, yd, yb, &e), FOS_OK);
						assert_int_equal(fos_linear_forward_w(be, xd, m, &qw, how ? &wo : NULL, &o, bd, yd, NULL, &e),
								 FOS_OK);
						uint16_t *y = twc_get(be, yd, yb);
						if (memcmp(y, yo, yb))
							fail_msg("M=%lld row_scaled=%d uses=%d way %d run %d: Y differs from the old path",
								 (long long)m, rs, uses[ui], how, rep);
						free(y);
					}
				fos_qweight_free(be, &qw);
			}
			be->free(be, yd);
			be->free(be, xd);
			free(yo);
		}
		be->free(be, rd);
		be->free(be, cd);
		fos_qtensor_free(be, &qrow);
	}
	be->free(be, wd);
	be->free(be, bd);
	free(w), free(x), free(b);
}

void twc_lres_free(twc_lres *r)
{
	free(r->y), free(r->dx), free(r->dw), free(r->db);
	memset(r, 0, sizeof *r);
}

int twc_run_layer(fos_backend *be, const uint16_t *w, const uint16_t *x, const uint16_t *dy, const uint16_t *b,
		  int64_t m, int64_t n, int64_t k, int ovr, int rs, int uses, int with_ws, twc_lres *r, fos_err *e)
{
	fos_linear_opts o = fos_linear_opts_default();
	o.override = ovr;
	o.row_scaled = rs;
	void *wd = twc_put(be, w, (size_t)(n * k) * 2), *xd = twc_put(be, x, (size_t)(m * k) * 2);
	void *dyd = twc_put(be, dy, (size_t)(m * n) * 2), *bd = twc_put(be, b, (size_t)n * 2);
	uint16_t *yd = be->alloc(be, (size_t)(m * n) * 2), *dxd = be->alloc(be, (size_t)(m * k) * 2);
	uint16_t *dwd = be->alloc(be, (size_t)(n * k) * 2), *dbd = be->alloc(be, (size_t)n * 2);
	fos_wscratch ws = {0, 0};
	fos_wops wo = {&ws, NULL, NULL};
	fos_qweight qw;
	fos_saved sv;
	memset(&sv, 0, sizeof sv);
	int rc = fos_qweight_make_uses(be, wd, n, k, &o, uses, &qw, e);
	if (!rc) {
		rc = fos_linear_forward_w(be, xd, m, &qw, with_ws ? &wo : NULL, &o, bd, yd, &sv, e);
		if (!rc)
			rc = fos_linear_backward_w(be, &sv, &qw, with_ws ? &wo : NULL, dyd, dxd, dwd, dbd, e);
		if (!rc) {
			r->y = twc_get(be, yd, (size_t)(m * n) * 2);
			r->dx = twc_get(be, dxd, (size_t)(m * k) * 2);
			r->dw = twc_get(be, dwd, (size_t)(n * k) * 2);
			r->db = twc_get(be, dbd, (size_t)n * 2);
		}
		fos_saved_free(be, &sv);
		fos_qweight_free(be, &qw);
	}
	fos_wscratch_free(be, &ws);
	void *bufs[] = {wd, xd, dyd, bd, yd, dxd, dwd, dbd};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->free(be, bufs[i]);
	return rc;
}

void twc_check_overrides(fos_backend *be, const uint16_t *w, const uint16_t *x, const uint16_t *dy,
			 const uint16_t *b, int64_t m, int64_t n, int64_t k, int hp_row_scaled)
{
	for (int i = 0; i < 3; i++) {
		int ovr = twc_overrides[i], use = twc_one_use[i];
		int rs = ovr == FOS_OVR_HIGH_PRECISION && hp_row_scaled;
		twc_lres full = {0}, just = {0}, ws = {0}, none = {0};
		fos_err e;
		assert_int_equal(twc_run_layer(be, w, x, dy, b, m, n, k, ovr, rs, FOS_USES_ALL, 0, &full, &e), FOS_OK);
		assert_int_equal(twc_run_layer(be, w, x, dy, b, m, n, k, ovr, rs, use, 0, &just, &e), FOS_OK);
		assert_int_equal(twc_run_layer(be, w, x, dy, b, m, n, k, ovr, rs, use, 1, &ws, &e), FOS_OK);
		twc_lres *rr[2] = {&just, &ws};
		for (int j = 0; j < 2; j++) {
			assert_memory_equal(rr[j]->y, full.y, (size_t)(m * n) * 2);
			assert_memory_equal(rr[j]->dx, full.dx, (size_t)(m * k) * 2);
			assert_memory_equal(rr[j]->dw, full.dw, (size_t)(n * k) * 2);
			assert_memory_equal(rr[j]->db, full.db, (size_t)n * 2);
		}
		/* made for every use but this one: the forward that saves for it is refused */
		int rc = twc_run_layer(be, w, x, dy, b, m, n, k, ovr, rs, FOS_USES_ALL & ~use, 0, &none, &e);
		assert_int_equal(rc, FOS_EINVAL);
		char want[64];
		snprintf(want, sizeof want, "use '%s'", twc_use_names[i]);
		if (!strstr(e.msg, want))
			fail_msg("'%s' does not name %s", e.msg, want);
		twc_lres_free(&full), twc_lres_free(&just), twc_lres_free(&ws);
	}
}

void twc_decode_case(int c, int64_t n, int64_t k, uint16_t *w, fos_linear_opts *o)
{
	int kind = c / 2, wb = c % 2;
	ref_gen_bf16(kind == 0 ? REF_RANDN : kind == 1 ? REF_HEAVY : REF_NEGZERO, n, k, 11 + (uint64_t)kind, w);
	*o = fos_linear_opts_default();
	o->weight_block = wb ? FOS_BLOCK_1X16 : FOS_BLOCK_16X16;
	o->err_mode = kind == 2 ? FOS_ERR_MSE : FOS_ERR_MAE;
	o->bound = kind == 1 ? 448 : 256;
}

void twc_check_overrides_at(fos_backend *be, int64_t n, int64_t k, const int64_t ms[2])
{
	int64_t mmax = ms[1];
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc((size_t)(mmax * k) * 2);
	uint16_t *dy = malloc((size_t)(mmax * n) * 2), *b = malloc((size_t)n * 2);
	assert_true(w && x && dy && b);
	ref_gen_bf16(REF_RANDN, n, k, 31, w);
	ref_gen_bf16(REF_RANDN, mmax, k, 32, x);
	ref_gen_bf16(REF_RANDN, mmax, n, 33, dy);
	ref_gen_bf16(REF_RANDN, 1, n, 34, b);
	for (int mi = 0; mi < 2; mi++)
		twc_check_overrides(be, w, x, dy, b, ms[mi], n, k, mi == 1);
	free(w), free(x), free(dy), free(b);
}
