/* ops_info.c: the read-only operations answered without the executor: Health, Stats and
 * ListWeights. They read the caches (and the message pool's counters) under their own locks,
 * never the backend. */
#include "ops.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos_version.h"

int fosd_op_health(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	fos_backend *be0 = srv->res[0]->be;
	Fos__HealthResult h = FOS__HEALTH_RESULT__INIT;
	h.version = (char *)FOS_VERSION;
	h.backend = (char *)be0->name;
	h.device = be0->device;
	h.uptime_ms = (fosd_now_ns() - srv->start_ns) / 1000000u;
	h.draining = atomic_load(&srv->draining) != 0;
	h.max_message_bytes = srv->cfg->max_message_bytes;
	if (be0->has_uuid) { /* device tensors must be on one of fosd's GPUs */
		h.gpu_uuid.data = (uint8_t *)be0->uuid;
		h.gpu_uuid.len = sizeof be0->uuid;
	}
	Fos__DeviceInfo di[FOSD_MAX_DEVICES], *dp[FOSD_MAX_DEVICES];
	for (int i = 0; i < srv->n_devs; i++) {
		fos_backend *be = srv->res[i]->be;
		fos__device_info__init(&di[i]);
		di[i].index = (uint32_t)i;
		di[i].backend = (char *)be->name;
		di[i].device = srv->res[i]->name;
		if (be->has_uuid) {
			di[i].gpu_uuid.data = be->uuid;
			di[i].gpu_uuid.len = sizeof be->uuid;
		}
		dp[i] = &di[i];
	}
	h.n_devices = (size_t)srv->n_devs;
	h.devices = dp;
	h.mps = (Fos__HealthResult__Mps)srv->mps; /* the same numbers (fos_wire_enums.h) */
	return fosd_result(c, FOS__RESPONSE__RESULT_HEALTH, &h, NULL);
}

