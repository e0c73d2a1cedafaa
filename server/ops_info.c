/* ops_info.c: the read-only operations answered without the executor: Health, Stats and
 * ListWeights. They read the caches (and the message pool's counters) under their own locks,
 * never the backend. */
#include "msg_pool.h"
#include "ops.h"
#include "util.h"

#include <stdio.h>
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
	st.connections = (uint64_t)atomic_load(&srv->pipes);
	st.connections_dropped = atomic_load(&srv->conns.dropped);
	st.connection_refusals = atomic_load(&srv->conns.refused);
	st.connections_rejected = atomic_load(&srv->conns.rejected);
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

/* ---- ListWeights: pages in name order ----------------------------------------------------- */

#define LIST_PAGE_DEFAULT 1000
#define LIST_PAGE_MAX 10000
/* A page token is this prefix and the last name of the page before (PROTOCOL.md: opaque to
 * clients). The next page starts after that name, so weights put or dropped between two pages
 * make the listing neither skip nor repeat any other. */
#define LIST_TOKEN_PREFIX "w1:"

/* The bytes a page's WeightInfo entries may take: the reply must fit in max_message_bytes and in
 * the largest header a peer accepts (FOSW_MAX_HEADER), with room for the rest of the Response. */
static size_t list_page_budget(const fosd_server *srv)
{
	uint64_t lim = srv->cfg->max_message_bytes < FOSW_MAX_HEADER ? srv->cfg->max_message_bytes : FOSW_MAX_HEADER;
	return (size_t)(lim - 1024); /* max_message_bytes is at least 4096 (config.c) */
}

nng_msg *fosd_op_list_weights(fosd_server *srv, fosd_slot *s, int *code)
{
	const Fos__ListWeightsRequest *rq = s->rq ? s->rq->list_weights : NULL;
	const char *token = rq && rq->page_token ? rq->page_token : "";
	const char *after = "";
	char why[FOSD_MSG_MAX];
	*code = 0;
	if (token[0]) {
		size_t pl = strlen(LIST_TOKEN_PREFIX);
		if (strncmp(token, LIST_TOKEN_PREFIX, pl) || fosd_check_name(token + pl, "its name", why, sizeof why))
			return fosd_fail(s, code, FOS__CODE__INVALID_ARGUMENT,
					 "page_token (%zu bytes) is not a next_page_token of ListWeights; pass \"\" for "
					 "the first page",
					 strlen(token));
		after = token + pl;
	}
	size_t max = rq && rq->page_size ? rq->page_size : LIST_PAGE_DEFAULT;
	if (max > LIST_PAGE_MAX)
		max = LIST_PAGE_MAX;
	fosd_weight_info *infos;
	size_t n;
	int more;
	if (fosd_wcache_list_page(&srv->wc, s->tenant, after, max, &infos, &n, &more))
		return NULL;
	Fos__WeightInfo *wi = calloc(n ? n : 1, sizeof *wi);
	Fos__WeightConfig *wc = calloc(n ? n : 1, sizeof *wc);
	Fos__WeightInfo **wp = calloc(n ? n : 1, sizeof *wp);
	char next[sizeof LIST_TOKEN_PREFIX + FOSD_NAME_MAX];
	nng_msg *m = NULL;
	if (wi && wc && wp) {
		/* as many as fit: a page never outgrows the message limit, however long the names */
		size_t budget = list_page_budget(srv), used = 0, k = 0;
		for (; k < n; k++) {
			fosd_weight_info_msg(&infos[k], &wi[k], &wc[k]);
			size_t b = fos__weight_info__get_packed_size(&wi[k]) + 4; /* + tag and length */
			if (k && used + b > budget)
				break;
			used += b;
			wp[k] = &wi[k];
		}
		Fos__ListWeightsResult lr = FOS__LIST_WEIGHTS_RESULT__INIT;
		lr.n_weights = k;
		lr.weights = wp;
		next[0] = 0;
		if (k && (more || k < n))
			snprintf(next, sizeof next, "%s%s", LIST_TOKEN_PREFIX, infos[k - 1].name);
		lr.next_page_token = next;
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
