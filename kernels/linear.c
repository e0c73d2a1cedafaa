/* linear.c: the linear layer (forward, and backward under each override, NUMERICS.md sections 4, 7
 * and 8), composed from the backend ops and the quantized tensors and weights of qtensor.c, so every
 * backend gets the same data flow. All buffers live in backend memory.
 *
 * Shapes: M is any value >= 1, N and K positive multiples of 16, and the outputs are defined as the
 * slices of the same layer on inputs zero-padded to multiples of 128. Zero padding is exact (no
 * amax, code, scale or 4/6 pick of a real element changes, and a padded element adds exactly +0 to
 * a sum), so only what needs it is padded, and only to 16: blocks along K and N are whole for any
 * multiple of 16, while the columnwise quantizations of X and dY have their blocks along M. So the
 * saved columnwise X is (K, Mp) and the backward's dY^T and every GEMM that sums over M (dW) see dY
 * and X with M padded by zero rows to Mp, the next multiple of 16; everything else runs on the
 * real M rows.
 *
 * Weights keep only what their uses need (enum fos_wuse): codes, scales and amax, never a bf16
 * operand. A GEMM that reads W's operand gets it from the caller (fos_wops: a decoded copy, or a
 * scratch buffer to decode into) or decodes it into a buffer of the call; be->decode is exact, so
 * the bits are those of any decoded copy of the same codes. A forward whose shape the backend's
 * gemm_w4 takes (cuda: M <= 128) decodes nothing: that GEMM reads the codes itself, with be->gemm's
 * bits on the decoded W, so a row's bits do not depend on M across the switch. */
#include "backend.h"
#include "fos_format.h"

#include <stdio.h>
#include <string.h>

/* ---- scratch buffers freed together -------------------------------------------------------- */

typedef struct {
	fos_backend *be;
	void *p[16];
	int n;
} scratch;

static void *scr_alloc(scratch *s, size_t bytes)
{
	if (s->n == 16)
		return 0;
	void *p = s->be->alloc(s->be, bytes);
	if (p)
		s->p[s->n++] = p;
	return p;
}

static void scr_free(scratch *s)
{
	for (int i = 0; i < s->n; i++)
		s->be->free(s->be, s->p[i]);
	s->n = 0;
}

/* 256-byte alignment of the parts carved from one allocation (quantize_once). */
static size_t carve_up(size_t n)
{
	return (n + 255) / 256 * 256;
}

/* The forward's quantized X when nothing keeps it afterwards: codes, scales, amax and the decoded
 * operand carved from one backend allocation *block (one alloc and one free instead of four of
 * each: the small forward is bound by such host work). Free with be->free(be, *block) only. */
static int quantize_once(fos_backend *be, const void *x, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			 fos_qtensor *q, uint16_t **dec, void **block, fos_err *err)
{
	size_t nc = (size_t)(rows * cols / 2), ns = (size_t)(rows * cols / 16);
	size_t na = sizeof(float) * (size_t)(cfg->row_scaled ? rows : 1), nd = (size_t)(rows * cols) * 2;
	size_t os = carve_up(nc), oa = os + carve_up(ns), od = oa + carve_up(na);
	uint8_t *b = be->alloc(be, od + nd);
	memset(q, 0, sizeof *q);
	*dec = 0;
	*block = 0;
	if (!b)
		return fos_seterr(err, FOS_ENOMEM, "out of backend memory for a quantized (%lld, %lld) operand",
				  (long long)rows, (long long)cols);
	q->rows = rows;
	q->cols = cols;
	q->row_scaled = cfg->row_scaled;
	q->bound = 256;
	q->codes = b;
	q->scales = b + os;
	q->amax = (float *)(b + oa);
	uint16_t *d = (uint16_t *)(b + od);
	int rc = be->quantize(be, x, FOS_BF16, rows, cols, cfg, 0, q, d, err);
	if (rc) {
		be->free(be, b);
		memset(q, 0, sizeof *q);
		return rc;
	}
	*dec = d;
	*block = b;
	return FOS_OK;
}

/* M padded for the quantizations along M and the sums over M (see the top). */
static int64_t pad16(int64_t v)
{
	return (v + 15) / 16 * 16;
}

