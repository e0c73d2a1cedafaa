/* cuda_smallm.cu: the CUDA backend's small-M forward GEMM as fosd runs it (be->gemm_w4 and
 * be->gemm_w4_takes): the shape rule, i.e. which shapes take the kernel (fcu_w4_takes) and which
 * tile runs them (fcu_w4_pick), over the kernels and launcher of cuda_smallm_kern.cuh, whose head
 * states why its bits are those of be->decode + be->gemm at every M, tile and ring depth.
 *
 * Invariants: this unit instantiates only the tiles fcu_w4_pick returns, and the launcher sizes the
 * ring itself; the backend's state holds no choice of tile or ring. Other variants and forced ring
 * depths are test and bench code (tests/support_smallm_variants.cu, which swaps the instance's
 * gemm_w4 and gemm_w4_takes entries). */
#include "cuda_smallm_kern.cuh"

/* The tiles the shape rule picks. */
static const struct w4_variant w4_picks[] = {
	W4_TILE(1, 1, 4, 1),
	W4_TILE(1, 2, 4, 1),
	W4_TILE(2, 1, 4, 1),
	W4_TILE(2, 2, 4, 2),
	W4_TILE(4, 2, 4, 2),
	W4_RP(1, 10),
};

/* The tile for m rows of an (n, k) weight: the fastest of bench_cuda smallm variants (H200,
 * BENCHMARKS.md session 8, run 3; k_w4r at M <= 4 below N = 8192: session 10). */
const struct w4_variant *fcu_w4_pick(int64_t m, int64_t n)
{
	const int wide = n >= 8192; /* enough N tiles for 2 per warp */
	if (m <= 4 && !wide)
		return &w4_picks[5];
	if (m <= 16)
		return &w4_picks[wide ? 1 : 0];
	if (m <= 32)
		return &w4_picks[2];
	if (m <= 64)
		return &w4_picks[wide ? 3 : 2];
	return &w4_picks[wide ? 4 : 3];
}

/* The shapes the forward gives it: those where the forward with it was faster than with be->decode
 * + be->gemm (H200, bench_cuda smallm, BENCHMARKS.md session 8, run 3: M <= 16 at 4096x4096,
 * 4096x14336 and 14336x4096; M = 32 at the two larger ones, not at 4096x4096; M = 64 at none).
 * Either gives the same bits, so this is speed only. */
int fcu_w4_takes(fos_backend *be, int64_t m, int64_t n, int64_t k)
{
	(void)be;
	if (!w4_runs(m, n, k))
		return 0;
	return m <= 16 || (m <= 32 && n * k >= ((int64_t)1 << 25));
}

int fcu_gemm_w4(fos_backend *be, const uint16_t *a, const fos_qtensor *w, int64_t m, const fos_gemm_epi *epi,
		uint16_t *y, fos_err *err)
{
	return w4_launch(be, fcu_w4_pick(m, w->rows), 0, a, w, m, epi, y, err);
}

void fcu_smallm_install(fos_backend *be)
{
	be->gemm_w4_takes = fcu_w4_takes;
	be->gemm_w4 = fcu_gemm_w4;
}
