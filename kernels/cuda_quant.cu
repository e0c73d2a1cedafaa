/* cuda_quant.cu: the CUDA backend's elementwise ops: amax (per tensor / per row), transpose,
 * four-over-six quantize (1x16 per-tensor and row-scaled, 16x16 tiles), the NVFP4 gradient
 * quantize, quantize_t (the same quantizers on an input stored transposed, read in place through
 * shared-memory tiles), dequantize and decode. The transposed kernel streams its input through a
 * 4-deep cp.async ring of shared-memory tiles (k_quant_rows is the same ring for rowwise inputs, a
 * variant); a per-tensor amax given by the caller is copied into q->amax by the quantize kernel
 * itself (no 4-byte copy on the stream, which cost 6 to 9 us per quantize on the H200).
 * Bit-identical to the CPU reference
 * (kernels/cpu_quant.c): the per-block arithmetic is cuda_q46.cuh and the block functions
 * fcu_blk46 / fcu_blk46_tile / fcu_blk_grad, shared by the rowwise and the transposed kernels;
 * every float operation an __f*_rn intrinsic. fcu_blk_grad, the raw loads, the per-tensor tables,
 * the decoding from them and the cp.async helpers live in cuda_qblock.cuh, shared with
 * cuda_grad_pair.cu.
 *
 * Layout: a 1x16 block of a row-major (rows, cols) tensor is 16 contiguous elements, so block b
 * reads x + 16 b, writes 8 code bytes at codes + 8 b, its scale byte at scales + b and 16 bf16 at
 * decoded + 16 b, whatever the row. One thread owns one block (16x16: a half-warp owns one tile,
 * one row-group per thread). Candidate tables (v per code magnitude) live in shared memory laid
 * out [entry][thread], so per-element lookups never conflict. */
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"
#include "cuda_qblock.cuh"

#include <stdint.h>

#define QT 256 /* threads per quantize block */

/* ---- shared tables --------------------------------------------------------------------------- */

/* Per-thread table at p = &t[0][tid] of a [entry][QT] array. */
struct fcu_thr_tab {
	const float *p;
	__device__ __forceinline__ float operator()(uint32_t c) const { return p[c * QT]; }
};
/* Shared per-tensor table row svt[sf][0..7]. */
struct fcu_row_tab {
	const float *p;
	__device__ __forceinline__ float operator()(uint32_t c) const { return p[c]; }
};

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

/* Writes the block's 16 codes, its scale byte and optionally the decoded bf16 (value * scale). */
template <bool DEC>
__device__ __forceinline__ void fcu_store(int64_t b, uint64_t cw, uint32_t sf, uint8_t *codes, uint8_t *scales,
					  uint16_t *dec, uint16_t (*dt)[QT])
{
	reinterpret_cast<uint64_t *>(codes)[b] = cw;
	scales[b] = (uint8_t)sf;
	if (DEC) {
		const int t = threadIdx.x;
		float sff = fos_e4m3_to_f32(sf);
#pragma unroll
		for (uint32_t c = 0; c < 8; c++)
			dt[c][t] = fos_f32_to_bf16(FOS_MUL(fos_e2m1_mag(c), sff));
		uint32_t o[8];
#pragma unroll
		for (int i = 0; i < 8; i++) {
			uint32_t c0 = (uint32_t)(cw >> (8 * i)) & 15u, c1 = (uint32_t)(cw >> (8 * i + 4)) & 15u;
			uint32_t lo = dt[c0 & 7u][t] | ((c0 & 8u) << 12), hi = dt[c1 & 7u][t] | ((c1 & 8u) << 12);
			o[i] = lo | (hi << 16);
		}
		uint4 *d = reinterpret_cast<uint4 *>(dec + 16 * b);
		d[0] = make_uint4(o[0], o[1], o[2], o[3]);
		d[1] = make_uint4(o[4], o[5], o[6], o[7]);
	}
}

/* ---- 4/6, 1x16 blocks ------------------------------------------------------------------------ */

/* ROWS: one amax per row (bpr blocks per row), else per tensor. SHTAB (per tensor only): candidate
 * values and inverse scales from a per-CTA table over all 128 scale bytes. rev: walk the blocks
 * from the end (the amax pass left the tensor's tail in L2). */
template <typename T, bool ROWS, bool MSE, bool DEC, bool SHTAB>
__global__ void __launch_bounds__(QT) k_q46_1x16(const T *__restrict__ x, int nblk, int bpr,
						 const float *__restrict__ amax, float *__restrict__ amax_out, float d,
						 int hw, int rev, uint8_t *__restrict__ codes,
						 uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	__shared__ float vt[SHTAB ? 1 : 16][QT];
	__shared__ float svt[SHTAB ? 128 * 8 : 1];
	__shared__ float sinv[SHTAB ? 128 : 1];
	__shared__ uint16_t dt[DEC ? 8 : 1][QT];
	const int t = threadIdx.x;
	const float rd = FOS_DIV(1.0f, d), r6 = FOS_DIV(1.0f, 6.0f);
	float a = 0.0f, s_enc = 1.0f, s_dec = 1.0f;
	if (!ROWS) {
		a = amax[0];
		s_enc = fos_s_enc(a, d);
		s_dec = FOS_DIV(1.0f, s_enc);
		if (amax_out && blockIdx.x == 0 && t == 0)
			amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	}
	if (SHTAB) {
		for (int i = t; i < 128; i += QT)
			sinv[i] = fos_inv_scale((uint32_t)i, s_dec);
		__syncthreads();
		for (int i = t; i < 128 * 8; i += QT) {
			uint32_t sf = (uint32_t)i >> 3;
			svt[i] = fcu_vval((uint32_t)i & 7u, fos_e4m3_to_f32(sf), a, d, rd, fos_f2u(sinv[sf]) >> 31);
		}
		__syncthreads();
	}
	const int stride = gridDim.x * QT;
	int i = blockIdx.x * QT + t;
	fcu_raw<T> raw;
	if (i < nblk)
		fcu_load(x + 16 * (int64_t)(rev ? nblk - 1 - i : i), raw);
	for (; i < nblk; i += stride) {
		const int b = rev ? nblk - 1 - i : i;
		float xf[16], ax[16];
		const fcu_raw<T> cur = raw;
		fcu_unpack(cur, xf);
		if (i + stride < nblk) /* next block's bytes in flight during this block's arithmetic */
			fcu_load(x + 16 * (int64_t)(rev ? nblk - 1 - (i + stride) : i + stride), raw);
		if (ROWS) {
			a = amax[b / bpr];
			s_enc = fos_s_enc(a, d);
			s_dec = FOS_DIV(1.0f, s_enc);
		}
		float bamax = 0.0f;
#pragma unroll
		for (int j = 0; j < 16; j++) {
			ax[j] = fabsf(xf[j]);
			bamax = fmaxf(bamax, fabsf(xf[j])); /* = fos_absmax: drops NaN */
		}
		float base = FOS_MUL(fcu_div_const(bamax, 6.0f, r6), s_enc);
		uint32_t sf6, sf4;
		fcu_cands(base, hw, &sf6, &sf4);
		float inv6, inv4, e6, e4;
		uint64_t m6, m4;
		if (SHTAB) {
			inv6 = sinv[sf6];
			inv4 = sinv[sf4];
			fcu_row_tab t6 = {svt + sf6 * 8}, t4 = {svt + sf4 * 8};
			e6 = fcu_cand_err<MSE>(ax, fabsf(inv6), t6, &m6);
			e4 = fcu_cand_err<MSE>(ax, fabsf(inv4), t4, &m4);
		} else {
			inv6 = fos_inv_scale(sf6, s_dec);
			inv4 = fos_inv_scale(sf4, s_dec);
			float f6 = fos_e4m3_to_f32(sf6), f4 = fos_e4m3_to_f32(sf4);
			int n6 = fos_f2u(inv6) >> 31, n4 = fos_f2u(inv4) >> 31;
#pragma unroll
			for (uint32_t c = 0; c < 8; c++) {
				vt[c][t] = fcu_vval(c, f6, a, d, rd, n6);
				vt[8 + c][t] = fcu_vval(c, f4, a, d, rd, n4);
			}
			fcu_thr_tab t6 = {&vt[0][t]}, t4 = {&vt[8][t]};
			e6 = fcu_cand_err<MSE>(ax, fabsf(inv6), t6, &m6);
			e4 = fcu_cand_err<MSE>(ax, fabsf(inv4), t4, &m4);
		}
		const bool p4 = e4 < e6;
		const uint32_t sf = p4 ? sf4 : sf6;
		const float inv = p4 ? inv4 : inv6;
		const uint64_t cw = (p4 ? m4 : m6) | fcu_pick_signs(cur, xf, inv, e6 != e6 || e4 != e4);
		fcu_store<DEC>(b, cw, sf, codes, scales, dec, dt);
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

/* ---- 4/6, 1x16, per tensor ------------------------------------------------------------------- */

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

/* One thread per block, two blocks' bytes in flight ahead of the one being worked on. rev: walk
 * from the end (the amax pass just read the tensor, its tail is still in L2). hw: the hardware
 * e4m3 conversion (exhaustively equal, self-test 2). */
template <typename T, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT) k_q46_pt(const T *__restrict__ x, int nblk, const float *__restrict__ amax,
					       float *__restrict__ amax_out, float d, int hw, int rev,
					       uint8_t *__restrict__ codes, uint8_t *__restrict__ scales,
					       uint16_t *__restrict__ dec)
{
	__shared__ fcu_pt_smem sm;
	const float a = amax[0];
	if (amax_out && blockIdx.x == 0 && threadIdx.x == 0)
		amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(a, d), s_dec = FOS_DIV(1.0f, s_enc);
	fcu_pt_setup(sm, a, d, s_dec, true, DEC);
	const float r6 = FOS_DIV(1.0f, 6.0f);
	const uint32_t svt0 = (uint32_t)__cvta_generic_to_shared(sm.svt);
	const int stride = gridDim.x * QT;
	int i = blockIdx.x * QT + threadIdx.x;
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
		uint32_t sf;
		const uint64_t cw = fcu_blk46<T, MSE>(cur, s_enc, r6, hw, sm, svt0, &sf);
		fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
	}
}

