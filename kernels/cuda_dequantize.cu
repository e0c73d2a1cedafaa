/* cuda_dequantize.cu: the CUDA backend's dequantize (codes, scale bytes and amax to bf16 or f32:
 * e2m1 value * (e4m3 scale * amax / D), NUMERICS.md section 6) and decode (value * scale byte, no
 * amax: the bf16 operand the GEMMs read) ops. One thread per 16 bytes of output (half a 1x16 block
 * of bf16, a quarter of f32); per tensor (and for decode) the 16 outputs of each of the 256 scale
 * bytes are tabled per CTA, row-scaled tensors compute them from their row's amax. */
#include "cuda_internal.cuh"
#include "fos_format.h"

#include <stdint.h>

/* OUT: 0 bf16 dequantize, 1 fp32 dequantize, 2 bf16 decode (value * scale, no amax). Per tensor
 * (and decode) the 16 outputs of each of the 256 scale bytes are tabled per CTA; row-scaled
 * computes them. Each thread writes one 16-byte piece of output: E = 8 bf16 (half a 1x16 block)
 * or 4 floats (a quarter), so that a warp's stores cover 512 contiguous bytes; consecutive threads
 * read consecutive E / 2 bytes of codes. */
template <int OUT>
__global__ void __launch_bounds__(FCU_QT) k_dequant(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
						const float *__restrict__ amax, int row_scaled, int64_t nblk, int bpr,
						float d, void *__restrict__ out)
{
	constexpr int E = OUT == 1 ? 4 : 8; /* outputs per thread */
	constexpr int P = 16 / E;           /* threads per block */
	__shared__ uint32_t tab[256 * 16]; /* every scale byte, sign bit included (no OOB on 0x80..0xFF) */
	const float rd = FOS_DIV(1.0f, d);
	const bool tabled = OUT == 2 || !row_scaled;
	if (tabled) {
		const float a = OUT == 2 ? 0.0f : amax[0];
		for (int i = threadIdx.x; i < 256 * 16; i += FCU_QT) {
			const uint32_t sf = (uint32_t)i >> 4;
			const float dec = OUT == 2 ? fos_e4m3_to_f32(sf) : FOS_MUL(FOS_MUL(fos_e4m3_to_f32(sf), a), rd);
			const float v = FOS_MUL(fos_e2m1_value((uint32_t)i & 15u), dec);
			tab[i] = OUT == 1 ? __float_as_uint(v) : fos_f32_to_bf16(v);
		}
		__syncthreads();
	}
	const int64_t items = nblk * P;
	for (int64_t it = (int64_t)blockIdx.x * FCU_QT + threadIdx.x; it < items; it += (int64_t)gridDim.x * FCU_QT) {
		const int64_t b = it / P;
		/* this piece's E codes: E / 2 bytes at byte offset part * E / 2 of the block's 8 */
		const uint32_t cw = OUT == 1 ? (uint32_t)reinterpret_cast<const uint16_t *>(codes)[it]
					     : reinterpret_cast<const uint32_t *>(codes)[it];
		const uint32_t sf = scales[b];
		uint32_t v[E];
		if (tabled) {
			const uint32_t *row = tab + sf * 16;
#pragma unroll
			for (int j = 0; j < E; j++)
				v[j] = row[(cw >> (4 * j)) & 15u];
		} else {
			const float a = amax[b / bpr];
			const float dec = FOS_MUL(FOS_MUL(fos_e4m3_to_f32(sf), a), rd); /* fos_dec_scale */
#pragma unroll
			for (int j = 0; j < E; j++) {
				const float f = FOS_MUL(fos_e2m1_value((cw >> (4 * j)) & 15u), dec);
				v[j] = OUT == 1 ? __float_as_uint(f) : fos_f32_to_bf16(f);
			}
		}
		uint4 *o = reinterpret_cast<uint4 *>(out) + it;
		if (OUT == 1)
			*o = make_uint4(v[0], v[1], v[2], v[3]);
		else
			*o = make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
	}
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
	const int64_t nblk = q->rows * q->cols / 16;
	const int bpr = (int)(q->cols / 16);
	const int64_t items = nblk * (out == 1 ? 4 : 2); /* 16-byte output pieces (k_dequant's E) */
	const float d = fos_bound_d(q->bound);
	cudaStream_t st = fcu(be)->st;
	/* 4 CTAs an SM (half the occupancy allows): each CTA fills its 16 KiB table once, so fewer CTAs
	 * walking more pieces each spend less of the pass on tables */
	const unsigned grid = fcu_grid(be, items, FCU_QT, 4);
	if (out == 0)
		k_dequant<0><<<grid, FCU_QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	else if (out == 1)
		k_dequant<1><<<grid, FCU_QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	else
		k_dequant<2><<<grid, FCU_QT, 0, st>>>(q->codes, q->scales, q->amax,
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
