/* support_cuda_baseline.h: the plain cuBLASLt GEMM the benchmarks compare the backend's GEMMs with
 * (support_cuda_baseline.cu, built into the benchmarks' library with CUDA=1; libfosnum, which fosd
 * and fos link, has none). */
#ifndef FOS_SUPPORT_CUDA_BASELINE_H
#define FOS_SUPPORT_CUDA_BASELINE_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = a b^T, a (m, k) and b (n, k) row-major bf16, y (m, n) bf16 (alpha 1), on be's stream, with
 * cuBLASLt's first heuristic choice under a workspace of ws_bytes (split-K allowed): the baseline
 * the benchmarks compare against. FOS_OK or an error code with err set. */
int fos_cuda_gemm_baseline(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n,
			   int64_t k, uint16_t *y, size_t ws_bytes, fos_err *err);

#ifdef __cplusplus
}
#endif

#endif
