/* cli_load_args.c: the command line of `fos load`: its flags and help (the cli_cmd of cli.h), and
 * their checks into a cli_load_cfg (cli_load.c runs it). Invariant: every value is checked here,
 * before a connection is made, and a bad one exits 2 (CLI_EXIT_USAGE) naming the flag. */
#include "cli.h"
#include "cli_load_gate.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the flags ---------------------------------------------------------------------------------- */

enum {
	LDF_OP,
	LDF_M,
	LDF_N,
	LDF_K,
	LDF_CONC,
	LDF_RATE,
	LDF_DURATION,
	LDF_REQUESTS,
	LDF_WARMUP,
	LDF_CONNECTIONS,
	LDF_OVERRIDE,
	LDF_JSON,
	LDF_NO_PROGRESS,
	LDF_SHM,
	LDF_CHANNEL,
	LDF_DEVICE,
	LDF_COUNT
};

static int load_parse(cli_flag *flags, cli_load_cfg *c, fos_err *err)
{
	static const char *const ops[] = {"forward", "backward", "linear", "quantize", "check"};
	static const int opv[] = {CLI_LOAD_FORWARD, CLI_LOAD_BACKWARD, CLI_LOAD_LINEAR, CLI_LOAD_QUANTIZE,
				  CLI_LOAD_CHECK};
	uint64_t v;
	int ovr = FOS_OVR_DEFAULT;
	if (cli_choice(&flags[LDF_OP], 5, ops, opv, &c->op, err) || cli_opt_override(&flags[LDF_OVERRIDE], &ovr, err))
		return FOS_EINVAL;
	c->override = ovr; /* FOS_OVR_* are FOS_OVERRIDE_* (fos_wire_enums.h) */
	int64_t *dims[3] = {&c->m, &c->n, &c->k};
	static const char *const dn[3] = {"--m", "--n", "--k"};
	for (int i = 0; i < 3; i++) {
		if (!flags[LDF_M + i].given)
			continue;
		if (cli_parse_u64(dn[i], flags[LDF_M + i].value, 1, 1u << 20, &v, err))
			return FOS_EINVAL;
		*dims[i] = (int64_t)v;
	}
	if (c->op == CLI_LOAD_QUANTIZE) {
		if (flags[LDF_N].given)
			return cli_errf(err, "load: --n has no meaning for --op quantize (it quantizes X, (M, K))");
		if (c->k % 16)
			return cli_errf(err, "load: --k %lld is not divisible by 16 (quantize works in 16-element blocks)",
					(long long)c->k);
		if (flags[LDF_OVERRIDE].given)
			return cli_errf(err, "load: --override has no meaning for --op quantize");
	} else {
		fos_linear_opts lo = fos_linear_opts_default();
		lo.override = ovr;
		fos_err e = {0, ""};
		if (fos_linear_check(&lo, c->m, c->n, c->k, NULL, &e))
			return cli_errf(err, "load: %s", e.msg);
	}
	if (flags[LDF_CONC].given) {
		if (cli_parse_u64("--concurrency", flags[LDF_CONC].value, 1, 1024, &v, err))
			return FOS_EINVAL;
		c->concurrency = (int)v;
	}
	if (flags[LDF_RATE].given) {
		if (cli_parse_double("--rate", flags[LDF_RATE].value, &c->rate, err))
			return FOS_EINVAL;
		if (!(c->rate > 0) || c->rate > 1e6)
			return cli_errf(err, "bad value '%s' for --rate (expected requests per second, above 0 and at "
					     "most 1000000)",
					flags[LDF_RATE].value);
		if (!flags[LDF_CONC].given)
			c->concurrency = 16;
	}
	if (flags[LDF_DURATION].given && flags[LDF_REQUESTS].given)
		return cli_errf(err, "load: give --duration or --requests, not both");
	if (flags[LDF_DURATION].given &&
	    cli_parse_duration("--duration", flags[LDF_DURATION].value, &c->duration_ns, err))
		return FOS_EINVAL;
	if (flags[LDF_REQUESTS].given) {
		if (cli_parse_u64("--requests", flags[LDF_REQUESTS].value, 1, UINT64_C(1) << 40, &c->requests, err))
			return FOS_EINVAL;
		c->duration_ns = 0;
	}
	if (flags[LDF_WARMUP].given) {
		if (!strcmp(flags[LDF_WARMUP].value, "0"))
			c->warmup_ns = 0;
		else if (cli_parse_duration("--warmup", flags[LDF_WARMUP].value, &c->warmup_ns, err))
			return FOS_EINVAL;
	}
	if (flags[LDF_CONNECTIONS].given) {
		if (cli_parse_u64("--connections", flags[LDF_CONNECTIONS].value, 1, 64, &v, err))
			return FOS_EINVAL;
		c->connections = (int)v;
	} else {
		/* at most 8 workers a connection: within fosd's per-connection share of its request slots
		 * (connection_requests, 16 by default), which refuses more */
		c->connections = (c->concurrency + 7) / 8 < 64 ? (c->concurrency + 7) / 8 : 64;
	}
	if (c->connections > c->concurrency)
		c->connections = c->concurrency;
	c->json = flags[LDF_JSON].given;
	c->shm = flags[LDF_SHM].given;
	c->channel = flags[LDF_CHANNEL].given;
	c->device = flags[LDF_DEVICE].given;
	if (c->device && c->shm)
		return fos_seterr(err, FOS_EINVAL, "load: --device and --shm exclude each other (the tensors live on the GPU "
					 "or in shared memory)");
	c->progress = !flags[LDF_NO_PROGRESS].given && isatty(2);
	return FOS_OK;
}

