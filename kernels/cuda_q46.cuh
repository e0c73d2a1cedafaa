/* cuda_q46.cuh: the per-block four-over-six / NVFP4 arithmetic of the CUDA quantize kernels, in
 * __host__ __device__ form so the same code can be checked against the scalar reference on the CPU.
 * Everything here is bit-identical to fos_format.h's definitions (NUMERICS.md section 3); the
 * shortcuts, each proven over every input by fos_cuda_selftest, are:
 *   - x / D for the constants D in {6, 1536, 2688} by a reciprocal multiply and two FMA corrections,
 *     taken only for 2^-100 <= |x| <= FLT_MAX (exact there; __fdiv_rn elsewhere);
 *   - the e2m1 code of a = |p| by a 3-comparison binary search (NaN gives 7, like the reference),
 *     or (gradient quantizer) by one rounding FMA, rn(min(a, 6) + 2^(22 + e')), and integer ops;
 *   - the decoded bf16 of a block by byte permutes of its sdec row, and bf16 sign bits likewise;
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

/* The same code by one rounding FMA (a replacement of the search above, proven
 * equal over every float by fos_cuda_selftest 3 and on the CPU): with c = min(a, 6) (NaN -> 6) and
 * u = 2^e', e' = clamp(floor(log2 c), 0, 2), r = rn(c + 2^(22 + e')) rounds c to a multiple of the
 * e2m1 step 2^(e' - 1) with ties to even (the hardware rounding), k = bits(r) - bits(2^(22 + e'))
 * steps, code = k + 2 e'. Returned biased: code + FCU_E2M1_FMA_BIAS (mod 2^32), so a packed word of 8
 * biased codes (element i at bits 4i, summed) is corrected by one subtraction of
 * FCU_E2M1_FMA_BIAS * 0x11111111. For a >= 0 and every NaN it equals fcu_e2m1_mag_code(a); for
 * a = -0 too; other negative a are never passed (a = |x| * |inv|) and give no code in 0..7. */
#define FCU_E2M1_FMA_BIAS 0x0B0000FEu
FOS_HD uint32_t fcu_e2m1_mag_code_fma_biased(float a)
{
#if defined(__CUDA_ARCH__)
	const float c = fminf(a, 6.0f); /* FMNMX: any NaN (signalling too) gives 6 */
#else
	const float c = a < 6.0f ? a : 6.0f; /* the same on the host, where fminf keeps a signalling NaN */
#endif
	const uint32_t u = fos_f2u(fmaxf(c, 1.0f)) & 0x7F800000u; /* 2^e' */
	const float r = FCU_FMA(fos_u2f(u), 0x1p22f, c);		   /* rn(c + 2^(22 + e')): exact product */
	return fos_f2u(r) - u + (u >> 22);				   /* k + 0x0B000000 + 2 e' + 254 */
}
FOS_HD uint32_t fcu_e2m1_mag_code_fma(float a)
{
	return fcu_e2m1_mag_code_fma_biased(a) - FCU_E2M1_FMA_BIAS;
}

/* PTX prmt.b32 (generic mode) on the host and the device: byte n of the result is byte (c >> 4n) & 7
 * of {b, a} (a = bytes 0..3), or, when bit 4n + 3 of c is set, that byte's top bit replicated. */
FOS_HD uint32_t fcu_prmt(uint32_t a, uint32_t b, uint32_t c)
{
#if defined(__CUDA_ARCH__)
	uint32_t d;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
#else
	const uint64_t v = (uint64_t)a | ((uint64_t)b << 32);
	uint32_t d = 0;
	for (int n = 0; n < 4; n++) {
		const uint32_t s = (c >> (4 * n)) & 15u;
		uint32_t y = (uint32_t)(v >> (8 * (s & 7u))) & 0xFFu;
		if (s & 8u)
			y = (y & 0x80u) ? 0xFFu : 0u;
		d |= y << (8 * n);
	}
	return d;
#endif
}

/* The 16 decoded bf16 of a block (two per word, element 2j in the low half of o[j]) from its codes
 * cw (element i at bits 4i) and the first 8 entries of its sdec row (fcu_pt_setup: bf16(e2m1 value
 * (code) * float(sf)) for the magnitude codes 0..7) as 4 words r0..r3 (entries 2j, 2j + 1 in r_j):
 * the low and the high bytes of the 8 magnitudes are gathered into two 8-byte tables, looked up 4
 * elements at a time by byte permutes with the codes' magnitudes as selectors, the codes' sign bits
 * ORed into the high bytes (except for the NaN scale byte 0x7F, whose row holds one NaN for every
 * code whatever its sign), and the two bytes of each element interleaved. Equal to the 16 table
 * look-ups row[code] for every sf in 0..0x7F and every cw (fos_cuda_selftest 4, and the CPU). */
FOS_HD void fcu_dec_words(uint64_t cw, uint32_t sf, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3, uint32_t *o)
{
	const uint32_t lo0 = fcu_prmt(r0, r1, 0x6420u), hi0 = fcu_prmt(r0, r1, 0x7531u);
	const uint32_t lo1 = fcu_prmt(r2, r3, 0x6420u), hi1 = fcu_prmt(r2, r3, 0x7531u);
	const uint32_t smask = sf == 0x7Fu ? 0u : 0x80808080u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
	for (int h = 0; h < 2; h++) {
		const uint32_t w = (uint32_t)(cw >> (32 * h)), m = w & 0x77777777u, sh = w << 4;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
		for (int q = 0; q < 2; q++) {
			const uint32_t sel = q ? m >> 16 : m;
			const uint32_t lo = fcu_prmt(lo0, lo1, sel);
			/* sign of element 4q + i: top bit of byte 2q + i/2 of (i even ? w << 4 : w) */
			const uint32_t sg = fcu_prmt(sh, w, q ? 0xFBEAu : 0xD9C8u);
			const uint32_t hi = fcu_prmt(hi0, hi1, sel) | (sg & smask);
			o[4 * h + 2 * q] = fcu_prmt(lo, hi, 0x5140u);
			o[4 * h + 2 * q + 1] = fcu_prmt(lo, hi, 0x7362u);
		}
	}
}

/* Sign bits (bit 4i+3) of 16 bf16 inputs (element 2j in the low half of word w[j]) by byte
 * permutes: each input's sign is the top bit of byte 1 or 3 of its word. The same as masking and
 * shifting each sign into place (fcu_fast_signs of cuda_qblock.cuh). */
FOS_HD uint64_t fcu_bf16_signs(const uint32_t *w)
{
	uint32_t h[2];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
	for (int k = 0; k < 2; k++) {
		/* x: bytes = signs of elements 8k + {0, 2, 1, 3} replicated, y: of 8k + {4, 6, 5, 7} */
		const uint32_t x = fcu_prmt(w[4 * k], w[4 * k + 1], 0xFBD9u);
		const uint32_t y = fcu_prmt(w[4 * k + 2], w[4 * k + 3], 0xFBD9u);
		const uint32_t ev = fcu_prmt(x, y, 0x5410u), od = fcu_prmt(x, y, 0x7632u);
		h[k] = (ev & 0x08080808u) | (od & 0x80808080u);
	}
	return (uint64_t)h[0] | ((uint64_t)h[1] << 32);
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
