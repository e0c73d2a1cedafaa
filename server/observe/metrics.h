/* metrics.h: request counters by operation and status code, latency histograms (receipt to reply,
 * and for executor ops its queue and run parts), bytes moved. */
#ifndef FOSD_METRICS_H
#define FOSD_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "optable.h" /* enum fosd_op, fosd_op_name: the op table */

#define FOSD_NUM_CODES 17
/* Log-linear latency buckets: 4 per power of two of microseconds, up to 2^40 us. */
#define FOSD_LAT_SUB 4
#define FOSD_LAT_BUCKETS (41 * FOSD_LAT_SUB)

/* One distribution of durations (OK requests only). */
typedef struct fosd_hist {
	uint64_t count, sum_us, max_us;
	uint64_t buckets[FOSD_LAT_BUCKETS];
} fosd_hist;

typedef struct fosd_op_metrics {
	uint64_t requests;
	uint64_t codes[FOSD_NUM_CODES];
	fosd_hist lat;   /* receipt to reply */
	fosd_hist queue; /* receipt until an executor lane took it (executor ops only) */
	fosd_hist run;   /* on the lane: the op and its device sync (executor ops only) */
	uint64_t ran_at_once; /* OK requests run on the receiving thread (fosd_executor_try_now) */
	uint64_t bytes_in, bytes_out;
} fosd_op_metrics;

typedef struct fosd_metrics {
	pthread_mutex_t mu;
	fosd_op_metrics ops[FOSD_NUM_OPS];
	uint64_t duplicates, bad_messages;
} fosd_metrics;

int fosd_metrics_init(fosd_metrics *m);
void fosd_metrics_destroy(fosd_metrics *m);
/* One finished request: its op, status code, time from receipt to reply, and message sizes.
 * t_recv_ns, t_lane_ns, t_done_ns (fosd_now_ns: receipt, an executor lane took it, the op and its
 * device sync ended) split an OK request's time into queue and run; t_lane_ns or t_done_ns 0 (a
 * request no lane ran) records neither. */
void fosd_metrics_record(fosd_metrics *m, int op, int code, uint64_t latency_us, uint64_t t_recv_ns,
			 uint64_t t_lane_ns, uint64_t t_done_ns, int ran_now, uint64_t bytes_in, uint64_t bytes_out);
void fosd_metrics_count_duplicate(fosd_metrics *m);
/* A consistent copy. */
void fosd_metrics_snapshot(fosd_metrics *m, fosd_metrics *out);
/* Quantile q in [0, 1] of a distribution, in microseconds (upper edge of its bucket, capped by the
 * observed maximum); 0 when it is empty. */
uint64_t fosd_hist_quantile(const fosd_hist *h, double q);
/* Mean in microseconds; 0 when empty. */
double fosd_hist_mean(const fosd_hist *h);

#endif
