/* bench_linear_step.c: one training step of a linear layer through the backend in this process,
 * on device buffers: the baseline of bench/bench_python_step.py (the same step through
 * fosd.torch.Linear and fosd). A step is what fosd does for a layer between two optimizer steps:
 * quantize the new weight (fos_qweight_make, keeping the bf16 master as PutWeight does by
 * default), forward with a saved context, and backward (dX, dW, db; the columnwise weight is
 * built there, as in fosd's cache). Also timed: forward + backward with the weight already
 * quantized. Wall clock from the first queued op to the device sync, median of --steps after
 * --warmup; inputs are random bf16, uploaded once. Also the host's time to queue the put, the
 * forward and the backward with the ops' own syncs deferred (as fosd's lanes run asynchronous
 * requests): what launching a layer's work costs the CPU, whatever the GPU's time.
 *   bench_linear_step [--m M] [--n N] [--k K] [--steps S] [--warmup W] [--override O] [--bias]
 *                     [--backend cuda|cpu]
 * Prints one JSON line: {"m":..,"n":..,"k":..,"backend":..,"step_ms":..,"fwd_bwd_ms":..,"put_ms":..,
 * "queue_put_us":..,"queue_fwd_us":..,"queue_bwd_us":..}.
 * Without a usable backend it prints {"error": "..."} and exits 1. */
#include "backend.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fos_err err;

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

int main(int argc, char **argv)
{
	int64_t m = 8192, n = 4096, k = 4096;
	int steps = 10, warmup = 3, bias = 0;
	const char *backend = "cuda";
	fos_linear_opts o = fos_linear_opts_default();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--bias")) {
			bias = 1;
			continue;
		}
		if (!v) {
			printf("{\"error\": \"%s needs a value\"}\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--m"))
			m = atoll(v);
		else if (!strcmp(a, "--n"))
			n = atoll(v);
		else if (!strcmp(a, "--k"))
			k = atoll(v);
		else if (!strcmp(a, "--steps"))
			steps = atoi(v);
		else if (!strcmp(a, "--warmup"))
			warmup = atoi(v);
		else if (!strcmp(a, "--backend"))
			backend = v;
		else if (!strcmp(a, "--override"))
			o.override = !strcmp(v, "quantized")        ? FOS_OVR_QUANTIZED
				     : !strcmp(v, "high_precision") ? FOS_OVR_HIGH_PRECISION
				     : !strcmp(v, "dequantized")    ? FOS_OVR_DEQUANTIZED
								    : FOS_OVR_DEFAULT;
		else {
			printf("{\"error\": \"unknown argument %s\"}\n", a);
			return 2;
		}
	}
	if (steps < 1 || steps > 1000) {
		printf("{\"error\": \"--steps must be 1 to 1000\"}\n");
		return 2;
	}
	fos_backend *be = !strcmp(backend, "cpu") ? fos_backend_cpu(0, &err) : fos_backend_open(backend, &err);
	if (!be) {
		printf("{\"error\": \"backend %s: %s\"}\n", backend, err.msg);
		return 1;
	}
	CK(fos_linear_check(&o, m, n, k, NULL, &err));
	uint16_t *x = dev_random(be, (size_t)(m * k), 1, 1.0f), *w = dev_random(be, (size_t)(n * k), 2, 0.05f);
	uint16_t *dy = dev_random(be, (size_t)(m * n), 3, 1.0f), *b = bias ? dev_random(be, (size_t)n, 4, 1.0f) : NULL;
	uint16_t *y = be->alloc(be, (size_t)(m * n) * 2), *dx = be->alloc(be, (size_t)(m * k) * 2);
	uint16_t *dw = be->alloc(be, (size_t)(n * k) * 2), *db = bias ? be->alloc(be, (size_t)n * 2) : NULL;
	if (!y || !dx || !dw || (bias && !db)) {
		printf("{\"error\": \"out of device memory\"}\n");
		return 1;
	}
	double *t_step = calloc((size_t)steps, sizeof *t_step), *t_fb = calloc((size_t)steps, sizeof *t_fb);
	double *t_put = calloc((size_t)steps, sizeof *t_put);
	double *q_put = calloc((size_t)steps, sizeof *q_put), *q_fwd = calloc((size_t)steps, sizeof *q_fwd);
	double *q_bwd = calloc((size_t)steps, sizeof *q_bwd);
	for (int s = -warmup; s < steps; s++) {
		fos_qweight qw;
		fos_saved sv;
		memset(&sv, 0, sizeof sv);
		CK(be->sync(be, &err));
		double t0 = bench_now();
		CK(fos_qweight_make(be, w, n, k, &o, 1, 0, &qw, &err));
		CK(be->sync(be, &err));
		double t1 = bench_now();
		CK(fos_linear_forward(be, x, m, &qw, &o, b, y, &sv, &err));
		CK(fos_linear_backward(be, &sv, &qw, dy, dx, dw, db, &err));
		CK(be->sync(be, &err));
		double t2 = bench_now();
		fos_saved_free(be, &sv);
		/* forward + backward again on the same quantized weight (columnwise copy now built) */
		memset(&sv, 0, sizeof sv);
		CK(be->sync(be, &err));
		double t3 = bench_now();
		CK(fos_linear_forward(be, x, m, &qw, &o, b, y, &sv, &err));
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
		CK(fos_qweight_make(be, w, n, k, &o, 1, 0, &qw, &err));
		double h1 = bench_now();
		CK(fos_linear_forward(be, x, m, &qw, &o, b, y, &sv, &err));
		double h2 = bench_now();
		CK(fos_linear_backward(be, &sv, &qw, dy, dx, dw, db, &err));
		double h3 = bench_now();
		be->defer_sync = 0;
		CK(be->sync(be, &err));
		fos_saved_free(be, &sv);
		fos_qweight_free(be, &qw);
		if (s >= 0) {
			q_put[s] = (h1 - h0) * 1e6;
			q_fwd[s] = (h2 - h1) * 1e6;
			q_bwd[s] = (h3 - h2) * 1e6;
			t_step[s] = (t2 - t0) * 1e3;
			t_put[s] = (t1 - t0) * 1e3;
			t_fb[s] = (t4 - t3) * 1e3;
		}
	}
	printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"backend\": \"%s\", \"device\": \"%s\", \"steps\": %d, "
	       "\"step_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"put_ms\": %.4f, \"queue_put_us\": %.1f, "
	       "\"queue_fwd_us\": %.1f, \"queue_bwd_us\": %.1f}\n",
	       (long long)m, (long long)n, (long long)k, be->name, be->device, steps, bench_quantile(t_step, steps, 0.5),
	       bench_quantile(t_fb, steps, 0.5), bench_quantile(t_put, steps, 0.5), bench_quantile(q_put, steps, 0.5),
	       bench_quantile(q_fwd, steps, 0.5), bench_quantile(q_bwd, steps, 0.5));
	void *bufs[] = {x, w, dy, b, y, dx, dw, db};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		if (bufs[i])
			be->free(be, bufs[i]);
	free(t_step);
	free(t_fb);
	free(t_put);
	free(q_put);
	free(q_fwd);
	free(q_bwd);
	be->destroy(be);
	return 0;
}
