/* ops_info.c: the read-only operations answered without the executor: Health, Stats and
 * ListWeights. They read the caches (and the message pool's counters) under their own locks,
 * never the backend. */
#include "msg_pool.h"
#include "ops.h"
#include "stats.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos_version.h"

nng_msg *fosd_op_health(fosd_opctx *c, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
	*code = 0;
	Fos__Response resp = FOS__RESPONSE__INIT;
	Fos__HealthResult h = FOS__HEALTH_RESULT__INIT;
	h.version = (char *)FOS_VERSION;
	h.backend = (char *)srv->be->name;
	h.device = srv->be->device;
	h.uptime_ms = (fosd_now_ns() - srv->start_ns) / 1000000u;
	h.draining = atomic_load(&srv->draining) != 0;
	h.max_message_bytes = srv->cfg->max_message_bytes;
	if (srv->be->has_uuid) { /* device tensors must be on this GPU */
		h.gpu_uuid.data = srv->be->uuid;
		h.gpu_uuid.len = sizeof srv->be->uuid;
	}
	resp.id = s->req_id;
	resp.result_case = FOS__RESPONSE__RESULT_HEALTH;
	resp.health = &h;
	return fosd_build_reply(&resp, NULL, NULL);
}

nng_msg *fosd_op_stats(fosd_server *srv, fosd_slot *s)
{
	/* one snapshot, the same /metrics shows (stats.h) */
	fosd_stats *snap = malloc(sizeof *snap);
	fosd_stats_pb *pb = malloc(sizeof *pb);
	nng_msg *m = NULL;
	if (snap && pb) {
		fosd_stats_take(srv, snap);
		fosd_stats_to_pb(snap, pb);
		Fos__Response resp = FOS__RESPONSE__INIT;
		resp.id = s->req_id;
		resp.result_case = FOS__RESPONSE__RESULT_STATS;
		resp.stats = &pb->st;
		m = fosd_build_reply(&resp, NULL, NULL);
	}
	free(pb);
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

nng_msg *fosd_op_list_weights(fosd_opctx *c, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
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
