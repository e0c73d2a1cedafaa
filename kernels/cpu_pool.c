/* cpu_pool.c: fork-join parallel-for over pthreads (see cpu_pool.h). */
#include "cpu_pool.h"

#include <pthread.h>

typedef struct {
	fos_range_fn fn;
	void *ctx;
	int64_t begin, end;
} pool_job;

static void *pool_thread(void *arg)
{
	pool_job *j = arg;
	j->fn(j->ctx, j->begin, j->end);
	return 0;
}

void fos_parallel_for(int threads, int64_t n, int64_t min_chunk, fos_range_fn fn, void *ctx)
{
	if (n <= 0)
		return;
	if (min_chunk < 1)
		min_chunk = 1;
	int64_t t = threads;
	if (t > n / min_chunk)
		t = n / min_chunk;
	if (t > 64)
		t = 64;
	if (t <= 1) {
		fn(ctx, 0, n);
		return;
	}
	pool_job jobs[64];
	pthread_t tid[64];
	int started[64] = {0};
	for (int64_t i = 0; i < t; i++) {
		jobs[i].fn = fn;
		jobs[i].ctx = ctx;
		jobs[i].begin = n * i / t;
		jobs[i].end = n * (i + 1) / t;
	}
	for (int64_t i = 1; i < t; i++)
		started[i] = pthread_create(&tid[i], 0, pool_thread, &jobs[i]) == 0;
	fn(ctx, jobs[0].begin, jobs[0].end);
	for (int64_t i = 1; i < t; i++) {
		if (started[i])
			pthread_join(tid[i], 0);
		else
			fn(ctx, jobs[i].begin, jobs[i].end); /* could not start a thread: do it here */
	}
}
