/* bench_devmem.c: device tensors (PROTOCOL.md "Device tensors") against the same work in process,
 * in one run on one GPU. A cuda fosd must be running at --url (ipc://, same GPU); the calls go
 * through libfos (fos_tensor_cuda), over a request channel unless a row says "socket". Rows:
 *  - forward MxKxN with a cached weight: in process (the CUDA backend's fos_linear_forward on
 *    device buffers, synced: the baseline) against fosd with X and Y as device tensors (channel,
 *    and socket), and against fosd through host memory (the trainer's copies to and from its GPU
 *    included);
 *  - backward (dY in, dX and dW out, the default recipe's quantized backward): in process against
 *    device tensors;
 *  - the small forward 128x4096x4096: p50 in process and through fosd;
 *  - throughput of small forwards from 1 and from --clients clients (threads, each with its own
 *    connection, channel and device buffers).
 * Medians of --reps timed runs after warm-ups (p50 of 50x as many for the small forward). Prints a
 * markdown table (also to --out), then fosd's own split of the forward's time (Stats). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bench_util.h"
#include "fos.h"

static const char *g_url = "ipc:///tmp/fosd.sock";
static int g_reps = 20;
static FILE *g_out;

static void die(const char *what, const fos_status *st)
{
	fprintf(stderr, "bench_devmem: %s: %s\n", what, st ? st->message : "failed");
	exit(1);
}

static void emit(const char *line)
{
	fputs(line, stdout);
	if (g_out)
		fputs(line, g_out);
}

static void row(const char *what, const char *shape, double t, double base)
{
	char line[320];
	snprintf(line, sizeof line, "| %s | %s | %.1f us | %.1f us | %.3fx |\n", what, shape, t * 1e6, base * 1e6,
		 t / base);
	emit(line);
}

/* A client of fosd with weight "w" put, and device buffers for one shape's X, Y, dY, dX, dW. */
typedef struct cli {
	fos_client *c;
	void *x, *y, *dy, *dx, *dw;
} cli;

static void cli_open(cli *k, int channel, int64_t m, int64_t kk, int64_t n)
{
	fos_status st;
	if (fos_connect(g_url, NULL, 60000, &k->c, &st))
		die("connect", &st);
	if (channel && fos_channel_open(k->c, 0, 1000, &st))
		die("channel", &st);
	size_t bx = (size_t)(m * kk * 2), by = (size_t)(m * n * 2), bw = (size_t)(n * kk * 2);
	if (fos_cuda_malloc(0, bx, &k->x, &st) || fos_cuda_malloc(0, by, &k->y, &st) ||
	    fos_cuda_malloc(0, by, &k->dy, &st) || fos_cuda_malloc(0, bx, &k->dx, &st) ||
	    fos_cuda_malloc(0, bw, &k->dw, &st))
		die("device memory", &st);
	uint16_t *h = malloc(by > bx ? by : bx);
	bench_fill_bf16(h, (by > bx ? by : bx) / 2, 3, 1.0f);
	if (fos_cuda_memcpy(k->x, h, bx, &st) || fos_cuda_memcpy(k->dy, h, by, &st))
		die("fill", &st);
	free(h);
}

static void cli_close(cli *k)
{
	fos_status st;
	void *all[] = {k->x, k->y, k->dy, k->dx, k->dw};
	for (int i = 0; i < 5; i++) {
		fos_cuda_release(k->c, all[i], &st);
		fos_cuda_free(all[i], &st);
	}
	fos_close(k->c);
}

static void fwd(cli *k, int64_t m, int64_t kk, int64_t n, int save, fos_context *ctx)
{
	fos_status st;
	fos_tensor x = fos_tensor_cuda(FOS_DTYPE_BF16, m, kk, k->x), y = fos_tensor_cuda(FOS_DTYPE_BF16, m, n, k->y);
	fos_forward_opts o;
	memset(&o, 0, sizeof o);
	o.save_context = save;
	if (fos_forward(k->c, "w", &x, NULL, &o, &y, save ? ctx : NULL, &st))
		die("forward", &st);
}

