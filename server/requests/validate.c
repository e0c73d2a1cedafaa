/* validate.c: request validation before the backend (see validate.h). Every message names the
 * field and the bad value. */
#include "validate.h"
#include "shm.h"
#include "ops.h" /* fosd_shm_validate_op */

#include <math.h>
#include <stdio.h>
#include <string.h>

#define INVALID FOS__CODE__INVALID_ARGUMENT

int fosd_request_op(const Fos__Request *rq)
{
	return fosd_op_of_case((int)rq->op_case);
}

/* ---- enums ---------------------------------------------------------------------------------- */

static int map_block(int v, int dflt, const char *what, int *out, char *msg, size_t msgsz)
{
	switch (v) {
	case FOS__BLOCK__BLOCK_DEFAULT:
		*out = dflt;
		return 0;
	case FOS__BLOCK__BLOCK_1X16:
		*out = FOS_BLOCK_1X16;
		return 0;
	case FOS__BLOCK__BLOCK_16X16:
		*out = FOS_BLOCK_16X16;
		return 0;
	}
	snprintf(msg, msgsz, "%s: unknown block mode %d", what, v);
	return -1;
}

static int map_err(int v, int *out, char *msg, size_t msgsz)
{
	if (v == FOS__ERR_MODE__ERR_MAE || v == FOS__ERR_MODE__ERR_MSE) {
		*out = v == FOS__ERR_MODE__ERR_MSE ? FOS_ERR_MSE : FOS_ERR_MAE;
		return 0;
	}
	snprintf(msg, msgsz, "unknown err_mode %d (0 = mae, 1 = mse)", v);
	return -1;
}

static int map_bound(uint32_t v, int dflt, int *out, char *msg, size_t msgsz)
{
	if (v == 0) {
		*out = dflt;
		return 0;
	}
	if (v == 256 || v == 448) {
		*out = (int)v;
		return 0;
	}
	snprintf(msg, msgsz, "bound %u is not 256 or 448", v);
	return -1;
}

/* The wire's FourOverSix into enum fos_scope; FOUR_OVER_SIX_DEFAULT gives dflt. */
static int map_scope(int v, int dflt, int *out, char *msg, size_t msgsz)
{
	int s = fos_scope_from_wire(v, dflt);
	if (s != -1 || (v == FOS__FOUR_OVER_SIX__FOUR_OVER_SIX_DEFAULT && dflt == -1)) {
		*out = s;
		return 0;
	}
	snprintf(msg, msgsz, "unknown four_over_six %d (0 = default, 1 = all, 2 = weights, 3 = activations, 4 = none)", v);
	return -1;
}

static int map_override(int v, int *out, char *msg, size_t msgsz)
{
	if (v >= FOS__OVERRIDE__OVERRIDE_DEFAULT && v <= FOS__OVERRIDE__OVERRIDE_DEQUANTIZED) {
		*out = v; /* the same numbers as enum fos_override */
		return 0;
	}
	snprintf(msg, msgsz, "unknown backward override %d", v);
	return -1;
}

/* ---- tensors -------------------------------------------------------------------------------- */

struct fosd_vctx {
	const uint8_t *data;
	size_t dlen;
	uint64_t max_end;
	char *msg;
	size_t msgsz;
	struct fosd_shm_req *shm; /* resolves shared-memory tensors (NULL: UNIMPLEMENTED) */
	const Fos__Request *rq;
};
typedef struct fosd_vctx vctx;

/* Resolves a tensor and checks its dtype and rank. Returns 0 or a code. */
static int get_tensor(vctx *v, const Fos__Tensor *t, const char *what, int dtype, int ndim, fosw_tensor *out)
{
	int code;
	if (t && t->cuda && v->shm) {
		if (fosd_dev_tensor_get(&v->shm->dev, t, what, fosd_shm_wants_snapshot(v->shm->op, what), out, &code,
					v->msg, v->msgsz))
			return code;
	} else if (t && t->shm && v->shm) {
		if (fosd_shm_tensor_get(v->shm, t, what, out, &code, v->msg, v->msgsz))
			return code;
	} else if (fosw_tensor_get(t, v->data, v->dlen, what, out, &v->max_end, &code, v->msg, v->msgsz))
		return code;
	if (dtype && out->dtype != dtype) {
		snprintf(v->msg, v->msgsz, "tensor %s has dtype %s, %s expected", what, fosw_dtype_name(out->dtype),
			 fosw_dtype_name(dtype));
		return INVALID;
	}
	if (ndim && out->ndim != ndim) {
		snprintf(v->msg, v->msgsz, "tensor %s has %d dimensions, %d expected", what, out->ndim, ndim);
		return INVALID;
	}
	return 0;
}

