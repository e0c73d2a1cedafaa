/* cuda_dequantize.cu: the CUDA backend's dequantize (codes, scale bytes and amax to bf16 or f32:
 * e2m1 value * (e4m3 scale * amax / D), NUMERICS.md section 6) and decode (value * scale byte, no
 * amax: the bf16 operand the GEMMs read) ops. One thread per 1x16 block; per tensor (and for decode)
 * the 16 outputs of each of the 256 scale bytes are tabled per CTA, row-scaled tensors compute them
 * from their row's amax. */
#include "cuda_internal.cuh"
#include "fos_format.h"

#include <stdint.h>

/* OUT: 0 bf16 dequantize, 1 fp32 dequantize, 2 bf16 decode (value * scale, no amax). Per tensor
 * (and decode) the 16 outputs of each of the 256 scale bytes are tabled per CTA; row-scaled
 * computes them. */
template <int OUT>
__global__ void __launch_bounds__(FCU_QT) k_dequant(const uint8_t *__restrict__ codes, const uint8_t *__restrict__ scales,
						const float *__restrict__ amax, int row_scaled, int nblk, int bpr,
						float d, void *__restrict__ out)
{
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
	for (int b = blockIdx.x * FCU_QT + threadIdx.x; b < nblk; b += gridDim.x * FCU_QT) {
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
		k_dequant<0><<<fcu_grid_for(be, k_dequant<0>, nblk, FCU_QT), FCU_QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	else if (out == 1)
		k_dequant<1><<<fcu_grid_for(be, k_dequant<1>, nblk, FCU_QT), FCU_QT, 0, st>>>(q->codes, q->scales, q->amax,
										      q->row_scaled, nblk, bpr, d, dst);
	else
		k_dequant<2><<<fcu_grid_for(be, k_dequant<2>, nblk, FCU_QT), FCU_QT, 0, st>>>(q->codes, q->scales, q->amax,
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
