/* ops_weights.c: PutWeight (quantize once into the cache, within the budget) and DropWeight. */
#include "ops.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What fos_qweight_make will allocate, so the budget is made before the memory is taken. */
static uint64_t put_estimate(int64_t n, int64_t k, int keep_master, int want_col)
{
	uint64_t nk = (uint64_t)n * (uint64_t)k;
	uint64_t b = fos_qtensor_bytes(n, k, 0) + nk * 2;
	if (keep_master)
		b += nk * 2;
	if (want_col)
		b += fos_qtensor_bytes(k, n, 0) + nk * 2;
	return b;
}

nng_msg *fosd_op_put_weight(fosd_opctx *c, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
	fosd_put_args *a = &s->args.u.put;
	char msg[FOSD_MSG_MAX];
	fos_err e;
	int64_t n = a->w.shape[0], k = a->w.shape[1];
	fosd_weight *old = fosd_wcache_find_in(&srv->wc, s->tenant, a->name);
	if (old && old->version == a->version)
		return fosd_fail(s, code, FOS__CODE__ALREADY_EXISTS, "weight '%s' version %llu is already cached",
				 a->name, (unsigned long long)a->version);
	int rc = fosd_wcache_reserve_in(&srv->wc, s->tenant, put_estimate(n, k, a->keep_master, a->want_col), old, msg, sizeof msg);
	if (rc)
		return fosd_fail(s, code, rc, "%s", msg);
	fosd_weight *w = calloc(1, sizeof *w);
	if (!w)
		return fosd_fail(s, code, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory");
	snprintf(w->name, sizeof w->name, "%s", a->name);
	w->version = a->version;
	w->pinned = a->pin;
	w->owner = s->tenant;
	void *wd = fosd_dev_from(c, &a->w, &e);
	if (!wd) {
		free(w);
		return fosd_fail_be(s, code, e.rc, NULL, &e);
	}
	rc = fos_qweight_make(c->be, wd, n, k, &a->opts, a->keep_master, a->want_col, &w->qw, &e);
	fosd_dev_free(c, wd);
	if (rc) {
		free(w);
		return fosd_fail(s, code, fosd_code_of_rc(rc), "quantizing weight '%s': %s", a->name, e.msg);
	}
	fosd_wcache_insert(&srv->wc, w);
	fosd_info("cache: put weight '%s'%s%s v%llu (%lld x %lld, %zu bytes%s)", w->name, s->tenant ? " of " : "",
		  s->tenant ? s->tenant->name : "", (unsigned long long)w->version,
		  (long long)n, (long long)k, w->bytes, w->pinned ? ", pinned" : "");

	fosd_weight_info info;
	fosd_weight_info_of(w, fosd_now_ns(), &info);
	Fos__WeightInfo wi;
	Fos__WeightConfig wc;
	fosd_weight_info_msg(&info, &wi, &wc);
	Fos__PutWeightResult pr = FOS__PUT_WEIGHT_RESULT__INIT;
	pr.info = &wi;
	return fosd_result_reply(c, FOS__RESPONSE__RESULT_PUT_WEIGHT, &pr, NULL, code);
}

nng_msg *fosd_op_drop_weight(fosd_opctx *c, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
	char msg[FOSD_MSG_MAX];
	int rc = fosd_wcache_drop_in(&srv->wc, s->tenant, s->args.u.drop_name, msg, sizeof msg);
	if (rc)
		return fosd_fail(s, code, rc, "%s", msg);
	fosd_info("cache: dropped weight '%s'%s%s", s->args.u.drop_name, s->tenant ? " of " : "",
		  s->tenant ? s->tenant->name : "");
	Fos__DropWeightResult dr = FOS__DROP_WEIGHT_RESULT__INIT;
	return fosd_result_reply(c, FOS__RESPONSE__RESULT_DROP_WEIGHT, &dr, NULL, code);
}