static int fail(vctx *v, const char *fmt, long long a, long long b)
{
	snprintf(v->msg, v->msgsz, fmt, a, b);
	return INVALID;
}

/* An f32 amax tensor of `want` values (one per row when row-scaled, else one), none NaN or
 * negative; +inf is allowed. */
static int check_amax(vctx *v, const fosw_tensor *amax, int64_t want)
{
	if (amax->shape[0] != want)
		return fail(v, "amax has %lld values, %lld expected", amax->shape[0], want);
	for (int64_t i = 0; i < want; i++) {
		float f;
		memcpy(&f, amax->ptr + 4 * i, 4);
		if (!(f >= 0.0f)) {
			snprintf(v->msg, v->msgsz, "amax[%lld] = %g is NaN or negative", (long long)i, (double)f);
			return INVALID;
		}
	}
	return 0;
}

/* The bytes result `result` adds to the reply message: 0 when the request has it written into a
 * region (its room is the region's, see fosd_shm_output_named), else bytes. */
static uint64_t inline_bytes(const vctx *v, const char *result, uint64_t bytes)
{
	return v->shm && fosd_shm_output_named(v->rq, result) ? 0 : bytes;
}

/* max_reply bounds the inline results only. */
static int reply_fits(vctx *v, uint64_t bytes, uint64_t max_reply)
{
	if (bytes + 4096 > max_reply) {
		snprintf(v->msg, v->msgsz, "the reply would be %llu bytes, over the %llu-byte message limit",
			 (unsigned long long)bytes, (unsigned long long)max_reply);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	return 0;
}

/* ---- per op --------------------------------------------------------------------------------- */

/* A PutWeightRequest's fields into a (a PutWeight's, or a Forward's put). */
static int v_put(vctx *v, const Fos__PutWeightRequest *r, fosd_put_args *a)
{
	int rc;
	if (fosd_check_name(r->name, "weight name", v->msg, v->msgsz))
		return INVALID;
	a->name = r->name;
	a->version = r->version;
	if ((rc = get_tensor(v, r->w, "w", FOS__DTYPE__DTYPE_BF16, 2, &a->w)))
		return rc;
	a->opts = fos_linear_opts_default();
	if (r->config) {
		if (map_block(r->config->weight_block, FOS_BLOCK_16X16, "weight_block", &a->opts.weight_block, v->msg,
			      v->msgsz) ||
		    map_err(r->config->err_mode, &a->opts.err_mode, v->msg, v->msgsz) ||
		    map_bound(r->config->bound, 256, &a->opts.bound, v->msg, v->msgsz) ||
		    map_scope(r->config->four_over_six, FOS_SCOPE_ALL, &a->opts.four_over_six, v->msg, v->msgsz))
			return INVALID;
	}
	fos_err e;
	/* M is not known yet (any M >= 1 is allowed): 1 stands in; N and K must be multiples of 16 */
	if (fos_linear_check(&a->opts, 1, a->w.shape[0], a->w.shape[1], NULL, &e)) {
		snprintf(v->msg, v->msgsz, "w (%lld, %lld): %s", (long long)a->w.shape[0], (long long)a->w.shape[1],
			 e.msg);
		return INVALID;
	}
	a->pin = r->pin;
	a->keep_master = !r->drop_master;
	/* without the master, a quantized backward needs the columnwise copy made now */
	a->want_col = r->eager_columnwise || r->drop_master;
	return 0;
}

int fosd_validate_put(vctx *v, const Fos__Request *rq, fosd_args *args, uint64_t max_reply)
{
	(void)max_reply;
	return v_put(v, rq->put_weight, &args->u.put);
}

/* A Forward's put (ForwardRequest.put): a PutWeight of the forward's own weight, on the forward's
 * device, without a check. */
static int v_forward_put(vctx *v, const Fos__ForwardRequest *r, fosd_fwd_args *a)
{
	const Fos__PutWeightRequest *p = r->put;
	int rc;
	if (strcmp(p->name, r->weight)) {
		snprintf(v->msg, v->msgsz, "forward.put.name is '%.128s' but forward.weight is '%.128s': a put inside a "
			 "forward puts the forward's own weight", p->name, r->weight);
		return INVALID;
	}
	if (!p->version) {
		snprintf(v->msg, v->msgsz, "forward.put.version is 0: a put inside a forward names its version (nonzero)");
		return INVALID;
	}
	if (r->weight_version && r->weight_version != p->version) {
		snprintf(v->msg, v->msgsz,
			 "forward.weight_version is %llu but forward.put.version is %llu: give 0 or the put's version",
			 (unsigned long long)r->weight_version, (unsigned long long)p->version);
		return INVALID;
	}
	if (p->n_devices || p->replicas) {
		snprintf(v->msg, v->msgsz, "forward.put has a placement (devices or replicas): a put inside a forward goes "
			 "to the forward's device; use PutWeight to place it");
		return INVALID;
	}
	if (r->expect) {
		snprintf(v->msg, v->msgsz, "forward.put cannot be combined with expect (a check puts nothing)");
		return INVALID;
	}
	if ((rc = v_put(v, p, &a->put)))
		return rc;
	a->has_put = 1;
	a->version = p->version;
	return 0;
}

/* A Forward's check: expect (bf16; its shape against Y's is checked by the op, which knows N) and
 * the criterion. */
static int v_expect(vctx *v, const Fos__ForwardRequest *r, fosd_fwd_args *a)
{
	int rc;
	const Fos__CheckCriterion *c = r->criterion;
	a->has_expect = r->expect != NULL;
	if (!a->has_expect) {
		if (c) {
			snprintf(v->msg, v->msgsz, "criterion is set but there is no expect to check");
			return INVALID;
		}
		return 0;
	}
	if ((rc = get_tensor(v, r->expect, "expect", FOS__DTYPE__DTYPE_BF16, 0, &a->expect)))
		return rc;
	if (r->save_context) {
		snprintf(v->msg, v->msgsz, "save_context cannot be combined with expect (a check keeps no context)");
		return INVALID;
	}
	if (!c)
		return 0;
	if (!c->by_max_ulps && c->max_ulps) {
		snprintf(v->msg, v->msgsz, "criterion.max_ulps = %u is given but by_max_ulps is false", c->max_ulps);
		return INVALID;
	}
	if (!c->by_min_sqnr && c->min_sqnr_db != 0) {
		snprintf(v->msg, v->msgsz, "criterion.min_sqnr_db = %g is given but by_min_sqnr is false", c->min_sqnr_db);
		return INVALID;
	}
	if (c->by_min_sqnr && !isfinite(c->min_sqnr_db)) {
		snprintf(v->msg, v->msgsz, "criterion.min_sqnr_db = %g is not a finite number", c->min_sqnr_db);
		return INVALID;
	}
	a->crit.by_max_ulps = c->by_max_ulps;
	a->crit.max_ulps = c->max_ulps;
	a->crit.by_min_sqnr = c->by_min_sqnr;
	a->crit.min_sqnr_db = c->min_sqnr_db;
	return 0;
}

int fosd_validate_forward(vctx *v, const Fos__Request *rq, fosd_args *args, uint64_t max_reply)
{
	const Fos__ForwardRequest *r = rq->forward;
	fosd_fwd_args *a = &args->u.fwd;
	(void)max_reply;
	int rc;
	if (fosd_check_name(r->weight, "weight name", v->msg, v->msgsz))
		return INVALID;
	a->weight = r->weight;
	a->version = r->weight_version;
	if ((rc = get_tensor(v, r->x, "x", FOS__DTYPE__DTYPE_BF16, 2, &a->x)))
		return rc;
	a->has_bias = r->bias != NULL;
	if (a->has_bias && (rc = get_tensor(v, r->bias, "bias", FOS__DTYPE__DTYPE_BF16, 1, &a->bias)))
		return rc;
	if ((rc = v_expect(v, r, a)))
		return rc;
	if (map_override(r->override, &a->override, v->msg, v->msgsz) ||
	    map_scope(r->four_over_six, -1, &a->four_over_six, v->msg, v->msgsz))
		return INVALID;
	a->row_scaled = r->row_scaled;
	a->save = r->save_context;
	if (r->context_id && !r->save_context) {
		snprintf(v->msg, v->msgsz, "context_id %016llx is set without save_context (it names the context to save)",
			 (unsigned long long)r->context_id);
		return INVALID;
	}
	a->skip_output = r->skip_output;
	if (r->put && (rc = v_forward_put(v, r, a)))
		return rc;
	/* a target for Y that no Y will fill: refused, as one for a skipped gradient is */
	int yi = fosd_shm_output_index(rq, "y");
	if (yi >= 0 && (a->has_expect || a->skip_output)) {
		snprintf(v->msg, v->msgsz,
			 "shm_outputs[%d] names y, but %s is set: %s returns no Y (drop the y entry or %s)", yi,
			 a->has_expect ? "expect" : "skip_output", a->has_expect ? "a check" : "a forward with skip_output",
			 a->has_expect ? "expect" : "skip_output");
		return INVALID;
	}
	/* the shape rule (NUMERICS.md section 8) as far as X shows it; N and K against the weight later */
	if (a->x.shape[0] < 1)
		return fail(v, "x (%1$lld, %2$lld): M = %1$lld: M must be at least 1", a->x.shape[0], a->x.shape[1]);
	if (a->x.shape[1] < 1 || a->x.shape[1] % 16)
		return fail(v, "x (%1$lld, %2$lld): K = %2$lld is not a positive multiple of 16 (N and K must be)",
			    a->x.shape[0], a->x.shape[1]);
	return 0;
}

int fosd_validate_backward(vctx *v, const Fos__Request *rq, fosd_args *args, uint64_t max_reply)
{
	const Fos__BackwardRequest *r = rq->backward;
	fosd_bwd_args *a = &args->u.bwd;
	(void)max_reply;
	a->id = r->context_id;
	a->keep = r->keep_context;
	a->skip_dx = r->skip_dx;
	a->skip_dw = r->skip_dw;
	for (size_t i = 0; i < rq->n_shm_outputs; i++) {
		const char *res = rq->shm_outputs[i] ? rq->shm_outputs[i]->result : NULL;
		if (res && ((a->skip_dx && !strcmp(res, "dx")) || (a->skip_dw && !strcmp(res, "dw")))) {
			snprintf(v->msg, v->msgsz, "shm_outputs[%zu] names %s, which backward.skip_%s leaves out", i, res, res);
			return INVALID;
		}
	}
	return get_tensor(v, r->dy, "dy", FOS__DTYPE__DTYPE_BF16, 2, &a->dy);
}

int fosd_validate_quantize(vctx *v, const Fos__Request *rq, fosd_args *args, uint64_t max_reply)
{
	const Fos__QuantizeRequest *r = rq->quantize;
	fosd_quant_args *a = &args->u.quant;
	(void)max_reply;
	int rc;
	if ((rc = get_tensor(v, r->x, "x", 0, 2, &a->x)))
		return rc;
	if (a->x.dtype != FOS__DTYPE__DTYPE_BF16 && a->x.dtype != FOS__DTYPE__DTYPE_F32) {
		snprintf(v->msg, v->msgsz, "tensor x has dtype %s, bf16 or f32 expected", fosw_dtype_name(a->x.dtype));
		return INVALID;
	}
	a->dtype = a->x.dtype == FOS__DTYPE__DTYPE_F32 ? FOS_F32 : FOS_BF16;
	a->cfg = fos_qcfg_default();
	if (r->config) {
		const Fos__QuantConfig *c = r->config;
		if (c->recipe != FOS__RECIPE__RECIPE_4OVER6 && c->recipe != FOS__RECIPE__RECIPE_NVFP4) {
			snprintf(v->msg, v->msgsz, "unknown recipe %d", (int)c->recipe);
			return INVALID;
		}
		a->cfg.recipe = c->recipe == FOS__RECIPE__RECIPE_NVFP4 ? FOS_RECIPE_NVFP4 : FOS_RECIPE_4OVER6;
		int nv = a->cfg.recipe == FOS_RECIPE_NVFP4;
		if (map_block(c->block, FOS_BLOCK_1X16, "block", &a->cfg.block, v->msg, v->msgsz) ||
		    map_err(c->err_mode, &a->cfg.err_mode, v->msg, v->msgsz) ||
		    map_bound(c->bound, nv ? 448 : 256, &a->cfg.bound, v->msg, v->msgsz))
			return INVALID;
		a->cfg.row_scaled = c->row_scaled;
	}
	fos_err e;
	if (fos_qcfg_check(&a->cfg, a->x.shape[0], a->x.shape[1], &e)) {
		snprintf(v->msg, v->msgsz, "x (%lld, %lld): %s", (long long)a->x.shape[0], (long long)a->x.shape[1],
			 e.msg);
		return INVALID;
	}
	a->has_amax = r->amax != NULL;
	if (a->has_amax) {
		if ((rc = get_tensor(v, r->amax, "amax", FOS__DTYPE__DTYPE_F32, 1, &a->amax)))
			return rc;
		if ((rc = check_amax(v, &a->amax, a->cfg.row_scaled ? a->x.shape[0] : 1)))
			return rc;
	}
	return 0;
}

int fosd_validate_dequantize(vctx *v, const Fos__Request *rq, fosd_args *args, uint64_t max_reply)
{
	const Fos__DequantizeRequest *r = rq->dequantize;
	fosd_deq_args *a = &args->u.deq;
	int rc;
	if ((rc = get_tensor(v, r->codes, "codes", FOS__DTYPE__DTYPE_U8, 2, &a->codes)) ||
	    (rc = get_tensor(v, r->scales, "scales", FOS__DTYPE__DTYPE_E4M3, 2, &a->scales)) ||
	    (rc = get_tensor(v, r->amax, "amax", FOS__DTYPE__DTYPE_F32, 1, &a->amax)))
		return rc;
	a->rows = a->codes.shape[0];
	a->cols = a->codes.shape[1] * 2;
	if (a->cols % 16)
		return fail(v, "codes (%lld, %lld): the column count (2 per byte) must be divisible by 16",
			    a->codes.shape[0], a->codes.shape[1]);
	if (a->scales.shape[0] != a->rows || a->scales.shape[1] != a->cols / 16) {
		snprintf(v->msg, v->msgsz, "scales (%lld, %lld) do not match codes (%lld, %lld): (%lld, %lld) expected",
			 (long long)a->scales.shape[0], (long long)a->scales.shape[1], (long long)a->codes.shape[0],
			 (long long)a->codes.shape[1], (long long)a->rows, (long long)(a->cols / 16));
		return INVALID;
	}
	/* scales are never negative (NUMERICS.md section 1): a sign bit is refused here, so no backend
	 * ever sees a byte outside 0x00..0x7F */
	for (size_t i = 0; i < a->scales.len; i++)
		if (a->scales.ptr[i] & 0x80) {
			snprintf(v->msg, v->msgsz, "scales[%lld, %lld] = 0x%02x is negative (the sign bit is set)",
				 (long long)(i / (size_t)a->scales.shape[1]), (long long)(i % (size_t)a->scales.shape[1]),
				 a->scales.ptr[i]);
			return INVALID;
		}
	a->row_scaled = r->row_scaled;
	if ((rc = check_amax(v, &a->amax, a->row_scaled ? a->rows : 1)))
		return rc;
	if (map_bound(r->bound, 256, &a->bound, v->msg, v->msgsz))
		return INVALID;
	if (r->out_dtype == FOS__DTYPE__DTYPE_UNSPECIFIED || r->out_dtype == FOS__DTYPE__DTYPE_BF16)
		a->out_dtype = FOS_BF16;
	else if (r->out_dtype == FOS__DTYPE__DTYPE_F32)
		a->out_dtype = FOS_F32;
	else {
		snprintf(v->msg, v->msgsz, "out_dtype %s: bf16 or f32 expected", fosw_dtype_name(r->out_dtype));
		return INVALID;
	}
	return reply_fits(v, inline_bytes(v, "out", (uint64_t)a->rows * (uint64_t)a->cols * fos_dtype_size(a->out_dtype)),
			  max_reply);
}

int fosd_validate_linear(vctx *v, const Fos__Request *rq, fosd_args *args, uint64_t max_reply)
{
	const Fos__LinearRequest *r = rq->linear;
	fosd_lin_args *a = &args->u.lin;
	int rc;
	if ((rc = get_tensor(v, r->x, "x", FOS__DTYPE__DTYPE_BF16, 2, &a->x)) ||
	    (rc = get_tensor(v, r->w, "w", FOS__DTYPE__DTYPE_BF16, 2, &a->w)))
		return rc;
	a->has_bias = r->bias != NULL;
	a->has_dy = r->dy != NULL;
	if (a->has_bias && (rc = get_tensor(v, r->bias, "bias", FOS__DTYPE__DTYPE_BF16, 1, &a->bias)))
		return rc;
	if (a->has_dy && (rc = get_tensor(v, r->dy, "dy", FOS__DTYPE__DTYPE_BF16, 2, &a->dy)))
		return rc;
	int64_t m = a->x.shape[0], k = a->x.shape[1], n = a->w.shape[0];
	if (a->w.shape[1] != k)
		return fail(v, "w has K = %lld but x has K = %lld", a->w.shape[1], k);
	if (a->has_bias && a->bias.shape[0] != n)
		return fail(v, "bias has %lld values but w has N = %lld", a->bias.shape[0], n);
	if (a->has_dy && (a->dy.shape[0] != m || a->dy.shape[1] != n)) {
		snprintf(v->msg, v->msgsz, "dy is (%lld, %lld) but Y is (%lld, %lld)", (long long)a->dy.shape[0],
			 (long long)a->dy.shape[1], (long long)m, (long long)n);
		return INVALID;
	}
	a->opts = fos_linear_opts_default();
	if (r->options) {
		const Fos__LinearOptions *o = r->options;
		if (map_override(o->override, &a->opts.override, v->msg, v->msgsz) ||
		    map_block(o->weight_block, FOS_BLOCK_16X16, "weight_block", &a->opts.weight_block, v->msg,
			      v->msgsz) ||
		    map_err(o->err_mode, &a->opts.err_mode, v->msg, v->msgsz) ||
		    map_bound(o->bound, 256, &a->opts.bound, v->msg, v->msgsz) ||
		    map_scope(o->four_over_six, FOS_SCOPE_ALL, &a->opts.four_over_six, v->msg, v->msgsz))
			return INVALID;
		a->opts.row_scaled = o->row_scaled;
	}
	fos_err e;
	if (fos_linear_check(&a->opts, m, n, k, &a->resolved, &e)) {
		snprintf(v->msg, v->msgsz, "%s", e.msg);
		return INVALID;
	}
	uint64_t out = inline_bytes(v, "y", (uint64_t)m * (uint64_t)n * 2);
	if (a->has_dy)
		out += inline_bytes(v, "dx", (uint64_t)m * (uint64_t)k * 2) + inline_bytes(v, "dw", (uint64_t)n * (uint64_t)k * 2) +
		       (a->has_bias ? inline_bytes(v, "db", (uint64_t)n * 2) : 0);
	return reply_fits(v, out, max_reply);
}

int fosd_validate(const Fos__Request *rq, const uint8_t *data, size_t dlen, uint64_t max_reply, fosd_args *a,
		  char *msg, size_t msgsz)
{
	return fosd_validate_shm(rq, data, dlen, max_reply, NULL, a, msg, msgsz);
}

/* ---- validators of the requests with one field (the others are above) --------------------- */

int fosd_validate_drop(vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply)
{
	(void)max_reply;
	if (fosd_check_name(rq->drop_weight->name, "weight name", v->msg, v->msgsz))
		return INVALID;
	a->u.drop_name = rq->drop_weight->name;
	return 0;
}

int fosd_validate_release(vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply)
{
	(void)v;
	(void)max_reply;
	a->u.release_id = rq->release_context->context_id;
	return 0;
}

int fosd_validate_region_op(vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply)
{
	(void)a;
	(void)max_reply;
	return fosd_shm_validate_op(rq, v->msg, v->msgsz); /* ops_shm.c */
}

int fosd_validate_close_device(vctx *v, const Fos__Request *rq, fosd_args *a, uint64_t max_reply)
{
	(void)a;
	(void)max_reply;
	size_t n = rq->close_device_memory->ipc_handle.len;
	if (n != FOSD_DEV_HANDLE_BYTES) {
		snprintf(v->msg, v->msgsz, "ipc_handle is %zu bytes; a CUDA IPC memory handle is %d", n,
			 FOSD_DEV_HANDLE_BYTES);
		return INVALID;
	}
	return 0;
}

int fosd_validate_shm(const Fos__Request *rq, const uint8_t *data, size_t dlen, uint64_t max_reply,
		      struct fosd_shm_req *shm, fosd_args *a, char *msg, size_t msgsz)
{
	vctx v = {data, dlen, 0, msg, msgsz, shm, rq};
	memset(a, 0, sizeof *a);
	a->op = fosd_request_op(rq);
	if (a->op == FOSD_OP_INVALID) {
		snprintf(msg, msgsz, "the request names no operation (or one this fosd does not know)");
		return INVALID;
	}
	const fosd_op_def *d = fosd_op_def_of(a->op);
	int rc = d->validate ? d->validate(&v, rq, a, max_reply) : 0;
	if (rc)
		return rc;
	if (fosw_check_trailing(v.max_end, dlen, msg, msgsz))
		return INVALID;
	return 0;
}
