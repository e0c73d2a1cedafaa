/* bench_linear_step.c: one training step of a linear layer through the backend in this process,
 * on device buffers: the baseline of bench/bench_python_step.py (the same step through
 * fosd.torch.Linear and fosd). A step is what fosd does for a layer between two optimizer steps:
 * quantize the new weight (fos_qweight_make, keeping the bf16 master as PutWeight does by
 * default), forward with a saved context, and backward (dX, dW, db; the columnwise weight is
 * built there, as in fosd's cache). Also timed: forward + backward with the weight already
 * quantized. Wall clock from the first queued op to the device sync, median of --steps after
 * --warmup (and, with --warmup-ms, until that many milliseconds of untimed steps have run, so that
 * the GPU's clocks and first uses are behind it); inputs are random bf16, uploaded once. Also the host's time to queue the put, the
 * forward and the backward with the ops' own syncs deferred (as fosd's lanes run asynchronous
 * requests): what launching a layer's work costs the CPU, whatever the GPU's time. --threads T
 * runs T such loops at once, each on a backend instance of its own (its own stream, as fosd's lanes
 * are), their timed steps started together; every number is then the median over all T threads'
 * steps: what one layer step costs while T lanes launch beside it.
 *   bench_linear_step [--m M] [--n N] [--k K] [--steps S] [--warmup W] [--warmup-ms MS] [--override O]
 *                     [--bias] [--backend cuda|cpu] [--threads T]
 * Prints one JSON line: {"m":..,"n":..,"k":..,"backend":..,"step_ms":..,"fwd_bwd_ms":..,"put_ms":..,
 * "queue_put_us":..,"queue_fwd_us":..,"queue_bwd_us":..,"threads":..}.
 * Without a usable backend it prints {"error": "..."} and exits 1. */
#include "backend.h"
#include "bench_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local fos_err err;

