/* bench_service.c: fosd as a service on one host (bench/service.mk, results in
 * bench/BENCHMARKS.md). Starts fosd (--backend auto: cuda where a GPU is usable, else cpu)
 * on a private ipc socket, drives it through libfos, and times in the same run the baseline each
 * target is a ratio to:
 *   1. forward M x K x N with a cached weight, X and Y in shared memory, against the same forward
 *      called in-process through the backend with its own host<->device copies;
 *   2. an inline 64 MiB request (a forward whose X is 64 MiB, reply without Y) against a bare nng
 *      64 MiB request (bench_nng, --baseline);
 *   3. a small forward (128 x K by the cached K x N weight, through shm) p50/p99 against the bare
 *      nng 64-byte round trip (bench_nng);
 *   4. requests/s of 8 concurrent clients of small forwards against one client.
 * Every result that goes through fosd is checked bit for bit against the in-process forward.
 *
 * Usage: bench_service [--fosd PATH] [--backend auto|cpu|cuda] [--baseline FILE] [--out FILE]
 *                      [--k K] [--quick] [--secs S] [--clients N] [--workers N] [--streams N]
 * (--streams: fosd's executor lanes, backend instances running requests at once; default: fosd's,
 * 4 on cuda, 1 on cpu).
 * Shapes: K = N = 4096 on cuda (1024 on cpu unless --k), big M = K, small M = 128 (the small
 * forward of the service rows in bench/BENCHMARKS.md), inline X of
 * 64 MiB (M = 32 Mi / K). */
#include "backend.h"
#include "bench_util.h"
#include "fos.h"
#include "fos_format.h"
#include "fos_wire.h"

#include <errno.h>
#include <libgen.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#define DIE(...)                                                                                               \
	do {                                                                                                   \
		fprintf(stderr, "bench_service: " __VA_ARGS__);                                                \
		fputc('\n', stderr);                                                                           \
		bs_cleanup();                                                                                  \
		exit(1);                                                                                       \
	} while (0)

static char g_dir[64];
static char g_url[160];
static pid_t g_fosd;
static pid_t g_bare; /* bench_nng --serve: the bare nng server the inline transfer alternates with */

static void bs_cleanup(void)
{
	if (g_bare > 0) {
		kill(g_bare, SIGTERM);
		waitpid(g_bare, NULL, 0);
		g_bare = 0;
	}
	if (g_fosd > 0) {
		kill(g_fosd, SIGTERM);
		for (int i = 0; i < 500; i++) {
			if (waitpid(g_fosd, NULL, WNOHANG) == g_fosd) {
				g_fosd = 0;
				break;
			}
			usleep(10000);
		}
		if (g_fosd > 0) {
			kill(g_fosd, SIGKILL);
			waitpid(g_fosd, NULL, 0);
		}
		g_fosd = 0;
	}
	if (g_dir[0]) {
		char p[200];
		snprintf(p, sizeof p, "%s/fosd.sock", g_dir);
		unlink(p);
		snprintf(p, sizeof p, "%s/bare.sock", g_dir);
		unlink(p);
		if (!getenv("BENCH_KEEP_LOG")) {
			snprintf(p, sizeof p, "%s/fosd.log", g_dir);
			unlink(p);
			rmdir(g_dir);
		}
	}
}

