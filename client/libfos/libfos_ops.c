/* libfos_ops.c: libfos's operations: health (and its devices), stats, forward / backward (with the
 * recompute of an expired context), release, quantize, dequantize and the one-shot linear (the
 * weight cache's: libfos_weights.c), and one op's call they share (fosc_op_call). Each fills a
 * fos.Request, calls fosc_call (through call_result) and copies the reply's results out; an
 * output libfos allocated is freed again when the call fails after all. */
#include "libfos_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fosc_copy_str(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static void outset_add(outset *o, fos_tensor *t)
{
	o->t[o->n] = t;
	o->allocated[o->n] = t && !t->data;
	o->n++;
}

static int outset_fail(outset *o, int code)
{
	for (int i = 0; i < o->n; i++)
		if (o->t[i] && o->allocated[i] && o->t[i]->data) {
			free(o->t[i]->data);
			o->t[i]->data = NULL;
			o->t[i]->size = 0;
		}
	return code;
}

/* fosc_call, then the reply's result, which must be of case want. Returns that result (the oneof
 * member; *code OK, r to free with fosc_reply_free), or NULL with *code the call's failure, or
 * DATA_LOSS "the reply has no <what>" (r freed). */
static const void *call_result(fos_client *c, Fos__Request *rq, fosc_in *ins, int nin,
			       Fos__Response__ResultCase want, const char *what, fosc_reply *r, int *code,
			       fos_status *st)
{
	*code = fosc_call(c, rq, ins, nin, r, st);
	if (*code)
		return NULL;
	/* The oneof's members are all struct pointers in one union (same representation, C11 6.2.5):
	 * reading it through any member gives the one of the case set. */
	const void *res = r->resp->result_case == want ? (const void *)r->resp->health : NULL;
	if (!res) {
		fosc_reply_free(r);
		*code = fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no %s", what);
	}
	return res;
}

/* call_result for oc, after asking for its outputs in regions or device memory; fills rp. */
const void *fosc_op_call(fos_client *c, Fos__Request *rq, const opcall *oc, opreply *rp, fos_status *st)
{
	fosc_shm_outs so;
	rp->os = (outset){{0}, {0}, 0};
	memset(&rp->r, 0, sizeof rp->r);
	rp->async = oc->async != NULL;
	if (oc->async) { /* returns before fosd has read it (libfos_async.c) */
		rp->code = fosc_async_call(c, rq, oc, st);
		return NULL;
	}
	/* after the handle's asynchronous calls; an unreported failure of theirs is this call's (before
	 * the re-put below could mistake it for its own NOT_FOUND) */
	if ((rp->code = fosc_async_drain(c, st)))
		return NULL;
	if (oc->nout) {
		fosc_shm_outputs(c, rq, &so, oc->names, oc->outs, oc->nout);
		if ((rp->code = fosc_cuda_outputs(c, rq, &so, oc->names, oc->outs, oc->nout, st)))
			return NULL;
	}
	const void *res = call_result(c, rq, oc->ins, oc->nin, oc->want, oc->what, &rp->r, &rp->code, st);
	if (!res && oc->reput && rp->code == FOS_CODE_NOT_FOUND &&
	    fosc_reput_any(c, oc->reput->name, oc->reput->version) == FOS_CODE_OK)
		res = call_result(c, rq, oc->ins, oc->nin, oc->want, oc->what, &rp->r, &rp->code, st);
	if (res)
		for (int i = 0; i < oc->nout; i++)
			outset_add(&rp->os, oc->outs[i]);
	return res;
}

const Fos__StatsResult *fosc_stats_call(fos_client *c, fosc_reply *r, int *code, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_STATS;
	rq.stats = &sr;
	return call_result(c, &rq, NULL, 0, FOS__RESPONSE__RESULT_STATS, "stats result", r, code, st);
}

int fos_health(fos_client *c, fos_health_info *out, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &h;
	const opcall oc = {NULL, 0, NULL, NULL, 0, FOS__RESPONSE__RESULT_HEALTH, "health result", NULL, NULL};
	opreply rp;
	const Fos__HealthResult *hr = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!hr)
		return rp.code;
	memset(out, 0, sizeof *out);
	fosc_copy_str(out->version, sizeof out->version, hr->version);
	fosc_copy_str(out->backend, sizeof out->backend, hr->backend);
	fosc_copy_str(out->device, sizeof out->device, hr->device);
	out->uptime_ms = hr->uptime_ms;
	out->max_message_bytes = hr->max_message_bytes;
	out->draining = hr->draining;
	fosc_cuda_health(c, hr);
	fosc_reply_free(&rp.r);
	return FOS_CODE_OK;
}

