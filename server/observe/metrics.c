/* metrics.c: request counters by operation and status code, log-linear latency histograms (4
 * buckets per power of two, so a quantile is at most 25% above the truth) of the whole request and,
 * for executor ops, of its queue and run parts, and bytes moved. */
#include "metrics.h"

#include <string.h>

int fosd_metrics_init(fosd_metrics *m)
{
	memset(m, 0, sizeof *m);
	return pthread_mutex_init(&m->mu, NULL) ? -1 : 0;
}

void fosd_metrics_destroy(fosd_metrics *m)
{
	pthread_mutex_destroy(&m->mu);
}

/* Bucket b covers [lo(b), lo(b+1)) with lo(e*SUB + s) = 2^e * (1 + s/SUB) for e >= 1; values 0..1
 * go to the first buckets. */
static int lat_bucket(uint64_t us)
{
	if (us < 2)
		return (int)us;
	int e = 63 - __builtin_clzll(us);
	int s = (int)((us >> (e >= 2 ? e - 2 : 0)) & 3);
	if (e < 2)
		s = (int)((us - ((uint64_t)1 << e)) * FOSD_LAT_SUB >> e);
	int b = e * FOSD_LAT_SUB + s;
	return b < FOSD_LAT_BUCKETS ? b : FOSD_LAT_BUCKETS - 1;
}

static uint64_t lat_bucket_hi(int b)
{
	if (b < 2)
		return (uint64_t)b;
	int e = b / FOSD_LAT_SUB, s = b % FOSD_LAT_SUB;
	uint64_t base = (uint64_t)1 << e;
	return base + (base * (uint64_t)(s + 1)) / FOSD_LAT_SUB;
}

static void hist_add(fosd_hist *h, uint64_t us)
{
	h->count++;
	h->sum_us += us;
	if (us > h->max_us)
		h->max_us = us;
	h->buckets[lat_bucket(us)]++;
}

void fosd_metrics_record(fosd_metrics *m, int op, int code, uint64_t latency_us, uint64_t t_recv_ns,
			 uint64_t t_lane_ns, uint64_t t_done_ns, int ran_now, uint64_t bytes_in, uint64_t bytes_out)
{
	if (op < 0 || op >= FOSD_NUM_OPS)
		op = FOSD_OP_INVALID;
	if (code < 0 || code >= FOSD_NUM_CODES)
		code = 2; /* UNKNOWN */
	/* a lane's times are after receipt and in order (one monotonic clock); guard all the same */
	int ran = code == 0 && t_lane_ns && t_done_ns && t_lane_ns >= t_recv_ns && t_done_ns >= t_lane_ns;
	pthread_mutex_lock(&m->mu);
	fosd_op_metrics *om = &m->ops[op];
	om->requests++;
	om->codes[code]++;
	om->bytes_in += bytes_in;
	om->bytes_out += bytes_out;
	if (code == 0)
		hist_add(&om->lat, latency_us);
	if (ran) {
		hist_add(&om->queue, (t_lane_ns - t_recv_ns) / 1000u);
		hist_add(&om->run, (t_done_ns - t_lane_ns) / 1000u);
		if (ran_now)
			om->ran_at_once++;
	}
	if (op == FOSD_OP_INVALID)
		m->bad_messages++;
	pthread_mutex_unlock(&m->mu);
}

void fosd_metrics_count_duplicate(fosd_metrics *m)
{
	pthread_mutex_lock(&m->mu);
	m->duplicates++;
	pthread_mutex_unlock(&m->mu);
}

void fosd_metrics_snapshot(fosd_metrics *m, fosd_metrics *out)
{
	pthread_mutex_lock(&m->mu);
	memcpy(out->ops, m->ops, sizeof m->ops);
	out->duplicates = m->duplicates;
	out->bad_messages = m->bad_messages;
	pthread_mutex_unlock(&m->mu);
}

uint64_t fosd_hist_quantile(const fosd_hist *h, double q)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)h->count);
	if (rank >= h->count)
		rank = h->count - 1;
	uint64_t seen = 0;
	for (int b = 0; b < FOSD_LAT_BUCKETS; b++) {
		seen += h->buckets[b];
		if (seen > rank) {
			uint64_t hi = lat_bucket_hi(b);
			return hi < h->max_us ? hi : h->max_us;
		}
	}
	return h->max_us;
}

double fosd_hist_mean(const fosd_hist *h)
{
	return h->count ? (double)h->sum_us / (double)h->count : 0.0;
}
