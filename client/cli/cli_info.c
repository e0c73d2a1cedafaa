/* cli_info.c: `fos health` (is fosd up: version, backend, devices, uptime, whether it runs under
 * MPS; exit 1 when it is not serving) and `fos stats` (fosd's counters: requests, status codes, latencies (and their queue and
 * run parts) and bytes by op, the weight cache, saved contexts, the executor, the message pool, and
 * a row per device fosd serves), as text or --json; and cli_parse_connect, the parse-then-connect
 * start these and `fos list-weights` share. */
#include "cli.h"

#include <stdarg.h>

#include <stdlib.h>
#include <string.h>

/* cli.h: 1 connected, or 0 with the exit status to return (message printed). */
int cli_parse_connect(const cli_global *g, cli_cmd *cmd, int argc, char **argv, fos_client **c, int *exit_status)
{
	fos_err err = {0, ""};
	int rc = cli_parse(cmd, argc, argv, &err);
	if (rc == CLI_HELP_SHOWN)
		*exit_status = CLI_EXIT_OK;
	else if (rc)
		*exit_status = cli_report(&err, CLI_EXIT_USAGE);
	else if (cli_connect(g, c, &err))
		*exit_status = cli_report(&err, CLI_EXIT_FAIL);
	else
		return 1;
	return 0;
}

/* Health's mps in words (fos_server_mps) */
static const char *mps_name(int m)
{
	switch (m) {
	case FOS_MPS_ON: return "on";
	case FOS_MPS_OFF: return "off";
	case FOS_MPS_NOT_APPLICABLE: return "not applicable";
	default: return "unknown";
	}
}

enum { HF_JSON, HF_COUNT };

