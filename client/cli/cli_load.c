/* cli_load.c: `fos load`, the load tester (after perf_analyzer, wrk2 and ghz). It registers its own
 * random weight under a unique name (forward, backward), runs worker threads that each keep one
 * request in flight through libfos, and drops the weight at the end.
 *
 *   closed loop (--concurrency N): N workers send back to back; latency = reply - send.
 *   open loop (--rate R): request i is due at start + i/R; the next free worker takes it, sleeps
 *     until it is due and sends; latency = reply - the INTENDED send time, so a stall that delays
 *     sends shows up in the latencies instead of silently lowering the rate (the coordinated
 *     omission correction of wrk2). --concurrency bounds the requests in flight.
 *
 * Requests sent (closed) or due (open) before the warmup ends are made but not measured. Time is
 * libuv's uv_hrtime; the main thread runs a libuv loop with a timer for the live progress line (on
 * a terminal), a signal watcher (Ctrl-C stops early and still reports) and an async handle the
 * last worker wakes it with. Latencies go into per-worker histograms (cli_hist.c), merged at the
 * end. With --device the inputs (one copy for the run) and every worker's outputs live in memory
 * of GPU 0 (fos_cuda_malloc: the CUDA driver libfos loads), sent as device tensors that a cuda
 * fosd on that GPU reads and writes in place; they are freed after the connections close. */
#include "cli.h"
#include "cli_load_gate.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

const char *cli_load_op_name(int op)
{
	static const char *const names[] = {"forward", "backward", "linear", "quantize", "check"};
	return op >= 0 && op < 5 ? names[op] : "?";
}

typedef struct load_run load_run;

typedef struct load_worker {
	load_run *run;
	pthread_t th;
	int id, started;
	fos_client *c;
	fos_context ctx;   /* backward: this worker's saved context */
	fos_tensor x, w, dy; /* its inputs: the run's, or copies in its connection's region (--shm) */
	void *out[3];      /* output buffers (in the region with --shm, on the GPU with --device, else malloc'd) */
	size_t out_size[3];
	int out_shm, out_dev;
	cli_hist lat, svc;
	uint64_t measured, ok, failed, warmup, last_done, max_lag;
	uint64_t by_code[FOS_STATS_CODES];
	char first_error[600];
	uint64_t first_error_at;
	atomic_int in_call; /* 1 in a request, 0 not, 2 left in it by the main thread (load_execute) */
} load_worker;

struct load_run {
	const cli_load_cfg *cfg;
	fos_client **clients;
	fos_region **regions;      /* --shm: one per connection (inputs + its workers' outputs) */
	size_t *region_used;
	char weight[64];
	fos_tensor x, w, dy;       /* shared inputs (in GPU memory with --device) */
	void *dev_in[3];           /* --device: the GPU copies of x, w, dy */
	fos_forward_opts fo;
	fos_linear_config lc;
	uint64_t t_start, t_measure, t_end; /* uv_hrtime ns; t_end UINT64_MAX with --requests */
	uint64_t period_ns_x1024;  /* open loop: 1024 * 1e9 / rate */
	uint64_t warm_slots;       /* open loop: due slots before t_measure */
	uint64_t t_cutoff;         /* open loop with --duration: no send starts after this */
	atomic_uint_fast64_t next_slot;   /* open loop */
	atomic_uint_fast64_t tickets;     /* closed loop with --requests: measured requests handed out */
	atomic_uint_fast64_t done, errors, inflight; /* for the progress line */
	atomic_int stop;
	atomic_int running;
	uv_async_t wake;
	load_worker *workers;
	cli_load_gate gate;        /* fosd draining or gone: back off, probe, give up (cli_load_gate.h) */
	int stuck;                 /* workers still in a call when the run gave up on fosd */
};

/* ---- one request ------------------------------------------------------------------------------- */

static fos_tensor load_out(load_worker *w, int i, int dtype, int64_t d0, int64_t d1)
{
	fos_tensor t = d1 > 0 ? fos_tensor_2d(dtype, d0, d1, w->out[i]) : fos_tensor_1d(dtype, d0, w->out[i]);
	t.size = w->out_size[i];
	t.mem = w->out_dev ? FOS_MEM_CUDA : FOS_MEM_HOST;
	return t;
}