/* dst (rows_p, cols) bf16 = src (rows, cols) followed by rows_p - rows zero rows (stream-ordered). */
static int pad_rows(fos_backend *be, const uint16_t *src, int64_t rows, int64_t rows_p, int64_t cols, uint16_t *dst,
		    fos_err *err)
{
	size_t have = (size_t)(rows * cols) * 2, all = (size_t)(rows_p * cols) * 2;
	int rc = be->d2d(be, dst, src, have, err);
	if (!rc && all > have)
		rc = be->zero(be, (uint8_t *)dst + have, all - have, err);
	return rc;
}

/* rn(1 / D) of a quantized operand's own bound (plain NVFP4: 448), the GEMM epilogue's dinv. */
static float q_dinv(const fos_qtensor *q)
{
	return 1.0f / fos_bound_d(q->bound);
}

/* A decoded weight operand for one GEMM: the caller's (have), else decoded now into wo's scratch
 * or, without one, into a buffer of this call (*own, to free with be->free after the GEMM,
 * stream-ordered). */
static int wop_get(fos_backend *be, const fos_qweight *qw, const fos_wops *wo, int col, const uint16_t *have,
		   const uint16_t **out, void **own, fos_err *err)
{
	size_t bytes = (size_t)(qw->n * qw->k) * 2;
	*own = 0;
	if (have) {
		*out = have;
		return FOS_OK;
	}
	uint16_t *d;
	if (wo && wo->ws) {
		d = fos_wscratch_get(be, wo->ws, bytes, err);
		if (!d)
			return err ? err->rc : FOS_ENOMEM;
	} else {
		d = be->alloc(be, bytes);
		if (!d)
			return fos_seterr(err, FOS_ENOMEM, "out of backend memory for the weight's (%lld, %lld) bf16 operand",
					  (long long)(col ? qw->k : qw->n), (long long)(col ? qw->n : qw->k));
		*own = d;
	}
	int rc = fos_qweight_decode(be, qw, col, d, err);
	if (rc) {
		if (*own)
			be->free(be, *own);
		*own = 0;
		return rc;
	}
	*out = d;
	return FOS_OK;
}

/* The rowwise decoded W a forward's GEMM reads, as wop_get gives it; when W is decoded now and the
 * backend has a side stream, the decode is queued there, beside the X quantize that follows (*side
 * 1: the caller calls side_join before the GEMM, and before freeing *own, whatever happens). */
static int wop_get_beside(fos_backend *be, const fos_qweight *qw, const fos_wops *wo, const uint16_t **out,
			  void **own, int *side, fos_err *err)
{
	const uint16_t *have = wo ? wo->wdec : 0;
	*side = 0;
	*own = 0;
	if (!have && be->side_begin && be->side_end && be->side_join) {
		int rc = be->side_begin(be, err);
		if (rc)
			return rc;
		*side = 1;
		rc = wop_get(be, qw, wo, 0, have, out, own, err);
		fos_err e2;
		int rc2 = be->side_end(be, rc ? &e2 : err);
		return rc ? rc : rc2;
	}
	return wop_get(be, qw, wo, 0, have, out, own, err);
}

/* After the X quantize of a forward whose W came from wop_get_beside: the main stream waits for
 * the decode. rc: the forward's status so far (kept when not OK). */
static int wop_join(fos_backend *be, int side, int rc, fos_err *err)
{
	if (!side)
		return rc;
	fos_err e2;
	int rj = be->side_join(be, rc ? &e2 : err);
	return rc ? rc : rj;
}

/* FOS_EINVAL naming the use qw was not made for, when it lacks use. */
static int need_use(const fos_qweight *qw, int use, const char *what, fos_err *err)
{
	if (qw->uses & use)
		return FOS_OK;
	char have[80];
	return fos_seterr(err, FOS_EINVAL, "%s needs the weight use '%s'; the weight was made for %s", what,
			  fos_use_name(use), fos_uses_str(qw->uses, have, sizeof have));
}

/* ---- forward ------------------------------------------------------------------------------- */