int cli_health_main(const cli_global *g, int argc, char **argv)
{
	cli_flag flags[HF_COUNT] = {
		[HF_JSON] = {"--json", NULL, "print the answer as one JSON object", 0, 0},
	};
	cli_cmd cmd = {
		.name = "health",
		.synopsis = "[--json]",
		.summary = "Ask fosd whether it is serving: its version, backend, devices, MPS and uptime.",
		.about = "The devices are those fosd serves (fosd --devices), by the index that\n"
			 "put-weight --devices, list-weights and stats name them with; a fosd of one\n"
			 "device lists one, index 0.",
		CLI_CMD_FLAGS(flags),
		.footer = "Exit status: 0 fosd answers and is serving; 1 it does not answer, or it is draining\n"
			  "(shutting down); 2 bad command line.",
	};
	fos_client *c;
	int ex;
	if (!cli_parse_connect(g, &cmd, argc, argv, &c, &ex))
		return ex;
	fos_err err = {0, ""};
	fos_health_info h;
	fos_status st;
	if (fos_health(c, &h, &st)) {
		cli_status_err(&st, "health", &err);
		fos_close(c);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	/* a cuda fosd's GPU, as NVIDIA's tools write it (device tensors must be on it) */
	uint8_t u[16];
	char gpu[41] = "";
	if (!fos_server_gpu_uuid(c, u, &st))
		fos_gpu_uuid_str(u, gpu);
	int mps = fos_server_mps(c); /* from the Health above */
	/* every device fosd serves (fosd --devices; one for a fosd of one device) */
	fos_device_info devs[FOS_DEVICES_MAX];
	size_t ndev = 0;
	int dcode = fos_health_devices(c, devs, FOS_DEVICES_MAX, &ndev, &st);
	if (dcode && dcode != FOS_CODE_OUT_OF_RANGE) {
		cli_status_err(&st, "health", &err);
		fos_close(c);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (ndev > FOS_DEVICES_MAX)
		ndev = FOS_DEVICES_MAX;
	fos_close(c);
	if (g->json && !g->quiet) {
		cli_jw w;
		cli_jw_init(&w, stdout, 1);
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "server", g->server);
		cli_jw_str(&w, "status", h.draining ? "draining" : "serving");
		cli_jw_str(&w, "version", h.version);
		cli_jw_str(&w, "backend", h.backend);
		cli_jw_str(&w, "device", h.device);
		if (gpu[0])
			cli_jw_str(&w, "gpu_uuid", gpu);
		cli_jw_str(&w, "mps", mps_name(mps));
		cli_jw_u64(&w, "uptime_ms", h.uptime_ms);
		cli_jw_u64(&w, "max_message_bytes", h.max_message_bytes);
		cli_jw_arr(&w, "devices");
		for (size_t i = 0; i < ndev; i++) {
			char du[41];
			cli_jw_obj(&w, NULL);
			cli_jw_u64(&w, "index", devs[i].index);
			cli_jw_str(&w, "backend", devs[i].backend);
			cli_jw_str(&w, "device", devs[i].device);
			if (devs[i].has_gpu_uuid)
				cli_jw_str(&w, "gpu_uuid", fos_gpu_uuid_str(devs[i].gpu_uuid, du));
			cli_jw_end(&w, '}');
		}
		cli_jw_end(&w, ']');
		cli_jw_end(&w, '}');
	} else if (!g->quiet) {
		char mb[32];
		printf("fosd %s at %s: %s\n", h.version, g->server, h.draining ? "DRAINING (shutting down)" : "serving");
		printf("  backend:     %s (%s)\n", h.backend, h.device);
		if (gpu[0])
			printf("  gpu:         %s\n", gpu);
		printf("  mps:         %s%s\n", mps_name(mps),
		       mps == FOS_MPS_OFF ? " (a trainer on this GPU switches CUDA contexts at each call: README.md "
					    "\"Sharing a GPU with trainers: MPS\")"
					  : "");
		printf("  uptime:      %.1f s\n", (double)h.uptime_ms / 1000.0);
		printf("  max message: %s\n", cli_human_bytes(h.max_message_bytes, mb, sizeof mb));
		printf("  devices:     %zu\n", ndev);
		for (size_t i = 0; i < ndev; i++) {
			char du[41];
			if (devs[i].has_gpu_uuid)
				printf("    %-3u %s  %s\n", (unsigned)devs[i].index, fos_gpu_uuid_str(devs[i].gpu_uuid, du),
				       devs[i].device);
			else
				printf("    %-3u %s\n", (unsigned)devs[i].index, devs[i].device);
		}
	}
	fflush(stdout);
	if (h.draining)
		return cli_fail(CLI_EXIT_FAIL, "fosd at %s is draining: it finishes what it has and takes no new requests",
				g->server);
	return CLI_EXIT_OK;
}

/* ---- stats ------------------------------------------------------------------------------------ */

/* A key and an unsigned counter, for info_json_counters. */
typedef struct info_counter {
	const char *key;
	uint64_t v;
} info_counter;

/* "key": {counters in the order given} */
static void info_json_counters(cli_jw *w, const char *key, const info_counter *kv, size_t n)
{
	cli_jw_obj(w, key);
	for (size_t i = 0; i < n; i++)
		cli_jw_u64(w, kv[i].key, kv[i].v);
	cli_jw_end(w, '}');
}

/* "key": {"count", "mean", "p50", "p90", "p99", "p999", "max"} of one distribution (microseconds) */
static void info_json_latency(cli_jw *w, const char *key, uint64_t count, double mean, uint64_t p50, uint64_t p90,
			      uint64_t p99, uint64_t p999, uint64_t max)
{
	cli_jw_obj(w, key);
	cli_jw_u64(w, "count", count);
	cli_jw_dbl(w, "mean", mean);
	cli_jw_u64(w, "p50", p50);
	cli_jw_u64(w, "p90", p90);
	cli_jw_u64(w, "p99", p99);
	cli_jw_u64(w, "p999", p999);
	cli_jw_u64(w, "max", max);
	cli_jw_end(w, '}');
}

/* ---- per device: the "devices.I.FIELD" values of a Stats snapshot (fos.h) ---- */

/* The device indices the snapshot names, in its order (at most cap). */
static size_t info_dev_indices(const fos_stats_snapshot *snap, unsigned *idx, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < fos_stats_count(snap); i++) {
		const char *nm = fos_stats_name_at(snap, i);
		if (strncmp(nm, "devices.", 8) || nm[8] < '0' || nm[8] > '9')
			continue;
		char *end;
		unsigned long v = strtoul(nm + 8, &end, 10);
		if (*end != '.' || v > UINT32_MAX)
			continue;
		size_t j = 0;
		while (j < n && idx[j] != v)
			j++;
		if (j == n && n < cap)
			idx[n++] = (unsigned)v;
	}
	return n;
}

