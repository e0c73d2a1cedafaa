/* support_ref.c: the numerics tests' independent reference (see support_ref.h). Written from
 * NUMERICS.md only: rounding to E2M1 / E4M3 / bf16 is a brute-force nearest-value search over the
 * representable values, never the bit tricks of kernels/fos_format.h; the quantizers follow the
 * spec's pseudo-code with one float operation per statement (-ffp-contract=off, SSE: every float
 * operation is one IEEE binary32 round-to-nearest-even). */
#include "support_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ------------------------------------------------------------------------ */

void ref_rng_seed(ref_rng *r, uint64_t seed)
{
	r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
}

uint64_t ref_rng_u64(ref_rng *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

double ref_rng_uniform(ref_rng *r)
{
	return (double)(ref_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double ref_rng_normal(ref_rng *r)
{
	double u1 = ref_rng_uniform(r), u2 = ref_rng_uniform(r);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- bits, bf16 ------------------------------------------------------------------------------ */

float ref_u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint32_t ref_f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

float ref_bf16_f32(uint16_t b)
{
	return ref_u2f((uint32_t)b << 16);
}

int ref_isnan_bf16(uint16_t b)
{
	return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0;
}

/* magnitude of a bf16 pattern as a double, the all-ones exponent read as 2^128 (the value the
 * rounding would have if the exponent were unbounded) */
static double ref_bf16_mag_unbounded(uint16_t b)
{
	b &= 0x7FFFu;
	if (b == 0x7F80u)
		return ldexp(1.0, 128);
	return fabs((double)ref_bf16_f32(b));
}

uint16_t ref_f32_bf16(float f)
{
	uint32_t u = ref_f2u(f);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	uint16_t lo = (uint16_t)(u >> 16); /* toward zero */
	if ((u & 0xFFFFu) == 0)
		return lo;
	uint16_t hi = (uint16_t)(lo + 1); /* next magnitude away from zero (may be inf) */
	double x = fabs((double)f);
	double dl = x - ref_bf16_mag_unbounded(lo); /* exact: same binade, 53-bit double */
	double dh = ref_bf16_mag_unbounded(hi) - x;
	if (dl < dh)
		return lo;
	if (dh < dl)
		return hi;
	return (lo & 1u) ? hi : lo;
}

/* ---- E2M1 / E4M3 ----------------------------------------------------------------------------- */

static const double ref_e2m1_mags[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

double ref_e2m1_val(unsigned code)
{
	double m = ref_e2m1_mags[code & 7u];
	return (code & 8u) ? -m : m;
}

unsigned ref_e2m1_enc(float v)
{
	if (isnan(v))
		return 7u;
	unsigned sign = signbit(v) ? 8u : 0u;
	double a = fabs((double)v);
	if (a > 6.0) /* satfinite: everything above the largest magnitude is nearest to it */
		return sign | 7u;
	unsigned best = 0;
	double bd = a; /* distance to 0 */
	for (unsigned c = 1; c < 8; c++) {
		double d = fabs(a - ref_e2m1_mags[c]); /* exact for a in [2^-28, 6] */
		if (d < bd || (d == bd && (c & 1u) == 0)) {
			best = c;
			bd = d;
		}
	}
	return sign | best;
}

static double ref_e4m3_formula(unsigned byte)
{
	unsigned s = (byte >> 7) & 1u, e = (byte >> 3) & 15u, m = byte & 7u;
	double v;
	if (e == 15u && m == 7u)
		return NAN;
	if (e == 0)
		v = ldexp((double)m, -9);
	else
		v = ldexp((double)(8u + m), (int)e - 10);
	return s ? -v : v;
}

static double ref_e4m3_table[256];
static int ref_e4m3_table_ready;

double ref_e4m3_val(unsigned byte)
{
	if (!ref_e4m3_table_ready) {
		for (unsigned b = 0; b < 256; b++)
			ref_e4m3_table[b] = ref_e4m3_formula(b);
		ref_e4m3_table_ready = 1;
	}
	return ref_e4m3_table[byte & 0xFFu];
}

unsigned ref_e4m3_enc(float v)
{
	if (isnan(v))
		return 0x7Fu;
	double a = fabs((double)v);
	if (a >= 448.0)
		return 0x7Eu;
	unsigned best = 0;
	double bd = a;
	for (unsigned c = 1; c <= 0x7Eu; c++) {
		double d = fabs(a - ref_e4m3_val(c));
		if (d < bd || (d == bd && (c & 1u) == 0)) {
			best = c;
			bd = d;
		}
	}
	return best;
}

/* ---- scales ---------------------------------------------------------------------------------- */

float ref_d(int bound)
{
	return 6.0f * (float)bound;
}

float ref_s_enc(float amax, int bound)
{
	float d = ref_d(bound);
	float s = d / amax; /* amax == 0: inf */
	if (!(s <= FLT_MAX))
		s = FLT_MAX;
	if (amax == 0.0f || s == 0.0f)
		s = 1.0f;
	return s;
}

/* ---- quantize -------------------------------------------------------------------------------- */

float ref_amax(const float *x, int64_t n)
{
	float m = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		float a = fabsf(ref_bf16_f32(ref_f32_bf16(x[i])));
		if (!isnan(a) && a > m)
			m = a;
	}
	return m;
}

unsigned ref_code_at(const uint8_t *codes, int64_t cols, int64_t r, int64_t c)
{
	uint8_t b = codes[r * (cols / 2) + c / 2];
	return (c & 1) ? (b >> 4) : (b & 15u);
}

static void ref_put_code(uint8_t *codes, int64_t cols, int64_t r, int64_t c, unsigned code)
{
	uint8_t *b = &codes[r * (cols / 2) + c / 2];
	if (c & 1)
		*b = (uint8_t)((*b & 0x0Fu) | (code << 4));
	else
		*b = (uint8_t)((*b & 0xF0u) | code);
}

float ref_group_err(const uint8_t *c, unsigned sf, float amax, float d, const float *x, int mse)
{
	float sff = (float)ref_e4m3_val(sf);
	float err = 0.0f;
	for (int i = 0; i < 16; i++) {
		float q = (float)ref_e2m1_val(c[i]);
		float t1 = q * sff;
		float t2 = t1 * amax;
		float v = t2 / d;
		float diff = v - x[i];
		float e = mse ? diff * diff : fabsf(diff);
		err = err + e;
	}
	return err;
}

float ref_tree16(const float *e)
{
	float p0 = e[0] + e[8], p1 = e[4] + e[12], p2 = e[2] + e[10], p3 = e[6] + e[14];
	float p4 = e[1] + e[9], p5 = e[5] + e[13], p6 = e[3] + e[11], p7 = e[7] + e[15];
	float q0 = p0 + p1, q1 = p2 + p3, q2 = p4 + p5, q3 = p6 + p7;
	float a = q0 + q1, b = q2 + q3;
	return a + b;
}

float ref_seq16(const float *e)
{
	float s = 0.0f;
	for (int i = 0; i < 16; i++)
		s = s + e[i];
	return s;
}

static float ref_inv(unsigned sf, float s_dec)
{
	if (sf == 0)
		return FLT_MAX;
	float p = (float)ref_e4m3_val(sf) * s_dec;
	float inv = 1.0f / p;
	return inv > FLT_MAX ? FLT_MAX : inv;
}

static float ref_bamax(const float *x, int n)
{
	float m = 0.0f;
	for (int i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		if (!isnan(a) && a > m)
			m = a;
	}
	return m;
}

static void ref_codes16(const float *x, float inv, uint8_t *q)
{
	for (int i = 0; i < 16; i++) {
		float t = x[i] * inv;
		q[i] = (uint8_t)ref_e2m1_enc(t);
	}
}

int ref_quantize(const float *x, int64_t rows, int64_t cols, const fos_qcfg *cfg, const float *amax_in,
		 uint8_t *codes, uint8_t *scales, float *amax_out, ref_qblock *info)
{
	/* grad: plain NVFP4 (section 5), per tensor or (section 11) per row, 1x16 or 16x16 */
	int grad = cfg->recipe == FOS_RECIPE_NVFP4;
	int bound = grad ? 448 : cfg->bound;
	int tile = cfg->block == FOS_BLOCK_16X16;
	int rs = cfg->row_scaled;
	int mse = !grad && cfg->err_mode == FOS_ERR_MSE;
	if (cols <= 0 || rows <= 0 || cols % 16 != 0 || (bound != 256 && bound != 448) || (tile && rows % 16 != 0) ||
	    (tile && rs))
		return -1;
	int64_t nb = cols / 16;
	float d = ref_d(bound);
	if (amax_in) {
		memmove(amax_out, amax_in, sizeof(float) * (size_t)(rs ? rows : 1));
	} else if (rs) {
		for (int64_t r = 0; r < rows; r++)
			amax_out[r] = ref_amax(x + r * cols, cols);
	} else {
		amax_out[0] = ref_amax(x, rows * cols);
	}
	memset(codes, 0, (size_t)(rows * cols / 2));

	if (tile) {
		float a = amax_out[0];
		float s = ref_s_enc(a, bound);
		float sdec = 1.0f / s;
		float xt[16][16];
		uint8_t q6[16][16], q4[16][16];
		for (int64_t r0 = 0; r0 < rows; r0 += 16)
			for (int64_t b = 0; b < nb; b++) {
				for (int i = 0; i < 16; i++)
					memcpy(xt[i], x + (r0 + i) * cols + b * 16, 64);
				float bam = ref_bamax(&xt[0][0], 256);
				if (grad) { /* NUMERICS section 11: section 5's scale from the tile's amax, on all 16 rows */
					float m = s * 0x1.555556p-3f;
					float t = bam * m;
					unsigned sf = ref_e4m3_enc(t > 448.0f ? 448.0f : t);
					float inv = ref_inv(sf, sdec);
					float e[16];
					for (int i = 0; i < 16; i++) {
						ref_codes16(xt[i], inv, q6[i]);
						e[i] = ref_group_err(q6[i], sf, a, d, xt[i], 0);
						for (int j = 0; j < 16; j++)
							ref_put_code(codes, cols, r0 + i, b * 16 + j, q6[i][j]);
						scales[(r0 + i) * nb + b] = (uint8_t)sf;
					}
					for (int i = 0; info && i < 16; i++) {
						ref_qblock *qb = &info[(r0 + i) * nb + b];
						qb->sf6 = qb->sf4 = (uint8_t)sf;
						qb->pick4 = 0;
						qb->err6 = qb->err4 = ref_tree16(e);
					}
					continue;
				}
				float base = bam / 6.0f;
				base = base * s;
				float b4 = base * 1.5f;
				unsigned sf6 = ref_e4m3_enc(base > 448.0f ? 448.0f : base);
				unsigned sf4 = ref_e4m3_enc(b4 > 448.0f ? 448.0f : b4);
				float inv6 = ref_inv(sf6, sdec), inv4 = ref_inv(sf4, sdec);
				float e6[16], e4[16];
				for (int i = 0; i < 16; i++) {
					ref_codes16(xt[i], inv6, q6[i]);
					ref_codes16(xt[i], inv4, q4[i]);
					e6[i] = ref_group_err(q6[i], sf6, a, d, xt[i], mse);
					e4[i] = ref_group_err(q4[i], sf4, a, d, xt[i], mse);
				}
				float E6 = ref_tree16(e6), E4 = ref_tree16(e4);
				int p4 = E4 < E6;
				for (int i = 0; i < 16; i++) {
					for (int j = 0; j < 16; j++)
						ref_put_code(codes, cols, r0 + i, b * 16 + j, p4 ? q4[i][j] : q6[i][j]);
					scales[(r0 + i) * nb + b] = (uint8_t)(p4 ? sf4 : sf6);
					if (info) {
						ref_qblock *qb = &info[(r0 + i) * nb + b];
						qb->sf6 = (uint8_t)sf6;
						qb->sf4 = (uint8_t)sf4;
						qb->pick4 = (uint8_t)p4;
						qb->err6 = E6;
						qb->err4 = E4;
					}
				}
			}
		return 0;
	}

	for (int64_t r = 0; r < rows; r++) {
		float a = amax_out[rs ? r : 0];
		float s = ref_s_enc(a, bound);
		float sdec = 1.0f / s;
		for (int64_t b = 0; b < nb; b++) {
			const float *xb = x + r * cols + b * 16;
			float bam = ref_bamax(xb, 16);
			uint8_t q6[16], q4[16];
			unsigned sf6, sf4;
			float err6, err4;
			int p4;
			if (grad) {
				float m = s * 0x1.555556p-3f;
				float t = bam * m;
				sf6 = sf4 = ref_e4m3_enc(t > 448.0f ? 448.0f : t);
				ref_codes16(xb, ref_inv(sf6, sdec), q6);
				err6 = err4 = ref_group_err(q6, sf6, a, d, xb, 0);
				p4 = 0;
			} else {
				float base = bam / 6.0f;
				base = base * s;
				float b4 = base * 1.5f;
				sf6 = ref_e4m3_enc(base > 448.0f ? 448.0f : base);
				sf4 = ref_e4m3_enc(b4 > 448.0f ? 448.0f : b4);
				ref_codes16(xb, ref_inv(sf6, sdec), q6);
				ref_codes16(xb, ref_inv(sf4, sdec), q4);
				err6 = ref_group_err(q6, sf6, a, d, xb, mse);
				err4 = ref_group_err(q4, sf4, a, d, xb, mse);
				p4 = err4 < err6;
			}
			for (int j = 0; j < 16; j++)
				ref_put_code(codes, cols, r, b * 16 + j, p4 ? q4[j] : q6[j]);
			scales[r * nb + b] = (uint8_t)(p4 ? sf4 : sf6);
			if (info) {
				ref_qblock *qb = &info[r * nb + b];
				qb->sf6 = (uint8_t)sf6;
				qb->sf4 = (uint8_t)sf4;
				qb->pick4 = (uint8_t)p4;
				qb->err6 = err6;
				qb->err4 = err4;
			}
		}
	}
	return 0;
}

void ref_dequantize(const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows, int64_t cols,
		    int bound, int row_scaled, float *out)
{
	float finv = 1.0f / ref_d(bound);
	for (int64_t r = 0; r < rows; r++) {
		float a = amax[row_scaled ? r : 0];
		for (int64_t c = 0; c < cols; c++) {
			float sff = (float)ref_e4m3_val(scales[r * (cols / 16) + c / 16]);
			float t = sff * a;
			float dec = t * finv;
			float v = (float)ref_e2m1_val(ref_code_at(codes, cols, r, c));
			out[r * cols + c] = v * dec;
		}
	}
}

void ref_decode(const uint8_t *codes, const uint8_t *scales, int64_t rows, int64_t cols, float *out)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++) {
			float sff = (float)ref_e4m3_val(scales[r * (cols / 16) + c / 16]);
			float v = (float)ref_e2m1_val(ref_code_at(codes, cols, r, c));
			out[r * cols + c] = v * sff;
		}
}

/* ---- arrays ---------------------------------------------------------------------------------- */

void ref_bf16_to_f32_arr(const uint16_t *b, float *f, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		f[i] = ref_bf16_f32(b[i]);
}

void ref_f32_to_bf16_arr(const float *f, uint16_t *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		b[i] = ref_f32_bf16(f[i]);
}

void ref_bf16_to_f64_arr(const uint16_t *b, double *d, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		d[i] = (double)ref_bf16_f32(b[i]);
}

void ref_transpose_u16(const uint16_t *src, uint16_t *dst, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[c * rows + r] = src[r * cols + c];
}

void ref_transpose_f32(const float *src, float *dst, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[c * rows + r] = src[r * cols + c];
}

void ref_transpose_f64(const double *src, double *dst, int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < cols; c++)
			dst[c * rows + r] = src[r * cols + c];
}

void ref_gemm_nt_f64(const double *a, const double *b, int64_t m, int64_t n, int64_t k, double *c)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			const double *pa = a + i * k, *pb = b + j * k;
			double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
			int64_t l = 0;
			for (; l + 4 <= k; l += 4) {
				s0 += pa[l] * pb[l];
				s1 += pa[l + 1] * pb[l + 1];
				s2 += pa[l + 2] * pb[l + 2];
				s3 += pa[l + 3] * pb[l + 3];
			}
			for (; l < k; l++)
				s0 += pa[l] * pb[l];
			c[i * n + j] = (s0 + s1) + (s2 + s3);
		}
}

