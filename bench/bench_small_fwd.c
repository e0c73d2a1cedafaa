/* bench_small_fwd.c: where the time of a small forward (M = 128 rows by a cached K x N weight,
 * 4096 x 4096 by default) goes on the CUDA backend, in-process (issue 7), and how far several
 * backend instances (fosd's executor lanes: a stream each) run such forwards side by side.
 *
 *  1. Its pieces, each timed alone with CUDA events on the stream (GPU time) and the wall clock
 *     (host time until the call returns): h2d and d2h of 1 MiB from pinned and from pageable host
 *     memory, the amax pass, the quantize of X (memset + amax + quantize with the decoded operand),
 *     the GEMM with alpha from the two amaxes (k_alpha + cuBLASLt) and with a host alpha, the
 *     baseline cuBLASLt GEMM (heuristic's first choice with a 32 MiB workspace), the whole
 *     fos_linear_forward on device buffers (GPU span and host enqueue time), and host-only costs
 *     (an alloc/free pair from the stream-ordered pool, a sync of an idle stream).
 *  2. The whole request as a caller makes it (allocate X and Y, copy X in, forward, copy Y out,
 *     free), median and p99 of many, four ways: pageable or pinned host buffers, and the round-1
 *     way (h2d waits for its copy, the forward ends with a sync) or today's (fosd's lanes: h2d
 *     queued without waiting, no sync between the forward and the d2h). Every result is compared
 *     bit for bit with the first.
 *  3. T = 1, 2, 4, 8 threads, each with its own backend instance (own stream and cuBLASLt handle)
 *     and pinned buffers, sharing one cached weight made by instance 0, running pinned requests for
 *     a fixed time: requests/s and the ratio to one thread; every result checked bit for bit.
 *
 * Usage: bench_small_fwd [--m M] [--k K] [--n N] [--reps R] [--secs S] [--out FILE]
 * (FILE gets "key value" lines). Built without CUDA it says so and exits 0. */
#include "backend.h"
#include "bench_util.h"
#include "fos_format.h"
#include "shm.h"
#ifdef FOS_HAVE_CUDA
#include "cuda_backend.h"
#include "support_cuda_baseline.h"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <time.h>

#ifndef FOS_HAVE_CUDA
int main(void)
{
	printf("bench_small_fwd: built without CUDA: nothing to measure\n");
	return 0;
}
#else

static fos_err g_e;
static FILE *g_out;
static const uint16_t *g_x_host; /* X (M, K) in pageable host memory */

