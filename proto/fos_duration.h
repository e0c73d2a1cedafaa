/* fos_duration.h: the one parser of durations ("250ms", "1.5s", "5m", "2min", "1h", "30" = 30 s)
 * that fosd's config (server/core/config.c) and the fos CLI (client/cli/cli_common.c) share. It
 * lives in libfosproto because both programs link that library and nothing else in common that
 * is not numerics. A duration is a decimal number (digits, optionally '.' and more digits: no
 * sign, exponent, space, nan or inf) and a unit (ms, s, m or min, h; none means seconds), at most
 * FOS_DURATION_MAX_MS. */
#ifndef FOS_DURATION_H
#define FOS_DURATION_H

#include <stdint.h>

/* 24 days: fits nng's int32 millisecond timeouts, and in nanoseconds far below 2^64. */
#define FOS_DURATION_MAX_MS (24ull * 24 * 3600 * 1000)

/* Parses s into *out in units of unit_ns nanoseconds (1000000: milliseconds, 1: nanoseconds),
 * rounded to the nearest unit (halves up; fraction digits past the ninth are ignored). Returns 0,
 * or -1 with *why (if why is not NULL) saying what is wrong: "negative", "not a decimal number",
 * "its unit is not ms, s, m or h", "longer than 24 days". */
int fos_parse_duration(const char *s, uint64_t unit_ns, uint64_t *out, const char **why);

#endif