double ref_sqnr_db(const double *ref, const double *x, int64_t n)
{
	double s = 0, e = 0;
	for (int64_t i = 0; i < n; i++) {
		s += ref[i] * ref[i];
		e += (ref[i] - x[i]) * (ref[i] - x[i]);
	}
	if (e == 0)
		return INFINITY;
	return 10.0 * log10(s / e);
}

double ref_sqnr_db_bf16(const double *ref, const uint16_t *x, int64_t n)
{
	double s = 0, e = 0;
	for (int64_t i = 0; i < n; i++) {
		double v = (double)ref_bf16_f32(x[i]);
		s += ref[i] * ref[i];
		e += (ref[i] - v) * (ref[i] - v);
	}
	if (e == 0)
		return INFINITY;
	return 10.0 * log10(s / e);
}

/* ---- the linear layer in FP64 ------------------------------------------------------------- */

/* Quantizes a bf16 (rows, cols) tensor with the reference; dec gets value * scale (exact),
 * amax_out 1 or rows floats. */
static int ref_q_dec(const uint16_t *x, int64_t rows, int64_t cols, const fos_qcfg *c, const float *amax_in,
		     float *dec, float *amax_out, uint8_t *codes, uint8_t *scales)
{
	int64_t n = rows * cols;
	float *xf = malloc(sizeof(float) * (size_t)n);
	if (!xf)
		return -1;
	ref_bf16_to_f32_arr(x, xf, n);
	int rc = ref_quantize(xf, rows, cols, c, amax_in, codes, scales, amax_out, NULL);
	if (rc == 0)
		ref_decode(codes, scales, rows, cols, dec);
	free(xf);
	return rc;
}

