/* bench_host_cost.cu: what the CUDA calls a layer's ops make cost the host, alone and while other
 * threads of the process make the same calls on streams of their own (fosd's lanes: one CUDA
 * context, a stream per lane). Not used by fosd: it prices the parts of a put, forward and backward
 * (bench_linear_step's queue_*_us) so that the calls worth removing can be chosen.
 *
 * Each thread owns a non-blocking stream and, for every kind of call below, makes it in batches of
 * 100 (the batch timed on the host, then the stream synchronized untimed, so the launch queue never
 * fills), 20 batches after 2 untimed ones; a row is the median of every thread's batches, per call:
 *   - cudaMallocAsync + cudaFreeAsync of 256 KiB from the device's default pool (release threshold
 *     raised, as the cuda backend does), a pair per call;
 *   - a kernel launch (an empty kernel of 1 block; of 132 blocks);
 *   - cudaMemcpyAsync of 4 bytes device to device (the saved amax);
 *   - cudaEventRecord + cudaStreamWaitEvent (a mark and a wait on it);
 *   - cudaSetDevice (the backend calls it before each op and each allocation);
 *   - cudaMallocFromPoolAsync + cudaFreeAsync of 256 KiB from a pool of the thread's own (what
 *     per-lane pools would cost);
 *   - cudaGraphLaunch of a graph of 10 empty kernels (what one graph per op would cost).
 *   bench_host_cost [threads...]     (default: 1 4; needs a GPU)
 * Prints one markdown table: a column per thread count. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                          \
	do {                                                                                           \
		cudaError_t e_ = (x);                                                                  \
		if (e_ != cudaSuccess) {                                                               \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                       \
		}                                                                                      \
	} while (0)

enum { BATCH = 100, BATCHES = 20, WARM = 2, MAX_THREADS = 64 };
enum { C_ALLOC, C_LAUNCH1, C_LAUNCH132, C_MEMCPY4, C_EVENT, C_SETDEV, C_ALLOC_OWN, C_GRAPH10, N_CALLS };
static const char *call_name[N_CALLS] = {
	"cudaMallocAsync + cudaFreeAsync, 256 KiB", "kernel launch, 1 block", "kernel launch, 132 blocks",
	"cudaMemcpyAsync, 4 bytes device to device", "cudaEventRecord + cudaStreamWaitEvent", "cudaSetDevice",
	"cudaMallocFromPoolAsync + cudaFreeAsync, 256 KiB, the thread's own pool", "cudaGraphLaunch, 10 empty kernels"};

typedef struct {
	cudaStream_t st;
	cudaEvent_t ev;
	int *word;
	cudaMemPool_t own;
	cudaGraphExec_t g10;
} thread_res;

__global__ void k_empty(int *p)
{
	if (p && threadIdx.x == 0 && blockIdx.x == 0)
		*p = 0;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

typedef struct {
	pthread_barrier_t *bar;
	double us[N_CALLS][BATCHES]; /* per call, each timed batch */
} thread_arg;

static void one_call(int c, const thread_res *r)
{
	cudaStream_t st = r->st;
	cudaEvent_t ev = r->ev;
	int *word = r->word;
	switch (c) {
	case C_ALLOC: {
		void *p = 0;
		CK(cudaMallocAsync(&p, 256 << 10, st));
		CK(cudaFreeAsync(p, st));
		break;
	}
	case C_LAUNCH1:
		k_empty<<<1, 32, 0, st>>>(0);
		break;
	case C_LAUNCH132:
		k_empty<<<132, 128, 0, st>>>(0);
		break;
	case C_MEMCPY4:
		CK(cudaMemcpyAsync(word + 1, word, 4, cudaMemcpyDeviceToDevice, st));
		break;
	case C_EVENT:
		CK(cudaEventRecord(ev, st));
		CK(cudaStreamWaitEvent(st, ev, 0));
		break;
	case C_SETDEV:
		CK(cudaSetDevice(0));
		break;
	case C_ALLOC_OWN: {
		void *p = 0;
		CK(cudaMallocFromPoolAsync(&p, 256 << 10, r->own, st));
		CK(cudaFreeAsync(p, st));
		break;
	}
	case C_GRAPH10:
		CK(cudaGraphLaunch(r->g10, st));
		break;
	}
}

