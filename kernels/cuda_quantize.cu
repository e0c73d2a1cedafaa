/* cuda_quantize.cu: the CUDA backend's quantize op (fcu_quantize) and its 4/6 kernels (NUMERICS.md
 * section 3): 1x16 blocks per tensor (k_q46_pt) and row-scaled (k_q46_rows), 16x16 tiles per tensor
 * (k_q46_16x16). The plain NVFP4 recipe (every shape) goes to cuda_gradient.cu, an input stored transposed to
 * cuda_quantize_t.cu. Bit-identical to the CPU reference (kernels/cpu_quant.c): the per-block
 * arithmetic is cuda_q46.cuh and the block functions of cuda_qblock.cuh, shared with the other
 * quantize kernels; every float operation an __f*_rn intrinsic. A per-tensor amax given by the
 * caller is copied into q->amax by the quantize kernel itself (no separate copy on the stream).
 *
 * Layout: a 1x16 block of a row-major (rows, cols) tensor is 16 contiguous elements, so block b
 * reads x + 16 b, writes 8 code bytes at codes + 8 b, its scale byte at scales + b and 16 bf16 at
 * decoded + 16 b, whatever the row. One thread owns one block (16x16: a half-warp owns one tile,
 * one row-group per thread). */
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"
#include "cuda_qblock.cuh"

#include <stdint.h>

#define QT FCU_QT

/* Per-thread table at p = &t[0][tid] of a [entry][QT] array. */
struct fcu_thr_tab {
	const float *p;
	__device__ __forceinline__ float operator()(uint32_t c) const { return p[c * QT]; }
};

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

/* ---- 4/6, 1x16, row-scaled ------------------------------------------------------------------ */

/* Row-scaled: one amax per row (bpr blocks per row), so the candidate values and inverse scales
 * are computed per block into the thread's column of vt (laid out [entry][thread]: per-element
 * look-ups never conflict). The amax is read from q->amax (never given per tensor). */
template <typename T, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT) k_q46_rows(const T *__restrict__ x, int nblk, int bpr,
						 const float *__restrict__ amax, float d, int hw, uint8_t *__restrict__ codes,
						 uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	__shared__ float vt[16][QT];
	__shared__ uint16_t dt[DEC ? 8 : 1][QT];
	const int t = threadIdx.x;
	const float rd = FOS_DIV(1.0f, d), r6 = FOS_DIV(1.0f, 6.0f);
	float a = 0.0f, s_enc = 1.0f, s_dec = 1.0f;
	const int stride = gridDim.x * QT;
	int i = blockIdx.x * QT + t;
	fcu_raw<T> raw;
	if (i < nblk)
		fcu_load(x + 16 * (int64_t)i, raw);
	for (; i < nblk; i += stride) {
		const int b = i;
		float xf[16], ax[16];
		const fcu_raw<T> cur = raw;
		fcu_unpack(cur, xf);
		if (i + stride < nblk) /* next block's bytes in flight during this block's arithmetic */
			fcu_load(x + 16 * (int64_t)(i + stride), raw);
		a = amax[b / bpr];
		s_enc = fos_s_enc(a, d);
		s_dec = FOS_DIV(1.0f, s_enc);
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
		const bool p4 = e4 < e6;
		const uint32_t sf = p4 ? sf4 : sf6;
		const float inv = p4 ? inv4 : inv6;
		const uint64_t cw = (p4 ? m4 : m6) | fcu_pick_signs(cur, xf, inv, e6 != e6 || e4 != e4);
		fcu_store<DEC>(b, cw, sf, codes, scales, dec, dt);
	}
}

/* ---- 4/6, 1x16, per tensor ------------------------------------------------------------------- */

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
	fcu_rows_walk<QT>(x, nblk, rev, [&](int b, const fcu_raw<T> cur) {
		uint32_t sf;
		const uint64_t cw = fcu_blk46<T, MSE>(cur, s_enc, r6, hw, sm, svt0, &sf);
		fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
	});
}

/* ---- 4/6, 16x16 tiles ------------------------------------------------------------------------ */

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

