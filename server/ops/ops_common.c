/* ops_common.c: the helpers of ops.h shared by the op handlers: failing with a code and a message,
 * backend buffers, outputs described for the result. Every backend call goes to the op context's
 * lane; nothing here builds a reply (response.c does, from what an op hands fosd_result). */
#include "ops.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int fosd_fail(fosd_opctx *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof c->msg, fmt, ap);
	va_end(ap);
	if (code == FOS__CODE__INTERNAL)
		fosd_error("%s request %llu failed: %s", c->s->def->name, (unsigned long long)c->s->req_id, c->msg);
	return code;
}

int fosd_fail_be(fosd_opctx *c, int rc, const char *what, const fos_err *e)
{
	if (what)
		return fosd_fail(c, fosd_code_of_rc(rc), "%s: %s", what, e->msg);
	return fosd_fail(c, fosd_code_of_rc(rc), "%s", e->msg);
}

int fosd_op_run(fosd_opctx *c)
{
	const fosd_op_def *d = c->s->def;
	c->reply = NULL;
	c->msg[0] = 0;
	if (!d->run)
		return fosd_fail(c, FOS__CODE__UNIMPLEMENTED, "operation not implemented");
	fos_err e;
	memset(&e, 0, sizeof e);
	if (fosd_dev_wait(&c->s->shm.dev, c->be, &e)) /* the client's work on its device inputs first */
		return fosd_fail(c, FOS__CODE__INTERNAL, "waiting for cuda_wait_event: %s", e.msg);
	return d->run(c);
}

void *fosd_dev_alloc(fosd_opctx *c, size_t n, fos_err *e)
{
	void *p = c->be->alloc(c->be, n);
	if (!p)
		fos_seterr(e, FOS_ENOMEM, "cannot allocate %zu bytes of %s memory", n, c->be->name);
	return p;
}

void *fosd_dev_from(fosd_opctx *c, const fosw_tensor *t, fos_err *e)
{
	/* in the client's GPU memory, aligned, and opened on the device running this stage of the
	 * request: used in place (never freed, fosd_dev_free); a later stage on another device of a
	 * PutWeight (placement.c) copies it */
	if (fosd_dev_inplace_ok(t) && c->s->bound_dev == c->dev->index && !fosd_dev_borrow(&c->s->shm.dev, (void *)t->ptr))
		return (void *)t->ptr;
	uint64_t t0 = fosd_now_ns(); /* the input copy part of the request's time (metrics.h) */
	void *p = fosd_dev_alloc(c, t->len, e);
	if (p && fosd_tensor_h2d(c->be, &c->srv->regions, &c->dev->devmaps, p, t, e)) { /* inline, or from a shm region */
		c->be->free(c->be, p);
		return NULL;
	}
	fosd_metrics_copy_time(c->s, FOSD_COPY_IN, t0);
	return p;
}

void *fosd_dev_out(fosd_opctx *c, const char *result, size_t n, fos_err *e)
{
	/* fosd_dev_out_inplace gives NULL for an entry that is not a device target */
	void *p = fosd_dev_out_inplace(&c->s->shm.dev, fosd_shm_output_index(c->s->rq, result), n);
	return p ? p : fosd_dev_alloc(c, n, e);
}

void fosd_dev_free(fosd_opctx *c, void *p)
{
	if (p && !fosd_dev_borrowed(&c->s->shm.dev, p))
		c->be->free(c->be, p);
}

void *fosd_lane_buffer(fosd_opctx *c, int which, size_t n)
{
	fosd_lane_buf *b = c->buf;
	if (!b || which < 0 || which > 1 || n > FOSD_LANE_BUF_MAX)
		return NULL;
	if (b->cap[which] < n) {
		if (b->p[which])
			c->be->free(c->be, b->p[which]); /* stream-ordered: after this lane's earlier work */
		b->p[which] = c->be->alloc(c->be, FOSD_LANE_BUF_MAX);
		b->cap[which] = b->p[which] ? FOSD_LANE_BUF_MAX : 0;
	}
	return b->p[which];
}

int fosd_mark_made(fosd_opctx *c, void **ev, int *lane, fos_err *e)
{
	*ev = NULL;
	*lane = c->lane;
	if (!c->be->defer_sync)
		return 0;
	const fosd_retirer *r = &c->dev->wc.retire;
	if (c->be->mark_record) {
		*ev = r->mark_get ? r->mark_get(r->arg) : NULL; /* a pooled one, else made now */
		if (!c->be->mark_record(c->be, ev, e))
			return 0;
		fosd_retire_mark(r, c->be, *ev);
		*ev = NULL;
		return -1;
	}
	return c->be->sync(c->be, e) ? -1 : 0; /* no marks: done now */
}

int fosd_wait_made(fosd_opctx *c, void *ev, int lane, fos_err *e)
{
	if (!ev || lane == c->lane || !c->be->mark_wait)
		return 0;
	return c->be->mark_wait(c->be, ev, e) ? -1 : 0;
}

void fosd_outs_init(fosd_outs *o)
{
	memset(o, 0, sizeof *o);
}

Fos__Tensor *fosd_out_add(fosd_outs *o, int wire_dtype, int64_t d0, int64_t d1, const void *dev)
{
	int i = o->n++;
	int64_t shape[2] = {d0, d1};
	fosw_tensor_init(&o->t[i], o->shape[i], &o->pl, wire_dtype, d1 > 0 ? 2 : 1, shape);
	o->dev[i] = dev;
	return &o->t[i];
}

void fosd_weight_info_msg(const fosd_weight_info *in, Fos__WeightInfo *out, Fos__WeightConfig *cfg)
{
	fos__weight_info__init(out);
	fos__weight_config__init(cfg);
	out->name = (char *)in->name;
	out->version = in->version;
	out->n = in->n;
	out->k = in->k;
	cfg->weight_block = in->opts.weight_block == FOS_BLOCK_1X16 ? FOS__BLOCK__BLOCK_1X16 : FOS__BLOCK__BLOCK_16X16;
	cfg->err_mode = in->opts.err_mode == FOS_ERR_MSE ? FOS__ERR_MODE__ERR_MSE : FOS__ERR_MODE__ERR_MAE;
	cfg->bound = (uint32_t)in->opts.bound;
	cfg->four_over_six = (Fos__FourOverSix)fos_scope_to_wire(in->opts.four_over_six);
	out->config = cfg;
	out->bytes = in->bytes;
	out->pinned = in->pinned;
	out->has_master = in->has_master;
	out->has_columnwise = in->has_col;
	out->uses = in->uses;
	out->idle_ms = in->idle_ms;
	out->n_weight_uses = in->n_wire_uses;
	out->weight_uses = (Fos__WeightUse *)in->wire_uses; /* packed, not written */
	out->codes_bytes = in->parts.codes;
	out->columnwise_bytes = in->parts.columnwise;
	out->master_bytes = in->parts.master;
	out->decoded_tier_bytes = in->tier_bytes;
}

int fosd_check_name(const char *name, const char *what, char *msg, size_t msgsz)
{
	size_t n = strlen(name);
	if (n == 0 || n > 128) {
		snprintf(msg, msgsz, "%s must be 1 to 128 bytes long (got %zu)", what, n);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
			 c == '_' || c == ':' || c == '/' || c == '-';
		if (!ok) {
			snprintf(msg, msgsz, "%s has a byte 0x%02x at %zu outside [A-Za-z0-9._:/-]", what,
				 (unsigned char)c, i);
			return -1;
		}
	}
	return 0;
}
