/* cpu_gemm.c: the CPU bf16 x bf16 -> FP32 GEMM (y = a b^T) with the NUMERICS.md section 7
 * epilogue. Every output element is accumulated strictly in k order, c = (((0 + a0 b0) + a1 b1)
 * + ...), one rounding per multiply and per add (no FMA), so the result depends on nothing but
 * the inputs: not the thread count, the blocking or the vector width. Blocked for cache (KC x NC
 * panels of B, MR x NR register tiles); partial sums live in an FP32 buffer between K blocks. */
#include "cpu_internal.h"
#include "fos_format.h"

#include <stdlib.h>

#define MR 8
#define NR 32
#define KC 256
#define NC 256

typedef float v16 __attribute__((vector_size(64), aligned(4)));

/* c[MR][NR] (+)= sum_k ap[k][i] * bp[k][j], in k order. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
micro_kernel(int kc, const float *ap, const float *bp, float *c, int64_t ldc, int first)
{
	v16 acc[MR][2];
	for (int i = 0; i < MR; i++) {
		if (first) {
			acc[i][0] = (v16){0};
			acc[i][1] = (v16){0};
		} else {
			acc[i][0] = *(const v16 *)(c + i * ldc);
			acc[i][1] = *(const v16 *)(c + i * ldc + 16);
		}
	}
	for (int k = 0; k < kc; k++) {
		v16 b0 = *(const v16 *)(bp + k * NR);
		v16 b1 = *(const v16 *)(bp + k * NR + 16);
		for (int i = 0; i < MR; i++) {
			float a = ap[k * MR + i];
			acc[i][0] = acc[i][0] + a * b0;
			acc[i][1] = acc[i][1] + a * b1;
		}
	}
	for (int i = 0; i < MR; i++) {
		*(v16 *)(c + i * ldc) = acc[i][0];
		*(v16 *)(c + i * ldc + 16) = acc[i][1];
	}
}

typedef struct {
	const uint16_t *a, *b;
	int ta, tb; /* stored transposed: a (K, M), b (K, N) */
	int64_t m, n, k;
	int64_t mpad; /* m rounded up to MR */
	float *c;     /* mpad x npad partial sums */
	int64_t ldc;  /* npad */
	int oom;
} gemm_job;

/* Each item is one NR-wide column panel range; a thread packs what it needs itself. */
static void gemm_cols(void *ctx, int64_t p0, int64_t p1)
{
	gemm_job *j = ctx;
	float *ap = malloc((size_t)j->mpad * KC * sizeof(float));
	float *bp = malloc((size_t)NC * KC * sizeof(float));
	if (!ap || !bp) {
		free(ap);
		free(bp);
		j->oom = 1;
		return;
	}
	int64_t n0 = p0 * NR, n1 = p1 * NR;
	for (int64_t kb = 0; kb < j->k; kb += KC) {
		int kc = (int)(j->k - kb < KC ? j->k - kb : KC);
		/* A block: mpad/MR panels of kc x MR floats, zero rows past m. */
		for (int64_t mp = 0; mp < j->mpad; mp += MR)
			for (int kk = 0; kk < kc; kk++)
				for (int i = 0; i < MR; i++)
					ap[mp * kc + kk * MR + i] =
						mp + i >= j->m ? 0.0f
						: fos_bf16_to_f32(j->ta ? j->a[(kb + kk) * j->m + mp + i]
									: j->a[(mp + i) * j->k + kb + kk]);
		for (int64_t nb = n0; nb < n1; nb += NC) {
			int64_t nc = n1 - nb < NC ? n1 - nb : NC;
			for (int64_t np = 0; np < nc; np += NR)
				for (int jj = 0; jj < NR; jj++) {
					int64_t col = nb + np + jj;
					for (int kk = 0; kk < kc; kk++)
						bp[np * kc + kk * NR + jj] =
							col >= j->n ? 0.0f
							: fos_bf16_to_f32(j->tb ? j->b[(kb + kk) * j->n + col]
										: j->b[col * j->k + kb + kk]);
				}
			for (int64_t mp = 0; mp < j->mpad; mp += MR)
				for (int64_t np = 0; np < nc; np += NR)
					micro_kernel(kc, ap + mp * kc, bp + np * kc, j->c + mp * j->ldc + nb + np, j->ldc,
						     kb == 0);
		}
	}
	free(ap);
	free(bp);
}

typedef struct {
	const float *c;
	int64_t ldc, n;
	float alpha;
	const float *row_scale;
	const uint16_t *bias;
	uint16_t *y;
} epi_job;

static void epi_rows(void *ctx, int64_t r0, int64_t r1)
{
	epi_job *j = ctx;
	for (int64_t r = r0; r < r1; r++)
		for (int64_t c = 0; c < j->n; c++) {
			float t = j->c[r * j->ldc + c] * j->alpha;
			if (j->row_scale)
				t = t * j->row_scale[r];
			uint16_t y = fos_f32_to_bf16(t);
			if (j->bias)
				y = fos_f32_to_bf16(fos_bf16_to_f32(y) + fos_bf16_to_f32(j->bias[c]));
			j->y[r * j->n + c] = y;
		}
}

int cpu_gemm(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
	     const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	return cpu_gemm_ex(be, a, 0, b, 0, m, n, k, epi, y, err);
}

int cpu_gemm_ex(fos_backend *be, const uint16_t *a, int ta, const uint16_t *b, int tb, int64_t m, int64_t n,
		int64_t k, const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	if (m <= 0 || n <= 0 || k <= 0)
		return fos_seterr(err, FOS_EINVAL, "gemm shape M=%lld N=%lld K=%lld must be positive", (long long)m,
				  (long long)n, (long long)k);
	fos_gemm_epi plain = fos_gemm_epi_plain();
	if (!epi)
		epi = &plain;
	int64_t panels = (n + NR - 1) / NR;
	int64_t mpad = (m + MR - 1) / MR * MR;
	gemm_job j = {a, b, ta != 0, tb != 0, m, n, k, mpad, 0, panels * NR, 0};
	j.c = malloc((size_t)mpad * (size_t)j.ldc * sizeof(float));
	if (!j.c)
		return fos_seterr(err, FOS_ENOMEM, "out of memory for a %lld x %lld FP32 accumulator", (long long)m,
				  (long long)n);
	/* Work is split by column panels; each panel range is done by one thread. */
	fos_parallel_for(cpu_threads(be), panels, 1, gemm_cols, &j);
	if (j.oom) {
		free(j.c);
		return fos_seterr(err, FOS_ENOMEM, "out of memory for GEMM packing buffers");
	}
	float ga = epi->a_amax ? epi->a_amax[0] * epi->a_dinv : epi->a_dinv;
	float gb = epi->b_amax ? epi->b_amax[0] * epi->b_dinv : epi->b_dinv;
	epi_job e = {j.c, j.ldc, n, ga * gb, epi->row_scale, epi->bias, y};
	fos_parallel_for(cpu_threads(be), m, 1 + 65536 / n, epi_rows, &e);
	free(j.c);
	return FOS_OK;
}
