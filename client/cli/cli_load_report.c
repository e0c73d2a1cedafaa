/* cli_load_report.c: the final report of `fos load`: what ran, requests (measured, ok, failed),
 * throughput in requests/s and GB/s of tensor bytes moved (request + reply), the latency
 * percentiles from the merged histogram, and failures by status code; as text or one JSON object. */
#include "cli.h"

#include <string.h>

static const double load_pcts[] = {50, 90, 99, 99.9};
static const char *const load_pct_names[] = {"p50", "p90", "p99", "p999"};
static const char *const load_pct_labels[] = {"p50", "p90", "p99", "p99.9"};
#define LOAD_NPCT 4

static void load_hist_json(cli_jw *w, const char *key, const cli_hist *h)
{
	cli_jw_obj(w, key);
	cli_jw_u64(w, "count", h->count);
	if (h->count) {
		cli_jw_dbl(w, "min", (double)h->min / 1e3);
		for (int i = 0; i < LOAD_NPCT; i++)
			cli_jw_dbl(w, load_pct_names[i], (double)cli_hist_percentile(h, load_pcts[i]) / 1e3);
		cli_jw_dbl(w, "max", (double)h->max / 1e3);
		cli_jw_dbl(w, "mean", cli_hist_mean(h) / 1e3);
	} else {
		static const char *const keys[] = {"min", "p50", "p90", "p99", "p999", "max", "mean"};
		for (int i = 0; i < 7; i++)
			cli_jw_null(w, keys[i]);
	}
	cli_jw_end(w, '}');
}

/* "812 us", "3.41 ms", "1.20 s" */
static const char *load_dur(double ns, char *buf, size_t cap)
{
	if (ns < 1e6)
		snprintf(buf, cap, "%.0f us", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, cap, "%.2f ms", ns / 1e6);
	else
		snprintf(buf, cap, "%.2f s", ns / 1e9);
	return buf;
}

static void load_hist_text(FILE *f, const char *label, const cli_hist *h)
{
	char b[32];
	if (!h->count) {
		fprintf(f, "  %-12s (no successful request measured)\n", label);
		return;
	}
	fprintf(f, "  %-12s min %s", label, load_dur((double)h->min, b, sizeof b));
	for (int i = 0; i < LOAD_NPCT; i++)
		fprintf(f, "  %s %s", load_pct_labels[i], load_dur((double)cli_hist_percentile(h, load_pcts[i]), b, sizeof b));
	fprintf(f, "  max %s", load_dur((double)h->max, b, sizeof b));
	fprintf(f, "  mean %s\n", load_dur(cli_hist_mean(h), b, sizeof b));
}