static void bwd(cli *k, int64_t m, int64_t kk, int64_t n, fos_context *ctx)
{
	fos_status st;
	fos_tensor dy = fos_tensor_cuda(FOS_DTYPE_BF16, m, n, k->dy), dx = fos_tensor_cuda(FOS_DTYPE_BF16, m, kk, k->dx),
		   dw = fos_tensor_cuda(FOS_DTYPE_BF16, n, kk, k->dw), db = fos_tensor_out();
	if (fos_backward(k->c, ctx, &dy, NULL, &dx, &dw, &db, &st))
		die("backward", &st);
	free(db.data);
}

/* Median (q = 0.5) of n timed forwards after warm-ups. */
static double time_fwd(cli *k, int64_t m, int64_t kk, int64_t n, int reps)
{
	double *t = malloc(sizeof(double) * (size_t)reps);
	for (int i = -5; i < reps; i++) {
		double t0 = bench_now();
		fwd(k, m, kk, n, 0, NULL);
		if (i >= 0)
			t[i] = bench_now() - t0;
	}
	double med = bench_quantile(t, reps, 0.5);
	free(t);
	return med;
}

/* ---- in process ---------------------------------------------------------------------------------- */

typedef struct inproc {
	fos_backend *be;
	fos_qweight qw;
	fos_linear_opts o;
	const fos_wops *wo; /* NULL: W decoded on demand; else its decoded copy (fosd's decoded tier) */
} inproc;

/* In-process forwards on x, y (NULL: the backend's own memory). */
static double inproc_fwd_on(inproc *ip, int64_t m, int64_t k, int64_t n, int reps, void *xo, void *yo)
{
	fos_err e;
	fos_backend *be = ip->be;
	void *x = xo ? xo : be->alloc(be, (size_t)(m * k * 2)), *y = yo ? yo : be->alloc(be, (size_t)(m * n * 2));
	uint16_t *h = malloc((size_t)(m * k * 2));
	bench_fill_bf16(h, (size_t)(m * k), 3, 1.0f);
	be->h2d(be, x, h, (size_t)(m * k * 2), &e);
	free(h);
	double *t = malloc(sizeof(double) * (size_t)reps);
	for (int i = -5; i < reps; i++) {
		double t0 = bench_now();
		if (fos_linear_forward_w(be, x, m, &ip->qw, ip->wo, &ip->o, NULL, y, NULL, &e) || be->sync(be, &e)) {
			fprintf(stderr, "in-process forward: %s\n", e.msg);
			exit(1);
		}
		if (i >= 0)
			t[i] = bench_now() - t0;
	}
	double med = bench_quantile(t, reps, 0.5);
	free(t);
	if (!xo)
		be->free(be, x);
	if (!yo)
		be->free(be, y);
	be->sync(be, &e);
	return med;
}

static double inproc_fwd(inproc *ip, int64_t m, int64_t k, int64_t n, int reps)
{
	return inproc_fwd_on(ip, m, k, n, reps, NULL, NULL);
}

static double inproc_bwd(inproc *ip, int64_t m, int64_t k, int64_t n, int reps)
{
	fos_err e;
	fos_backend *be = ip->be;
	void *x = be->alloc(be, (size_t)(m * k * 2)), *y = be->alloc(be, (size_t)(m * n * 2)),
	     *dy = be->alloc(be, (size_t)(m * n * 2)), *dx = be->alloc(be, (size_t)(m * k * 2)),
	     *dw = be->alloc(be, (size_t)(n * k * 2));
	uint16_t *h = malloc((size_t)(m * n * 2));
	bench_fill_bf16(h, (size_t)(m * n), 3, 1.0f);
	be->h2d(be, x, h, (size_t)(m * k * 2), &e);
	be->h2d(be, dy, h, (size_t)(m * n * 2), &e);
	free(h);
	double *t = malloc(sizeof(double) * (size_t)reps);
	for (int i = -5; i < reps; i++) {
		fos_saved sv;
		memset(&sv, 0, sizeof sv);
		if (fos_linear_forward(be, x, m, &ip->qw, &ip->o, NULL, y, &sv, &e) || be->sync(be, &e))
			break;
		double t0 = bench_now();
		if (fos_linear_backward(be, &sv, &ip->qw, dy, dx, dw, NULL, &e) || be->sync(be, &e))
			break;
		if (i >= 0)
			t[i] = bench_now() - t0;
		fos_saved_free(be, &sv);
	}
	double med = bench_quantile(t, reps, 0.5);
	free(t);
	void *all[] = {x, y, dy, dx, dw};
	for (int i = 0; i < 5; i++)
		be->free(be, all[i]);
	be->sync(be, &e);
	return med;
}

