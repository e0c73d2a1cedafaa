/* bench_ctx_switch.cu: an experiment of issue 16, not used by fosd: what handing GPU work back and
 * forth costs between two processes (two CUDA contexts, which the GPU time-slices) against two
 * threads of one process (one context), the pattern of a trainer and fosd taking turns on one GPU.
 *
 * Two sides take turns for a number of rounds; in each round each side runs one kernel that keeps
 * every SM busy for T microseconds (a globaltimer spin), so a round's ideal is 2T. Two hand-offs:
 *   - host: a side launches, synchronizes its stream, then writes a byte to the other side's pipe,
 *     which reads it before it launches (today's fosd calls: the caller's stream synced before the
 *     request, fosd's stream synced before the reply);
 *   - event: a side launches, records an interprocess event and writes a byte at once; the other
 *     reads it, makes its stream wait for that event and launches (an asynchronous design: no
 *     side waits on the host for the GPU). Timed over all rounds, ended by one stream sync.
 * Each configuration runs once with the sides as two threads of this process and once as two
 * processes (fork before CUDA starts), side by side in the same run; the ratio is two processes
 * over one. "per hand-off" is (round - 2T) / 2.
 *   bench_ctx_switch [rounds]     (default 200; needs a GPU) */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(2);                                                               \
		}                                                                              \
	} while (0)

enum { HOST = 0, EVENT = 1, NCONF = 4 };
static const int conf_mode[NCONF] = {HOST, HOST, EVENT, EVENT};
static const int conf_us[NCONF] = {20, 200, 20, 200};

__global__ void spin(long long ns, int *sink)
{
	long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < ns);
	if (t == 0)
		*sink = 1;
}

typedef struct side {
	int rfd, wfd, first, rounds, blocks, ipc; /* ipc: the sides are processes */
	cudaStream_t st;
	cudaEvent_t mine, theirs;
	int *sink;
	double us[NCONF]; /* first side: median round (host) or mean round (event) */
} side;

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void put_byte(int fd)
{
	char b = 1;
	if (write(fd, &b, 1) != 1)
		exit(3);
}

static void get_byte(int fd)
{
	char b;
	if (read(fd, &b, 1) != 1)
		exit(3);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void launch(side *s, int us)
{
	spin<<<s->blocks, 256, 0, s->st>>>((long long)us * 1000, s->sink);
	CK(cudaGetLastError());
}

/* One configuration; the first side returns its timing. */
static double turns(side *s, int mode, int us, int rounds)
{
	double *r = (double *)malloc(sizeof(double) * (size_t)rounds);
	double t0 = now_us();
	for (int i = 0; i < rounds; i++) {
		double ti = now_us();
		if (mode == HOST) {
			if (!s->first)
				get_byte(s->rfd);
			launch(s, us);
			CK(cudaStreamSynchronize(s->st));
			put_byte(s->wfd);
			if (s->first)
				get_byte(s->rfd);
		} else {
			if (!s->first) {
				get_byte(s->rfd);
				CK(cudaStreamWaitEvent(s->st, s->theirs, 0));
			}
			launch(s, us);
			CK(cudaEventRecord(s->mine, s->st));
			put_byte(s->wfd);
			if (s->first) {
				get_byte(s->rfd);
				CK(cudaStreamWaitEvent(s->st, s->theirs, 0));
			}
		}
		r[i] = now_us() - ti;
	}
	CK(cudaStreamSynchronize(s->st));
	double total = now_us() - t0, out;
	qsort(r, (size_t)rounds, sizeof *r, cmp_d);
	out = mode == HOST ? r[rounds / 2] : total / rounds;
	free(r);
	return out;
}

/* Both sides: set up (own stream, own event; the other's event through its IPC handle), then
 * every configuration after a short warm-up, the sides in step through the pipes. */
static void run_side(side *s)
{
	CK(cudaSetDevice(0));
	int sms = 0;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	s->blocks = sms * 2;
	CK(cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking));
	CK(cudaMalloc(&s->sink, sizeof(int)));
	CK(cudaEventCreateWithFlags(&s->mine, cudaEventDisableTiming | cudaEventInterprocess));
	if (s->ipc) {
		cudaIpcEventHandle_t h, o;
		CK(cudaIpcGetEventHandle(&h, s->mine));
		if (write(s->wfd, &h, sizeof h) != (ssize_t)sizeof h || read(s->rfd, &o, sizeof o) != (ssize_t)sizeof o)
			exit(3);
		CK(cudaIpcOpenEventHandle(&s->theirs, o));
	} else if (write(s->wfd, &s->mine, sizeof s->mine) != (ssize_t)sizeof s->mine ||
		   read(s->rfd, &s->theirs, sizeof s->theirs) != (ssize_t)sizeof s->theirs) {
		exit(3);
	}
	for (int c = 0; c < NCONF; c++) {
		turns(s, conf_mode[c], conf_us[c], 10);
		s->us[c] = turns(s, conf_mode[c], conf_us[c], s->rounds);
	}
	CK(cudaStreamSynchronize(s->st));
}

