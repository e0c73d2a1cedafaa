/* util.h: small helpers of fosd: a monotonic clock and random 64-bit ids. */
#ifndef FOSD_UTIL_H
#define FOSD_UTIL_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fosd_now_ns(void);
/* A random nonzero 64-bit value (getrandom; falls back to a time-seeded generator). */
uint64_t fosd_random_u64(void);

#endif
