/* cpu_pool.h: a minimal fork-join parallel-for for the CPU backend. Work is split into contiguous
 * chunks; each item's result never depends on the chunking, so results are identical for any
 * thread count. Safe to call from several threads at once (no shared state). */
#ifndef FOS_CPU_POOL_H
#define FOS_CPU_POOL_H

#include <stdint.h>

/* fn(ctx, begin, end) over [0, n). Runs inline when threads <= 1 or n < min_chunk * 2. */
typedef void (*fos_range_fn)(void *ctx, int64_t begin, int64_t end);
void fos_parallel_for(int threads, int64_t n, int64_t min_chunk, fos_range_fn fn, void *ctx);

#endif
