/* ops_info.c: the read-only operations answered without the executor: Health, Stats and
 * ListWeights. They read the caches (and the message pool's counters) under their own locks,
 * never the backend. */
#include "msg_pool.h"
#include "ops.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#ifndef FOSD_VERSION
#define FOSD_VERSION "0.1.0"
#endif

nng_msg *fosd_op_health(fosd_server *srv, fosd_slot *s)
{
	Fos__Response resp = FOS__RESPONSE__INIT;
	Fos__HealthResult h = FOS__HEALTH_RESULT__INIT;
	h.version = (char *)FOSD_VERSION;
	h.backend = (char *)srv->be->name;
	h.device = srv->be->device;
	h.uptime_ms = (fosd_now_ns() - srv->start_ns) / 1000000u;
	h.draining = atomic_load(&srv->draining) != 0;
	h.max_message_bytes = srv->cfg->max_message_bytes;
	resp.id = s->req_id;
	resp.result_case = FOS__RESPONSE__RESULT_HEALTH;
	resp.health = &h;
	return fosd_build_reply(&resp, NULL, NULL);
}

/* One distribution as its wire message. */
static void stats_latency(Fos__LatencyStats *l, const fosd_hist *h)
{
	fos__latency_stats__init(l);
	l->count = h->count;
	l->mean_us = fosd_hist_mean(h);
	l->p50_us = fosd_hist_quantile(h, 0.50);
	l->p90_us = fosd_hist_quantile(h, 0.90);
	l->p99_us = fosd_hist_quantile(h, 0.99);
	l->p999_us = fosd_hist_quantile(h, 0.999);
	l->max_us = h->max_us;
}

nng_msg *fosd_op_stats(fosd_server *srv, fosd_slot *s)
{
	fosd_metrics *snap = malloc(sizeof *snap);
	if (!snap)
		return NULL;
	fosd_metrics_snapshot(&srv->metrics, snap);
	fosd_wcache_stats wst;
	fosd_contexts_stats cst;
	fosd_wcache_stats_get(&srv->wc, &wst);
	fosd_contexts_stats_get(&srv->cx, &cst);

	Fos__OpStats ops[FOSD_NUM_OPS], *opp[FOSD_NUM_OPS];
	Fos__LatencyStats lat[FOSD_NUM_OPS][3]; /* latency, queue, run */
	Fos__CodeCount codes[FOSD_NUM_OPS][FOSD_NUM_CODES], *codep[FOSD_NUM_OPS][FOSD_NUM_CODES];
	for (int i = 0; i < FOSD_NUM_OPS; i++) {
		const fosd_op_metrics *om = &snap->ops[i];
		fos__op_stats__init(&ops[i]);
		ops[i].op = (char *)fosd_op_name(i);
		ops[i].requests = om->requests;
		ops[i].bytes_in = om->bytes_in;
		ops[i].bytes_out = om->bytes_out;
		size_t nc = 0;
		for (int c = 0; c < FOSD_NUM_CODES; c++)
			if (om->codes[c]) {
				fos__code_count__init(&codes[i][nc]);
				codes[i][nc].code = c;
				codes[i][nc].count = om->codes[c];
				codep[i][nc] = &codes[i][nc];
				nc++;
			}
		ops[i].n_codes = nc;
		ops[i].codes = codep[i];
		stats_latency(&lat[i][0], &om->lat);
		stats_latency(&lat[i][1], &om->queue);
		stats_latency(&lat[i][2], &om->run);
		ops[i].latency = &lat[i][0];
		ops[i].queue = &lat[i][1];
		ops[i].run = &lat[i][2];
		ops[i].ran_at_once = om->ran_at_once;
		opp[i] = &ops[i];
	}
	Fos__StatsResult st = FOS__STATS_RESULT__INIT;
	st.uptime_ms = (fosd_now_ns() - srv->start_ns) / 1000000u;
	st.backend = (char *)srv->be->name;
	st.device = srv->be->device;
	st.n_ops = FOSD_NUM_OPS;
	st.ops = opp;
	st.cache_bytes = wst.bytes;
	st.cache_budget = wst.budget;
	st.cache_entries = wst.entries;
	st.cache_hits = wst.hits;
	st.cache_misses = wst.misses;
	st.cache_evictions = wst.evictions;
	st.contexts = cst.count;
	st.context_bytes = cst.bytes;
	st.context_budget = cst.budget;
	st.contexts_expired = cst.expired;
	st.contexts_evicted = cst.evicted;
	st.inflight = (uint64_t)atomic_load(&srv->inflight);
	st.queued = fosd_executor_queued(srv);
	st.duplicates = snap->duplicates;
	st.bad_messages = snap->bad_messages;
	st.workers = (uint64_t)srv->n_workers;
	fosd_regions_stats(&srv->regions, &st.shm_regions, &st.shm_region_bytes, &st.shm_mapped_bytes);
	st.channels = fosd_chans_count(&srv->chans);
	st.channel_requests = atomic_load(&srv->chans.requests);
	fosd_msgpool_stats pst;
	fosd_msgpool_get_stats(&pst);
	st.msg_pool_taken = pst.taken;
	st.msg_pool_reused = pst.reused;
	st.msg_pool_mapped_new = pst.mapped_new;
	st.msg_pool_bytes_free = pst.bytes_free;
	st.msg_pool_bytes_used = pst.bytes_used;
	st.msg_pool_bytes_pinned = pst.bytes_pinned;
	st.msg_pool_pin_failures = pst.pin_failures;
	st.msg_pool_active = pst.active != 0;
	Fos__Response resp = FOS__RESPONSE__INIT;
	resp.id = s->req_id;
	resp.result_case = FOS__RESPONSE__RESULT_STATS;
	resp.stats = &st;
	nng_msg *m = fosd_build_reply(&resp, NULL, NULL);
	free(snap);
	return m;
}

nng_msg *fosd_op_list_weights(fosd_server *srv, fosd_slot *s, int *code)
{
	fosd_weight_info *infos;
	size_t n;
	*code = 0;
	if (fosd_wcache_list_in(&srv->wc, s->tenant, &infos, &n))
		return NULL;
	Fos__WeightInfo *wi = calloc(n ? n : 1, sizeof *wi);
	Fos__WeightConfig *wc = calloc(n ? n : 1, sizeof *wc);
	Fos__WeightInfo **wp = calloc(n ? n : 1, sizeof *wp);
	nng_msg *m = NULL;
	if (wi && wc && wp) {
		for (size_t i = 0; i < n; i++) {
			fosd_weight_info_msg(&infos[i], &wi[i], &wc[i]);
			wp[i] = &wi[i];
		}
		Fos__ListWeightsResult lr = FOS__LIST_WEIGHTS_RESULT__INIT;
		lr.n_weights = n;
		lr.weights = wp;
		Fos__Response resp = FOS__RESPONSE__INIT;
		resp.id = s->req_id;
		resp.result_case = FOS__RESPONSE__RESULT_LIST_WEIGHTS;
		resp.list_weights = &lr;
		m = fosd_build_reply(&resp, NULL, NULL);
	}
	free(wi);
	free(wc);
	free(wp);
	free(infos);
	return m;
}