static void *run(void *p)
{
	thread_arg *a = (thread_arg *)p;
	CK(cudaSetDevice(0));
	thread_res r;
	CK(cudaStreamCreateWithFlags(&r.st, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&r.ev, cudaEventDisableTiming));
	CK(cudaMalloc(&r.word, 64));
	cudaMemPoolProps pp;
	memset(&pp, 0, sizeof pp);
	pp.allocType = cudaMemAllocationTypePinned;
	pp.location.type = cudaMemLocationTypeDevice;
	pp.location.id = 0;
	CK(cudaMemPoolCreate(&r.own, &pp));
	uint64_t keep = UINT64_MAX;
	CK(cudaMemPoolSetAttribute(r.own, cudaMemPoolAttrReleaseThreshold, &keep));
	cudaGraph_t g;
	CK(cudaStreamBeginCapture(r.st, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < 10; i++)
		k_empty<<<132, 128, 0, r.st>>>(0);
	CK(cudaStreamEndCapture(r.st, &g));
	CK(cudaGraphInstantiate(&r.g10, g, 0));
	CK(cudaGraphDestroy(g));
	cudaStream_t st = r.st;
	for (int c = 0; c < N_CALLS; c++) {
		pthread_barrier_wait(a->bar); /* every thread makes the same kind of call at once */
		for (int b = -WARM; b < BATCHES; b++) {
			double t0 = now_us();
			for (int i = 0; i < BATCH; i++)
				one_call(c, &r);
			double t = (now_us() - t0) / BATCH;
			CK(cudaStreamSynchronize(st));
			if (b >= 0)
				a->us[c][b] = t;
		}
	}
	CK(cudaGraphExecDestroy(r.g10));
	CK(cudaMemPoolDestroy(r.own));
	CK(cudaFree(r.word));
	CK(cudaEventDestroy(r.ev));
	CK(cudaStreamDestroy(r.st));
	return NULL;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

/* Medians per call over every thread's batches, for n threads at once. */
static void measure(int n, double med[N_CALLS])
{
	thread_arg *args = (thread_arg *)calloc((size_t)n, sizeof *args);
	pthread_t th[MAX_THREADS];
	pthread_barrier_t bar;
	if (!args || pthread_barrier_init(&bar, NULL, (unsigned)n)) {
		fprintf(stderr, "cannot set up %d threads\n", n);
		exit(1);
	}
	for (int t = 0; t < n; t++) {
		args[t].bar = &bar;
		if (pthread_create(&th[t], NULL, run, &args[t])) {
			fprintf(stderr, "cannot start thread %d\n", t);
			exit(1);
		}
	}
	for (int t = 0; t < n; t++)
		pthread_join(th[t], NULL);
	double *all = (double *)malloc(sizeof(double) * (size_t)n * BATCHES);
	for (int c = 0; c < N_CALLS; c++) {
		for (int t = 0; t < n; t++)
			memcpy(all + (size_t)t * BATCHES, args[t].us[c], sizeof(double) * BATCHES);
		qsort(all, (size_t)n * BATCHES, sizeof *all, cmp_d);
		med[c] = all[(size_t)n * BATCHES / 2];
	}
	free(all);
	free(args);
	pthread_barrier_destroy(&bar);
}

int main(int argc, char **argv)
{
	int counts[16] = {1, 4}, nc = 2;
	if (argc > 1) {
		nc = 0;
		for (int i = 1; i < argc && nc < 16; i++) {
			counts[nc] = atoi(argv[i]);
			if (counts[nc] < 1 || counts[nc] > MAX_THREADS) {
				fprintf(stderr, "thread counts are 1 to %d\n", MAX_THREADS);
				return 2;
			}
			nc++;
		}
	}
	CK(cudaSetDevice(0));
	cudaMemPool_t pool;
	CK(cudaDeviceGetDefaultMemPool(&pool, 0));
	uint64_t keep = UINT64_MAX;
	CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	double med[16][N_CALLS];
	for (int i = 0; i < nc; i++)
		measure(counts[i], med[i]);
	printf("host time per call on %s (median of 100-call batches; each thread its own stream)\n\n", prop.name);
	printf("| call |");
	for (int i = 0; i < nc; i++)
		printf(" %d thread%s, us |", counts[i], counts[i] == 1 ? "" : "s");
	printf("\n|---|");
	for (int i = 0; i < nc; i++)
		printf("---|");
	printf("\n");
	for (int c = 0; c < N_CALLS; c++) {
		printf("| %s |", call_name[c]);
		for (int i = 0; i < nc; i++)
			printf(" %.2f |", med[i][c]);
		printf("\n");
	}
	return 0;
}