/* devices.I.FIELD as an integer (0 when absent). */
static uint64_t info_dev_u64(const fos_stats_snapshot *snap, unsigned i, const char *field)
{
	char nm[96];
	uint64_t v = 0;
	snprintf(nm, sizeof nm, "devices.%u.%s", i, field);
	if (fos_stats_get(snap, nm, &v))
		v = 0;
	return v;
}

static const char *info_dev_text(const fos_stats_snapshot *snap, unsigned i, const char *field)
{
	char nm[96];
	snprintf(nm, sizeof nm, "devices.%u.%s", i, field);
	const char *t = fos_stats_text(snap, nm);
	return t ? t : "";
}

/* "devices": [{"index": I, "device": NAME, then every other field fosd sends for it}] */
static void info_json_devices(cli_jw *w, const fos_stats_snapshot *snap)
{
	unsigned idx[FOS_DEVICES_MAX];
	size_t n = info_dev_indices(snap, idx, FOS_DEVICES_MAX);
	cli_jw_arr(w, "devices");
	for (size_t d = 0; d < n; d++) {
		char pre[32];
		int pl = snprintf(pre, sizeof pre, "devices.%u.", idx[d]);
		cli_jw_obj(w, NULL);
		cli_jw_u64(w, "index", idx[d]);
		cli_jw_str(w, "device", info_dev_text(snap, idx[d], "device"));
		for (size_t i = 0; i < fos_stats_count(snap); i++) {
			const char *nm = fos_stats_name_at(snap, i);
			uint64_t u;
			double x;
			if (strncmp(nm, pre, (size_t)pl) || !strcmp(nm + pl, "device") || fos_stats_text(snap, nm))
				continue;
			if (fos_stats_get(snap, nm, &u) == FOS_CODE_OK)
				cli_jw_u64(w, nm + pl, u);
			else if (fos_stats_get_double(snap, nm, &x) == FOS_CODE_OK)
				cli_jw_dbl(w, nm + pl, x);
		}
		cli_jw_end(w, '}');
	}
	cli_jw_end(w, ']');
}

/* The table of devices (none from a fosd that predates them). */
static void info_text_devices(const fos_stats_snapshot *snap)
{
	unsigned idx[FOS_DEVICES_MAX];
	size_t n = info_dev_indices(snap, idx, FOS_DEVICES_MAX);
	if (!n)
		return;
	printf("\ndevices (the weight cache, contexts and queued counts above are their sums):\n");
	printf("%-3s %8s %11s %11s %8s %11s %9s %7s %9s %9s  %s\n", "#", "weights", "cache", "budget", "contexts",
	       "ctx bytes", "lanes", "queued", "requests", "busy s", "device");
	for (size_t d = 0; d < n; d++) {
		unsigned i = idx[d];
		char b1[32], b2[32], b3[32], lanes[48];
		snprintf(lanes, sizeof lanes, "%llu/%llu", (unsigned long long)info_dev_u64(snap, i, "lanes_busy"),
			 (unsigned long long)info_dev_u64(snap, i, "lanes"));
		printf("%-3u %8llu %11s %11s %8llu %11s %9s %7llu %9llu %9.1f  %s\n", i,
		       (unsigned long long)info_dev_u64(snap, i, "cache_entries"),
		       cli_human_bytes(info_dev_u64(snap, i, "cache_bytes"), b1, sizeof b1),
		       cli_human_bytes(info_dev_u64(snap, i, "cache_budget"), b2, sizeof b2),
		       (unsigned long long)info_dev_u64(snap, i, "contexts"),
		       cli_human_bytes(info_dev_u64(snap, i, "context_bytes"), b3, sizeof b3), lanes,
		       (unsigned long long)info_dev_u64(snap, i, "queued"),
		       (unsigned long long)info_dev_u64(snap, i, "requests"),
		       (double)info_dev_u64(snap, i, "busy_us") / 1e6, info_dev_text(snap, i, "device"));
	}
}

