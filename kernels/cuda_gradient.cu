/* cuda_gradient.cu: the rowwise NVFP4 gradient quantize (NUMERICS.md section 5) behind
 * fcu_quantize's NVFP4 recipe: per-tensor amax, 1x16 blocks, the scale byte from the block amax
 * alone. One thread per block with two blocks' bytes in flight ahead of the one being worked on;
 * the per-block arithmetic is fcu_blk_grad (cuda_qblock.cuh), shared with quantize_t and
 * grad_pair. */
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

template <typename T, bool DEC>
static void fcu_grad_launch(fos_backend *be, const void *x, int nblk, const fcu_qa &A, fos_qtensor *q, uint16_t *dec)
{
	cudaStream_t st = fcu(be)->st;
	const T *xt = static_cast<const T *>(x);
	auto k = k_grad_1x16<T, DEC>;
	k<<<fcu_qgrid(be, k, nblk, A, 0), QT, 0, st>>>(xt, nblk, A.amax, A.amax_out, A.hw, A.rev, q->codes, q->scales,
						       dec);
}

void fcu_grad_rows(fos_backend *be, const void *x, int dtype, int nblk, const fcu_qa &A, fos_qtensor *q,
		   uint16_t *dec)
{
	fcu_qdispatch(dtype, false, dec != 0, [&](auto t, auto, auto want_dec) {
		fcu_grad_launch<typename decltype(t)::type, decltype(want_dec)::value>(be, x, nblk, A, q, dec);
	});
}
