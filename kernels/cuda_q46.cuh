/* cuda_q46.cuh: the per-block four-over-six / NVFP4 arithmetic of the CUDA quantize kernels, in
 * __host__ __device__ form so the same code can be checked against the scalar reference on the CPU.
 * Everything here is bit-identical to fos_format.h's definitions (NUMERICS.md section 3); the
 * shortcuts, each proven over every input by fos_cuda_selftest, are:
 *   - x / D for the constants D in {6, 1536, 2688} by a reciprocal multiply and two FMA corrections,
 *     taken only for 2^-100 <= |x| <= FLT_MAX (exact there; __fdiv_rn elsewhere);
 *   - the e2m1 code of a = |p| by a 3-comparison binary search (NaN gives 7, like the reference);
 *   - the candidate error's v = rn(rn(rn(value * sf) * A) / D) evaluated once per code magnitude
 *     (8 per candidate) and looked up per element: v of a negative code is -v of the positive one
 *     (every step is sign-symmetric under round-to-nearest-even), so the error of an element is
 *     computed on magnitudes: |d| = |rn(sigma_inv * v[c] - |x|)| where sigma_inv is inv's sign;
 *   - optionally the sm_89+ cvt.rn.satfinite.e4m3x2.f32 instruction for fos_e4m3_encode(min(x,448)). */
#ifndef FOS_CUDA_Q46_CUH
#define FOS_CUDA_Q46_CUH

#include "fos_format.h"

#if defined(__CUDA_ARCH__)
#define FCU_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#define FCU_FMA(a, b, c) fmaf((a), (b), (c))
#endif

/* rn(x / d) for d in {6, 1536, 2688} with r = rn(1 / d). */
FOS_HD float fcu_div_const(float x, float d, float r)
{
	float ax = fabsf(x);
	if (ax >= 0x1p-100f && ax <= FOS_FLT_MAX) {
		float q = FOS_MUL(x, r);
		float e = FCU_FMA(-q, d, x); /* exact residual */
		return FCU_FMA(e, r, q);
	}
	return FOS_DIV(x, d);
}

/* e2m1 magnitude code (0..7) of a >= 0 (or NaN -> 7), round to nearest even, saturating. Ties:
 * 0.25 -> 0, 0.75 -> 2, 1.25 -> 2, 1.75 -> 4, 2.5 -> 4, 3.5 -> 6, 5 -> 6. */
FOS_HD uint32_t fcu_e2m1_mag_code(float a)
{
	uint32_t hi = !(a < 1.75f);
	float t2 = hi ? 3.5f : 0.75f;
	uint32_t mid = !(a < t2);
	float t3 = hi ? (mid ? 5.0f : 2.5f) : (mid ? 1.25f : 0.25f);
	uint32_t lo = !(a <= t3);
	return (hi << 2) | (mid << 1) | lo;
}

/* Scale byte of min(x, 448) (x >= 0 or NaN; negative x is taken by magnitude like the reference). */
FOS_HD uint32_t fcu_e4m3_capped(float x)
{
	return fos_e4m3_encode(x > FOS_E4M3_MAX ? FOS_E4M3_MAX : x);
}

#if defined(__CUDACC__)
/* The same two bytes by the hardware conversion: lo byte = conversion of lo, hi byte of hi. */
__device__ __forceinline__ uint32_t fcu_e4m3x2_hw(float hi, float lo)
{
#if defined(__CUDA_ARCH__)
	hi = fabsf(hi > FOS_E4M3_MAX ? FOS_E4M3_MAX : hi);
	lo = fabsf(lo > FOS_E4M3_MAX ? FOS_E4M3_MAX : lo);
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
	return r;
#else
	return (fcu_e4m3_capped(hi) << 8) | fcu_e4m3_capped(lo);
#endif
}
#endif

/* v = rn(rn(rn(mag(c) * sf) * A) / D) for code magnitude c, negated when inv is negative. */
FOS_HD float fcu_vval(uint32_t c, float sf_f, float amax, float d, float rd, int neg)
{
	float v = fcu_div_const(FOS_MUL(FOS_MUL(fos_e2m1_mag(c), sf_f), amax), d, rd);
	return neg ? -v : v;
}