void cli_load_report(const cli_load_cfg *cfg, const cli_load_result *r, FILE *f)
{
	double el = (double)r->elapsed_ns / 1e9;
	double rps = el > 0 ? (double)r->ok / el : 0;
	double bps = rps * (double)r->bytes_per_request;
	int open = cfg->rate > 0;
	if (cfg->json) {
		cli_jw w;
		cli_jw_init(&w, f, 1);
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "server", cfg->server);
		cli_jw_str(&w, "op", cli_load_op_name(cfg->op));
		cli_jw_i64(&w, "m", cfg->m);
		if (cfg->op != CLI_LOAD_QUANTIZE)
			cli_jw_i64(&w, "n", cfg->n);
		cli_jw_i64(&w, "k", cfg->k);
		if (cfg->op != CLI_LOAD_QUANTIZE)
			cli_jw_str(&w, "override", cli_override_name(cfg->override));
		cli_jw_str(&w, "mode", open ? "open" : "closed");
		if (open)
			cli_jw_dbl(&w, "rate", cfg->rate);
		else
			cli_jw_null(&w, "rate");
		cli_jw_i64(&w, "concurrency", cfg->concurrency);
		cli_jw_i64(&w, "connections", cfg->connections);
		if (cfg->duration_ns)
			cli_jw_dbl(&w, "duration_s", (double)cfg->duration_ns / 1e9);
		else
			cli_jw_u64(&w, "requests_wanted", cfg->requests);
		cli_jw_dbl(&w, "warmup_s", (double)cfg->warmup_ns / 1e9);
		if (r->weight[0])
			cli_jw_str(&w, "weight", r->weight);
		cli_jw_obj(&w, "requests");
		cli_jw_u64(&w, "measured", r->measured);
		cli_jw_u64(&w, "ok", r->ok);
		cli_jw_u64(&w, "failed", r->failed);
		cli_jw_u64(&w, "warmup", r->warmup);
		if (open) {
			cli_jw_u64(&w, "due", r->due);
			cli_jw_u64(&w, "unsent", r->unsent);
		}
		cli_jw_end(&w, '}');
		cli_jw_dbl(&w, "elapsed_s", el);
		cli_jw_u64(&w, "bytes_per_request", r->bytes_per_request);
		cli_jw_obj(&w, "throughput");
		cli_jw_dbl(&w, "requests_per_s", rps);
		cli_jw_dbl(&w, "bytes_per_s", bps);
		cli_jw_dbl(&w, "gb_per_s", bps / 1e9);
		cli_jw_end(&w, '}');
		load_hist_json(&w, "latency_us", &r->latency);
		if (open) {
			load_hist_json(&w, "service_us", &r->service);
			cli_jw_dbl(&w, "max_send_lag_us", (double)r->max_send_lag_ns / 1e3);
		}
		cli_jw_obj(&w, "errors");
		for (int c = 1; c < FOS_STATS_CODES; c++)
			if (r->by_code[c])
				cli_jw_u64(&w, fos_code_name(c), r->by_code[c]);
		cli_jw_end(&w, '}');
		if (r->first_error[0])
			cli_jw_str(&w, "first_error", r->first_error);
		cli_jw_bool(&w, "interrupted", r->interrupted);
		cli_jw_bool(&w, "unavailable", r->unavailable);
		if (r->unavailable)
			cli_jw_dbl(&w, "unavailable_s", (double)r->unavailable_ns / 1e9);
		cli_jw_end(&w, '}');
		return;
	}
	char b1[32], b2[48];
	fprintf(f, "fos load: %s", cli_load_op_name(cfg->op));
	if (cfg->op == CLI_LOAD_QUANTIZE)
		fprintf(f, " of (%lld, %lld)", (long long)cfg->m, (long long)cfg->k);
	else
		fprintf(f, " M=%lld N=%lld K=%lld (%s)", (long long)cfg->m, (long long)cfg->n, (long long)cfg->k,
			cli_override_name(cfg->override));
	fprintf(f, " against %s\n", cfg->server);
	if (open)
		fprintf(f, "  mode:        open loop at %g requests/s, at most %d in flight", cfg->rate, cfg->concurrency);
	else
		fprintf(f, "  mode:        closed loop, %d in flight", cfg->concurrency);
	fprintf(f, ", %d connection%s; ", cfg->connections, cfg->connections == 1 ? "" : "s");
	if (cfg->duration_ns)
		fprintf(f, "%s", load_dur((double)cfg->duration_ns, b1, sizeof b1));
	else
		fprintf(f, "%llu requests", (unsigned long long)cfg->requests);
	if (cfg->warmup_ns)
		fprintf(f, " after %s of warmup\n", load_dur((double)cfg->warmup_ns, b1, sizeof b1));
	else
		fprintf(f, ", no warmup\n");
	if (r->weight[0])
		fprintf(f, "  weight:      %s (registered for this run, dropped at the end)\n", r->weight);
	fprintf(f, "  requests:    %llu measured: %llu ok, %llu failed; %llu during warmup\n",
		(unsigned long long)r->measured, (unsigned long long)r->ok, (unsigned long long)(r->measured - r->ok),
		(unsigned long long)r->warmup);
	if (r->unsent)
		fprintf(f, "  unsent:      %llu of the %llu requests due were never sent: fosd (or the client) fell too\n"
			   "               far behind the rate (see the latencies below)\n",
			(unsigned long long)r->unsent, (unsigned long long)r->due);
	fprintf(f, "  throughput:  %.1f requests/s, %.3f GB/s (%s of tensors per request) over %s\n", rps, bps / 1e9,
		cli_human_bytes(r->bytes_per_request, b2, sizeof b2), load_dur((double)r->elapsed_ns, b1, sizeof b1));
	load_hist_text(f, open ? "latency:" : "latency:", &r->latency);
	if (open) {
		fprintf(f, "               (from each request's intended send time; the service time below is\n"
			   "                from the actual send; the latest send was %s behind schedule)\n",
			load_dur((double)r->max_send_lag_ns, b1, sizeof b1));
		load_hist_text(f, "service:", &r->service);
	}
	if (!r->failed) {
		fprintf(f, "  errors:      none\n");
	} else {
		fprintf(f, "  errors:     ");
		for (int c = 1; c < FOS_STATS_CODES; c++)
			if (r->by_code[c])
				fprintf(f, " %s %llu", fos_code_name(c), (unsigned long long)r->by_code[c]);
		fprintf(f, " (warmup included)\n               first: %s\n", r->first_error);
	}
	if (r->interrupted)
		fprintf(f, "  interrupted: the run was stopped early\n");
	if (r->unavailable)
		fprintf(f, "  stopped:     fosd was unavailable (draining or gone) for %s: %s\n",
			load_dur((double)r->unavailable_ns, b1, sizeof b1), r->unavailable_why);
}
