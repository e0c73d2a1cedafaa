/* cuda_gemm.cu: the CUDA backend's GEMM (y = a b^T through cuBLASLt, bf16 x bf16 -> FP32
 * accumulation, NUMERICS.md section 7 epilogue), the grad-bias column sum, and the GEMM extras of
 * cuda_backend.h (the algorithm description).
 *
 * Row-major y (M, N) = a (M, K) b (N, K)^T is column-major y^T (N, M) = b^T a: cuBLASLt's "A" is b
 * (K x N column-major, op T), "B" is a (K x M, op N), D is N x M with ld N. gemm_ex's stored-
 * transposed operands are only other cuBLASLt layouts, never copies: b stored (K, N) row-major is
 * N x K column-major (ld N, op N); a stored (K, M) is M x K column-major (ld M, op T).
 *
 * Determinism: each (shape, operand layout, output kind) gets one plan, chosen once by cuBLASLt's
 * heuristic with no workspace and a split-K of 1 (no cross-CTA reduction), and reused; so the same
 * call gives the same bytes, and a row of y does not depend on the other rows' algorithm choice
 * through split-K. The chosen algorithm is kept process-wide (fcu_algos): every instance (fosd
 * runs one per executor lane, each with its own handle, stream and descriptors) runs the algorithm
 * the first one chose for that key, so results do not depend on which instance ran a request.
 * gemm_ex's layouts are not promised to give gemm's bytes on transposed copies (another layout may
 * get another algorithm); gpu_linear's test_gemm_ex_layouts reports whether they do.
 *
 * Epilogue: alpha = rn(ga * gb) (computed on the device when an amax is involved). Without a row
 * scale, cuBLASLt writes bf16 = RNE(rn(acc * alpha)) itself (fcu_gemm_path with f32 1 takes the FP32
 * path instead: the GPU test gpu_linear proves both paths equal bit for bit). With a row scale, cuBLASLt writes
 * FP32 acc and k_epilogue applies alpha, the row scale and the cast. A bias is added afterwards,
 * after the bf16 cast, exactly as specified: y = bf16(float(y) + float(bias)). */
#include "cuda_internal.cuh"
#include "cuda_ring.cuh"
#include "fos_format.h"

#include <stdio.h>
#include <string.h>

#define ET 256

/* ---- kernels --------------------------------------------------------------------------------- */

__global__ void k_alpha(const float *a_amax, float a_dinv, const float *b_amax, float b_dinv, float *out)
{
	float ga = a_amax ? FOS_MUL(a_amax[0], a_dinv) : a_dinv;
	float gb = b_amax ? FOS_MUL(b_amax[0], b_dinv) : b_dinv;
	out[0] = FOS_MUL(ga, gb);
	out[1] = 0.0f;
}

/* y (M, N) bf16 from acc (M, N) FP32. alpha: *dalpha if non-NULL, else halpha. vec4: n % 4 == 0. */
__global__ void __launch_bounds__(ET) k_epilogue(const float *__restrict__ acc, int64_t m, int64_t n,
						 const float *__restrict__ dalpha, float halpha,
						 const float *__restrict__ rs, const uint16_t *__restrict__ bias,
						 uint16_t *__restrict__ y, int vec4)
{
	const float alpha = dalpha ? dalpha[0] : halpha;
	const int64_t stride = (int64_t)gridDim.x * ET;
	const int64_t tid = (int64_t)blockIdx.x * ET + threadIdx.x;
	if (vec4) {
		const int64_t nv = m * n / 4;
		for (int64_t i = tid; i < nv; i += stride) {
			const int64_t e = 4 * i, r = e / n, c = e - r * n;
			const float4 v = reinterpret_cast<const float4 *>(acc)[i];
			const float s = rs ? rs[r] : 0.0f;
			uint2 bb = make_uint2(0, 0);
			if (bias)
				bb = *reinterpret_cast<const uint2 *>(bias + c);
			const uint16_t y0 = fcu_epi1(v.x, alpha, s, rs != 0, (uint16_t)bb.x, bias != 0);
			const uint16_t y1 = fcu_epi1(v.y, alpha, s, rs != 0, (uint16_t)(bb.x >> 16), bias != 0);
			const uint16_t y2 = fcu_epi1(v.z, alpha, s, rs != 0, (uint16_t)bb.y, bias != 0);
			const uint16_t y3 = fcu_epi1(v.w, alpha, s, rs != 0, (uint16_t)(bb.y >> 16), bias != 0);
			reinterpret_cast<uint2 *>(y)[i] = make_uint2(y0 | ((uint32_t)y1 << 16), y2 | ((uint32_t)y3 << 16));
		}
		return;
	}
	for (int64_t e = tid; e < m * n; e += stride) {
		const int64_t r = e / n, c = e - r * n;
		y[e] = fcu_epi1(acc[e], alpha, rs ? rs[r] : 0.0f, rs != 0, bias ? bias[c] : 0, bias != 0);
	}
}

