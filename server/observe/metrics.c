/* metrics.c: request counters by operation, status code and tenant, latency histograms
 * (formats/fos_hist.c's buckets, allocated with a distribution's first value) of the whole request
 * by status code and, for OK requests an executor lane ran, of its queue, input copy, compute,
 * output copy and run parts, and bytes moved.
 *
 * Invariants: everything in fosd_metrics is read and written under mu, except the per-thread copy
 * times (tl_copy), which only their own thread touches; tenants[0] is the entry of no tenant and
 * exists from init; the tenant index holds every entry but tenants[0] and is never more than half
 * full. */
#include "metrics.h"
#include "tenants.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(FOSD_METRICS_TENANT_MAX == FOSD_TENANT_NAME_MAX, "tenant names must fit");
_Static_assert(FOSD_PROM_LE_MAX_LOG2 < 64, "exported buckets must lie inside the histogram");

int fosd_metrics_init(fosd_metrics *m)
{
	memset(m, 0, sizeof *m);
	m->tenants = calloc(8, sizeof *m->tenants);
	m->tenant_index = calloc(16, sizeof *m->tenant_index);
	if (m->tenants)
		m->tenants[0] = calloc(1, sizeof **m->tenants);
	if (!m->tenants || !m->tenants[0] || !m->tenant_index || pthread_mutex_init(&m->mu, NULL)) {
		if (m->tenants)
			free(m->tenants[0]);
		free(m->tenants);
		free(m->tenant_index);
		memset(m, 0, sizeof *m);
		return -1;
	}
	m->n_tenants = 1;
	m->cap_tenants = 8;
	m->index_cap = 16;
	return 0;
}

void fosd_hist_free(fosd_hist *h)
{
	free(h->buckets);
	memset(h, 0, sizeof *h);
}

void fosd_metrics_destroy(fosd_metrics *m)
{
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		fosd_op_metrics *om = &m->ops[i];
		for (int c = 0; c < FOSD_NUM_CODES; c++)
			fosd_hist_free(&om->lat[c]);
		fosd_hist_free(&om->queue);
		fosd_hist_free(&om->in_copy);
		fosd_hist_free(&om->compute);
		fosd_hist_free(&om->out_copy);
		fosd_hist_free(&om->run);
	}
	for (size_t i = 0; i < m->n_tenants; i++)
		free(m->tenants[i]);
	free(m->tenants);
	free(m->tenant_index);
	pthread_mutex_destroy(&m->mu);
}

void fosd_hist_add(fosd_hist *h, uint64_t us)
{
	if (!h->buckets && !(h->buckets = calloc(FOS_HIST_BUCKETS, sizeof *h->buckets)))
		return;
	if (!h->count || us < h->min_us)
		h->min_us = us;
	if (us > h->max_us)
		h->max_us = us;
	h->count++;
	h->sum_us += us;
	h->buckets[fos_hist_index(us)]++;
}

/* ---- tenants -------------------------------------------------------------------------------- */

static size_t key_hash(const void *key, size_t cap)
{
	uint64_t x = (uint64_t)(uintptr_t)key;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x & (cap - 1);
}

static void index_put(size_t *index, size_t cap, fosd_tenant_metrics **tenants, size_t i)
{
	size_t h = key_hash(tenants[i]->key, cap);
	while (index[h])
		h = (h + 1) & (cap - 1);
	index[h] = i + 1;
}