static void bs_start_fosd(const char *bin, const char *backend, int workers, int streams)
{
	snprintf(g_dir, sizeof g_dir, "/tmp/bench-fosd-XXXXXX");
	if (!mkdtemp(g_dir))
		DIE("mkdtemp: %s", strerror(errno));
	snprintf(g_url, sizeof g_url, "ipc://%s/fosd.sock", g_dir);
	char log[200], w[16], sn[16];
	snprintf(log, sizeof log, "%s/fosd.log", g_dir);
	snprintf(w, sizeof w, "%d", workers);
	snprintf(sn, sizeof sn, "%d", streams);
	pid_t pid = fork();
	if (pid < 0)
		DIE("fork: %s", strerror(errno));
	if (pid == 0) {
		FILE *f = freopen(log, "w", stderr);
		(void)f;
		execl(bin, "fosd", "--backend", backend, "--listen", g_url, "--workers", w, "--concurrency", "128",
		      "--streams", sn, "--metrics-listen", "off", (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	g_fosd = pid;
}

static fos_client *bs_connect(int wait_ms)
{
	fos_client *c = NULL;
	fos_status st;
	double t0 = bench_now();
	for (;;) {
		if (!fos_connect(g_url, NULL, 60000, &c, &st))
			return c;
		if (waitpid(g_fosd, NULL, WNOHANG) == g_fosd) {
			g_fosd = 0;
			DIE("fosd exited at startup (log kept in %s)", g_dir);
		}
		if ((bench_now() - t0) * 1e3 > wait_ms)
			DIE("cannot connect to fosd: %s", st.message);
		usleep(50000);
	}
}

/* ---- the baseline file of bench_nng ---------------------------------------------------------- */

static double g_base[8];
static const char *const g_base_keys[] = {"nng_rtt64_p50_us", "nng_rtt64_p99_us", "nng_up64m_ms", "nng_up64m_gbps",
					   "nng_rt32m_ms", "nng_rtt64_spin_p50_us"};
enum { B_RTT50, B_RTT99, B_UP_MS, B_UP_GBPS, B_RT32_MS, B_RTT_SPIN50, B_N };

static int bs_read_baseline(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char k[64];
	double v;
	int got = 0;
	while (fscanf(f, "%63s %lf", k, &v) == 2)
		for (int i = 0; i < B_N; i++)
			if (!strcmp(k, g_base_keys[i])) {
				g_base[i] = v;
				got |= 1 << i;
			}
	fclose(f);
	return got == (1 << B_N) - 1 ? 0 : -1;
}

/* ---- in-process ------------------------------------------------------------------------------- */

/* One forward as a local caller does it: X from host memory in, Y back out (when y). */
static double bs_inproc(fos_backend *be, const fos_qweight *qw, const uint16_t *x, int64_t m, uint16_t *y)
{
	fos_err e;
	int64_t k = qw->k, n = qw->n;
	fos_linear_opts o = fos_linear_opts_default();
	double t0 = bench_now();
	void *xd = be->alloc(be, (size_t)(m * k * 2)), *yd = be->alloc(be, (size_t)(m * n * 2));
	if (!xd || !yd)
		DIE("in-process: out of %s memory", be->name);
	int rc = be->h2d(be, xd, x, (size_t)(m * k * 2), &e);
	if (!rc)
		rc = fos_linear_forward(be, xd, m, qw, &o, NULL, yd, NULL, &e);
	if (!rc)
		rc = y ? be->d2h(be, y, yd, (size_t)(m * n * 2), &e) : be->sync(be, &e);
	be->free(be, xd);
	be->free(be, yd);
	if (rc)
		DIE("in-process forward: %s", e.msg);
	return bench_now() - t0;
}

/* ---- inline 64 MiB through a raw socket (a forward with skip_output: no Y back) --------------- */

static double bs_raw_skip_forward(nng_socket s, const uint16_t *x, int64_t m, int64_t k)
{
	static uint64_t id = 1;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor t;
	int64_t shape[2] = {m, k}, store[2];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	fosw_tensor_init(&t, store, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape);
	fr.weight = (char *)"w";
	fr.x = &t;
	fr.skip_output = 1;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	rq.id = ++id;
	double t0 = bench_now();
	nng_msg *msg, *rep;
	uint8_t *data;
	if (fosw_msg_build(&rq.base, &pl, &msg, &data))
		DIE("building a request");
	memcpy(data, x, (size_t)(m * k * 2));
	if (nng_sendmsg(s, msg, 0) || nng_recvmsg(s, &rep, 0))
		DIE("raw forward: send/receive failed");
	double dt = bench_now() - t0;
	const uint8_t *hdr, *d;
	size_t hl, dl;
	char why[256];
	if (fosw_split(nng_msg_body(rep), nng_msg_len(rep), &hdr, &hl, &d, &dl, why, sizeof why))
		DIE("raw forward: %s", why);
	Fos__Response *resp = fos__response__unpack(NULL, hl, hdr);
	if (!resp || (resp->status && resp->status->code))
		DIE("raw forward failed: %s", resp && resp->status ? resp->status->message : "undecodable reply");
	fos__response__free_unpacked(resp, NULL);
	nng_msg_free(rep);
	return dt;
}

/* The bare nng server of bench_nng (the program beside this one, --serve: it answers each request
 * with as many bytes as its first 8 ask for, with fosd's allocator settings), on a socket of ours;
 * returns a connected REQ socket, or -1 in *ok when bench_nng is not there. */
static nng_socket bs_start_bare(const char *self, int *ok)
{
	nng_socket s = NNG_SOCKET_INITIALIZER;
	*ok = 0;
	char bin[512], url[200];
	snprintf(bin, sizeof bin, "%s", self);
	char *slash = strrchr(bin, '/');
	snprintf(slash ? slash + 1 : bin, sizeof bin - (size_t)(slash ? slash + 1 - bin : 0), "bench_nng");
	if (access(bin, X_OK))
		return s;
	snprintf(url, sizeof url, "ipc://%s/bare.sock", g_dir);
	pid_t pid = fork();
	if (pid < 0)
		return s;
	if (pid == 0) {
		execl(bin, "bench_nng", "--serve", url, (char *)NULL);
		_exit(127);
	}
	g_bare = pid;
	if (nng_req0_open(&s) || nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE) ||
	    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, (size_t)1 << 30))
		DIE("bare socket");
	for (int i = 0; i < 500; i++) {
		int rv = nng_dial(s, url, NULL, 0);
		if (!rv) {
			*ok = 1;
			return s;
		}
		usleep(10000);
	}
	DIE("cannot reach bench_nng --serve at %s", url);
}

/* One 64 B-reply request of n bytes (payload from src) to the bare server, as bench_nng times it. */
static double bs_bare_call(nng_socket s, const void *src, size_t n)
{
	double t0 = bench_now();
	nng_msg *m;
	uint64_t want = 64;
	if (nng_msg_alloc(&m, n))
		DIE("bare: out of memory");
	memcpy(nng_msg_body(m), src, n);
	memcpy(nng_msg_body(m), &want, 8);
	if (nng_sendmsg(s, m, 0) || nng_recvmsg(s, &m, 0))
		DIE("bare: send/receive failed");
	double dt = bench_now() - t0;
	nng_msg_free(m);
	return dt;
}

/* One Health round trip over a raw REQ socket (no libfos): fosd's own cost for a request it answers
 * on the receiving thread, against the bare nng round trip. */
static double bs_raw_health(nng_socket s)
{
	static uint64_t id = 1;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &hr;
	rq.id = ++id;
	double t0 = bench_now();
	nng_msg *msg, *rep;
	if (fosw_msg_build(&rq.base, NULL, &msg, NULL))
		DIE("building a request");
	if (nng_sendmsg(s, msg, 0) || nng_recvmsg(s, &rep, 0))
		DIE("raw health: send/receive failed");
	double dt = bench_now() - t0;
	nng_msg_free(rep);
	return dt;
}

/* fosd's own sums for one op (Stats): OK requests, and the microseconds of receipt-to-reply, of
 * waiting for a lane and of running on it. */
typedef struct bs_opsum {
	double n, lat, queue, run;
} bs_opsum;

static bs_opsum bs_op_sums(fos_client *c, const char *op)
{
	bs_opsum r = {0, 0, 0, 0};
	fos_stats_info *si = malloc(sizeof *si);
	fos_status st;
	if (!si || fos_stats(c, si, &st))
		DIE("stats: %s", si ? st.message : "out of memory");
	for (int i = 0; i < si->n_ops; i++)
		if (!strcmp(si->ops[i].op, op)) {
			const fos_op_stats *o = &si->ops[i];
			r.n = (double)o->lat_count;
			r.lat = o->lat_mean_us * (double)o->lat_count;
			r.queue = o->queue_mean_us * (double)o->queue_count;
			r.run = o->run_mean_us * (double)o->run_count;
		}
	free(si);
	return r;
}

/* ---- concurrent clients ----------------------------------------------------------------------- */

typedef struct bs_worker {
	pthread_t th;
	const uint16_t *x;
	int64_t m, k, n;
	double secs;
	atomic_int *go;
	uint64_t done;
	int failed;
	int chan; /* through a request channel of its own */
	char err[600];
} bs_worker;

static void *bs_worker_main(void *arg)
{
	bs_worker *w = arg;
	fos_client *c;
	fos_status st;
	fos_region *r;
	if (fos_connect(g_url, NULL, 60000, &c, &st)) {
		w->failed = 1;
		snprintf(w->err, sizeof w->err, "connect: %s", st.message);
		atomic_fetch_add(w->go, 1);
		return NULL;
	}
	size_t xb = (size_t)(w->m * w->k * 2), yb = (size_t)(w->m * w->n * 2);
	if (w->chan && fos_channel_open(c, 0, 0, &st)) {
		w->failed = 1;
		snprintf(w->err, sizeof w->err, "channel: %s", st.message);
		fos_close(c);
		atomic_fetch_add(w->go, 1);
		return NULL;
	}
	if (fos_region_create(c, NULL, xb + yb, FOS_REGION_MEMFD, &r, &st)) {
		w->failed = 1;
		snprintf(w->err, sizeof w->err, "region: %s", st.message);
		fos_close(c);
		atomic_fetch_add(w->go, 1);
		return NULL;
	}
	memcpy(fos_region_data(r), w->x, xb);
	fos_tensor sx = fos_tensor_shm(r, 0, FOS_DTYPE_BF16, w->m, w->k);
	fos_tensor sy = fos_tensor_shm(r, xb, FOS_DTYPE_BF16, w->m, w->n);
	if (fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st)) { /* warm up, and ready */
		w->failed = 1;
		snprintf(w->err, sizeof w->err, "forward: %s", st.message);
	}
	atomic_fetch_add(w->go, 1);
	while (atomic_load(w->go) > 0) /* wait for the start */
		usleep(100);
	double end = bench_now() + w->secs;
	while (!w->failed && bench_now() < end) {
		if (fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st)) {
			w->failed = 1;
			snprintf(w->err, sizeof w->err, "forward: %s", st.message);
			break;
		}
		w->done++;
	}
	fos_region_destroy(r, &st);
	fos_close(c);
	return NULL;
}