/* In place: y = bf16(float(y) + float(bias[col])). vec8: n % 8 == 0 and 16-byte aligned. */
__global__ void __launch_bounds__(ET) k_bias(uint16_t *__restrict__ y, int64_t m, int64_t n,
					     const uint16_t *__restrict__ bias, int vec8)
{
	const int64_t stride = (int64_t)gridDim.x * ET;
	const int64_t tid = (int64_t)blockIdx.x * ET + threadIdx.x;
	if (vec8) {
		const int64_t nv = m * n / 8;
		for (int64_t i = tid; i < nv; i += stride) {
			const int64_t c = (8 * i) % n;
			uint4 v = reinterpret_cast<uint4 *>(y)[i];
			const uint4 bv = *reinterpret_cast<const uint4 *>(bias + c);
			uint32_t w[4] = {v.x, v.y, v.z, v.w}, bw[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
			for (int j = 0; j < 4; j++) {
				uint32_t lo = fos_f32_to_bf16(FOS_ADD(fos_bf16_to_f32((uint16_t)w[j]),
								      fos_bf16_to_f32((uint16_t)bw[j])));
				uint32_t hi = fos_f32_to_bf16(FOS_ADD(fos_bf16_to_f32((uint16_t)(w[j] >> 16)),
								      fos_bf16_to_f32((uint16_t)(bw[j] >> 16))));
				w[j] = lo | (hi << 16);
			}
			reinterpret_cast<uint4 *>(y)[i] = make_uint4(w[0], w[1], w[2], w[3]);
		}
		return;
	}
	for (int64_t e = tid; e < m * n; e += stride)
		y[e] = fos_f32_to_bf16(FOS_ADD(fos_bf16_to_f32(y[e]), fos_bf16_to_f32(bias[e % n])));
}

/* db[c] = bf16(sum over rows, strictly in row order, of dy[r, c]) like the CPU. A block owns 32
 * columns and streams 128-row chunks of them through a cp.async ring of CS_NS shared buffers
 * (cuda_ring.cuh's protocol: CS_NS - 1 chunks in flight while one warp adds the current chunk's
 * rows in order, 16 rows' loads before their 16 dependent adds; one barrier per chunk). The sum is
 * one FP32 chain per column in row order, so the time is about m chain steps whatever n. Needs
 * n % 8 == 0, 16-byte aligned. */
#define CS_ROWS 128
#define CS_NS 4
__global__ void __launch_bounds__(256) k_colsum(const uint16_t *__restrict__ dy, int64_t m, int64_t n,
						uint16_t *__restrict__ db)
{
	__shared__ __align__(16) uint16_t tile[CS_NS][CS_ROWS][32];
	const int64_t c0 = (int64_t)blockIdx.x * 32;
	const int t = threadIdx.x, lr = t / 4, lc = (t % 4) * 8;
	const int64_t chunks = (m + CS_ROWS - 1) / CS_ROWS;
	const bool col_on = c0 + lc < n;
	/* chunk k of this block into buffer k % CS_NS: each thread copies rows lr and lr + 64 */
	auto issue = [&](int64_t k) {
		for (int j = 0; j < CS_ROWS / 64; j++) {
			const int64_t r = k * CS_ROWS + lr + 64 * j;
			const bool on = k < chunks && r < m && col_on;
			const uint16_t *src = on ? dy + r * n + c0 + lc : dy;
			fcu_cp_async16((uint32_t)__cvta_generic_to_shared(&tile[k % CS_NS][lr + 64 * j][lc]), src, on);
		}
		fcu_cp_commit();
	};
	for (int k = 0; k < CS_NS - 1; k++)
		issue(k);
	float s = 0.0f;
	for (int64_t k = 0; k < chunks; k++) {
		fcu_cp_wait_ring(CS_NS);
		__syncthreads(); /* chunk k landed for all; chunk k - 1's buffer is free */
		issue(k + CS_NS - 1);
		if (t < 32) {
			const int rn = (int)(m - k * CS_ROWS < CS_ROWS ? m - k * CS_ROWS : CS_ROWS);
			const uint16_t *col = &tile[k % CS_NS][0][t];
			int r = 0;
			for (; r + 16 <= rn; r += 16) {
				float f[16];
#pragma unroll
				for (int j = 0; j < 16; j++)
					f[j] = fos_bf16_to_f32(col[(r + j) * 32]);
#pragma unroll
				for (int j = 0; j < 16; j++)
					s = FOS_ADD(s, f[j]);
			}
			for (; r < rn; r++)
				s = FOS_ADD(s, fos_bf16_to_f32(col[r * 32]));
		}
	}
	if (t < 32 && c0 + t < n)
		db[c0 + t] = fos_f32_to_bf16(s);
}

/* Any shape: one thread per column. */
__global__ void k_colsum_scalar(const uint16_t *__restrict__ dy, int64_t m, int64_t n, uint16_t *__restrict__ db)
{
	const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= n)
		return;
	float s = 0.0f;
	for (int64_t r = 0; r < m; r++)
		s = FOS_ADD(s, fos_bf16_to_f32(dy[r * n + c]));
	db[c] = fos_f32_to_bf16(s);
}

