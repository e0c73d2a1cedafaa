/* support_shapes.c: padded-layer reference of the shape rule (see support_shapes.h). */
#include "support_shapes.h"
#include "support_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const shp_opt shp_opts[] = {
	{"default (quantized) 16x16 mae 256 bias", FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, 1, 0, 1},
	{"default (high_precision) row-scaled 16x16", FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 1, 0, 1, 0},
	{"default (quantized) 1x16 mse 448 bias, no master", FOS_OVR_DEFAULT, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 0, 1, 0,
	 1},
	{"quantized 16x16 mse 448 (columnwise made lazily)", FOS_OVR_QUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0, 0,
	 1, 0},
	{"quantized 1x16 mae 256 bias", FOS_OVR_QUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0, 1, 0, 1},
	{"high_precision 16x16 bias", FOS_OVR_HIGH_PRECISION, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, 1, 1, 0},
	{"high_precision 1x16 row-scaled mse 448", FOS_OVR_HIGH_PRECISION, FOS_BLOCK_1X16, FOS_ERR_MSE, 448, 1, 0, 1, 0},
	{"dequantized 16x16", FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, 0, 0, 0},
	{"dequantized 1x16 mse bias", FOS_OVR_DEQUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MSE, 256, 0, 1, 0, 0},
	{"dequantized 16x16 row-scaled mse 448 bias", FOS_OVR_DEQUANTIZED, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 1, 1, 0, 0},
	{"dequantized 1x16 row-scaled 448", FOS_OVR_DEQUANTIZED, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 1, 0, 0, 0},
	{"high_precision 16x16 mse 448", FOS_OVR_HIGH_PRECISION, FOS_BLOCK_16X16, FOS_ERR_MSE, 448, 0, 0, 1, 0},
};
const int shp_nopts = (int)(sizeof shp_opts / sizeof shp_opts[0]);

const int64_t shp_shapes[][3] = {
	{1, 16, 16},	{2, 48, 144},	{15, 272, 48},	{17, 144, 272}, {100, 1040, 16}, {129, 16, 1040}, {1000, 48, 48},
	{17, 1040, 144}, {1, 272, 1040}, {129, 144, 272}, {2, 16, 48},	 {100, 48, 272},  {15, 1040, 1040}, {1000, 144, 16},
};
const int shp_nshapes = (int)(sizeof shp_shapes / sizeof shp_shapes[0]);

fos_linear_opts shp_opts_of(const shp_opt *c)
{
	fos_linear_opts o = fos_linear_opts_default();
	o.override = c->override;
	o.weight_block = c->weight_block;
	o.err_mode = c->err_mode;
	o.bound = c->bound;
	o.row_scaled = c->row_scaled;
	return o;
}

int64_t shp_up128(int64_t v)
{
	return (v + 127) / 128 * 128;
}

static uint16_t *xmalloc16(int64_t n)
{
	uint16_t *p = calloc((size_t)(n > 0 ? n : 1), 2);
	if (!p) {
		fprintf(stderr, "support_shapes: out of memory\n");
		abort();
	}
	return p;
}

static void randn(uint16_t *p, int64_t n, double scale, ref_rng *r)
{
	ref_randn_bf16(p, n, scale, r);
}