/* ---- 4/6, 16x16 tiles ------------------------------------------------------------------------ */

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

/* A half-warp per tile: lane r of the half owns the tile's row r (one 1x16 row-group). */
template <typename T, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT) k_q46_16x16(const T *__restrict__ x, int ntiles, int bpr,
						  const float *__restrict__ amax, float *__restrict__ amax_out, float d,
						  int hw, uint8_t *__restrict__ codes, uint8_t *__restrict__ scales,
						  uint16_t *__restrict__ dec)
{
	__shared__ fcu_pt_smem sm;
	const int t = threadIdx.x, r = t & 15;
	const float a = amax[0];
	if (amax_out && blockIdx.x == 0 && t == 0)
		amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(a, d), s_dec = FOS_DIV(1.0f, s_enc);
	fcu_pt_setup(sm, a, d, s_dec, true, DEC);
	const float r6 = FOS_DIV(1.0f, 6.0f);
	const uint32_t svt0 = (uint32_t)__cvta_generic_to_shared(sm.svt);
	for (int base_t = blockIdx.x * (QT / 16); base_t < ntiles; base_t += gridDim.x * (QT / 16)) {
		const int tile = base_t + t / 16;
		const bool on = tile < ntiles;
		int64_t b = 0;
		fcu_raw<T> raw;
		if (on) {
			const int tr = tile / bpr, tc = tile - tr * bpr;
			b = (int64_t)(tr * 16 + r) * bpr + tc;
			fcu_load(x + 16 * b, raw);
		} else {
			fcu_zero(raw);
		}
		uint32_t sf;
		const uint64_t cw = fcu_blk46_tile<T, MSE, 1>(raw, s_enc, r6, hw, sm, svt0, &sf);
		if (on)
			fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
	}
}

/* ---- standard NVFP4 gradient quantize (section 5) -------------------------------------------- */

template <typename T, bool DEC>
__global__ void __launch_bounds__(QT) k_grad_1x16(const T *__restrict__ x, int nblk, const float *__restrict__ amax,
						  float *__restrict__ amax_out, int hw, int rev, uint8_t *__restrict__ codes,
						  uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	__shared__ fcu_pt_smem sm;
	if (amax_out && blockIdx.x == 0 && threadIdx.x == 0)
		amax_out[0] = amax[0]; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(amax[0], 2688.0f), s_dec = FOS_DIV(1.0f, s_enc);
	fcu_pt_setup(sm, amax[0], 2688.0f, s_dec, false, DEC);
	const float g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
	const int stride = gridDim.x * QT;
	int i = blockIdx.x * QT + threadIdx.x;
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
		uint32_t sf;
		const uint64_t cw = fcu_blk_grad<T>(cur, g, hw, sm, &sf);
		fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
	}
}

enum { FCU_QT_46 = 0, FCU_QT_46_TILE = 1, FCU_QT_GRAD = 2 };

/* ---- quantize of an input stored transposed (quantize_t) ------------------------------------- */

/* The logical (rows, cols) tensor is X[r, c] = x[c * rows + r]: its 1x16 block (r, b) is a strip
 * of 16 stored rows in one stored column. A CTA takes a tile of QTT_R logical rows x QTT_C logical
 * columns (QTT_C / 16 = 4 blocks per logical row): the tile's QTT_C stored rows of QTT_R elements
 * (one 128-byte line each for bf16, two for f32) are copied into a ring buffer with 16-byte
 * cp.async (zero-filled past the edges); then each thread gathers one block's 16 elements from a
 * stored column of the tile and runs the same per-block arithmetic as the rowwise kernels
 * (fcu_blk46 / fcu_blk46_tile / fcu_blk_grad). Lane mapping: the W blocks of a logical row on W
 * neighbouring lanes (W = 4; 2 for 16x16, whose 16 row-groups must share a warp), so a warp's code
 * and decoded stores cover whole 32-byte sectors of consecutive logical rows. In a tile buffer,
 * stored row j starts at j * QTT_R + (j / 16) * (32 / W) elements: the skew puts the strips of a
 * warp's W blocks on disjoint banks, and the 16-byte copies stay conflict-free. The tiles are the
 * work items of a cp.async ring (above): up to 3 tiles (24 KiB of bf16) in flight per CTA while
 * one is worked on (measured on the H200: 74.7 us at depth 4 against 74.3 at depth 2 for the
 * gradient quantize_t of 8192x4096 bf16; the kernel is issue-bound, not memory-bound). Tiles are walked in stored order (rev: from the end, as the rowwise kernels do
 * after an amax pass). Stored rows that are not 16-byte aligned take element loads instead. */