/* ---- plans ----------------------------------------------------------------------------------- */

static void fcu_plan_destroy(struct fcu_plan *p)
{
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->ld)
		cublasLtMatrixLayoutDestroy(p->ld);
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	memset(p, 0, sizeof *p);
}

void fcu_gemm_release(fos_backend *be)
{
	struct fcu_impl *im = fcu(be);
	for (int i = 0; i < im->nplans; i++)
		fcu_plan_destroy(&im->plans[i]);
	im->nplans = 0;
	if (im->acc)
		cudaFreeAsync(im->acc, im->st);
	if (im->scal)
		cudaFreeAsync(im->scal, im->st);
	im->acc = 0;
	im->scal = 0;
	im->acc_bytes = 0;
	cudaStreamSynchronize(im->st);
	cudaGetLastError();
}

/* The algorithm of each plan key, shared by every instance of the process (see the top). */
struct fcu_algo_entry {
	int64_t m, n, k;
	int ta, tb, out_f32, dev_alpha;
	cublasLtMatmulAlgo_t algo;
	int splitk;
};
#define FCU_MAX_ALGOS 1024
static pthread_mutex_t fcu_algo_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fcu_algo_entry fcu_algos[FCU_MAX_ALGOS];
static int fcu_nalgos;

static struct fcu_algo_entry *fcu_algo_find(const struct fcu_plan *p)
{
	for (int i = 0; i < fcu_nalgos; i++) {
		struct fcu_algo_entry *e = &fcu_algos[i];
		if (e->m == p->m && e->n == p->n && e->k == p->k && e->ta == p->ta && e->tb == p->tb &&
		    e->out_f32 == p->out_f32 && e->dev_alpha == p->dev_alpha)
			return e;
	}
	return 0;
}

/* Builds a plan: descriptors and the first heuristic algorithm with split-K 1 and no workspace, or
 * the algorithm another instance already chose for the same key. */
