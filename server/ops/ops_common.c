/* ops_common.c: the helpers of ops.h shared by the op handlers. Every backend call goes to the op
 * context's lane. */
#include "ops.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

nng_msg *fosd_fail(fosd_slot *s, int *code, int c, const char *fmt, ...)
{
	char msg[FOSD_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	*code = c;
	if (c == FOS__CODE__INTERNAL)
		fosd_error("%s request %llu failed: %s", s->def->name, (unsigned long long)s->req_id, msg);
	return fosd_error_reply(s->req_id, c, msg);
}

nng_msg *fosd_fail_be(fosd_slot *s, int *code, int rc, const char *what, const fos_err *e)
{
	if (what)
		return fosd_fail(s, code, fosd_code_of_rc(rc), "%s: %s", what, e->msg);
	return fosd_fail(s, code, fosd_code_of_rc(rc), "%s", e->msg);
}

nng_msg *fosd_op_run(fosd_opctx *c, int *code)
{
	const fosd_op_def *d = c->s->def;
	if (!d->run)
		return fosd_fail(c->s, code, FOS__CODE__UNIMPLEMENTED, "operation not implemented");
	fos_err e;
	memset(&e, 0, sizeof e);
	if (fosd_dev_wait(&c->s->shm.dev, c->be, &e)) /* the client's work on its device inputs first */
		return fosd_fail(c->s, code, FOS__CODE__INTERNAL, "waiting for cuda_wait_event: %s", e.msg);
	return d->run(c, code);
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

nng_msg *fosd_outs_reply(fosd_opctx *c, Fos__Response *resp, fosd_outs *o, int *code)
{
	fosd_server *srv = c->srv;
	fosd_slot *s = c->s;
	uint64_t t0 = fosd_now_ns(); /* the output copy part of the request's time (metrics.h) */
	resp->id = s->req_id;
	resp->device = c->dev ? (uint32_t)c->dev->index : 0;
	char smsg[FOSD_MSG_MAX];
	/* results asked into shm */
	int sc = fosd_shm_outs_place(&s->shm, &resp->base, o ? o->t : NULL, o ? o->n : 0, o ? &o->pl : NULL, smsg,
				     sizeof smsg);
	if (sc)
		return fosd_fail(s, code, sc, "%s", smsg);
	if (o && o->pl.cursor + 4096 > srv->cfg->max_message_bytes)
		return fosd_fail(s, code, FOS__CODE__RESOURCE_EXHAUSTED,
				 "the reply would be %llu bytes, over the %llu-byte message limit",
				 (unsigned long long)o->pl.cursor, (unsigned long long)srv->cfg->max_message_bytes);
	for (int i = 0; s->shm.dev.word && o && i < o->n; i++) /* asynchronous: the client no longer waits */
		if (!o->t[i].cuda)
			return fosd_fail(s, code, FOS__CODE__FAILED_PRECONDITION,
					 "an asynchronous request (done_word) needs every result in the client's GPU memory, "
					 "but result %d would come back in the reply (a Backward's db: give it a device "
					 "output); send it without done_word",
					 i);
	int early = c->done_event != NULL; /* only when no result goes to the reply or a region */
	for (int i = 0; early && o && i < o->n; i++)
		early = o->t[i].cuda != NULL;
	if (early) {
		resp->cuda_done_event.len = 64;
		resp->cuda_done_event.data = (uint8_t *)c->done_event;
	}
	uint8_t *data = NULL;
	nng_msg *m = fosd_build_reply(resp, o ? &o->pl : NULL, &data);
	if (!m)
		return fosd_fail(s, code, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory allocating the reply");
	for (int i = 0; o && i < o->n; i++)
		if (!o->t[i].cuda) { /* a copy to the host follows: the op's last device work is waited for
				      * first and counted as compute, not output copy */
			fos_err se;
			uint64_t ts = fosd_now_ns();
			(void)c->be->sync(c->be, &se);
			t0 += fosd_now_ns() - ts;
			break;
		}
	for (int i = 0; o && i < o->n; i++) {
		fos_err e;
		if (o->t[i].shm || o->t[i].cuda) {
			sc = fosd_shm_out_write(c->be, &srv->regions, &s->shm, i, o->dev[i], (size_t)o->t[i].length, smsg, sizeof smsg);
			if (sc) {
				nng_msg_free(m);
				return fosd_fail(s, code, sc, "writing result %d into %s: %s", i,
						 o->t[i].cuda ? "the client's GPU memory" : "shared memory", smsg);
			}
			continue;
		}
		if (c->be->d2h(c->be, data + o->t[i].offset, o->dev[i], (size_t)o->t[i].length, &e)) {
			nng_msg_free(m);
			return fosd_fail(s, code, fosd_code_of_rc(e.rc), "copying the result out: %s", e.msg);
		}
	}
	if (early) { /* after the op's last work on the stream, the device outputs' copies included */
		fos_err e;
		memset(&e, 0, sizeof e);
		if (c->be->done_event_record(c->be, &e)) {
			nng_msg_free(m);
			return fosd_fail(s, code, FOS__CODE__INTERNAL, "recording the reply's done event: %s", e.msg);
		}
		c->early = 1;
	}
	fosd_metrics_copy_time(s, FOSD_COPY_OUT, t0);
	*code = 0;
	return m;
}

nng_msg *fosd_result_reply(fosd_opctx *c, Fos__Response__ResultCase which, void *result, fosd_outs *o, int *code)
{
	/* a oneof case is its member's field number; the member is stored at the field's offset */
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field(&fos__response__descriptor, (unsigned)which);
	if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE || ((ProtobufCMessage *)result)->descriptor != f->descriptor)
		return fosd_fail(c->s, code, FOS__CODE__INTERNAL, "result %d is not a Response result", (int)which);
	Fos__Response resp = FOS__RESPONSE__INIT;
	resp.result_case = which;
	memcpy((char *)&resp + f->offset, &result, sizeof result);
	return fosd_outs_reply(c, &resp, o, code);
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