#define QTT_R 64 /* logical rows per tile */
#define QTT_C 64 /* logical columns per tile */

template <typename T, int MODE, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT, MODE == FCU_QT_GRAD ? 4 : 3) k_quant_t(const T *__restrict__ x, int rows, int cols, int nrt,
						int ntiles, const float *__restrict__ amax, float *__restrict__ amax_out,
						float d, int hw, int rev, int vec, int stages, uint8_t *__restrict__ codes,
						uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	constexpr int W = MODE == FCU_QT_46_TILE ? 2 : 4; /* blocks of one logical row on W lanes */
	constexpr int RW = 32 / W;			  /* logical rows per warp (also the skew) */
	constexpr int EPC = 16 / (int)sizeof(T);	  /* elements per 16-byte chunk */
	constexpr int CPR = QTT_R / EPC;		  /* chunks per stored tile row */
	constexpr int NCH = QTT_C * CPR / QT;		  /* chunks per thread */
	constexpr int TSZ = QTT_C * QTT_R + 3 * RW;	  /* one tile buffer, elements (16-byte multiple) */
	constexpr int NS = fcu_ring<T>::NS;
	static_assert(QT == 256 && QTT_C == 64 && QTT_R == 64 && NCH * QT == QTT_C * CPR, "tile shape");
	static_assert((TSZ * sizeof(T)) % 16 == 0, "tile buffer alignment");
	__shared__ fcu_pt_smem sm;
	__shared__ __align__(16) T tile[NS * TSZ];
	const int t = threadIdx.x, lane = t & 31, wp = t >> 5;
	const float a = amax[0];
	if (amax_out && blockIdx.x == 0 && t == 0)
		amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(a, MODE == FCU_QT_GRAD ? 2688.0f : d), s_dec = FOS_DIV(1.0f, s_enc);
	if (MODE == FCU_QT_GRAD)
		fcu_pt_setup(sm, a, 2688.0f, s_dec, false, DEC);
	else
		fcu_pt_setup(sm, a, d, s_dec, true, DEC);
	const float g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
	const float r6 = FOS_DIV(1.0f, 6.0f);
	const uint32_t svt0 = (uint32_t)__cvta_generic_to_shared(sm.svt);
	const uint32_t tile0 = (uint32_t)__cvta_generic_to_shared(tile);
	const int S = fcu_ring<T>::depth(stages);
	const int rl = (wp / (4 / W)) * RW + lane / W; /* this thread's logical row in the tile */
	const int bl = (wp % (4 / W)) * W + lane % W;   /* and its block (0..3) */
	const int bpr = cols / 16;
	/* tile i: its first logical row r0 and column c0 (stored order, c0 major) */
	auto tile_at = [&](int i, int &r0, int &c0) {
		const int ti = rev ? ntiles - 1 - i : i;
		const int ct = ti / nrt;
		r0 = (ti - ct * nrt) * QTT_R;
		c0 = ct * QTT_C;
	};
	auto issue = [&](int i, int buf) { /* tile i into ring buffer buf (no commit) */
		int r0, c0;
		tile_at(i, r0, c0);
#pragma unroll
		for (int h = 0; h < NCH; h++) {
			const int q = t + QT * h, j = q / CPR, k = q % CPR;
			const int c = c0 + j, r = r0 + k * EPC;
			const bool on = c < cols && r < rows;
			fcu_cp_async16(tile0 + (uint32_t)((buf * TSZ + j * QTT_R + (j / 16) * RW + k * EPC) * sizeof(T)),
				       on ? (const void *)(x + (int64_t)c * rows + r) : (const void *)x, on);
		}
	};
	const int G = gridDim.x;
	int i = blockIdx.x;
	if (vec)
		for (int s = 0; s < S - 1; s++) { /* prologue: the CTA's first S - 1 tiles */
			if (i + s * G < ntiles)
				issue(i + s * G, s);
			fcu_cp_commit();
		}
	for (int buf = 0; i < ntiles; i += G, buf = buf + 1 == S ? 0 : buf + 1) {
		int r0, c0;
		tile_at(i, r0, c0);
		T *tb = tile + buf * TSZ;
		if (vec) {
			fcu_cp_wait_ring(S);
			__syncthreads(); /* tile i landed; every thread is done with the previous tile's buffer */
			const int ahead = i + (S - 1) * G;
			if (ahead < ntiles)
				issue(ahead, buf == 0 ? S - 1 : buf - 1);
			fcu_cp_commit();
		} else { /* element loads, consecutive threads along a stored row */
			__syncthreads();
			for (int e = t; e < QTT_C * QTT_R; e += QT) {
				const int j = e / QTT_R, k = e % QTT_R;
				const int c = c0 + j, r = r0 + k;
				tb[j * QTT_R + (j / 16) * RW + k] = (c < cols && r < rows) ? x[(int64_t)c * rows + r] : T(0);
			}
			__syncthreads();
		}
		/* gather this thread's block: logical (rl, 16 bl .. 16 bl + 15) = stored rows 16 bl + jj */
		fcu_raw<T> raw;
		const T *src = tb + (16 * bl) * QTT_R + bl * RW + rl;
		uint32_t *w = reinterpret_cast<uint32_t *>(raw.v);
		if (sizeof(T) == 2) {
			const uint16_t *s16 = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
			for (int jj = 0; jj < 8; jj++)
				w[jj] = (uint32_t)s16[(2 * jj) * QTT_R] | ((uint32_t)s16[(2 * jj + 1) * QTT_R] << 16);
		} else {
			const uint32_t *s32 = reinterpret_cast<const uint32_t *>(src);
#pragma unroll
			for (int jj = 0; jj < 16; jj++)
				w[jj] = s32[jj * QTT_R];
		}
		uint32_t sf;
		uint64_t cw;
		if (MODE == FCU_QT_GRAD)
			cw = fcu_blk_grad<T>(raw, g, hw, sm, &sf);
		else if (MODE == FCU_QT_46_TILE)
			cw = fcu_blk46_tile<T, MSE, W>(raw, s_enc, r6, hw, sm, svt0, &sf); /* row-groups W lanes apart */
		else
			cw = fcu_blk46<T, MSE>(raw, s_enc, r6, hw, sm, svt0, &sf);
		const int r = r0 + rl, b = c0 / 16 + bl;
		if (r < rows && b < bpr)
			fcu_store_pt<DEC>((int64_t)r * bpr + b, cw, sf, codes, scales, dec, sm.sdec);
	}
}

/* ---- rowwise, pipelined (per-tensor 1x16, the gradient quantizer and 4/6: variants) ---------- */

/* The rowwise counterpart of k_quant_t: the work items of the ring are chunks of QT consecutive
 * 1x16 blocks (8 KiB of bf16, 16 KiB of f32), copied whole (consecutive threads on consecutive 16
 * bytes; blocks past nblk zero-filled and never stored). Thread t works on the chunk's block t,
 * read back with 16-byte shared loads, through the same per-block functions as every other kernel
 * (fcu_blk_grad, fcu_blk46). Up to 3 chunks (24 KiB) in flight per CTA, where k_grad_1x16 and
 * k_q46_pt hold two blocks per thread (16 KiB per CTA) in registers. rev: chunks from the end.
 * Measured on the H200 (2026-11-29): 5 to 10 us slower than k_grad_1x16 and 7 us slower than
 * k_q46_pt at 8192x5120, since those kernels are bound by instruction issue (ncu: DRAM at 40-46% of
 * peak, SM at 70-74%), so it is only a variant (bits 8 and 6). */
