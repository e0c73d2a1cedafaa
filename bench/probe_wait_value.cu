/* probe_wait_value.cu: does a client stream's cuStreamWaitValue32 on a word of the client's own
 * cuMemAlloc memory end when ANOTHER process writes the word through a CUDA IPC mapping, in that
 * process's stream order (the ordering of libfos's asynchronous calls, PROTOCOL.md "Asynchronous
 * requests")? Run as `probe_wait_value` (the client); it spawns itself as the writer
 * (`probe_wait_value writer MODE HANDLES`), which maps the client's word and output, queues a slow
 * kernel that writes the output, then writes the word by MODE: "wv" (cuStreamWriteValue32) or
 * "kernel" (a one-thread kernel storing the word after a system fence). The client checks that its
 * stream waited (its copy of the output reads the writer's value, and was not done before), and
 * that a word written by the client itself on a second, non-blocking stream releases a wait too
 * (libfos's way out when fosd fails). Prints one line per case and "probe: ok" at the end; exit 0
 * only if every case held. Build: nvcc -O2 -o probe_wait_value bench/probe_wait_value.cu -lcuda */
#include <cuda.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CK(x)                                                                                     \
	do {                                                                                      \
		CUresult r_ = (x);                                                                \
		if (r_ != CUDA_SUCCESS) {                                                         \
			const char *n_ = "?";                                                     \
			cuGetErrorName(r_, &n_);                                                  \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, n_);            \
			exit(2);                                                                  \
		}                                                                                 \
	} while (0)

__global__ void slow_write(int *out, int v, long long spin)
{
	long long t0 = clock64();
	while (clock64() - t0 < spin)
		;
	*out = v;
}

__global__ void word_store(unsigned *w, unsigned v)
{
	__threadfence_system();
	*(volatile unsigned *)w = v;
	__threadfence_system();
}

