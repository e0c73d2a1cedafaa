/* metrics.h: request counters by operation, status code and tenant, latency histograms (receipt to
 * reply, by status code; for OK requests an executor lane ran, its queue, input copy, compute,
 * output copy and run parts), bytes moved. The histograms are formats/fos_hist.h's (the one the
 * fos CLI uses): a percentile is within 0.8 % above the true one. */
#ifndef FOSD_METRICS_H
#define FOSD_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fos_hist.h"
#include "optable.h" /* enum fosd_op, fosd_op_name: the op table */
#include "util.h"    /* fosd_now_ns, the clock of fosd_metrics_copy_time */

#define FOSD_NUM_CODES 17
#define FOSD_METRICS_TENANT_MAX 64 /* the longest tenant name (tenants.h) */

/* The Prometheus buckets of /metrics: le = 2^k microseconds for k = MIN..MAX (edges of fos_hist's
 * buckets, so their counts are exact), then +Inf. */
#define FOSD_PROM_LE_MIN_LOG2 2  /* 4 us */
#define FOSD_PROM_LE_MAX_LOG2 31 /* 2147.483648 s */
#define FOSD_PROM_LE_N (FOSD_PROM_LE_MAX_LOG2 - FOSD_PROM_LE_MIN_LOG2 + 1)

/* One live distribution of durations in whole microseconds. Its FOS_HIST_BUCKETS counters are
 * allocated with its first value (a value that finds no memory for them is left out of it). */
typedef struct fosd_hist {
	uint64_t count, sum_us, min_us, max_us;
	uint64_t *buckets;
} fosd_hist;

/* What Stats and /metrics report of one distribution, taken from a fosd_hist. */
typedef struct fosd_hist_snap {
	uint64_t count, sum_us, max_us;
	uint64_t p50_us, p90_us, p99_us, p999_us;
	uint64_t below[FOSD_PROM_LE_N]; /* values below 2^(FOSD_PROM_LE_MIN_LOG2 + i) us */
} fosd_hist_snap;

/* The parts of an OK request an executor lane ran. queue: receipt until a lane took it; in_copy:
 * its input tensors to the device (fosd_dev_from); out_copy: the reply made and its results
 * copied out (executor/response.c); compute: the rest of its time on the lane (the op, its device
 * synchronization); run: all of its time on the lane (in_copy + compute + out_copy). */
#define FOSD_METRICS_OP_FIELDS(H)                                                                 \
	uint64_t requests;                                                                        \
	uint64_t codes[FOSD_NUM_CODES];                                                           \
	H lat[FOSD_NUM_CODES]; /* receipt to reply, by status code */                             \
	H queue, in_copy, compute, out_copy, run;                                                 \
	uint64_t ran_at_once; /* OK requests run on the receiving thread (fosd_executor_try_now) */ \
	uint64_t bytes_in, bytes_out;

typedef struct fosd_op_metrics {
	FOSD_METRICS_OP_FIELDS(fosd_hist)
} fosd_op_metrics;

/* One op's numbers at one moment (fosd_metrics_snapshot). */
typedef struct fosd_op_snap {
	FOSD_METRICS_OP_FIELDS(fosd_hist_snap)
} fosd_op_snap;

/* Requests answered to one tenant (key: its fosd_tenant object, which outlives the metrics; NULL:
 * no tenant, named ""), by op and status code. */
typedef struct fosd_tenant_metrics {
	const void *key;
	char name[FOSD_METRICS_TENANT_MAX + 1];
	uint64_t codes[FOSD_NUM_OPS][FOSD_NUM_CODES];
} fosd_tenant_metrics;

typedef struct fosd_metrics {
	pthread_mutex_t mu;
	fosd_op_metrics ops[FOSD_NUM_OPS];
	uint64_t duplicates, bad_messages;
	fosd_tenant_metrics **tenants; /* tenants[0]: no tenant */
	size_t n_tenants, cap_tenants;
	size_t *tenant_index; /* open addressing by key: index + 1 into tenants, 0 free */
	size_t index_cap;     /* a power of two, at least twice n_tenants */
} fosd_metrics;

typedef struct fosd_metrics_snap {
	fosd_op_snap ops[FOSD_NUM_OPS];
	uint64_t duplicates, bad_messages;
} fosd_metrics_snap;

/* One nonzero request counter of a tenant. */
typedef struct fosd_tenant_count {
	char tenant[FOSD_METRICS_TENANT_MAX + 1];
	int op, code;
	uint64_t n;
} fosd_tenant_count;

/* One finished request. */
typedef struct fosd_req_sample {
	int op, code;
	uint64_t latency_us; /* receipt to reply */
	/* fosd_now_ns: receipt, an executor lane took it, the op and its device sync ended; t_lane_ns
	 * or t_done_ns 0 (no lane ran it) records no parts */
	uint64_t t_recv_ns, t_lane_ns, t_done_ns;
	int ran_now;
	uint64_t bytes_in, bytes_out;
	const void *tenant_key; /* its fosd_tenant (NULL: none) */
	const char *tenant;     /* its name (NULL: none) */
	const void *req;        /* the request's identity for fosd_metrics_copy_time (its slot); NULL: none */
} fosd_req_sample;

int fosd_metrics_init(fosd_metrics *m);
void fosd_metrics_destroy(fosd_metrics *m);
void fosd_metrics_record_req(fosd_metrics *m, const fosd_req_sample *r);
/* fosd_metrics_record_req of a request of no tenant and no copy times. */
void fosd_metrics_record(fosd_metrics *m, int op, int code, uint64_t latency_us, uint64_t t_recv_ns,
			 uint64_t t_lane_ns, uint64_t t_done_ns, int ran_now, uint64_t bytes_in, uint64_t bytes_out);
void fosd_metrics_count_duplicate(fosd_metrics *m);

/* Copy timing of the request a thread runs now: adds fosd_now_ns() - t0_ns to req's input
 * (FOSD_COPY_IN) or output (FOSD_COPY_OUT) copy time. Kept per thread for one request at a time
 * (another req starts over); fosd_metrics_record_req of req on the same thread takes the sums. */
enum { FOSD_COPY_IN = 0, FOSD_COPY_OUT = 1 };
void fosd_metrics_copy_time(const void *req, int which, uint64_t t0_ns);

/* A consistent summary of every op. */
void fosd_metrics_snapshot(fosd_metrics *m, fosd_metrics_snap *out);
/* The nonzero request counters of every tenant, tenants in order of first request, then op and
 * code: a malloc'd array (free()) of *n; NULL with *n 0 when there are none or no memory. */
fosd_tenant_count *fosd_metrics_tenant_counts(fosd_metrics *m, size_t *n);

/* Percentile q in [0, 1] of a live distribution, in microseconds (fos_hist_percentile: the top of
 * the bucket of the ceil(q * count)-th smallest value, clamped to the exact minimum and maximum);
 * 0 when it is empty. */
uint64_t fosd_hist_quantile(const fosd_hist *h, double q);
/* Mean in microseconds; 0 when empty. */
double fosd_hist_mean(const fosd_hist *h);
void fosd_hist_summarize(const fosd_hist *h, fosd_hist_snap *out);
/* Adds v us to h (allocating its buckets with the first); for tests and the record. */
void fosd_hist_add(fosd_hist *h, uint64_t v);
void fosd_hist_free(fosd_hist *h);

#endif