static int load_one(load_worker *w, fos_status *st)
{
	load_run *r = w->run;
	const cli_load_cfg *cfg = r->cfg;
	int64_t m = cfg->m, n = cfg->n, k = cfg->k;
	switch (cfg->op) {
	case CLI_LOAD_FORWARD: {
		fos_tensor y = load_out(w, 0, FOS_DTYPE_BF16, m, n);
		return fos_forward(w->c, r->weight, &w->x, NULL, &r->fo, &y, NULL, st);
	}
	case CLI_LOAD_BACKWARD: {
		fos_tensor dx = load_out(w, 0, FOS_DTYPE_BF16, m, k), dw = load_out(w, 1, FOS_DTYPE_BF16, n, k);
		/* the context is kept for the next request; an expired one is recomputed from X by libfos */
		fos_backward_opts bo = {1, &w->x, NULL};
		return fos_backward(w->c, &w->ctx, &w->dy, &bo, &dx, &dw, NULL, st);
	}
	case CLI_LOAD_LINEAR: {
		fos_tensor y = load_out(w, 0, FOS_DTYPE_BF16, m, n), dx = load_out(w, 1, FOS_DTYPE_BF16, m, k),
			   dw = load_out(w, 2, FOS_DTYPE_BF16, n, k);
		return fos_linear(w->c, &w->x, &w->w, NULL, &w->dy, &r->lc, &y, &dx, &dw, NULL, st);
	}
	case CLI_LOAD_CHECK: {
		/* the run's X against the Y fosd gave for it at the start (in dy): a difference would be
		 * a nondeterministic result, so it counts as a failed request (DATA_LOSS) */
		fos_check_result cr;
		int code = fos_forward_check(w->c, r->weight, &w->x, NULL, &r->fo, &w->dy, NULL, &cr, st);
		if (code == FOS_CODE_OK && !cr.consistent) {
			st->code = code = FOS_CODE_DATA_LOSS;
			snprintf(st->message, sizeof st->message, "check: Y differs from the first forward's: %s",
				 cr.reason);
		}
		return code;
	}
	default: {
		fos_tensor codes = load_out(w, 0, FOS_DTYPE_U8, m, k / 2), scales = load_out(w, 1, FOS_DTYPE_E4M3, m, k / 16),
			   amax = load_out(w, 2, FOS_DTYPE_F32, 1, 0);
		return fos_quantize(w->c, &w->x, NULL, NULL, &codes, &scales, &amax, st);
	}
	}
}

/* Sleeps until uv_hrtime() >= t, waking every 50 ms to see whether the run was stopped. */
static void load_sleep_until(load_run *r, uint64_t t)
{
	for (;;) {
		uint64_t now = uv_hrtime();
		if (now >= t || atomic_load(&r->stop))
			return;
		uint64_t d = t - now;
		if (d > 50000000)
			d = 50000000;
		struct timespec ts = {(time_t)(d / 1000000000u), (long)(d % 1000000000u)};
		nanosleep(&ts, NULL);
	}
}

static void load_record(load_worker *w, int code, const fos_status *st, int measured, uint64_t intended,
			uint64_t sent, uint64_t done)
{
	load_run *r = w->run;
	atomic_fetch_add(&r->done, 1);
	if (code) {
		atomic_fetch_add(&r->errors, 1);
		w->failed++;
		w->by_code[code >= 0 && code < FOS_STATS_CODES ? code : FOS_CODE_UNKNOWN]++;
		if (!w->first_error[0] || done < w->first_error_at) {
			snprintf(w->first_error, sizeof w->first_error, "%s: %s", fos_code_name(code), st->message);
			w->first_error_at = done;
		}
	}
	if (!measured) {
		w->warmup++;
		return;
	}
	w->measured++;
	if (done > w->last_done)
		w->last_done = done;
	if (code)
		return;
	w->ok++;
	cli_hist_record(&w->lat, done - intended);
	cli_hist_record(&w->svc, done - sent);
	if (sent - intended > w->max_lag)
		w->max_lag = sent - intended;
}

