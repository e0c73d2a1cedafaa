/* cuda_gradient.cu: the rowwise plain NVFP4 quantize (NUMERICS.md section 5) behind fcu_quantize's
 * NVFP4 recipe, the scale byte from the block amax alone: the gradient's per-tensor 1x16 blocks
 * (one thread per block with two blocks' bytes in flight ahead of the one being worked on; the
 * per-block arithmetic is fcu_blk_grad of cuda_qblock.cuh, shared with quantize_t and grad_pair),
 * and a plain operand's other shapes (section 11): 16x16 tiles per tensor (a half-warp per tile,
 * fcu_blk_grad_tile, shared with quantize_t) and row-scaled 1x16 (one thread per block, each row
 * its own S_enc, the scalar functions of fos_format.h as the CPU reference runs them). */
#include "cuda_internal.cuh"
#include "cuda_qblock.cuh"

#include <stdint.h>

#define QT FCU_QT

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
	fcu_rows_walk<QT>(x, nblk, rev, [&](int b, const fcu_raw<T> cur) {
		uint32_t sf;
		const uint64_t cw = fcu_blk_grad<T>(cur, g, hw, sm, &sf);
		fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
	});
}

/* Plain NVFP4 16x16 tiles, per tensor: lane r of a half-warp owns the tile's row r. */
template <typename T, bool DEC>
__global__ void __launch_bounds__(QT) k_grad_16x16(const T *__restrict__ x, int ntiles, int bpr,
						   const float *__restrict__ amax, float *__restrict__ amax_out, int hw,
						   uint8_t *__restrict__ codes, uint8_t *__restrict__ scales,
						   uint16_t *__restrict__ dec)
{
	__shared__ fcu_pt_smem sm;
	const int t = threadIdx.x, r = t & 15;
	const float a = amax[0];
	if (amax_out && blockIdx.x == 0 && t == 0)
		amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(a, 2688.0f), s_dec = FOS_DIV(1.0f, s_enc);
	fcu_pt_setup(sm, a, 2688.0f, s_dec, false, DEC);
	const float g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
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
		const uint64_t cw = fcu_blk_grad_tile<T, 1>(raw, g, hw, sm, &sf);
		if (on)
			fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
	}
}

/* Plain NVFP4 1x16, row-scaled: block b belongs to row b / bpr, whose amax gives its S_enc. */
template <typename T, bool DEC>
__global__ void __launch_bounds__(QT) k_grad_rows(const T *__restrict__ x, int nblk, int bpr,
						  const float *__restrict__ amax, uint8_t *__restrict__ codes,
						  uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	for (int b = blockIdx.x * QT + threadIdx.x; b < nblk; b += gridDim.x * QT) {
		fcu_raw<T> raw;
		float xf[16];
		fcu_load(x + 16 * (int64_t)b, raw);
		fcu_unpack(raw, xf);
		const float s_enc = fos_s_enc(amax[b / bpr], 2688.0f), s_dec = FOS_DIV(1.0f, s_enc);
		float bamax = 0.0f;
#pragma unroll
		for (int j = 0; j < 16; j++)
			bamax = fos_absmax(bamax, xf[j]);
		const uint32_t sf = fos_grad_scale(bamax, s_enc);
		const float inv = fos_inv_scale(sf, s_dec), sff = fos_e4m3_to_f32(sf);
		uint64_t cw = 0;
#pragma unroll
		for (int j = 0; j < 16; j++) {
			const uint32_t q = fos_e2m1_encode(FOS_MUL(xf[j], inv));
			cw |= (uint64_t)q << (4 * j);
			if (DEC)
				dec[16 * (int64_t)b + j] = fos_f32_to_bf16(FOS_MUL(fos_e2m1_value(q), sff));
		}
		reinterpret_cast<uint64_t *>(codes)[b] = cw;
		scales[b] = (uint8_t)sf;
	}
}

template <typename T, bool DEC>
static void fcu_grad_launch(fos_backend *be, const void *x, int nblk, const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	cudaStream_t st = fcu(be)->st;
	const T *xt = static_cast<const T *>(x);
	auto k = k_grad_1x16<T, DEC>;
	k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, A.amax, A.amax_out, A.hw, A.rev, q->codes, q->scales,
						       dec);
}

template <typename T, bool DEC>
static void fcu_grad_any(fos_backend *be, const void *x, int64_t rows, int nblk, int bpr, const fos_qcfg *cfg,
			 const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	cudaStream_t st = fcu(be)->st;
	const T *xt = static_cast<const T *>(x);
	if (cfg->block == FOS_BLOCK_16X16) {
		const int ntiles = (int)(rows / 16) * bpr;
		auto k = k_grad_16x16<T, DEC>;
		k<<<fcu_qgrid(be, k, (int64_t)ntiles * 16, A, 0), QT, 0, st>>>(xt, ntiles, bpr, A.amax, A.amax_out, A.hw,
									      q->codes, q->scales, dec);
	} else if (cfg->row_scaled) {
		auto k = k_grad_rows<T, DEC>;
		k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, bpr, A.amax, q->codes, q->scales, dec);
	} else {
		fcu_grad_launch<T, DEC>(be, x, nblk, A, q, dec);
	}
}

void fcu_grad_rows(fos_backend *be, const void *x, int dtype, int64_t rows, int nblk, int bpr, const fos_qcfg *cfg,
		   const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	fcu_qdispatch(dtype, false, dec != 0, [&](auto t, auto, auto want_dec) {
		fcu_grad_any<typename decltype(t)::type, decltype(want_dec)::value>(be, x, rows, nblk, bpr, cfg, A, q, dec);
	});
}
