/* util.h: small helpers of fosd: a monotonic clock, random 64-bit ids, and the size of the
 * message buffers every stage fills. */
#ifndef FOSD_UTIL_H
#define FOSD_UTIL_H

#include <stdint.h>

/* a status message buffer (a reply's message, a log line's detail) */
#define FOSD_MSG_MAX 512

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fosd_now_ns(void);
/* A random nonzero 64-bit value (getrandom; falls back to a time-seeded generator). */
uint64_t fosd_random_u64(void);

#endif
