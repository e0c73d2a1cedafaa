/* support_cuda_selftest.cu: exhaustive GPU proofs that each fast replacement of an exact operation
 * used by the quantize kernels (cuda_q46.cuh) equals the exact operation on every 32-bit input
 * (fos_cuda_selftest in support_cuda_selftest.h: test code, in the GPU tests' library only). Each
 * kernel walks all 2^32 bit patterns and counts the inputs where the two differ (two NaNs count as equal: NaN payloads carry no meaning here). The
 * gradient quantizer's cheaper helpers (cuda_q46.cuh / cuda_qblock.cuh) are proven the same way:
 * the e2m1 code by one FMA on every float, the decode by byte permutes on every scale byte and
 * every 4-code chunk, the sign bits by byte permutes on every sign pattern. */
#include "support_cuda_selftest.h"
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"
#include "cuda_qblock.cuh"

__device__ __forceinline__ bool fcu_same(float a, float b)
{
	return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b);
}

/* Adds to *bad the sum of differs(u) over every 32-bit pattern u, the grid's threads striding. */
template <class F>
__device__ __forceinline__ void fcu_st_every_u32(unsigned long long *bad, const F &differs)
{
	unsigned long long n = 0;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32);
	     i += (uint64_t)gridDim.x * blockDim.x)
		n += differs((uint32_t)i);
	if (n)
		atomicAdd(bad, n);
}

/* x / d by fcu_div_const against __fdiv_rn. */
__global__ void k_st_div(float d, unsigned long long *bad)
{
	const float r = __fdiv_rn(1.0f, d);
	fcu_st_every_u32(bad, [&](uint32_t u) -> unsigned {
		const float x = __uint_as_float(u);
		return !fcu_same(fcu_div_const(x, d, r), __fdiv_rn(x, d));
	});
}

/* The full e2m1 code of a product p by magnitude search + sign rule, against fos_e2m1_encode(p). */
__global__ void k_st_e2m1(unsigned long long *bad)
{
	fcu_st_every_u32(bad, [](uint32_t u) -> unsigned {
		const float p = __uint_as_float(u);
		uint32_t c = fcu_e2m1_mag_code(fabsf(p));
		if ((__float_as_uint(p) >> 31) && p == p)
			c |= 8u;
		return c != fos_e2m1_encode(p);
	});
}

/* cvt.rn.satfinite.e4m3x2.f32 (both halves) against fos_e4m3_encode(min(x, 448)). */
__global__ void k_st_e4m3(unsigned long long *bad)
{
	fcu_st_every_u32(bad, [](uint32_t u) -> unsigned {
		const float x = __uint_as_float(u);
		const float y = __uint_as_float(u ^ 0x80000000u);
		const uint32_t two = fcu_e4m3x2_hw(x, y);
		return ((two >> 8) != fcu_e4m3_capped(x)) + ((two & 0xFFu) != fcu_e4m3_capped(y));
	});
}

/* The e2m1 magnitude code by one FMA (fcu_e2m1_mag_code_fma) against the 3-comparison search, on
 * every float a >= 0 (+inf included), every NaN of either sign and -0 (2^31 + 2^23 inputs; other
 * negative floats are never passed to it). */
__global__ void k_st_e2m1_fma(unsigned long long *bad)
{
	fcu_st_every_u32(bad, [](uint32_t u) -> unsigned {
		const float a = __uint_as_float(u);
		if (!(u >> 31) || a != a || u == 0x80000000u)
			return fcu_e2m1_mag_code_fma(a) != fcu_e2m1_mag_code(a);
		return 0;
	});
}

/* The decode by byte permutes (fcu_dec_pt) against the per-element look-up of the sdec table built by
 * fcu_pt_setup: block b = scale byte b (0..127), every 16-bit value v of a 4-code chunk in every
 * chunk position (all four chunks v) and mixed with other chunks, 16 elements each. */
__global__ void k_st_dec(unsigned long long *bad)
{
	__shared__ fcu_pt_smem sm;
	fcu_pt_setup(sm, 1.0f, 2688.0f, 1.0f, false, true);
	const uint32_t sf = blockIdx.x;
	const uint16_t *row = sm.sdec + sf * 16;
	unsigned long long n = 0;
	for (uint32_t v = threadIdx.x; v < 65536u; v += blockDim.x)
		for (int mix = 0; mix < 2; mix++) {
			const uint64_t cw = mix ? ((uint64_t)v | ((uint64_t)(~v & 0xFFFFu) << 16) |
						   ((uint64_t)((v * 7u) & 0xFFFFu) << 32) | ((uint64_t)(v ^ 0x5A5Au) << 48))
						: (uint64_t)v * 0x0001000100010001ull;
			__align__(16) uint16_t out[16];
			fcu_dec_pt(cw, sf, sm.sdec, out);
			for (int i = 0; i < 16; i++)
				n += out[i] != row[(cw >> (4 * i)) & 15u];
		}
	if (n)
		atomicAdd(bad, n);
}

/* The sign bits of 16 bf16 inputs by byte permutes (fcu_fast_signs) against bit 15 of each input:
 * every 2^16 sign pattern (the thread's index) under 64 fills of the other bits. */
__global__ void k_st_signs(unsigned long long *bad)
{
	unsigned long long n = 0;
	const uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
	if (p < 65536u)
		for (uint32_t rep = 0; rep < 64; rep++) {
			fcu_raw<uint16_t> r;
			uint32_t *w = reinterpret_cast<uint32_t *>(r.v);
			uint64_t want = 0;
			for (int j = 0; j < 8; j++) {
				uint32_t x = (p * 0x9E3779B9u) ^ (rep * 0x85EBCA6Bu) ^ ((uint32_t)j * 0xC2B2AE35u);
				x ^= x >> 13;
				x *= 0x27D4EB2Fu;
				w[j] = (x & 0x7FFF7FFFu) | (((p >> (2 * j)) & 1u) << 15) | (((p >> (2 * j + 1)) & 1u) << 31);
			}
			for (int i = 0; i < 16; i++)
				if ((w[i / 2] >> (16 * (i & 1) + 15)) & 1u)
					want |= 8ull << (4 * i);
			n += fcu_fast_signs(r) != want;
		}
	if (n)
		atomicAdd(bad, n);
}

extern "C" int fos_cuda_selftest(fos_backend *be, int which, unsigned long long *bad, fos_err *err)
{
	if (which < 0 || which > 5)
		return fos_seterr(err, FOS_EINVAL, "self-test %d not in 0..5", which);
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
		} else if (which == 2) {
			k_st_e4m3<<<grid, 256, 0, im->st>>>(d);
		} else if (which == 3) {
			k_st_e2m1_fma<<<grid, 256, 0, im->st>>>(d);
		} else if (which == 4) {
			k_st_dec<<<128, 256, 0, im->st>>>(d);
		} else {
			k_st_signs<<<256, 256, 0, im->st>>>(d);
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