static int fcu_plan_make(struct fcu_impl *im, struct fcu_plan *p, int64_t m, int64_t n, int64_t k, int lta, int ltb,
			 int out_f32, int dev_alpha, fos_err *err)
{
	memset(p, 0, sizeof *p);
	p->m = m;
	p->n = n;
	p->k = k;
	p->ta = lta;
	p->tb = ltb;
	p->out_f32 = out_f32;
	p->dev_alpha = dev_alpha;
	/* cuBLASLt's A is our b, its B our a (see the top of the file). */
	cublasOperation_t ta = ltb ? CUBLAS_OP_N : CUBLAS_OP_T, tb = lta ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtPointerMode_t pm = dev_alpha ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
	int rc = fcu_lt_check(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), err,
			      "cublasLtMatmulDescCreate");
	if (!rc)
		rc = fcu_lt_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), err,
				  "cublasLtMatmulDescSetAttribute (TRANSA)");
	if (!rc)
		rc = fcu_lt_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), err,
				  "cublasLtMatmulDescSetAttribute (TRANSB)");
	if (!rc)
		rc = fcu_lt_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm),
				  err, "cublasLtMatmulDescSetAttribute (POINTER_MODE)");
	if (!rc)
		rc = fcu_lt_check(ltb ? cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)n, (uint64_t)k, n)
				      : cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k),
				  err, "cublasLtMatrixLayoutCreate (A)");
	if (!rc)
		rc = fcu_lt_check(lta ? cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)m, (uint64_t)k, m)
				      : cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k),
				  err, "cublasLtMatrixLayoutCreate (B)");
	if (!rc)
		rc = fcu_lt_check(cublasLtMatrixLayoutCreate(&p->ld, out_f32 ? CUDA_R_32F : CUDA_R_16BF, (uint64_t)n,
							     (uint64_t)m, n),
				  err, "cublasLtMatrixLayoutCreate (D)");
	if (rc) {
		fcu_plan_destroy(p);
		return rc;
	}
	/* Held while choosing, so that two instances never choose the same key at once. */
	pthread_mutex_lock(&fcu_algo_mu);
	const struct fcu_algo_entry *known = fcu_algo_find(p);
	if (known) {
		p->algo = known->algo;
		p->splitk = known->splitk;
		pthread_mutex_unlock(&fcu_algo_mu);
		return FOS_OK;
	}
	cublasLtMatmulPreference_t pref = 0;
	if (!rc)
		rc = fcu_lt_check(cublasLtMatmulPreferenceCreate(&pref), err, "cublasLtMatmulPreferenceCreate");
	size_t wsz = 0;
	if (!rc)
		rc = fcu_lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz,
								       sizeof wsz),
				  err, "cublasLtMatmulPreferenceSetAttribute (workspace)");
	cublasLtMatmulHeuristicResult_t res[8];
	int nres = 0;
	if (!rc)
		rc = fcu_lt_check(cublasLtMatmulAlgoGetHeuristic(im->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 8, res, &nres),
				  err, "cublasLtMatmulAlgoGetHeuristic");
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (!rc && nres <= 0)
		rc = fos_seterr(err, FOS_EINTERNAL,
				"cuBLASLt has no algorithm for a bf16 GEMM M=%lld N=%lld K=%lld (a%s, b%s)", (long long)m,
				(long long)n, (long long)k, lta ? " stored (K, M)" : "", ltb ? " stored (K, N)" : "");
	if (!rc) {
		int pick = -1;
		for (int i = 0; i < nres && pick < 0; i++) {
			if (res[i].state != CUBLAS_STATUS_SUCCESS)
				continue;
			int32_t sk = 1;
			size_t wr = 0;
			if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk,
								 &wr) != CUBLAS_STATUS_SUCCESS)
				sk = 1;
			if (sk <= 1) {
				pick = i;
				p->splitk = sk;
			}
		}
		if (pick < 0)
			rc = fos_seterr(err, FOS_EINTERNAL,
					"cuBLASLt offers only split-K algorithms for M=%lld N=%lld K=%lld", (long long)m,
					(long long)n, (long long)k);
		else
			p->algo = res[pick].algo;
	}
	if (!rc && fcu_nalgos < FCU_MAX_ALGOS) { /* full: later instances ask the heuristic again */
		struct fcu_algo_entry *e = &fcu_algos[fcu_nalgos++];
		e->m = p->m;
		e->n = p->n;
		e->k = p->k;
		e->ta = p->ta;
		e->tb = p->tb;
		e->out_f32 = p->out_f32;
		e->dev_alpha = p->dev_alpha;
		e->algo = p->algo;
		e->splitk = p->splitk;
	}
	pthread_mutex_unlock(&fcu_algo_mu);
	if (rc)
		fcu_plan_destroy(p);
	return rc;
}

