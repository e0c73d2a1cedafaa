/* support_cuda_baseline.cu: fos_cuda_gemm_baseline (support_cuda_baseline.h): benchmark code, in the
 * benchmarks' library only. Its own cuBLASLt descriptors and algorithm per (device, shape,
 * workspace), made on first use and kept for the process (a benchmark's few shapes); the workspace
 * is one buffer per device, grown on first use, so a timed call allocates nothing. It runs on the
 * backend's stream with the backend's cuBLASLt handle. Single-threaded, like the benchmarks. */
#include "support_cuda_baseline.h"
#include "cuda_internal.cuh"

#define BASE_PLANS 64
#define BASE_DEVS 16

struct base_plan {
	int dev;
	int64_t m, n, k;
	size_t ws;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
};

static struct base_plan base_plans[BASE_PLANS];
static int base_nplans;
static void *base_ws[BASE_DEVS];
static size_t base_ws_bytes[BASE_DEVS];

static int base_check(cublasStatus_t s, fos_err *err, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return FOS_OK;
	return fos_seterr(err, FOS_EINTERNAL, "%s: %s", what, cublasLtGetStatusString(s));
}

/* Row-major y (m, n) = a b^T is column-major y^T = b^T a: cuBLASLt's A is b (k x n, op T), its B is
 * a (k x m, op N), D is n x m (ld n), as in cuda_gemm.cu. */
static int base_plan_make(cublasLtHandle_t lt, struct base_plan *p, fos_err *err)
{
	const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	int rc = base_check(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), err,
			    "cublasLtMatmulDescCreate");
	if (!rc)
		rc = base_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), err,
				"cublasLtMatmulDescSetAttribute (TRANSA)");
	if (!rc)
		rc = base_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), err,
				"cublasLtMatmulDescSetAttribute (TRANSB)");
	if (!rc)
		rc = base_check(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)p->k, (uint64_t)p->n, p->k), err,
				"cublasLtMatrixLayoutCreate (A)");
	if (!rc)
		rc = base_check(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)p->k, (uint64_t)p->m, p->k), err,
				"cublasLtMatrixLayoutCreate (B)");
	if (!rc)
		rc = base_check(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_16BF, (uint64_t)p->n, (uint64_t)p->m, p->n), err,
				"cublasLtMatrixLayoutCreate (D)");
	cublasLtMatmulPreference_t pref = 0;
	if (!rc)
		rc = base_check(cublasLtMatmulPreferenceCreate(&pref), err, "cublasLtMatmulPreferenceCreate");
	if (!rc)
		rc = base_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->ws,
								     sizeof p->ws),
				err, "cublasLtMatmulPreferenceSetAttribute (workspace)");
	cublasLtMatmulHeuristicResult_t res;
	int nres = 0;
	if (!rc)
		rc = base_check(cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &nres),
				err, "cublasLtMatmulAlgoGetHeuristic");
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (!rc && (nres <= 0 || res.state != CUBLAS_STATUS_SUCCESS))
		rc = fos_seterr(err, FOS_EINTERNAL, "cuBLASLt has no algorithm for a bf16 GEMM M=%lld N=%lld K=%lld",
				(long long)p->m, (long long)p->n, (long long)p->k);
	if (!rc) {
		p->algo = res.algo;
		return FOS_OK;
	}
	if (p->ld)
		cublasLtMatrixLayoutDestroy(p->ld);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	return rc;
}

extern "C" int fos_cuda_gemm_baseline(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n,
				      int64_t k, uint16_t *y, size_t ws_bytes, fos_err *err)
{
	if (!be || strcmp(be->name, "cuda"))
		return fos_seterr(err, FOS_EINVAL, "the baseline GEMM needs a cuda backend");
	if (m <= 0 || n <= 0 || k <= 0)
		return fos_seterr(err, FOS_EINVAL, "gemm shape M=%lld N=%lld K=%lld must be positive", (long long)m,
				  (long long)n, (long long)k);
	struct fcu_impl *im = fcu(be);
	if (im->dev < 0 || im->dev >= BASE_DEVS)
		return fos_seterr(err, FOS_EINVAL, "the baseline GEMM serves devices 0..%d, not %d", BASE_DEVS - 1, im->dev);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	if (ws_bytes > base_ws_bytes[im->dev]) {
		void *p = 0;
		if ((rc = fcu_check(cudaStreamSynchronize(im->st), err, "cudaStreamSynchronize")) ||
		    (rc = fcu_check(cudaMalloc(&p, ws_bytes), err, "cudaMalloc (baseline workspace)")))
			return rc;
		cudaFree(base_ws[im->dev]);
		base_ws[im->dev] = p;
		base_ws_bytes[im->dev] = ws_bytes;
	}
	struct base_plan *p = 0;
	for (int i = 0; i < base_nplans && !p; i++) {
		struct base_plan *e = &base_plans[i];
		if (e->dev == im->dev && e->m == m && e->n == n && e->k == k && e->ws == ws_bytes)
			p = e;
	}
	if (!p) {
		if (base_nplans == BASE_PLANS)
			return fos_seterr(err, FOS_ENOMEM, "the baseline GEMM keeps %d shapes: no room for another",
					  BASE_PLANS);
		p = &base_plans[base_nplans];
		memset(p, 0, sizeof *p);
		p->dev = im->dev;
		p->m = m;
		p->n = n;
		p->k = k;
		p->ws = ws_bytes;
		if ((rc = base_plan_make(im->lt, p, err)))
			return rc;
		base_nplans++;
	}
	const float one = 1.0f, zero = 0.0f;
	return base_check(cublasLtMatmul(im->lt, p->op, &one, b, p->la, a, p->lb, &zero, y, p->ld, y, p->ld, &p->algo,
					 ws_bytes ? base_ws[im->dev] : 0, ws_bytes, im->st),
			  err, "cublasLtMatmul");
}