template <typename T, int MODE, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT, MODE == FCU_QT_GRAD ? 4 : 3) k_quant_rows(const T *__restrict__ x, int nblk,
						const float *__restrict__ amax, float *__restrict__ amax_out, float d,
						int hw, int rev, int stages, uint8_t *__restrict__ codes,
						uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	constexpr int P = (int)sizeof(T); /* 16-byte pieces per block: 2 (bf16), 4 (f32) */
	constexpr int CU = QT * P;	  /* 16-byte pieces per chunk (one ring buffer) */
	constexpr int NS = fcu_ring<T>::NS;
	static_assert(MODE == FCU_QT_GRAD || MODE == FCU_QT_46, "1x16 modes only (no cross-lane tiles)");
	__shared__ fcu_pt_smem sm;
	__shared__ uint4 ring[NS * CU];
	const int t = threadIdx.x;
	const float a = amax[0];
	if (amax_out && blockIdx.x == 0 && t == 0)
		amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(a, MODE == FCU_QT_GRAD ? 2688.0f : d), s_dec = FOS_DIV(1.0f, s_enc);
	if (MODE == FCU_QT_GRAD)
		fcu_pt_setup(sm, a, 2688.0f, s_dec, false, DEC);
	else
		fcu_pt_setup(sm, a, d, s_dec, true, DEC);
	const float g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
	const float r6 = FOS_DIV(1.0f, 6.0f);
	const uint32_t svt0 = (uint32_t)__cvta_generic_to_shared(sm.svt);
	const uint32_t ring0 = (uint32_t)__cvta_generic_to_shared(ring);
	const int S = fcu_ring<T>::depth(stages);
	const int nch = nblk / QT + (nblk % QT != 0);
	const int64_t npieces = (int64_t)nblk * P;
	const uint4 *xv = reinterpret_cast<const uint4 *>(x);
	auto issue = [&](int c, int buf) { /* chunk c into ring buffer buf (no commit) */
		const int64_t p0 = (int64_t)(rev ? nch - 1 - c : c) * CU;
#pragma unroll
		for (int h = 0; h < P; h++) {
			const int q = t + QT * h; /* piece q of the chunk: block q / P, its 16 bytes number q % P */
			const bool on = p0 + q < npieces;
			fcu_cp_async16(ring0 + (uint32_t)((buf * CU + q) * 16), on ? (const void *)(xv + p0 + q) : (const void *)x,
				       on);
		}
	};
	const int G = gridDim.x;
	int c = blockIdx.x;
	for (int s = 0; s < S - 1; s++) { /* prologue: the CTA's first S - 1 chunks */
		if (c + s * G < nch)
			issue(c + s * G, s);
		fcu_cp_commit();
	}
	for (int buf = 0; c < nch; c += G, buf = buf + 1 == S ? 0 : buf + 1) {
		fcu_cp_wait_ring(S);
		__syncthreads(); /* chunk c landed; every thread is done with the previous chunk's buffer */
		const int ahead = c + (S - 1) * G;
		if (ahead < nch)
			issue(ahead, buf == 0 ? S - 1 : buf - 1);
		fcu_cp_commit();
		const int64_t b = (int64_t)(rev ? nch - 1 - c : c) * QT + t;
		if (b < nblk) {
			fcu_raw<T> raw;
			const uint4 *sp = ring + buf * CU + t * P;
#pragma unroll
			for (int h = 0; h < P; h++)
				raw.v[h] = sp[h];
			uint32_t sf;
			uint64_t cw;
			if (MODE == FCU_QT_GRAD)
				cw = fcu_blk_grad<T>(raw, g, hw, sm, &sf);
			else
				cw = fcu_blk46<T, MSE>(raw, s_enc, r6, hw, sm, svt0, &sf);
			fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
		}
	}
}

/* ---- dequantize / decode --------------------------------------------------------------------- */

/* OUT: 0 bf16 dequantize, 1 fp32 dequantize, 2 bf16 decode (value * scale, no amax). Per tensor
 * (and decode) the 16 outputs of each of the 256 scale bytes are tabled per CTA; row-scaled
 * computes them. */
template <int OUT>
__global__ void __launch_bounds__(QT) k_dequant(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
						const float *__restrict__ amax, int row_scaled, int nblk, int bpr,
						float d, void *__restrict__ out)
{
	__shared__ uint32_t tab[256 * 16]; /* every scale byte, sign bit included (no OOB on 0x80..0xFF) */
	const float rd = FOS_DIV(1.0f, d);
	const bool tabled = OUT == 2 || !row_scaled;
	if (tabled) {
		const float a = OUT == 2 ? 0.0f : amax[0];
		for (int i = threadIdx.x; i < 256 * 16; i += QT) {
			const uint32_t sf = (uint32_t)i >> 4;
			const float dec = OUT == 2 ? fos_e4m3_to_f32(sf) : FOS_MUL(FOS_MUL(fos_e4m3_to_f32(sf), a), rd);
			const float v = FOS_MUL(fos_e2m1_value((uint32_t)i & 15u), dec);
			tab[i] = OUT == 1 ? __float_as_uint(v) : fos_f32_to_bf16(v);
		}
		__syncthreads();
	}
	for (int b = blockIdx.x * QT + threadIdx.x; b < nblk; b += gridDim.x * QT) {
		const uint64_t cw = reinterpret_cast<const uint64_t *>(codes)[b];
		const uint32_t sf = scales[b];
		uint32_t v[16];
		if (tabled) {
			const uint32_t *row = tab + sf * 16;
#pragma unroll
			for (int j = 0; j < 16; j++)
				v[j] = row[(uint32_t)(cw >> (4 * j)) & 15u];
		} else {
			const float a = amax[b / bpr];
			const float dec = FOS_MUL(FOS_MUL(fos_e4m3_to_f32(sf), a), rd); /* fos_dec_scale */
#pragma unroll
			for (int j = 0; j < 16; j++) {
				const float f = FOS_MUL(fos_e2m1_value((uint32_t)(cw >> (4 * j)) & 15u), dec);
				v[j] = OUT == 1 ? __float_as_uint(f) : fos_f32_to_bf16(f);
			}
		}
		if (OUT == 1) {
			uint4 *o = reinterpret_cast<uint4 *>(static_cast<float *>(out) + 16 * (int64_t)b);
#pragma unroll
			for (int j = 0; j < 4; j++)
				o[j] = make_uint4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
		} else {
			uint32_t w[8];
#pragma unroll
			for (int j = 0; j < 8; j++)
				w[j] = v[2 * j] | (v[2 * j + 1] << 16);
			uint4 *o = reinterpret_cast<uint4 *>(static_cast<uint16_t *>(out) + 16 * (int64_t)b);
			o[0] = make_uint4(w[0], w[1], w[2], w[3]);
			o[1] = make_uint4(w[4], w[5], w[6], w[7]);
		}
	}
}

/* ---- amax ------------------------------------------------------------------------------------ */

__device__ __forceinline__ float fcu_absmax_bf16(float m, uint32_t h)
{
	return fmaxf(m, fabsf(__uint_as_float(h << 16))); /* = fos_absmax: fmaxf drops NaN */
}
/* f32 input: the amax is of the value cast to bf16 (like the CPU). */
__device__ __forceinline__ float fcu_absmax_f32(float m, float v)
{
	return fos_absmax(m, fos_bf16_to_f32(fos_f32_to_bf16(v)));
}

