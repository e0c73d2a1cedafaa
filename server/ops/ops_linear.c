/* ops_linear.c: Forward (cached weight, optional saved context, or a check of the caller's Y),
 * Backward (from a saved context), ReleaseContext, and the one-shot Linear (forward + backward
 * without the cache). Each checks the shapes it could not check before it knew the weight or
 * context, then calls the linear layer of kernels/linear.c exactly as a local caller would. A
 * Forward with expect computes the same Y, compares expect with it through kernels/compare.c (the
 * code of `fos check`, so the numbers are the CLI's) and replies with the comparison, never Y. */
#include "ops.h"
#include "util.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when the request has a deadline (set by the executor) and it has passed */
static int past_deadline(const fosd_opctx *c)
{
	return c->deadline_ns && fosd_now_ns() > c->deadline_ns;
}

#define BF16 FOS__DTYPE__DTYPE_BF16

/* ---- a Forward's check (expect instead of Y) -------------------------------------------------- */

/* Y is compared in pieces of this many elements: on a device backend each piece of Y is copied to
 * the host and compared there by the CPU (kernels/compare.c, the code of `fos check`); a piece of
 * expect that lies in a shared-memory region goes through the guarded copy first. */
#define CHECK_CHUNK ((size_t)1 << 18)

/* Compares expect (count bf16 elements, inline or in a region) with Y (backend memory) into r.
 * Returns 0, or a gRPC code with msg. */
static int check_compare(fosd_opctx *c, const fosw_tensor *ex, const void *y, size_t count, fos_cmp *r, char *msg,
			 size_t msgsz)
{
	fosd_opsrv *srv = c->srv;
	fos_backend *be = c->be;
	const int host = srv->regions.host_backend; /* Y is in host memory already */
	size_t chunk = count < CHECK_CHUNK ? count : CHECK_CHUNK;
	const int copy_ex = ex->shm || ex->cuda; /* expect read through a guarded copy or from the GPU */
	uint16_t *yb = host ? NULL : malloc(chunk * 2 + 2), *eb = copy_ex ? malloc(chunk * 2 + 2) : NULL;
	int code = 0;
	fos_cmp_init(r, FOS_CMP_BF16);
	if ((!host && !yb) || (copy_ex && !eb)) {
		snprintf(msg, msgsz, "out of memory for the check's %zu-byte buffers", chunk * 4);
		code = FOS__CODE__RESOURCE_EXHAUSTED;
		goto out;
	}
	if (ex->shm) {
		fosd_region *rg = ex->shm;
		uint64_t off = (uint64_t)(ex->ptr - fosd_region_base(rg));
		if ((code = fosd_region_check_now(rg, off, ex->len, msg, msgsz)))
			goto out;
	}
	for (size_t o = 0; o < count; o += chunk) {
		size_t c = count - o < chunk ? count - o : chunk;
		const uint16_t *yp = (const uint16_t *)y + o, *ep = (const uint16_t *)(const void *)ex->ptr + o;
		if (!host) {
			fos_err e;
			if (be->d2h(be, yb, yp, c * 2, &e)) {
				snprintf(msg, msgsz, "copying Y out for the check: %s", e.msg);
				code = fosd_code_of_rc(e.rc);
				goto out;
			}
			yp = yb;
		}
		if (ex->cuda) {
			fos_err e;
			if (be->d2h(be, eb, ex->ptr + o * 2, c * 2, &e)) {
				snprintf(msg, msgsz, "copying expect out of the client's GPU memory: %s", e.msg);
				code = fosd_code_of_rc(e.rc);
				goto out;
			}
			ep = eb;
		} else if (ex->shm) {
			if (fosd_shm_copy(eb, ex->ptr + o * 2, c * 2)) {
				snprintf(msg, msgsz, "shm region '%s' shrank while expect was read",
					 fosd_region_name(ex->shm));
				code = FOS__CODE__FAILED_PRECONDITION;
				goto out;
			}
			ep = eb;
		}
		fos_cmp_add(r, ep, yp, c); /* expect is "ours", fosd's Y the reference */
	}
out:
	free(yb);
	free(eb);
	return code;
}

/* A CheckPoint for flat index at of a (m, n) Y, or NULL when at is FOS_CMP_NONE. */
static Fos__CheckPoint *check_point(Fos__CheckPoint *p, size_t at, int64_t n, const uint32_t bits[2])
{
	if (at == FOS_CMP_NONE)
		return NULL;
	fos__check_point__init(p);
	p->row = (int64_t)(at / (size_t)n);
	p->col = (int64_t)(at % (size_t)n);
	p->expect = bits[0];
	p->y = bits[1];
	return p;
}