#define CK(x)                                                                                                  \
	do {                                                                                                   \
		if ((x) != FOS_OK) {                                                                           \
			printf("{\"error\": \"%s failed: %s\"}\n", #x, err.msg);                              \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

static void *dev_random(fos_backend *be, size_t n, uint64_t seed, float scale)
{
	uint16_t *h = malloc(n * 2);
	void *d = be->alloc(be, n * 2);
	if (!h || !d) {
		printf("{\"error\": \"out of memory for %zu elements\"}\n", n);
		exit(1);
	}
	bench_fill_bf16(h, n, seed, scale);
	CK(be->h2d(be, d, h, n * 2, &err));
	free(h);
	return d;
}

enum { T_STEP, T_FB, T_PUT, Q_PUT, Q_FWD, Q_BWD, N_TIMES };

/* One loop of --steps: its arguments, and where its times go (times[i] + steps * thread). */
typedef struct {
	const char *backend;
	int64_t m, n, k;
	int steps, warmup, warmup_ms, bias, thread;
	fos_linear_opts o;
	double *times[N_TIMES];
	pthread_barrier_t *start; /* the threads' timed steps begin together */
	char name[64], device[160];
} run_arg;

static void *run(void *arg)
{
	run_arg *a = arg;
	const int64_t m = a->m, n = a->n, k = a->k;
	fos_backend *be = !strcmp(a->backend, "cpu") ? fos_backend_cpu(0, &err) : fos_backend_open(a->backend, &err);
	if (!be) {
		printf("{\"error\": \"backend %s: %s\"}\n", a->backend, err.msg);
		exit(1);
	}
	snprintf(a->name, sizeof a->name, "%s", be->name);
	snprintf(a->device, sizeof a->device, "%s", be->device);
	const fos_linear_opts *o = &a->o;
	uint16_t *x = dev_random(be, (size_t)(m * k), 1, 1.0f), *w = dev_random(be, (size_t)(n * k), 2, 0.05f);
	uint16_t *dy = dev_random(be, (size_t)(m * n), 3, 1.0f), *b = a->bias ? dev_random(be, (size_t)n, 4, 1.0f) : NULL;
	uint16_t *y = be->alloc(be, (size_t)(m * n) * 2), *dx = be->alloc(be, (size_t)(m * k) * 2);
	uint16_t *dw = be->alloc(be, (size_t)(n * k) * 2), *db = a->bias ? be->alloc(be, (size_t)n * 2) : NULL;
	if (!y || !dx || !dw || (a->bias && !db)) {
		printf("{\"error\": \"out of device memory\"}\n");
		exit(1);
	}
	const double warm_until = bench_now() + a->warmup_ms * 1e-3;
	const int warm = a->warmup_ms > 0 && a->warmup < 1 ? 1 : a->warmup;
	for (int s = -warm; s < a->steps; s++) {
		if (s == -1 && bench_now() < warm_until)
			s = -2; /* --warmup-ms: one more untimed step */
		if (s == 0 && a->start)
			pthread_barrier_wait(a->start);
		fos_qweight qw;
		fos_saved sv;
		memset(&sv, 0, sizeof sv);
		CK(be->sync(be, &err));
		double t0 = bench_now();
		CK(fos_qweight_make(be, w, n, k, o, 1, 0, &qw, &err));
		CK(be->sync(be, &err));
		double t1 = bench_now();
		CK(fos_linear_forward(be, x, m, &qw, o, b, y, &sv, &err));
		CK(fos_linear_backward(be, &sv, &qw, dy, dx, dw, db, &err));
		CK(be->sync(be, &err));
		double t2 = bench_now();
		fos_saved_free(be, &sv);
		/* forward + backward again on the same quantized weight (columnwise copy now built) */
		memset(&sv, 0, sizeof sv);
		CK(be->sync(be, &err));
		double t3 = bench_now();
		CK(fos_linear_forward(be, x, m, &qw, o, b, y, &sv, &err));
		CK(fos_linear_backward(be, &sv, &qw, dy, dx, dw, db, &err));
		CK(be->sync(be, &err));
		double t4 = bench_now();
		fos_saved_free(be, &sv);
		fos_qweight_free(be, &qw);
		/* the host's time to queue each op (as fosd's lanes run asynchronous requests: no syncs
		 * inside the ops), then one sync */
		memset(&sv, 0, sizeof sv);
		be->defer_sync = 1;
		double h0 = bench_now();
		CK(fos_qweight_make(be, w, n, k, o, 1, 0, &qw, &err));
		double h1 = bench_now();
		CK(fos_linear_forward(be, x, m, &qw, o, b, y, &sv, &err));
		double h2 = bench_now();
		CK(fos_linear_backward(be, &sv, &qw, dy, dx, dw, db, &err));
		double h3 = bench_now();
		be->defer_sync = 0;
		CK(be->sync(be, &err));
		fos_saved_free(be, &sv);
		fos_qweight_free(be, &qw);
		if (s >= 0) {
			const double v[N_TIMES] = {(t2 - t0) * 1e3, (t4 - t3) * 1e3, (t1 - t0) * 1e3,
						   (h1 - h0) * 1e6, (h2 - h1) * 1e6, (h3 - h2) * 1e6};
			for (int i = 0; i < N_TIMES; i++)
				a->times[i][a->thread * a->steps + s] = v[i];
		}
	}
	void *bufs[] = {x, w, dy, b, y, dx, dw, db};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		if (bufs[i])
			be->free(be, bufs[i]);
	be->destroy(be);
	return NULL;
}

int main(int argc, char **argv)
{
	run_arg base = {.backend = "cuda", .m = 8192, .n = 4096, .k = 4096, .steps = 10, .warmup = 3};
	int threads = 1;
	base.o = fos_linear_opts_default();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--bias")) {
			base.bias = 1;
			continue;
		}
		if (!v) {
			printf("{\"error\": \"%s needs a value\"}\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--m"))
			base.m = atoll(v);
		else if (!strcmp(a, "--n"))
			base.n = atoll(v);
		else if (!strcmp(a, "--k"))
			base.k = atoll(v);
		else if (!strcmp(a, "--steps"))
			base.steps = atoi(v);
		else if (!strcmp(a, "--warmup"))
			base.warmup = atoi(v);
		else if (!strcmp(a, "--warmup-ms"))
			base.warmup_ms = atoi(v);
		else if (!strcmp(a, "--threads"))
			threads = atoi(v);
		else if (!strcmp(a, "--backend"))
			base.backend = v;
		else if (!strcmp(a, "--override"))
			base.o.override = !strcmp(v, "quantized")        ? FOS_OVR_QUANTIZED
					  : !strcmp(v, "high_precision") ? FOS_OVR_HIGH_PRECISION
					  : !strcmp(v, "dequantized")    ? FOS_OVR_DEQUANTIZED
									 : FOS_OVR_DEFAULT;
		else {
			printf("{\"error\": \"unknown argument %s\"}\n", a);
			return 2;
		}
	}
	if (base.steps < 1 || base.steps > 1000) {
		printf("{\"error\": \"--steps must be 1 to 1000\"}\n");
		return 2;
	}
	if (base.warmup < 0 || base.warmup_ms < 0 || base.warmup_ms > 600000) {
		printf("{\"error\": \"--warmup must be 0 or more, --warmup-ms 0 to 600000\"}\n");
		return 2;
	}
	if (threads < 1 || threads > 64) {
		printf("{\"error\": \"--threads must be 1 to 64\"}\n");
		return 2;
	}
	CK(fos_linear_check(&base.o, base.m, base.n, base.k, NULL, &err));
	const int total = threads * base.steps;
	for (int i = 0; i < N_TIMES; i++)
		if (!(base.times[i] = calloc((size_t)total, sizeof(double)))) {
			printf("{\"error\": \"out of memory\"}\n");
			return 1;
		}
	run_arg *args = calloc((size_t)threads, sizeof *args);
	pthread_t *th = calloc((size_t)threads, sizeof *th);
	pthread_barrier_t start;
	if (!args || !th || pthread_barrier_init(&start, NULL, (unsigned)threads)) {
		printf("{\"error\": \"cannot start %d threads\"}\n", threads);
		return 1;
	}
	for (int t = 0; t < threads; t++) {
		args[t] = base;
		args[t].thread = t;
		args[t].start = threads > 1 ? &start : NULL;
	}
	if (threads == 1)
		run(&args[0]);
	else {
		for (int t = 0; t < threads; t++)
			if (pthread_create(&th[t], NULL, run, &args[t])) {
				printf("{\"error\": \"cannot start thread %d\"}\n", t);
				return 1;
			}
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
	}
	double med[N_TIMES];
	for (int i = 0; i < N_TIMES; i++)
		med[i] = bench_quantile(base.times[i], total, 0.5);
	printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"backend\": \"%s\", \"device\": \"%s\", \"steps\": %d, "
	       "\"step_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"put_ms\": %.4f, \"queue_put_us\": %.1f, "
	       "\"queue_fwd_us\": %.1f, \"queue_bwd_us\": %.1f, \"threads\": %d}\n",
	       (long long)base.m, (long long)base.n, (long long)base.k, args[0].name, args[0].device, base.steps,
	       med[T_STEP], med[T_FB], med[T_PUT], med[Q_PUT], med[Q_FWD], med[Q_BWD], threads);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < N_TIMES; i++)
		free(base.times[i]);
	free(args);
	free(th);
	return 0;
}
