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

/* A stage of a PutWeight on a device it leaves (placement.c): its copy there is dropped, and the
 * reply is the one its last put stage made (stage_reply, which the runner sends). */
static int put_leave(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	char msg[FOSD_MSG_MAX];
	if (!fosd_wcache_drop_in(&c->dev->wc, s->tenant, s->args.u.put.name, msg, sizeof msg))
		fosd_info("cache: weight '%s' left device %d", s->args.u.put.name, c->dev->index);
	if (!s->stage_reply)
		return fosd_fail(c, FOS__CODE__INTERNAL, "put_weight: no reply from its put stages");
	return 0; /* no result of its own: the runner answers with stage_reply */
}

/* A put stage failed after others succeeded: says where the new version already is. */
static int put_stage_fail(fosd_opctx *c, int rc, const char *what)
{
	fosd_opreq *s = c->s;
	if (!s->stages_done)
		return fosd_fail(c, rc, "%s", what);
	return fosd_fail(c, rc, "device %d: %s (device%s before it in put_weight's placement already hold the new version)",
			 c->dev->index, what, s->stages_done == 1 ? "" : "s");
}

int fosd_put_cache(fosd_opctx *c, const fosd_put_args *a, const Fos__PutWeightRequest *r, fosd_weight **out,
		   int *staged, char *msg, size_t msgsz)
{
	fosd_opreq *s = c->s;
	fos_err e;
	int64_t n = a->w.shape[0], k = a->w.shape[1];
	int uses;
	*staged = 1;
	int rc = put_uses(r, !a->keep_master, &uses, msg, msgsz);
	if (rc)
		return rc;
	*staged = 0;
	fosd_weight *old = fosd_wcache_find_in(&c->dev->wc, s->tenant, a->name);
	if (old && old->version == a->version) {
		snprintf(msg, msgsz, "weight '%s' version %llu is already cached", a->name, (unsigned long long)a->version);
		return FOS__CODE__ALREADY_EXISTS;
	}
	*staged = 1;
	rc = fosd_wcache_reserve_in(&c->dev->wc, s->tenant, fos_qweight_bytes_for(n, k, uses, NULL), old, msg, msgsz);
	if (rc)
		return rc;
	*staged = 0;
	fosd_weight *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(msg, msgsz, "out of memory");
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	snprintf(w->name, sizeof w->name, "%s", a->name);
	w->version = a->version;
	w->pinned = a->pin;
	w->owner = s->tenant;
	void *wd = fosd_dev_from(c, &a->w, &e);
	if (!wd) {
		free(w);
		snprintf(msg, msgsz, "%s", e.msg);
		return fosd_code_of_rc(e.rc);
	}
	rc = fos_qweight_make_uses(c->be, wd, n, k, &a->opts, uses, &w->qw, &e);
	fosd_dev_free(c, wd);
	if (!rc && fosd_mark_made(c, &w->made_ev, &w->made_lane, &e)) { /* other lanes wait for it */
		fos_qweight_free(c->be, &w->qw);
		rc = e.rc ? e.rc : FOS_EINTERNAL;
	}
	if (rc) {
		free(w);
		snprintf(msg, msgsz, "quantizing weight '%s': %s", a->name, e.msg);
		return fosd_code_of_rc(rc);
	}
	fosd_wcache_insert(&c->dev->wc, w);
	char us[80];
	fosd_info("cache: put weight '%s'%s%s v%llu (%lld x %lld, for %s, four_over_six '%s', %zu bytes%s) on device %d",
		  w->name, s->tenant ? " of " : "", s->tenant ? s->tenant->name : "", (unsigned long long)w->version,
		  (long long)n, (long long)k, fos_uses_str(w->qw.uses, us, sizeof us),
		  fos_scope_name(w->qw.opts.four_over_six), w->bytes, w->pinned ? ", pinned" : "", c->dev->index);
	*out = w;
	return 0;
}

int fosd_op_put_weight(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	fosd_put_args *a = &s->args.u.put;
	char msg[FOSD_MSG_MAX];
	if (s->placed && !(s->placed & (1u << c->dev->index)))
		return put_leave(c);
	fosd_weight *w = NULL;
	int staged;
	int rc = fosd_put_cache(c, a, s->rq ? s->rq->put_weight : NULL, &w, &staged, msg, sizeof msg);
	if (rc)
		return staged ? put_stage_fail(c, rc, msg) : fosd_fail(c, rc, "%s", msg);

	fosd_weight_info info;
	fosd_weight_info_of(w, fosd_now_ns(), &info);
	Fos__WeightInfo wi;
	Fos__WeightConfig wc;
	fosd_weight_info_msg(&info, &wi, &wc);
	uint32_t devs[FOSD_MAX_DEVICES];
	size_t nd = 0;
	for (int i = 0; i < c->srv->n_devs; i++)
		if (s->placed >> i & 1 || (!s->placed && i == c->dev->index))
			devs[nd++] = (uint32_t)i;
	wi.n_devices = nd;
	wi.devices = devs;
	Fos__PutWeightResult pr = FOS__PUT_WEIGHT_RESULT__INIT;
	pr.info = &wi;
	return fosd_result(c, FOS__RESPONSE__RESULT_PUT_WEIGHT, &pr, NULL);
}

int fosd_op_drop_weight(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	char msg[FOSD_MSG_MAX];
	int rc = fosd_wcache_drop_in(&c->dev->wc, s->tenant, s->args.u.drop_name, msg, sizeof msg);
	if (rc == FOS__CODE__NOT_FOUND && s->stages_done) /* a copy of several, dropped meanwhile */
		rc = 0;
	if (rc)
		return fosd_fail(c, rc, "%s", msg);
	fosd_info("cache: dropped weight '%s'%s%s from device %d", s->args.u.drop_name, s->tenant ? " of " : "",
		  s->tenant ? s->tenant->name : "", c->dev->index);
	Fos__DropWeightResult dr = FOS__DROP_WEIGHT_RESULT__INIT;
	return fosd_result(c, FOS__RESPONSE__RESULT_DROP_WEIGHT, &dr, NULL);
}
