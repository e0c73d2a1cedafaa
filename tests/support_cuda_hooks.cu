/* support_cuda_hooks.cu: fos_cuda_set_gemm_f32 and fos_cuda_set_one_cta (support_cuda_hooks.h):
 * test code, in the GPU tests' library only. The backend's ops table points at its launchers with
 * the shipped choices (cuda_backend.cu); these swap in launchers with the other choice
 * (fcu_gemm_path with f32 1, fcu_*_cta with one CTA) and back. Invariant: after a swap the
 * instance has no recorded CUDA graph (fcu_graph_release, after a sync), so every replay records
 * anew with the ops of now. */
#include "support_cuda_hooks.h"
#include "cuda_internal.cuh"

static int gemm_f32(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
		    const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	return fcu_gemm_path(be, a, 0, b, 0, m, n, k, epi, y, 1, err);
}

static int gemm_ex_f32(fos_backend *be, const uint16_t *a, int trans_a, const uint16_t *b, int trans_b, int64_t m,
		       int64_t n, int64_t k, const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	return fcu_gemm_path(be, a, trans_a, b, trans_b, m, n, k, epi, y, 1, err);
}

static int quantize_one(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	return fcu_quantize_cta(be, x, dtype, rows, cols, cfg, amax_in, q, decoded, 1, err);
}

static int quantize_t_one(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			  const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	return fcu_quantize_t_cta(be, x, dtype, rows, cols, cfg, amax_in, q, decoded, 1, err);
}

static int grad_pair_one(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, const float *amax,
			 uint16_t *dec_rows, uint16_t *dec_cols_t, fos_err *err)
{
	return fcu_grad_pair_cta(be, dy, m, n, amax, dec_rows, dec_cols_t, 1, err);
}

/* A cuda instance, synced and with no recorded graph: ready for its ops to change. */
static int hooks_begin(fos_backend *be, fos_err *err)
{
	if (!be || strcmp(be->name, "cuda"))
		return fos_seterr(err, FOS_EINVAL, "not a cuda backend");
	int rc = be->sync(be, err);
	if (!rc)
		fcu_graph_release(be);
	return rc;
}

extern "C" int fos_cuda_set_gemm_f32(fos_backend *be, int on, fos_err *err)
{
	int rc = hooks_begin(be, err);
	if (rc)
		return rc;
	be->gemm = on ? gemm_f32 : fcu_gemm;
	be->gemm_ex = on ? gemm_ex_f32 : fcu_gemm_ex;
	return FOS_OK;
}

extern "C" int fos_cuda_set_one_cta(fos_backend *be, int on, fos_err *err)
{
	int rc = hooks_begin(be, err);
	if (rc)
		return rc;
	be->quantize = on ? quantize_one : fcu_quantize;
	be->quantize_t = on ? quantize_t_one : fcu_quantize_t;
	be->grad_pair = on ? grad_pair_one : fcu_grad_pair;
	return FOS_OK;
}