__device__ __forceinline__ float fcu_absmax_vec(float m, uint4 v, int is_f32)
{
	const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (is_f32) {
			m = fcu_absmax_f32(m, __uint_as_float(w[i]));
		} else {
			m = fcu_absmax_bf16(m, w[i] & 0xFFFFu);
			m = fcu_absmax_bf16(m, w[i] >> 16);
		}
	}
	return m;
}

/* Block-wide max of nonnegative floats (NaN already dropped); result valid in thread 0. */
__device__ __forceinline__ float fcu_block_max(float m)
{
	__shared__ float part[32];
#pragma unroll
	for (int o = 16; o >= 1; o >>= 1)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x >> 5] = m;
	__syncthreads();
	if (threadIdx.x < 32) {
		m = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
#pragma unroll
		for (int o = 16; o >= 1; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	}
	return m;
}

/* Per tensor: max over n elements; out (zeroed first) gets an atomic max of the bit pattern
 * (nonnegative floats order like their bits), which is exact and order-free. vec: 16-byte loads. */
template <bool F32>
__global__ void __launch_bounds__(QT) k_amax_tensor(const void *__restrict__ x, int64_t n, int vec,
						    unsigned int *__restrict__ out)
{
	const int64_t tid = (int64_t)blockIdx.x * QT + threadIdx.x, stride = (int64_t)gridDim.x * QT;
	float m0 = 0.0f, m1 = 0.0f;
	const int per = F32 ? 4 : 8;
	int64_t done = 0;
	if (vec) {
		const uint4 *p = static_cast<const uint4 *>(x);
		const int64_t nv = n / per;
		int64_t i = tid;
		for (; i + 3 * stride < nv; i += 4 * stride) { /* four 16-byte loads in flight */
			const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], e = p[i + 3 * stride];
			m0 = fcu_absmax_vec(m0, a, F32);
			m1 = fcu_absmax_vec(m1, b, F32);
			m0 = fcu_absmax_vec(m0, c, F32);
			m1 = fcu_absmax_vec(m1, e, F32);
		}
		for (; i < nv; i += stride)
			m0 = fcu_absmax_vec(m0, p[i], F32);
		done = nv * per;
	}
	for (int64_t i = done + tid; i < n; i += stride) {
		if (F32)
			m0 = fcu_absmax_f32(m0, static_cast<const float *>(x)[i]);
		else
			m0 = fcu_absmax_bf16(m0, static_cast<const uint16_t *>(x)[i]);
	}
	float m = fcu_block_max(fmaxf(m0, m1));
	if (threadIdx.x == 0 && m > 0.0f)
		atomicMax(out, __float_as_uint(m));
}

/* Per row: one block per row. */
template <bool F32>
__global__ void __launch_bounds__(QT) k_amax_rows(const void *__restrict__ x, int64_t cols, int vec,
						  float *__restrict__ out)
{
	const int64_t r = blockIdx.x;
	float m = 0.0f;
	const int per = F32 ? 4 : 8;
	int64_t done = 0;
	if (vec) {
		const uint4 *p = reinterpret_cast<const uint4 *>(static_cast<const char *>(x) + r * cols * (F32 ? 4 : 2));
		const int64_t nv = cols / per;
		for (int64_t i = threadIdx.x; i < nv; i += QT)
			m = fcu_absmax_vec(m, p[i], F32);
		done = nv * per;
	}
	for (int64_t i = done + threadIdx.x; i < cols; i += QT) {
		if (F32)
			m = fcu_absmax_f32(m, static_cast<const float *>(x)[r * cols + i]);
		else
			m = fcu_absmax_bf16(m, static_cast<const uint16_t *>(x)[r * cols + i]);
	}
	m = fcu_block_max(m);
	if (threadIdx.x == 0)
		out[r] = m;
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* Generic: 32x32 tiles, block (32, 8). dst (cols, rows) = src (rows, cols)^T. */
template <typename T>
__global__ void k_transpose(const T *__restrict__ src, T *__restrict__ dst, int64_t rows, int64_t cols)
{
	__shared__ T tile[32][33];
	const int64_t c0 = (int64_t)blockIdx.x * 32, r0 = (int64_t)blockIdx.y * 32;
	for (int j = threadIdx.y; j < 32; j += 8) {
		int64_t r = r0 + j, c = c0 + threadIdx.x;
		if (r < rows && c < cols)
			tile[j][threadIdx.x] = src[r * cols + c];
	}
	__syncthreads();
	for (int j = threadIdx.y; j < 32; j += 8) {
		int64_t c = c0 + j, r = r0 + threadIdx.x; /* dst row c, column r */
		if (c < cols && r < rows)
			dst[c * rows + r] = tile[threadIdx.x][j];
	}
}

/* 2-byte elements, even rows and cols: 64x64 tiles moved as 4-byte pairs, block (32, 8). */
__global__ void k_transpose16(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, int64_t rows,
			      int64_t cols)
{
	__shared__ uint16_t tile[64][65];
	const int64_t c0 = (int64_t)blockIdx.x * 64, r0 = (int64_t)blockIdx.y * 64;
	const int tx = threadIdx.x, ty = threadIdx.y;
	for (int j = ty; j < 64; j += 8) {
		int64_t r = r0 + j, c = c0 + 2 * tx;
		if (r < rows && c < cols) {
			uint32_t w = *reinterpret_cast<const uint32_t *>(src + r * cols + c);
			tile[j][2 * tx] = (uint16_t)w;
			tile[j][2 * tx + 1] = (uint16_t)(w >> 16);
		}
	}
	__syncthreads();
	for (int j = ty; j < 64; j += 8) {
		int64_t c = c0 + j, r = r0 + 2 * tx; /* dst row c, columns r, r + 1 */
		if (c < cols && r < rows) {
			uint32_t w = tile[2 * tx][j] | ((uint32_t)tile[2 * tx + 1][j] << 16);
			*reinterpret_cast<uint32_t *>(dst + c * rows + r) = w;
		}
	}
}

/* 2-byte elements, rows and cols multiples of 8, 16-byte aligned: 64x64 tiles, 16-byte loads and
 * stores, 256 threads. The tile's row stride of 65 elements keeps both phases' shared accesses
 * free of bank conflicts. */
__global__ void __launch_bounds__(256) k_transpose16v(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst,
						      int64_t rows, int64_t cols)
{
	__shared__ uint16_t tile[64][65];
	const int64_t c0 = (int64_t)blockIdx.x * 64, r0 = (int64_t)blockIdx.y * 64;
	const int t = threadIdx.x, q = t / 8, k = t % 8;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int lr = q + 32 * h;
		const int64_t r = r0 + lr, c = c0 + 8 * k;
		if (r < rows && c < cols) {
			const uint4 v = *reinterpret_cast<const uint4 *>(src + r * cols + c);
			const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
			for (int e = 0; e < 4; e++) {
				tile[lr][8 * k + 2 * e] = (uint16_t)w[e];
				tile[lr][8 * k + 2 * e + 1] = (uint16_t)(w[e] >> 16);
			}
		}
	}
	__syncthreads();
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int oc = q + 32 * h;
		const int64_t c = c0 + oc, r = r0 + 8 * k; /* dst row c, columns r .. r + 7 */
		if (c < cols && r < rows) {
			uint32_t w[4];
#pragma unroll
			for (int e = 0; e < 4; e++)
				w[e] = tile[8 * k + 2 * e][oc] | ((uint32_t)tile[8 * k + 2 * e + 1][oc] << 16);
			*reinterpret_cast<uint4 *>(dst + c * rows + r) = make_uint4(w[0], w[1], w[2], w[3]);
		}
	}
}

