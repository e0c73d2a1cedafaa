/* cuda_selftest.cu: exhaustive GPU proofs that each fast replacement of an exact operation used by
 * the quantize kernels (cuda_q46.cuh) equals the exact operation on every 32-bit input
 * (fos_cuda_selftest in cuda_backend.h). Each kernel walks all 2^32 bit patterns and counts the
 * inputs where the two differ (two NaNs count as equal: NaN payloads carry no meaning here). */
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"

__device__ __forceinline__ bool fcu_same(float a, float b)
{
	return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b);
}

/* x / d by fcu_div_const against __fdiv_rn. */
__global__ void k_st_div(float d, unsigned long long *bad)
{
	const float r = __fdiv_rn(1.0f, d);
	unsigned long long n = 0;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32);
	     i += (uint64_t)gridDim.x * blockDim.x) {
		const float x = __uint_as_float((uint32_t)i);
		n += !fcu_same(fcu_div_const(x, d, r), __fdiv_rn(x, d));
	}
	if (n)
		atomicAdd(bad, n);
}

/* The full e2m1 code of a product p by magnitude search + sign rule, against fos_e2m1_encode(p). */
__global__ void k_st_e2m1(unsigned long long *bad)
{
	unsigned long long n = 0;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32);
	     i += (uint64_t)gridDim.x * blockDim.x) {
		const float p = __uint_as_float((uint32_t)i);
		uint32_t c = fcu_e2m1_mag_code(fabsf(p));
		if ((__float_as_uint(p) >> 31) && p == p)
			c |= 8u;
		n += c != fos_e2m1_encode(p);
	}
	if (n)
		atomicAdd(bad, n);
}

/* cvt.rn.satfinite.e4m3x2.f32 (both halves) against fos_e4m3_encode(min(x, 448)). */
__global__ void k_st_e4m3(unsigned long long *bad)
{
	unsigned long long n = 0;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32);
	     i += (uint64_t)gridDim.x * blockDim.x) {
		const float x = __uint_as_float((uint32_t)i);
		const float y = __uint_as_float((uint32_t)i ^ 0x80000000u);
		const uint32_t two = fcu_e4m3x2_hw(x, y);
		n += (two >> 8) != fcu_e4m3_capped(x);
		n += (two & 0xFFu) != fcu_e4m3_capped(y);
	}
	if (n)
		atomicAdd(bad, n);
}

extern "C" int fos_cuda_selftest(fos_backend *be, int which, unsigned long long *bad, fos_err *err)
{
	if (which < 0 || which > 2)
		return fos_seterr(err, FOS_EINVAL, "self-test %d not in 0..2", which);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	struct fcu_impl *im = fcu(be);
	unsigned long long *d = 0;
	if ((rc = fcu_check(cudaMallocAsync((void **)&d, sizeof *d, im->st), err, "cudaMallocAsync (self-test)")))
		return rc;
	rc = fcu_check(cudaMemsetAsync(d, 0, sizeof *d, im->st), err, "cudaMemsetAsync (self-test)");
	const unsigned grid = (unsigned)im->sms * 8;
	if (!rc) {
		if (which == 0) {
			k_st_div<<<grid, 256, 0, im->st>>>(6.0f, d);
			k_st_div<<<grid, 256, 0, im->st>>>(1536.0f, d);
			k_st_div<<<grid, 256, 0, im->st>>>(2688.0f, d);
		} else if (which == 1) {
			k_st_e2m1<<<grid, 256, 0, im->st>>>(d);
		} else {
			k_st_e4m3<<<grid, 256, 0, im->st>>>(d);
		}
		rc = fcu_launched(err, "self-test kernel launch");
	}
	if (!rc)
		rc = fcu_check(cudaMemcpyAsync(bad, d, sizeof *d, cudaMemcpyDeviceToHost, im->st), err,
			       "cudaMemcpyAsync (self-test)");
	cudaFreeAsync(d, im->st);
	if (!rc)
		rc = fcu_check(cudaStreamSynchronize(im->st), err, "cudaStreamSynchronize (self-test)");
	return rc;
}