static double bs_rate(int clients, int chan, const uint16_t *x, int64_t m, int64_t k, int64_t n, double secs)
{
	bs_worker *w = calloc((size_t)clients, sizeof *w);
	atomic_int go;
	atomic_init(&go, 0);
	for (int i = 0; i < clients; i++) {
		w[i] = (bs_worker){.x = x, .m = m, .k = k, .n = n, .secs = secs, .go = &go, .chan = chan};
		if (pthread_create(&w[i].th, NULL, bs_worker_main, &w[i]))
			DIE("pthread_create");
	}
	while (atomic_load(&go) < clients)
		usleep(1000);
	double t0 = bench_now();
	atomic_store(&go, -1);
	uint64_t total = 0;
	for (int i = 0; i < clients; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].failed)
			DIE("client %d: %s", i, w[i].err);
		total += w[i].done;
	}
	double dt = bench_now() - t0;
	free(w);
	return (double)total / dt;
}

/* ---- the report ------------------------------------------------------------------------------- */

static FILE *g_out;

static void bs_kv(const char *k, double v)
{
	if (g_out)
		fprintf(g_out, "%s %.4f\n", k, v);
}

static void bs_row(const char *what, const char *value, const char *base, double ratio, const char *target, int pass)
{
	char r[32] = "";
	if (ratio > 0)
		snprintf(r, sizeof r, "%.2f", ratio);
	printf("| %-58s | %-22s | %-22s | %-6s | %-10s | %-4s |\n", what, value, base, r, target,
	       pass < 0 ? "" : pass ? "yes" : "NO");
}

