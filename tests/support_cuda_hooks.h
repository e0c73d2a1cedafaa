/* support_cuda_hooks.h: the GEMM path and launch grid the GPU tests force on a CUDA backend
 * instance (support_cuda_hooks.cu, built into the tests' library with CUDA=1; libfosnum, which
 * fosd and fos link, has no such switch). Each swaps entries of the instance's op table for ones
 * that run the same kernels another way, and drops the instance's recorded CUDA graphs, so that no
 * replay runs work recorded the other way. Same bytes either way: that is what the tests check.
 * Not thread-safe: call between ops of the instance. */
#ifndef FOS_SUPPORT_CUDA_HOOKS_H
#define FOS_SUPPORT_CUDA_HOOKS_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1: every gemm and gemm_ex writes FP32 and runs the backend's own epilogue kernel; 0 (the
 * backend's own): GEMMs whose epilogue is only alpha write bf16 straight from cuBLASLt (alpha
 * applied by cuBLASLt), those with a row scale use the FP32 path, and a bias is added by a separate
 * kernel in both. */
int fos_cuda_set_gemm_f32(fos_backend *be, int on, fos_err *err);

/* 1: every quantize, quantize_t and grad_pair launch runs on one CTA (a persistent kernel then
 * walks every work item itself, so each cp.async ring buffer is refilled many times at small
 * shapes); 0 (the backend's own): grids sized by occupancy. */
int fos_cuda_set_one_cta(fos_backend *be, int on, fos_err *err);

#ifdef __cplusplus
}
#endif

#endif