void shp_inputs(shp_layer *l, int64_t m, int64_t n, int64_t k, int bias, int dy, int special, uint64_t seed)
{
	memset(l, 0, sizeof *l);
	l->m = m;
	l->n = n;
	l->k = k;
	ref_rng r;
	ref_rng_seed(&r, seed);
	l->x = xmalloc16(m * k);
	l->w = xmalloc16(n * k);
	randn(l->x, m * k, 1.0, &r);
	randn(l->w, n * k, 0.05, &r);
	for (int64_t i = 0; i < m; i += 7)
		for (int64_t j = 0; j < k; j++)
			l->x[i * k + j] = ref_f32_bf16(ref_bf16_f32(l->x[i * k + j]) * 40.0f);
	for (int64_t i = 0; i < m * k; i += 13)
		l->x[i] = 0x8000; /* -0 */
	memset(l->w + (n / 2) * k, 0, 32); /* an all-zero block of W */
	if (special == 1) {
		l->x[0] = 0x7F80;		  /* +inf */
		l->x[(m - 1) * k + k / 2] = 0xFFC1; /* NaN with a payload */
		if (m > 2)
			l->x[2 * k + 1] = 0xFF80; /* -inf */
	}
	if (special == 2) {
		l->w[k + 3] = 0xFF80;		    /* -inf */
		l->w[(n - 1) * k] = 0x7FC3;	    /* NaN */
	}
	if (bias) {
		l->bias = xmalloc16(n);
		randn(l->bias, n, 0.5, &r);
	}
	if (dy) {
		l->dy = xmalloc16(m * n);
		randn(l->dy, m * n, 0.1, &r);
		for (int64_t i = 0; i < m * n; i += 11)
			l->dy[i] = 0x8000;
		if (special == 3) {
			l->dy[m * n - 1] = 0x7F80;
			l->dy[n / 2] = 0xFFC0;
		}
	}
}

/* dst (R, C) = src (r, c) in its top-left corner, zeros elsewhere. */
static uint16_t *pad2d(const uint16_t *src, int64_t r, int64_t c, int64_t R, int64_t C)
{
	uint16_t *d = xmalloc16(R * C);
	for (int64_t i = 0; i < r; i++)
		memcpy(d + i * C, src + i * c, (size_t)c * 2);
	return d;
}

void shp_pad(const shp_layer *l, shp_layer *p)
{
	memset(p, 0, sizeof *p);
	p->m = shp_up128(l->m);
	p->n = shp_up128(l->n);
	p->k = shp_up128(l->k);
	p->x = pad2d(l->x, l->m, l->k, p->m, p->k);
	p->w = pad2d(l->w, l->n, l->k, p->n, p->k);
	if (l->bias)
		p->bias = pad2d(l->bias, 1, l->n, 1, p->n);
	if (l->dy)
		p->dy = pad2d(l->dy, l->m, l->n, p->m, p->n);
}

void shp_free(shp_layer *l)
{
	uint16_t *p[] = {l->x, l->w, l->bias, l->dy, l->y, l->dx, l->dw, l->db};
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		free(p[i]);
	memset(l, 0, sizeof *l);
}

int shp_run(fos_backend *be, const fos_linear_opts *o, int keep_master, int want_col, shp_layer *l, fos_err *err)
{
	int64_t m = l->m, n = l->n, k = l->k;
	size_t mk = (size_t)(m * k) * 2, nk = (size_t)(n * k) * 2, mn = (size_t)(m * n) * 2, nb = (size_t)n * 2;
	int dy = l->dy != NULL, bias = l->bias != NULL;
	l->y = xmalloc16(m * n);
	if (dy) {
		l->dx = xmalloc16(m * k);
		l->dw = xmalloc16(n * k);
		if (bias)
			l->db = xmalloc16(n);
	}
	void *xd = ref_dev_put(be, l->x, mk), *wd = ref_dev_put(be, l->w, nk), *yd = ref_dev_put(be, NULL, mn);
	void *bd = bias ? ref_dev_put(be, l->bias, nb) : NULL;
	void *dyd = dy ? ref_dev_put(be, l->dy, mn) : NULL, *dxd = dy ? ref_dev_put(be, NULL, mk) : NULL;
	void *dwd = dy ? ref_dev_put(be, NULL, nk) : NULL, *dbd = dy && bias ? ref_dev_put(be, NULL, nb) : NULL;
	int rc;
	if (!xd || !wd || !yd || (bias && !bd) || (dy && (!dyd || !dxd || !dwd)) || (dy && bias && !dbd)) {
		rc = fos_seterr(err, FOS_ENOMEM, "out of backend memory for the test layer");
	} else {
		fos_qweight qw;
		fos_saved sv;
		memset(&sv, 0, sizeof sv);
		rc = fos_qweight_make(be, wd, n, k, o, keep_master, want_col, &qw, err);
		if (!rc) {
			rc = fos_linear_forward(be, xd, m, &qw, o, bd, yd, dy ? &sv : NULL, err);
			if (!rc && dy) {
				rc = fos_linear_backward(be, &sv, &qw, dyd, dxd, dwd, dbd, err);
				fos_saved_free(be, &sv);
			}
			fos_qweight_free(be, &qw);
		}
		if (!rc)
			rc = be->d2h(be, l->y, yd, mn, err);
		if (!rc && dy)
			rc = be->d2h(be, l->dx, dxd, mk, err);
		if (!rc && dy)
			rc = be->d2h(be, l->dw, dwd, nk, err);
		if (!rc && dy && bias)
			rc = be->d2h(be, l->db, dbd, nb, err);
	}
	void *bufs[] = {xd, wd, yd, bd, dyd, dxd, dwd, dbd};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		if (bufs[i])
			be->free(be, bufs[i]);
	return rc;
}

