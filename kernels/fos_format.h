/* fos_format.h: the NVFP4 / four-over-six scalar numerics (NUMERICS.md sections 1-6), shared by
 * the CPU reference (C) and the CUDA kernels. Every operation is one IEEE binary32 operation with
 * round-to-nearest-even: host code is built with -ffp-contract=off, device code uses the __f*_rn
 * intrinsics (never contracted to FMA). */
#ifndef FOS_FORMAT_H
#define FOS_FORMAT_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include <float.h>

#if defined(__CUDACC__)
#define FOS_HD __host__ __device__ __forceinline__
#else
#define FOS_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define FOS_MUL(a, b) __fmul_rn((a), (b))
#define FOS_ADD(a, b) __fadd_rn((a), (b))
#define FOS_SUB(a, b) __fsub_rn((a), (b))
#define FOS_DIV(a, b) __fdiv_rn((a), (b))
#else
#define FOS_MUL(a, b) ((float)(a) * (float)(b))
#define FOS_ADD(a, b) ((float)(a) + (float)(b))
#define FOS_SUB(a, b) ((float)(a) - (float)(b))
#define FOS_DIV(a, b) ((float)(a) / (float)(b))
#endif

#define FOS_FLT_MAX 3.4028235e38f
#define FOS_E4M3_MAX 448.0f
#define FOS_ONE_SIXTH 0x1.555556p-3f /* fp32(1/6), the gradient quantizer's constant */

/* ---- bit casts and bf16 ---------------------------------------------------------------- */

FOS_HD uint32_t fos_f2u(float f)
{
#if defined(__CUDA_ARCH__)
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
#endif
}

FOS_HD float fos_u2f(uint32_t u)
{
#if defined(__CUDA_ARCH__)
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, 4);
	return f;
#endif
}

FOS_HD float fos_bf16_to_f32(uint16_t b)
{
	return fos_u2f((uint32_t)b << 16);
}

