/* support_ref.h: an independent reference for the numerics tests, written from NUMERICS.md alone
 * (it does not use kernels/fos_format.h): brute-force E2M1 / E4M3 / bf16 rounding, the 4/6 and
 * gradient quantizers, dequantize, FP64 GEMMs, data generators for the special kinds, SQNR, and
 * helpers that move host arrays through a backend. Every global is prefixed ref_. */
#ifndef FOS_SUPPORT_REF_H
#define FOS_SUPPORT_REF_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* ---- deterministic random numbers (splitmix64) ---- */
typedef struct ref_rng {
	uint64_t s;
} ref_rng;
void ref_rng_seed(ref_rng *r, uint64_t seed);
uint64_t ref_rng_u64(ref_rng *r);
double ref_rng_uniform(ref_rng *r); /* [0, 1) */
double ref_rng_normal(ref_rng *r);  /* N(0, 1) */

/* ---- bits, bf16 ---- */
float ref_u2f(uint32_t u);
uint32_t ref_f2u(float f);
float ref_bf16_f32(uint16_t b);
/* fp32 -> bf16, round to nearest (ties to even) by comparing the two neighbours; NaN -> quiet NaN. */
uint16_t ref_f32_bf16(float f);
int ref_isnan_bf16(uint16_t b);

/* ---- element formats, by brute-force nearest-value search ---- */
double ref_e2m1_val(unsigned code); /* table of NUMERICS.md section 1 */
unsigned ref_e2m1_enc(float v);     /* nearest of the 8 magnitudes, ties to even code, sign kept, NaN->7 */
double ref_e4m3_val(unsigned byte); /* from the bit fields; NaN for 0x7F / 0xFF */
unsigned ref_e4m3_enc(float v);     /* |v| -> nearest of 0x00..0x7E, ties to even; >=448 -> 0x7E; NaN -> 0x7F */

/* ---- scales (section 2) ---- */
float ref_d(int bound);            /* 6 * bound */
float ref_s_enc(float amax, int bound);

/* ---- quantize (sections 1, 3, 5) ---- */
/* Per scale entry (rows x cols/16) of a reference quantize: both candidates and their errors (for
 * 16x16, the tile errors, repeated on the tile's 16 rows; for the gradient recipe sf4 = sf6 = the
 * one scale). */
typedef struct ref_qblock {
	uint8_t sf6, sf4;
	uint8_t pick4;
	float err6, err4;
} ref_qblock;

/* amax of n floats after the bf16 cast, NaN-dropping (section 1). */
float ref_amax(const float *x, int64_t n);
/* Reference quantize of x (rows, cols) given as exact floats (bf16 inputs converted exactly): 4/6,
 * or plain NVFP4 (recipe nvfp4: section 5, and per row or 16x16 tiles as section 11 says).
 * amax_in: NULL to compute (per tensor, or per row when cfg->row_scaled), else 1 or rows floats.
 * codes (rows, cols/2), scales (rows, cols/16), amax_out (1 or rows), info (rows*cols/16, may be
 * NULL). Returns 0, or -1 if cfg / the shape is invalid. */
int ref_quantize(const float *x, int64_t rows, int64_t cols, const fos_qcfg *cfg, const float *amax_in,
		 uint8_t *codes, uint8_t *scales, float *amax_out, ref_qblock *info);
/* The error of one 16-element row-group encoded with codes c[0..15] (unpacked) and scale byte sf,
 * summed in element order (section 3). */
float ref_group_err(const uint8_t *c, unsigned sf, float amax, float d, const float *x, int mse);
/* Tile error sum in NUMERICS.md's fixed tree order, and in plain sequential order (for contrast). */
float ref_tree16(const float *e);
float ref_seq16(const float *e);
/* Dequantize (section 6) to exact fp32 results (cast with ref_f32_bf16 for bf16). */
void ref_dequantize(const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows, int64_t cols,
		    int bound, int row_scaled, float *out);
/* value * scale (no amax): the exact bf16 GEMM operand of section 7. */
void ref_decode(const uint8_t *codes, const uint8_t *scales, int64_t rows, int64_t cols, float *out);
unsigned ref_code_at(const uint8_t *codes, int64_t cols, int64_t r, int64_t c);