static void ref_f32_to_f64(const float *f, double *d, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		d[i] = (double)f[i];
}

int ref_linear_f64(const uint16_t *x, const uint16_t *w, const uint16_t *bias, const uint16_t *dy, int64_t m,
		   int64_t n, int64_t k, const fos_linear_opts *o, int ovr, double *y, double *dx, double *dw,
		   double *db)
{
	if (o->row_scaled && ovr == FOS_OVR_QUANTIZED)
		return -1;
	int64_t big = m * k;
	if (n * k > big)
		big = n * k;
	if (m * n > big)
		big = m * n;
	float g2688 = 1.0f / 2688.0f;
	fos_qcfg cx = fos_qcfg_default(), cw = fos_qcfg_default(), cg = fos_qcfg_default();
	cx.err_mode = cw.err_mode = o->err_mode;
	cx.bound = cw.bound = o->bound;
	cx.row_scaled = o->row_scaled;
	cw.block = o->weight_block;
	cg.recipe = FOS_RECIPE_NVFP4;
	cg.bound = 448;
	/* four_over_six (section 11): an operand outside the scope is plain NVFP4, bound 448, with
	 * its own block shape and amax; each operand's scale uses its own D */
	int sc = o->four_over_six;
	if (sc == FOS_SCOPE_WEIGHTS || sc == FOS_SCOPE_NONE) {
		cx.recipe = FOS_RECIPE_NVFP4;
		cx.bound = 448;
	}
	if (sc == FOS_SCOPE_ACTIVATIONS || sc == FOS_SCOPE_NONE) {
		cw.recipe = FOS_RECIPE_NVFP4;
		cw.bound = 448;
	}
	float dinv_x = 1.0f / ref_d(cx.bound), dinv_w = 1.0f / ref_d(cw.bound);
	/* scratch */
	float *fa = malloc(sizeof(float) * (size_t)big), *fb = malloc(sizeof(float) * (size_t)big);
	double *da = malloc(sizeof(double) * (size_t)big), *dbuf = malloc(sizeof(double) * (size_t)big);
	double *dt = malloc(sizeof(double) * (size_t)big);
	uint16_t *ht = malloc(2 * (size_t)big);
	uint8_t *codes = malloc((size_t)big / 2 + 16), *scales = malloc((size_t)big / 16 + 16);
	float *xa = malloc(sizeof(float) * (size_t)m), wa, dya;
	float *xdec = malloc(sizeof(float) * (size_t)(m * k)), *wdec = malloc(sizeof(float) * (size_t)(n * k));
	uint8_t *xcodes = malloc((size_t)(m * k) / 2), *xscales = malloc((size_t)(m * k) / 16);
	uint8_t *wcodes = malloc((size_t)(n * k) / 2), *wscales = malloc((size_t)(n * k) / 16);
	int rc = -1;
	if (!fa || !fb || !da || !dbuf || !dt || !ht || !codes || !scales || !xa || !xdec || !wdec || !xcodes || !xscales ||
	    !wcodes || !wscales)
		goto out;
	if (ref_q_dec(x, m, k, &cx, NULL, xdec, xa, xcodes, xscales) || ref_q_dec(w, n, k, &cw, NULL, wdec, &wa, wcodes, wscales))
		goto out;
	/* forward */
	ref_f32_to_f64(xdec, da, m * k);
	ref_f32_to_f64(wdec, dbuf, n * k);
	ref_gemm_nt_f64(da, dbuf, m, n, k, y);
	{
		float gw = wa * dinv_w;
		for (int64_t i = 0; i < m; i++) {
			float alpha;
			double rs = 1.0;
			if (o->row_scaled) {
				alpha = dinv_x * gw;
				rs = (double)xa[i];
			} else {
				float gx = xa[0] * dinv_x;
				alpha = gx * gw;
			}
			for (int64_t j = 0; j < n; j++) {
				y[i * n + j] = y[i * n + j] * (double)alpha * rs;
				if (bias)
					y[i * n + j] += (double)ref_bf16_f32(bias[j]);
			}
		}
	}
	if (!dy) {
		rc = 0;
		goto out;
	}
	if (bias && db)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;
			for (int64_t i = 0; i < m; i++)
				s += (double)ref_bf16_f32(dy[i * n + j]);
			db[j] = s;
		}
	if (ovr == FOS_OVR_QUANTIZED) {
		/* dX = std-q(dY) (m, n) . w_col (k, n)^T */
		if (ref_q_dec(dy, m, n, &cg, NULL, fa, &dya, codes, scales))
			goto out;
		ref_f32_to_f64(fa, da, m * n);
		ref_transpose_u16(w, ht, n, k);
		if (ref_q_dec(ht, k, n, &cw, &wa, fb, &wa, codes, scales))
			goto out;
		ref_f32_to_f64(fb, dbuf, k * n);
		ref_gemm_nt_f64(da, dbuf, m, k, n, dx);
		float gdy = dya * g2688, gw = wa * dinv_w;
		float alpha = gdy * gw;
		for (int64_t i = 0; i < m * k; i++)
			dx[i] *= (double)alpha;
		/* dW = std-q(dY^T) (n, m) . x_col (k, m)^T */
		ref_transpose_u16(dy, ht, m, n);
		if (ref_q_dec(ht, n, m, &cg, &dya, fa, &dya, codes, scales))
			goto out;
		ref_f32_to_f64(fa, da, n * m);
		ref_transpose_u16(x, ht, m, k);
		fos_qcfg cxc = cx;
		cxc.row_scaled = 0;
		float xa0 = xa[0];
		if (ref_q_dec(ht, k, m, &cxc, &xa0, fb, &xa0, codes, scales))
			goto out;
		ref_f32_to_f64(fb, dbuf, k * m);
		ref_gemm_nt_f64(da, dbuf, n, k, m, dw);
		float gx = xa[0] * dinv_x;
		alpha = gdy * gx;
		for (int64_t i = 0; i < n * k; i++)
			dw[i] *= (double)alpha;
	} else {
		/* B operands: W (n, k) and X (m, k), original (high_precision) or dequantized to bf16 */
		if (ovr == FOS_OVR_DEQUANTIZED) {
			ref_dequantize(wcodes, wscales, &wa, n, k, cw.bound, 0, fa);
			for (int64_t i = 0; i < n * k; i++)
				fa[i] = ref_bf16_f32(ref_f32_bf16(fa[i]));
			ref_f32_to_f64(fa, dt, n * k);
		} else {
			ref_bf16_to_f64_arr(w, dt, n * k);
		}
		ref_transpose_f64(dt, dbuf, n, k); /* (k, n) */
		ref_bf16_to_f64_arr(dy, da, m * n);
		ref_gemm_nt_f64(da, dbuf, m, k, n, dx);
		if (ovr == FOS_OVR_DEQUANTIZED) {
			ref_dequantize(xcodes, xscales, xa, m, k, cx.bound, o->row_scaled, fa);
			for (int64_t i = 0; i < m * k; i++)
				fa[i] = ref_bf16_f32(ref_f32_bf16(fa[i]));
			ref_f32_to_f64(fa, dt, m * k);
		} else {
			ref_bf16_to_f64_arr(x, dt, m * k);
		}
		ref_transpose_f64(dt, dbuf, m, k); /* (k, m) */
		ref_transpose_f64(da, dt, m, n);   /* dY^T (n, m) */
		ref_gemm_nt_f64(dt, dbuf, n, k, m, dw);
	}
	rc = 0;