int fos_health_devices(fos_client *c, fos_device_info *out, size_t cap, size_t *n, fos_status *st)
{
	if (!n)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "fos_health_devices: n is NULL");
	*n = 0;
	if (cap && !out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "fos_health_devices: out is NULL with cap %zu", cap);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &h;
	const opcall oc = {NULL, 0, NULL, NULL, 0, FOS__RESPONSE__RESULT_HEALTH, "health result", NULL, NULL};
	opreply rp;
	const Fos__HealthResult *hr = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!hr)
		return rp.code;
	fosc_cuda_health(c, hr);
	/* a fosd that predates devices serves one: the top-level fields */
	size_t total = hr->n_devices ? hr->n_devices : 1;
	for (size_t i = 0; i < total && i < cap; i++) {
		const Fos__DeviceInfo *d = hr->n_devices ? hr->devices[i] : NULL;
		fos_device_info *o = &out[i];
		memset(o, 0, sizeof *o);
		o->index = d ? d->index : 0;
		fosc_copy_str(o->backend, sizeof o->backend, d ? d->backend : hr->backend);
		fosc_copy_str(o->device, sizeof o->device, d ? d->device : hr->device);
		const ProtobufCBinaryData *u = d ? &d->gpu_uuid : &hr->gpu_uuid;
		if (u->len == 16) {
			memcpy(o->gpu_uuid, u->data, 16);
			o->has_gpu_uuid = 1;
		}
	}
	fosc_reply_free(&rp.r);
	*n = total;
	if (cap < total && (cap || out))
		return fosc_status(st, FOS_CODE_OUT_OF_RANGE, "fosd serves %zu devices, room for %zu", total, cap);
	return fosc_status(st, FOS_CODE_OK, "%zu device%s", total, total == 1 ? "" : "s");
}

/* One LatencyStats (may be absent: all stay 0) into fos_op_stats' fields PRE_count, PRE_mean_us,
 * PRE_p50_us ... PRE_max_us. */
#define STATS_LATENCY_FROM(o, pre, l)                                                                    \
	do {                                                                                             \
		const Fos__LatencyStats *l_ = (l);                                                       \
		if (l_) {                                                                                \
			(o)->pre##_count = l_->count;                                                    \
			(o)->pre##_mean_us = l_->mean_us;                                                \
			(o)->pre##_p50_us = l_->p50_us;                                                  \
			(o)->pre##_p90_us = l_->p90_us;                                                  \
			(o)->pre##_p99_us = l_->p99_us;                                                  \
			(o)->pre##_p999_us = l_->p999_us;                                                \
			(o)->pre##_max_us = l_->max_us;                                                  \
		}                                                                                        \
	} while (0)

