/* metrics.h: request counters by operation and status code, latency histograms, bytes moved. */
#ifndef FOSD_METRICS_H
#define FOSD_METRICS_H

#include <pthread.h>
#include <stdint.h>

enum fosd_op {
	FOSD_OP_HEALTH = 0,
	FOSD_OP_STATS,
	FOSD_OP_PUT_WEIGHT,
	FOSD_OP_DROP_WEIGHT,
	FOSD_OP_LIST_WEIGHTS,
	FOSD_OP_FORWARD,
	FOSD_OP_BACKWARD,
	FOSD_OP_RELEASE_CONTEXT,
	FOSD_OP_QUANTIZE,
	FOSD_OP_DEQUANTIZE,
	FOSD_OP_LINEAR,
	FOSD_OP_REGISTER_REGION,
	FOSD_OP_UNREGISTER_REGION,
	FOSD_OP_LIST_REGIONS,
	FOSD_OP_INVALID, /* undecodable message or no operation set */
	FOSD_NUM_OPS
};

#define FOSD_NUM_CODES 17
/* Log-linear latency buckets: 4 per power of two of microseconds, up to 2^40 us. */
#define FOSD_LAT_SUB 4
#define FOSD_LAT_BUCKETS (41 * FOSD_LAT_SUB)

const char *fosd_op_name(int op);

typedef struct fosd_op_metrics {
	uint64_t requests;
	uint64_t codes[FOSD_NUM_CODES];
	uint64_t lat_count, lat_sum_us, lat_max_us;
	uint64_t lat_hist[FOSD_LAT_BUCKETS];
	uint64_t bytes_in, bytes_out;
} fosd_op_metrics;

typedef struct fosd_metrics {
	pthread_mutex_t mu;
	fosd_op_metrics ops[FOSD_NUM_OPS];
	uint64_t duplicates, bad_messages;
} fosd_metrics;

int fosd_metrics_init(fosd_metrics *m);
void fosd_metrics_destroy(fosd_metrics *m);
/* One finished request: its op, status code, time from receipt to reply and message sizes. */
void fosd_metrics_record(fosd_metrics *m, int op, int code, uint64_t latency_us, uint64_t bytes_in,
			 uint64_t bytes_out);
void fosd_metrics_count_duplicate(fosd_metrics *m);
/* A consistent copy. */
void fosd_metrics_snapshot(fosd_metrics *m, fosd_metrics *out);
/* Latency quantile q in [0, 1] of an op, in microseconds (upper edge of its bucket, capped by the
 * observed maximum). */
uint64_t fosd_metrics_quantile(const fosd_op_metrics *om, double q);

#endif
