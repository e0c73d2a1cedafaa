/* support_smallm_variants.h: the small-M GEMM's kernel variants and ring depths (be->gemm_w4,
 * kernels/cuda_smallm_kern.cuh) that the GPU tests check and the benchmarks time, on a CUDA backend
 * instance (support_smallm_variants.cu, built into the tests' and the benchmarks' libraries with
 * CUDA=1; libfosnum, which fosd and fos link, instantiates only the tiles its shape rule picks and
 * has no such switch). Each call swaps the instance's gemm_w4 and gemm_w4_takes entries; every
 * variant and ring depth gives the same bits: that is what the tests check. Not thread-safe: call
 * between ops of the instance; one forced variant per process (the last call's), whichever
 * instance runs it. */
#ifndef FOS_SUPPORT_SMALLM_VARIANTS_H
#define FOS_SUPPORT_SMALLM_VARIANTS_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* variant -1: the backend's own ops (the shape rule: which shapes take the kernel, which tile runs
 * them); 0 .. fos_cuda_smallm_variants() - 1: that variant at every shape; -2: the shape rule's
 * tile. With a variant or -2, be->gemm_w4_takes answers 1 wherever the kernel runs (M <= 128), so
 * the forward uses it there. stages 0 lets the launcher size the cp.async ring, 4..16 forces it.
 * name (may be NULL) gets the variant's tile shape ("by shape" for -1 and -2). Forcing a variant or
 * a ring depth, or leaving one, syncs the instance and drops its recorded CUDA graphs (so no replay
 * runs work recorded with other ops); -1 and -2 switch between each other without either (the
 * forward's replay key says whether gemm_w4 is taken). FOS_OK, or FOS_EINVAL naming the bad value
 * (err set). */
int fos_cuda_smallm_variant(fos_backend *be, int variant, int stages, char *name, size_t len, fos_err *err);

/* How many variants give the kernel's bits: the k_w4 tiles, the shared-memory decode (SDEC) forms,
 * the warp-specialised (WSP) forms. */
int fos_cuda_smallm_variants(void);

/* How many there are with the timing probes (wrong bits, bench only), numbered after them. */
int fos_cuda_smallm_all(void);

#ifdef __cplusplus
}
#endif

#endif
