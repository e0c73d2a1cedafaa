/* cli_hist.c: the load tester's latency histogram (cli.h's cli_hist): its counters and exact
 * count, sum, minimum and maximum. The bucket scheme and the percentiles are the one
 * implementation fosd's metrics use too (kernels/fos_hist.c: exact below 256, then 128
 * sub-buckets per power of two, within 0.8 %), so `fos load` and `fos stats` agree on the same
 * samples. */
#include "cli.h"
#include "fos_hist.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(CLI_HIST_BUCKETS == FOS_HIST_BUCKETS && CLI_HIST_SUB == FOS_HIST_SUB,
	       "the CLI histogram is fos_hist.h's");

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
	return fos_hist_index(v);
}

void cli_hist_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi)
{
	fos_hist_bucket_range(idx, lo, hi);
}

void cli_hist_record(cli_hist *h, uint64_t v)
{
	h->buckets[fos_hist_index(v)]++;
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
	return fos_hist_percentile(h->buckets, h->count, h->min, h->max, p);
}

double cli_hist_mean(const cli_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0.0;
}
