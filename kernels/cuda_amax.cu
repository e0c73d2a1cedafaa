/* cuda_amax.cu: the CUDA backend's amax op: the largest magnitude of a bf16 or f32 tensor, per
 * tensor or per row, NaN dropped, with f32 inputs measured after their cast to bf16 (as the CPU
 * reference does; NUMERICS.md section 1). The per-tensor kernel reduces in a grid-stride loop and
 * combines CTAs by an atomic max of the result's bit pattern (nonnegative floats order like their
 * bits), exact and independent of the order. fcu_amax also records which input it last read: the
 * quantize launchers then walk that input from its end, whose bytes are still in L2. */
#include "cuda_internal.cuh"
#include "fos_format.h"

#include <stdint.h>

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
__global__ void __launch_bounds__(FCU_QT) k_amax_tensor(const void *__restrict__ x, int64_t n, int vec,
						    unsigned int *__restrict__ out)
{
	const int64_t tid = (int64_t)blockIdx.x * FCU_QT + threadIdx.x, stride = (int64_t)gridDim.x * FCU_QT;
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
__global__ void __launch_bounds__(FCU_QT) k_amax_rows(const void *__restrict__ x, int64_t cols, int vec,
						  float *__restrict__ out)
{
	const int64_t r = blockIdx.x;
	float m = 0.0f;
	const int per = F32 ? 4 : 8;
	int64_t done = 0;
	if (vec) {
		const uint4 *p = reinterpret_cast<const uint4 *>(static_cast<const char *>(x) + r * cols * (F32 ? 4 : 2));
		const int64_t nv = cols / per;
		for (int64_t i = threadIdx.x; i < nv; i += FCU_QT)
			m = fcu_absmax_vec(m, p[i], F32);
		done = nv * per;
	}
	for (int64_t i = done + threadIdx.x; i < cols; i += FCU_QT) {
		if (F32)
			m = fcu_absmax_f32(m, static_cast<const float *>(x)[r * cols + i]);
		else
			m = fcu_absmax_bf16(m, static_cast<const uint16_t *>(x)[r * cols + i]);
	}
	m = fcu_block_max(m);
	if (threadIdx.x == 0)
		out[r] = m;
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
			k_amax_rows<true><<<(unsigned)rows, FCU_QT, 0, st>>>(x, cols, vec, out);
		else
			k_amax_rows<false><<<(unsigned)rows, FCU_QT, 0, st>>>(x, cols, vec, out);
		return fcu_launched(err, "amax (per row) kernel launch");
	}
	if ((rc = fcu_check(cudaMemsetAsync(out, 0, sizeof(float), st), err, "cudaMemsetAsync (amax)")))
		return rc;
	const int64_t n = rows * cols;
	int vec = fcu_aligned(x, 16);
	int64_t items = (vec ? n / (f32 ? 4 : 8) : n) / 4 + 1;
	if (f32)
		k_amax_tensor<true><<<fcu_grid_for(be, k_amax_tensor<true>, items, FCU_QT), FCU_QT, 0, st>>>(
			x, n, vec, reinterpret_cast<unsigned int *>(out));
	else
		k_amax_tensor<false><<<fcu_grid_for(be, k_amax_tensor<false>, items, FCU_QT), FCU_QT, 0, st>>>(
			x, n, vec, reinterpret_cast<unsigned int *>(out));
	return fcu_launched(err, "amax kernel launch");
}