/* One candidate's error over 16 magnitudes ax[] (section 3, strictly in element order) and its
 * 16 magnitude codes (4 bits each, element i at bits 4i). tab(c) gives fcu_vval for code c. */
template <bool MSE, class Tab>
FOS_HD float fcu_cand_err(const float *ax, float inva, const Tab &tab, uint64_t *mags)
{
	float err = 0.0f;
	uint64_t w = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
	for (int i = 0; i < 16; i++) {
		float a = FOS_MUL(ax[i], inva);
		uint32_t c = fcu_e2m1_mag_code(a);
		float d = FOS_SUB(tab(c), ax[i]);
		err = FOS_ADD(err, MSE ? FOS_MUL(d, d) : fabsf(d));
		w |= (uint64_t)c << (4 * i);
	}
	*mags = w;
	return err;
}

/* Magnitude codes only (the gradient quantizer has no error). */
FOS_HD uint64_t fcu_mags(const float *ax, float inva)
{
	uint64_t w = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
	for (int i = 0; i < 16; i++)
		w |= (uint64_t)fcu_e2m1_mag_code(FOS_MUL(ax[i], inva)) << (4 * i);
	return w;
}

/* Sign bits (bit 4i+3) of the codes of rn(x[i] * inv): the sign of the product, except where the
 * product is NaN (code +6, 0x7). */
FOS_HD uint64_t fcu_signs(const float *xf, float inv)
{
	uint32_t sinv = fos_f2u(inv) >> 31;
	int nan_inv = inv != inv, inf_inv = fabsf(inv) > FOS_FLT_MAX;
	uint64_t s = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
	for (int i = 0; i < 16; i++) {
		float x = xf[i];
		int nanp = (x != x) | nan_inv | (inf_inv & (x == 0.0f));
		uint32_t sb = (fos_f2u(x) >> 31) ^ sinv;
		if (sb && !nanp)
			s |= 8ull << (4 * i);
	}
	return s;
}

/* A plain 8-entry table, for the CPU check of the above. */
struct fcu_arr_tab {
	const float *p;
	FOS_HD float operator()(uint32_t c) const { return p[c]; }
};

/* The whole 1x16 4/6 block on the CPU (reference-shaped, built from the pieces above): codes
 * (element i at bits 4i) and scale byte. For host-side verification only. */
template <bool MSE>
inline void fcu_q46_block_host(const float *xf, float amax, float d, uint32_t *sf_out, uint64_t *codes_out,
			       float *e6_out, float *e4_out)
{
	float rd = 1.0f / d;
	float s_enc = fos_s_enc(amax, d);
	float s_dec = 1.0f / s_enc;
	float ax[16], bamax = 0.0f;
	for (int i = 0; i < 16; i++) {
		ax[i] = fabsf(xf[i]);
		bamax = fos_absmax(bamax, xf[i]);
	}
	float base = FOS_MUL(fcu_div_const(bamax, 6.0f, 1.0f / 6.0f), s_enc);
	uint32_t sf6 = fcu_e4m3_capped(base), sf4 = fcu_e4m3_capped(FOS_MUL(base, 1.5f));
	float inv6 = fos_inv_scale(sf6, s_dec), inv4 = fos_inv_scale(sf4, s_dec);
	float t6[8], t4[8];
	for (uint32_t c = 0; c < 8; c++) {
		t6[c] = fcu_vval(c, fos_e4m3_to_f32(sf6), amax, d, rd, fos_f2u(inv6) >> 31);
		t4[c] = fcu_vval(c, fos_e4m3_to_f32(sf4), amax, d, rd, fos_f2u(inv4) >> 31);
	}
	uint64_t m6, m4;
	fcu_arr_tab a6 = {t6}, a4 = {t4};
	float e6 = fcu_cand_err<MSE>(ax, fabsf(inv6), a6, &m6);
	float e4 = fcu_cand_err<MSE>(ax, fabsf(inv4), a4, &m4);
	int pick4 = e4 < e6;
	*sf_out = pick4 ? sf4 : sf6;
	*codes_out = pick4 ? (m4 | fcu_signs(xf, inv4)) : (m6 | fcu_signs(xf, inv6));
	*e6_out = e6;
	*e4_out = e4;
}

#endif
