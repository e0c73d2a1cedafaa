/* cuda_qblock.cuh: the per-block pieces of the CUDA quantize kernels that more than one file uses,
 * so the rowwise kernels (cuda_quantize.cu, cuda_gradient.cu), the transposed-input kernel
 * (cuda_quantize_t.cu) and grad_pair (cuda_grad_pair.cu) run the very same arithmetic: raw
 * 16-element loads and their unpacking, the per-CTA per-tensor tables (fcu_pt_smem: inverse
 * scales, 4/6 candidate values, decoded bf16), the block functions fcu_blk46 / fcu_blk46_tile (4/6,
 * NUMERICS.md section 3) and fcu_blk_grad (the gradient quantizer, section 5; fcu_blk_grad_tile its
 * 16x16 form, section 11) with their magnitude and sign helpers, the stores of a block's codes and scale byte, and the decoding of a block's
 * codes into bf16 from the sdec table (fcu_dec_pt: one 16-byte row load and byte permutes). Device
 * code only; every float operation an __f*_rn intrinsic (cuda_q46.cuh). */
#ifndef FOS_CUDA_QBLOCK_CUH
#define FOS_CUDA_QBLOCK_CUH

#include "cuda_q46.cuh"

#include <stdint.h>

/* ---- loads ----------------------------------------------------------------------------------- */

template <typename T> struct fcu_raw;
template <> struct fcu_raw<uint16_t> {
	uint4 v[2];
};
template <> struct fcu_raw<float> {
	uint4 v[4];
};