static void *load_worker_main(void *arg)
{
	load_worker *w = arg;
	load_run *r = w->run;
	const cli_load_cfg *cfg = r->cfg;
	fos_status st;
	while (!atomic_load(&r->stop)) {
		uint64_t intended;
		int measured;
		if (cfg->rate > 0) {
			uint64_t i = atomic_fetch_add(&r->next_slot, 1);
			if (cfg->requests && i >= r->warm_slots + cfg->requests)
				break;
			intended = r->t_start + (uint64_t)(((unsigned __int128)i * r->period_ns_x1024) >> 10);
			if (intended >= r->t_end)
				break;
			measured = i >= r->warm_slots;
			load_sleep_until(r, intended);
			if (atomic_load(&r->stop) || uv_hrtime() > r->t_cutoff)
				break; /* a backlog left at the cutoff is reported as unsent */
		} else {
			intended = uv_hrtime();
			if (intended >= r->t_end)
				break;
			measured = intended >= r->t_measure;
			if (measured && cfg->requests && atomic_fetch_add(&r->tickets, 1) >= cfg->requests)
				break;
		}
		if (cli_load_gate_pass(&r->gate, w->c, &r->stop))
			break; /* stopped, or fosd stayed unavailable */
		uint64_t sent = uv_hrtime();
		atomic_fetch_add(&r->inflight, 1);
		atomic_store(&w->in_call, 1);
		int code = load_one(w, &st);
		int was = 1;
		if (!atomic_compare_exchange_strong(&w->in_call, &was, 0))
			return NULL; /* the run ended without this worker: touch nothing */
		uint64_t done = uv_hrtime();
		atomic_fetch_sub(&r->inflight, 1);
		load_record(w, code, &st, measured, intended, sent, done);
		if (cli_load_gate_after(&r->gate, code, &st)) {
			/* the end: also for the main thread, which must not wait for a worker whose request
			 * went out after the connection was lost (it ends only at its timeout) */
			atomic_store(&r->stop, 1);
			uv_async_send(&r->wake);
			break;
		}
	}
	if (atomic_fetch_sub(&r->running, 1) == 1)
		uv_async_send(&r->wake);
	return NULL;
}

/* ---- the main thread's loop: progress, Ctrl-C, the end -------------------------------------------- */

typedef struct load_ui {
	load_run *r;
	uint64_t last_t, last_done;
	int shown;
} load_ui;

static void load_on_wake(uv_async_t *a)
{
	uv_stop(a->loop);
}

static void load_on_signal(uv_signal_t *s, int signum)
{
	(void)signum;
	load_run *r = ((load_ui *)s->data)->r;
	atomic_store(&r->stop, 1);
}

static void load_on_tick(uv_timer_t *t)
{
	load_ui *ui = t->data;
	load_run *r = ui->r;
	const cli_load_cfg *cfg = r->cfg;
	uint64_t now = uv_hrtime(), done = atomic_load(&r->done);
	double dt = (double)(now - ui->last_t) / 1e9;
	double rate = dt > 0 ? (double)(done - ui->last_done) / dt : 0;
	ui->last_t = now;
	ui->last_done = done;
	double el = (double)(now - r->t_start) / 1e9;
	const char *phase = now < r->t_measure ? "warmup" : "measuring";
	char total[48] = "";
	if (cfg->duration_ns)
		snprintf(total, sizeof total, " / %.0fs", (double)(cfg->warmup_ns + cfg->duration_ns) / 1e9);
	fprintf(stderr, "\r\033[K%s %s: %6.1fs%s  %s  %llu done  %.1f req/s  %llu in flight  %llu errors",
		cli_load_op_name(cfg->op), cfg->rate > 0 ? "open loop" : "closed loop", el, total, phase,
		(unsigned long long)done, rate, (unsigned long long)atomic_load(&r->inflight),
		(unsigned long long)atomic_load(&r->errors));
	fflush(stderr);
	ui->shown = 1;
}

static void load_close_cb(uv_handle_t *h)
{
	(void)h;
}

static void load_close_any(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, load_close_cb);
}

/* ---- setup and teardown -------------------------------------------------------------------------- */

static uint64_t load_rand_state;

