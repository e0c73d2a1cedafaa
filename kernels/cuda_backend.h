/* cuda_backend.h: CUDA-only extras of the CUDA backend (kernels/cuda_*.cu): stream-event timing,
 * the h2d and CUDA-graph switches fosd sets and the chosen GEMM algorithm's description (per
 * operand layout). Every function returns FOS_OK or an error code with err set. What only tests and
 * benchmarks use lives with them: the GEMM path and grid the GPU tests force
 * (tests/support_cuda_hooks.h), the small-M GEMM's kernel variants and ring depths they run
 * (tests/support_smallm_variants.h), the baseline cuBLASLt GEMM of the benchmarks
 * (bench/support_cuda_baseline.h), the self-tests of the kernels' fast forms
 * (tests/support_cuda_selftest.h). The backend itself is made with fos_backend_cuda (backend.h).
 * Only defined in builds with CUDA (FOS_HAVE_CUDA); callers guard their uses with
 * #ifdef FOS_HAVE_CUDA. */
#ifndef FOS_CUDA_BACKEND_H
#define FOS_CUDA_BACKEND_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records event number slot (0..31) on the backend's stream. */
int fos_cuda_mark(fos_backend *be, int slot, fos_err *err);
/* Waits for event b and gives the milliseconds between events a and b. */
int fos_cuda_elapsed_ms(fos_backend *be, int a, int b, float *ms, fos_err *err);

/* 1: be->h2d queues the copy and returns without waiting for it (the caller then keeps src unchanged
 * and mapped until its next d2h or sync on this instance; fosd's executor does: its sources live
 * until the request is answered, and it syncs after every request); 0 (default): h2d waits, so
 * src may be reused at once, as backend.h promises. Same bytes either way; saves the host's wait
 * for the DMA, during which the following kernels are now queued. */
int fos_cuda_set_h2d_nowait(fos_backend *be, int on, fos_err *err);

/* 1: no queued work, on any stream, reads the memory be->free is given on this instance (fosd's
 * retired cache frees run only once every request that could read it has completed), so its
 * blocks go to a list that every instance of the device takes from; 0 (default): its blocks are
 * reused by this instance only, on the stream each was freed on (kernels/cuda_blocks.cu). */
int fos_cuda_set_frees_idle(fos_backend *be, int on, fos_err *err);
/* Bytes the block cache keeps for this instance and on its device's idle list. */
int fos_cuda_blocks_kept(fos_backend *be, size_t *own, size_t *idle, fos_err *err);

/* 1 (default; $FOS_CUDA_GRAPHS=0 at creation turns it off): be->replay records a key's work into a
 * CUDA graph the second time it sees the key and launches the graph afterwards; 0: replay just runs
 * the work. Same bytes either way. Counters: graphs recorded, graph launches, failed recordings
 * (those keys then run the ordinary way). */
int fos_cuda_set_graphs(fos_backend *be, int on, fos_err *err);
int fos_cuda_graph_stats(fos_backend *be, unsigned long long *recorded, unsigned long long *launched,
			 unsigned long long *failed, fos_err *err);

/* Describes the algorithm the backend's gemm uses for (m, n, k) with a plain epilogue
 * (e.g. "algo 66 tile 18 splitK 1 stages 22"), choosing it if not yet chosen. */
int fos_cuda_gemm_describe(fos_backend *be, int64_t m, int64_t n, int64_t k, char *buf, size_t len,
			   fos_err *err);

/* Likewise for the backend's gemm_ex with the given stored-transposed layouts (0, 0: gemm's plan). */
int fos_cuda_gemm_ex_describe(fos_backend *be, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, char *buf,
			      size_t len, fos_err *err);

#ifdef __cplusplus
}
#endif
#endif