/* The entry of key (created with the name); NULL when out of memory. Under mu. */
static fosd_tenant_metrics *tenant_entry(fosd_metrics *m, const void *key, const char *name)
{
	if (!key || !name)
		return m->tenants[0];
	for (size_t h = key_hash(key, m->index_cap); m->tenant_index[h]; h = (h + 1) & (m->index_cap - 1)) {
		fosd_tenant_metrics *t = m->tenants[m->tenant_index[h] - 1];
		if (t->key == key)
			return t;
	}
	if (m->n_tenants == m->cap_tenants) {
		fosd_tenant_metrics **nt = realloc(m->tenants, 2 * m->cap_tenants * sizeof *nt);
		if (!nt)
			return NULL;
		m->tenants = nt;
		m->cap_tenants *= 2;
	}
	if (2 * (m->n_tenants + 1) > m->index_cap) {
		size_t cap = 2 * m->index_cap;
		size_t *ni = calloc(cap, sizeof *ni);
		if (!ni)
			return NULL;
		for (size_t i = 1; i < m->n_tenants; i++)
			index_put(ni, cap, m->tenants, i);
		free(m->tenant_index);
		m->tenant_index = ni;
		m->index_cap = cap;
	}
	fosd_tenant_metrics *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->key = key;
	snprintf(t->name, sizeof t->name, "%s", name);
	m->tenants[m->n_tenants] = t;
	index_put(m->tenant_index, m->index_cap, m->tenants, m->n_tenants);
	m->n_tenants++;
	return t;
}

/* ---- copy times ----------------------------------------------------------------------------- */

static _Thread_local struct {
	const void *req;
	uint64_t ns[2];
} tl_copy;

void fosd_metrics_copy_time(const void *req, int which, uint64_t t0_ns)
{
	if (!req || which < 0 || which > 1)
		return;
	uint64_t now = fosd_now_ns();
	if (tl_copy.req != req) {
		tl_copy.req = req;
		tl_copy.ns[0] = tl_copy.ns[1] = 0;
	}
	if (now > t0_ns)
		tl_copy.ns[which] += now - t0_ns;
}

/* ---- recording ------------------------------------------------------------------------------ */

void fosd_metrics_record_req(fosd_metrics *m, const fosd_req_sample *r)
{
	int op = r->op, code = r->code;
	if (op < 0 || op >= FOSD_NUM_OPS)
		op = FOSD_OP_INVALID;
	if (code < 0 || code >= FOSD_NUM_CODES)
		code = 2; /* UNKNOWN */
	uint64_t copy_ns[2] = {0, 0};
	if (r->req && tl_copy.req == r->req) {
		copy_ns[0] = tl_copy.ns[0];
		copy_ns[1] = tl_copy.ns[1];
		tl_copy.req = NULL;
	}
	/* a lane's times are after receipt and in order (one monotonic clock); guard all the same */
	int ran = code == 0 && r->t_lane_ns && r->t_done_ns && r->t_lane_ns >= r->t_recv_ns &&
		  r->t_done_ns >= r->t_lane_ns;
	pthread_mutex_lock(&m->mu);
	fosd_op_metrics *om = &m->ops[op];
	om->requests++;
	om->codes[code]++;
	om->bytes_in += r->bytes_in;
	om->bytes_out += r->bytes_out;
	fosd_hist_add(&om->lat[code], r->latency_us);
	if (ran) {
		uint64_t run_ns = r->t_done_ns - r->t_lane_ns;
		uint64_t in = copy_ns[0] < run_ns ? copy_ns[0] : run_ns;
		uint64_t out = copy_ns[1] < run_ns - in ? copy_ns[1] : run_ns - in;
		fosd_hist_add(&om->queue, (r->t_lane_ns - r->t_recv_ns) / 1000u);
		fosd_hist_add(&om->run, run_ns / 1000u);
		fosd_hist_add(&om->in_copy, in / 1000u);
		fosd_hist_add(&om->out_copy, out / 1000u);
		fosd_hist_add(&om->compute, (run_ns - in - out) / 1000u);
		if (r->ran_now)
			om->ran_at_once++;
	}
	if (op == FOSD_OP_INVALID)
		m->bad_messages++;
	fosd_tenant_metrics *t = tenant_entry(m, r->tenant_key, r->tenant);
	if (t)
		t->codes[op][code]++;
	pthread_mutex_unlock(&m->mu);
}

void fosd_metrics_record(fosd_metrics *m, int op, int code, uint64_t latency_us, uint64_t t_recv_ns,
			 uint64_t t_lane_ns, uint64_t t_done_ns, int ran_now, uint64_t bytes_in, uint64_t bytes_out)
{
	fosd_req_sample r = {.op = op,
			     .code = code,
			     .latency_us = latency_us,
			     .t_recv_ns = t_recv_ns,
			     .t_lane_ns = t_lane_ns,
			     .t_done_ns = t_done_ns,
			     .ran_now = ran_now,
			     .bytes_in = bytes_in,
			     .bytes_out = bytes_out};
	fosd_metrics_record_req(m, &r);
}