out:
	free(fa);
	free(fb);
	free(da);
	free(dbuf);
	free(dt);
	free(ht);
	free(codes);
	free(scales);
	free(xa);
	free(xdec);
	free(wdec);
	free(xcodes);
	free(xscales);
	free(wcodes);
	free(wscales);
	return rc;
}

/* ---- generators ------------------------------------------------------------------------------ */

static const char *const ref_kind_names[REF_NKINDS] = {"randn", "linspace", "subnormal", "mixed_subnormal",
							 "negzero", "inf", "nan", "dtype_max", "wide", "heavy"};

const char *ref_kind_name(int kind)
{
	return (kind >= 0 && kind < REF_NKINDS) ? ref_kind_names[kind] : "?";
}

static float ref_subnormal(ref_rng *r, int bf16)
{
	float v = bf16 ? ldexpf((float)(1 + ref_rng_u64(r) % 127), -133)
		       : ldexpf((float)(1 + ref_rng_u64(r) % 8388607), -149);
	return (ref_rng_u64(r) & 1) ? -v : v;
}

static const uint32_t ref_nan_bits[4] = {0x7FC00000u, 0xFFC00000u, 0x7F810000u, 0xFFFF0000u};

/* Fills out with floats of the kind; for bf16 every value is bf16-exact except where rounding is
 * intended (the caller rounds), NaNs are chosen with zero low halves so their bf16 pattern is the
 * top 16 bits. */
