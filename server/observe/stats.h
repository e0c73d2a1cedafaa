/* stats.h: every number fosd reports, gathered once into one snapshot (fosd_stats_take), and the
 * one table (fosd_stats_rows) that both outputs are produced from: the Stats op's StatsResult
 * (fosd_stats_to_pb, ops_info.c) and the Prometheus page of /metrics (fosd_prom_format,
 * http_metrics.c). A row names a number of the snapshot, its field in Stats and its Prometheus
 * family (name, type, help). Adding a counter: a field in fosd_stats, the line of
 * fosd_stats_take that fills it, one row. */
#ifndef FOSD_STATS_H
#define FOSD_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "contexts.h"
#include "fos.pb-c.h"
#include "metrics.h"
#include "msg_pool.h"
#include "nvml.h"
#include "proc_stats.h"
#include "wcache.h"

/* One device's share (DeviceStats): its caches, mappings and executor. */
typedef struct fosd_dev_stat {
	const char *device;
	fosd_wcache_stats cache;
	fosd_contexts_stats contexts;
	uint64_t device_mappings, device_mapped_bytes, device_tensors, device_staged;
	uint64_t lanes, lanes_busy, queued, requests, busy_us;
} fosd_dev_stat;

/* Everything Stats and /metrics report, taken at one moment. */
typedef struct fosd_stats {
	const char *version, *backend, *device;
	uint64_t uptime_ms;
	int draining;                   /* drains (SIGTERM/SIGINT, or a backend failed for good) */
	int failed;                     /* the backend failed for good */
	int mps;                        /* 1: its GPU work runs under MPS (ops.h fosd_opsrv.mps is FOS_MPS_ON) */
	fosd_op_snap ops[FOSD_NUM_OPS];
	uint64_t duplicates, bad_messages;
	fosd_wcache_stats cache;
	fosd_contexts_stats contexts;
	uint64_t inflight, queued, workers;
	uint64_t shm_regions, shm_region_bytes, shm_mapped_bytes;
	uint64_t device_mappings, device_mapped_bytes, device_tensors, device_staged;
	uint64_t channels, channel_requests;
	uint64_t connections, connections_dropped, connection_refusals, connections_rejected;
	fosd_msgpool_stats pool;
	fosd_proc_stats proc;           /* the process's CPU, memory, descriptors */
	int n_devs;                     /* the devices (their sums are cache, contexts, device_*, queued) */
	fosd_dev_stat devs[FOSD_MAX_DEVICES];
	/* /metrics only (fosd_stats_take leaves them empty; the page's route fills them) */
	const fosd_tenant_count *tenant_counts; /* requests by tenant; NULL: by op and code alone */
	size_t n_tenant_counts;
	int nvml;                       /* 1: NVML is loaded (GPU numbers below), 0: not */
	int n_gpus;
	fosd_gpu_stat gpus[FOSD_MAX_GPUS];
} fosd_stats;

struct fosd_tpsrv;
/* Fills out from a running server (transport.h: the server as its top stage keeps it). */
void fosd_stats_take(struct fosd_tpsrv *srv, fosd_stats *out);

typedef enum fosd_stat_kind {
	FOSD_STAT_U64,      /* a uint64_t of fosd_stats */
	FOSD_STAT_FLAG,     /* an int of fosd_stats, reported as 0 or 1 (a bool in Stats) */
	FOSD_STAT_US,       /* a uint64_t of fosd_stats in microseconds, on the page in seconds */
	FOSD_STAT_OP_U64,   /* a uint64_t of each op's fosd_op_snap: one series per op */
	FOSD_STAT_OP_HIST,  /* a fosd_hist_snap of each op's: a LatencyStats; a histogram */
	FOSD_STAT_OP_CODES, /* each op's requests by status code: CodeCounts; on the page by
			     * tenant too (series by op, code and tenant) */
	FOSD_STAT_OP_CODE_HIST, /* each op's fosd_hist_snap[FOSD_NUM_CODES]: a histogram by code */
} fosd_stat_kind;

typedef struct fosd_stat_row {
	fosd_stat_kind kind;
	size_t off;               /* in fosd_stats; OP_*: in fosd_op_snap */
	size_t pb;                /* offset of its field in Fos__StatsResult (OP_*: Fos__OpStats); 0
				   * (the message base): not in Stats */
	const char *prom, *type;  /* the /metrics family and its type; NULL: not on the page */
	const char *help;
} fosd_stat_row;

/* In the order of the page (after fosd_info and fosd_uptime_seconds, which lead it). Per-op
 * series appear once the op was answered at least once. */
extern const fosd_stat_row fosd_stats_rows[];
extern const size_t fosd_stats_nrows;

/* The Stats reply of a snapshot: st points into the arrays beside it (no allocation). */
#define FOSD_STATS_MAX_HIST 4
typedef struct fosd_stats_pb {
	Fos__StatsResult st;
	Fos__OpStats ops[FOSD_NUM_OPS], *opp[FOSD_NUM_OPS];
	Fos__LatencyStats lat[FOSD_NUM_OPS][FOSD_STATS_MAX_HIST];
	Fos__DeviceStats dev[FOSD_MAX_DEVICES], *devp[FOSD_MAX_DEVICES];
	Fos__CodeCount codes[FOSD_NUM_OPS][FOSD_NUM_CODES], *codep[FOSD_NUM_OPS][FOSD_NUM_CODES];
} fosd_stats_pb;
/* Fills out from s (which must outlive out: strings point into it). */
void fosd_stats_to_pb(const fosd_stats *s, fosd_stats_pb *out);
/* The Stats op's result of a snapshot taken now: *st points into the returned block, to free()
 * after use; NULL when out of memory. The server's stats_result hook (server.h), so that the op
 * answering Stats reads the snapshot without including this header. */
void *fosd_stats_result(struct fosd_tpsrv *srv, Fos__StatsResult **st);

#endif