static void cli_stats_json(const cli_global *g, const fos_stats_info *s, const fos_stats_snapshot *snap)
{
	cli_jw w;
	cli_jw_init(&w, stdout, 1);
	cli_jw_obj(&w, NULL);
	cli_jw_str(&w, "server", g->server);
	cli_jw_u64(&w, "uptime_ms", s->uptime_ms);
	cli_jw_str(&w, "backend", s->backend);
	cli_jw_str(&w, "device", s->device);
	cli_jw_arr(&w, "ops");
	for (int i = 0; i < s->n_ops; i++) {
		const fos_op_stats *o = &s->ops[i];
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "op", o->op);
		cli_jw_u64(&w, "requests", o->requests);
		cli_jw_obj(&w, "codes");
		for (int c = 0; c < FOS_STATS_CODES; c++)
			if (o->by_code[c])
				cli_jw_u64(&w, fos_code_name(c), o->by_code[c]);
		cli_jw_end(&w, '}');
		info_json_latency(&w, "latency_us", o->lat_count, o->lat_mean_us, o->lat_p50_us, o->lat_p90_us,
				  o->lat_p99_us, o->lat_p999_us, o->lat_max_us);
		info_json_latency(&w, "queue_us", o->queue_count, o->queue_mean_us, o->queue_p50_us,
				  o->queue_p90_us, o->queue_p99_us, o->queue_p999_us, o->queue_max_us);
		info_json_latency(&w, "run_us", o->run_count, o->run_mean_us, o->run_p50_us, o->run_p90_us,
				  o->run_p99_us, o->run_p999_us, o->run_max_us);
		cli_jw_u64(&w, "ran_at_once", o->ran_at_once);
		cli_jw_u64(&w, "bytes_in", o->bytes_in);
		cli_jw_u64(&w, "bytes_out", o->bytes_out);
		cli_jw_end(&w, '}');
	}
	cli_jw_end(&w, ']');
	const info_counter cache[] = {
		{"entries", s->cache_entries}, {"bytes", s->cache_bytes}, {"budget", s->cache_budget},
		{"hits", s->cache_hits}, {"misses", s->cache_misses}, {"evictions", s->cache_evictions},
	};
	const info_counter contexts[] = {
		{"live", s->contexts}, {"bytes", s->context_bytes}, {"budget", s->context_budget},
		{"expired", s->contexts_expired}, {"evicted", s->contexts_evicted},
	};
	const info_counter executor[] = {
		{"workers", s->workers}, {"inflight", s->inflight}, {"queued", s->queued},
		{"duplicates", s->duplicates}, {"bad_messages", s->bad_messages},
	};
	const info_counter channels[] = {{"open", s->channels}, {"requests", s->channel_requests}};
	const info_counter conns[] = {
		{"open", s->connections}, {"dropped", s->connections_dropped},
		{"refusals", s->connection_refusals}, {"rejected", s->connections_rejected},
	};
	info_json_counters(&w, "cache", cache, sizeof cache / sizeof cache[0]);
	info_json_counters(&w, "contexts", contexts, sizeof contexts / sizeof contexts[0]);
	const info_counter pool[] = {
		{"taken", s->msg_pool_taken}, {"reused", s->msg_pool_reused}, {"mapped_new", s->msg_pool_mapped_new},
		{"bytes_free", s->msg_pool_bytes_free}, {"bytes_used", s->msg_pool_bytes_used},
		{"bytes_pinned", s->msg_pool_bytes_pinned}, {"pin_failures", s->msg_pool_pin_failures},
	};
	info_json_counters(&w, "executor", executor, sizeof executor / sizeof executor[0]);
	info_json_counters(&w, "channels", channels, sizeof channels / sizeof channels[0]);
	info_json_counters(&w, "connections", conns, sizeof conns / sizeof conns[0]);
	cli_jw_obj(&w, "msg_pool");
	cli_jw_bool(&w, "active", s->msg_pool_active);
	for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
		cli_jw_u64(&w, pool[i].key, pool[i].v);
	cli_jw_end(&w, '}');
	info_json_devices(&w, snap);
	cli_jw_end(&w, '}');
}

/* A table of text cells, row 0 the header: each column as wide as its widest cell (at least
 * min_w[c]), the first left-aligned, the others right-aligned, one space apart. */
#define INFO_TCOLS 10
#define INFO_TROWS (FOS_STATS_MAX_OPS + 1)
typedef struct info_table {
	int ncols, nrows;
	char cell[INFO_TROWS][INFO_TCOLS][40];
} info_table;