/* Finds or makes the plan; returns with im->mu held on success. */
static int fcu_plan_get(struct fcu_impl *im, int64_t m, int64_t n, int64_t k, int ta, int tb, int out_f32, int dev_alpha,
			struct fcu_plan **out, fos_err *err)
{
	pthread_mutex_lock(&im->mu);
	im->tick++;
	for (int i = 0; i < im->nplans; i++) {
		struct fcu_plan *p = &im->plans[i];
		if (p->m == m && p->n == n && p->k == k && p->ta == ta && p->tb == tb && p->out_f32 == out_f32 &&
		    p->dev_alpha == dev_alpha) {
			p->use = im->tick;
			*out = p;
			return FOS_OK;
		}
	}
	int slot = im->nplans;
	if (slot == FCU_MAX_PLANS) { /* evict the least recently used */
		slot = 0;
		for (int i = 1; i < FCU_MAX_PLANS; i++)
			if (im->plans[i].use < im->plans[slot].use)
				slot = i;
		fcu_plan_destroy(&im->plans[slot]);
	}
	int rc = fcu_plan_make(im, &im->plans[slot], m, n, k, ta, tb, out_f32, dev_alpha, err);
	if (rc) {
		if (slot < im->nplans) { /* keep the array dense */
			im->plans[slot] = im->plans[im->nplans - 1];
			memset(&im->plans[im->nplans - 1], 0, sizeof im->plans[0]);
			im->nplans--;
		}
		pthread_mutex_unlock(&im->mu);
		return rc;
	}
	if (slot == im->nplans)
		im->nplans++;
	im->plans[slot].use = im->tick;
	*out = &im->plans[slot];
	return FOS_OK;
}

/* Runs the plan (im->mu held; released here). */
static int fcu_plan_run(struct fcu_impl *im, struct fcu_plan *p, const void *alpha, const void *beta, const uint16_t *a,
			const uint16_t *b, void *d, fos_err *err)
{
	cublasStatus_t s = cublasLtMatmul(im->lt, p->op, alpha, b, p->la, a, p->lb, beta, d, p->ld, d, p->ld, &p->algo,
					  0, 0, im->st);
	pthread_mutex_unlock(&im->mu);
	return fcu_lt_check(s, err, "cublasLtMatmul");
}

static int fcu_grow(fos_backend *be, void **buf, size_t *have, size_t need, fos_err *err)
{
	if (*have >= need)
		return FOS_OK;
	struct fcu_impl *im = fcu(be);
	if (*buf)
		cudaFreeAsync(*buf, im->st);
	*buf = 0;
	*have = 0;
	int rc = fcu_check(cudaMallocAsync(buf, need, im->st), err, "cudaMallocAsync (GEMM scratch)");
	if (rc)
		return rc;
	*have = need;
	return FOS_OK;
}

/* ---- ops ------------------------------------------------------------------------------------- */

/* gemm and gemm_ex: ta / tb select the stored-transposed layouts (0, 0 for gemm). */
int fcu_gemm_path(fos_backend *be, const uint16_t *a, int ta, const uint16_t *b, int tb, int64_t m, int64_t n,
		  int64_t k, const fos_gemm_epi *epi, uint16_t *y, int f32, fos_err *err)
{
	if (m <= 0 || n <= 0 || k <= 0)
		return fos_seterr(err, FOS_EINVAL, "gemm shape M=%lld N=%lld K=%lld must be positive", (long long)m,
				  (long long)n, (long long)k);
	if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
		return fos_seterr(err, FOS_EINVAL, "gemm_ex transpose flags must be 0 or 1 (trans_a %d, trans_b %d)", ta,
				  tb);
	if ((uintptr_t)a % 16 || (uintptr_t)b % 16 || (uintptr_t)y % 16)
		return fos_seterr(err, FOS_EINVAL, "gemm operands must be 16-byte aligned");
	fos_gemm_epi plain = fos_gemm_epi_plain();
	if (!epi)
		epi = &plain;
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	struct fcu_impl *im = fcu(be);
	const int dev_alpha = epi->a_amax || epi->b_amax;
	float halpha = 0.0f;
	if (dev_alpha) {
		k_alpha<<<1, 1, 0, im->st>>>(epi->a_amax, epi->a_dinv, epi->b_amax, epi->b_dinv, im->scal);
		if ((rc = fcu_launched(err, "alpha kernel launch")))
			return rc;
	} else {
		halpha = FOS_MUL(epi->a_dinv, epi->b_dinv);
	}
	const float one = 1.0f, zero = 0.0f;
	struct fcu_plan *p;
	const unsigned eg = fcu_grid(be, m * n / 8 + 1, ET, 8);
	if (epi->row_scale || f32) {
		if ((rc = fcu_grow(be, (void **)&im->acc, &im->acc_bytes, (size_t)(m * n) * sizeof(float), err)))
			return rc;
		if ((rc = fcu_plan_get(im, m, n, k, ta, tb, 1, 0, &p, err)))
			return rc;
		if ((rc = fcu_plan_run(im, p, &one, &zero, a, b, im->acc, err)))
			return rc;
		k_epilogue<<<eg, ET, 0, im->st>>>(im->acc, m, n, dev_alpha ? im->scal : 0, halpha, epi->row_scale,
						  epi->bias, y, n % 4 == 0);
		return fcu_launched(err, "GEMM epilogue kernel launch");
	}
	if ((rc = fcu_plan_get(im, m, n, k, ta, tb, 0, dev_alpha, &p, err)))
		return rc;
	if (dev_alpha)
		rc = fcu_plan_run(im, p, im->scal, im->scal + 1, a, b, y, err);
	else
		rc = fcu_plan_run(im, p, &halpha, &zero, a, b, y, err);
	if (rc || !epi->bias)
		return rc;
	const int vec8 = n % 8 == 0 && (uintptr_t)epi->bias % 16 == 0;
	k_bias<<<eg, ET, 0, im->st>>>(y, m, n, epi->bias, vec8);
	return fcu_launched(err, "bias kernel launch");
}

