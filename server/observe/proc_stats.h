/* proc_stats.h: the fosd process's own resource use for /metrics, under the names Prometheus
 * client libraries give them (process_cpu_seconds_total, process_resident_memory_bytes, ...):
 * read from getrusage, getrlimit and /proc/self. */
#ifndef FOSD_PROC_STATS_H
#define FOSD_PROC_STATS_H

#include <stdint.h>

typedef struct fosd_proc_stats {
	int ok;                    /* 0: none could be read */
	uint64_t cpu_us;           /* user + system CPU time */
	uint64_t rss_bytes;        /* resident set size */
	uint64_t vm_bytes;         /* virtual memory size */
	uint64_t open_fds;         /* descriptors open now */
	uint64_t max_fds;          /* RLIMIT_NOFILE's soft limit */
	uint64_t threads;          /* threads of the process */
	uint64_t start_time_us;    /* the process start, microseconds since the Unix epoch */
} fosd_proc_stats;

/* Fills out for the calling process. */
void fosd_proc_stats_get(fosd_proc_stats *out);

#endif
