/* fos_hist.c: the log-linear histogram's bucket arithmetic and percentiles (fos_hist.h), shared
 * by fosd and the fos CLI. Invariant: buckets tile [0, UINT64_MAX] in order without gaps; bucket
 * idx >= 256 covers [sub << shift, ((sub + 1) << shift) - 1] with sub in [128, 256). */
#include "fos_hist.h"

size_t fos_hist_index(uint64_t v)
{
	if (v < 2 * FOS_HIST_SUB)
		return (size_t)v;
	int msb = 63 - __builtin_clzll(v);
	int shift = msb - FOS_HIST_SUB_BITS; /* v >> shift is in [128, 256) */
	return (size_t)shift * FOS_HIST_SUB + (size_t)(v >> shift);
}

void fos_hist_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi)
{
	if (idx < 2 * FOS_HIST_SUB) {
		*lo = *hi = idx;
		return;
	}
	unsigned shift = (unsigned)(idx / FOS_HIST_SUB) - 1;
	uint64_t sub = idx - (uint64_t)shift * FOS_HIST_SUB;
	*lo = sub << shift;
	*hi = *lo + ((UINT64_C(1) << shift) - 1);
}

/* The 1-based rank of percentile p of count values: ceil(p/100 * count), clamped to [1, count]. */
static uint64_t pct_rank(uint64_t count, double p)
{
	if (!(p >= 0)) /* also NaN */
		p = 0;
	if (p > 100)
		p = 100;
	double r = p / 100.0 * (double)count;
	uint64_t rank = (uint64_t)r;
	if ((double)rank < r)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > count)
		rank = count;
	return rank;
}

void fos_hist_percentiles(const uint64_t *buckets, uint64_t count, uint64_t min, uint64_t max, const double *p,
			  size_t np, uint64_t *out)
{
	size_t left = 0;
	uint64_t ranks[16];
	for (size_t j = 0; j < np; j++) {
		out[j] = 0;
		if (count && buckets && j < 16) {
			ranks[j] = pct_rank(count, p[j]);
			left++;
		}
	}
	if (!left)
		return;
	uint64_t seen = 0;
	for (size_t i = 0; i < FOS_HIST_BUCKETS && left; i++) {
		if (!buckets[i])
			continue;
		uint64_t before = seen;
		seen += buckets[i];
		uint64_t lo, hi;
		fos_hist_bucket_range(i, &lo, &hi);
		if (hi > max)
			hi = max;
		if (hi < min)
			hi = min;
		for (size_t j = 0; j < np && j < 16; j++)
			if (ranks[j] > before && ranks[j] <= seen) {
				out[j] = hi;
				left--;
			}
	}
	for (size_t j = 0; j < np && j < 16; j++) /* counts short of the ranks (not expected): the maximum */
		if (count && buckets && ranks[j] > seen)
			out[j] = max;
}

uint64_t fos_hist_percentile(const uint64_t *buckets, uint64_t count, uint64_t min, uint64_t max, double p)
{
	uint64_t v;
	fos_hist_percentiles(buckets, count, min, max, &p, 1, &v);
	return v;
}

uint64_t fos_hist_below_pow2(const uint64_t *buckets, int k)
{
	if (!buckets || k < 0)
		return 0;
	size_t end = k > 63 ? FOS_HIST_BUCKETS : fos_hist_index(UINT64_C(1) << k);
	uint64_t n = 0;
	for (size_t i = 0; i < end; i++)
		n += buckets[i];
	return n;
}
