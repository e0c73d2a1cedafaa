/* cli_hist.c: the load tester's latency histogram: log-linear buckets in the manner of HDR
 * Histogram (no C histogram library is packaged in Debian). Values below 256 have a bucket each;
 * above, every power of two [2^e, 2^(e+1)) is split into 128 equal sub-buckets, so a bucket's width
 * is under 1/128 of its lowest value: a reported percentile is within 0.8 % of the true one. 7424
 * counters cover all of uint64; recording is a count-leading-zeros, a shift and an increment. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_hist_init(cli_hist *h)
{
	memset(h, 0, sizeof *h);
	h->buckets = calloc(CLI_HIST_BUCKETS, sizeof *h->buckets);
	if (!h->buckets)
		return FOS_ENOMEM;
	h->min = UINT64_MAX;
	return FOS_OK;
}

void cli_hist_free(cli_hist *h)
{
	free(h->buckets);
	memset(h, 0, sizeof *h);
}

void cli_hist_reset(cli_hist *h)
{
	memset(h->buckets, 0, CLI_HIST_BUCKETS * sizeof *h->buckets);
	h->count = 0;
	h->sum = 0;
	h->min = UINT64_MAX;
	h->max = 0;
}

size_t cli_hist_index(uint64_t v)
{
	if (v < 2 * CLI_HIST_SUB)
		return (size_t)v;
	int msb = 63 - __builtin_clzll(v);
	int shift = msb - CLI_HIST_SUB_BITS; /* v >> shift is in [128, 256) */
	return (size_t)shift * CLI_HIST_SUB + (size_t)(v >> shift);
}

void cli_hist_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi)
{
	if (idx < 2 * CLI_HIST_SUB) {
		*lo = *hi = idx;
		return;
	}
	unsigned shift = (unsigned)(idx / CLI_HIST_SUB) - 1;
	uint64_t sub = idx - (uint64_t)shift * CLI_HIST_SUB;
	*lo = sub << shift;
	*hi = *lo + ((UINT64_C(1) << shift) - 1);
}

void cli_hist_record(cli_hist *h, uint64_t v)
{
	h->buckets[cli_hist_index(v)]++;
	h->count++;
	h->sum += (double)v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void cli_hist_merge(cli_hist *dst, const cli_hist *src)
{
	if (!src->count)
		return;
	for (size_t i = 0; i < CLI_HIST_BUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t cli_hist_percentile(const cli_hist *h, double p)
{
	if (!h->count)
		return 0;
	if (p < 0)
		p = 0;
	if (p > 100)
		p = 100;
	/* the rank of the wanted value, 1-based: ceil(p/100 * count), at least 1 */
	double r = p / 100.0 * (double)h->count;
	uint64_t rank = (uint64_t)r;
	if ((double)rank < r)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > h->count)
		rank = h->count;
	uint64_t seen = 0;
	for (size_t i = 0; i < CLI_HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank) {
			uint64_t lo, hi;
			cli_hist_bucket_range(i, &lo, &hi);
			if (hi > h->max)
				hi = h->max;
			if (hi < h->min)
				hi = h->min;
			return hi;
		}
	}
	return h->max;
}

double cli_hist_mean(const cli_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0.0;
}