int fos_stats(fos_client *c, fos_stats_info *out, fos_status *st)
{
	fosc_reply r;
	int code;
	const Fos__StatsResult *s = fosc_stats_call(c, &r, &code, st);
	if (!s)
		return code;
	memset(out, 0, sizeof *out);
	out->uptime_ms = s->uptime_ms;
	fosc_copy_str(out->backend, sizeof out->backend, s->backend);
	fosc_copy_str(out->device, sizeof out->device, s->device);
	for (size_t i = 0; i < s->n_ops && out->n_ops < FOS_STATS_MAX_OPS; i++) {
		const Fos__OpStats *os = s->ops[i];
		fos_op_stats *o = &out->ops[out->n_ops++];
		fosc_copy_str(o->op, sizeof o->op, os->op);
		o->requests = os->requests;
		for (size_t j = 0; j < os->n_codes; j++)
			if (os->codes[j]->code >= 0 && os->codes[j]->code < FOS_STATS_CODES)
				o->by_code[os->codes[j]->code] += os->codes[j]->count;
		STATS_LATENCY_FROM(o, lat, os->latency);
		STATS_LATENCY_FROM(o, queue, os->queue);
		STATS_LATENCY_FROM(o, run, os->run);
		o->ran_at_once = os->ran_at_once;
		o->bytes_in = os->bytes_in;
		o->bytes_out = os->bytes_out;
	}
	out->cache_bytes = s->cache_bytes;
	out->cache_budget = s->cache_budget;
	out->cache_entries = s->cache_entries;
	out->cache_hits = s->cache_hits;
	out->cache_misses = s->cache_misses;
	out->cache_evictions = s->cache_evictions;
	out->contexts = s->contexts;
	out->context_bytes = s->context_bytes;
	out->context_budget = s->context_budget;
	out->contexts_expired = s->contexts_expired;
	out->contexts_evicted = s->contexts_evicted;
	out->inflight = s->inflight;
	out->queued = s->queued;
	out->duplicates = s->duplicates;
	out->bad_messages = s->bad_messages;
	out->workers = s->workers;
	out->msg_pool_taken = s->msg_pool_taken;
	out->msg_pool_reused = s->msg_pool_reused;
	out->msg_pool_mapped_new = s->msg_pool_mapped_new;
	out->msg_pool_bytes_free = s->msg_pool_bytes_free;
	out->msg_pool_bytes_used = s->msg_pool_bytes_used;
	out->msg_pool_bytes_pinned = s->msg_pool_bytes_pinned;
	out->msg_pool_pin_failures = s->msg_pool_pin_failures;
	out->msg_pool_active = s->msg_pool_active;
	out->channels = s->channels;
	out->channel_requests = s->channel_requests;
	out->connections = s->connections;
	out->connections_dropped = s->connections_dropped;
	out->connection_refusals = s->connection_refusals;
	out->connections_rejected = s->connections_rejected;
	fosc_reply_free(&r);
	return FOS_CODE_OK;
}

/* ---- forward / backward --------------------------------------------------------------------- */

/* Fills rq as a Forward of x (and bias) through weight with o's options; tx and tb are the wire
 * tensors fosc_call fills from x and bias. */
static void forward_request(Fos__Request *rq, Fos__ForwardRequest *fr, const char *weight, Fos__Tensor *tx,
			    Fos__Tensor *tb, const fos_tensor *bias, const fos_forward_opts *o)
{
	rq->op_case = FOS__REQUEST__OP_FORWARD;
	rq->forward = fr;
	fr->weight = (char *)weight;
	fr->x = tx;
	fr->bias = bias ? tb : NULL;
	if (o) {
		fr->weight_version = o->weight_version;
		fr->override = o->override;
		fr->row_scaled = o->row_scaled;
		fr->save_context = o->save_context; /* with expect: refused by fosd, with its message */
		fr->four_over_six = (Fos__FourOverSix)o->four_over_six;
	}
}