/* ---- arrays ---- */
void ref_bf16_to_f32_arr(const uint16_t *b, float *f, int64_t n);
void ref_f32_to_bf16_arr(const float *f, uint16_t *b, int64_t n);
void ref_bf16_to_f64_arr(const uint16_t *b, double *d, int64_t n);
void ref_transpose_u16(const uint16_t *src, uint16_t *dst, int64_t rows, int64_t cols);
void ref_transpose_f32(const float *src, float *dst, int64_t rows, int64_t cols);
void ref_transpose_f64(const double *src, double *dst, int64_t rows, int64_t cols);
/* c (m, n) = a (m, k) * b (n, k)^T in double. */
void ref_gemm_nt_f64(const double *a, const double *b, int64_t m, int64_t n, int64_t k, double *c);
/* 10 log10(sum ref^2 / sum (ref - x)^2); +inf when equal. */
double ref_sqnr_db(const double *ref, const double *x, int64_t n);
double ref_sqnr_db_bf16(const double *ref, const uint16_t *x, int64_t n);

/* ---- the linear layer in FP64 (sections 7 and 8) ---- */
/* "Same math" FP64 reference of forward and backward (o's four_over_six scope included) under the resolved override ovr
 * (FOS_OVR_QUANTIZED / HIGH_PRECISION / DEQUANTIZED): operands quantized with ref_quantize
 * (their exact decoded values), the FP32 scalars alpha / amax as NUMERICS.md computes them, every
 * sum in double. y (m, n); dx (m, k), dw (n, k), db (n) when dy is given (db only with bias).
 * Returns 0, or -1 on an invalid combination / allocation failure. */
int ref_linear_f64(const uint16_t *x, const uint16_t *w, const uint16_t *bias, const uint16_t *dy, int64_t m,
		   int64_t n, int64_t k, const fos_linear_opts *o, int ovr, double *y, double *dx, double *dw,
		   double *db);

/* ---- data generators (bf16 patterns, or fp32) ---- */
enum ref_kind {
	REF_RANDN = 0,     /* N(0, 1) * 3 */
	REF_LINSPACE,      /* -12..12 linspace, +-1e-3 nudges */
	REF_SUBNORMAL,     /* bf16 subnormals only (random sign and mantissa) */
	REF_MIXED_SUB,     /* randn with subnormal blocks and elements mixed in */
	REF_NEGZERO,       /* randn with -0 sprinkled, all-zero blocks (+0, -0, mixed) */
	REF_INF,           /* randn with +-inf */
	REF_NAN,           /* randn with NaN (both signs, payloads) and an all-NaN block */
	REF_DTYPE_MAX,     /* randn with +-dtype max in some blocks, and blocks near max */
	REF_WIDE,          /* log-uniform magnitudes 2^-133 .. 2^126, random signs */
	REF_HEAVY,         /* heavy-tailed (normal / uniform^2), outliers per block */
	REF_NKINDS
};
const char *ref_kind_name(int kind);
void ref_gen_bf16(int kind, int64_t rows, int64_t cols, uint64_t seed, uint16_t *out);
void ref_gen_f32(int kind, int64_t rows, int64_t cols, uint64_t seed, float *out);
void ref_randn_bf16(uint16_t *out, int64_t n, double scale, ref_rng *r);

/* ---- backend helpers (host arrays in, host arrays out; every call checks its rc) ---- */
fos_backend *ref_cpu(int threads); /* NULL on failure */
void *ref_dev_put(fos_backend *be, const void *host, size_t bytes);
int ref_dev_get(fos_backend *be, void *host, const void *dev, size_t bytes);
/* be->quantize on a host tensor; decoded may be NULL. Returns the op's rc (err filled). */
int ref_be_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		    const float *amax_in, uint8_t *codes, uint8_t *scales, float *amax_out, uint16_t *decoded,
		    fos_err *err);
int ref_be_dequantize(fos_backend *be, const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows,
		      int64_t cols, int bound, int row_scaled, int out_dtype, void *out, fos_err *err);
int ref_be_decode(fos_backend *be, const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows,
		  int64_t cols, int bound, int row_scaled, uint16_t *out, fos_err *err);
/* be->gemm with host arrays; a_amax / b_amax / row_scale / bias host pointers or NULL. */
int ref_be_gemm(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
		const float *a_amax, float a_dinv, const float *b_amax, float b_dinv, const float *row_scale,
		const uint16_t *bias, uint16_t *y, fos_err *err);
int ref_be_colsum(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, uint16_t *db, fos_err *err);

/* Bitwise compare with NaN == NaN (any payload); returns the first mismatching index or -1. */
int64_t ref_cmp_bf16(const uint16_t *a, const uint16_t *b, int64_t n);
int64_t ref_cmp_f32(const float *a, const float *b, int64_t n);
int64_t ref_cmp_u8(const uint8_t *a, const uint8_t *b, int64_t n);

#endif