int cli_load_args(const cli_global *g, int argc, char **argv, cli_load_cfg *cfg, fos_err *err)
{
	cli_flag flags[LDF_COUNT] = {
		[LDF_OP] = {"--op", "OP", "what each request is: forward (default; with the run's own\n"
					  "cached weight), backward (on a context each worker saved\n"
					  "once and keeps), linear (one-shot forward + backward: x, w,\n"
					  "dy in; y, dx, dw out), quantize (X, (M, K)) or check\n"
					  "(a forward with the run's weight that sends a Y to check\n"
					  "and gets the comparison back: fos check --remote)", 0, 0},
		[LDF_M] = {"--m", "M", "rows of X (default 128; any M >= 1)", 0, 0},
		[LDF_N] = {"--n", "N", "rows of W (default 1024; a multiple of 16)", 0, 0},
		[LDF_K] = {"--k", "K", "columns of X and W (default 1024; a multiple of 16)", 0, 0},
		[LDF_CONC] = {"--concurrency", "N", "closed loop: N requests in flight, each sent when the last\n"
						    "one answered (default 1); with --rate: at most N in flight\n"
						    "(default 16)", 0, 0},
		[LDF_RATE] = {"--rate", "R", "open loop at R requests per second: request i is due at\n"
					     "i/R s; its latency counts from then, not from when it\n"
					     "went out (no coordinated omission)", 0, 0},
		[LDF_DURATION] = {"--duration", "DUR", "measure for DUR after the warmup, e.g. 30s, 2m (default\n"
						       "10s)", 0, 0},
		[LDF_REQUESTS] = {"--requests", "N", "measure N requests after the warmup instead of a duration", 0, 0},
		[LDF_WARMUP] = {"--warmup", "DUR", "run this long first without measuring (default 1s; 0 for\n"
						   "none)", 0, 0},
		[LDF_CONNECTIONS] = {"--connections", "N", "client handles (sockets) the workers share (default one per 8\n"
							   "workers: fosd refuses more than connection_requests\n"
							   "in flight on one)", 0, 0},
		[LDF_OVERRIDE] = {"--override", "MODE", "the backward override (forward, backward, linear):\n"
							 "default, quantized, high_precision or dequantized", 0, 0},
		[LDF_JSON] = {"--json", NULL, "print the report as one JSON object", 0, 0},
		[LDF_NO_PROGRESS] = {"--no-progress", NULL, "no live progress line (it is shown only when stderr is\n"
							   "a terminal anyway)", 0, 0},
		[LDF_SHM] = {"--shm", NULL, "tensors in shared memory instead of the messages (ipc://\n"
					    "servers on this host): each connection registers one region\n"
					    "holding the inputs and its workers' outputs, which fosd reads\n"
					    "and writes in place", 0, 0},
		[LDF_DEVICE] = {"--device", NULL, "tensors in GPU memory (device 0) as device tensors, which a\n"
						"cuda fosd on the same host and GPU reads and writes in\n"
						"place (fos.h \"device tensors\"); fails without a CUDA\n"
						"driver or GPU, and against a cpu fosd", 0, 0},
		[LDF_CHANNEL] = {"--channel", NULL, "each connection opens a request channel (ipc:// servers\n"
						"on this host): requests go through shared memory and a\n"
						"doorbell instead of the socket, one at a time per\n"
						"connection (use --connections N with --concurrency N)", 0, 0},
	};
	cli_cmd cmd = {
		.name = "load",
		.synopsis = "[--op forward|backward|linear|quantize|check] [--m M] [--n N] [--k K]\n"
			    "           [--concurrency N | --rate R [--concurrency N]] [--duration DUR | --requests N]\n"
			    "           [--warmup DUR] [--connections N] [--override MODE] [--json] [--no-progress]\n"
			    "           [--shm | --device] [--channel]",
		.summary = "Load-test fosd: closed loop or a fixed rate; throughput, latency percentiles, errors.",
		CLI_CMD_FLAGS(flags),
		.about = "For forward, backward and check it first caches a random (N, K) weight under a unique\n"
			 "name (fos-load-PID-RANDOM) and drops it at the end. Inputs are random bf16; check\n"
			 "sends fosd's own Y of X (from one forward at the start), so any difference is a\n"
			 "failure (DATA_LOSS). Latencies go into an HDR-style histogram (within 0.8 %). Ctrl-C\n"
			 "stops early and still reports. When fosd stops answering (UNAVAILABLE: draining, or\n"
			 "the connection lost) the workers stop sending and one of them probes fosd with Health,\n"
			 "backing off from 10 ms to 1 s; after 3 s of that the run stops (\"fosd is unavailable\").",
		.footer = "Report: requests (measured, ok, failed), throughput in requests/s and GB/s of\n"
			  "tensor bytes moved (request + reply), latency min/p50/p90/p99/p99.9/max/mean, and\n"
			  "failures by status code.\n"
			  "With --quiet: no progress line and no report, only the exit status (and the error\n"
			  "line on stderr when it is not 0); --json (before or after the command): the report\n"
			  "as one JSON object.\n"
			  "Exit status: 0 every request succeeded; 1 any request failed (or setup failed, or\n"
			  "interrupted, or fosd unavailable); 2 bad command line.",
	};
	int rc = cli_parse_main(&cmd, argc, argv, err);
	if (rc >= 0)
		return rc;
	*cfg = (cli_load_cfg){CLI_LOAD_FORWARD, 128, 1024, 1024, FOS_OVERRIDE_DEFAULT, 1, 0, 10000000000ull, 0,
			    1000000000ull, 1, 0, 0, g->server, 0, 0, 0};
	if (load_parse(flags, cfg, err))
		return cli_report(err, CLI_EXIT_USAGE);
	/* the global --json and --quiet count as well (given before the command too): with --quiet the
	 * run shows no progress line and no report, only the exit status and an error line */
	cfg->json |= g->json;
	if (g->quiet)
		cfg->progress = 0;
	return -1;
}