/* The wire's CheckResult of r under crit (points and reason: storage of the caller). */
static void check_result(const fos_cmp *r, const fos_cmp_criterion *crit, int64_t m, int64_t n, Fos__CheckResult *cr,
			 Fos__CheckPoint pts[3], char *reason, size_t reasonsz)
{
	static const fos_cmp_labels labels = {"bitwise", "max_ulps", "min_sqnr_db"};
	int64_t shape[2] = {m, n};
	double sqnr = fos_cmp_sqnr_db(r);
	fos__check_result__init(cr);
	cr->elements = r->n;
	cr->differ = r->differ;
	cr->nonfinite_mismatches = r->nonfinite;
	cr->max_ulps = r->max_ulps;
	cr->max_ulps_at = check_point(&pts[0], r->max_at, n, r->max_bits);
	cr->first_differ = check_point(&pts[1], r->first_differ, n, r->first_bits);
	cr->first_nonfinite = check_point(&pts[2], r->nonfinite_at, n, r->nonfinite_bits);
	cr->sqnr_db = sqnr;
	cr->consistent = fos_cmp_verdict(r, sqnr, crit, &labels, 2, shape, reason, reasonsz);
	cr->reason = reason;
}

int fosd_op_forward(fosd_opctx *c)
{
	fosd_opsrv *srv = c->srv;
	fosd_opreq *s = c->s;
	fosd_fwd_args *a = &s->args.u.fwd;
	fos_backend *be = c->be;
	char msg[FOSD_MSG_MAX];
	fos_err e;
	fosd_weight *w = NULL;
	void *x = NULL, *bias = NULL, *y = NULL;
	void *lx = NULL, *ly = NULL; /* the lane's own X and Y buffers (small forwards) */
	fos_saved saved;
	int have_saved = 0;
	fosd_context *ctx = NULL;
	int r = 0;
	const uint16_t *tier = NULL; /* the decoded tier's copy of W this forward reads */
	const fos_qweight *wf = NULL; /* the form of W the scope needs (fosd_wcache_form) */
	fos_qweight wtmp;
	memset(&saved, 0, sizeof saved);
	memset(&wtmp, 0, sizeof wtmp);

	int rc;
	if (a->has_put) { /* the put first, as PutWeight's (PROTOCOL.md "A put inside a forward") */
		fosd_weight *put;
		int staged;
		if (srv->n_devs > 1)
			return fosd_fail(c, FOS__CODE__FAILED_PRECONDITION,
					 "forward.put: fosd serves %d devices, and a put inside a forward is for a fosd serving "
					 "one: put weight '%s' with PutWeight (and its placement), then forward",
					 srv->n_devs, a->weight);
		if ((rc = fosd_put_cache(c, &a->put, s->rq->forward->put, &put, &staged, msg, sizeof msg)))
			return fosd_fail(c, rc, "put: %s", msg);
	}
	rc = fosd_wcache_acquire_in(&c->dev->wc, s->tenant, a->weight, a->version, &w, msg, sizeof msg);
	if (rc)
		return fosd_fail(c, rc, "%s", msg);
	if (fosd_wait_made(c, w->made_ev, w->made_lane, &e)) { /* put on another lane: its work first */
		r = fosd_fail_be(c, e.rc, "waiting for the weight's put on another lane", &e);
		goto out;
	}
	int64_t m = a->x.shape[0], k = a->x.shape[1], n = w->qw.n;
	fos_linear_opts o = w->qw.opts;
	o.override = a->override;
	o.row_scaled = a->row_scaled;
	if (a->four_over_six >= 0)
		o.four_over_six = a->four_over_six;
	int resolved;
	if (k != w->qw.k) {
		r = fosd_fail(c, FOS__CODE__INVALID_ARGUMENT, "x has K = %lld but weight '%s' is (%lld, %lld)",
			      (long long)k, w->name, (long long)n, (long long)w->qw.k);
		goto out;
	}
	if (a->has_bias && a->bias.shape[0] != n) {
		r = fosd_fail(c, FOS__CODE__INVALID_ARGUMENT, "bias has %lld values but weight '%s' has N = %lld",
			      (long long)a->bias.shape[0], w->name, (long long)n);
		goto out;
	}
	if (fos_linear_check(&o, m, n, k, &resolved, &e)) {
		r = fosd_fail(c, FOS__CODE__INVALID_ARGUMENT, "%s", e.msg);
		goto out;
	}
	/* what the weight was put for (PutWeight's uses): a forward saving a context needs its
	 * override's use, any other forward the forward use */
	int need = a->save ? fos_use_of_override(resolved) : FOS_USE_FORWARD;
	if (!(w->qw.uses & need)) {
		char us[80];
		r = fosd_fail(c, FOS__CODE__FAILED_PRECONDITION,
			      "weight '%s' was not put for the use '%s' (%s) but for %s", w->name, fos_use_name(need),
			      a->save ? "a forward saving a context for that backward" : "a forward without a backward",
			      fos_uses_str(w->qw.uses, us, sizeof us));
		goto out;
	}
	if (a->has_expect && (a->expect.ndim != 2 || a->expect.shape[0] != m || a->expect.shape[1] != n)) {
		char es[64];
		if (a->expect.ndim == 2)
			snprintf(es, sizeof es, "(%lld, %lld)", (long long)a->expect.shape[0], (long long)a->expect.shape[1]);
		else
			snprintf(es, sizeof es, "(%lld,)", (long long)a->expect.shape[0]);
		r = fosd_fail(c, FOS__CODE__INVALID_ARGUMENT,
			      "expect is %s but Y is (%lld, %lld) (x has M = %lld, weight '%s' has N = %lld)", es,
			      (long long)m, (long long)n, (long long)m, w->name, (long long)n);
		goto out;
	}
	/* the message limit bounds an inline Y only; a Y written into a region is bounded by the region */
	if (!a->skip_output && !a->has_expect && !fosd_shm_output_named(s->rq, "y") &&
	    (uint64_t)m * (uint64_t)n * 2 + 4096 > srv->cfg->max_message_bytes) {
		r = fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "Y (%lld, %lld) would exceed the %llu-byte message limit",
			      (long long)m, (long long)n, (unsigned long long)srv->cfg->max_message_bytes);
		goto out;
	}
	/* a small forward without a saved context runs on its lane's own X and Y buffers: the same
	 * addresses every time, so the backend replays its recorded work (backend.h replay) */
	lx = a->save ? NULL : fosd_lane_buffer(c, 0, a->x.len);
	ly = lx ? fosd_lane_buffer(c, 1, (size_t)(m * n * 2)) : NULL;
	if (lx && ly) {
		uint64_t t0 = fosd_now_ns(); /* the input copy part of the request's time (metrics.h) */
		if (fosd_tensor_h2d(c->be, &srv->regions, &c->dev->devmaps, lx, &a->x, &e)) {
			r = fosd_fail_be(c, e.rc, NULL, &e);
			goto out;
		}
		fosd_metrics_copy_time(s, FOSD_COPY_IN, t0);
	} else {
		lx = ly = NULL;
	}
	if (!(x = lx ? lx : fosd_dev_from(c, &a->x, &e)) ||
	    (a->has_bias && !(bias = fosd_dev_from(c, &a->bias, &e))) ||
	    !(y = ly ? ly : fosd_dev_out(c, "y", (size_t)(m * n * 2), &e))) {
		if (lx)
			x = y = NULL; /* the lane's: not freed */
		r = fosd_fail_be(c, e.rc, NULL, &e);
		goto out;
	}
	/* the form of W the scope needs: the entry's, or its other form (made from the master) */
	if ((rc = fosd_wcache_form(&c->dev->wc, w, be, o.four_over_six, &wf, &wtmp, msg, sizeof msg))) {
		r = fosd_fail(c, rc, "%s", msg);
		goto out;
	}
	/* W's decoded operand: a small forward's from the decoded tier (the entry's own form only),
	 * else decoded into the lane's scratch (wcache.h) */
	fos_wops wo = {fosd_wcache_scratch(&c->dev->wc, c->lane), NULL, NULL};
	if (!a->save && m <= FOSD_TIER_MAX_M && wf == &w->qw)
		wo.wdec = tier = fosd_wcache_tier_get(&c->dev->wc, w, be);
	rc = fos_linear_forward_w(be, x, m, wf, &wo, &o, bias, y, a->save ? &saved : NULL, &e);
	if (rc) {
		r = fosd_fail_be(c, rc, "forward", &e);
		goto out;
	}
	have_saved = a->save;

	Fos__ForwardResult fr = FOS__FORWARD_RESULT__INIT;
	if (a->save) {
		ctx = calloc(1, sizeof *ctx);
		if (!ctx) {
			r = fosd_fail(c, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory");
			goto out;
		}
		ctx->saved = saved;
		have_saved = 0;
		ctx->w = w;
		ctx->id = s->rq->forward->context_id; /* 0: fosd chooses */
		if (fosd_mark_made(c, &ctx->made_ev, &ctx->made_lane, &e)) { /* a backward on another lane waits */
			free(ctx);
			ctx = NULL;
			have_saved = 1; /* freed at out */
			r = fosd_fail_be(c, e.rc, "marking the saved context's work", &e);
			goto out;
		}
		fosd_wcache_acquire_ref(&c->dev->wc, w);
		rc = fosd_contexts_add(&c->dev->cx, ctx, msg, sizeof msg); /* frees ctx on failure */
		if (rc) {
			ctx = NULL;
			r = fosd_fail(c, rc, "%s", msg);
			goto out;
		}
		fr.context_id = ctx->id;
		fr.context_ttl_ms = c->dev->cx.ttl_ms;
	}
	fr.resolved_override = resolved;
	fr.weight_version = w->version;
	Fos__CheckResult cr;
	Fos__CheckPoint pts[3];
	char reason[256];
	if (a->has_expect) { /* the comparison instead of Y */
		fos_cmp cmp;
		rc = check_compare(c, &a->expect, y, (size_t)(m * n), &cmp, msg, sizeof msg);
		if (rc) {
			r = fosd_fail(c, rc, "%s", msg);
			goto out;
		}
		check_result(&cmp, &a->crit, m, n, &cr, pts, reason, sizeof reason);
		fr.check = &cr;
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	if (!a->skip_output && !a->has_expect)
		fr.y = fosd_out_add(&outs, BF16, m, n, y);
	r = fosd_result(c, FOS__RESPONSE__RESULT_FORWARD, &fr, &outs);
	if (r && ctx)
		fosd_contexts_remove(&c->dev->cx, ctx, FOSD_CTX_RELEASED);
out:
	if (have_saved)
		fos_saved_free(be, &saved);
	if (lx) /* the lane's buffers stay with the lane */
		x = y = NULL;
	fosd_dev_free(c, x);
	fosd_dev_free(c, bias);
	fosd_dev_free(c, y);
	if (tier || wf == &wtmp) { /* released once the lane's reads of it are done */
		fos_err se;
		if (be->sync(be, &se))
			fosd_warn("forward of '%s': %s", w->name, se.msg);
		if (tier)
			fosd_wcache_tier_release(&c->dev->wc, w);
		if (wf == &wtmp) {
			wtmp.master = NULL; /* the entry's, borrowed */
			fos_qweight_free(be, &wtmp);
		}
	}
	fosd_wcache_scratch_seen(&c->dev->wc, c->lane);
	fosd_wcache_release(&c->dev->wc, w);
	return r;
}

/* Backend buffers for dX (m, k), dW (n, k) and, with a bias, db (n), in that order: 0, or -1 with
 * e; what was allocated stays in *dx, *dw, *db for the caller to free. */
/* The gradients' buffers; skip_dx / skip_dw: that one left NULL (not computed). */
static int grads_alloc(fosd_opctx *c, int64_t m, int64_t n, int64_t k, int has_bias, int skip_dx, int skip_dw,
		       void **dx, void **dw, void **db, fos_err *e)
{
	if ((!skip_dx && !(*dx = fosd_dev_out(c, "dx", (size_t)(m * k * 2), e))) ||
	    (!skip_dw && !(*dw = fosd_dev_out(c, "dw", (size_t)(n * k * 2), e))) ||
	    (has_bias && !(*db = fosd_dev_out(c, "db", (size_t)n * 2, e))))
		return -1;
	return 0;
}

/* The gradients computed as outputs of a reply, into its dx, dw and db fields (each when there is
 * one). */
static void grads_out(fosd_outs *o, int64_t m, int64_t n, int64_t k, const void *dx, const void *dw, const void *db,
		      Fos__Tensor **tdx, Fos__Tensor **tdw, Fos__Tensor **tdb)
{
	if (dx)
		*tdx = fosd_out_add(o, BF16, m, k, dx);
	if (dw)
		*tdw = fosd_out_add(o, BF16, n, k, dw);
	if (db)
		*tdb = fosd_out_add(o, BF16, n, 0, db);
}

int fosd_op_backward(fosd_opctx *oc)
{
	fosd_opsrv *srv = oc->srv;
	fosd_opreq *s = oc->s;
	fosd_bwd_args *a = &s->args.u.bwd;
	char msg[FOSD_MSG_MAX];
	fos_err e;
	fosd_context *c;
	int rc = fosd_contexts_get_in(&oc->dev->cx, s->tenant, a->id, &c, msg, sizeof msg);
	if (rc)
		return fosd_fail(oc, rc, "%s", msg);
	if (fosd_wait_made(oc, c->made_ev, c->made_lane, &e)) /* saved on another lane: its work first */
		return fosd_fail_be(oc, e.rc, "waiting for the context's forward on another lane", &e);
	const fos_saved *sv = &c->saved;
	int64_t m = sv->m, n = sv->n, k = sv->k;
	const fos_qweight *wf = fosd_weight_form_of(c->w, sv->four_over_six); /* the forward's form of W */
	if (!wf)
		return fosd_fail(oc, FOS__CODE__INTERNAL, "weight '%s' has no form for four_over_six '%s' (this context's forward)",
				 c->w->name, fos_scope_name(sv->four_over_six));
	int need = fos_use_of_override(sv->override);
	if (!(c->w->qw.uses & need)) {
		char us[80];
		return fosd_fail(oc, FOS__CODE__FAILED_PRECONDITION,
				 "weight '%s' was not put for the use '%s' (this context's backward) but for %s", c->w->name,
				 fos_use_name(need), fos_uses_str(c->w->qw.uses, us, sizeof us));
	}
	if (a->dy.shape[0] != m || a->dy.shape[1] != n)
		return fosd_fail(oc, FOS__CODE__INVALID_ARGUMENT, "dy is (%lld, %lld) but the forward's Y is (%lld, %lld)",
				 (long long)a->dy.shape[0], (long long)a->dy.shape[1], (long long)m, (long long)n);
	if (!sv->has_bias && fosd_shm_output_named(s->rq, "db")) /* as for a skipped dX or dW */
		return fosd_fail(oc, FOS__CODE__INVALID_ARGUMENT,
				 "shm_outputs[%d] names db, but the forward of this context had no bias (no db to write)",
				 fosd_shm_output_index(s->rq, "db"));
	/* the inline results only: those written into regions are bounded by their regions */
	uint64_t out = (a->skip_dx || fosd_shm_output_named(s->rq, "dx") ? 0 : (uint64_t)m * (uint64_t)k * 2) +
		       (a->skip_dw || fosd_shm_output_named(s->rq, "dw") ? 0 : (uint64_t)n * (uint64_t)k * 2) +
		       (sv->has_bias && !fosd_shm_output_named(s->rq, "db") ? (uint64_t)n * 2 : 0);
	if (out + 4096 > srv->cfg->max_message_bytes)
		return fosd_fail(oc, FOS__CODE__RESOURCE_EXHAUSTED, "dX, dW, db (%llu bytes) would exceed the message limit",
				 (unsigned long long)out);
	int r = 0;
	void *dy = NULL, *dx = NULL, *dw = NULL, *db = NULL;
	if (!(dy = fosd_dev_from(oc, &a->dy, &e)) ||
	    grads_alloc(oc, m, n, k, sv->has_bias, a->skip_dx, a->skip_dw, &dx, &dw, &db, &e)) {
		r = fosd_fail_be(oc, e.rc, NULL, &e);
		goto out;
	}
	fos_wops wo = {fosd_wcache_scratch(&oc->dev->wc, oc->lane), NULL, NULL}; /* W decoded into the lane's scratch */
	rc = fos_linear_backward_w(oc->be, sv, wf, &wo, dy, dx, dw, db, &e);
	fosd_wcache_scratch_seen(&oc->dev->wc, oc->lane);
	if (rc) {
		r = fosd_fail_be(oc, rc, "backward", &e);
		goto out;
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	Fos__BackwardResult br = FOS__BACKWARD_RESULT__INIT;
	grads_out(&outs, m, n, k, dx, dw, db, &br.dx, &br.dw, &br.db);
	r = fosd_result(oc, FOS__RESPONSE__RESULT_BACKWARD, &br, &outs);
	if (!r && !a->keep)
		fosd_contexts_remove(&oc->dev->cx, c, FOSD_CTX_CONSUMED);
out:
	fosd_dev_free(oc, dy);
	fosd_dev_free(oc, dx);
	fosd_dev_free(oc, dw);
	fosd_dev_free(oc, db);
	return r;
}

int fosd_op_release(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	char msg[FOSD_MSG_MAX];
	int rc = fosd_contexts_release_in(&c->dev->cx, s->tenant, s->args.u.release_id, msg, sizeof msg);
	if (rc)
		return fosd_fail(c, rc, "%s", msg);
	Fos__ReleaseContextResult rr = FOS__RELEASE_CONTEXT_RESULT__INIT;
	return fosd_result(c, FOS__RESPONSE__RESULT_RELEASE_CONTEXT, &rr, NULL);
}

int fosd_op_linear(fosd_opctx *c)
{
	fosd_opreq *s = c->s;
	fosd_lin_args *a = &s->args.u.lin;
	fos_backend *be = c->be;
	fos_err e;
	int64_t m = a->x.shape[0], k = a->x.shape[1], n = a->w.shape[0];
	void *x = NULL, *w = NULL, *bias = NULL, *dy = NULL, *y = NULL, *dx = NULL, *dw = NULL, *db = NULL;
	fos_qweight qw;
	fos_saved saved;
	int have_qw = 0, have_saved = 0, rc;
	int r = 0;
	memset(&qw, 0, sizeof qw);
	memset(&saved, 0, sizeof saved);
	if (!(x = fosd_dev_from(c, &a->x, &e)) || !(w = fosd_dev_from(c, &a->w, &e)) ||
	    (a->has_bias && !(bias = fosd_dev_from(c, &a->bias, &e))) ||
	    (a->has_dy && !(dy = fosd_dev_from(c, &a->dy, &e))) || !(y = fosd_dev_out(c, "y", (size_t)(m * n * 2), &e))) {
		r = fosd_fail_be(c, e.rc, NULL, &e);
		goto out;
	}
	/* only what this call needs: its backward's use, or the forward's */
	int uses = a->has_dy ? fos_use_of_override(a->resolved) : FOS_USE_FORWARD;
	fos_wops wo = {fosd_wcache_scratch(&c->dev->wc, c->lane), NULL, NULL};
	if ((rc = fos_qweight_make_uses(be, w, n, k, &a->opts, uses, &qw, &e))) {
		r = fosd_fail_be(c, rc, "quantizing w", &e);
		goto out;
	}
	have_qw = 1;
	if (past_deadline(c)) { /* between steps: nobody waits for the rest */
		r = fosd_fail(c, FOS__CODE__DEADLINE_EXCEEDED, "the request passed its deadline while running");
		goto out;
	}
	if ((rc = fos_linear_forward_w(be, x, m, &qw, &wo, &a->opts, bias, y, a->has_dy ? &saved : NULL, &e))) {
		r = fosd_fail_be(c, rc, "forward", &e);
		goto out;
	}
	have_saved = a->has_dy;
	if (a->has_dy && past_deadline(c)) {
		r = fosd_fail(c, FOS__CODE__DEADLINE_EXCEEDED, "the request passed its deadline while running");
		goto out;
	}
	if (a->has_dy) {
		if (grads_alloc(c, m, n, k, a->has_bias, 0, 0, &dx, &dw, &db, &e)) {
			r = fosd_fail_be(c, e.rc, NULL, &e);
			goto out;
		}
		if ((rc = fos_linear_backward_w(be, &saved, &qw, &wo, dy, dx, dw, db, &e))) {
			r = fosd_fail_be(c, rc, "backward", &e);
			goto out;
		}
	}
	fosd_outs outs;
	fosd_outs_init(&outs);
	Fos__LinearResult lr = FOS__LINEAR_RESULT__INIT;
	lr.y = fosd_out_add(&outs, BF16, m, n, y);
	if (a->has_dy) {
		grads_out(&outs, m, n, k, dx, dw, db, &lr.dx, &lr.dw, &lr.db);
	}
	lr.resolved_override = a->resolved;
	r = fosd_result(c, FOS__RESPONSE__RESULT_LINEAR, &lr, &outs);
out:
	if (have_saved)
		fos_saved_free(be, &saved);
	if (have_qw)
		fos_qweight_free(be, &qw);
	fosd_wcache_scratch_seen(&c->dev->wc, c->lane);
	void *bufs[] = {x, w, bias, dy, y, dx, dw, db};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		fosd_dev_free(c, bufs[i]);
	return r;
}