static int same16(uint16_t a, uint16_t b, int nan_equal)
{
	if (a == b)
		return 1;
	return nan_equal && ref_isnan_bf16(a) && ref_isnan_bf16(b);
}

/* a (r, c) against the top-left (r, c) corner of b (R, C = ldb). */
static int cmp2d(const char *what, const uint16_t *a, const uint16_t *b, int64_t r, int64_t c, int64_t ldb,
		 int nan_equal, char *msg, size_t msgsz)
{
	for (int64_t i = 0; i < r; i++)
		for (int64_t j = 0; j < c; j++)
			if (!same16(a[i * c + j], b[i * ldb + j], nan_equal)) {
				snprintf(msg, msgsz, "%s[%lld, %lld] = 0x%04x (%g), the padded layer's 0x%04x (%g)", what,
					 (long long)i, (long long)j, a[i * c + j], (double)ref_bf16_f32(a[i * c + j]),
					 b[i * ldb + j], (double)ref_bf16_f32(b[i * ldb + j]));
				return -1;
			}
	return 0;
}

int shp_cmp_sliced(const shp_layer *l, const shp_layer *p, int nan_equal, char *msg, size_t msgsz)
{
	if (cmp2d("y", l->y, p->y, l->m, l->n, p->n, nan_equal, msg, msgsz))
		return -1;
	if (l->dx && cmp2d("dx", l->dx, p->dx, l->m, l->k, p->k, nan_equal, msg, msgsz))
		return -1;
	if (l->dw && cmp2d("dw", l->dw, p->dw, l->n, l->k, p->k, nan_equal, msg, msgsz))
		return -1;
	if (l->db && cmp2d("db", l->db, p->db, 1, l->n, p->n, nan_equal, msg, msgsz))
		return -1;
	return 0;
}

int shp_check_padded(fos_backend *be, int64_t m, int64_t n, int64_t k, const shp_opt *opt, int special,
		     uint64_t seed, char *msg, size_t msgsz)
{
	shp_layer l, p;
	shp_inputs(&l, m, n, k, opt->bias, 1, special, seed);
	shp_pad(&l, &p);
	fos_linear_opts o = shp_opts_of(opt);
	fos_err e = {0, ""};
	int rc = shp_run(be, &o, opt->keep_master, opt->want_col, &l, &e);
	if (rc) {
		snprintf(msg, msgsz, "the layer on (%lld, %lld, %lld): %s", (long long)m, (long long)n, (long long)k, e.msg);
	} else if ((rc = shp_run(be, &o, opt->keep_master, opt->want_col, &p, &e))) {
		snprintf(msg, msgsz, "the padded layer on (%lld, %lld, %lld): %s", (long long)p.m, (long long)p.n,
			 (long long)p.k, e.msg);
	} else {
		char why[400];
		static const char *const sp[] = {"", " (inf/NaN in X)", " (inf/NaN in W)", " (inf/NaN in dY)"};
		rc = shp_cmp_sliced(&l, &p, special != 0, why, sizeof why);
		if (rc)
			snprintf(msg, msgsz, "M=%lld N=%lld K=%lld %s%s: %s", (long long)m, (long long)n, (long long)k,
				 opt->name, sp[special & 3], why);
	}
	shp_free(&l);
	shp_free(&p);
	return rc ? -1 : 0;
}