static int opts_match(const fos_linear_opts *o, const fos_qweight *qw, fos_err *err)
{
	int w46 = fos_scope_w46(qw->opts.four_over_six);
	if (fos_scope_w46(o->four_over_six) != w46)
		return fos_seterr(err, FOS_EINVAL,
				  "four_over_six '%s' quantizes W %s, but the weight was quantized for '%s' (W %s): "
				  "quantize it again for '%s'",
				  fos_scope_name(o->four_over_six), w46 ? "plain" : "with 4/6",
				  fos_scope_name(qw->opts.four_over_six), w46 ? "with 4/6" : "plain",
				  fos_scope_name(o->four_over_six));
	if (o->weight_block != qw->opts.weight_block || o->err_mode != qw->opts.err_mode ||
	    o->bound != qw->opts.bound)
		return fos_seterr(err, FOS_EINVAL,
				  "options (block %s, err %s, bound %d) differ from the weight's (block %s, err %s, bound %d)",
				  o->weight_block ? "16x16" : "1x16", o->err_mode ? "mse" : "mae", o->bound,
				  qw->opts.weight_block ? "16x16" : "1x16", qw->opts.err_mode ? "mse" : "mae",
				  qw->opts.bound);
	return FOS_OK;
}

void fos_saved_free(fos_backend *be, fos_saved *s)
{
	fos_qtensor_free(be, &s->xq);
	fos_qtensor_free(be, &s->xcol);
	if (s->xcol_decoded)
		be->free(be, s->xcol_decoded);
	if (s->x)
		be->free(be, s->x);
	if (s->x_amax)
		be->free(be, s->x_amax);
	memset(s, 0, sizeof *s);
}

size_t fos_saved_bytes(const fos_saved *s)
{
	size_t mk = (size_t)(s->m * s->k), b = 0;
	if (s->xq.codes)
		b += fos_qtensor_bytes(s->m, s->k, s->xq.row_scaled);
	if (s->xcol.codes) /* (K, Mp) */
		b += fos_qtensor_bytes(s->k, s->xcol.cols, 0) + 2 * (size_t)(s->k * s->xcol.cols);
	if (s->x)
		b += 2 * mk;
	return b;
}

/* 1 when the forward's GEMM reads W's codes itself (be->gemm_w4: the backend takes this shape), so
 * no decoded W is needed; its bits are those of be->gemm on the decoded W. */
static int fwd_w4(fos_backend *be, int64_t m, const fos_qweight *qw)
{
	return be->gemm_w4 && be->gemm_w4_takes && be->gemm_w4_takes(be, m, qw->n, qw->k);
}

/* The forward's GEMM: be->gemm_w4 on W's codes when taken, else be->gemm on the decoded wdec. */
static int fwd_gemm(fos_backend *be, const uint16_t *xdec, const uint16_t *wdec, int64_t m, const fos_qweight *qw,
		    const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	if (!wdec)
		return be->gemm_w4(be, xdec, &qw->q, m, epi, y, err);
	return be->gemm(be, xdec, wdec, m, qw->n, qw->k, epi, y, err);
}

/* The forward when nothing is kept for a backward: decode W (unless wo has it), quantize X, then
 * the GEMM; only stream-ordered work, no wait (y is read through this backend: a d2h, which
 * waits, or a later op on its stream), so the d2h is queued behind the GEMM instead of after a
 * host round trip. */
typedef struct fwd_plain {
	const uint16_t *x;
	int64_t m;
	const fos_qweight *qw;
	const fos_wops *wo;
	const fos_linear_opts *o;
	const uint16_t *bias;
	uint16_t *y;
} fwd_plain;

static int forward_plain(fos_backend *be, void *arg, fos_err *err)
{
	const fwd_plain *a = arg;
	const fos_linear_opts *o = a->o;
	fos_qtensor xq;
	uint16_t *xdec = 0;
	void *xblk = 0, *wown = 0;
	const uint16_t *wdec = 0;
	int side = 0, rc = FOS_OK;
	if (!fwd_w4(be, a->m, a->qw))
		rc = wop_get_beside(be, a->qw, a->wo, &wdec, &wown, &side, err);
	if (rc) {
		rc = wop_join(be, side, rc, err);
		if (wown)
			be->free(be, wown);
		return rc;
	}
	fos_qcfg c = fos_linear_xcfg(o, o->row_scaled);
	rc = quantize_once(be, a->x, a->m, a->qw->k, &c, &xq, &xdec, &xblk, err);
	rc = wop_join(be, side, rc, err);
	if (!rc) {
		/* each operand's scale with its own D (section 11) */
		fos_gemm_epi epi = {xq.amax, 1.0f / fos_bound_d(c.bound), a->qw->q.amax, q_dinv(&a->qw->q), 0, a->bias};
		if (o->row_scaled) {
			epi.a_amax = 0;
			epi.row_scale = xq.amax;
		}
		rc = fwd_gemm(be, xdec, wdec, a->m, a->qw, &epi, a->y, err);
		be->free(be, xblk); /* stream-ordered: after the GEMM */
	}
	if (wown)
		be->free(be, wown);
	return rc;
}

