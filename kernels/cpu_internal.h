/* cpu_internal.h: the CPU backend's ops, shared between its files (cpu_backend.c, cpu_quant.c,
 * cpu_gemm.c). Not part of the public interface. */
#ifndef FOS_CPU_INTERNAL_H
#define FOS_CPU_INTERNAL_H

#include "backend.h"
#include "cpu_pool.h"

typedef struct {
	int threads;
} cpu_impl;

static inline int cpu_threads(fos_backend *be)
{
	return ((cpu_impl *)be->impl)->threads;
}

int cpu_amax(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, int per_row, float *out,
	     fos_err *err);
int cpu_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		 const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err);
int cpu_quantize_t(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		   const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err);
int cpu_dequantize(fos_backend *be, const fos_qtensor *q, int out_dtype, void *out, fos_err *err);
int cpu_decode(fos_backend *be, const fos_qtensor *q, uint16_t *out, fos_err *err);
int cpu_gemm(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
	     const fos_gemm_epi *epi, uint16_t *y, fos_err *err);
int cpu_gemm_ex(fos_backend *be, const uint16_t *a, int ta, const uint16_t *b, int tb, int64_t m, int64_t n,
		int64_t k, const fos_gemm_epi *epi, uint16_t *y, fos_err *err);

#endif