static void *thread_side(void *p)
{
	run_side((side *)p);
	return NULL;
}

/* Two sides wired to each other (a's writes reach b and b's reach a). */
static void pair(side *a, side *b, int rounds, int ipc)
{
	int ab[2], ba[2];
	if (pipe(ab) || pipe(ba))
		exit(3);
	*a = (side){.rfd = ba[0], .wfd = ab[1], .first = 1, .rounds = rounds, .ipc = ipc};
	*b = (side){.rfd = ab[0], .wfd = ba[1], .first = 0, .rounds = rounds, .ipc = ipc};
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	if (rounds < 10)
		rounds = 10;
	side a, b;
	double two[NCONF], one[NCONF];
	/* two processes first: nothing of CUDA may exist in this process before the fork */
	pair(&a, &b, rounds, 1);
	int res[2];
	if (pipe(res))
		return 3;
	pid_t pid = fork();
	if (pid == 0) {
		run_side(&b);
		_exit(0);
	}
	pid_t pid2 = fork();
	if (pid2 == 0) { /* the first side in a process of its own too, so this one stays CUDA-free */
		run_side(&a);
		if (write(res[1], a.us, sizeof a.us) != (ssize_t)sizeof a.us)
			_exit(3);
		_exit(0);
	}
	int st1 = 0, st2 = 0;
	waitpid(pid, &st1, 0);
	waitpid(pid2, &st2, 0);
	if (st1 || st2 || read(res[0], two, sizeof two) != (ssize_t)sizeof two) {
		fprintf(stderr, "the two-process run failed (%d, %d)\n", st1, st2);
		return 1;
	}
	pair(&a, &b, rounds, 0);
	pthread_t t;
	pthread_create(&t, NULL, thread_side, &b);
	run_side(&a);
	pthread_join(t, NULL);
	memcpy(one, a.us, sizeof one);
	cudaDeviceProp p;
	CK(cudaGetDeviceProperties(&p, 0));
	printf("# bench_ctx_switch: %s, %d rounds, every SM busy for T us per kernel\n", p.name, rounds);
	printf("| hand-off | T | one process (round) | two processes (round) | ratio | per hand-off, one | per hand-off, two |\n");
	printf("| --- | --- | --- | --- | --- | --- | --- |\n");
	for (int c = 0; c < NCONF; c++)
		printf("| %s | %d us | %.1f us | %.1f us | %.2fx | %.1f us | %.1f us |\n",
		       conf_mode[c] == HOST ? "host (sync, then pipe)" : "event (IPC event, no host wait)", conf_us[c],
		       one[c], two[c], two[c] / one[c], (one[c] - 2.0 * conf_us[c]) / 2, (two[c] - 2.0 * conf_us[c]) / 2);
	return 0;
}
