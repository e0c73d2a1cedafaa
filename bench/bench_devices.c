/* bench_devices.c: one fosd over several GPUs (`fosd --devices all`) against a fosd of one GPU, in
 * one run: the forwards per second one client reaches on a one-GPU fosd (--url-one, the baseline),
 * and those each of n clients reaches at the same time, client i on GPU i of an all-GPU fosd
 * (--url-all), for a small forward (128x4096x4096) and a large one (8192x4096x4096). Each client
 * has its own connection and request channel, X and Y as device tensors on its GPU, and its own
 * weight: "w.i" put with the default placement (the least loaded device: device i, since the
 * weights are put in order and are the same size), so its forwards run on its GPU (placement.c).
 * The target of issue 20: every client at >= 0.9x the baseline. With one GPU the all-GPU fosd
 * serves one client, the same work as the baseline. Prints a markdown table (also to --out).
 *
 *   fosd --backend cuda --devices 0 --listen ipc:///tmp/fone.sock &
 *   fosd --backend cuda --devices all --listen ipc:///tmp/fall.sock &
 *   bench_devices --url-one ipc:///tmp/fone.sock --url-all ipc:///tmp/fall.sock [--secs 3] [--out F] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "fos.h"

#define K 4096
#define N 4096
#define MAXG 16

static const char *g_one = "ipc:///tmp/fone.sock", *g_all = "ipc:///tmp/fall.sock";
static double g_secs = 3.0;
static FILE *g_out;

static void die(const char *what, const fos_status *st)
{
	fprintf(stderr, "bench_devices: %s: %s\n", what, st ? st->message : "failed");
	exit(1);
}

static void emit(const char *line)
{
	fputs(line, stdout);
	if (g_out)
		fputs(line, g_out);
}

/* Puts the bf16 weight name (N, K) from host memory with the default placement. */
static void put(const char *url, const char *name)
{
	fos_client *c;
	fos_status st;
	if (fos_connect(url, NULL, 60000, &c, &st))
		die("connect", &st);
	uint16_t *w = malloc((size_t)N * K * 2);
	bench_fill_bf16(w, (size_t)N * K, 11, 0.05f);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, w);
	if (fos_put_weight(c, name, 1, &tw, NULL, NULL, &st))
		die("put_weight", &st);
	free(w);
	fos_close(c);
}

typedef struct client {
	pthread_t th;
	const char *url;
	int gpu;
	char weight[32];
	int64_t m;
	pthread_barrier_t *start;
	long done;
	double secs;
} client;

static void *client_main(void *arg)
{
	client *k = arg;
	fos_client *c;
	fos_status st;
	if (fos_connect(k->url, NULL, 60000, &c, &st) || fos_channel_open(c, 0, 1000, &st))
		die("connect", &st);
	size_t bx = (size_t)(k->m * K * 2), by = (size_t)(k->m * N * 2);
	void *x, *y;
	if (fos_cuda_malloc(k->gpu, bx, &x, &st) || fos_cuda_malloc(k->gpu, by, &y, &st))
		die("device memory", &st);
	uint16_t *h = malloc(bx);
	bench_fill_bf16(h, bx / 2, 3 + (uint64_t)k->gpu, 1.0f);
	if (fos_cuda_memcpy(x, h, bx, &st))
		die("fill", &st);
	free(h);
	fos_tensor tx = fos_tensor_cuda(FOS_DTYPE_BF16, k->m, K, x), ty = fos_tensor_cuda(FOS_DTYPE_BF16, k->m, N, y);
	for (int i = 0; i < 10; i++) /* warm: plans, mappings, graphs */
		if (fos_forward(c, k->weight, &tx, NULL, NULL, &ty, NULL, &st))
			die("forward", &st);
	pthread_barrier_wait(k->start);
	double t0 = bench_now(), end = t0 + g_secs;
	while (bench_now() < end) {
		if (fos_forward(c, k->weight, &tx, NULL, NULL, &ty, NULL, &st))
			die("forward", &st);
		k->done++;
	}
	k->secs = bench_now() - t0;
	fos_cuda_release(c, x, &st);
	fos_cuda_release(c, y, &st);
	fos_cuda_free(x, &st);
	fos_cuda_free(y, &st);
	fos_close(c);
	return NULL;
}

/* n clients at once, client i on GPU i with weight w.i: each one's forwards per second in rate. */
static void run(const char *url, int n, int64_t m, double *rate)
{
	client k[MAXG];
	pthread_barrier_t b;
	pthread_barrier_init(&b, NULL, (unsigned)n);
	for (int i = 0; i < n; i++) {
		memset(&k[i], 0, sizeof k[i]);
		k[i].url = url;
		k[i].gpu = i;
		k[i].m = m;
		k[i].start = &b;
		snprintf(k[i].weight, sizeof k[i].weight, "w.%d", i);
		pthread_create(&k[i].th, NULL, client_main, &k[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(k[i].th, NULL);
		rate[i] = (double)k[i].done / k[i].secs;
	}
	pthread_barrier_destroy(&b);
}

static int devices_of(const char *url)
{
	fos_client *c;
	fos_status st;
	if (fos_connect(url, NULL, 60000, &c, &st))
		die("connect", &st);
	fos_stats_snapshot *s;
	if (fos_stats_take(c, &s, &st))
		die("stats", &st);
	int n = 0;
	uint64_t v;
	char name[64];
	for (;;) {
		snprintf(name, sizeof name, "devices.%d.lanes", n);
		if (fos_stats_get(s, name, &v))
			break;
		n++;
	}
	fos_stats_free(s);
	fos_close(c);
	return n ? n : 1;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--url-one") && i + 1 < argc)
			g_one = argv[++i];
		else if (!strcmp(argv[i], "--url-all") && i + 1 < argc)
			g_all = argv[++i];
		else if (!strcmp(argv[i], "--secs") && i + 1 < argc)
			g_secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
			if (!(g_out = fopen(argv[++i], "w"))) {
				perror(argv[i]);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: bench_devices [--url-one URL] [--url-all URL] [--secs S] [--out FILE]\n");
			return 2;
		}
	}
	int n = devices_of(g_all);
	if (n > MAXG)
		n = MAXG;
	put(g_one, "w.0");
	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof name, "w.%d", i);
		put(g_all, name); /* the least loaded device: i */
	}
	char line[400];
	snprintf(line, sizeof line, "# bench_devices: %d device%s in the all-GPU fosd, %.1f s per measurement\n", n,
		 n == 1 ? "" : "s", g_secs);
	emit(line);
	emit("| what | shape | forwards/s | baseline | ratio |\n| --- | --- | --- | --- | --- |\n");
	const int64_t ms[] = {128, 8192};
	for (int s = 0; s < 2; s++) {
		double base, rate[MAXG];
		run(g_one, 1, ms[s], &base);
		run(g_all, n, ms[s], rate);
		for (int i = 0; i < n; i++) {
			snprintf(line, sizeof line,
				 "| client on GPU %d of %d at once (fosd --devices all) vs one client of a one-GPU fosd | "
				 "%lldx%dx%d | %.0f/s | %.0f/s | %.3fx |\n",
				 i, n, (long long)ms[s], K, N, rate[i], base, rate[i] / base);
			emit(line);
		}
	}
	if (g_out)
		fclose(g_out);
	return 0;
}