static void ref_gen_core(int kind, int64_t rows, int64_t cols, uint64_t seed, int bf16, float *out)
{
	ref_rng r;
	ref_rng_seed(&r, seed ^ ((uint64_t)kind << 40));
	int64_t n = rows * cols;
	float maxv = bf16 ? ref_u2f(0x7F7F0000u) : FLT_MAX;
	int64_t nblk = n / 16;
	switch (kind) {
	case REF_LINSPACE:
		for (int64_t i = 0; i < n; i++) {
			double v = -12.0 + 24.0 * (double)i / (double)(n > 1 ? n - 1 : 1);
			v += (i % 3 == 0) ? 1e-3 : (i % 3 == 1 ? -1e-3 : 0.0);
			out[i] = (float)v;
		}
		return;
	case REF_SUBNORMAL:
		for (int64_t i = 0; i < n; i++)
			out[i] = (ref_rng_u64(&r) % 16 == 0) ? 0.0f : ref_subnormal(&r, bf16);
		return;
	case REF_WIDE:
		for (int64_t i = 0; i < n; i++) {
			double e = bf16 ? -133.0 + 259.0 * ref_rng_uniform(&r) : -149.0 + 276.0 * ref_rng_uniform(&r);
			float v = (float)ldexp(1.0 + ref_rng_uniform(&r), (int)floor(e));
			if (isinf(v))
				v = maxv;
			out[i] = (ref_rng_u64(&r) & 1) ? -v : v;
		}
		return;
	case REF_HEAVY:
		for (int64_t i = 0; i < n; i++) {
			double u = ref_rng_uniform(&r);
			out[i] = (float)(ref_rng_normal(&r) / (0.02 + u * u));
		}
		return;
	default:
		break;
	}
	for (int64_t i = 0; i < n; i++)
		out[i] = (float)(3.0 * ref_rng_normal(&r));
	switch (kind) {
	case REF_MIXED_SUB:
		for (int64_t b = 0; b < nblk; b++)
			if (ref_rng_u64(&r) % 4 == 0)
				for (int j = 0; j < 16; j++)
					out[b * 16 + j] = ref_subnormal(&r, bf16);
		for (int64_t i = 0; i < n; i++)
			if (ref_rng_u64(&r) % 16 == 0)
				out[i] = ref_subnormal(&r, bf16);
		break;
	case REF_NEGZERO:
		for (int64_t i = 0; i < n; i++)
			if (ref_rng_u64(&r) % 8 == 0)
				out[i] = -0.0f;
		for (int64_t b = 0; b < nblk; b++) {
			unsigned t = (unsigned)(ref_rng_u64(&r) % 8);
			if (t == 0 || t == 1)
				for (int j = 0; j < 16; j++)
					out[b * 16 + j] = (t == 0 || (ref_rng_u64(&r) & 1)) ? 0.0f : -0.0f;
		}
		if (rows >= 16 && cols >= 32)
			for (int i = 0; i < 16; i++)
				for (int j = 16; j < 32; j++)
					out[i * cols + j] = (i + j) % 3 ? 0.0f : -0.0f;
		break;
	case REF_INF:
		for (int64_t i = 0; i < n; i++)
			if (ref_rng_u64(&r) % 64 == 0)
				out[i] = (ref_rng_u64(&r) & 1) ? -INFINITY : INFINITY;
		break;
	case REF_NAN:
		for (int64_t i = 0; i < n; i++)
			if (ref_rng_u64(&r) % 32 == 0)
				out[i] = ref_u2f(ref_nan_bits[ref_rng_u64(&r) % 4]);
		if (cols >= 32)
			for (int j = 16; j < 32; j++)
				out[j] = ref_u2f(ref_nan_bits[j % 4]);
		break;
	case REF_DTYPE_MAX:
		for (int64_t b = 0; b < nblk; b++)
			if (ref_rng_u64(&r) % 4 == 0)
				for (int j = 0; j < 16; j++) {
					float v = out[b * 16 + j] * (maxv / 16.0f);
					out[b * 16 + j] = fabsf(v) > maxv ? copysignf(maxv, v) : v;
				}
		for (int64_t i = 0; i < n; i++)
			if (ref_rng_u64(&r) % 32 == 0)
				out[i] = (ref_rng_u64(&r) & 1) ? -maxv : maxv;
		break;
	default:
		break;
	}
}