/* ---- host side ------------------------------------------------------------------------------- */

static int fcu_aligned(const void *p, size_t a)
{
	return ((uintptr_t)p % a) == 0;
}

/* Resident blocks per SM of each kernel, asked once per kernel (keyed by its address). max_smem:
 * first ask for the largest shared-memory carveout (the cp.async ring kernels, 3 or 4 CTAs of
 * about 42 KiB per SM; a preference, so a refusal is ignored). */
static int fcu_occupancy(const void *kernel, int bs, int max_smem = 0)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static const void *keys[256];
	static int vals[256], n;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < n; i++)
		if (keys[i] == kernel) {
			int v = vals[i];
			pthread_mutex_unlock(&mu);
			return v;
		}
	int v = 0;
	if (max_smem && cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
					     (int)cudaSharedmemCarveoutMaxShared) != cudaSuccess)
		cudaGetLastError();
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, bs, 0) != cudaSuccess || v < 1) {
		cudaGetLastError();
		v = 2;
	}
	if (n < 256) {
		keys[n] = kernel;
		vals[n++] = v;
	}
	pthread_mutex_unlock(&mu);
	return v;
}

template <class K>
static unsigned fcu_grid_for(fos_backend *be, K kernel, int64_t items, int bs)
{
	return fcu_grid(be, items, bs, fcu_occupancy((const void *)kernel, bs));
}

int fcu_amax(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, int per_row, float *out,
	     fos_err *err)
{
	if (rows <= 0 || cols <= 0)
		return fos_seterr(err, FOS_EINVAL, "amax of an empty tensor (%lld, %lld)", (long long)rows,
				  (long long)cols);
	if (dtype != FOS_BF16 && dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown input dtype %d", dtype);
	if (per_row && rows > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "amax: %lld rows is too many", (long long)rows);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	cudaStream_t st = fcu(be)->st;
	const int f32 = dtype == FOS_F32;
	const size_t es = f32 ? 4 : 2;
	__atomic_store_n(&fcu(be)->amax_x, x, __ATOMIC_RELAXED); /* a walk-direction hint, see fcu_qargs */
	if (per_row) {
		int vec = fcu_aligned(x, 16) && (cols * es) % 16 == 0;
		if (f32)
			k_amax_rows<true><<<(unsigned)rows, QT, 0, st>>>(x, cols, vec, out);
		else
			k_amax_rows<false><<<(unsigned)rows, QT, 0, st>>>(x, cols, vec, out);
		return fcu_launched(err, "amax (per row) kernel launch");
	}
	if ((rc = fcu_check(cudaMemsetAsync(out, 0, sizeof(float), st), err, "cudaMemsetAsync (amax)")))
		return rc;
	const int64_t n = rows * cols;
	int vec = fcu_aligned(x, 16);
	int64_t items = (vec ? n / (f32 ? 4 : 8) : n) / 4 + 1;
	if (f32)
		k_amax_tensor<true><<<fcu_grid_for(be, k_amax_tensor<true>, items, QT), QT, 0, st>>>(
			x, n, vec, reinterpret_cast<unsigned int *>(out));
	else
		k_amax_tensor<false><<<fcu_grid_for(be, k_amax_tensor<false>, items, QT), QT, 0, st>>>(
			x, n, vec, reinterpret_cast<unsigned int *>(out));
	return fcu_launched(err, "amax kernel launch");
}

int fcu_transpose(fos_backend *be, const void *src, void *dst, int64_t rows, int64_t cols, size_t es, fos_err *err)
{
	if (rows <= 0 || cols <= 0 || (es != 1 && es != 2 && es != 4))
		return fos_seterr(err, FOS_EINVAL, "transpose of (%lld, %lld) x %zu bytes", (long long)rows,
				  (long long)cols, es);
	if ((rows + 31) / 32 > 65535 || (cols + 31) / 32 > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "transpose of (%lld, %lld): too many rows", (long long)rows,
				  (long long)cols);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	cudaStream_t st = fcu(be)->st;
	dim3 bs(32, 8);
	if (fcu(be)->variant & 8 && es == 2 && rows % 8 == 0 && cols % 8 == 0 && fcu_aligned(src, 16) &&
	    fcu_aligned(dst, 16)) { /* variant bit 3: the 16-byte kernel (slower on the H200) */
		dim3 g((unsigned)((cols + 63) / 64), (unsigned)((rows + 63) / 64));
		k_transpose16v<<<g, 256, 0, st>>>(static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), rows,
						   cols);
		return fcu_launched(err, "transpose kernel launch");
	}
	if (es == 2 && rows % 2 == 0 && cols % 2 == 0 && fcu_aligned(src, 4) && fcu_aligned(dst, 4)) {
		dim3 g((unsigned)((cols + 63) / 64), (unsigned)((rows + 63) / 64));
		k_transpose16<<<g, bs, 0, st>>>(static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), rows,
						 cols);
		return fcu_launched(err, "transpose kernel launch");
	}
	dim3 g((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32));
	if (es == 1)
		k_transpose<uint8_t><<<g, bs, 0, st>>>(static_cast<const uint8_t *>(src), static_cast<uint8_t *>(dst),
						       rows, cols);
	else if (es == 2)
		k_transpose<uint16_t><<<g, bs, 0, st>>>(static_cast<const uint16_t *>(src),
							static_cast<uint16_t *>(dst), rows, cols);
	else
		k_transpose<uint32_t><<<g, bs, 0, st>>>(static_cast<const uint32_t *>(src),
							static_cast<uint32_t *>(dst), rows, cols);
	return fcu_launched(err, "transpose kernel launch");
}

/* What every quantize launch takes besides its shape: where the kernel reads the amax (q->amax, or
 * the caller's per-tensor amax_in, which the kernel then copies to amax_out = q->amax: no separate
 * copy on the stream), and the variant's choices (cuda_backend.h, fos_cuda_set_variant). */
struct fcu_qa {
	const float *amax;
	float *amax_out;
	int hw;       /* hardware e4m3 conversion */
	int rev;      /* walk from the end */
	int generic;  /* 4/6 per tensor: the per-thread-table kernel */
	int stages;   /* cp.async ring depth */
	int rows46;    /* 4/6 per tensor 1x16: the ring kernel k_quant_rows instead of k_q46_pt */
	int ring_grad; /* rowwise gradient: the ring kernel k_quant_rows instead of k_grad_1x16 */
	int one_cta;  /* one CTA per launch (tests: every ring buffer reused many times) */
};

static fcu_qa fcu_qargs(fos_backend *be, const void *x, int amax_given, const float *amax, float *amax_out)
{
	struct fcu_impl *im = fcu(be);
	const int var = im->variant;
	fcu_qa A;
	A.amax = amax;
	A.amax_out = amax_out;
	A.hw = !(var & 2);
	/* From the end when the last amax pass read these bytes (computed here, or the caller's
	 * amax(x) just before, as the quantized backward does): its tail is still in L2. Only a
	 * direction: every walk gives the same bytes. */
	A.rev = !(var & 4) && (!amax_given || x == __atomic_load_n(&im->amax_x, __ATOMIC_RELAXED));
	A.generic = var & 1;
	A.stages = (var & 16) ? 2 : ((var & 32) ? 3 : 4);
	A.rows46 = (var >> 6) & 1;
	A.ring_grad = (var >> 8) & 1;
	A.one_cta = (var >> 7) & 1;
	return A;
}