/* ---- throughput ------------------------------------------------------------------------------------ */

typedef struct worker {
	pthread_t th;
	int64_t m, k, n;
	double secs;
	long done;
} worker;

static void *work(void *arg)
{
	worker *w = arg;
	cli k;
	cli_open(&k, 1, w->m, w->k, w->n);
	for (int i = 0; i < 20; i++)
		fwd(&k, w->m, w->k, w->n, 0, NULL);
	double end = bench_now() + w->secs;
	while (bench_now() < end) {
		fwd(&k, w->m, w->k, w->n, 0, NULL);
		w->done++;
	}
	cli_close(&k);
	return NULL;
}

static double throughput(int clients, int64_t m, int64_t k, int64_t n, double secs)
{
	worker *w = calloc((size_t)clients, sizeof *w);
	for (int i = 0; i < clients; i++) {
		w[i].m = m, w[i].k = k, w[i].n = n, w[i].secs = secs;
		pthread_create(&w[i].th, NULL, work, &w[i]);
	}
	long total = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(w[i].th, NULL);
		total += w[i].done;
	}
	free(w);
	return (double)total / secs;
}

/* The GPU's own rate of small forwards: clients threads, each with a backend instance (own
 * stream) and the weight quantized and decoded in it, forwards back to back for secs. */
typedef struct gworker {
	pthread_t th;
	int64_t m, k, n;
	double secs;
	const uint16_t *w;
	long done;
} gworker;

static void *gwork(void *arg)
{
	gworker *g = arg;
	fos_err e;
	fos_backend *be = fos_backend_cuda(0, &e);
	if (!be)
		return NULL;
	fos_linear_opts o = fos_linear_opts_default();
	fos_qweight qw;
	void *wd = be->alloc(be, (size_t)(g->n * g->k * 2)), *x = be->alloc(be, (size_t)(g->m * g->k * 2)),
	     *y = be->alloc(be, (size_t)(g->m * g->n * 2));
	/* W decoded once, as fosd's decoded tier serves small forwards */
	uint16_t *wdec = be->alloc(be, (size_t)(g->n * g->k * 2));
	if (!wdec || be->h2d(be, wd, g->w, (size_t)(g->n * g->k * 2), &e) ||
	    fos_qweight_make(be, wd, g->n, g->k, &o, 0, 0, &qw, &e) || fos_qweight_decode(be, &qw, 0, wdec, &e) ||
	    be->zero(be, x, (size_t)(g->m * g->k * 2), &e))
		return NULL;
	fos_wops wo = {NULL, wdec, NULL};
	for (int i = 0; i < 20; i++)
		fos_linear_forward_w(be, x, g->m, &qw, &wo, &o, NULL, y, NULL, &e), be->sync(be, &e);
	double end = bench_now() + g->secs;
	while (bench_now() < end) {
		if (fos_linear_forward_w(be, x, g->m, &qw, &wo, &o, NULL, y, NULL, &e) || be->sync(be, &e))
			break;
		g->done++;
	}
	fos_qweight_free(be, &qw);
	be->free(be, wdec);
	be->free(be, wd);
	be->free(be, x);
	be->free(be, y);
	be->destroy(be);
	return NULL;
}

static double gpu_rate(int clients, int64_t m, int64_t k, int64_t n, const uint16_t *w, double secs)
{
	gworker *g = calloc((size_t)clients, sizeof *g);
	for (int i = 0; i < clients; i++) {
		g[i].m = m, g[i].k = k, g[i].n = n, g[i].secs = secs, g[i].w = w;
		pthread_create(&g[i].th, NULL, gwork, &g[i]);
	}
	long total = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(g[i].th, NULL);
		total += g[i].done;
	}
	free(g);
	return (double)total / secs;
}

