/* bench_util.h: the small helpers every benchmark shares: a monotonic clock in seconds, a quantile
 * of a sample, and the xorshift random numbers (in [-1, 1)) that fill their bf16 inputs. */
#ifndef FOS_BENCH_UTIL_H
#define FOS_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "fos_format.h"

/* CLOCK_MONOTONIC in seconds. */
static inline double bench_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of v[0..n-1], nearest rank; sorts v. */
static inline double bench_quantile(double *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
	int i = (int)(q * (n - 1) + 0.5);
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The next xorshift64 step of *s, as a float in [-1, 1) from its top 24 bits. */
static inline float bench_frand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (float)((*s >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}

/* p[0..n-1] = bf16 of bench_frand * scale, from a state derived from seed. */
static inline void bench_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++)
		p[i] = fos_f32_to_bf16(bench_frand(&s) * scale);
}

#endif
