/* ops_weights.c: PutWeight (quantize once into the cache, keeping what the weight's uses need,
 * within the budget and its tenant's quota) and DropWeight. */
#include "ops.h"
#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The FOS_USE_* bits of a PutWeight: its uses (each one listed at most once), or without any,
 * all of them (all but high_precision with drop_master). Returns 0, or INVALID_ARGUMENT with msg. */
static int put_uses(const Fos__PutWeightRequest *r, int drop_master, int *uses, char *msg, size_t msgsz)
{
	if (!r || !r->n_uses) {
		*uses = drop_master ? FOS_USES_ALL & ~FOS_USE_HIGH_PRECISION : FOS_USES_ALL;
		return 0;
	}
	int u = 0;
	for (size_t i = 0; i < r->n_uses; i++) {
		int v = (int)r->uses[i];
		if (v < FOS__WEIGHT_USE__WEIGHT_USE_FORWARD || v > FOS__WEIGHT_USE__WEIGHT_USE_DEQUANTIZED) {
			snprintf(msg, msgsz, "uses[%zu] is %d: give forward, quantized, high_precision or dequantized", i, v);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		int bit = 1 << (v - 1); /* the wire's order is FOS_USE_*'s */
		if (u & bit) {
			snprintf(msg, msgsz, "uses lists '%s' twice", fos_use_name(bit));
			return FOS__CODE__INVALID_ARGUMENT;
		}
		u |= bit;
	}
	if (drop_master && (u & FOS_USE_HIGH_PRECISION)) {
		snprintf(msg, msgsz, "uses has high_precision, which keeps the bf16 master, but drop_master is set");
		return FOS__CODE__INVALID_ARGUMENT;
	}
	*uses = u;
	return 0;
}

nng_msg *fosd_op_put_weight(fosd_opctx *c, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
	fosd_put_args *a = &s->args.u.put;
	char msg[FOSD_MSG_MAX];
	fos_err e;
	int64_t n = a->w.shape[0], k = a->w.shape[1];
	int uses;
	int rc = put_uses(s->rq ? s->rq->put_weight : NULL, !a->keep_master, &uses, msg, sizeof msg);
	if (rc)
		return fosd_fail(s, code, rc, "%s", msg);
	fosd_weight *old = fosd_wcache_find_in(&srv->wc, s->tenant, a->name);
	if (old && old->version == a->version)
		return fosd_fail(s, code, FOS__CODE__ALREADY_EXISTS, "weight '%s' version %llu is already cached",
				 a->name, (unsigned long long)a->version);
	rc = fosd_wcache_reserve_in(&srv->wc, s->tenant, fos_qweight_bytes_for(n, k, uses, NULL), old, msg, sizeof msg);
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
	rc = fos_qweight_make_uses(c->be, wd, n, k, &a->opts, uses, &w->qw, &e);
	fosd_dev_free(c, wd);
	if (rc) {
		free(w);
		return fosd_fail(s, code, fosd_code_of_rc(rc), "quantizing weight '%s': %s", a->name, e.msg);
	}
	fosd_wcache_insert(&srv->wc, w);
	char us[80];
	fosd_info("cache: put weight '%s'%s%s v%llu (%lld x %lld, for %s, %zu bytes%s)", w->name, s->tenant ? " of " : "",
		  s->tenant ? s->tenant->name : "", (unsigned long long)w->version, (long long)n, (long long)k,
		  fos_uses_str(w->qw.uses, us, sizeof us), w->bytes, w->pinned ? ", pinned" : "");

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