int fcu_gemm(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
	     const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	return fcu_gemm_path(be, a, 0, b, 0, m, n, k, epi, y, 0, err);
}

int fcu_gemm_ex(fos_backend *be, const uint16_t *a, int trans_a, const uint16_t *b, int trans_b, int64_t m, int64_t n,
		int64_t k, const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	return fcu_gemm_path(be, a, trans_a, b, trans_b, m, n, k, epi, y, 0, err);
}

int fcu_colsum(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, uint16_t *db, fos_err *err)
{
	if (m <= 0 || n <= 0)
		return fos_seterr(err, FOS_EINVAL, "column sum of (%lld, %lld)", (long long)m, (long long)n);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	cudaStream_t st = fcu(be)->st;
	if (n % 8 == 0 && (uintptr_t)dy % 16 == 0)
		k_colsum<<<(unsigned)((n + 31) / 32), 256, 0, st>>>(dy, m, n, db);
	else
		k_colsum_scalar<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(dy, m, n, db);
	return fcu_launched(err, "column sum kernel launch");
}

/* ---- cuda_backend.h extras ------------------------------------------------------------------- */

extern "C" int fos_cuda_gemm_describe(fos_backend *be, int64_t m, int64_t n, int64_t k, char *buf, size_t len,
				      fos_err *err)
{
	return fos_cuda_gemm_ex_describe(be, 0, 0, m, n, k, buf, len, err);
}

extern "C" int fos_cuda_gemm_ex_describe(fos_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
					 char *buf, size_t len, fos_err *err)
{
	if ((trans_a != 0 && trans_a != 1) || (trans_b != 0 && trans_b != 1))
		return fos_seterr(err, FOS_EINVAL, "transpose flags must be 0 or 1 (trans_a %d, trans_b %d)", trans_a,
				  trans_b);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	struct fcu_impl *im = fcu(be);
	struct fcu_plan *p;
	if ((rc = fcu_plan_get(im, m, n, k, trans_a, trans_b, 0, 0, &p, err)))
		return rc;
	int32_t v[6] = {0, 0, 0, 0, 0, 0};
	const cublasLtMatmulAlgoConfigAttributes_t at[6] = {
		CUBLASLT_ALGO_CONFIG_ID,	  CUBLASLT_ALGO_CONFIG_TILE_ID,	      CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
		CUBLASLT_ALGO_CONFIG_STAGES_ID, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
	for (int i = 0; i < 6; i++) {
		size_t wr = 0;
		uint32_t u = 0;
		uint16_t h = 0;
		if (i == 5) { /* the cluster shape id is 16 bits */
			if (cublasLtMatmulAlgoConfigGetAttribute(&p->algo, at[i], &h, sizeof h, &wr) == CUBLAS_STATUS_SUCCESS)
				v[i] = h;
		} else if (cublasLtMatmulAlgoConfigGetAttribute(&p->algo, at[i], &u, sizeof u, &wr) == CUBLAS_STATUS_SUCCESS) {
			v[i] = (int32_t)u;
		}
	}
	pthread_mutex_unlock(&im->mu);
	snprintf(buf, len, "algo %d tile %d splitK %d stages %d swizzle %d cluster %d", v[0], v[1], v[2], v[3], v[4],
		 v[5]);
	return FOS_OK;
}
