/* bench_nng.c: the transport baselines of the service benchmark (bench/service.mk): a bare nng
 * REQ/REP server in a second process on an ipc socket, and a client measuring
 *   - the round trip of a 64-byte request and a 64-byte reply (p50, p99, mean over many), and
 *   - a 64 MiB request with a 64-byte reply (median of repetitions), reported as GB/s,
 *   - a 32 MiB request with a 32 MiB reply (the shape of an inline 4096^3 forward).
 * Both sides do what fosd and libfos do with the bytes: the client allocates a message and copies
 * the payload in from its own buffer, the server allocates its reply and copies the result in.
 * Both use the allocator settings fosd uses (a warm heap, alloc_tune.c) unless --malloc-default.
 *
 * Usage: bench_nng [--quick] [--malloc-default] [--out FILE]
 * Prints a table, and with --out writes `key value` lines for bench_service --baseline. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "bench_util.h"

static void bn_warm_malloc(void)
{
	mallopt(M_MMAP_MAX, 0);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	mallopt(M_TOP_PAD, 64 << 20);
}

/* The server: each request starts with the u64 size of the reply it wants. */
static int bn_serve(const char *url)
{
	nng_socket s;
	int rv;
	if ((rv = nng_rep0_open(&s)) || (rv = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, (size_t)1 << 30)) ||
	    (rv = nng_listen(s, url, NULL, 0))) {
		fprintf(stderr, "bench_nng server: %s\n", nng_strerror(rv));
		return 1;
	}
	static uint8_t result[(size_t)64 << 20];
	memset(result, 0x5A, sizeof result);
	for (;;) {
		nng_msg *m, *r;
		if (nng_recvmsg(s, &m, 0))
			return 0;
		uint64_t want = 64;
		if (nng_msg_len(m) >= 8)
			memcpy(&want, nng_msg_body(m), 8);
		if (want > sizeof result)
			want = sizeof result;
		nng_msg_free(m);
		if (nng_msg_alloc(&r, (size_t)want))
			return 1;
		memcpy(nng_msg_body(r), result, (size_t)want);
		if (nng_sendmsg(s, r, 0)) {
			nng_msg_free(r);
			return 1;
		}
	}
}

/* One request of req bytes (payload copied from src) wanting a reply of rep bytes. */
static int bn_call(nng_socket s, const uint8_t *src, size_t req, uint64_t rep)
{
	nng_msg *m;
	if (nng_msg_alloc(&m, req))
		return -1;
	uint8_t *b = nng_msg_body(m);
	memcpy(b, src, req);
	memcpy(b, &rep, 8);
	if (nng_sendmsg(s, m, 0)) {
		nng_msg_free(m);
		return -1;
	}
	if (nng_recvmsg(s, &m, 0))
		return -1;
	int ok = nng_msg_len(m) == rep;
	nng_msg_free(m);
	return ok ? 0 : -1;
}

/* The 64 B round trip with the client polling for its reply (as libfos does with fos_set_spin): a
 * REQ context whose aio callback sets a flag the caller spins on before nng_aio_wait. */
static atomic_int bn_done;
static void bn_aio_cb(void *arg)
{
	(void)arg;
	atomic_store(&bn_done, 1);
}

