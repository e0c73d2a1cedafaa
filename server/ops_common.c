/* ops_common.c: the op table (fosd_execute) and the helpers of ops.h. */
#include "ops.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int fosd_code_of_rc(int rc)
{
	switch (rc) {
	case FOS_OK:
		return FOS__CODE__OK;
	case FOS_EINVAL:
		return FOS__CODE__INVALID_ARGUMENT;
	case FOS_ENOMEM:
		return FOS__CODE__RESOURCE_EXHAUSTED;
	case FOS_EUNSUPPORTED:
		return FOS__CODE__UNIMPLEMENTED;
	case FOSD_RC_PRECONDITION: /* a shared-memory region shrank (shm_req.c) */
		return FOS__CODE__FAILED_PRECONDITION;
	default:
		return FOS__CODE__INTERNAL;
	}
}

nng_msg *fosd_fail(fosd_slot *s, int *code, int c, const char *fmt, ...)
{
	char msg[FOSD_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	*code = c;
	if (c == FOS__CODE__INTERNAL)
		fosd_error("%s request %llu failed: %s", fosd_op_name(s->op), (unsigned long long)s->req_id, msg);
	return fosd_error_reply(s->req_id, c, msg);
}

void *fosd_dev_alloc(fosd_server *srv, size_t n, fos_err *e)
{
	void *p = fosd_be(srv)->alloc(fosd_be(srv), n);
	if (!p)
		fos_seterr(e, FOS_ENOMEM, "cannot allocate %zu bytes of %s memory", n, srv->be->name);
	return p;
}

void *fosd_dev_from(fosd_server *srv, const fosw_tensor *t, fos_err *e)
{
	void *p = fosd_dev_alloc(srv, t->len, e);
	if (p && fosd_tensor_h2d(srv, p, t, e)) { /* inline, or from a shm region */
		fosd_be(srv)->free(fosd_be(srv), p);
		return NULL;
	}
	return p;
}

void fosd_dev_free(fosd_server *srv, void *p)
{
	if (p)
		fosd_be(srv)->free(fosd_be(srv), p);
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

nng_msg *fosd_outs_reply(fosd_server *srv, fosd_slot *s, Fos__Response *resp, fosd_outs *o, int *code)
{
	resp->id = s->req_id;
	char smsg[FOSD_MSG_MAX];
	int sc = fosd_shm_outs_place(s, &resp->base, o, smsg, sizeof smsg); /* results asked into shm */
	if (sc)
		return fosd_fail(s, code, sc, "%s", smsg);
	if (o && o->pl.cursor + 4096 > srv->cfg->max_message_bytes)
		return fosd_fail(s, code, FOS__CODE__RESOURCE_EXHAUSTED,
				 "the reply would be %llu bytes, over the %llu-byte message limit",
				 (unsigned long long)o->pl.cursor, (unsigned long long)srv->cfg->max_message_bytes);
	uint8_t *data = NULL;
	nng_msg *m = fosd_build_reply(resp, o ? &o->pl : NULL, &data);
	if (!m)
		return fosd_fail(s, code, FOS__CODE__RESOURCE_EXHAUSTED, "out of memory allocating the reply");
	for (int i = 0; o && i < o->n; i++) {
		fos_err e;
		if (o->t[i].shm) {
			sc = fosd_shm_out_write(srv, s, i, o->dev[i], (size_t)o->t[i].length, smsg, sizeof smsg);
			if (sc) {
				nng_msg_free(m);
				return fosd_fail(s, code, sc, "writing result %d into shared memory: %s", i, smsg);
			}
			continue;
		}
		if (fosd_be(srv)->d2h(fosd_be(srv), data + o->t[i].offset, o->dev[i], (size_t)o->t[i].length, &e)) {
			nng_msg_free(m);
			return fosd_fail(s, code, fosd_code_of_rc(e.rc), "copying the result out: %s", e.msg);
		}
	}
	*code = 0;
	return m;
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
	out->config = cfg;
	out->bytes = in->bytes;
	out->pinned = in->pinned;
	out->has_master = in->has_master;
	out->has_columnwise = in->has_col;
	out->uses = in->uses;
	out->idle_ms = in->idle_ms;
}

nng_msg *fosd_execute(fosd_server *srv, fosd_slot *s, int *code)
{
	switch (s->op) {
	case FOSD_OP_PUT_WEIGHT:
		return fosd_op_put_weight(srv, s, code);
	case FOSD_OP_DROP_WEIGHT:
		return fosd_op_drop_weight(srv, s, code);
	case FOSD_OP_FORWARD:
		return fosd_op_forward(srv, s, code);
	case FOSD_OP_BACKWARD:
		return fosd_op_backward(srv, s, code);
	case FOSD_OP_RELEASE_CONTEXT:
		return fosd_op_release(srv, s, code);
	case FOSD_OP_QUANTIZE:
		return fosd_op_quantize(srv, s, code);
	case FOSD_OP_DEQUANTIZE:
		return fosd_op_dequantize(srv, s, code);
	case FOSD_OP_LINEAR:
		return fosd_op_linear(srv, s, code);
	case FOSD_OP_HEALTH:
		*code = 0;
		return fosd_op_health(srv, s);
	case FOSD_OP_STATS:
		*code = 0;
		return fosd_op_stats(srv, s);
	case FOSD_OP_LIST_WEIGHTS:
		return fosd_op_list_weights(srv, s, code);
	case FOSD_OP_REGISTER_REGION:
		return fosd_op_register_region(srv, s, code);
	case FOSD_OP_UNREGISTER_REGION:
		return fosd_op_unregister_region(srv, s, code);
	case FOSD_OP_LIST_REGIONS:
		return fosd_op_list_regions(srv, s, code);
	default:
		return fosd_fail(s, code, FOS__CODE__UNIMPLEMENTED, "operation not implemented");
	}
}