/* fp32 -> bf16, round to nearest even; NaN stays NaN (quiet, sign kept). */
FOS_HD uint16_t fos_f32_to_bf16(float f)
{
	uint32_t u = fos_f2u(f);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7FFFu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* NaN-dropping max of magnitudes (C fmaxf semantics: a NaN operand is ignored). */
FOS_HD float fos_absmax(float m, float x)
{
	float a = fabsf(x);
	return (a > m) ? a : m; /* a NaN compares false and is dropped; m starts at 0 */
}

/* ---- E2M1 ------------------------------------------------------------------------------- */

FOS_HD float fos_e2m1_mag(uint32_t code3)
{
	/* 0, 0.5, 1, 1.5, 2, 3, 4, 6 */
	return code3 < 4 ? (float)code3 * 0.5f : (code3 < 6 ? (float)(code3 - 2) : (code3 == 6 ? 4.0f : 6.0f));
}

FOS_HD float fos_e2m1_value(uint32_t code)
{
	float m = fos_e2m1_mag(code & 7u);
	return (code & 8u) ? -m : m;
}

/* Round-to-nearest-even, saturating, sign kept (-0 and negative underflow give 0x8); NaN -> 0x7. */
FOS_HD uint32_t fos_e2m1_encode(float v)
{
	if (v != v)
		return 0x7u;
	uint32_t sign = (fos_f2u(v) >> 31) ? 8u : 0u;
	float a = fabsf(v);
	uint32_t c;
	if (a <= 0.25f)
		c = 0;
	else if (a < 0.75f)
		c = 1;
	else if (a <= 1.25f)
		c = 2;
	else if (a < 1.75f)
		c = 3;
	else if (a <= 2.5f)
		c = 4;
	else if (a < 3.5f)
		c = 5;
	else if (a <= 5.0f)
		c = 6;
	else
		c = 7;
	return sign | c;
}

/* ---- E4M3 (float8_e4m3fn) --------------------------------------------------------------- */

FOS_HD float fos_e4m3_to_f32(uint32_t b)
{
	uint32_t s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
	float v;
	if (e == 15u && m == 7u)
		v = fos_u2f(0x7FC00000u);
	else if (e == 0)
		v = (float)m * 0.001953125f; /* m * 2^-9 */
	else
		v = fos_u2f(((e + 120u) << 23) | (m << 20)); /* exponent e - 7 */
	return s ? -v : v;
}

/* Nonnegative fp32 -> e4m3, round to nearest even with subnormals, saturating at 448 (0x7E).
 * Values below 2^-10 give 0 and 2^-10 exactly is a tie to 0. NaN -> 0x7F. The sign is dropped:
 * scales are never negative. */
FOS_HD uint32_t fos_e4m3_encode(float x)
{
	if (x != x)
		return 0x7Fu;
	x = fabsf(x);
	if (x >= FOS_E4M3_MAX)
		return 0x7Eu;
	if (x < 0.015625f) { /* below 2^-6: subnormal grid of 2^-9, exact scaling */
		float s = FOS_MUL(x, 512.0f);
		uint32_t i = (uint32_t)s;       /* truncation; s < 8 */
		float r = FOS_SUB(s, (float)i); /* exact */
		if (r > 0.5f || (r == 0.5f && (i & 1u)))
			i++;
		return i; /* i == 8 is 2^-6, code 0x08 */
	}
	uint32_t u = fos_f2u(x);
	u += 0x7FFFFu + ((u >> 20) & 1u);
	u &= 0xFFF00000u;
	uint32_t e = (u >> 23) - 120u; /* biased e4m3 exponent */
	uint32_t c = (e << 3) | ((u >> 20) & 7u);
	return c > 0x7Eu ? 0x7Eu : c;
}

/* ---- scales ----------------------------------------------------------------------------- */

FOS_HD float fos_bound_d(int bound)
{
	return bound == 448 ? 2688.0f : 1536.0f;
}

/* Global encode scale S_enc(amax, bound) (section 2). */
FOS_HD float fos_s_enc(float amax, float d)
{
	float s = FOS_DIV(d, amax);
	s = (s > FOS_FLT_MAX) ? FOS_FLT_MAX : s;
	if (amax == 0.0f || s == 0.0f)
		s = 1.0f;
	return s;
}

/* inv = (sf == 0) ? FLT_MAX : min(rn(1 / rn(float(sf) * s_dec)), FLT_MAX) */
FOS_HD float fos_inv_scale(uint32_t sf, float s_dec)
{
	if (sf == 0)
		return FOS_FLT_MAX;
	float inv = FOS_DIV(1.0f, FOS_MUL(fos_e4m3_to_f32(sf), s_dec));
	return (inv > FOS_FLT_MAX) ? FOS_FLT_MAX : inv;
}

/* The two 4/6 candidate scale bytes for a block of magnitude max bamax (section 3). */
FOS_HD void fos_46_candidates(float bamax, float s_enc, uint32_t *sf6, uint32_t *sf4)
{
	float base = FOS_MUL(FOS_DIV(bamax, 6.0f), s_enc);
	float b4 = FOS_MUL(base, 1.5f);
	*sf6 = fos_e4m3_encode(base > FOS_E4M3_MAX ? FOS_E4M3_MAX : base);
	*sf4 = fos_e4m3_encode(b4 > FOS_E4M3_MAX ? FOS_E4M3_MAX : b4);
}

/* The standard NVFP4 gradient scale byte (section 5): bamax * rn(S_enc * fp32(1/6)). */
FOS_HD uint32_t fos_grad_scale(float bamax, float s_enc)
{
	float v = FOS_MUL(bamax, FOS_MUL(s_enc, FOS_ONE_SIXTH));
	return fos_e4m3_encode(v > FOS_E4M3_MAX ? FOS_E4M3_MAX : v);
}

/* One element's contribution to a candidate's error (section 3): v = rn(rn(rn(q*sf)*A)/D). */
FOS_HD float fos_46_elem_err(uint32_t code, float sf_f, float amax, float d, float xf, int mse)
{
	float v = FOS_DIV(FOS_MUL(FOS_MUL(fos_e2m1_value(code), sf_f), amax), d);
	float diff = FOS_SUB(v, xf);
	return mse ? FOS_MUL(diff, diff) : fabsf(diff);
}

/* The fixed FP32 tree that sums a 16x16 tile's 16 row-group errors (section 3). */
FOS_HD float fos_tile_err_sum(const float *e)
{
	float a = FOS_ADD(FOS_ADD(FOS_ADD(e[0], e[8]), FOS_ADD(e[4], e[12])),
			  FOS_ADD(FOS_ADD(e[2], e[10]), FOS_ADD(e[6], e[14])));
	float b = FOS_ADD(FOS_ADD(FOS_ADD(e[1], e[9]), FOS_ADD(e[5], e[13])),
			  FOS_ADD(FOS_ADD(e[3], e[11]), FOS_ADD(e[7], e[15])));
	return FOS_ADD(a, b);
}

/* Dequantize factor for one block (section 6): rn(rn(float(sf) * A) * rn(1/D)). */
FOS_HD float fos_dec_scale(uint32_t sf, float amax, float d)
{
	return FOS_MUL(FOS_MUL(fos_e4m3_to_f32(sf), amax), FOS_DIV(1.0f, d));
}

#endif