/* Grid of a quantize launch over items (threads' worth of work): persistent, sized by occupancy;
 * ring: the kernel is a cp.async ring kernel (largest shared-memory carveout). */
template <class K>
static unsigned fcu_qgrid(fos_backend *be, K kernel, int64_t items, const fcu_qa &A, int ring)
{
	const int occ = fcu_occupancy((const void *)kernel, QT, ring);
	return A.one_cta ? 1u : fcu_grid(be, items, QT, occ);
}

/* 4/6 1x16: per tensor the tabled kernel (variant bit 0: the generic one, as a cross-check; bit 6:
 * the ring kernel, measured 7 us slower on 8192x5120), row-scaled the generic one with per-thread
 * tables. */
template <typename T, bool MSE, bool DEC>
static void fcu_q46_1x16_launch(fos_backend *be, const void *x, int nblk, int bpr, const fos_qcfg *cfg,
				const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	const float d = fos_bound_d(cfg->bound);
	cudaStream_t st = fcu(be)->st;
	const T *xt = static_cast<const T *>(x);
	if (cfg->row_scaled) {
		auto k = k_q46_1x16<T, true, MSE, DEC, false>;
		k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, bpr, A.amax, 0, d, A.hw, 0, q->codes, q->scales, dec);
	} else if (A.generic) {
		auto k = k_q46_1x16<T, false, MSE, DEC, false>;
		k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, bpr, A.amax, A.amax_out, d, A.hw, A.rev, q->codes,
							       q->scales, dec);
	} else if (A.rows46) {
		auto k = k_quant_rows<T, FCU_QT_46, MSE, DEC>;
		k<<<fcu_qgrid(be, k, nblk, A, 1), QT, 0, st>>>(xt, nblk, A.amax, A.amax_out, d, A.hw, A.rev, A.stages,
							       q->codes, q->scales, dec);
	} else {
		auto k = k_q46_pt<T, MSE, DEC>;
		k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, A.amax, A.amax_out, d, A.hw, A.rev, q->codes,
							       q->scales, dec);
	}
}

template <typename T, bool MSE, bool DEC>
static void fcu_q46_16x16_launch(fos_backend *be, const void *x, int ntiles, int bpr, const fos_qcfg *cfg,
				 const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	auto k = k_q46_16x16<T, MSE, DEC>;
	k<<<fcu_qgrid(be, k, (int64_t)ntiles * 16, A, 0), QT, 0, fcu(be)->st>>>(
		static_cast<const T *>(x), ntiles, bpr, A.amax, A.amax_out, fos_bound_d(cfg->bound), A.hw, q->codes,
		q->scales, dec);
}

/* The rowwise gradient quantizer: k_grad_1x16 (variant bit 8: the ring kernel, which measured
 * 5 to 10 us slower on 8192x4096 to 8192x8192 bf16 on the H200: the kernel is bound by instruction
 * issue, not by bytes in flight, and the ring adds a shared-memory round trip and a barrier). */
template <typename T, bool DEC>
static void fcu_grad_launch(fos_backend *be, const void *x, int nblk, const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	cudaStream_t st = fcu(be)->st;
	const T *xt = static_cast<const T *>(x);
	if (!A.ring_grad) {
		auto k = k_grad_1x16<T, DEC>;
		k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, A.amax, A.amax_out, A.hw, A.rev, q->codes, q->scales,
							       dec);
	} else {
		auto k = k_quant_rows<T, FCU_QT_GRAD, false, DEC>;
		k<<<fcu_qgrid(be, k, nblk, A, 1), QT, 0, st>>>(xt, nblk, A.amax, A.amax_out, 2688.0f, A.hw, A.rev, A.stages,
							       q->codes, q->scales, dec);
	}
}

template <typename T, bool MSE, bool DEC>
static void fcu_quant_typed(fos_backend *be, const void *x, int64_t rows, int nblk, int bpr, const fos_qcfg *cfg,
			    const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	if (cfg->recipe == FOS_RECIPE_NVFP4)
		fcu_grad_launch<T, DEC>(be, x, nblk, A, q, dec);
	else if (cfg->block == FOS_BLOCK_16X16)
		fcu_q46_16x16_launch<T, MSE, DEC>(be, x, (int)(rows / 16) * bpr, bpr, cfg, A, q, dec);
	else
		fcu_q46_1x16_launch<T, MSE, DEC>(be, x, nblk, bpr, cfg, A, q, dec);
}

template <typename T>
static void fcu_quant_any(fos_backend *be, const void *x, int64_t rows, int nblk, int bpr, const fos_qcfg *cfg,
			  const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	const bool mse = cfg->err_mode == FOS_ERR_MSE && cfg->recipe != FOS_RECIPE_NVFP4;
	if (mse && dec)
		fcu_quant_typed<T, true, true>(be, x, rows, nblk, bpr, cfg, A, q, dec);
	else if (mse)
		fcu_quant_typed<T, true, false>(be, x, rows, nblk, bpr, cfg, A, q, dec);
	else if (dec)
		fcu_quant_typed<T, false, true>(be, x, rows, nblk, bpr, cfg, A, q, dec);
	else
		fcu_quant_typed<T, false, false>(be, x, rows, nblk, bpr, cfg, A, q, dec);
}

int fcu_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		 const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	int rc = fos_qcfg_check(cfg, rows, cols, err);
	if (rc)
		return rc;
	if (dtype != FOS_BF16 && dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown input dtype %d", dtype);
	if (rows * cols / 16 > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "quantize of (%lld, %lld): more than 2^31 blocks", (long long)rows,
				  (long long)cols);
	if (!fcu_aligned(x, 16) || !fcu_aligned(q->codes, 8) || (decoded && !fcu_aligned(decoded, 16)))
		return fos_seterr(err, FOS_EINVAL, "quantize: input, codes or decoded pointer not 16/8/16-byte aligned");
	if ((rc = fcu_enter(be, err)))
		return rc;
	const int64_t na = cfg->row_scaled ? rows : 1;
	const float *asrc = q->amax; /* where the kernel reads the amax */
	float *adst = 0;	     /* where it copies a given per-tensor amax */
	if (amax_in && !cfg->row_scaled) {
		if (amax_in != q->amax) {
			asrc = amax_in;
			adst = q->amax;
		}
	} else if (amax_in) {
		if (amax_in != q->amax &&
		    (rc = fcu_check(cudaMemcpyAsync(q->amax, amax_in, (size_t)na * sizeof(float), cudaMemcpyDeviceToDevice,
						    fcu(be)->st),
				    err, "cudaMemcpyAsync (amax)")))
			return rc;
	} else if ((rc = fcu_amax(be, x, dtype, rows, cols, cfg->row_scaled, q->amax, err))) {
		return rc;
	}
	q->rows = rows;
	q->cols = cols;
	q->bound = cfg->bound;
	q->row_scaled = cfg->row_scaled;
	const int nblk = (int)(rows * cols / 16), bpr = (int)(cols / 16);
	const fcu_qa A = fcu_qargs(be, x, amax_in != 0, asrc, adst);
	if (dtype == FOS_F32)
		fcu_quant_any<float>(be, x, rows, nblk, bpr, cfg, A, q, decoded);
	else
		fcu_quant_any<uint16_t>(be, x, rows, nblk, bpr, cfg, A, q, decoded);
	return fcu_launched(err, "quantize kernel launch");
}