int fosd_op_stats(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	/* one snapshot, the same /metrics shows, taken by the hook the server was made with
	 * (observe/stats.c's fosd_stats_result) */
	Fos__StatsResult *st = NULL;
	void *own = srv->stats_result ? srv->stats_result(srv, &st) : NULL;
	if (!own)
		return fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory building the reply");
	int rc = fosd_result(c, FOS__RESPONSE__RESULT_STATS, st, NULL);
	free(own);
	return rc;
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
static size_t list_page_budget(const fosd_opsrv *srv)
{
	uint64_t lim = srv->cfg->max_message_bytes < FOSW_MAX_HEADER ? srv->cfg->max_message_bytes : FOSW_MAX_HEADER;
	return (size_t)(lim - 1024); /* max_message_bytes is at least 4096 (config.c) */
}

/* One page of owner's weights over every device, in name order: a name once, with the devices
 * holding it in *devs (bit i: device i) and the first holder's entry (its bytes: one copy's; uses
 * summed, idle_ms the least over the copies). *more: names after the page exist. */
static int list_merged(fosd_opsrv *srv, const fosd_tenant *owner, const char *after, size_t max,
		       fosd_weight_info **out, uint32_t **devs, size_t *count, int *more)
{
	fosd_weight_info *per[FOSD_MAX_DEVICES] = {0};
	size_t pn[FOSD_MAX_DEVICES] = {0}, at[FOSD_MAX_DEVICES] = {0};
	int rc = 0;
	*more = 0;
	*out = NULL;
	*devs = NULL;
	*count = 0;
	for (int i = 0; i < srv->n_devs && !rc; i++) {
		int m = 0;
		rc = fosd_wcache_list_page(&srv->res[i]->wc, owner, after, max, &per[i], &pn[i], &m);
		*more |= m;
	}
	fosd_weight_info *a = rc ? NULL : calloc(max ? max : 1, sizeof *a);
	uint32_t *d = rc ? NULL : calloc(max ? max : 1, sizeof *d);
	if (!a || !d)
		rc = -1;
	size_t k = 0;
	while (!rc) {
		const char *name = NULL; /* the smallest name not yet taken */
		for (int i = 0; i < srv->n_devs; i++)
			if (at[i] < pn[i] && (!name || strcmp(per[i][at[i]].name, name) < 0))
				name = per[i][at[i]].name;
		if (!name)
			break;
		if (k == max) {
			*more = 1;
			break;
		}
		int first = 1;
		for (int i = 0; i < srv->n_devs; i++) {
			if (at[i] >= pn[i] || strcmp(per[i][at[i]].name, name))
				continue;
			const fosd_weight_info *w = &per[i][at[i]];
			if (first) {
				a[k] = *w;
				first = 0;
			} else {
				a[k].uses += w->uses;
				if (w->idle_ms < a[k].idle_ms)
					a[k].idle_ms = w->idle_ms;
			}
			d[k] |= 1u << i;
		}
		for (int i = 0; i < srv->n_devs; i++) /* past the name on every device */
			if (at[i] < pn[i] && (d[k] >> i & 1))
				at[i]++;
		k++;
	}
	for (int i = 0; i < srv->n_devs; i++)
		free(per[i]);
	if (rc) {
		free(a);
		free(d);
		return -1;
	}
	*out = a;
	*devs = d;
	*count = k;
	return 0;
}

int fosd_op_list_weights(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	fosd_opreq *s = c->s;
	const Fos__ListWeightsRequest *rq = s->rq ? s->rq->list_weights : NULL;
	const char *token = rq && rq->page_token ? rq->page_token : "";
	const char *after = "";
	char why[FOSD_MSG_MAX];
	if (token[0]) {
		size_t pl = strlen(LIST_TOKEN_PREFIX);
		if (strncmp(token, LIST_TOKEN_PREFIX, pl) || fosd_check_name(token + pl, "its name", why, sizeof why))
			return fosd_fail(c, FOS__CODE__INVALID_ARGUMENT,
					 "page_token (%zu bytes) is not a next_page_token of ListWeights; pass \"\" for "
					 "the first page",
					 strlen(token));
		after = token + pl;
	}
	size_t max = rq && rq->page_size ? rq->page_size : LIST_PAGE_DEFAULT;
	if (max > LIST_PAGE_MAX)
		max = LIST_PAGE_MAX;
	fosd_weight_info *infos;
	uint32_t *devs;
	size_t n;
	int more;
	if (list_merged(srv, s->tenant, after, max, &infos, &devs, &n, &more))
		return fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory building the reply");
	Fos__WeightInfo *wi = calloc(n ? n : 1, sizeof *wi);
	Fos__WeightConfig *wc = calloc(n ? n : 1, sizeof *wc);
	Fos__WeightInfo **wp = calloc(n ? n : 1, sizeof *wp);
	uint32_t *dl = calloc((n ? n : 1) * FOSD_MAX_DEVICES, sizeof *dl);
	char next[sizeof LIST_TOKEN_PREFIX + FOSD_NAME_MAX];
	int rc = fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory building the reply");
	if (wi && wc && wp && dl) {
		/* as many as fit: a page never outgrows the message limit, however long the names */
		size_t budget = list_page_budget(srv), used = 0, k = 0;
		for (; k < n; k++) {
			fosd_weight_info_msg(&infos[k], &wi[k], &wc[k]);
			size_t nd = 0;
			for (int i = 0; i < srv->n_devs; i++)
				if (devs[k] >> i & 1)
					dl[k * FOSD_MAX_DEVICES + nd++] = (uint32_t)i;
			wi[k].n_devices = nd;
			wi[k].devices = &dl[k * FOSD_MAX_DEVICES];
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
		rc = fosd_result(c, FOS__RESPONSE__RESULT_LIST_WEIGHTS, &lr, NULL);
	}
	free(wi);
	free(wc);
	free(wp);
	free(dl);
	free(infos);
	free(devs);
	return rc;
}