int fosc_forward_call(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		      const fos_forward_opts *o, int skip_output, fos_tensor *y, fos_context *ctx,
		      Fos__PutWeightRequest *put, const fos_tensor *w, fos_status *st)
{
	if (!weight)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	if (o && o->save_context && !ctx)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "save_context needs a fos_context to fill");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor tx, tb;
	forward_request(&rq, &fr, weight, &tx, &tb, bias, o);
	fr.skip_output = skip_output;
	fosc_in ins[3] = {{&tx, x, "x"}, {&tb, bias, "bias"}, {NULL, NULL, NULL}};
	int nin = bias ? 2 : 1;
	if (put) { /* the put's W (its Fos__Tensor in put->w) after x and bias */
		fr.put = put;
		ins[nin++] = (fosc_in){put->w, w, "w"};
	}
	static const char *const out_names[] = {"y"};
	fos_tensor *outs[] = {skip_output ? NULL : y};
	const reput_of ro = {weight, o ? o->weight_version : 0};
	const fosc_async_desc ad = {"Forward", weight, 0};
	const int async = !skip_output && fosc_async_wanted(c, ins, nin, outs, 1);
	if (async && o && o->save_context)
		fr.context_id = fosc_async_context_id(c); /* named by a Backward before the reply comes */
	const opcall oc = {ins, nin, out_names, outs, 1, FOS__RESPONSE__RESULT_FORWARD, "forward result",
			   put ? NULL : &ro /* a put inside the forward needs no re-put */, async ? &ad : NULL};
	opreply rp;
	const Fos__ForwardResult *res = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!res && rp.async && !rp.code && o && o->save_context) { /* what the call knows; the rest 0 */
		memset(ctx, 0, sizeof *ctx);
		ctx->id = fr.context_id;
		fosc_copy_str(ctx->weight, sizeof ctx->weight, weight);
		ctx->weight_version = put ? put->version : o->weight_version;
		ctx->override = o->override;
		ctx->row_scaled = o->row_scaled;
		ctx->four_over_six = o->four_over_six;
		ctx->m = x->shape[0];
		ctx->k = x->ndim > 1 ? x->shape[1] : 0;
		ctx->n = y->ndim > 1 ? y->shape[1] : 0;
		ctx->has_bias = bias != NULL;
	}
	if (!res)
		return rp.code;
	int64_t m = x->shape[0];
	if (!skip_output) {
		/* N is the weight's: any (M, N) */
		if ((rp.code = fosc_out(&rp.r, res->y, "y", FOS_DTYPE_BF16, -1, 0, y, st)))
			goto out;
		if (y->ndim != 2 || y->shape[0] != m) {
			rp.code = outset_fail(&rp.os,
					      fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's y has the wrong shape"));
			goto out;
		}
	}
	if (o && o->save_context) {
		if (!res->context_id) {
			rp.code = fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no context id");
			goto out;
		}
		memset(ctx, 0, sizeof *ctx);
		ctx->id = res->context_id;
		ctx->resolved_override = res->resolved_override;
		ctx->ttl_ms = res->context_ttl_ms;
		fosc_copy_str(ctx->weight, sizeof ctx->weight, weight);
		ctx->weight_version = res->weight_version;
		ctx->override = o->override;
		ctx->row_scaled = o->row_scaled;
		ctx->four_over_six = o->four_over_six;
		ctx->m = m;
		ctx->k = x->ndim > 1 ? x->shape[1] : 0;
		ctx->n = y && !skip_output ? y->shape[1] : 0;
		ctx->has_bias = bias != NULL;
	}
out:
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_forward(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st)
{
	if (!y)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no output tensor for y");
	return fosc_forward_call(c, weight, x, bias, o, 0, y, ctx, NULL, NULL, st);
}

static void check_point_from(const Fos__CheckPoint *p, fos_check_point *o)
{
	memset(o, 0, sizeof *o);
	if (!p)
		return;
	o->present = 1;
	o->row = p->row;
	o->col = p->col;
	o->expect = (uint16_t)p->expect;
	o->y = (uint16_t)p->y;
}

int fos_forward_check(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		      const fos_forward_opts *o, const fos_tensor *expect, const fos_check_criterion *crit,
		      fos_check_result *out, fos_status *st)
{
	if (!weight)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	if (!expect)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no expect tensor (the Y to check)");
	if (!out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no fos_check_result to fill");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__CheckCriterion cc = FOS__CHECK_CRITERION__INIT;
	Fos__Tensor tx, te, tb;
	forward_request(&rq, &fr, weight, &tx, &tb, bias, o);
	fr.expect = &te;
	if (crit) {
		cc.by_max_ulps = crit->by_max_ulps != 0;
		cc.max_ulps = crit->max_ulps;
		cc.by_min_sqnr = crit->by_min_sqnr != 0;
		cc.min_sqnr_db = crit->min_sqnr_db;
		fr.criterion = &cc;
	}
	fosc_in ins[3] = {{&tx, x, "x"}, {&te, expect, "expect"}, {&tb, bias, "bias"}};
	const reput_of ro = {weight, o ? o->weight_version : 0};
	const opcall oc = {ins, bias ? 3 : 2, NULL, NULL, 0, FOS__RESPONSE__RESULT_FORWARD, "forward result", &ro, NULL};
	opreply rp;
	const Fos__ForwardResult *res = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	const Fos__CheckResult *cr = res->check;
	if (!cr) {
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no check result");
	}
	int64_t rows = expect->ndim > 0 ? expect->shape[0] : 0, cols = expect->ndim > 1 ? expect->shape[1] : 1;
	if (cr->elements != (uint64_t)(rows * cols)) {
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's check covers %llu elements, expect has %lld",
				   (unsigned long long)cr->elements, (long long)(rows * cols));
	}
	memset(out, 0, sizeof *out);
	out->rows = rows;
	out->cols = cols;
	out->elements = cr->elements;
	out->differ = cr->differ;
	out->nonfinite = cr->nonfinite_mismatches;
	out->max_ulps = cr->max_ulps;
	check_point_from(cr->max_ulps_at, &out->max_ulps_at);
	check_point_from(cr->first_differ, &out->first_differ);
	check_point_from(cr->first_nonfinite, &out->first_nonfinite);
	out->sqnr_db = cr->sqnr_db;
	out->consistent = cr->consistent;
	fosc_copy_str(out->reason, sizeof out->reason, cr->reason);
	fosc_reply_free(&rp.r);
	return FOS_CODE_OK;
}

static int backward_call(fos_client *c, fos_context *ctx, const fos_tensor *dy, int keep, fos_tensor *dx,
			 fos_tensor *dw, fos_tensor *db, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__BackwardRequest br = FOS__BACKWARD_REQUEST__INIT;
	Fos__Tensor tdy;
	rq.op_case = FOS__REQUEST__OP_BACKWARD;
	rq.backward = &br;
	br.context_id = ctx->id;
	br.dy = &tdy;
	br.keep_context = keep;
	br.skip_dx = !dx; /* not wanted: not computed (BackwardRequest.skip_dx) */
	br.skip_dw = !dw;
	fosc_in ins[1] = {{&tdy, dy, "dy"}};
	static const char *const out_names[] = {"dx", "dw", "db"};
	fos_tensor *outs[] = {dx, dw, db};
	/* asynchronously only when every result has a device target: db too, when the forward had a bias */
	const fosc_async_desc ad = {"Backward", NULL, ctx->id};
	const int async = (db || !ctx->has_bias) && fosc_async_wanted(c, ins, 1, outs, 3);
	const opcall oc = {ins, 1, out_names, outs, 3, FOS__RESPONSE__RESULT_BACKWARD, "backward result", NULL,
			   async ? &ad : NULL};
	opreply rp;
	const Fos__BackwardResult *res = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!res && rp.async && !rp.code && !keep)
		ctx->id = 0;
	if (!res)
		return rp.code;
	int64_t m = dy->shape[0], n = dy->shape[1], k = ctx->k > 0 ? ctx->k : 0;
	if ((dx && (rp.code = fosc_out(&rp.r, res->dx, "dx", FOS_DTYPE_BF16, k ? m : -1, k, dx, st))) ||
	    (dw && (rp.code = fosc_out(&rp.r, res->dw, "dw", FOS_DTYPE_BF16, k ? n : -1, k, dw, st))))
		goto fail;
	if (res->db) {
		if ((rp.code = fosc_out(&rp.r, res->db, "db", FOS_DTYPE_BF16, n, 0, db, st)))
			goto fail;
	} else {
		fosc_out_none(db);
	}
	if (!keep)
		ctx->id = 0;
	goto out;
fail:
	outset_fail(&rp.os, rp.code);
out:
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_backward(fos_client *c, fos_context *ctx, const fos_tensor *dy, const fos_backward_opts *o,
		 fos_tensor *dx, fos_tensor *dw, fos_tensor *db, fos_status *st)
{
	if (!ctx)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no context");
	if (!dy || dy->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "dy must be a 2-D tensor (M, N)");
	int keep = o ? o->keep_context : 0;
	/* an earlier asynchronous call's failure is this call's, never a reason to recompute */
	fosc_in in1 = {NULL, dy, "dy"};
	fos_tensor *outs[] = {dx, dw, db};
	int code = (db || !ctx->has_bias) && fosc_async_wanted(c, &in1, 1, outs, 3) ? fosc_async_check(c, st)
										    : fosc_async_drain(c, st);
	if (code)
		return code;
	code = FOS_CODE_NOT_FOUND;
	if (ctx->id)
		code = backward_call(c, ctx, dy, keep, dx, dw, db, st);
	else
		fosc_status(st, code, "the context was released or consumed");
	if (code != FOS_CODE_NOT_FOUND || !o || !o->recompute_x)
		return code;
	if (ctx->has_bias && !o->recompute_bias)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
				   "the context is gone and its forward had a bias: pass recompute_bias to recompute it");
	/* the context is gone: recompute it from X against the same weight version */
	fos_forward_opts fo = {ctx->weight_version, ctx->override, ctx->row_scaled, 1, ctx->four_over_six};
	fos_context fresh;
	code = fosc_forward_call(c, ctx->weight, o->recompute_x, ctx->has_bias ? o->recompute_bias : NULL, &fo, 1, NULL,
				 &fresh, NULL, NULL, st);
	if (code) {
		if (code == FOS_CODE_NOT_FOUND || code == FOS_CODE_FAILED_PRECONDITION) {
			char m[sizeof st->message];
			snprintf(m, sizeof m, "%s", st ? st->message : "");
			return fosc_status(st, code, "cannot recompute the expired context: %s", m);
		}
		return code;
	}
	int recomputed = ctx->recomputed + 1;
	int64_t n = ctx->n;
	*ctx = fresh;
	ctx->recomputed = recomputed;
	ctx->n = n ? n : dy->shape[1];
	return backward_call(c, ctx, dy, keep, dx, dw, db, st);
}