__device__ __forceinline__ void fcu_load(const uint16_t *p, fcu_raw<uint16_t> &r)
{
	const uint4 *q = reinterpret_cast<const uint4 *>(p);
	r.v[0] = q[0];
	r.v[1] = q[1];
}
__device__ __forceinline__ void fcu_load(const float *p, fcu_raw<float> &r)
{
	const uint4 *q = reinterpret_cast<const uint4 *>(p);
	r.v[0] = q[0];
	r.v[1] = q[1];
	r.v[2] = q[2];
	r.v[3] = q[3];
}
__device__ __forceinline__ void fcu_zero(fcu_raw<uint16_t> &r)
{
	r.v[0] = r.v[1] = make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void fcu_zero(fcu_raw<float> &r)
{
	r.v[0] = r.v[1] = r.v[2] = r.v[3] = make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void fcu_unpack(const fcu_raw<uint16_t> &r, float *xf)
{
	const uint32_t *w = reinterpret_cast<const uint32_t *>(r.v);
#pragma unroll
	for (int i = 0; i < 8; i++) {
		xf[2 * i] = __uint_as_float(w[i] << 16);
		xf[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
	}
}
__device__ __forceinline__ void fcu_unpack(const fcu_raw<float> &r, float *xf)
{
	const uint32_t *w = reinterpret_cast<const uint32_t *>(r.v);
#pragma unroll
	for (int i = 0; i < 16; i++)
		xf[i] = __uint_as_float(w[i]);
}

/* ---- per-tensor tables ----------------------------------------------------------------------- */

/* With one amax for the whole tensor, everything that depends on the scale byte alone is tabled
 * once per CTA over all 128 bytes (0x7F included): sinv[sf] = fos_inv_scale(sf, s_dec), the
 * candidate values svt[sf][c] = fcu_vval(c, sf) (negated when sinv[sf] < 0), and the decoded bf16
 * sdec[sf][code] = bf16(e2m1 value(code) * float(sf)) of store_block. */
struct __align__(16) fcu_pt_smem { /* 16-byte aligned: fcu_dec_pt reads sdec rows as 16 bytes */
	float svt[128 * 8];
	float sinv[128];
	uint16_t sdec[128 * 16];
};

__device__ __forceinline__ void fcu_pt_setup(fcu_pt_smem &sm, float a, float d, float s_dec, bool want_v, bool want_dec)
{
	const int t = threadIdx.x;
	const float rd = FOS_DIV(1.0f, d);
	for (int i = t; i < 128; i += blockDim.x)
		sm.sinv[i] = fos_inv_scale((uint32_t)i, s_dec);
	if (want_dec)
		for (int i = t; i < 128 * 16; i += blockDim.x)
			sm.sdec[i] = fos_f32_to_bf16(FOS_MUL(fos_e2m1_value((uint32_t)i & 15u), fos_e4m3_to_f32((uint32_t)i >> 4)));
	__syncthreads();
	if (want_v)
		for (int i = t; i < 128 * 8; i += blockDim.x) {
			const uint32_t sf = (uint32_t)i >> 3;
			sm.svt[i] = fcu_vval((uint32_t)i & 7u, fos_e4m3_to_f32(sf), a, d, rd, fos_f2u(sm.sinv[sf]) >> 31);
		}
	__syncthreads();
}

/* Magnitude codes only (gradient quantizer) of the 16 elements |x| * inva, by
 * fcu_e2m1_mag_code_fma (cuda_q46.cuh): 8 biased codes summed per word, the bias removed once per
 * word. */
__device__ __forceinline__ uint64_t fcu_mags_fma(const float *xf, float inva)
{
	uint32_t w[2] = {0, 0};
#pragma unroll
	for (int i = 0; i < 16; i++)
		w[i / 8] += fcu_e2m1_mag_code_fma_biased(FOS_MUL(fabsf(xf[i]), inva)) << (4 * (i % 8));
	const uint32_t k = FCU_E2M1_FMA_BIAS * 0x11111111u;
	return (uint64_t)(w[0] - k) | ((uint64_t)(w[1] - k) << 32);
}

/* Sign bits (bit 4i+3) of the 16 inputs straight from their bits. Equal to fcu_signs(xf, inv) for
 * a positive finite inv when no input is NaN; the callers check that (a NaN input makes both
 * candidate errors NaN) and take fcu_signs otherwise. */
__device__ __forceinline__ uint64_t fcu_fast_signs(const fcu_raw<uint16_t> &r)
{
	const uint32_t *w = reinterpret_cast<const uint32_t *>(r.v);
	return fcu_bf16_signs(w); /* byte permutes (cuda_q46.cuh) */
}
__device__ __forceinline__ uint64_t fcu_fast_signs(const fcu_raw<float> &r)
{
	const uint32_t *w = reinterpret_cast<const uint32_t *>(r.v);
	uint32_t h[2] = {0, 0};
#pragma unroll
	for (int j = 0; j < 16; j++)
		h[j / 8] |= (w[j] >> 31) << (4 * (j % 8) + 3);
	return (uint64_t)h[0] | ((uint64_t)h[1] << 32);
}

/* The codes' sign bits for the chosen inv: fast unless a NaN or a non-finite inv is involved. */
template <typename T>
__device__ __forceinline__ uint64_t fcu_pick_signs(const fcu_raw<T> &r, const float *xf, float inv, bool nan_err)
{
	if (!nan_err && fabsf(inv) <= FOS_FLT_MAX) {
		const uint64_t s = fcu_fast_signs(r);
		return inv < 0.0f ? s ^ 0x8888888888888888ull : s;
	}
	return fcu_signs(xf, inv);
}

/* The 16 decoded bf16 of a block (e2m1 value * float(sf), exact in bf16) from its codes cw (element i
 * at bits 4i) and the shared sdec table of fcu_pt_setup, stored as two 16-byte words at dst. */
__device__ __forceinline__ void fcu_dec_pt(uint64_t cw, uint32_t sf, const uint16_t *sdec, uint16_t *dst)
{
	const uint16_t *row = sdec + sf * 16;
	uint32_t o[8];
	/* one 16-byte load of the row's magnitude entries 0..7, then byte permutes (fcu_dec_words) */
	const uint4 rv = *reinterpret_cast<const uint4 *>(row);
	fcu_dec_words(cw, sf, rv.x, rv.y, rv.z, rv.w, o);
	uint4 *dp = reinterpret_cast<uint4 *>(dst);
	dp[0] = make_uint4(o[0], o[1], o[2], o[3]);
	dp[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

/* One 1x16 block of the gradient quantizer; g = rn(s_enc * fp32(1/6)). Returns the codes, *sf_out
 * the scale byte. Shared by the rowwise and the transposed-input kernels. */
template <typename T>
__device__ __forceinline__ uint64_t fcu_blk_grad(const fcu_raw<T> &cur, float g, int hw, const fcu_pt_smem &sm,
						 uint32_t *sf_out)
{
	float xf[16], bamax = 0.0f;
	fcu_unpack(cur, xf);
	/* NaN-propagating max: equal to the NaN-dropping one unless an input is NaN, which it detects */
#pragma unroll
	for (int j = 0; j < 16; j++)
		asm("max.NaN.f32 %0, %0, %1;" : "+f"(bamax) : "f"(fabsf(xf[j])));
	const bool has_nan = bamax != bamax;
	if (has_nan) {
		bamax = 0.0f;
#pragma unroll
		for (int j = 0; j < 16; j++)
			bamax = fmaxf(bamax, fabsf(xf[j])); /* = fos_absmax: drops NaN */
	}
	const float v = FOS_MUL(bamax, g);
	const uint32_t sf = hw ? (fcu_e4m3x2_hw(v, v) & 0xFFu) : fcu_e4m3_capped(v);
	const float inv = sm.sinv[sf];
	const uint64_t m = fcu_mags_fma(xf, fabsf(inv));
	*sf_out = sf;
	return m | fcu_pick_signs(cur, xf, inv, has_nan);
}

/* One row-group (16 elements) of a plain NVFP4 16x16 tile (NUMERICS.md section 11): the tile amax
 * over the 16 lanes LS apart (as fcu_blk46_tile), one scale byte from it by the gradient
 * quantizer's arithmetic (fcu_blk_grad), this row-group's codes. Every lane of the warp must call
 * it. Returns the codes, *sf_out the scale byte. */
template <typename T, int LS>
__device__ __forceinline__ uint64_t fcu_blk_grad_tile(const fcu_raw<T> &raw, float g, int hw, const fcu_pt_smem &sm,
						      uint32_t *sf_out)
{
	float xf[16], bamax = 0.0f;
	bool has_nan = false;
	fcu_unpack(raw, xf);
#pragma unroll
	for (int j = 0; j < 16; j++) {
		bamax = fmaxf(bamax, fabsf(xf[j])); /* = fos_absmax: drops NaN */
		has_nan |= xf[j] != xf[j];
	}
#pragma unroll
	for (int o = 8; o >= 1; o >>= 1)
		bamax = fmaxf(bamax, __shfl_xor_sync(0xffffffffu, bamax, o * LS, 16 * LS)); /* no NaN here */
	const float v = FOS_MUL(bamax, g);
	const uint32_t sf = hw ? (fcu_e4m3x2_hw(v, v) & 0xFFu) : fcu_e4m3_capped(v);
	const float inv = sm.sinv[sf];
	*sf_out = sf;
	return fcu_mags_fma(xf, fabsf(inv)) | fcu_pick_signs(raw, xf, inv, has_nan);
}

/* ---- the rowwise walk ----------------------------------------------------------------------- */

/* The rowwise per-tensor kernels' walk over nblk 1x16 blocks with NT threads per CTA: thread t of
 * CTA c takes blocks c NT + t, then a grid's stride further each time, from the end when rev (the
 * amax pass just read the tensor, its tail is still in L2), and keeps the raw bytes of its next two
 * blocks in flight while work(b, cur) works on block b. */
template <int NT, typename T, class Work>
__device__ __forceinline__ void fcu_rows_walk(const T *x, int nblk, int rev, const Work &work)
{
	const int stride = gridDim.x * NT;
	int i = blockIdx.x * NT + threadIdx.x;
	fcu_raw<T> r0, r1;
	if (i < nblk)
		fcu_load(x + 16 * (int64_t)(rev ? nblk - 1 - i : i), r0);
	if (i + stride < nblk)
		fcu_load(x + 16 * (int64_t)(rev ? nblk - 1 - (i + stride) : i + stride), r1);
	for (; i < nblk; i += stride) {
		const int b = rev ? nblk - 1 - i : i;
		const fcu_raw<T> cur = r0;
		r0 = r1;
		if (i + 2 * stride < nblk)
			fcu_load(x + 16 * (int64_t)(rev ? nblk - 1 - (i + 2 * stride) : i + 2 * stride), r1);
		work(b, cur);
	}
}

/* ---- 4/6 blocks (section 3) ---------------------------------------------------------------- */

/* Both candidate scale bytes from base (section 3): sf6 = e4m3(min(base,448)), sf4 from 1.5 base. */
__device__ __forceinline__ void fcu_cands(float base, int hw, uint32_t *sf6, uint32_t *sf4)
{
	float b4 = FOS_MUL(base, 1.5f);
	if (hw) {
		uint32_t two = fcu_e4m3x2_hw(b4, base);
		*sf6 = two & 0xFFu;
		*sf4 = two >> 8;
	} else {
		*sf6 = fcu_e4m3_capped(base);
		*sf4 = fcu_e4m3_capped(b4);
	}
}

__device__ __forceinline__ float fcu_lds_f32(uint32_t addr)
{
	float v;
	asm("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
	return v;
}

/* One candidate's error and magnitude codes against the shared row svt[sf][0..7] at shared
 * address rb. The code's 3-comparison search selects the row entry's address directly:
 * addr = rb + 4 c, and the packed words accumulate addr << 4j (element j of word i / 7); the
 * rb terms are removed afterwards (mod 2^32, exact). */
template <bool MSE>
__device__ __forceinline__ float fcu_cand_pt(const float *xf, float inva, uint32_t rb, uint64_t *mags)
{
	float err = 0.0f;
	uint32_t w[3] = {0, 0, 0};
	const uint32_t rb4 = rb + 4;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const float ax = fabsf(xf[i]);
		const float a = FOS_MUL(ax, inva);
		const bool p0 = !(a < 1.75f);
		const float t2 = p0 ? 3.5f : 0.75f;
		const bool p1 = !(a < t2);
		const float t3 = p0 ? (p1 ? 5.0f : 2.5f) : (p1 ? 1.25f : 0.25f);
		const bool p2 = !(a <= t3);
		uint32_t addr = p2 ? rb4 : rb;
		if (p0)
			addr += 16u;
		if (p1)
			addr += 8u;
		const float d = FOS_SUB(fcu_lds_f32(addr), ax);
		err = FOS_ADD(err, MSE ? FOS_MUL(d, d) : fabsf(d));
		w[i / 7] += addr << (4 * (i % 7));
	}
	const uint32_t k7 = 0x01111111u * rb, k2 = 0x11u * rb; /* sum of rb << 4j over the word's elements */
	*mags = (uint64_t)((w[0] - k7) >> 2) | ((uint64_t)((w[1] - k7) >> 2) << 28) | ((uint64_t)((w[2] - k2) >> 2) << 56);
	return err;
}

/* Codes, scale byte and (DEC) decoded bf16 from the shared sdec table. */
template <bool DEC>
__device__ __forceinline__ void fcu_store_pt(int64_t b, uint64_t cw, uint32_t sf, uint8_t *codes, uint8_t *scales,
					     uint16_t *dec, const uint16_t *sdec)
{
	reinterpret_cast<uint64_t *>(codes)[b] = cw;
	scales[b] = (uint8_t)sf;
	if (DEC)
		fcu_dec_pt(cw, sf, sdec, dec + 16 * b);
}

/* One 1x16 block of the per-tensor 4/6 quantizer (section 3) from its raw input bits: returns the
 * 16 codes (element i at bits 4i) and sets *sf_out to the scale byte. Shared by the rowwise kernel
 * and the transposed-input kernel, so both run the same arithmetic. */
template <typename T, bool MSE>
__device__ __forceinline__ uint64_t fcu_blk46(const fcu_raw<T> &cur, float s_enc, float r6, int hw,
					      const fcu_pt_smem &sm, uint32_t svt0, uint32_t *sf_out)
{
	float xf[16];
	fcu_unpack(cur, xf);
	float bamax = 0.0f;
#pragma unroll
	for (int j = 0; j < 16; j++)
		bamax = fmaxf(bamax, fabsf(xf[j])); /* = fos_absmax: drops NaN */
	const float base = FOS_MUL(fcu_div_const(bamax, 6.0f, r6), s_enc);
	uint32_t sf6, sf4;
	fcu_cands(base, hw, &sf6, &sf4);
	const float inv6 = sm.sinv[sf6], inv4 = sm.sinv[sf4];
	uint64_t m6, m4;
	const float e6 = fcu_cand_pt<MSE>(xf, fabsf(inv6), svt0 + sf6 * 32, &m6);
	const float e4 = fcu_cand_pt<MSE>(xf, fabsf(inv4), svt0 + sf4 * 32, &m4);
	const bool p4 = e4 < e6;
	*sf_out = p4 ? sf4 : sf6;
	return (p4 ? m4 : m6) | fcu_pick_signs(cur, xf, p4 ? inv4 : inv6, e6 != e6 || e4 != e4);
}

/* One row-group (16 elements) of a 16x16 tile; the tile's 16 row-groups are held by 16 lanes of
 * one warp, lane stride LS apart (LS 1: the lanes of a half-warp; LS 2: every other lane). The
 * tile amax is a max over those lanes (exact), the tile error the section 3 tree by xor-shuffles
 * 8, 4, 2, 1 row-groups apart (every lane ends with the same sum: the tree's additions only
 * commute). Every lane of the warp must call it. Returns the row-group's codes, *sf_out its scale. */
template <typename T, bool MSE, int LS>
__device__ __forceinline__ uint64_t fcu_blk46_tile(const fcu_raw<T> &raw, float s_enc, float r6, int hw,
						   const fcu_pt_smem &sm, uint32_t svt0, uint32_t *sf_out)
{
	float xf[16], bamax = 0.0f;
	fcu_unpack(raw, xf);
#pragma unroll
	for (int j = 0; j < 16; j++)
		bamax = fmaxf(bamax, fabsf(xf[j])); /* = fos_absmax: drops NaN */
#pragma unroll
	for (int o = 8; o >= 1; o >>= 1)
		bamax = fmaxf(bamax, __shfl_xor_sync(0xffffffffu, bamax, o * LS, 16 * LS)); /* no NaN here */
	const float bs = FOS_MUL(fcu_div_const(bamax, 6.0f, r6), s_enc);
	uint32_t sf6, sf4;
	fcu_cands(bs, hw, &sf6, &sf4);
	const float inv6 = sm.sinv[sf6], inv4 = sm.sinv[sf4];
	uint64_t m6, m4;
	float e6 = fcu_cand_pt<MSE>(xf, fabsf(inv6), svt0 + sf6 * 32, &m6);
	float e4 = fcu_cand_pt<MSE>(xf, fabsf(inv4), svt0 + sf4 * 32, &m4);
	const bool nan_err = e6 != e6 || e4 != e4; /* this row-group's own */
#pragma unroll
	for (int o = 8; o >= 1; o >>= 1) {
		e6 = FOS_ADD(e6, __shfl_xor_sync(0xffffffffu, e6, o * LS, 16 * LS));
		e4 = FOS_ADD(e4, __shfl_xor_sync(0xffffffffu, e4, o * LS, 16 * LS));
	}
	const bool p4 = e4 < e6;
	*sf_out = p4 ? sf4 : sf6;
	return (p4 ? m4 : m6) | fcu_pick_signs(raw, xf, p4 ? inv4 : inv6, nan_err);
}

#endif