/* quantize_t: mode and template dispatch of k_quant_t. */
template <typename T, int MODE, bool MSE, bool DEC>
static void fcu_qt_launch(fos_backend *be, const void *x, int rows, int cols, float d, const fcu_qa &A, int vec,
			  fos_qtensor *q, uint16_t *dec)
{
	const int nrt = (rows + QTT_R - 1) / QTT_R, nct = (cols + QTT_C - 1) / QTT_C;
	const int ntiles = nrt * nct;
	auto k = k_quant_t<T, MODE, MSE, DEC>;
	k<<<fcu_qgrid(be, k, (int64_t)ntiles * QT, A, 1), QT, 0, fcu(be)->st>>>(
		static_cast<const T *>(x), rows, cols, nrt, ntiles, A.amax, A.amax_out, d, A.hw, A.rev, vec, A.stages,
		q->codes, q->scales, dec);
}

template <typename T, bool MSE, bool DEC>
static void fcu_qt_mode(fos_backend *be, const void *x, int rows, int cols, const fos_qcfg *cfg, const fcu_qa &A,
			int vec, fos_qtensor *q, uint16_t *dec)
{
	const float d = fos_bound_d(cfg->bound);
	if (cfg->recipe == FOS_RECIPE_NVFP4)
		fcu_qt_launch<T, FCU_QT_GRAD, false, DEC>(be, x, rows, cols, d, A, vec, q, dec);
	else if (cfg->block == FOS_BLOCK_16X16)
		fcu_qt_launch<T, FCU_QT_46_TILE, MSE, DEC>(be, x, rows, cols, d, A, vec, q, dec);
	else
		fcu_qt_launch<T, FCU_QT_46, MSE, DEC>(be, x, rows, cols, d, A, vec, q, dec);
}

template <typename T>
static void fcu_qt_any(fos_backend *be, const void *x, int rows, int cols, const fos_qcfg *cfg, const fcu_qa &A,
		       int vec, fos_qtensor *q, uint16_t *dec)
{
	const bool mse = cfg->err_mode == FOS_ERR_MSE && cfg->recipe != FOS_RECIPE_NVFP4;
	if (mse && dec)
		fcu_qt_mode<T, true, true>(be, x, rows, cols, cfg, A, vec, q, dec);
	else if (mse)
		fcu_qt_mode<T, true, false>(be, x, rows, cols, cfg, A, vec, q, dec);
	else if (dec)
		fcu_qt_mode<T, false, true>(be, x, rows, cols, cfg, A, vec, q, dec);
	else
		fcu_qt_mode<T, false, false>(be, x, rows, cols, cfg, A, vec, q, dec);
}

/* x is stored (cols, rows); the outputs are those of fcu_quantize on the (rows, cols) transpose. */
int fcu_quantize_t(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		   const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	int rc = fos_qcfg_check(cfg, rows, cols, err);
	if (rc)
		return rc;
	if (dtype != FOS_BF16 && dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown input dtype %d", dtype);
	if (cfg->row_scaled)
		return fos_seterr(err, FOS_EINVAL, "quantize of a transposed input is per-tensor only, not row-scaled");
	if (rows * cols / 16 > 0x7FFFFFFF || rows > 0x7FFFFFFF - QTT_R || cols > 0x7FFFFFFF - QTT_C)
		return fos_seterr(err, FOS_EINVAL, "quantize of (%lld, %lld): more than 2^31 blocks or rows", (long long)rows,
				  (long long)cols);
	if (!fcu_aligned(q->codes, 8) || (decoded && !fcu_aligned(decoded, 16)))
		return fos_seterr(err, FOS_EINVAL, "quantize: codes or decoded pointer not 8/16-byte aligned");
	if ((rc = fcu_enter(be, err)))
		return rc;
	const float *asrc = q->amax; /* where the kernel reads the amax */
	float *adst = 0;	     /* where it copies a given amax */
	if (amax_in) {
		if (amax_in != q->amax) {
			asrc = amax_in;
			adst = q->amax;
		}
	} else if ((rc = fcu_amax(be, x, dtype, cols, rows, 0, q->amax, err))) { /* the stored tensor: same values */
		return rc;
	}
	q->rows = rows;
	q->cols = cols;
	q->bound = cfg->bound;
	q->row_scaled = 0;
	const size_t es = dtype == FOS_F32 ? 4 : 2;
	const int vec = fcu_aligned(x, 16) && ((size_t)rows * es) % 16 == 0;
	const fcu_qa A = fcu_qargs(be, x, amax_in != 0, asrc, adst);
	if (dtype == FOS_F32)
		fcu_qt_any<float>(be, x, (int)rows, (int)cols, cfg, A, vec, q, decoded);
	else
		fcu_qt_any<uint16_t>(be, x, (int)rows, (int)cols, cfg, A, vec, q, decoded);
	return fcu_launched(err, "quantize_t kernel launch");
}

static int fcu_check_q(const fos_qtensor *q, fos_err *err)
{
	if (q->rows <= 0 || q->cols <= 0 || q->cols % 16)
		return fos_seterr(err, FOS_EINVAL,
				  "quantized shape (%lld, %lld): columns must be a positive multiple of 16",
				  (long long)q->rows, (long long)q->cols);
	if (q->bound != 256 && q->bound != 448)
		return fos_seterr(err, FOS_EINVAL, "bound %d is not 256 or 448", q->bound);
	if (q->rows * q->cols / 16 > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "quantized shape (%lld, %lld): more than 2^31 blocks",
				  (long long)q->rows, (long long)q->cols);
	if (!fcu_aligned(q->codes, 8))
		return fos_seterr(err, FOS_EINVAL, "quantized codes pointer not 8-byte aligned");
	return FOS_OK;
}

static int fcu_deq(fos_backend *be, const fos_qtensor *q, int out, void *dst, fos_err *err)
{
	int rc = fcu_check_q(q, err);
	if (rc)
		return rc;
	if (!fcu_aligned(dst, 16))
		return fos_seterr(err, FOS_EINVAL, "dequantize output pointer not 16-byte aligned");
	if ((rc = fcu_enter(be, err)))
		return rc;
	const int nblk = (int)(q->rows * q->cols / 16), bpr = (int)(q->cols / 16);
	const float d = fos_bound_d(q->bound);
	cudaStream_t st = fcu(be)->st;
	if (out == 0)
		k_dequant<0><<<fcu_grid_for(be, k_dequant<0>, nblk, QT), QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	else if (out == 1)
		k_dequant<1><<<fcu_grid_for(be, k_dequant<1>, nblk, QT), QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	else
		k_dequant<2><<<fcu_grid_for(be, k_dequant<2>, nblk, QT), QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	return fcu_launched(err, "dequantize kernel launch");
}

int fcu_dequantize(fos_backend *be, const fos_qtensor *q, int out_dtype, void *out, fos_err *err)
{
	if (out_dtype != FOS_BF16 && out_dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown output dtype %d", out_dtype);
	return fcu_deq(be, q, out_dtype == FOS_F32 ? 1 : 0, out, err);
}

int fcu_decode(fos_backend *be, const fos_qtensor *q, uint16_t *out, fos_err *err)
{
	return fcu_deq(be, q, 2, out, err);
}
