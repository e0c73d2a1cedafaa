/* util.h: small helpers of fosd: a monotonic clock, random 64-bit ids, the size of the message
 * buffers every stage fills, and whether an errno means "out of descriptors". */
#ifndef FOSD_UTIL_H
#define FOSD_UTIL_H

#include <errno.h>
#include <stdint.h>

/* a status message buffer (a reply's message, a log line's detail) */
#define FOSD_MSG_MAX 512

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fosd_now_ns(void);
/* A random nonzero 64-bit value (getrandom; falls back to a time-seeded generator). */
uint64_t fosd_random_u64(void);

/* 1 when errno value err means the process or the system ran out of descriptors. */
static inline int fosd_fd_exhausted(int err)
{
	return err == EMFILE || err == ENFILE;
}

#endif