void ref_gen_f32(int kind, int64_t rows, int64_t cols, uint64_t seed, float *out)
{
	ref_gen_core(kind, rows, cols, seed, 0, out);
}

void ref_gen_bf16(int kind, int64_t rows, int64_t cols, uint64_t seed, uint16_t *out)
{
	int64_t n = rows * cols;
	float *f = malloc(sizeof(float) * (size_t)n);
	if (!f)
		abort();
	ref_gen_core(kind, rows, cols, seed, 1, f);
	for (int64_t i = 0; i < n; i++)
		out[i] = isnan(f[i]) ? (uint16_t)(ref_f2u(f[i]) >> 16) : ref_f32_bf16(f[i]);
	free(f);
}

void ref_randn_bf16(uint16_t *out, int64_t n, double scale, ref_rng *r)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = ref_f32_bf16((float)(scale * ref_rng_normal(r)));
}

/* ---- backend helpers ------------------------------------------------------------------------- */

fos_backend *ref_cpu(int threads)
{
	fos_err err = {0};
	return fos_backend_cpu(threads, &err);
}

void *ref_dev_put(fos_backend *be, const void *host, size_t bytes)
{
	void *p = be->alloc(be, bytes ? bytes : 64);
	if (!p)
		return NULL;
	if (host && bytes) {
		fos_err err = {0};
		if (be->h2d(be, p, host, bytes, &err) != FOS_OK) {
			be->free(be, p);
			return NULL;
		}
	}
	return p;
}