__global__ void copy_int(const int *src, int *dst)
{
	*dst = *src;
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void hex(const unsigned char *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void unhex(const char *s, unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sscanf(s + 2 * i, "%2hhx", &b[i]);
}

static int writer(const char *mode, const char *hw, const char *ho, unsigned value, int outv)
{
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CUipcMemHandle h1, h2;
	unhex(hw, (unsigned char *)&h1, sizeof h1);
	unhex(ho, (unsigned char *)&h2, sizeof h2);
	CUdeviceptr w, o;
	CK(cuIpcOpenMemHandle(&w, h1, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CK(cuIpcOpenMemHandle(&o, h2, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	slow_write<<<1, 1, 0, s>>>((int *)o, outv, 200000000ll); /* ~0.1 s at ~2 GHz */
	if (!strcmp(mode, "wv"))
		CK(cuStreamWriteValue32(s, w + 8, value, CU_STREAM_WRITE_VALUE_DEFAULT));
	else
		word_store<<<1, 1, 0, s>>>((unsigned *)(w + 8), value);
	CK(cuStreamSynchronize(s));
	CK(cuIpcCloseMemHandle(w));
	CK(cuIpcCloseMemHandle(o));
	return 0;
}

/* One case: the client stream waits for word >= value, then copies out to res. */
static int one_case(const char *self, const char *mode, CUdeviceptr word, CUdeviceptr out, CUdeviceptr res, CUstream s,
		    unsigned value, int outv)
{
	CK(cuMemsetD32(out, 0, 1));
	CK(cuMemsetD32(res, 0, 1));
	CK(cuCtxSynchronize());
	CK(cuStreamWaitValue32(s, word + 8, value, CU_STREAM_WAIT_VALUE_GEQ));
	copy_int<<<1, 1, 0, s>>>((const int *)out, (int *)res);
	CUevent ev;
	CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	CK(cuEventRecord(ev, s));
	usleep(50 * 1000);
	int early = cuEventQuery(ev) == CUDA_SUCCESS; /* must still wait: nobody wrote the word */
	double t0 = now_ms();
	int ok_wait = 0;
	if (!strcmp(mode, "self")) {
		CUstream s2;
		CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
		CK(cuMemsetD32Async(out, (unsigned)outv, 1, s2));
		CK(cuStreamWriteValue32(s2, word + 8, value, CU_STREAM_WRITE_VALUE_DEFAULT));
		CK(cuStreamSynchronize(s2));
		CK(cuStreamDestroy(s2));
	} else {
		CUipcMemHandle hw, ho;
		CK(cuIpcGetMemHandle(&hw, word));
		CK(cuIpcGetMemHandle(&ho, out));
		char sw[200], so[200], sv[32], sov[32];
		hex((unsigned char *)&hw, sizeof hw, sw);
		hex((unsigned char *)&ho, sizeof ho, so);
		snprintf(sv, sizeof sv, "%u", value);
		snprintf(sov, sizeof sov, "%d", outv);
		char *argv[] = {(char *)self, (char *)"writer", (char *)mode, sw, so, sv, sov, NULL};
		pid_t pid;
		if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ)) {
			perror("posix_spawn");
			return 1;
		}
		int wst = 0;
		waitpid(pid, &wst, 0);
		if (!WIFEXITED(wst) || WEXITSTATUS(wst)) {
			printf("case %s: the writer failed (status %d)\n", mode, wst);
			return 1;
		}
	}
	while (now_ms() - t0 < 5000)
		if (cuEventQuery(ev) == CUDA_SUCCESS) {
			ok_wait = 1;
			break;
		}
	double waited = now_ms() - t0;
	int got = 0;
	if (ok_wait)
		CK(cuMemcpyDtoH(&got, res, sizeof got));
	int ok = !early && ok_wait && got == outv;
	printf("case %-6s: still waiting before the write %s, released %s after %.1f ms, read %d (want %d): %s\n", mode,
	       early ? "NO" : "yes", ok_wait ? "yes" : "NO (hung 5 s)", waited, got, outv, ok ? "ok" : "FAILED");
	CK(cuEventDestroy(ev));
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 7 && !strcmp(argv[1], "writer"))
		return writer(argv[2], argv[3], argv[4], (unsigned)strtoul(argv[5], 0, 10), atoi(argv[6]));
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	int drv = 0, nor = 0;
	cuDriverGetVersion(&drv);
	cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
	char name[128];
	cuDeviceGetName(name, sizeof name, dev);
	printf("probe: %s, driver API %d, wait_value_nor %d\n", name, drv, nor);
	CUdeviceptr word, out, res;
	CK(cuMemAlloc(&word, 4096));
	CK(cuMemAlloc(&out, 256));
	CK(cuMemAlloc(&res, 256));
	CK(cuMemsetD32(word, 0, 1024));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	int bad = 0;
	bad += one_case(argv[0], "wv", word, out, res, s, 1, 101);
	bad += one_case(argv[0], "kernel", word, out, res, s, 2, 202);
	bad += one_case(argv[0], "self", word, out, res, s, 3, 303);
	/* a value already passed (GEQ) does not wait: a slot reused with a larger value */
	CK(cuStreamWaitValue32(s, word + 8, 2, CU_STREAM_WAIT_VALUE_GEQ));
	CK(cuStreamSynchronize(s));
	/* the word latency: client write on s2 -> wait released on s, 1000 times */
	CUstream s2;
	CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	double t0 = now_ms();
	for (unsigned i = 4; i < 1004; i++) {
		CK(cuStreamWaitValue32(s, word + 8, i, CU_STREAM_WAIT_VALUE_GEQ));
		CK(cuStreamWriteValue32(s2, word + 8, i, CU_STREAM_WRITE_VALUE_DEFAULT));
	}
	CK(cuStreamSynchronize(s));
	printf("probe: 1000 wait/write pairs across two streams in %.2f ms\n", now_ms() - t0);
	printf("probe: %s\n", bad ? "FAILED" : "ok");
	return bad ? 1 : 0;
}