#define CK(x)                                                                                                  \
	do {                                                                                                   \
		if ((x) != FOS_OK) {                                                                           \
			fprintf(stderr, "bench_small_fwd: %s failed: %s\n", #x, g_e.msg);                      \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

static void sf_kv(const char *k, double v)
{
	if (g_out)
		fprintf(g_out, "%s %.4f\n", k, v);
}

/* Host memory pinned the way fosd pins a client's region (cudaHostRegister on a shared mapping). */
static void *sf_pinned(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char msg[256];
	const fosd_pin_hook *h = fosd_shm_cuda_pin_hook();
	if (p == MAP_FAILED || !h || h->pin(p, n, msg, sizeof msg)) {
		fprintf(stderr, "bench_small_fwd: cannot pin %zu bytes\n", n);
		exit(1);
	}
	memset(p, 0, n);
	return p;
}

/* ---- 1. pieces ------------------------------------------------------------------------------- */

typedef struct piece_ctx {
	fos_backend *be;
	const fos_qweight *qw;
	int64_t m, k, n;
	uint16_t *xd, *yd, *xdec;
	uint16_t *wdec; /* the weight's decoded operand (fos_qweight_decode) */
	fos_qtensor xq;
	void *hpin, *hpage; /* host source/target of 1 MiB-ish copies (max(m k, m n) * 2 bytes) */
} piece_ctx;

typedef int (*piece_fn)(piece_ctx *c);

static int p_h2d_pin(piece_ctx *c)
{
	return c->be->h2d(c->be, c->xd, c->hpin, (size_t)(c->m * c->k) * 2, &g_e);
}
static int p_h2d_page(piece_ctx *c)
{
	return c->be->h2d(c->be, c->xd, c->hpage, (size_t)(c->m * c->k) * 2, &g_e);
}
static int p_d2h_pin(piece_ctx *c)
{
	return c->be->d2h(c->be, c->hpin, c->yd, (size_t)(c->m * c->n) * 2, &g_e);
}
static int p_d2h_page(piece_ctx *c)
{
	return c->be->d2h(c->be, c->hpage, c->yd, (size_t)(c->m * c->n) * 2, &g_e);
}
static int p_amax(piece_ctx *c)
{
	return c->be->amax(c->be, c->xd, FOS_BF16, c->m, c->k, 0, c->xq.amax, &g_e);
}
static int p_quant(piece_ctx *c)
{
	fos_qcfg q = fos_qcfg_default();
	return c->be->quantize(c->be, c->xd, FOS_BF16, c->m, c->k, &q, NULL, &c->xq, c->xdec, &g_e);
}
static int p_gemm_dev(piece_ctx *c)
{
	float dinv = 1.0f / fos_bound_d(256);
	fos_gemm_epi epi = {c->xq.amax, dinv, c->qw->q.amax, dinv, 0, 0};
	return c->be->gemm(c->be, c->xdec, c->wdec, c->m, c->n, c->k, &epi, c->yd, &g_e);
}
static int p_gemm_host(piece_ctx *c)
{
	fos_gemm_epi epi = fos_gemm_epi_plain();
	epi.a_dinv = 0.25f;
	return c->be->gemm(c->be, c->xdec, c->wdec, c->m, c->n, c->k, &epi, c->yd, &g_e);
}
static int p_gemm_base(piece_ctx *c)
{
	return fos_cuda_gemm_baseline(c->be, c->xdec, c->wdec, c->m, c->n, c->k, c->yd, (size_t)32 << 20, &g_e);
}
static int p_forward(piece_ctx *c)
{
	fos_linear_opts o = fos_linear_opts_default();
	return fos_linear_forward(c->be, c->xd, c->m, c->qw, &o, NULL, c->yd, NULL, &g_e);
}
static int p_allocfree(piece_ctx *c)
{
	void *p = c->be->alloc(c->be, (size_t)(c->m * c->k) * 2);
	if (!p)
		return fos_seterr(&g_e, FOS_ENOMEM, "alloc");
	c->be->free(c->be, p);
	return FOS_OK;
}
static int p_sync(piece_ctx *c)
{
	return c->be->sync(c->be, &g_e);
}

/* Median GPU microseconds (events around the call; 0 for host-only pieces) and median host
 * microseconds until the call returned, over reps calls after 20 warm-ups. */
static void piece(piece_ctx *c, const char *key, const char *what, piece_fn f, int reps)
{
	double *g = malloc(sizeof(double) * (size_t)reps), *h = malloc(sizeof(double) * (size_t)reps);
	for (int i = 0; i < 20; i++)
		CK(f(c));
	CK(c->be->sync(c->be, &g_e));
	for (int i = 0; i < reps; i++) {
		CK(fos_cuda_mark(c->be, 0, &g_e));
		double t0 = bench_now();
		CK(f(c));
		h[i] = (bench_now() - t0) * 1e6;
		CK(fos_cuda_mark(c->be, 1, &g_e));
		float ms;
		CK(fos_cuda_elapsed_ms(c->be, 0, 1, &ms, &g_e)); /* waits for the call's work */
		g[i] = ms * 1e3;
	}
	double gm = bench_quantile(g, reps, 0.5), hm = bench_quantile(h, reps, 0.5);
	printf("| %-62s | %9.1f | %9.1f |\n", what, gm, hm);
	char k[96];
	snprintf(k, sizeof k, "%s_gpu_us", key);
	sf_kv(k, gm);
	snprintf(k, sizeof k, "%s_host_us", key);
	sf_kv(k, hm);
	free(g);
	free(h);
}

/* ---- 2. whole requests ----------------------------------------------------------------------- */

/* One request: allocate X and Y, X in, forward, Y out, free. old: h2d waits and a sync follows the
 * forward (round 1); else the caller's backend queues h2d without waiting (set by the caller). */
static int sf_request_e(fos_backend *be, const fos_qweight *qw, const void *x, int64_t m, void *y, int old,
			fos_err *e)
{
	int64_t k = qw->k, n = qw->n;
	fos_linear_opts o = fos_linear_opts_default();
	void *xd = be->alloc(be, (size_t)(m * k) * 2), *yd = be->alloc(be, (size_t)(m * n) * 2);
	if (!xd || !yd)
		return fos_seterr(e, FOS_ENOMEM, "out of device memory");
	int rc = be->h2d(be, xd, x, (size_t)(m * k) * 2, e);
	if (!rc)
		rc = fos_linear_forward(be, xd, m, qw, &o, NULL, yd, NULL, e);
	if (!rc && old)
		rc = be->sync(be, e);
	if (!rc)
		rc = be->d2h(be, y, yd, (size_t)(m * n) * 2, e);
	be->free(be, xd);
	be->free(be, yd);
	return rc;
}

static int sf_request(fos_backend *be, const fos_qweight *qw, const void *x, int64_t m, void *y, int old)
{
	return sf_request_e(be, qw, x, m, y, old, &g_e);
}

/* gap_us > 0: the thread sleeps that long before each request (as a service's thread waits for the
 * next request), so the request starts on a CPU that was idle. */
static void whole(fos_backend *be, const fos_qweight *qw, const void *x, void *y, const uint16_t *ref, int64_t m,
		  int old, int reps, int gap_us, const char *key, const char *what, int *same)
{
	CK(fos_cuda_set_h2d_nowait(be, !old, &g_e));
	double *t = malloc(sizeof(double) * (size_t)reps);
	for (int i = 0; i < 50; i++)
		CK(sf_request(be, qw, x, m, y, old));
	for (int i = 0; i < reps; i++) {
		if (gap_us > 0)
			usleep((useconds_t)gap_us);
		double t0 = bench_now();
		CK(sf_request(be, qw, x, m, y, old));
		t[i] = (bench_now() - t0) * 1e6;
	}
	*same = *same && !memcmp(y, ref, (size_t)(m * qw->n) * 2);
	CK(fos_cuda_set_h2d_nowait(be, 0, &g_e));
	double p50 = bench_quantile(t, reps, 0.5), p99 = bench_quantile(t, reps, 0.99);
	printf("| %-62s | %9.1f | %9.1f |\n", what, p50, p99);
	char k[96];
	snprintf(k, sizeof k, "%s_p50_us", key);
	sf_kv(k, p50);
	snprintf(k, sizeof k, "%s_p99_us", key);
	sf_kv(k, p99);
	free(t);
}

/* ---- 3. instances side by side --------------------------------------------------------------- */

typedef struct sf_worker {
	pthread_t th;
	fos_backend *be; /* its own instance */
	const fos_qweight *qw;
	const uint16_t *ref;
	int64_t m;
	double secs;
	atomic_int *go;
	uint64_t done;
	int bad, failed;
	int mode; /* 0: whole requests; 1: only their two copies (X in, Y out); 2: only the forward */
	char err[300];
} sf_worker;

/* What a worker of mode 1 or 2 does per request: the copies alone (the same bytes as a request),
 * or the forward alone on device buffers, with the stream's sync a request ends with. */
static int sf_part_e(sf_worker *w, void *xd, void *yd, const uint8_t *h, uint8_t *hy, fos_err *e)
{
	size_t xb = (size_t)(w->m * w->qw->k) * 2, yb = (size_t)(w->m * w->qw->n) * 2;
	if (w->mode == 1) {
		int rc = w->be->h2d(w->be, xd, h, xb, e);
		return rc ? rc : w->be->d2h(w->be, hy, yd, yb, e);
	}
	fos_linear_opts o = fos_linear_opts_default();
	int rc = fos_linear_forward(w->be, xd, w->m, w->qw, &o, NULL, yd, NULL, e);
	return rc ? rc : w->be->sync(w->be, e);
}

static void *sf_worker_main(void *arg)
{
	sf_worker *w = arg;
	size_t xb = (size_t)(w->m * w->qw->k) * 2, yb = (size_t)(w->m * w->qw->n) * 2;
	uint8_t *h = sf_pinned(xb + yb);
	memcpy(h, g_x_host, xb);
	fos_err e;
	memset(&e, 0, sizeof e);
	if (fos_cuda_set_h2d_nowait(w->be, 1, &e) || sf_request_e(w->be, w->qw, h, w->m, h + xb, 0, &e)) {
		w->failed = 1;
		snprintf(w->err, sizeof w->err, "%s", e.msg);
	}
	w->bad += memcmp(h + xb, w->ref, yb) != 0;
	atomic_fetch_add(w->go, 1);
	while (atomic_load(w->go) > 0)
		;
	double end = bench_now() + w->secs;
	void *xd = NULL, *yd = NULL;
	if (w->mode) {
		xd = w->be->alloc(w->be, xb);
		yd = w->be->alloc(w->be, yb);
		if (!xd || !yd || w->be->h2d(w->be, xd, h, xb, &e)) {
			w->failed = 1;
			snprintf(w->err, sizeof w->err, "device buffers: %s", e.msg);
		}
	}
	while (w->mode && !w->failed && bench_now() < end) {
		if (sf_part_e(w, xd, yd, h, h + xb, &e)) {
			w->failed = 1;
			snprintf(w->err, sizeof w->err, "%s", e.msg);
		}
		w->done++;
	}
	if (xd)
		w->be->free(w->be, xd);
	if (yd)
		w->be->free(w->be, yd);
	while (!w->mode && !w->failed && bench_now() < end) {
		memset(h + xb, 0, 64); /* a result must be written each time */
		if (sf_request_e(w->be, w->qw, h, w->m, h + xb, 0, &e)) {
			w->failed = 1;
			snprintf(w->err, sizeof w->err, "%s", e.msg);
			break;
		}
		if (w->done % 64 == 0)
			w->bad += memcmp(h + xb, w->ref, yb) != 0;
		w->done++;
	}
	w->bad += memcmp(h + xb, w->ref, yb) != 0;
	fosd_shm_cuda_pin_hook()->unpin(h);
	munmap(h, xb + yb);
	return NULL;
}

static double sf_rate(fos_backend **bes, int t, int mode, const fos_qweight *qw, const uint16_t *ref, int64_t m,
		      double secs, int *bad)
{
	sf_worker *w = calloc((size_t)t, sizeof *w);
	atomic_int go;
	atomic_init(&go, 0);
	for (int i = 0; i < t; i++) {
		w[i] = (sf_worker){.be = bes[i], .qw = qw, .ref = ref, .m = m, .secs = secs, .go = &go, .mode = mode};
		if (pthread_create(&w[i].th, NULL, sf_worker_main, &w[i])) {
			fprintf(stderr, "bench_small_fwd: pthread_create\n");
			exit(1);
		}
	}
	while (atomic_load(&go) < t)
		;
	double t0 = bench_now();
	atomic_store(&go, -1);
	uint64_t total = 0;
	for (int i = 0; i < t; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].failed) {
			fprintf(stderr, "bench_small_fwd: thread %d: %s\n", i, w[i].err);
			exit(1);
		}
		total += w[i].done;
		*bad += w[i].bad;
	}
	double dt = bench_now() - t0;
	free(w);
	return (double)total / dt;
}

int main(int argc, char **argv)
{
	int64_t m = 128, k = 4096, n = 4096;
	int reps = 2000;
	double secs = 2.0;
	const char *out = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--m") && i + 1 < argc)
			m = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--k") && i + 1 < argc)
			k = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--n") && i + 1 < argc)
			n = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--secs") && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else {
			fprintf(stderr, "usage: bench_small_fwd [--m M] [--k K] [--n N] [--reps R] [--secs S] [--out FILE]\n");
			return 2;
		}
	}
	if (m % 128 || k % 128 || n % 128 || m <= 0 || k <= 0 || n <= 0 || reps < 10) {
		fprintf(stderr, "bench_small_fwd: M, K, N must be positive multiples of 128, reps >= 10\n");
		return 2;
	}
	g_out = out ? fopen(out, "w") : NULL;
	fos_backend *be = fos_backend_cuda(0, &g_e);
	if (!be) {
		printf("bench_small_fwd: no CUDA backend (%s): nothing to measure\n", g_e.msg);
		return 0;
	}
	size_t xb = (size_t)(m * k) * 2, yb = (size_t)(m * n) * 2, big = xb > yb ? xb : yb;
	uint16_t *w = malloc((size_t)(n * k) * 2), *x = malloc(xb), *ref = malloc(yb), *ypage = malloc(yb);
	bench_fill_bf16(w, (size_t)(n * k), 1, 0.05f);
	bench_fill_bf16(x, (size_t)(m * k), 2, 1.0f);
	g_x_host = x;
	fos_qweight qw;
	fos_linear_opts o = fos_linear_opts_default();
	void *wd = be->alloc(be, (size_t)(n * k) * 2);
	CK(wd ? be->h2d(be, wd, w, (size_t)(n * k) * 2, &g_e) : fos_seterr(&g_e, FOS_ENOMEM, "weight"));
	CK(fos_qweight_make(be, wd, n, k, &o, 0, 0, &qw, &g_e));
	be->free(be, wd);
	char desc[160];
	CK(fos_cuda_gemm_describe(be, m, n, k, desc, sizeof desc, &g_e));
	printf("\nsmall forward %lldx%lldx%lld on %s; the GEMM's plan: %s\n\n", (long long)m, (long long)k, (long long)n,
	       be->device, desc);

	/* ---- 1 ---- */
	piece_ctx c;
	memset(&c, 0, sizeof c);
	c.be = be, c.qw = &qw, c.m = m, c.k = k, c.n = n;
	c.xd = be->alloc(be, xb);
	c.yd = be->alloc(be, yb);
	c.xdec = be->alloc(be, xb);
	c.wdec = be->alloc(be, (size_t)(n * k) * 2);
	CK(c.wdec ? fos_qweight_decode(be, &qw, 0, c.wdec, &g_e) : fos_seterr(&g_e, FOS_ENOMEM, "buffers"));
	c.hpin = sf_pinned(big);
	c.hpage = malloc(big);
	memcpy(c.hpin, x, xb);
	memcpy(c.hpage, x, xb);
	CK(fos_qtensor_alloc(be, &c.xq, m, k, 0, &g_e));
	CK(c.xd && c.yd && c.xdec ? FOS_OK : fos_seterr(&g_e, FOS_ENOMEM, "buffers"));
	CK(p_h2d_page(&c));
	printf("| %-62s | %9s | %9s |\n", "piece (median of each)", "GPU us", "host us");
	printf("|%s|%s|%s|\n", "----------------------------------------------------------------", "-----------",
	       "-----------");
	int pr = reps > 1000 ? 1000 : reps;
	piece(&c, "h2d_pinned", "h2d 1 MiB from pinned memory (waits)", p_h2d_pin, pr);
	piece(&c, "h2d_pageable", "h2d 1 MiB from pageable memory (waits)", p_h2d_page, pr);
	CK(fos_cuda_set_h2d_nowait(be, 1, &g_e));
	piece(&c, "h2d_pinned_nowait", "h2d 1 MiB from pinned memory, queued (fosd's lanes)", p_h2d_pin, pr);
	CK(fos_cuda_set_h2d_nowait(be, 0, &g_e));
	piece(&c, "amax", "amax of X (memset + kernel)", p_amax, pr);
	piece(&c, "quantize", "quantize X: memset + amax + 4/6 kernel + decoded", p_quant, pr);
	piece(&c, "gemm_dev_alpha", "GEMM, alpha from the amaxes (k_alpha + cuBLASLt)", p_gemm_dev, pr);
	piece(&c, "gemm_host_alpha", "GEMM, host alpha (cuBLASLt only)", p_gemm_host, pr);
	piece(&c, "gemm_baseline", "baseline cuBLASLt GEMM (heuristic, 32 MiB workspace)", p_gemm_base, pr);
	piece(&c, "forward", "fos_linear_forward on device X, Y (no sync inside; a CUDA graph)", p_forward, pr);
	CK(fos_cuda_set_graphs(be, 0, &g_e));
	piece(&c, "forward_nograph", "the same without graphs (FOS_CUDA_GRAPHS=0)", p_forward, pr);
	CK(fos_cuda_set_graphs(be, 1, &g_e));
	piece(&c, "d2h_pinned", "d2h 1 MiB to pinned memory (waits)", p_d2h_pin, pr);
	piece(&c, "d2h_pageable", "d2h 1 MiB to pageable memory (waits)", p_d2h_page, pr);
	piece(&c, "allocfree", "alloc + free of 1 MiB (stream-ordered pool; host only)", p_allocfree, pr);
	piece(&c, "sync_idle", "sync of a stream whose last work is an event record", p_sync, pr);
	CK(be->sync(be, &g_e));
	fos_qtensor_free(be, &c.xq);
	be->free(be, c.xd);
	be->free(be, c.yd);
	be->free(be, c.xdec);
	be->free(be, c.wdec);

	/* ---- 2 ---- */
	CK(sf_request(be, &qw, x, m, ref, 1)); /* the reference: round-1 way, pageable */
	uint8_t *pin = sf_pinned(xb + yb);
	memcpy(pin, x, xb);
	int same = 1;
	printf("\n| %-62s | %9s | %9s |\n", "whole request: alloc, X in, forward, Y out, free", "p50 us", "p99 us");
	printf("|%s|%s|%s|\n", "----------------------------------------------------------------", "-----------",
	       "-----------");
	whole(be, &qw, x, ypage, ref, m, 1, reps, 0, "req_pageable_round1",
	      "pageable, round-1 way (h2d waits, sync after forward)", &same);
	whole(be, &qw, x, ypage, ref, m, 0, reps, 0, "req_pageable_now", "pageable, now (no waits before the d2h)", &same);
	whole(be, &qw, pin, pin + xb, ref, m, 1, reps, 0, "req_pinned_round1", "pinned, round-1 way (fosd round 1's path)",
	      &same);
	whole(be, &qw, pin, pin + xb, ref, m, 0, reps, 0, "req_pinned_now", "pinned, now (fosd's lanes' path)", &same);
	whole(be, &qw, pin, pin + xb, ref, m, 0, reps, 150, "req_pinned_gap150",
	      "pinned, now, after 150 us asleep (a service between requests)", &same);
	CK(fos_cuda_set_graphs(be, 0, &g_e));
	whole(be, &qw, pin, pin + xb, ref, m, 0, reps, 0, "req_pinned_nograph", "pinned, now, without graphs", &same);
	whole(be, &qw, pin, pin + xb, ref, m, 0, reps, 150, "req_pinned_gap150_nograph",
	      "pinned, now, after 150 us asleep, without graphs", &same);
	CK(fos_cuda_set_graphs(be, 1, &g_e));
	unsigned long long gr, gl, gf;
	CK(fos_cuda_graph_stats(be, &gr, &gl, &gf, &g_e));
	printf("CUDA graphs: %llu recorded, %llu launched, %llu recordings failed\n", gr, gl, gf);
	printf("\nall results bit-identical: %s\n", same ? "yes" : "NO");
	sf_kv("bit_identical_requests", same);

	/* ---- 3 ---- */
	enum { TMAX = 8 };
	fos_backend *bes[TMAX];
	bes[0] = be;
	for (int i = 1; i < TMAX; i++) {
		bes[i] = fos_backend_cuda(0, &g_e);
		CK(bes[i] ? FOS_OK : FOS_EINTERNAL);
	}
	printf("\n| %-50s | %12s | %8s |\n", "pinned requests, one instance per thread", "requests/s", "vs 1");
	printf("|%s|%s|%s|\n", "----------------------------------------------------", "--------------", "----------");
	int bad = 0;
	const int ts[] = {1, 2, 4, 8};
	/* whole requests; then where their ceiling comes from: the copies alone, the forward alone */
	const char *const mname[] = {"", ", copies only (1 MiB in, 1 MiB out)", ", forward only (+ sync)"};
	const char *const mkey[] = {"rate", "rate_copies", "rate_fwd"};
	for (int md = 0; md < 3; md++) {
		double r1 = 0;
		for (int i = 0; i < 4; i++) {
			double r = sf_rate(bes, ts[i], md, &qw, ref, m, md ? secs / 2 : secs, &bad);
			if (i == 0)
				r1 = r;
			char what[96], key[48];
			snprintf(what, sizeof what, "%d thread%s%s", ts[i], ts[i] == 1 ? "" : "s", mname[md]);
			printf("| %-50s | %12.0f | %8.2f |\n", what, r, r / r1);
			snprintf(key, sizeof key, "%s_%d", mkey[md], ts[i]);
			sf_kv(key, r);
		}
	}
	printf("\nresults of every instance bit-identical to the reference: %s (%d mismatches)\n", bad ? "NO" : "yes", bad);
	sf_kv("bit_identical_instances", bad == 0);
	for (int i = 1; i < TMAX; i++)
		bes[i]->destroy(bes[i]);
	fos_qweight_free(be, &qw);
	be->destroy(be);
	if (g_out)
		fclose(g_out);
	return same && !bad ? 0 : 1;
}
#endif