static uint16_t load_rand_bf16(void)
{
	/* xorshift64*, uniform in [-2, 2): plenty of distinct values, all finite */
	load_rand_state ^= load_rand_state >> 12;
	load_rand_state ^= load_rand_state << 25;
	load_rand_state ^= load_rand_state >> 27;
	uint64_t v = load_rand_state * 0x2545F4914F6CDD1Dull;
	float f = (float)(v >> 40) / (float)(1u << 24) * 4.0f - 2.0f;
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static void *load_random_bf16(size_t n)
{
	uint16_t *p = malloc(n * 2 + 2);
	if (p)
		for (size_t i = 0; i < n; i++)
			p[i] = load_rand_bf16();
	return p;
}

static uint64_t load_bytes_per_request(const cli_load_cfg *c)
{
	uint64_t m = (uint64_t)c->m, n = (uint64_t)c->n, k = (uint64_t)c->k;
	switch (c->op) {
	case CLI_LOAD_FORWARD:
		return 2 * (m * k + m * n);                 /* x in, y out */
	case CLI_LOAD_CHECK:
		return 2 * (m * k + m * n);                 /* x and the Y to check in */
	case CLI_LOAD_BACKWARD:
		return 2 * (m * n + m * k + n * k);         /* dy in, dx and dw out */
	case CLI_LOAD_LINEAR:
		return 2 * (m * k + n * k + m * n) * 2;     /* x, w, dy in; y, dx, dw out */
	default:
		return 2 * m * k + m * k / 2 + m * k / 16 + 4; /* x in; codes, scales, amax out */
	}
}

static size_t load_align(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* Per-request output bytes of a worker (64-byte aligned each). */
static size_t load_out_bytes(const cli_load_cfg *cfg)
{
	size_t m = (size_t)cfg->m, n = (size_t)cfg->n, k = (size_t)cfg->k;
	switch (cfg->op) {
	case CLI_LOAD_FORWARD:
		return load_align(m * n * 2);
	case CLI_LOAD_BACKWARD:
		return load_align(m * k * 2) + load_align(n * k * 2);
	case CLI_LOAD_LINEAR:
		return load_align(m * n * 2) + load_align(m * k * 2) + load_align(n * k * 2);
	case CLI_LOAD_CHECK:
		return 0; /* the reply is the comparison */
	default:
		return load_align(m * k / 2) + load_align(m * k / 16) + 64;
	}
}

/* --shm: one region per connection with the inputs (x, w, dy) and the outputs of its workers. */
static int load_regions(load_run *r, fos_err *err)
{
	const cli_load_cfg *cfg = r->cfg;
	size_t m = (size_t)cfg->m, n = (size_t)cfg->n, k = (size_t)cfg->k;
	size_t in = load_align(m * k * 2) + load_align(n * k * 2) + load_align(m * n * 2);
	r->regions = calloc((size_t)cfg->connections, sizeof *r->regions);
	r->region_used = calloc((size_t)cfg->connections, sizeof *r->region_used);
	if (!r->regions || !r->region_used)
		return fos_seterr(err, FOS_ENOMEM, "load: out of memory");
	for (int i = 0; i < cfg->connections; i++) {
		size_t workers = (size_t)(cfg->concurrency / cfg->connections + (i < cfg->concurrency % cfg->connections));
		fos_status st;
		if (fos_region_create(r->clients[i], NULL, in + workers * load_out_bytes(cfg), FOS_REGION_MEMFD,
				      &r->regions[i], &st)) {
			cli_status_err(&st, "load: creating a shared-memory region (--shm needs an ipc:// server)", err);
			return err->rc ? err->rc : FOS_EINVAL;
		}
		uint8_t *p = fos_region_data(r->regions[i]);
		memcpy(p, r->x.data, m * k * 2);
		if (r->w.data)
			memcpy(p + load_align(m * k * 2), r->w.data, n * k * 2);
		if (r->dy.data)
			memcpy(p + load_align(m * k * 2) + load_align(n * k * 2), r->dy.data, m * n * 2);
		r->region_used[i] = in;
	}
	return FOS_OK;
}

/* --device: the inputs copied into GPU memory (device 0); r->x, r->w, r->dy name the copies. */
static int load_device_inputs(load_run *r, fos_err *err)
{
	fos_tensor *t[3] = {&r->x, &r->w, &r->dy};
	for (int i = 0; i < 3; i++) {
		size_t bytes = fos_tensor_bytes(t[i]);
		fos_status st;
		if (!t[i]->data || !bytes)
			continue;
		if (fos_cuda_malloc(0, bytes, &r->dev_in[i], &st) || fos_cuda_memcpy(r->dev_in[i], t[i]->data, bytes, &st)) {
			cli_status_err(&st, "load: --device: the inputs in GPU memory", err);
			return err->rc ? err->rc : FOS_EINVAL;
		}
		*t[i] = fos_tensor_cuda(t[i]->dtype, t[i]->shape[0], t[i]->shape[1], r->dev_in[i]);
	}
	return FOS_OK;
}

/* Allocates a worker's output buffers and, for backward, saves its context. */
static int load_worker_setup(load_worker *w, fos_err *err)
{
	load_run *r = w->run;
	const cli_load_cfg *cfg = r->cfg;
	size_t m = (size_t)cfg->m, n = (size_t)cfg->n, k = (size_t)cfg->k;
	size_t sz[3] = {0, 0, 0};
	switch (cfg->op) {
	case CLI_LOAD_FORWARD:
		sz[0] = m * n * 2;
		break;
	case CLI_LOAD_BACKWARD:
		sz[0] = m * k * 2;
		sz[1] = n * k * 2;
		break;
	case CLI_LOAD_LINEAR:
		sz[0] = m * n * 2;
		sz[1] = m * k * 2;
		sz[2] = n * k * 2;
		break;
	case CLI_LOAD_CHECK:
		break;
	default:
		sz[0] = m * k / 2;
		sz[1] = m * k / 16;
		sz[2] = 4;
	}
	w->x = r->x;
	w->w = r->w;
	w->dy = r->dy;
	int ci = w->id % cfg->connections;
	w->out_shm = cfg->shm;
	w->out_dev = cfg->device;
	if (cfg->shm) { /* inputs at the start of the connection's region, outputs after them */
		fos_region *g = r->regions[ci];
		w->x = fos_tensor_shm(g, 0, FOS_DTYPE_BF16, cfg->m, cfg->k);
		w->w = fos_tensor_shm(g, load_align(m * k * 2), FOS_DTYPE_BF16, cfg->n, cfg->k);
		w->dy = fos_tensor_shm(g, load_align(m * k * 2) + load_align(n * k * 2), FOS_DTYPE_BF16, cfg->m, cfg->n);
	}
	for (int i = 0; i < 3; i++) {
		w->out_size[i] = sz[i];
		if (sz[i] && cfg->shm) {
			w->out[i] = (uint8_t *)fos_region_data(r->regions[ci]) + r->region_used[ci];
			r->region_used[ci] += load_align(sz[i]);
		} else if (sz[i] && cfg->device) {
			fos_status st;
			if (fos_cuda_malloc(0, sz[i], &w->out[i], &st)) {
				fos_err e = {0, ""};
				cli_status_err(&st, "--device", &e);
				return fos_seterr(err, FOS_EINVAL, "load: worker %d's outputs in GPU memory: %s", w->id, e.msg);
			}
		} else if (sz[i] && !(w->out[i] = malloc(sz[i]))) {
			return fos_seterr(err, FOS_ENOMEM, "out of memory for worker %d's outputs", w->id);
		}
	}
	if (cli_hist_init(&w->lat) || cli_hist_init(&w->svc))
		return fos_seterr(err, FOS_ENOMEM, "out of memory for worker %d's histograms", w->id);
	if (cfg->op == CLI_LOAD_BACKWARD) {
		fos_forward_opts fo = r->fo;
		fo.save_context = 1;
		fos_tensor y = fos_tensor_out();
		fos_status st;
		int code = fos_forward(w->c, r->weight, &w->x, NULL, &fo, &y, &w->ctx, &st);
		free(y.data);
		if (code) {
			fos_err e = {0, ""};
			cli_status_err(&st, "the forward that saves a context for the backwards", &e);
			return fos_seterr(err, FOS_EINVAL, "load: %s", e.msg);
		}
	}
	return FOS_OK;
}

static void load_worker_free(load_worker *w)
{
	if (w->ctx.id && w->c) {
		fos_status st;
		fos_release(w->c, &w->ctx, &st);
	}
	for (int i = 0; i < 3; i++)
		if (!w->out_shm && !w->out_dev)
			free(w->out[i]);
	cli_hist_free(&w->lat);
	cli_hist_free(&w->svc);
}

/* --device: a worker's GPU outputs, freed once the connections are closed (fosd let go of them). */
static void load_worker_free_device(load_worker *w)
{
	for (int i = 0; w->out_dev && i < 3; i++) {
		fos_status st;
		fos_cuda_free(w->out[i], &st);
		w->out[i] = NULL;
	}
}

/* Registers the run's weight under a unique name. */
static int load_put_weight(load_run *r, fos_err *err)
{
	uint64_t tag = 0;
	if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag)
		tag = uv_hrtime();
	snprintf(r->weight, sizeof r->weight, "fos-load-%ld-%016llx", (long)getpid(), (unsigned long long)tag);
	fos_weight_config wc = {.weight_block = FOS_BLOCKS_16X16, .err_mode = FOS_ERRMODE_MAE, .bound = 256};
	fos_status st;
	if (fos_put_weight(r->clients[0], r->weight, 1, &r->w, &wc, NULL, &st)) {
		cli_status_err(&st, "load: registering the weight", err);
		r->weight[0] = 0;
		return err->rc;
	}
	return FOS_OK;
}

/* --op check: fosd's Y of the run's X, into y (M * N bf16): the Y every request sends to check. */
static int load_check_reference(load_run *r, void *y, fos_err *err)
{
	fos_tensor ty = fos_tensor_2d(FOS_DTYPE_BF16, r->cfg->m, r->cfg->n, y);
	ty.size = (size_t)(r->cfg->m * r->cfg->n) * 2;
	fos_status st;
	if (fos_forward(r->clients[0], r->weight, &r->x, NULL, &r->fo, &ty, NULL, &st)) {
		cli_status_err(&st, "load: the forward whose Y the checks send", err);
		return err->rc;
	}
	return FOS_OK;
}

/* Open loop: the number of slots due before offset ns from the start (the smallest i with
 * i * period >= ns). */
static uint64_t load_slots_before(const load_run *r, uint64_t ns)
{
	double est = (double)ns * 1024.0 / (double)r->period_ns_x1024;
	uint64_t i = est > 4 ? (uint64_t)est - 4 : 0;
	while ((uint64_t)(((unsigned __int128)i * r->period_ns_x1024) >> 10) < ns)
		i++;
	return i;
}

/* Runs the workers and the main loop until they finish; fills res. */
static int load_execute(load_run *r, cli_load_result *res, fos_err *err)
{
	const cli_load_cfg *cfg = r->cfg;
	uv_loop_t loop;
	int uvr = uv_loop_init(&loop);
	if (uvr)
		return fos_seterr(err, FOS_EINTERNAL, "load: uv_loop_init: %s", uv_strerror(uvr));
	load_ui ui = {r, 0, 0, 0};
	uv_signal_t sig_int, sig_term;
	uv_timer_t tick;
	sig_int.data = sig_term.data = tick.data = &ui;
	if ((uvr = uv_async_init(&loop, &r->wake, load_on_wake)) || (uvr = uv_signal_init(&loop, &sig_int)) ||
	    (uvr = uv_signal_init(&loop, &sig_term)) || (uvr = uv_timer_init(&loop, &tick)) ||
	    (uvr = uv_signal_start(&sig_int, load_on_signal, SIGINT)) ||
	    (uvr = uv_signal_start(&sig_term, load_on_signal, SIGTERM))) {
		/* no worker started yet: closing the handles that exist is all there is to undo */
		uv_walk(&loop, load_close_any, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
		uv_loop_close(&loop);
		return fos_seterr(err, FOS_EINTERNAL, "load: setting up the libuv loop: %s", uv_strerror(uvr));
	}

	r->t_start = uv_hrtime();
	r->t_measure = r->t_start + cfg->warmup_ns;
	r->t_end = cfg->duration_ns ? r->t_measure + cfg->duration_ns : UINT64_MAX;
	r->t_cutoff = UINT64_MAX;
	if (cfg->rate > 0) {
		r->period_ns_x1024 = (uint64_t)ceil(1e9 * 1024.0 / cfg->rate);
		r->warm_slots = load_slots_before(r, cfg->warmup_ns);
		if (cfg->duration_ns) {
			/* requests due in the measured window, and how long past its end sends may lag */
			res->due = load_slots_before(r, cfg->warmup_ns + cfg->duration_ns) - r->warm_slots;
			r->t_cutoff = r->t_end + 1000000000ull + cfg->duration_ns / 10;
		} else {
			res->due = cfg->requests;
		}
	}
	ui.last_t = r->t_start;
	atomic_store(&r->running, cfg->concurrency);
	int started = 0, rc = FOS_OK;
	for (int i = 0; i < cfg->concurrency; i++) {
		if (pthread_create(&r->workers[i].th, NULL, load_worker_main, &r->workers[i])) {
			atomic_store(&r->stop, 1);
			/* the workers never started count themselves out here */
			if (atomic_fetch_sub(&r->running, cfg->concurrency - i) == cfg->concurrency - i)
				uv_async_send(&r->wake);
			rc = fos_seterr(err, FOS_EINTERNAL, "load: cannot start worker thread %d", i);
			break;
		}
		r->workers[i].started = 1;
		started++;
	}
	if (cfg->progress)
		uv_timer_start(&tick, load_on_tick, 500, 500);
	if (started)
		uv_run(&loop, UV_RUN_DEFAULT);
	int gave_up = cli_load_gate_gave_up(&r->gate, &res->unavailable_ns);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2; /* after giving up on fosd: the workers still in a call get this long */
	for (int i = 0; i < cfg->concurrency; i++) {
		if (!r->workers[i].started)
			continue;
		if (!gave_up) {
			pthread_join(r->workers[i].th, NULL);
			continue;
		}
		if (!pthread_timedjoin_np(r->workers[i].th, NULL, &until))
			continue;
		int in_call = 1;
		/* still in a request that went out after the connection was lost: it ends only at
		 * its timeout. It is left there (it touches nothing when it returns) and the process
		 * ends without waiting for it; a worker that was just leaving its call is joined. */
		if (atomic_compare_exchange_strong(&r->workers[i].in_call, &in_call, 2))
			r->stuck++;
		else
			pthread_join(r->workers[i].th, NULL);
	}
	res->unavailable = gave_up;
	if (gave_up) {
		pthread_mutex_lock(&r->gate.mu);
		snprintf(res->unavailable_why, sizeof res->unavailable_why, "%s", r->gate.why);
		pthread_mutex_unlock(&r->gate.mu);
	}
	if (ui.shown) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
	}
	res->interrupted = atomic_load(&r->stop) && !rc && !gave_up;
	uv_timer_stop(&tick);
	uv_signal_stop(&sig_int);
	uv_signal_stop(&sig_term);
	uv_close((uv_handle_t *)&tick, load_close_cb);
	uv_close((uv_handle_t *)&sig_int, load_close_cb);
	uv_close((uv_handle_t *)&sig_term, load_close_cb);
	uv_close((uv_handle_t *)&r->wake, load_close_cb);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);

	uint64_t last = r->t_measure, first_err_at = UINT64_MAX;
	for (int i = 0; i < cfg->concurrency; i++) {
		load_worker *w = &r->workers[i];
		cli_hist_merge(&res->latency, &w->lat);
		cli_hist_merge(&res->service, &w->svc);
		res->measured += w->measured;
		res->ok += w->ok;
		res->failed += w->failed;
		res->warmup += w->warmup;
		for (int c = 0; c < FOS_STATS_CODES; c++)
			res->by_code[c] += w->by_code[c];
		if (w->last_done > last)
			last = w->last_done;
		if (w->max_lag > res->max_send_lag_ns)
			res->max_send_lag_ns = w->max_lag;
		if (w->first_error[0] && w->first_error_at < first_err_at) {
			first_err_at = w->first_error_at;
			snprintf(res->first_error, sizeof res->first_error, "%s", w->first_error);
		}
	}
	res->elapsed_ns = last - r->t_measure;
	if (cfg->rate > 0 && res->due > res->measured && !res->interrupted)
		res->unsent = res->due - res->measured;
	return rc;
}