/* ---- host side ------------------------------------------------------------------------------- */

/* 4/6 1x16: per tensor the tabled kernel, row-scaled the one with per-thread tables. */
template <typename T, bool MSE, bool DEC>
static void fcu_q46_1x16_launch(fos_backend *be, const void *x, int nblk, int bpr, const fos_qcfg *cfg,
				const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	const float d = fos_bound_d(cfg->bound);
	cudaStream_t st = fcu(be)->st;
	const T *xt = static_cast<const T *>(x);
	if (cfg->row_scaled) {
		auto k = k_q46_rows<T, MSE, DEC>;
		k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, bpr, A.amax, d, A.hw, q->codes, q->scales, dec);
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

template <typename T, bool MSE, bool DEC>
static void fcu_quant_typed(fos_backend *be, const void *x, int64_t rows, int nblk, int bpr, const fos_qcfg *cfg,
			    const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	if (cfg->block == FOS_BLOCK_16X16)
		fcu_q46_16x16_launch<T, MSE, DEC>(be, x, (int)(rows / 16) * bpr, bpr, cfg, A, q, dec);
	else
		fcu_q46_1x16_launch<T, MSE, DEC>(be, x, nblk, bpr, cfg, A, q, dec);
}

int fcu_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		 const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	return fcu_quantize_cta(be, x, dtype, rows, cols, cfg, amax_in, q, decoded, 0, err);
}

int fcu_quantize_cta(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		     const float *amax_in, fos_qtensor *q, uint16_t *decoded, int one_cta, fos_err *err)
{
	int rc = fcu_qcheck(cfg, dtype, rows, cols, err);
	if (rc)
		return rc;
	if (rows * cols / 16 > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "quantize of (%lld, %lld): more than 2^31 blocks", (long long)rows,
				  (long long)cols);
	if (!fcu_aligned(x, 16) || !fcu_aligned(q->codes, 8) || (decoded && !fcu_aligned(decoded, 16)))
		return fos_seterr(err, FOS_EINVAL, "quantize: input, codes or decoded pointer not 16/8/16-byte aligned");
	if ((rc = fcu_enter(be, err)))
		return rc;
	if (fcu_xq_takes(x, dtype, rows, cols, cfg, amax_in)) /* small: amax and quantize in one launch */
		return fcu_xq_small(be, x, rows, cols, cfg, q, decoded, err);
	const float *asrc = q->amax; /* where the kernel reads the amax */
	float *adst = 0;	     /* where it copies a given per-tensor amax */
	if (amax_in && !cfg->row_scaled) {
		fcu_qamax(q, amax_in, &asrc, &adst);
	} else if (amax_in) { /* one per row: copied into q->amax, where the kernel reads it */
		if (amax_in != q->amax &&
		    (rc = fcu_check(cudaMemcpyAsync(q->amax, amax_in, (size_t)rows * sizeof(float), cudaMemcpyDeviceToDevice,
						    fcu(be)->st),
				    err, "cudaMemcpyAsync (amax)")))
			return rc;
	} else if ((rc = fcu_amax(be, x, dtype, rows, cols, cfg->row_scaled, q->amax, err))) {
		return rc;
	}
	fcu_qset(q, rows, cols, cfg);
	const int nblk = (int)(rows * cols / 16), bpr = (int)(cols / 16);
	const fcu_qa A = fcu_qargs(be, x, amax_in != 0, asrc, adst, one_cta);
	if (cfg->recipe == FOS_RECIPE_NVFP4)
		fcu_grad_rows(be, x, dtype, rows, nblk, bpr, cfg, A, q, decoded);
	else
		fcu_qdispatch(dtype, cfg->err_mode == FOS_ERR_MSE, decoded != 0, [&](auto t, auto mse, auto dec) {
			fcu_quant_typed<typename decltype(t)::type, decltype(mse)::value, decltype(dec)::value>(
				be, x, rows, nblk, bpr, cfg, A, q, decoded);
		});
	return fcu_launched(err, "quantize kernel launch");
}
