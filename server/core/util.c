/* util.c: a monotonic clock and random 64-bit ids for fosd. */
#include "util.h"

#include <pthread.h>
#include <sys/random.h>
#include <time.h>

uint64_t fosd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t fosd_splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

uint64_t fosd_random_u64(void)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t state;
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
		pthread_mutex_lock(&mu);
		if (!state)
			state = fosd_now_ns() ^ ((uint64_t)(uintptr_t)&v << 17);
		v = fosd_splitmix(&state);
		pthread_mutex_unlock(&mu);
	}
	return v ? v : 1;
}