int cli_load_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_load_cfg cfg;
	int rc = cli_load_args(g, argc, argv, &cfg, &err);
	if (rc >= 0)
		return rc;

	static load_run run;
	static cli_load_result res;
	memset(&run, 0, sizeof run);
	memset(&res, 0, sizeof res);
	load_run *r = &run;
	r->cfg = &cfg;
	cli_load_gate_init(&r->gate, g->timeout_ms);
	load_rand_state = uv_hrtime() | 1;
	int code = CLI_EXIT_FAIL;
	void *xd = NULL, *wd = NULL, *dyd = NULL;
	r->clients = calloc((size_t)cfg.connections, sizeof *r->clients);
	r->workers = calloc((size_t)cfg.concurrency, sizeof *r->workers);
	if (!r->clients || !r->workers || cli_hist_init(&res.latency) || cli_hist_init(&res.service)) {
		fos_seterr(&err, FOS_ENOMEM, "load: out of memory");
		goto fail;
	}
	size_t m = (size_t)cfg.m, n = (size_t)cfg.n, k = (size_t)cfg.k;
	if (!(xd = load_random_bf16(m * k)) ||
	    (cfg.op != CLI_LOAD_QUANTIZE && (!(wd = load_random_bf16(n * k)) || !(dyd = load_random_bf16(m * n))))) {
		fos_seterr(&err, FOS_ENOMEM, "load: out of memory for the inputs");
		goto fail;
	}
	r->x = fos_tensor_2d(FOS_DTYPE_BF16, cfg.m, cfg.k, xd);
	r->w = fos_tensor_2d(FOS_DTYPE_BF16, cfg.n, cfg.k, wd);
	r->dy = fos_tensor_2d(FOS_DTYPE_BF16, cfg.m, cfg.n, dyd);
	r->fo = (fos_forward_opts){0, cfg.override, 0, 0, 0};
	r->lc = (fos_linear_config){cfg.override, FOS_BLOCKS_16X16, FOS_ERRMODE_MAE, 256, 0, 0};
	for (int i = 0; i < cfg.connections; i++) {
		if (cli_connect(g, &r->clients[i], &err))
			goto fail;
		/* an outage shows within a probe's time, so the gate backs off and gives up on it, rather
		 * than every worker waiting its whole timeout for fosd to come back */
		fos_set_reconnect_wait(r->clients[i], CLI_LOAD_PROBE_TIMEOUT_MS);
		fos_status cst;
		if (cfg.channel && fos_channel_open(r->clients[i], 0, 0, &cst)) {
			cli_status_err(&cst, "load: opening a request channel (--channel needs an ipc:// server)", &err);
			goto fail;
		}
	}
	if ((cfg.op == CLI_LOAD_FORWARD || cfg.op == CLI_LOAD_BACKWARD || cfg.op == CLI_LOAD_CHECK) &&
	    load_put_weight(r, &err))
		goto fail;
	if (cfg.op == CLI_LOAD_CHECK && load_check_reference(r, dyd, &err)) /* the Y every check sends */
		goto fail;
	if (cfg.shm && load_regions(r, &err))
		goto fail;
	if (cfg.device && load_device_inputs(r, &err))
		goto fail;
	snprintf(res.weight, sizeof res.weight, "%s", r->weight);
	res.bytes_per_request = load_bytes_per_request(&cfg);
	for (int i = 0; i < cfg.concurrency; i++) {
		load_worker *w = &r->workers[i];
		w->run = r;
		w->id = i;
		w->c = r->clients[i % cfg.connections];
		if (load_worker_setup(w, &err))
			goto fail;
	}
	if (load_execute(r, &res, &err))
		goto fail;
	if (!g->quiet)
		cli_load_report(&cfg, &res, stdout);
	int unwritten = fflush(stdout) || ferror(stdout);
	if (res.unavailable) {
		cli_fail(CLI_EXIT_FAIL, "load: fosd is unavailable (draining or gone): stopped after %llu requests; for %.1f s "
					"every request and Health probe failed, the last: %s",
			 (unsigned long long)(res.measured + res.warmup), (double)res.unavailable_ns / 1e9,
			 res.unavailable_why);
		if (r->stuck) /* their calls still use the handles: no cleanup, the process ends */
			return CLI_EXIT_FAIL;
		/* what is left to clean up gets a short timeout: fosd is not expected to answer */
		for (int i = 0; i < cfg.connections; i++)
			fos_set_timeout(r->clients[i], CLI_LOAD_PROBE_TIMEOUT_MS);
	} else if (res.interrupted)
		cli_fail(CLI_EXIT_FAIL, "load: interrupted; the report covers what ran");
	else if (res.failed)
		cli_fail(CLI_EXIT_FAIL, "load: %llu of %llu requests failed; first: %s", (unsigned long long)res.failed,
			 (unsigned long long)(res.measured + res.warmup), res.first_error);
	else if (!res.ok)
		cli_fail(CLI_EXIT_FAIL, "load: no request completed in the measured window");
	else if (unwritten)
		cli_fail(CLI_EXIT_FAIL, "load: cannot write to stdout");
	else
		code = CLI_EXIT_OK;
	goto done;