/* Small forwards go through be->replay: their work is the same every time for the same buffers,
 * and its host-side cost exceeds its GPU time (cuda_graph.cu). */
#define FOS_REPLAY_MAX_X_BYTES ((int64_t)2 << 20)

int fos_linear_forward(fos_backend *be, const uint16_t *x, int64_t m, const fos_qweight *qw,
		       const fos_linear_opts *o, const uint16_t *bias, uint16_t *y, fos_saved *saved, fos_err *err)
{
	return fos_linear_forward_w(be, x, m, qw, NULL, o, bias, y, saved, err);
}

int fos_linear_forward_w(fos_backend *be, const uint16_t *x, int64_t m, const fos_qweight *qw, const fos_wops *wo,
			 const fos_linear_opts *o, const uint16_t *bias, uint16_t *y, fos_saved *saved, fos_err *err)
{
	int ovr;
	int rc = fos_linear_check(o, m, qw->n, qw->k, &ovr, err);
	if (!rc)
		rc = opts_match(o, qw, err);
	if (!rc && saved)
		rc = need_use(qw, fos_use_of_override(ovr), "a forward saving a context for this override", err);
	if (rc)
		return rc;
	int64_t n = qw->n, k = qw->k;
	if (!saved) {
		fwd_plain a = {x, m, qw, wo, o, bias, y};
		/* the row-scaled epilogue uses scratch that may grow: never recorded */
		if (!be->replay || o->row_scaled || m * k * 2 > FOS_REPLAY_MAX_X_BYTES)
			return forward_plain(be, &a, err);
		struct {
			const void *x, *y, *bias, *wdec, *wcodes, *wscales, *wamax;
			int64_t m, n, k;
			int err_mode, bound, four_over_six, w4;
		} key;
		memset(&key, 0, sizeof key); /* padding too: keys are compared as bytes */
		key.x = x;
		key.y = y;
		key.bias = bias;
		/* the decoded operand the GEMM reads: the caller's, or the scratch (sized now: a replay writes
		 * the buffer of its key), or none (a buffer of the recorded work itself) */
		key.w4 = fwd_w4(be, m, qw); /* the GEMM reads the codes (no decoded operand) */
		if (key.w4)
			key.wdec = 0;
		else if (wo && wo->wdec)
			key.wdec = wo->wdec;
		else if (wo && wo->ws) {
			if (!fos_wscratch_get(be, wo->ws, (size_t)(n * k) * 2, err))
				return err ? err->rc : FOS_ENOMEM;
			key.wdec = wo->ws->p;
		}
		key.wcodes = qw->q.codes;
		key.wscales = qw->q.scales;
		key.wamax = qw->q.amax;
		key.m = m;
		key.n = n;
		key.k = k;
		key.err_mode = o->err_mode;
		key.bound = o->bound;
		key.four_over_six = o->four_over_six;
		return be->replay(be, &key, sizeof key, forward_plain, &a, err);
	}
	fos_qtensor xq;
	uint16_t *xdec = 0;
	void *xblk = 0, *wown = 0; /* xq and xdec in one allocation, unless saved keeps xq */
	const uint16_t *wdec = 0;
	int side = 0;
	if (!fwd_w4(be, m, qw) && (rc = wop_get_beside(be, qw, wo, &wdec, &wown, &side, err))) {
		rc = wop_join(be, side, rc, err);
		if (wown)
			be->free(be, wown);
		return rc;
	}
	fos_qcfg c = fos_linear_xcfg(o, o->row_scaled);
	if (ovr == FOS_OVR_DEQUANTIZED)
		rc = fos_qtensor_quantize_new(be, x, 0, m, k, &c, 0, &xq, &xdec, err);
	else
		rc = quantize_once(be, x, m, k, &c, &xq, &xdec, &xblk, err);
	rc = wop_join(be, side, rc, err);
	if (rc) {
		if (wown)
			be->free(be, wown);
		return rc;
	}
	fos_gemm_epi epi = {xq.amax, 1.0f / fos_bound_d(c.bound), qw->q.amax, q_dinv(&qw->q), 0, bias};
	if (o->row_scaled) {
		epi.a_amax = 0;
		epi.row_scale = xq.amax;
	}
	rc = fwd_gemm(be, xdec, wdec, m, qw, &epi, y, err);
	if (wown)
		be->free(be, wown); /* stream-ordered: after the GEMM */
	if (!xblk)
		be->free(be, xdec);
	if (!rc) {
		memset(saved, 0, sizeof *saved);
		saved->override = ovr;
		saved->four_over_six = o->four_over_six;
		saved->m = m;
		saved->n = n;
		saved->k = k;
		saved->has_bias = bias != 0;
		if (ovr == FOS_OVR_DEQUANTIZED) {
			saved->xq = xq; /* the rowwise forward operand, kept as is */
			memset(&xq, 0, sizeof xq);
		} else if (ovr == FOS_OVR_HIGH_PRECISION) {
			saved->x = be->alloc(be, (size_t)(m * k) * 2);
			rc = saved->x ? be->d2d(be, saved->x, x, (size_t)(m * k) * 2, err)
				      : fos_seterr(err, FOS_ENOMEM, "out of backend memory saving X");
		} else {
			/* x_col = X's recipe (4/6 or plain) on X^T (K x Mp), x_amax, 1x16: its blocks run
			 * along M, so X gets zero rows up to Mp (see the top) */
			int64_t mp = pad16(m);
			uint16_t *xp = 0;
			saved->x_amax = be->alloc(be, sizeof(float));
			rc = saved->x_amax ? be->d2d(be, saved->x_amax, xq.amax, sizeof(float), err)
					   : fos_seterr(err, FOS_ENOMEM, "out of backend memory saving X's amax");
			if (!rc && mp != m) {
				xp = be->alloc(be, (size_t)(mp * k) * 2);
				rc = xp ? pad_rows(be, x, m, mp, k, xp, err)
					: fos_seterr(err, FOS_ENOMEM, "out of backend memory padding X to %lld rows",
						     (long long)mp);
			}
			fos_qcfg cc = fos_linear_xcfg(o, 0);
			if (!rc)
				rc = fos_qtensor_quantize_new(be, xp ? xp : x, 1, k, mp, &cc, xq.amax, &saved->xcol,
						  &saved->xcol_decoded, err);
			if (!rc && !be->defer_sync) /* (a backend's frees are stream-ordered) */
				rc = be->sync(be, err);
			if (xp)
				be->free(be, xp);
		}
		if (rc)
			fos_saved_free(be, saved);
	}
	if (xblk)
		be->free(be, xblk); /* stream-ordered: after the GEMM and the saved copies that read it */
	else
		fos_qtensor_free(be, &xq);
	/* the saved operands may be used by another backend instance (fosd's lanes): wait for them */
	if (!rc && !be->defer_sync)
		rc = be->sync(be, err);
	return rc;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* dyp (mp, n) is dy with M padded to mp (dy itself when mp == m): the columnwise dY^T and the dW
 * GEMM read it; the rowwise dY and the dX GEMM use the real m rows. */
static int backward_quantized(fos_backend *be, const fos_saved *sv, const fos_qweight *qw, const fos_wops *wo,
			      const uint16_t *dy, const uint16_t *dyp, int64_t mp, uint16_t *dx, uint16_t *dw, scratch *s,
			      fos_err *err)
{
	int64_t m = sv->m, n = sv->n, k = sv->k;
	int rc;
	if (sv->xcol.cols != mp)
		return fos_seterr(err, FOS_EINVAL,
				  "saved context's columnwise X has %lld columns, not M = %lld padded to %lld",
				  (long long)sv->xcol.cols, (long long)m, (long long)mp);
	/* w_col's decoded operand (dX only): the caller's, or decoded now (freed with the scratch s) */
	const uint16_t *wcol = 0;
	void *wown = 0;
	if (dx && (rc = wop_get(be, qw, wo, 1, wo ? wo->wcol_dec : 0, &wcol, &wown, err)))
		return rc;
	if (wown && s->n < 16)
		s->p[s->n++] = wown;
	else if (wown) {
		be->free(be, wown);
		return fos_seterr(err, FOS_EINTERNAL, "backward scratch list full");
	}
	fos_qcfg g = {FOS_RECIPE_NVFP4, FOS_BLOCK_1X16, FOS_ERR_MAE, 448, 0};
	float *dy_amax = scr_alloc(s, sizeof(float));
	if (!dy_amax)
		return fos_seterr(err, FOS_ENOMEM, "out of backend memory for the gradient");
	if ((rc = be->amax(be, dy, FOS_BF16, m, n, 0, dy_amax, err)))
		return rc;
	/* w_col and x_col with the D of their own recipe (section 11) */
	float g_dinv = 1.0f / 2688.0f;
	fos_gemm_epi e1 = {dy_amax, g_dinv, qw->q.amax, q_dinv(&qw->qcol), 0, 0};
	fos_gemm_epi e2 = {dy_amax, g_dinv, sv->x_amax, q_dinv(&sv->xcol), 0, 0};
	if (be->grad_pair && dx && dw) {
		/* Both decoded gradient operands (the GEMMs use nothing else of the two quantizes) from one
		 * pass over dY: the same bytes as the two quantizes below, so the same GEMM calls give the
		 * same dX and dW. Peak memory: both (M, N) bf16 operands are live together during the dX
		 * GEMM, 4 M N bytes, where the path below holds one operand with its codes and scales at a
		 * time (2.5625 M N bytes). Out of memory, switched off or refused: that path. */
		uint16_t *drow = be->alloc(be, (size_t)(mp * n) * 2);
		uint16_t *dcol = drow ? be->alloc(be, (size_t)(mp * n) * 2) : 0;
		rc = dcol ? be->grad_pair(be, dyp, mp, n, dy_amax, drow, dcol, err) : FOS_ENOMEM;
		if (!rc) {
			/* dX = dY W: A = std-quantize(dY) along N (its first m rows), B = w_col */
			rc = be->gemm(be, drow, wcol, m, k, n, &e1, dx, err);
			be->free(be, drow);
			/* dW = dY^T X: A = std-quantize(dY^T) along M (same dy amax), B = x_col */
			if (!rc)
				rc = be->gemm(be, dcol, sv->xcol_decoded, n, k, mp, &e2, dw, err);
			be->free(be, dcol);
			return rc;
		}
		if (drow)
			be->free(be, drow);
		if (dcol)
			be->free(be, dcol);
		if (rc != FOS_ENOMEM && rc != FOS_EINVAL && rc != FOS_EUNSUPPORTED)
			return rc;
	}
	fos_qtensor dq;
	uint16_t *ddec = 0;
	/* dX = dY W: A = std-quantize(dY) along N, B = w_col */
	if (dx) {
		if ((rc = fos_qtensor_quantize_new(be, dy, 0, m, n, &g, dy_amax, &dq, &ddec, err)))
			return rc;
		rc = be->gemm(be, ddec, wcol, m, k, n, &e1, dx, err);
		fos_qtensor_free(be, &dq);
		be->free(be, ddec);
		if (rc)
			return rc;
	}
	if (!dw)
		return FOS_OK;
	/* dW = dY^T X: A = std-quantize(dY^T) along M (same dy amax), B = x_col */
	if ((rc = fos_qtensor_quantize_new(be, dyp, 1, n, mp, &g, dy_amax, &dq, &ddec, err)))
		return rc;
	rc = be->gemm(be, ddec, sv->xcol_decoded, n, k, mp, &e2, dw, err);
	fos_qtensor_free(be, &dq);
	be->free(be, ddec);
	return rc;
}

/* dX = dY @ Wop, dW = dY^T @ Xop with plain bf16 GEMMs; wop (N, K); dyp (mp, N) and xop (mp, K):
 * dY and X with M padded to mp (the dX GEMM reads the first m rows of dyp). zx, zw: NULL, or K bf16
 * added to each row of dW / dX after the cast (deq_zero_row). */
static int backward_bf16(fos_backend *be, const fos_saved *sv, const uint16_t *wop, const uint16_t *xop,
			 const uint16_t *dyp, int64_t mp, const uint16_t *zw, const uint16_t *zx, uint16_t *dx,
			 uint16_t *dw, scratch *s, fos_err *err)
{
	int64_t m = sv->m, n = sv->n, k = sv->k;
	fos_gemm_epi ex = fos_gemm_epi_plain(), ew = fos_gemm_epi_plain();
	ex.bias = zw;
	ew.bias = zx;
	if (be->gemm_ex) {
		/* dX[m, k] = sum_n dY[m, n] W[n, k]: W read as stored-transposed B.
		 * dW[n, k] = sum_m dY[m, n] X[m, k]: dY and X both read as stored-transposed. */
		int rc = dx ? be->gemm_ex(be, dyp, 0, wop, 1, m, k, n, &ex, dx, err) : FOS_OK;
		return rc || !dw ? rc : be->gemm_ex(be, dyp, 1, xop, 1, n, k, mp, &ew, dw, err);
	}
	int rc = FOS_OK;
	if (dx) {
		uint16_t *wt = scr_alloc(s, (size_t)(n * k) * 2);
		if (!wt)
			return fos_seterr(err, FOS_ENOMEM, "out of backend memory for the backward operands");
		rc = be->transpose(be, wop, wt, n, k, 2, err);
		if (!rc)
			rc = be->gemm(be, dyp, wt, m, k, n, &ex, dx, err);
	}
	if (rc || !dw)
		return rc;
	uint16_t *xt = scr_alloc(s, (size_t)(mp * k) * 2), *dyt = scr_alloc(s, (size_t)(mp * n) * 2);
	if (!xt || !dyt)
		return fos_seterr(err, FOS_ENOMEM, "out of backend memory for the backward operands");
	rc = be->transpose(be, dyp, dyt, mp, n, 2, err);
	if (!rc)
		rc = be->transpose(be, xop, xt, mp, k, 2, err);
	if (!rc)
		rc = be->gemm(be, dyt, xt, n, k, mp, &ew, dw, err);
	return rc;
}

/* The dequantized backward's one place where padding is not plain zeros: in the padded layer a
 * padded block of deq(X) or deq(W) is an all-zero block, which dequantizes to z = 0 * dec(0, amax)
 * (section 6): +0, or NaN when the per-tensor amax is +inf. Each padded index of a sum adds
 * 0 * z: nothing, or NaN. So when M (for dW) or N (for dX) is not a multiple of 128, the sum here
 * (over the real indices, the rest zeros) gets z added after the cast, through the bias epilogue:
 * bf16(y + 0) is y, y + NaN is NaN, the padded layer's output either way. (Row-scaled X pads rows
 * whose amax is 0, so z = +0 there: nothing to add.) *out = K bf16 copies of z. */
static int deq_zero_row(fos_backend *be, const fos_qtensor *q, int64_t cols, scratch *s, const uint16_t **out,
			fos_err *err)
{
	fos_qtensor z = {1, cols, q->bound, 0, 0, 0, q->amax};
	z.codes = scr_alloc(s, (size_t)cols / 2);
	z.scales = scr_alloc(s, (size_t)cols / 16);
	uint16_t *v = scr_alloc(s, (size_t)cols * 2);
	if (!z.codes || !z.scales || !v)
		return fos_seterr(err, FOS_ENOMEM, "out of backend memory for the padded blocks' value");
	int rc = be->zero(be, z.codes, (size_t)cols / 2, err);
	if (!rc)
		rc = be->zero(be, z.scales, (size_t)cols / 16, err);
	if (!rc)
		rc = be->dequantize(be, &z, FOS_BF16, v, err);
	*out = v;
	return rc;
}

int fos_linear_backward(fos_backend *be, const fos_saved *sv, const fos_qweight *qw, const uint16_t *dy,
			uint16_t *dx, uint16_t *dw, uint16_t *db, fos_err *err)
{
	return fos_linear_backward_w(be, sv, qw, NULL, dy, dx, dw, db, err);
}

int fos_linear_backward_w(fos_backend *be, const fos_saved *sv, const fos_qweight *qw, const fos_wops *wo,
			  const uint16_t *dy, uint16_t *dx, uint16_t *dw, uint16_t *db, fos_err *err)
{
	if (sv->override == FOS_OVR_QUANTIZED || sv->override == FOS_OVR_HIGH_PRECISION ||
	    sv->override == FOS_OVR_DEQUANTIZED) {
		int rc = need_use(qw, fos_use_of_override(sv->override), "this backward", err);
		if (rc)
			return rc;
	}
	if (sv->n != qw->n || sv->k != qw->k)
		return fos_seterr(err, FOS_EINVAL, "saved context is for a (%lld, %lld) weight, not (%lld, %lld)",
				  (long long)sv->n, (long long)sv->k, (long long)qw->n, (long long)qw->k);
	scratch s = {be, {0}, 0};
	int64_t m = sv->m, n = sv->n, k = sv->k, mp = pad16(m);
	int rc = FOS_OK;
	/* dY with zero rows up to Mp (see the top) */
	const uint16_t *dyp = dy;
	if (mp != m) {
		uint16_t *t = scr_alloc(&s, (size_t)(mp * n) * 2);
		rc = t ? pad_rows(be, dy, m, mp, n, t, err)
		       : fos_seterr(err, FOS_ENOMEM, "out of backend memory padding dY to %lld rows", (long long)mp);
		dyp = t;
	}
	if (rc) {
		/* no dY to work on */
	} else if (sv->override == FOS_OVR_QUANTIZED) {
		rc = backward_quantized(be, sv, qw, wo, dy, dyp, mp, dx, dw, &s, err);
	} else if (sv->override == FOS_OVR_HIGH_PRECISION) {
		const uint16_t *xp = sv->x;
		if (!qw->master)
			rc = fos_seterr(err, FOS_EINVAL, "high_precision backward needs the weight's master copy");
		else if (mp != m && dw) {
			uint16_t *t = scr_alloc(&s, (size_t)(mp * k) * 2);
			rc = t ? pad_rows(be, sv->x, m, mp, k, t, err)
			       : fos_seterr(err, FOS_ENOMEM, "out of backend memory padding X to %lld rows",
					    (long long)mp);
			xp = t;
		}
		if (!rc)
			rc = backward_bf16(be, sv, qw->master, xp, dyp, mp, 0, 0, dx, dw, &s, err);
	} else if (sv->override == FOS_OVR_DEQUANTIZED) {
		/* deq(W) (for dX) into the caller's scratch when there is one; deq(X) (for dW) */
		uint16_t *wd = !dx ? 0
			       : (wo && wo->ws) ? fos_wscratch_get(be, wo->ws, (size_t)(n * k) * 2, err)
						: scr_alloc(&s, (size_t)(n * k) * 2);
		uint16_t *xd = dw ? scr_alloc(&s, (size_t)(mp * k) * 2) : 0;
		rc = ((dx && !wd) || (dw && !xd)) ? fos_seterr(err, FOS_ENOMEM, "out of backend memory dequantizing operands")
						   : 0;
		if (!rc && wd)
			rc = be->dequantize(be, &qw->q, FOS_BF16, wd, err);
		if (!rc && xd)
			rc = be->dequantize(be, &sv->xq, FOS_BF16, xd, err);
		if (!rc && xd && mp != m) /* deq(X) with zero rows up to Mp */
			rc = be->zero(be, xd + m * k, (size_t)((mp - m) * k) * 2, err);
		const uint16_t *zw = 0, *zx = 0; /* see deq_zero_row */
		if (!rc && dx && n % 128)
			rc = deq_zero_row(be, &qw->q, k, &s, &zw, err);
		if (!rc && dw && m % 128 && !sv->xq.row_scaled)
			rc = deq_zero_row(be, &sv->xq, k, &s, &zx, err);
		if (!rc)
			rc = backward_bf16(be, sv, wd, xd, dyp, mp, zw, zx, dx, dw, &s, err);
	} else {
		rc = fos_seterr(err, FOS_EINVAL, "saved context has no resolved override (%d)", sv->override);
	}
	if (!rc && db)
		rc = be->colsum(be, dy, m, n, db, err);
	if (!rc && !be->defer_sync) /* (scr_free's frees are stream-ordered) */
		rc = be->sync(be, err);
	scr_free(&s);
	return rc;
}
