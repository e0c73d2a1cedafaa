/* support_smallm_variants.cu: fos_cuda_smallm_variant and fos_cuda_smallm_variants
 * (support_smallm_variants.h): test and bench code, in the tests' and the benchmarks' libraries
 * only. Instantiates every kernel variant of cuda_smallm_kern.cuh, the k_w4 tiles the shape rule
 * picks among and the shared-memory decode (SDEC) forms measured against them, and runs one with a
 * forced ring depth through the shipped launcher (w4_launch), so a variant's launch differs from
 * fosd's only in its tile and stage count. Invariants: variant numbers and names are those of
 * bench/BENCHMARKS.md's sessions 8 and 9 (the table's order); the backend's ops are
 * fcu_w4_takes and fcu_gemm_w4 exactly when variant -1 with stages 0 is set; after a swap to or
 * from the forced launcher the instance has no recorded CUDA graph. */
#include "support_smallm_variants.h"
#include "cuda_smallm_kern.cuh"

#include <stdio.h>

static const struct w4_variant w4_all[] = {
	W4_TILE(1, 1, 4, 1), /* 0 */
	W4_TILE(1, 2, 4, 1),
	W4_TILE(1, 1, 8, 1),
	W4_TILE(2, 1, 4, 1),
	W4_TILE(1, 2, 2, 4),
	W4_TILE(2, 2, 4, 2), /* 5 */
	W4_TILE(4, 1, 4, 1),
	W4_TILE(2, 2, 2, 4),
	W4_TILE(4, 2, 4, 2),
	W4_TILE(2, 4, 2, 4),
	W4_TILE(1, 1, 4, 4), /* 10 */
	W4_TILE(2, 1, 4, 4),
	W4_TILE(1, 2, 2, 1),
	W4_TILE(1, 1, 2, 1),
	W4_SDEC(1, 512),
	W4_SDEC(1, 256), /* 15 */
	W4_SDEC(2, 256),
	W4_SDEC(4, 256),
	W4_SDEC(2, 512),
	W4_WSP(1, 4),
	W4_WSP(1, 8), /* 20 */
	W4_WSP(1, 2),
	W4_WSP(2, 4),
	W4_RP(1, 10), /* 23 */
	W4_RP(1, 6),
	W4_WSP_NODEC(1, 4), /* probes (wrong bits) last: fos_cuda_smallm_variants() counts up to them */
};
#define W4_NVAR ((int)(sizeof w4_all / sizeof w4_all[0]))
#define W4_NPROBE 1

/* The forced launcher's choice: a variant of w4_all (-1: the shape rule's tile) and the ring depth
 * (0: the launcher's). */
static int g_variant = -1, g_stages;

static int gemm_w4_forced(fos_backend *be, const uint16_t *a, const fos_qtensor *w, int64_t m, const fos_gemm_epi *epi,
			  uint16_t *y, fos_err *err)
{
	const struct w4_variant *v = g_variant >= 0 ? &w4_all[g_variant] : fcu_w4_pick(m, w->rows);
	return w4_launch(be, v, g_stages, a, w, m, epi, y, err);
}

static int takes_where_it_runs(fos_backend *be, int64_t m, int64_t n, int64_t k)
{
	(void)be;
	return w4_runs(m, n, k);
}

extern "C" int fos_cuda_smallm_variant(fos_backend *be, int variant, int stages, char *name, size_t len, fos_err *err)
{
	if (!be || strcmp(be->name, "cuda"))
		return fos_seterr(err, FOS_EINVAL, "not a cuda backend");
	if (variant < -2 || variant >= W4_NVAR)
		return fos_seterr(err, FOS_EINVAL,
				  "small-M variant %d: there are %d (0..%d; -1: the shape rule; -2: the shape rule's tile "
				  "wherever the kernel runs)",
				  variant, W4_NVAR, W4_NVAR - 1);
	if (stages != 0 && (stages < 4 || stages > W4_MAXS))
		return fos_seterr(err, FOS_EINVAL, "small-M stages %d: 4..%d, or 0 for the launcher's choice", stages,
				  W4_MAXS);
	const int forced = variant >= 0 || stages != 0;
	if (forced || be->gemm_w4 == gemm_w4_forced) {
		int rc = be->sync(be, err);
		if (rc)
			return rc;
		fcu_graph_release(be);
	}
	g_variant = variant >= 0 ? variant : -1;
	g_stages = stages;
	be->gemm_w4 = forced ? gemm_w4_forced : fcu_gemm_w4;
	be->gemm_w4_takes = variant == -1 ? fcu_w4_takes : takes_where_it_runs;
	if (name && len)
		snprintf(name, len, "%s", variant >= 0 ? w4_all[variant].name : "by shape");
	return FOS_OK;
}

extern "C" int fos_cuda_smallm_variants(void)
{
	return W4_NVAR - W4_NPROBE;
}

extern "C" int fos_cuda_smallm_all(void)
{
	return W4_NVAR;
}