static void info_table_row(info_table *t, const char *first, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Appends a row: first, then the other columns' cells from fmt's "%...|%...|..." ('|' separates). */
static void info_table_row(info_table *t, const char *first, const char *fmt, ...)
{
	if (t->nrows >= INFO_TROWS)
		return;
	char line[INFO_TCOLS * 40];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	char(*row)[40] = t->cell[t->nrows++];
	snprintf(row[0], sizeof row[0], "%s", first);
	char *p = line;
	for (int c = 1; c < t->ncols; c++) {
		char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);
		snprintf(row[c], sizeof row[c], "%.*s", (int)n, p);
		p += n + (bar ? 1 : 0);
	}
}

static void info_table_print(const info_table *t, const int *min_w)
{
	int w[INFO_TCOLS];
	for (int c = 0; c < t->ncols; c++) {
		w[c] = min_w[c];
		for (int r = 0; r < t->nrows; r++)
			if ((int)strlen(t->cell[r][c]) > w[c])
				w[c] = (int)strlen(t->cell[r][c]);
	}
	for (int r = 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++)
			printf(c ? " %*s" : "%-*s", w[c], t->cell[r][c]);
		putchar('\n');
	}
}

static void cli_stats_text(const cli_global *g, const fos_stats_info *s, const fos_stats_snapshot *snap)
{
	char b1[32], b2[32];
	printf("fosd at %s: backend %s (%s), up %.1f s\n\n", g->server, s->backend, s->device,
	       (double)s->uptime_ms / 1000.0);
	static info_table t; /* the sizes of its columns come from the data (op names grow with fosd) */
	memset(&t, 0, sizeof t);
	t.ncols = 10;
	info_table_row(&t, "op", "requests|errors|p50 us|p90 us|p99 us|p99.9 us|max us|bytes in|bytes out");
	for (int i = 0; i < s->n_ops; i++) {
		const fos_op_stats *o = &s->ops[i];
		uint64_t errs = o->requests >= o->by_code[0] ? o->requests - o->by_code[0] : 0;
		info_table_row(&t, o->op, "%llu|%llu|%llu|%llu|%llu|%llu|%llu|%s|%s", (unsigned long long)o->requests,
			       (unsigned long long)errs, (unsigned long long)o->lat_p50_us, (unsigned long long)o->lat_p90_us,
			       (unsigned long long)o->lat_p99_us, (unsigned long long)o->lat_p999_us,
			       (unsigned long long)o->lat_max_us, cli_human_bytes(o->bytes_in, b1, sizeof b1),
			       cli_human_bytes(o->bytes_out, b2, sizeof b2));
	}
	static const int ops_w[INFO_TCOLS] = {16, 9, 9, 9, 9, 9, 9, 9, 11, 11};
	info_table_print(&t, ops_w);
	memset(&t, 0, sizeof t);
	t.ncols = 7;
	info_table_row(&t, "op", "ran|at once|queue p50 us|queue p99 us|run p50 us|run p99 us");
	for (int i = 0; i < s->n_ops; i++) {
		const fos_op_stats *o = &s->ops[i];
		if (o->queue_count || o->run_count)
			info_table_row(&t, o->op, "%llu|%llu|%llu|%llu|%llu|%llu", (unsigned long long)o->run_count,
				       (unsigned long long)o->ran_at_once, (unsigned long long)o->queue_p50_us,
				       (unsigned long long)o->queue_p99_us, (unsigned long long)o->run_p50_us,
				       (unsigned long long)o->run_p99_us);
	}
	if (t.nrows > 1) {
		printf("\nwhere the time goes (OK requests the executor ran; queue: receipt until a lane took it,\n"
		       "run: the op and its device sync; at once: run on the receiving thread):\n");
		static const int run_w[INFO_TCOLS] = {16, 9, 9, 12, 12, 12, 12};
		info_table_print(&t, run_w);
	}
	int wop = 16; /* errors by op and status: the op column as wide as the longest name */
	for (int i = 0; i < s->n_ops; i++)
		wop = (int)strlen(s->ops[i].op) > wop ? (int)strlen(s->ops[i].op) : wop;
	int any = 0;
	for (int i = 0; i < s->n_ops; i++)
		for (int c = 1; c < FOS_STATS_CODES; c++)
			if (s->ops[i].by_code[c]) {
				if (!any++)
					printf("\nerrors by op and status:\n");
				printf("  %-*s %-20s %llu\n", wop, s->ops[i].op, fos_code_name(c),
				       (unsigned long long)s->ops[i].by_code[c]);
			}
	printf("\nweight cache:  %llu entries, %s of %s; %llu hits, %llu misses, %llu evictions\n",
	       (unsigned long long)s->cache_entries, cli_human_bytes(s->cache_bytes, b1, sizeof b1),
	       cli_human_bytes(s->cache_budget, b2, sizeof b2), (unsigned long long)s->cache_hits,
	       (unsigned long long)s->cache_misses, (unsigned long long)s->cache_evictions);
	printf("contexts:      %llu live, %s of %s; %llu expired, %llu evicted\n", (unsigned long long)s->contexts,
	       cli_human_bytes(s->context_bytes, b1, sizeof b1), cli_human_bytes(s->context_budget, b2, sizeof b2),
	       (unsigned long long)s->contexts_expired, (unsigned long long)s->contexts_evicted);
	printf("executor:      %llu workers, %llu in flight, %llu queued; %llu duplicate requests, %llu bad messages\n",
	       (unsigned long long)s->workers, (unsigned long long)s->inflight, (unsigned long long)s->queued,
	       (unsigned long long)s->duplicates, (unsigned long long)s->bad_messages);
	char b3[32];
	printf("message pool:  %llu buffers taken (%llu reused, %llu newly mapped); %s holding messages, %s free, "
	       "%s pinned; %llu failed pins\n",
	       (unsigned long long)s->msg_pool_taken, (unsigned long long)s->msg_pool_reused,
	       (unsigned long long)s->msg_pool_mapped_new, cli_human_bytes(s->msg_pool_bytes_used, b1, sizeof b1),
	       cli_human_bytes(s->msg_pool_bytes_free, b2, sizeof b2),
	       cli_human_bytes(s->msg_pool_bytes_pinned, b3, sizeof b3), (unsigned long long)s->msg_pool_pin_failures);
	printf("channels:      %llu open, %llu requests taken from them\n", (unsigned long long)s->channels,
	       (unsigned long long)s->channel_requests);
	printf("connections:   %llu open, %llu dropped for not reading replies, %llu requests refused for their "
	       "share, %llu connections past the limit\n",
	       (unsigned long long)s->connections, (unsigned long long)s->connections_dropped,
	       (unsigned long long)s->connection_refusals, (unsigned long long)s->connections_rejected);
	info_text_devices(snap);
}