int ref_dev_get(fos_backend *be, void *host, const void *dev, size_t bytes)
{
	fos_err err = {0};
	return be->d2h(be, host, dev, bytes, &err);
}

static void ref_free_all(fos_backend *be, void **p, int n)
{
	for (int i = 0; i < n; i++)
		if (p[i])
			be->free(be, p[i]);
}

int ref_be_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		    const float *amax_in, uint8_t *codes, uint8_t *scales, float *amax_out, uint16_t *decoded,
		    fos_err *err)
{
	int rs = cfg->row_scaled; /* per row for either recipe (NUMERICS section 11) */
	size_t na = (size_t)(rs ? rows : 1);
	size_t nx = (size_t)(rows * cols), ncode = (size_t)(rows * cols / 2) + 16, nsc = (size_t)(rows * cols / 16) + 16;
	void *p[5] = {0};
	p[0] = ref_dev_put(be, x, nx * fos_dtype_size(dtype));
	p[1] = ref_dev_put(be, NULL, ncode);
	p[2] = ref_dev_put(be, NULL, nsc);
	p[3] = ref_dev_put(be, NULL, sizeof(float) * (rs ? (size_t)rows : 1) + 64);
	p[4] = amax_in ? ref_dev_put(be, amax_in, sizeof(float) * na) : NULL;
	uint16_t *dec = decoded ? ref_dev_put(be, NULL, nx * 2) : NULL;
	if (!p[0] || !p[1] || !p[2] || !p[3] || (amax_in && !p[4]) || (decoded && !dec)) {
		ref_free_all(be, p, 5);
		if (dec)
			be->free(be, dec);
		return fos_seterr(err, FOS_ENOMEM, "test: device alloc failed");
	}
	fos_qtensor q;
	memset(&q, 0, sizeof q);
	q.codes = p[1];
	q.scales = p[2];
	q.amax = p[3];
	int rc = be->quantize(be, p[0], dtype, rows, cols, cfg, p[4], &q, dec, err);
	if (rc == FOS_OK) {
		fos_err e2 = {0};
		if (codes)
			rc = be->d2h(be, codes, q.codes, (size_t)(rows * cols / 2), &e2);
		if (rc == FOS_OK && scales)
			rc = be->d2h(be, scales, q.scales, (size_t)(rows * cols / 16), &e2);
		if (rc == FOS_OK && amax_out)
			rc = be->d2h(be, amax_out, q.amax, sizeof(float) * na, &e2);
		if (rc == FOS_OK && decoded)
			rc = be->d2h(be, decoded, dec, nx * 2, &e2);
		if (rc != FOS_OK && err)
			*err = e2;
	}
	ref_free_all(be, p, 5);
	if (dec)
		be->free(be, dec);
	return rc;
}