fail:
	cli_report(&err, CLI_EXIT_FAIL);
done:
	if (r->workers)
		for (int i = 0; i < cfg.concurrency; i++)
			load_worker_free(&r->workers[i]);
	if (r->weight[0] && r->clients && r->clients[0]) {
		fos_status st;
		if (fos_drop_weight(r->clients[0], r->weight, &st) && code == CLI_EXIT_OK) {
			cli_fail(CLI_EXIT_FAIL, "load: dropping the weight %s: %s: %s", r->weight, fos_code_name(st.code),
				 st.message);
			code = CLI_EXIT_FAIL;
		}
	}
	if (r->regions)
		for (int i = 0; i < cfg.connections; i++)
			if (r->regions[i]) {
				fos_status st;
				fos_region_destroy(r->regions[i], &st);
			}
	free(r->regions);
	free(r->region_used);
	if (r->clients)
		for (int i = 0; i < cfg.connections; i++)
			fos_close(r->clients[i]);
	free(r->clients);
	if (r->workers)
		for (int i = 0; i < cfg.concurrency; i++)
			load_worker_free_device(&r->workers[i]);
	for (int i = 0; i < 3; i++) {
		fos_status st;
		fos_cuda_free(r->dev_in[i], &st); /* after the connections: fosd has let go of them */
	}
	free(r->workers);
	free(xd);
	free(wd);
	free(dyd);
	cli_hist_free(&res.latency);
	cli_hist_free(&res.service);
	cli_load_gate_destroy(&r->gate);
	return code;
}