int fos_release(fos_client *c, fos_context *ctx, fos_status *st)
{
	if (!ctx || !ctx->id)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no context to release");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ReleaseContextRequest rr = FOS__RELEASE_CONTEXT_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_RELEASE_CONTEXT;
	rq.release_context = &rr;
	rr.context_id = ctx->id;
	fosc_reply r;
	int code = fosc_call_cleanup(c, &rq, &r, st); /* no connection: fosd gone, or it expires by its TTL */
	if (!code) {
		fosc_reply_free(&r);
		ctx->id = 0;
	}
	return code;
}

/* ---- stateless ops -------------------------------------------------------------------------- */

int fos_quantize(fos_client *c, const fos_tensor *x, const fos_quant_config *cfg, const fos_tensor *amax_in,
		 fos_tensor *codes, fos_tensor *scales, fos_tensor *amax_out, fos_status *st)
{
	if (!x || x->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "x must be a 2-D tensor (rows, cols)");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
	Fos__QuantConfig qc = FOS__QUANT_CONFIG__INIT;
	Fos__Tensor tx, ta;
	rq.op_case = FOS__REQUEST__OP_QUANTIZE;
	rq.quantize = &qr;
	qr.x = &tx;
	qr.config = &qc;
	qr.amax = amax_in ? &ta : NULL;
	if (cfg) {
		qc.recipe = cfg->recipe;
		qc.block = cfg->block;
		qc.err_mode = cfg->err_mode;
		qc.bound = (uint32_t)cfg->bound;
		qc.row_scaled = cfg->row_scaled;
	}
	fosc_in ins[2] = {{&tx, x, "x"}, {&ta, amax_in, "amax"}};
	static const char *const out_names[] = {"codes", "scales", "amax"};
	fos_tensor *outs[] = {codes, scales, amax_out};
	const opcall oc = {ins, amax_in ? 2 : 1, out_names, outs, 3, FOS__RESPONSE__RESULT_QUANTIZE, "quantize result",
			   NULL, NULL};
	opreply rp;
	const Fos__QuantizeResult *res = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	int64_t rows = x->shape[0], cols = x->shape[1];
	int rs = cfg && cfg->row_scaled;
	if ((rp.code = fosc_out(&rp.r, res->codes, "codes", FOS_DTYPE_U8, rows, cols / 2, codes, st)) ||
	    (rp.code = fosc_out(&rp.r, res->scales, "scales", FOS_DTYPE_E4M3, rows, cols / 16, scales, st)) ||
	    (rp.code = fosc_out(&rp.r, res->amax, "amax", FOS_DTYPE_F32, rs ? rows : 1, 0, amax_out, st)))
		outset_fail(&rp.os, rp.code);
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_dequantize(fos_client *c, const fos_tensor *codes, const fos_tensor *scales, const fos_tensor *amax,
		   int bound, int row_scaled, int out_dtype, fos_tensor *out, fos_status *st)
{
	if (!codes || codes->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "codes must be a 2-D tensor (rows, cols/2)");
	if (out_dtype != FOS_DTYPE_BF16 && out_dtype != FOS_DTYPE_F32)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "out_dtype must be bf16 or f32");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__DequantizeRequest dr = FOS__DEQUANTIZE_REQUEST__INIT;
	Fos__Tensor tc, ts, ta;
	rq.op_case = FOS__REQUEST__OP_DEQUANTIZE;
	rq.dequantize = &dr;
	dr.codes = &tc;
	dr.scales = &ts;
	dr.amax = &ta;
	dr.bound = bound > 0 ? (uint32_t)bound : 0;
	dr.row_scaled = row_scaled;
	dr.out_dtype = out_dtype;
	fosc_in ins[3] = {{&tc, codes, "codes"}, {&ts, scales, "scales"}, {&ta, amax, "amax"}};
	static const char *const out_names[] = {"out"};
	fos_tensor *outs[] = {out};
	const opcall oc = {ins, 3, out_names, outs, 1, FOS__RESPONSE__RESULT_DEQUANTIZE, "dequantize result", NULL, NULL};
	opreply rp;
	const Fos__DequantizeResult *res = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	rp.code = fosc_out(&rp.r, res->out, "out", out_dtype, codes->shape[0], codes->shape[1] * 2, out, st);
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_linear(fos_client *c, const fos_tensor *x, const fos_tensor *w, const fos_tensor *bias,
	       const fos_tensor *dy, const fos_linear_config *cfg, fos_tensor *y, fos_tensor *dx, fos_tensor *dw,
	       fos_tensor *db, fos_status *st)
{
	if (!x || x->ndim != 2 || !w || w->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "x and w must be 2-D tensors");
	if (!y)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no output tensor for y");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
	Fos__LinearOptions lo = FOS__LINEAR_OPTIONS__INIT;
	Fos__Tensor tx, tw, tb, tdy;
	rq.op_case = FOS__REQUEST__OP_LINEAR;
	rq.linear = &lr;
	lr.x = &tx;
	lr.w = &tw;
	lr.bias = bias ? &tb : NULL;
	lr.dy = dy ? &tdy : NULL;
	lr.options = &lo;
	if (cfg) {
		lo.override = cfg->override;
		lo.weight_block = cfg->weight_block;
		lo.err_mode = cfg->err_mode;
		lo.bound = (uint32_t)cfg->bound;
		lo.row_scaled = cfg->row_scaled;
		lo.four_over_six = (Fos__FourOverSix)cfg->four_over_six;
	}
	fosc_in ins[4];
	int nin = 0;
	ins[nin++] = (fosc_in){&tx, x, "x"};
	ins[nin++] = (fosc_in){&tw, w, "w"};
	if (bias)
		ins[nin++] = (fosc_in){&tb, bias, "bias"};
	if (dy)
		ins[nin++] = (fosc_in){&tdy, dy, "dy"};
	static const char *const out_names[] = {"y", "dx", "dw", "db"};
	fos_tensor *outs[] = {y, dy ? dx : NULL, dy ? dw : NULL, dy ? db : NULL};
	static const fosc_async_desc ad = {"Linear", NULL, 0};
	const int async = (!dy || (dx && dw && (db || !bias))) && fosc_async_wanted(c, ins, nin, outs, 4);
	const opcall oc = {ins, nin, out_names, outs, 4, FOS__RESPONSE__RESULT_LINEAR, "linear result", NULL,
			   async ? &ad : NULL};
	opreply rp;
	const Fos__LinearResult *res = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!res && rp.async && !rp.code && !dy) {
		fosc_out_none(dx);
		fosc_out_none(dw);
		fosc_out_none(db);
	}
	if (!res)
		return rp.code;
	int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if ((rp.code = fosc_out(&rp.r, res->y, "y", FOS_DTYPE_BF16, m, n, y, st)))
		goto fail;
	if (dy) {
		if ((rp.code = fosc_out(&rp.r, res->dx, "dx", FOS_DTYPE_BF16, m, k, dx, st)) ||
		    (rp.code = fosc_out(&rp.r, res->dw, "dw", FOS_DTYPE_BF16, n, k, dw, st)))
			goto fail;
		if (res->db) {
			if ((rp.code = fosc_out(&rp.r, res->db, "db", FOS_DTYPE_BF16, n, 0, db, st)))
				goto fail;
		} else {
			fosc_out_none(db);
		}
	} else {
		fosc_out_none(dx);
		fosc_out_none(dw);
		fosc_out_none(db);
	}
	goto out;
fail:
	outset_fail(&rp.os, rp.code);
out:
	fosc_reply_free(&rp.r);
	return rp.code;
}