/* Times reps forwards of x by the cached weight "w" into y, one after the other, into t[]. */
static void bs_time_forwards(fos_client *c, const fos_tensor *x, fos_tensor *y, double *t, int reps, const char *what)
{
	fos_status st;
	for (int i = 0; i < reps; i++) {
		double t0 = bench_now();
		if (fos_forward(c, "w", x, NULL, NULL, y, NULL, &st))
			DIE("%s: %s", what, st.message);
		t[i] = bench_now() - t0;
	}
}

/* A latency row against a round-trip baseline (base_us 0: none): secs measured, ratio to base_us,
 * met when at most limit. */
static void bs_rtt_row(const char *what, double secs, double base_us, const char *base_what, const char *target,
		       double limit)
{
	char v[64], b[64];
	snprintf(v, sizeof v, "%.1f us", secs * 1e6);
	if (base_us <= 0) {
		bs_row(what, v, "(no baseline)", 0, target, -1);
		return;
	}
	snprintf(b, sizeof b, "%.1f us %s", base_us, base_what);
	bs_row(what, v, b, secs * 1e6 / base_us, target, *target ? secs * 1e6 / base_us <= limit : -1);
}

int main(int argc, char **argv)
{
	const char *fosd_bin = NULL, *backend = "auto", *baseline = NULL, *out = NULL;
	int quick = 0, clients = 8, workers = 4, streams = 0;
	int64_t kopt = 0;
	double secs = 3.0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--fosd") && i + 1 < argc)
			fosd_bin = argv[++i];
		else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
			backend = argv[++i];
		else if (!strcmp(argv[i], "--baseline") && i + 1 < argc)
			baseline = argv[++i];
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--k") && i + 1 < argc)
			kopt = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--secs") && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--clients") && i + 1 < argc)
			clients = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			workers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--streams") && i + 1 < argc)
			streams = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else {
			fprintf(stderr, "usage: bench_service [--fosd PATH] [--backend auto|cpu|cuda] [--baseline FILE] "
					"[--out FILE] [--k K] [--quick] [--secs S] [--clients N] [--workers N] [--streams N]\n");
			return 2;
		}
	}
	if (kopt && (kopt % 128 || kopt < 128))
		DIE("--k must be a positive multiple of 128");
	char binbuf[1024];
	if (!fosd_bin) { /* BUILD/bench/bench_service -> BUILD/fosd */
		char exe[900];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
		if (n <= 0)
			DIE("cannot find myself");
		exe[n] = 0;
		snprintf(binbuf, sizeof binbuf, "%s/../fosd", dirname(exe));
		fosd_bin = binbuf;
	}
	int have_base = baseline && !bs_read_baseline(baseline);
	if (baseline && !have_base)
		fprintf(stderr, "bench_service: baseline %s is missing or incomplete: ratios to bare nng left out\n", baseline);
	if (quick)
		secs = secs > 1.0 ? 1.0 : secs;
	/* the client side gets the same warm heap as fosd (alloc_tune.c) and bench_nng */
	mallopt(M_MMAP_MAX, 0);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	mallopt(M_TOP_PAD, 64 << 20);

	if (streams < 0 || streams > 64)
		DIE("--streams must be 0 (fosd's default) to 64");
	bs_start_fosd(fosd_bin, backend, workers, streams); /* before any nng use here (fork) */
	fos_client *c = bs_connect(120000);
	fos_health_info h;
	fos_status st;
	if (fos_health(c, &h, &st))
		DIE("health: %s", st.message);
	int gpu = !strcmp(h.backend, "cuda");
	int64_t K = kopt ? kopt : gpu ? 4096 : 1024, N = K, MB = K, MS = 128;
	int64_t MX = ((int64_t)32 << 20) / K; /* X of 64 MiB */
	int reps_big = quick ? 3 : gpu ? 30 : 5, reps_x = quick ? 3 : gpu ? 21 : 5, reps_small = quick ? 100 : gpu ? 3000 : 200;
	g_out = out ? fopen(out, "w") : NULL;
	if (out && !g_out)
		DIE("%s: %s", out, strerror(errno));

	uint16_t *w = malloc((size_t)(N * K * 2)), *xb = malloc((size_t)(MB * K * 2)), *xx = malloc((size_t)(MX * K * 2));
	uint16_t *yb_ref = malloc((size_t)(MB * N * 2)), *ys_ref = malloc((size_t)(MS * N * 2)), *ytmp = malloc((size_t)(MB * N * 2));
	if (!w || !xb || !xx || !yb_ref || !ys_ref || !ytmp)
		DIE("out of memory");
	bench_fill_bf16(w, (size_t)(N * K), 1, 0.05f);
	bench_fill_bf16(xb, (size_t)(MB * K), 2, 1.0f);
	bench_fill_bf16(xx, (size_t)(MX * K), 3, 1.0f);
	const uint16_t *xs = xb; /* the small X: the first 128 rows of the big one */

	/* ---- in-process, the same backend ---- */
	fos_err e;
	fos_backend *be = fos_backend_open(h.backend, &e);
	if (!be)
		DIE("in-process %s backend: %s", h.backend, e.msg);
	fos_qweight qw;
	{
		fos_linear_opts o = fos_linear_opts_default();
		void *wd = be->alloc(be, (size_t)(N * K * 2));
		if (!wd || be->h2d(be, wd, w, (size_t)(N * K * 2), &e) || fos_qweight_make(be, wd, N, K, &o, 1, 0, &qw, &e))
			DIE("in-process weight: %s", e.msg);
		be->free(be, wd);
	}
	double *t = malloc(sizeof(double) * 4000);
	for (int i = 0; i < 2; i++)
		bs_inproc(be, &qw, xb, MB, yb_ref);
	for (int i = 0; i < reps_big; i++)
		t[i] = bs_inproc(be, &qw, xb, MB, yb_ref);
	double ip_big = bench_quantile(t, reps_big, 0.5);
	bs_inproc(be, &qw, xx, MX, NULL);
	for (int i = 0; i < reps_x; i++)
		t[i] = bs_inproc(be, &qw, xx, MX, NULL);
	double ip_x = bench_quantile(t, reps_x, 0.5);
	for (int i = 0; i < 20; i++)
		bs_inproc(be, &qw, xs, MS, ys_ref);
	int rs = reps_small > 1000 ? 1000 : reps_small;
	for (int i = 0; i < rs; i++)
		t[i] = bs_inproc(be, &qw, xs, MS, ys_ref);
	double ip_small = bench_quantile(t, rs, 0.5);
	fos_qweight_free(be, &qw);
	be->destroy(be);

	/* ---- through fosd ---- */
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, w);
	if (fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st))
		DIE("put weight: %s", st.message);
	size_t bxb = (size_t)(MB * K * 2), byb = (size_t)(MB * N * 2);
	fos_region *rg;
	if (fos_region_create(c, "big", bxb + byb, FOS_REGION_MEMFD, &rg, &st))
		DIE("region: %s", st.message);
	uint8_t *rp = fos_region_data(rg);
	memcpy(rp, xb, bxb);
	fos_tensor sx = fos_tensor_shm(rg, 0, FOS_DTYPE_BF16, MB, K), sy = fos_tensor_shm(rg, bxb, FOS_DTYPE_BF16, MB, N);
	for (int i = 0; i < 2; i++)
		if (fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st))
			DIE("shm forward: %s", st.message);
	for (int i = 0; i < reps_big; i++) {
		double t0 = bench_now();
		if (fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st))
			DIE("shm forward: %s", st.message);
		t[i] = bench_now() - t0;
	}
	double sv_big = bench_quantile(t, reps_big, 0.5);
	int same_big = !memcmp(rp + bxb, yb_ref, byb);
	/* the same inline, into a buffer of ours */
	fos_tensor ix = fos_tensor_2d(FOS_DTYPE_BF16, MB, K, xb), iy = fos_tensor_out();
	iy.data = ytmp;
	iy.size = byb;
	for (int i = 0; i < reps_big; i++) {
		double t0 = bench_now();
		if (fos_forward(c, "w", &ix, NULL, NULL, &iy, NULL, &st))
			DIE("inline forward: %s", st.message);
		t[i] = bench_now() - t0;
	}
	double sv_big_inline = bench_quantile(t, reps_big, 0.5);
	same_big = same_big && !memcmp(ytmp, yb_ref, byb);

	/* inline 64 MiB up */
	nng_socket rs_sock;
	if (nng_req0_open(&rs_sock) || nng_socket_set_ms(rs_sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE) ||
	    nng_dial(rs_sock, g_url, NULL, 0))
		DIE("raw socket");
	/* alternating with the bare nng server, request by request, so that both see the same host */
	int bare_ok;
	nng_socket bare = bs_start_bare(argv[0], &bare_ok);
	double *tb = malloc(sizeof(double) * (size_t)reps_x);
	if (!tb)
		DIE("out of memory");
	bs_raw_skip_forward(rs_sock, xx, MX, K);
	if (bare_ok)
		bs_bare_call(bare, xx, (size_t)(MX * K * 2));
	for (int i = 0; i < reps_x; i++) {
		t[i] = bs_raw_skip_forward(rs_sock, xx, MX, K);
		if (bare_ok)
			tb[i] = bs_bare_call(bare, xx, (size_t)(MX * K * 2));
	}
	double sv_x = bench_quantile(t, reps_x, 0.5), bare_x = bare_ok ? bench_quantile(tb, reps_x, 0.5) : 0;
	free(tb);
	if (bare_ok)
		nng_close(bare);
	/* fosd's round trip for a request answered at once: raw, and through libfos */
	int rh = reps_small;
	double *th = malloc(sizeof(double) * (size_t)rh);
	if (!th)
		DIE("out of memory");
	for (int i = 0; i < 200; i++)
		bs_raw_health(rs_sock);
	for (int i = 0; i < rh; i++)
		th[i] = bs_raw_health(rs_sock);
	double hraw50 = bench_quantile(th, rh, 0.5), hraw99 = bench_quantile(th, rh, 0.99);
	nng_close(rs_sock);
	for (int i = 0; i < rh; i++) {
		double t0 = bench_now();
		if (fos_health(c, &h, &st))
			DIE("health: %s", st.message);
		th[i] = bench_now() - t0;
	}
	double hlib50 = bench_quantile(th, rh, 0.5), hlib99 = bench_quantile(th, rh, 0.99);
	free(th);

	/* small forward latency, shm and inline */
	size_t sxb = (size_t)(MS * K * 2), syb = (size_t)(MS * N * 2);
	fos_region *rsm;
	if (fos_region_create(c, "small", sxb + syb, FOS_REGION_MEMFD, &rsm, &st))
		DIE("region: %s", st.message);
	uint8_t *sp = fos_region_data(rsm);
	memcpy(sp, xs, sxb);
	fos_tensor ssx = fos_tensor_shm(rsm, 0, FOS_DTYPE_BF16, MS, K), ssy = fos_tensor_shm(rsm, sxb, FOS_DTYPE_BF16, MS, N);
	for (int i = 0; i < 50; i++)
		if (fos_forward(c, "w", &ssx, NULL, NULL, &ssy, NULL, &st))
			DIE("small forward: %s", st.message);
	double *ts = malloc(sizeof(double) * (size_t)reps_small);
	bs_opsum f0 = bs_op_sums(c, "forward");
	bs_time_forwards(c, &ssx, &ssy, ts, reps_small, "small forward");
	bs_opsum f1 = bs_op_sums(c, "forward");
	double fn = f1.n - f0.n > 0 ? f1.n - f0.n : 1;
	double f_lat = (f1.lat - f0.lat) / fn, f_queue = (f1.queue - f0.queue) / fn, f_run = (f1.run - f0.run) / fn;
	double sm50 = bench_quantile(ts, reps_small, 0.5), sm99 = bench_quantile(ts, reps_small, 0.99);
	double smmean = 0;
	for (int i = 0; i < reps_small; i++)
		smmean += ts[i] / reps_small;
	int same_small = !memcmp(sp + sxb, ys_ref, syb);
	/* the same with the client polling for its reply (fos_set_spin) instead of sleeping */
	fos_set_spin(c, 2000);
	bs_time_forwards(c, &ssx, &ssy, ts, reps_small, "small forward");
	fos_set_spin(c, 0);
	double sp50 = bench_quantile(ts, reps_small, 0.5), sp99 = bench_quantile(ts, reps_small, 0.99);
	same_small = same_small && !memcmp(sp + sxb, ys_ref, syb);
	fos_tensor isx = fos_tensor_2d(FOS_DTYPE_BF16, MS, K, xs), isy = fos_tensor_out();
	isy.data = ytmp;
	isy.size = syb;
	int ri = reps_small / 3 > 0 ? reps_small / 3 : 1;
	for (int i = 0; i < ri; i++) {
		double t0 = bench_now();
		if (fos_forward(c, "w", &isx, NULL, NULL, &isy, NULL, &st))
			DIE("small inline forward: %s", st.message);
		ts[i] = bench_now() - t0;
	}
	double smi50 = bench_quantile(ts, ri, 0.5);
	same_small = same_small && !memcmp(ytmp, ys_ref, syb);

	/* the same small shm forward through a request channel (fos_channel_open: the request and
	 * reply messages through shared memory and a futex doorbell, no socket) */
	if (fos_channel_open(c, 0, 0, &st))
		DIE("channel: %s", st.message);
	fos_stats_info ci0, ci1;
	if (fos_stats(c, &ci0, &st))
		DIE("stats: %s", st.message);
	for (int i = 0; i < 50; i++)
		if (fos_forward(c, "w", &ssx, NULL, NULL, &ssy, NULL, &st))
			DIE("small forward (channel): %s", st.message);
	memset(sp + sxb, 0, syb);
	bs_time_forwards(c, &ssx, &ssy, ts, reps_small, "small forward (channel)");
	double ch50 = bench_quantile(ts, reps_small, 0.5), ch99 = bench_quantile(ts, reps_small, 0.99);
	same_small = same_small && !memcmp(sp + sxb, ys_ref, syb);
	fos_set_spin(c, 2000); /* and with the client polling for the whole request */
	bs_time_forwards(c, &ssx, &ssy, ts, reps_small, "small forward (channel)");
	fos_set_spin(c, 0);
	double chp50 = bench_quantile(ts, reps_small, 0.5), chp99 = bench_quantile(ts, reps_small, 0.99);
	same_small = same_small && !memcmp(sp + sxb, ys_ref, syb);
	for (int i = 0; i < rh; i++) {
		double t0 = bench_now();
		if (fos_health(c, &h, &st))
			DIE("health (channel): %s", st.message);
		ts[i] = bench_now() - t0;
	}
	double chh50 = bench_quantile(ts, rh, 0.5), chh99 = bench_quantile(ts, rh, 0.99);
	if (fos_stats(c, &ci1, &st))
		DIE("stats: %s", st.message);
	/* every timed call went through the channel (the first Stats was counted before it ran) */
	uint64_t via_chan = ci1.channel_requests - ci0.channel_requests;
	if (fos_channel_close(c, &st))
		DIE("channel close: %s", st.message);

	/* concurrency: clients with a connection each, through the socket and through channels */
	double r1 = bs_rate(1, 0, xs, MS, K, N, secs), rn = bs_rate(clients, 0, xs, MS, K, N, secs);
	double r1c = bs_rate(1, 1, xs, MS, K, N, secs), rnc = bs_rate(clients, 1, xs, MS, K, N, secs);

	fos_region_destroy(rg, &st);
	fos_region_destroy(rsm, &st);
	uint64_t nreg = 99, mapped = 99;
	fos_region_stats(c, &nreg, NULL, &mapped, &st);
	fos_close(c);
	bs_cleanup();

	/* ---- report ---- */
	char v[64], b[64], tgt[32];
	char lanes[32] = "its default";
	if (streams)
		snprintf(lanes, sizeof lanes, "%d", streams);
	printf("\nfosd service benchmark: backend %s (%s), K = N = %lld, fosd --workers %d --streams %s; in-process =\n"
	       "the same backend in this process with its own host<->device copies; ratios are service / baseline\n"
	       "(throughput: service / baseline).\n\n",
	       h.backend, h.device, (long long)K, workers, lanes);
	printf("| %-58s | %-22s | %-22s | %-6s | %-10s | %-4s |\n", "measurement", "fosd", "baseline", "ratio", "target", "met");
	printf("|%s|%s|%s|%s|%s|%s|\n", "------------------------------------------------------------",
	       "------------------------", "------------------------", "--------", "------------", "------");
	char what[128];
	snprintf(what, sizeof what, "forward %lldx%lldx%lld, cached W, X and Y via shm (median)", (long long)MB,
		 (long long)K, (long long)N);
	snprintf(v, sizeof v, "%.3f ms", sv_big * 1e3);
	snprintf(b, sizeof b, "%.3f ms in-process", ip_big * 1e3);
	bs_row(what, v, b, sv_big / ip_big, "<= 1.5", sv_big / ip_big <= 1.5);
	snprintf(what, sizeof what, "the same forward, X and Y inline (median)");
	snprintf(v, sizeof v, "%.3f ms", sv_big_inline * 1e3);
	bs_row(what, v, b, sv_big_inline / ip_big, "", -1);
	double bytes_x = (double)(MX * K * 2);
	snprintf(what, sizeof what, "inline 64 MiB request: forward X %lldx%lld, no Y back (median)", (long long)MX,
		 (long long)K);
	snprintf(v, sizeof v, "%.2f ms, %.2f GB/s", sv_x * 1e3, bytes_x / sv_x / 1e9);
	if (bare_ok) { /* the target's baseline: bare nng timed alternately in this run */
		snprintf(b, sizeof b, "%.2f GB/s bare nng, alternating", bytes_x / bare_x / 1e9);
		bs_row(what, v, b, bare_x / sv_x, ">= 0.90", bare_x / sv_x >= 0.90);
	}
	if (have_base) {
		snprintf(what, sizeof what, "  the same against bench_nng's earlier 64 MiB median");
		snprintf(b, sizeof b, "%.2f GB/s bare nng", g_base[B_UP_GBPS]);
		double ratio = bytes_x / sv_x / 1e9 / g_base[B_UP_GBPS];
		bs_row(what, v, b, ratio, bare_ok ? "" : ">= 0.90", bare_ok ? -1 : ratio >= 0.90);
		/* without the op's own work (its in-process time): the data plane alone */
		double net = sv_x - ip_x;
		snprintf(what, sizeof what, "  the same less its in-process op time (%.2f ms)", ip_x * 1e3);
		snprintf(v, sizeof v, "%.2f GB/s", net > 0 ? bytes_x / net / 1e9 : 0.0);
		bs_row(what, v, b, net > 0 ? bytes_x / net / 1e9 / g_base[B_UP_GBPS] : 0, "", -1);
	} else {
		bs_row(what, v, "(no baseline)", 0, ">= 0.90", -1);
	}
	snprintf(what, sizeof what, "small forward %lldx%lldx%lld via shm, p50", (long long)MS, (long long)K, (long long)N);
	bs_rtt_row(what, sm50, have_base ? g_base[B_RTT50] : 0, "nng 64 B RTT", "<= 2", 2.0);
	bs_rtt_row("small forward via shm, p99", sm99, have_base ? g_base[B_RTT50] : 0, "nng 64 B p50", "<= 3", 3.0);
	/* both sides poll: libfos (fos_set_spin) against bench_nng's polling round trip */
	if (have_base) {
		bs_rtt_row("small forward via shm, client polling (spin), p50", sp50, g_base[B_RTT_SPIN50],
			   "nng RTT, polling", "(<= 2)", 2.0);
		bs_rtt_row("small forward via shm, client polling (spin), p99", sp99, g_base[B_RTT_SPIN50],
			   "nng RTT, polling", "(<= 3)", 3.0);
	}
	snprintf(what, sizeof what, "small forward in-process (median; not a target)");
	snprintf(v, sizeof v, "%.1f us", ip_small * 1e6);
	bs_row(what, v, "", 0, "", -1);
	snprintf(what, sizeof what, "small forward inline, p50 (not a target)");
	snprintf(v, sizeof v, "%.1f us", smi50 * 1e6);
	bs_row(what, v, "", 0, "", -1);
	snprintf(what, sizeof what, "%d concurrent clients of small shm forwards, requests/s", clients);
	snprintf(v, sizeof v, "%.0f /s", rn);
	snprintf(b, sizeof b, "%.0f /s one client", r1);
	snprintf(tgt, sizeof tgt, ">= 4");
	bs_row(what, v, b, rn / r1, tgt, rn / r1 >= 4.0);
	printf("| %-58s | %-22s | %-22s | %-6s | %-10s | %-4s |\n", "**through a request channel** (same requests, same bytes)", "",
	       "", "", "", "");
	snprintf(what, sizeof what, "small forward via shm + channel, p50");
	bs_rtt_row(what, ch50, have_base ? g_base[B_RTT50] : 0, "nng 64 B RTT", "<= 2", 2.0);
	bs_rtt_row("small forward via shm + channel, p99", ch99, have_base ? g_base[B_RTT50] : 0, "nng 64 B p50", "<= 3",
		   3.0);
	bs_rtt_row("  the same, client polling (spin), p50", chp50, have_base ? g_base[B_RTT50] : 0, "nng 64 B RTT",
		   "(<= 2)", 2.0);
	bs_rtt_row("  the same, client polling (spin), p99", chp99, have_base ? g_base[B_RTT50] : 0, "nng 64 B p50",
		   "(<= 3)", 3.0);
	snprintf(what, sizeof what, "%d concurrent clients of small forwards, a channel each", clients);
	snprintf(v, sizeof v, "%.0f /s", rnc);
	snprintf(b, sizeof b, "%.0f /s one client", r1c);
	bs_row(what, v, b, rnc / r1c, tgt, rnc / r1c >= 4.0);
	snprintf(v, sizeof v, "%.0f /s", rnc);
	snprintf(b, sizeof b, "%.0f /s %d on the socket", rn, clients);
	bs_row("  the same against as many clients on the socket", v, b, rnc / rn, "", -1);
	bs_rtt_row("Health through the channel, p50 (not a target)", chh50, have_base ? g_base[B_RTT50] : 0,
		   "nng 64 B RTT", "", 0);
	printf("(fosd counted %llu channel requests for the %d calls made through it: warm-ups, timed forwards,\n"
	       "Healths and the closing Stats; Health p99 through the channel %.1f us)\n",
	       (unsigned long long)via_chan, 50 + 2 * reps_small + rh + 1, chh99 * 1e6);
	printf("\nWhere a small forward's time goes (not targets): a Health round trip through fosd (answered on\n"
	       "the receiving thread) p50 %.1f us / p99 %.1f us over a raw REQ socket, %.1f / %.1f us through libfos;\n"
	       "bare nng 64 B: p50 %.1f us.\n",
	       hraw50 * 1e6, hraw99 * 1e6, hlib50 * 1e6, hlib99 * 1e6, have_base ? g_base[B_RTT50] : 0.0);
	printf("The small shm forwards, means: %.1f us at the client; in fosd (its Stats) %.1f us from receipt to\n"
	       "reply, of which %.1f us waiting for a lane and %.1f us on it (the op and its device sync).\n",
	       smmean * 1e6, f_lat, f_queue, f_run);
	printf("\nresults bit-identical to the in-process forward: big %s, small %s; regions left on fosd: %llu "
	       "(%llu bytes mapped)\n",
	       same_big ? "yes" : "NO", same_small ? "yes" : "NO", (unsigned long long)nreg, (unsigned long long)mapped);

	bs_kv("k", (double)K);
	bs_kv("gpu", gpu);
	bs_kv("big_shm_ms", sv_big * 1e3);
	bs_kv("big_inline_ms", sv_big_inline * 1e3);
	bs_kv("big_inproc_ms", ip_big * 1e3);
	bs_kv("x64m_ms", sv_x * 1e3);
	bs_kv("x64m_bare_alternating_ms", bare_x * 1e3);
	bs_kv("x64m_inproc_ms", ip_x * 1e3);
	bs_kv("small_shm_p50_us", sm50 * 1e6);
	bs_kv("small_shm_p99_us", sm99 * 1e6);
	bs_kv("small_inline_p50_us", smi50 * 1e6);
	bs_kv("small_chan_p50_us", ch50 * 1e6);
	bs_kv("small_chan_p99_us", ch99 * 1e6);
	bs_kv("small_chan_spin_p50_us", chp50 * 1e6);
	bs_kv("small_chan_spin_p99_us", chp99 * 1e6);
	bs_kv("health_chan_p50_us", chh50 * 1e6);
	bs_kv("rate_chan_1", r1c);
	bs_kv("rate_chan_n", rnc);
	bs_kv("small_inproc_us", ip_small * 1e6);
	bs_kv("small_shm_mean_us", smmean * 1e6);
	bs_kv("small_shm_spin_p50_us", sp50 * 1e6);
	bs_kv("small_shm_spin_p99_us", sp99 * 1e6);
	bs_kv("small_fosd_lat_mean_us", f_lat);
	bs_kv("small_fosd_queue_mean_us", f_queue);
	bs_kv("small_fosd_run_mean_us", f_run);
	bs_kv("health_raw_p50_us", hraw50 * 1e6);
	bs_kv("health_libfos_p50_us", hlib50 * 1e6);
	bs_kv("rate_1", r1);
	bs_kv("rate_n", rn);
	bs_kv("bit_identical", same_big && same_small);
	if (g_out)
		fclose(g_out);
	free(t);
	free(ts);
	free(w);
	free(xb);
	free(xx);
	free(yb_ref);
	free(ys_ref);
	free(ytmp);
	return same_big && same_small && nreg == 0 && mapped == 0 ? 0 : 1;
}