void fosd_metrics_count_duplicate(fosd_metrics *m)
{
	pthread_mutex_lock(&m->mu);
	m->duplicates++;
	pthread_mutex_unlock(&m->mu);
}

/* ---- reading -------------------------------------------------------------------------------- */

uint64_t fosd_hist_quantile(const fosd_hist *h, double q)
{
	return fos_hist_percentile(h->buckets, h->count, h->min_us, h->max_us, q * 100.0);
}

double fosd_hist_mean(const fosd_hist *h)
{
	return h->count ? (double)h->sum_us / (double)h->count : 0.0;
}

void fosd_hist_summarize(const fosd_hist *h, fosd_hist_snap *out)
{
	memset(out, 0, sizeof *out);
	if (!h->count)
		return;
	out->count = h->count;
	out->sum_us = h->sum_us;
	out->max_us = h->max_us;
	/* the percentiles `fos load` reports (cli_load_report.c), in the same terms */
	static const double pcts[4] = {50, 90, 99, 99.9};
	uint64_t q[4];
	fos_hist_percentiles(h->buckets, h->count, h->min_us, h->max_us, pcts, 4, q);
	out->p50_us = q[0];
	out->p90_us = q[1];
	out->p99_us = q[2];
	out->p999_us = q[3];
	/* one pass: the counts below each exported edge */
	uint64_t cum = 0;
	size_t next = 0;
	for (int i = 0; i < FOSD_PROM_LE_N; i++) {
		size_t end = fos_hist_index((uint64_t)1 << (FOSD_PROM_LE_MIN_LOG2 + i));
		for (; next < end; next++)
			cum += h->buckets[next];
		out->below[i] = cum;
	}
}

void fosd_metrics_snapshot(fosd_metrics *m, fosd_metrics_snap *out)
{
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		const fosd_op_metrics *om = &m->ops[i];
		fosd_op_snap *os = &out->ops[i];
		os->requests = om->requests;
		memcpy(os->codes, om->codes, sizeof os->codes);
		for (int c = 0; c < FOSD_NUM_CODES; c++)
			fosd_hist_summarize(&om->lat[c], &os->lat[c]);
		fosd_hist_summarize(&om->queue, &os->queue);
		fosd_hist_summarize(&om->in_copy, &os->in_copy);
		fosd_hist_summarize(&om->compute, &os->compute);
		fosd_hist_summarize(&om->out_copy, &os->out_copy);
		fosd_hist_summarize(&om->run, &os->run);
		os->ran_at_once = om->ran_at_once;
		os->bytes_in = om->bytes_in;
		os->bytes_out = om->bytes_out;
	}
	out->duplicates = m->duplicates;
	out->bad_messages = m->bad_messages;
	pthread_mutex_unlock(&m->mu);
}

fosd_tenant_count *fosd_metrics_tenant_counts(fosd_metrics *m, size_t *n)
{
	*n = 0;
	pthread_mutex_lock(&m->mu);
	size_t total = 0;
	for (size_t t = 0; t < m->n_tenants; t++)
		for (int o = 0; o < FOSD_NUM_OPS; o++)
			for (int c = 0; c < FOSD_NUM_CODES; c++)
				total += m->tenants[t]->codes[o][c] != 0;
	fosd_tenant_count *out = total ? malloc(total * sizeof *out) : NULL;
	if (out) {
		size_t k = 0;
		for (size_t t = 0; t < m->n_tenants; t++)
			for (int o = 0; o < FOSD_NUM_OPS; o++)
				for (int c = 0; c < FOSD_NUM_CODES; c++) {
					uint64_t v = m->tenants[t]->codes[o][c];
					if (!v)
						continue;
					memcpy(out[k].tenant, m->tenants[t]->name, sizeof out[k].tenant);
					out[k].op = o;
					out[k].code = c;
					out[k].n = v;
					k++;
				}
		*n = k;
	}
	pthread_mutex_unlock(&m->mu);
	return out;
}
