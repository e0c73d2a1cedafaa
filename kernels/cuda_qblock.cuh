/* cuda_qblock.cuh: the per-block pieces of the CUDA quantize kernels that more than one file uses
 * (moved here unchanged from cuda_quant.cu, so cuda_grad_pair.cu runs the very same arithmetic as
 * the quantize kernels): raw 16-element loads and their unpacking, the per-CTA per-tensor tables
 * (fcu_pt_smem: inverse scales, 4/6 candidate values, decoded bf16), the gradient quantizer's block
 * function fcu_blk_grad (NUMERICS.md section 5) with its magnitude and sign helpers, the decoding
 * of a block's codes into bf16 from the sdec table (fcu_dec_pt: one 16-byte row load and byte
 * permutes), and the cp.async helpers of the
 * ring kernels. Device code only; every float operation an __f*_rn intrinsic (cuda_q46.cuh). */
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

/* The gradient quantizer's helpers exist in two forms with the same results: by default the cheaper
 * ones (e2m1 code by one FMA, decode by byte permutes, signs by byte permutes, one NaN-propagating
 * max for the NaN check); built with -DFCU_GRAD_OLD_HELPERS, the previous ones (3-comparison search,
 * sdec look-up per element, shifts and masks, a NaN test per element), for A/B timing. */

/* Magnitude codes only (gradient quantizer): the 3-comparison search. */
__device__ __forceinline__ uint64_t fcu_mags_search(const float *xf, float inva)
{
	uint32_t w[2] = {0, 0};
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const float a = FOS_MUL(fabsf(xf[i]), inva);
		const bool p0 = !(a < 1.75f);
		const float t2 = p0 ? 3.5f : 0.75f;
		const bool p1 = !(a < t2);
		const float t3 = p0 ? (p1 ? 5.0f : 2.5f) : (p1 ? 1.25f : 0.25f);
		const bool p2 = !(a <= t3);
		w[i / 8] |= ((p0 ? 4u : 0u) + (p1 ? 2u : 0u) + (p2 ? 1u : 0u)) << (4 * (i % 8));
	}
	return (uint64_t)w[0] | ((uint64_t)w[1] << 32);
}

/* The same codes by fcu_e2m1_mag_code_fma (cuda_q46.cuh): 8 biased codes summed per word, the bias
 * removed once per word. */
__device__ __forceinline__ uint64_t fcu_mags_fma(const float *xf, float inva)
{
	uint32_t w[2] = {0, 0};
#pragma unroll
	for (int i = 0; i < 16; i++)
		w[i / 8] += fcu_e2m1_mag_code_fma_biased(FOS_MUL(fabsf(xf[i]), inva)) << (4 * (i % 8));
	const uint32_t k = FCU_E2M1_FMA_BIAS * 0x11111111u;
	return (uint64_t)(w[0] - k) | ((uint64_t)(w[1] - k) << 32);
}

__device__ __forceinline__ uint64_t fcu_mags_fast(const float *xf, float inva)
{
#ifdef FCU_GRAD_OLD_HELPERS
	return fcu_mags_search(xf, inva);
#else
	return fcu_mags_fma(xf, inva);
#endif
}

/* Sign bits (bit 4i+3) of the 16 inputs straight from their bits. Equal to fcu_signs(xf, inv) for
 * a positive finite inv when no input is NaN; the callers check that (a NaN input makes both
 * candidate errors NaN) and take fcu_signs otherwise. */
__device__ __forceinline__ uint64_t fcu_fast_signs(const fcu_raw<uint16_t> &r)
{
	const uint32_t *w = reinterpret_cast<const uint32_t *>(r.v);
#ifndef FCU_GRAD_OLD_HELPERS
	return fcu_bf16_signs(w); /* byte permutes (cuda_q46.cuh) */
#else
	uint32_t h[2] = {0, 0};
#pragma unroll
	for (int j = 0; j < 8; j++) {
		const uint32_t s = w[j] & 0x80008000u;
		h[j / 4] |= (((s >> 12) | (s >> 24)) & 0x88u) << (8 * (j % 4));
	}
	return (uint64_t)h[0] | ((uint64_t)h[1] << 32);
#endif
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
#ifndef FCU_GRAD_OLD_HELPERS
	/* one 16-byte load of the row's magnitude entries 0..7, then byte permutes (fcu_dec_words) */
	const uint4 rv = *reinterpret_cast<const uint4 *>(row);
	fcu_dec_words(cw, sf, rv.x, rv.y, rv.z, rv.w, o);
#else
#pragma unroll
	for (int i = 0; i < 8; i++) {
		const uint32_t byte = (uint32_t)(cw >> (8 * i)) & 0xFFu;
		o[i] = row[byte & 15u] | ((uint32_t)row[byte >> 4] << 16);
	}
#endif
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
#ifndef FCU_GRAD_OLD_HELPERS
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
#else
#pragma unroll
	for (int j = 0; j < 16; j++)
		bamax = fmaxf(bamax, fabsf(xf[j])); /* = fos_absmax: drops NaN */
	bool has_nan = false;
#pragma unroll
	for (int j = 0; j < 16; j++)
		has_nan |= xf[j] != xf[j];
#endif
	const float v = FOS_MUL(bamax, g);
	const uint32_t sf = hw ? (fcu_e4m3x2_hw(v, v) & 0xFFu) : fcu_e4m3_capped(v);
	const float inv = sm.sinv[sf];
	const uint64_t m = fcu_mags_fast(xf, fabsf(inv));
	*sf_out = sf;
	return m | fcu_pick_signs(cur, xf, inv, has_nan);
}

/* ---- cp.async rings ---------------------------------------------------------------------------- */

/* The pipelined kernels (k_quant_t, k_quant_rows, k_grad_pair) stream their input through a ring
 * of `stages` shared-memory buffers (2..NS) filled by 16-byte cp.async (L2 only; zero-filled where
 * off). A persistent CTA takes work items i, i + G, i + 2G, ... (G = gridDim.x); its k-th item
 * lands in buffer k % stages, and stages - 1 items are in flight while one is worked on. One commit
 * group per item, committed even when empty (past the end), so the group count stays in step; one
 * barrier per item:
 *   prologue: issue the CTA's items 0 .. stages - 2;
 *   item k:   wait until at most stages - 2 groups are pending (item k landed, this thread's part);
 *             barrier (item k landed for every thread, and every thread is done with item k - 1's
 *             buffer); issue item k + stages - 1 into item k - 1's buffer; work on item k.
 * NS = 4 buffers for 2-byte inputs, 2 for f32 (the same bytes), so a CTA stays under 48 KiB of
 * static shared memory and 3 or 4 CTAs fit on an SM. */

__device__ __forceinline__ void fcu_cp_async16(uint32_t dst, const void *src, bool on)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(on ? 16 : 0) : "memory");
}
__device__ __forceinline__ void fcu_cp_commit()
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most stages - 2 commit groups of this thread are pending (stages 2..4). */
__device__ __forceinline__ void fcu_cp_wait_ring(int stages)
{
	if (stages >= 4)
		asm volatile("cp.async.wait_group 2;\n" ::: "memory");
	else if (stages == 3)
		asm volatile("cp.async.wait_group 1;\n" ::: "memory");
	else
		asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Ring depth in buffers for input type T, and the depth a launch asked for clamped to 2..NS. */
template <typename T> struct fcu_ring {
	static constexpr int NS = sizeof(T) == 2 ? 4 : 2;
	static __device__ __forceinline__ int depth(int stages) { return stages < 2 ? 2 : (stages > NS ? NS : stages); }
};

#endif
