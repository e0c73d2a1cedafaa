/* fos_hist.h: the one latency histogram of fosd (server/observe/metrics.c) and the fos CLI's load
 * tester (client/cli/cli_hist.c): log-linear buckets in the manner of HDR Histogram (no C
 * histogram library is packaged in Debian). Values below 256 have a bucket each; above, every
 * power of two [2^e, 2^(e+1)) is split into 128 equal sub-buckets, so a bucket is narrower than
 * 1/128 of its lowest value and a reported percentile is within 0.8 % above the true one. 7424
 * counters cover all of uint64; every power of two is the lower edge of a bucket.
 *
 * The functions work on a caller's counter array (FOS_HIST_BUCKETS entries) and its exact count,
 * minimum and maximum, so that both users keep their own struct (and units: nanoseconds in the
 * CLI, microseconds in fosd) and get the same answers for the same samples. */
#ifndef FOS_HIST_H
#define FOS_HIST_H

#include <stddef.h>
#include <stdint.h>

#define FOS_HIST_SUB_BITS 7
#define FOS_HIST_SUB (1u << FOS_HIST_SUB_BITS)
#define FOS_HIST_BUCKETS ((64 - FOS_HIST_SUB_BITS + 1) * FOS_HIST_SUB)

/* The bucket of v, in [0, FOS_HIST_BUCKETS). */
size_t fos_hist_index(uint64_t v);
/* The inclusive value range [lo, hi] of bucket idx. */
void fos_hist_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi);
/* The value at percentile p (0..100, clamped) of count values in buckets whose exact minimum and
 * maximum are min and max: the highest value of the bucket that holds the ceil(p/100 * count)-th
 * smallest value (at least the first), clamped to [min, max]; 0 when count is 0. */
uint64_t fos_hist_percentile(const uint64_t *buckets, uint64_t count, uint64_t min, uint64_t max, double p);
/* fos_hist_percentile for np (at most 16) percentiles p[] in one pass over the buckets, into out[]. */
void fos_hist_percentiles(const uint64_t *buckets, uint64_t count, uint64_t min, uint64_t max, const double *p,
			  size_t np, uint64_t *out);
/* How many of the values in buckets are below 2^k (exact: 2^k is a bucket edge); k in 0..63. */
uint64_t fos_hist_below_pow2(const uint64_t *buckets, int k);

#endif