static int bn_call_spin(nng_ctx ctx, nng_aio *aio, const uint8_t *src)
{
	nng_msg *m;
	if (nng_msg_alloc(&m, 64))
		return -1;
	uint64_t rep = 64;
	memcpy(nng_msg_body(m), src, 64);
	memcpy(nng_msg_body(m), &rep, 8);
	atomic_store(&bn_done, 0);
	nng_aio_set_msg(aio, m);
	nng_ctx_send(ctx, aio);
	nng_aio_wait(aio);
	if (nng_aio_result(aio)) {
		nng_msg_free(m);
		return -1;
	}
	atomic_store(&bn_done, 0);
	nng_ctx_recv(ctx, aio);
	double end = bench_now() + 2e-3;
	while (!atomic_load(&bn_done) && bench_now() < end)
		__builtin_ia32_pause();
	nng_aio_wait(aio);
	if (nng_aio_result(aio))
		return -1;
	m = nng_aio_get_msg(aio);
	int ok = nng_msg_len(m) == 64;
	nng_msg_free(m);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	int quick = 0, warm = 1;
	const char *out = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--malloc-default"))
			warm = 0;
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--serve") && i + 1 < argc) {
			if (warm)
				bn_warm_malloc();
			return bn_serve(argv[++i]);
		} else {
			fprintf(stderr, "usage: bench_nng [--quick] [--malloc-default] [--out FILE]\n");
			return 2;
		}
	}
	char dir[] = "/tmp/bench-nng-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char url[128];
	snprintf(url, sizeof url, "ipc://%s/sock", dir);
	/* a fresh process for the server (nng is not fork-safe once initialized: fork before any use) */
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		execl("/proc/self/exe", "bench_nng", warm ? "--serve" : "--malloc-default", warm ? url : "--serve",
		      warm ? (char *)NULL : url, (char *)NULL);
		_exit(127);
	}
	if (warm)
		bn_warm_malloc();
	nng_socket s;
	int rv = nng_req0_open(&s);
	if (!rv)
		rv = nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if (!rv)
		rv = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, (size_t)1 << 30);
	if (!rv) {
		for (int i = 0; i < 500; i++) { /* until the server listens */
			rv = nng_dial(s, url, NULL, 0);
			if (rv != NNG_ECONNREFUSED && rv != NNG_ENOENT)
				break;
			usleep(10000);
		}
	}
	int code = 1;
	if (rv) {
		fprintf(stderr, "bench_nng: %s\n", nng_strerror(rv));
		goto done;
	}
	size_t big = (size_t)64 << 20, half = big / 2;
	uint8_t *src = malloc(big);
	if (!src)
		goto done;
	memset(src, 0x33, big);
	int n_rtt = quick ? 500 : 5000, n_big = quick ? 5 : 20;
	double *t = malloc(sizeof(double) * (size_t)n_rtt);
	for (int i = 0; i < 300; i++) /* warm up */
		if (bn_call(s, src, 64, 64))
			goto fail;
	for (int i = 0; i < n_rtt; i++) {
		double t0 = bench_now();
		if (bn_call(s, src, 64, 64))
			goto fail;
		t[i] = bench_now() - t0;
	}
	double mean = 0;
	for (int i = 0; i < n_rtt; i++)
		mean += t[i] / n_rtt;
	double p50 = bench_quantile(t, n_rtt, 0.50), p99 = bench_quantile(t, n_rtt, 0.99);
	/* the same, polling */
	nng_ctx sctx;
	nng_aio *saio;
	if (nng_ctx_open(&sctx, s) || nng_aio_alloc(&saio, bn_aio_cb, NULL))
		goto fail;
	for (int i = 0; i < 300; i++)
		if (bn_call_spin(sctx, saio, src))
			goto fail;
	for (int i = 0; i < n_rtt; i++) {
		double t0 = bench_now();
		if (bn_call_spin(sctx, saio, src))
			goto fail;
		t[i] = bench_now() - t0;
	}
	nng_aio_free(saio);
	nng_ctx_close(sctx);
	double sp50 = bench_quantile(t, n_rtt, 0.50), sp99 = bench_quantile(t, n_rtt, 0.99);
	/* 64 MiB up, 64 B back */
	for (int i = 0; i < 3; i++)
		if (bn_call(s, src, big, 64))
			goto fail;
	for (int i = 0; i < n_big; i++) {
		double t0 = bench_now();
		if (bn_call(s, src, big, 64))
			goto fail;
		t[i] = bench_now() - t0;
	}
	double up = bench_quantile(t, n_big, 0.5);
	/* 32 MiB up, 32 MiB back */
	for (int i = 0; i < 3; i++)
		if (bn_call(s, src, half, half))
			goto fail;
	for (int i = 0; i < n_big; i++) {
		double t0 = bench_now();
		if (bn_call(s, src, half, half))
			goto fail;
		t[i] = bench_now() - t0;
	}
	double rt = bench_quantile(t, n_big, 0.5);
	printf("bare nng REQ/REP over ipc, %s allocator, server in a second process\n", warm ? "warm-heap" : "glibc default");
	printf("  64 B round trip:            p50 %8.1f us  p99 %8.1f us  mean %8.1f us  (%d calls)\n", p50 * 1e6,
	       p99 * 1e6, mean * 1e6, n_rtt);
	printf("  the same, client polling:   p50 %8.1f us  p99 %8.1f us\n", sp50 * 1e6, sp99 * 1e6);
	printf("  64 MiB request, 64 B reply: %8.2f ms  %6.2f GB/s  (median of %d)\n", up * 1e3, big / up / 1e9, n_big);
	printf("  32 MiB request, 32 MiB reply: %6.2f ms  %6.2f GB/s moved  (median of %d)\n", rt * 1e3, big / rt / 1e9,
	       n_big);
	if (out) {
		FILE *f = fopen(out, "w");
		if (!f) {
			perror(out);
			goto fail;
		}
		fprintf(f, "nng_rtt64_p50_us %.2f\nnng_rtt64_p99_us %.2f\nnng_rtt64_mean_us %.2f\n", p50 * 1e6, p99 * 1e6,
			mean * 1e6);
		fprintf(f, "nng_rtt64_spin_p50_us %.2f\nnng_rtt64_spin_p99_us %.2f\n", sp50 * 1e6, sp99 * 1e6);
		fprintf(f, "nng_up64m_ms %.3f\nnng_up64m_gbps %.3f\nnng_rt32m_ms %.3f\nnng_rt32m_gbps %.3f\n", up * 1e3,
			big / up / 1e9, rt * 1e3, big / rt / 1e9);
		fclose(f);
	}
	code = 0;
fail:
	if (code)
		fprintf(stderr, "bench_nng: a call failed\n");
	free(t);
	free(src);
done:
	nng_close(s);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	char sock[160];
	snprintf(sock, sizeof sock, "%s/sock", dir);
	unlink(sock);
	rmdir(dir);
	return code;
}