static int ref_be_qt(fos_backend *be, const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows,
		     int64_t cols, int bound, int row_scaled, fos_qtensor *q, void **p)
{
	memset(q, 0, sizeof *q);
	p[0] = ref_dev_put(be, codes, (size_t)(rows * cols / 2));
	p[1] = ref_dev_put(be, scales, (size_t)(rows * cols / 16));
	p[2] = ref_dev_put(be, amax, sizeof(float) * (row_scaled ? (size_t)rows : 1));
	if (!p[0] || !p[1] || !p[2])
		return -1;
	q->rows = rows;
	q->cols = cols;
	q->bound = bound;
	q->row_scaled = row_scaled;
	q->codes = p[0];
	q->scales = p[1];
	q->amax = p[2];
	return 0;
}

int ref_be_dequantize(fos_backend *be, const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows,
		      int64_t cols, int bound, int row_scaled, int out_dtype, void *out, fos_err *err)
{
	void *p[4] = {0};
	fos_qtensor q;
	size_t nout = (size_t)(rows * cols) * fos_dtype_size(out_dtype);
	if (ref_be_qt(be, codes, scales, amax, rows, cols, bound, row_scaled, &q, p) != 0 ||
	    !(p[3] = ref_dev_put(be, NULL, nout))) {
		ref_free_all(be, p, 4);
		return fos_seterr(err, FOS_ENOMEM, "test: device alloc failed");
	}
	int rc = be->dequantize(be, &q, out_dtype, p[3], err);
	if (rc == FOS_OK)
		rc = be->d2h(be, out, p[3], nout, err);
	ref_free_all(be, p, 4);
	return rc;
}

int ref_be_decode(fos_backend *be, const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows,
		  int64_t cols, int bound, int row_scaled, uint16_t *out, fos_err *err)
{
	void *p[4] = {0};
	fos_qtensor q;
	size_t nout = (size_t)(rows * cols) * 2;
	if (ref_be_qt(be, codes, scales, amax, rows, cols, bound, row_scaled, &q, p) != 0 ||
	    !(p[3] = ref_dev_put(be, NULL, nout))) {
		ref_free_all(be, p, 4);
		return fos_seterr(err, FOS_ENOMEM, "test: device alloc failed");
	}
	int rc = be->decode(be, &q, p[3], err);
	if (rc == FOS_OK)
		rc = be->d2h(be, out, p[3], nout, err);
	ref_free_all(be, p, 4);
	return rc;
}

int ref_be_gemm(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
		const float *a_amax, float a_dinv, const float *b_amax, float b_dinv, const float *row_scale,
		const uint16_t *bias, uint16_t *y, fos_err *err)
{
	void *p[7] = {0};
	p[0] = ref_dev_put(be, a, (size_t)(m * k) * 2);
	p[1] = ref_dev_put(be, b, (size_t)(n * k) * 2);
	p[2] = ref_dev_put(be, NULL, (size_t)(m * n) * 2);
	p[3] = a_amax ? ref_dev_put(be, a_amax, 4) : NULL;
	p[4] = b_amax ? ref_dev_put(be, b_amax, 4) : NULL;
	p[5] = row_scale ? ref_dev_put(be, row_scale, (size_t)m * 4) : NULL;
	p[6] = bias ? ref_dev_put(be, bias, (size_t)n * 2) : NULL;
	if (!p[0] || !p[1] || !p[2] || (a_amax && !p[3]) || (b_amax && !p[4]) || (row_scale && !p[5]) ||
	    (bias && !p[6])) {
		ref_free_all(be, p, 7);
		return fos_seterr(err, FOS_ENOMEM, "test: device alloc failed");
	}
	fos_gemm_epi epi = fos_gemm_epi_plain();
	epi.a_amax = p[3];
	epi.a_dinv = a_dinv;
	epi.b_amax = p[4];
	epi.b_dinv = b_dinv;
	epi.row_scale = p[5];
	epi.bias = p[6];
	int rc = be->gemm(be, p[0], p[1], m, n, k, &epi, p[2], err);
	if (rc == FOS_OK)
		rc = be->d2h(be, y, p[2], (size_t)(m * n) * 2, err);
	ref_free_all(be, p, 7);
	return rc;
}

int ref_be_colsum(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, uint16_t *db, fos_err *err)
{
	void *p[2] = {0};
	p[0] = ref_dev_put(be, dy, (size_t)(m * n) * 2);
	p[1] = ref_dev_put(be, NULL, (size_t)n * 2);
	if (!p[0] || !p[1]) {
		ref_free_all(be, p, 2);
		return fos_seterr(err, FOS_ENOMEM, "test: device alloc failed");
	}
	int rc = be->colsum(be, p[0], m, n, p[1], err);
	if (rc == FOS_OK)
		rc = be->d2h(be, db, p[1], (size_t)n * 2, err);
	ref_free_all(be, p, 2);
	return rc;
}

int64_t ref_cmp_bf16(const uint16_t *a, const uint16_t *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (a[i] != b[i] && !(ref_isnan_bf16(a[i]) && ref_isnan_bf16(b[i])))
			return i;
	return -1;
}

int64_t ref_cmp_f32(const float *a, const float *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (ref_f2u(a[i]) != ref_f2u(b[i]) && !(isnan(a[i]) && isnan(b[i])))
			return i;
	return -1;
}

int64_t ref_cmp_u8(const uint8_t *a, const uint8_t *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return i;
	return -1;
}
