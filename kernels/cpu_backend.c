/* cpu_backend.c: the CPU backend's constructor, memory ops (host memory, memcpy), transpose and
 * the grad-bias column sum. The numerics live in cpu_quant.c and cpu_gemm.c. */
#include "cpu_internal.h"
#include "fos_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *cpu_alloc(fos_backend *be, size_t bytes)
{
	(void)be;
	void *p = 0;
	if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64))
		return 0;
	return p;
}

static void cpu_free(fos_backend *be, void *p)
{
	(void)be;
	free(p);
}

static int cpu_copy(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	(void)be;
	(void)err;
	if (n && dst != src)
		memmove(dst, src, n);
	return FOS_OK;
}

static int cpu_zero(fos_backend *be, void *dst, size_t n, fos_err *err)
{
	(void)be;
	(void)err;
	if (n)
		memset(dst, 0, n);
	return FOS_OK;
}

static int cpu_sync(fos_backend *be, fos_err *err)
{
	(void)be;
	(void)err;
	return FOS_OK;
}

typedef struct {
	const uint8_t *src;
	uint8_t *dst;
	int64_t rows, cols;
	size_t es;
} tr_job;

/* Destination rows [r0, r1) (= source columns), in 32-wide tiles of source rows for locality. */
static void tr_rows(void *ctx, int64_t c0, int64_t c1)
{
	tr_job *j = ctx;
	for (int64_t rb = 0; rb < j->rows; rb += 32) {
		int64_t re = rb + 32 < j->rows ? rb + 32 : j->rows;
		for (int64_t c = c0; c < c1; c++)
			for (int64_t r = rb; r < re; r++)
				memcpy(j->dst + (c * j->rows + r) * j->es, j->src + (r * j->cols + c) * j->es, j->es);
	}
}

static int cpu_transpose(fos_backend *be, const void *src, void *dst, int64_t rows, int64_t cols, size_t es,
			 fos_err *err)
{
	if (rows <= 0 || cols <= 0 || (es != 1 && es != 2 && es != 4))
		return fos_seterr(err, FOS_EINVAL, "transpose of (%lld, %lld) x %zu bytes", (long long)rows,
				  (long long)cols, es);
	tr_job j = {src, dst, rows, cols, es};
	fos_parallel_for(cpu_threads(be), cols, 64, tr_rows, &j);
	return FOS_OK;
}

typedef struct {
	const uint16_t *dy;
	int64_t m, n;
	uint16_t *db;
} colsum_job;

static void colsum_cols(void *ctx, int64_t c0, int64_t c1)
{
	colsum_job *j = ctx;
	for (int64_t c = c0; c < c1; c++) {
		float s = 0.0f;
		for (int64_t r = 0; r < j->m; r++) /* strictly in row order */
			s = s + fos_bf16_to_f32(j->dy[r * j->n + c]);
		j->db[c] = fos_f32_to_bf16(s);
	}
}

static int cpu_colsum(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, uint16_t *db, fos_err *err)
{
	if (m <= 0 || n <= 0)
		return fos_seterr(err, FOS_EINVAL, "column sum of (%lld, %lld)", (long long)m, (long long)n);
	colsum_job j = {dy, m, n, db};
	fos_parallel_for(cpu_threads(be), n, 64, colsum_cols, &j);
	return FOS_OK;
}

static void cpu_destroy(fos_backend *be)
{
	if (!be)
		return;
	free(be->impl);
	free(be);
}

fos_backend *fos_backend_cpu(int threads, fos_err *err)
{
	if (threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (int)n : 1;
	}
	fos_backend *be = calloc(1, sizeof *be);
	cpu_impl *impl = calloc(1, sizeof *impl);
	if (!be || !impl) {
		free(be);
		free(impl);
		fos_seterr(err, FOS_ENOMEM, "out of memory creating the cpu backend");
		return 0;
	}
	impl->threads = threads;
	be->name = "cpu";
	snprintf(be->device, sizeof be->device, "CPU, %d thread%s", threads, threads == 1 ? "" : "s");
	be->impl = impl;
	be->destroy = cpu_destroy;
	be->alloc = cpu_alloc;
	be->free = cpu_free;
	be->h2d = cpu_copy;
	be->d2h = cpu_copy;
	be->d2d = cpu_copy;
	be->sync = cpu_sync;
	be->zero = cpu_zero;
	be->amax = cpu_amax;
	be->transpose = cpu_transpose;
	be->quantize = cpu_quantize;
	be->quantize_t = cpu_quantize_t;
	be->dequantize = cpu_dequantize;
	be->decode = cpu_decode;
	be->gemm = cpu_gemm;
	be->gemm_ex = cpu_gemm_ex;
	be->colsum = cpu_colsum;
	return be;
}