enum { SF_JSON, SF_COUNT };

int cli_stats_main(const cli_global *g, int argc, char **argv)
{
	cli_flag flags[SF_COUNT] = {
		[SF_JSON] = {"--json", NULL, "print the counters as one JSON object", 0, 0},
	};
	cli_cmd cmd = {
		.name = "stats",
		.synopsis = "[--json]",
		.summary = "Show fosd's counters: requests, status codes, latencies and bytes by op, the\n"
			   "weight cache, saved contexts, the executor, the message pool and each device.",
		CLI_CMD_FLAGS(flags),
		.about = "Latencies are fosd's own (receipt to reply, OK requests), in microseconds. For ops\n"
			 "the executor runs they are split into queue (receipt until an executor lane took\n"
			 "the request) and run (the op and its device sync on the lane).\n"
			 "\n"
			 "The devices table (--json: \"devices\") has one row per device fosd serves (fosd\n"
			 "--devices): its weights, cache, contexts, executor lanes (busy/all), requests\n"
			 "waiting for it, requests run on it and its lanes' busy time; the cache, context\n"
			 "and queued counts above are their sums.",
	};
	fos_client *c;
	int ex;
	if (!cli_parse_connect(g, &cmd, argc, argv, &c, &ex))
		return ex;
	fos_err err = {0, ""};
	static fos_stats_info s;
	fos_status st;
	if (fos_stats(c, &s, &st)) {
		cli_status_err(&st, "stats", &err);
		fos_close(c);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	/* the per-device values by name (a second Stats request, right after the first) */
	fos_stats_snapshot *snap = NULL;
	if (fos_stats_take(c, &snap, &st)) {
		cli_status_err(&st, "stats", &err);
		fos_close(c);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	fos_close(c);
	if (g->json && !g->quiet)
		cli_stats_json(g, &s, snap);
	else if (!g->quiet)
		cli_stats_text(g, &s, snap);
	fos_stats_free(snap);
	return cli_flush_stdout("stats");
}