/* fosd's own split of an op's time since it started (Stats). */
static void op_split(fos_client *c, const char *op)
{
	fos_stats_info s;
	fos_status st;
	if (fos_stats(c, &s, &st))
		return;
	for (int i = 0; i < s.n_ops; i++)
		if (!strcmp(s.ops[i].op, op))
			printf("  fosd %s: %llu OK, p50 receipt-to-reply %llu us, queue %llu us, run %llu us, %llu run at "
			       "once\n",
			       op, (unsigned long long)s.ops[i].lat_count, (unsigned long long)s.ops[i].lat_p50_us,
			       (unsigned long long)s.ops[i].queue_p50_us, (unsigned long long)s.ops[i].run_p50_us,
			       (unsigned long long)s.ops[i].ran_at_once);
}

int main(int argc, char **argv)
{
	int64_t M = 8192, K = 4096, N = 4096;
	int clients = 8;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--url") && i + 1 < argc)
			g_url = argv[++i];
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			g_reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--clients") && i + 1 < argc)
			clients = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--m") && i + 1 < argc)
			M = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			g_out = fopen(argv[++i], "w");
		else {
			fprintf(stderr, "usage: bench_devmem [--url URL] [--reps R] [--clients C] [--m M] [--out FILE]\n");
			return 2;
		}
	}
	fos_err e;
	inproc ip;
	memset(&ip, 0, sizeof ip);
	if (!(ip.be = fos_backend_cuda(0, &e))) {
		fprintf(stderr, "bench_devmem: cuda backend: %s\n", e.msg);
		return 1;
	}
	ip.o = fos_linear_opts_default();
	uint16_t *w = malloc((size_t)(N * K * 2));
	bench_fill_bf16(w, (size_t)(N * K), 7, 0.05f);
	void *wd = ip.be->alloc(ip.be, (size_t)(N * K * 2));
	if (ip.be->h2d(ip.be, wd, w, (size_t)(N * K * 2), &e) ||
	    fos_qweight_make(ip.be, wd, N, K, &ip.o, 1, 1, &ip.qw, &e)) {
		fprintf(stderr, "bench_devmem: in-process weight: %s\n", e.msg);
		return 1;
	}
	fos_client *fc;
	fos_status st;
	if (fos_connect(g_url, NULL, 60000, &fc, &st))
		die("connect", &st);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, w);
	if (fos_put_weight(fc, "w", 1, &tw, NULL, NULL, &st))
		die("put_weight", &st);

	char shape[64], line[320];
	snprintf(line, sizeof line, "| what | shape | time (median of %d) | baseline | ratio |\n|---|---|---|---|---|\n",
		 g_reps);
	emit(line);
	const int64_t ms[2] = {M, 128};
	for (int si = 0; si < 2; si++) {
		int64_t m = ms[si];
		snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)m, (long long)K, (long long)N);
		double tin = inproc_fwd(&ip, m, K, N, g_reps);
		cli ch, so;
		cli_open(&ch, 1, m, K, N);
		cli_open(&so, 0, m, K, N);
		if (si == 0) {
			row("forward: in process (baseline) vs fosd, device X and Y, channel", shape,
			    time_fwd(&ch, m, K, N, g_reps), tin);
			/* the same in process on memory from cuMemAlloc, as a client's (not the backend's pool) */
			row("forward: in process (baseline) vs in process on X, Y from cuMemAlloc", shape,
			    inproc_fwd_on(&ip, m, K, N, g_reps, ch.x, ch.y), tin);
			row("forward: in process (baseline) vs fosd, device X and Y, socket", shape,
			    time_fwd(&so, m, K, N, g_reps), tin);
		} else {
			int n = g_reps * 50;
			double *t = malloc(sizeof(double) * (size_t)n);
			for (int i = -50; i < n; i++) {
				double t0 = bench_now();
				fwd(&ch, m, K, N, 0, NULL);
				if (i >= 0)
					t[i] = bench_now() - t0;
			}
			double p50 = bench_quantile(t, n, 0.5);
			free(t);
			tin = inproc_fwd(&ip, m, K, N, n);
			row("small forward p50: in process, W decoded on demand (baseline) vs fosd, device X and Y, channel",
			    shape, p50, tin);
			snprintf(line, sizeof line, "|   (fosd minus in process) | %s | %.1f us | | |\n", shape, (p50 - tin) * 1e6);
			emit(line);
			/* the in-process forward that reads a decoded copy of W, as fosd's decoded tier gives */
			fos_wops wo = {NULL, NULL, NULL};
			uint16_t *wdec = ip.be->alloc(ip.be, (size_t)(N * K * 2));
			if (fos_qweight_decode(ip.be, &ip.qw, 0, wdec, &e)) {
				fprintf(stderr, "decode: %s\n", e.msg);
				return 1;
			}
			wo.wdec = wdec;
			ip.wo = &wo;
			double tdec = inproc_fwd(&ip, m, K, N, n);
			ip.wo = NULL;
			row("small forward p50: in process, decoded W (baseline) vs fosd, device X and Y, channel", shape, p50,
			    tdec);
			snprintf(line, sizeof line, "|   (fosd minus in process) | %s | %.1f us | | |\n", shape,
				 (p50 - tdec) * 1e6);
			emit(line);
			ip.be->free(ip.be, wdec);
			fos_stats_snapshot *ss = NULL;
			uint64_t hits = 0, entries = 0;
			if (!fos_stats_take(fc, &ss, &st)) {
				fos_stats_get(ss, "decoded_tier_hits", &hits);
				fos_stats_get(ss, "decoded_tier_entries", &entries);
				fos_stats_free(ss);
			}
			printf("  fosd decoded tier: %llu entries, %llu hits\n", (unsigned long long)entries,
			       (unsigned long long)hits);
			row("small forward median: in process (baseline) vs fosd, device X and Y, socket", shape,
			    time_fwd(&so, m, K, N, g_reps * 10), tin);
		}
		/* through host memory: the trainer's copies to and from its GPU included */
		uint16_t *xh = malloc((size_t)(m * K * 2));
		double *t = malloc(sizeof(double) * (size_t)g_reps);
		for (int i = -3; i < g_reps; i++) {
			double t0 = bench_now();
			fos_cuda_memcpy(xh, ch.x, (size_t)(m * K * 2), &st);
			fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, m, K, xh), y = fos_tensor_out();
			if (fos_forward(so.c, "w", &x, NULL, NULL, &y, NULL, &st))
				die("host forward", &st);
			fos_cuda_memcpy(ch.y, y.data, (size_t)(m * N * 2), &st);
			free(y.data);
			if (i >= 0)
				t[i] = bench_now() - t0;
		}
		row("forward: in process (baseline) vs fosd through host memory (socket, copies included)", shape,
		    bench_quantile(t, g_reps, 0.5), tin);
		free(xh);
		if (si == 0) {
			double tbin = inproc_bwd(&ip, m, K, N, g_reps);
			for (int i = -3; i < g_reps; i++) {
				fos_context ctx;
				fwd(&ch, m, K, N, 1, &ctx);
				double t0 = bench_now();
				bwd(&ch, m, K, N, &ctx);
				if (i >= 0)
					t[i] = bench_now() - t0;
			}
			row("backward (quantized): in process (baseline) vs fosd, device dY, dX, dW, channel", shape,
			    bench_quantile(t, g_reps, 0.5), tbin);
		}
		free(t);
		cli_close(&ch);
		cli_close(&so);
	}
	double one = throughput(1, 128, K, N, 2.0), many = throughput(clients, 128, K, N, 2.0);
	snprintf(line, sizeof line,
		 "| small forwards/s, device tensors, channels: 1 client (baseline) vs %d clients | 128x%lldx%lld | "
		 "%.0f/s | %.0f/s | %.2fx |\n",
		 clients, (long long)K, (long long)N, many, one, many / one);
	emit(line);
	double g1 = gpu_rate(1, 128, K, N, w, 2.0), g8 = gpu_rate(clients, 128, K, N, w, 2.0);
	snprintf(line, sizeof line,
		 "| small forwards/s in process, decoded W (the GPU's rate): 1 thread (baseline) vs %d threads, a "
		 "backend instance each | 128x%lldx%lld | %.0f/s | %.0f/s | %.2fx |\n",
		 clients, (long long)K, (long long)N, g8, g1, g8 / g1);
	emit(line);
	snprintf(line, sizeof line, "|   (fosd's %d clients against the in-process %d threads) | | | | %.2fx |\n", clients,
		 clients, many / g8);
	emit(line);
	op_split(fc, "forward");
	op_split(fc, "backward");
	fos_close(fc);
	fos_qweight_free(ip.be, &ip.qw);
	ip.be->destroy(ip.be);
	if (g_out)
		fclose(g_out);
	return 0;
}
