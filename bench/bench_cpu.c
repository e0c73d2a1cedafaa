/* bench_cpu.c: CPU backend timings for bench/BENCHMARKS.md: 4/6 quantize of a 4096x4096 bf16
 * tensor (amax pass included), a 1024x4096x4096 forward with the weight already quantized, and
 * as the baseline measured in the same run, a plain bf16 GEMM of the same shape (the forward's
 * own GEMM) and a memcpy of the input. Usage: bench_cpu [threads] [reps] */
#include "backend.h"
#include "bench_util.h"
#include "fos_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint16_t *rand_bf16(int64_t n, float scale)
{
	uint16_t *p = malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		p[i] = fos_f32_to_bf16(bench_frand(&rng) * scale);
	return p;
}

#define TIME_BEST(label, reps, stmt)                                                                          \
	do {                                                                                                  \
		double best = 1e30;                                                                           \
		for (int r_ = 0; r_ < (reps); r_++) {                                                         \
			double t0_ = bench_now();                                                             \
			stmt;                                                                                 \
			double dt_ = bench_now() - t0_;                                                       \
			best = dt_ < best ? dt_ : best;                                                       \
		}                                                                                             \
		label = best;                                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 0;
	int reps = argc > 2 ? atoi(argv[2]) : 3;
	fos_err err = {0};
	fos_backend *be = fos_backend_cpu(threads, &err);
	if (!be) {
		fprintf(stderr, "bench_cpu: %s\n", err.msg);
		return 1;
	}
	const int64_t R = 4096, C = 4096, M = 1024, N = 4096, K = 4096;
	uint16_t *x = rand_bf16(R * C, 3.0f);
	uint16_t *xm = rand_bf16(M * K, 3.0f), *w = rand_bf16(N * K, 0.05f);
	uint16_t *y = malloc((size_t)(M * N) * 2), *copy = malloc((size_t)(R * C) * 2);
	fos_qtensor q;
	if (fos_qtensor_alloc(be, &q, R, C, 0, &err))
		return 1;
	fos_qcfg cfg = fos_qcfg_default();
	double t_copy, t_q, t_q16, t_fwd, t_gemm;
	TIME_BEST(t_copy, reps, memcpy(copy, x, (size_t)(R * C) * 2));
	TIME_BEST(t_q, reps, be->quantize(be, x, FOS_BF16, R, C, &cfg, 0, &q, 0, &err));
	cfg.block = FOS_BLOCK_16X16;
	TIME_BEST(t_q16, reps, be->quantize(be, x, FOS_BF16, R, C, &cfg, 0, &q, 0, &err));

	fos_linear_opts o = fos_linear_opts_default();
	fos_qweight qw;
	if (fos_qweight_make(be, w, N, K, &o, 0, 0, &qw, &err)) {
		fprintf(stderr, "bench_cpu: %s\n", err.msg);
		return 1;
	}
	TIME_BEST(t_fwd, reps, fos_linear_forward(be, xm, M, &qw, &o, 0, y, 0, &err));
	fos_gemm_epi plain = fos_gemm_epi_plain();
	uint16_t *wdec = be->alloc(be, (size_t)(N * K) * 2); /* the weight's decoded GEMM operand */
	if (!wdec || fos_qweight_decode(be, &qw, 0, wdec, &err)) {
		fprintf(stderr, "bench_cpu: decoding the weight failed\n");
		return 1;
	}
	TIME_BEST(t_gemm, reps, be->gemm(be, xm, wdec, M, N, K, &plain, y, &err));
	be->free(be, wdec);
	if (err.rc) {
		fprintf(stderr, "bench_cpu: %s\n", err.msg);
		return 1;
	}
	printf("backend: %s\n", be->device);
	printf("memcpy 4096x4096 bf16 (baseline)         : %8.2f ms\n", t_copy * 1e3);
	printf("4/6 quantize 4096x4096 bf16 1x16 +amax    : %8.2f ms  (%.1fx memcpy)\n", t_q * 1e3, t_q / t_copy);
	printf("4/6 quantize 4096x4096 bf16 16x16 +amax   : %8.2f ms  (%.1fx memcpy)\n", t_q16 * 1e3, t_q16 / t_copy);
	printf("bf16 GEMM 1024x4096x4096 (baseline)       : %8.2f ms  (%.1f GFLOP/s)\n", t_gemm * 1e3,
	       2.0 * M * N * K / t_gemm * 1e-9);
	printf("forward 1024x4096x4096, cached W          : %8.2f ms  (%.2fx the bf16 GEMM)\n", t_fwd * 1e3,
	       t_fwd / t_gemm);
	fos_qweight_free(be, &qw);
	fos_qtensor_free(be, &q);
	be->destroy(be);
	free(x);
	free(xm);
	free(w);
	free(y);
	free(copy);
	return 0;
}
