/* cpu_quant.c: the CPU reference for amax, four-over-six quantize (1x16 and 16x16 blocks,
 * per-tensor and row-scaled), the plain NVFP4 quantize (the gradient's, and a plain operand's with
 * the same block shapes and amaxes, section 11), dequantize and decode (NUMERICS.md sections 1-6). Written to read like NUMERICS.md; rows are processed in parallel and
 * every output depends only on its own block, so the thread count never changes a bit. */
#include "cpu_internal.h"
#include "fos_format.h"

#include <stdlib.h>

static void load_row(const void *x, int dtype, int64_t cols, int64_t r, float *out);

/* Row r of the logical (rows, cols) input as floats; trans: x is stored (cols, rows). */
static void load_row_t(const void *x, int dtype, int64_t rows, int64_t cols, int64_t r, int trans, float *out)
{
	if (!trans) {
		load_row(x, dtype, cols, r, out);
		return;
	}
	for (int64_t c = 0; c < cols; c++)
		out[c] = dtype == FOS_F32 ? ((const float *)x)[c * rows + r]
					  : fos_bf16_to_f32(((const uint16_t *)x)[c * rows + r]);
}

static void load_row(const void *x, int dtype, int64_t cols, int64_t r, float *out)
{
	if (dtype == FOS_F32) {
		memcpy(out, (const float *)x + r * cols, (size_t)cols * 4);
		return;
	}
	const uint16_t *p = (const uint16_t *)x + r * cols;
	for (int64_t c = 0; c < cols; c++)
		out[c] = fos_bf16_to_f32(p[c]);
}

/* ---- amax ---------------------------------------------------------------------------------- */

typedef struct {
	const void *x;
	int dtype;
	int64_t cols;
	float *row_amax;
} amax_job;

static void amax_rows(void *ctx, int64_t r0, int64_t r1)
{
	amax_job *j = ctx;
	for (int64_t r = r0; r < r1; r++) {
		float m = 0.0f;
		if (j->dtype == FOS_F32) {
			const float *p = (const float *)j->x + r * j->cols;
			for (int64_t c = 0; c < j->cols; c++) /* amax of the value cast to bf16 */
				m = fos_absmax(m, fos_bf16_to_f32(fos_f32_to_bf16(p[c])));
		} else {
			const uint16_t *p = (const uint16_t *)j->x + r * j->cols;
			for (int64_t c = 0; c < j->cols; c++)
				m = fos_absmax(m, fos_bf16_to_f32(p[c]));
		}
		j->row_amax[r] = m;
	}
}

int cpu_amax(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, int per_row, float *out,
	     fos_err *err)
{
	if (rows <= 0 || cols <= 0)
		return fos_seterr(err, FOS_EINVAL, "amax of an empty tensor (%lld, %lld)", (long long)rows,
				  (long long)cols);
	float *rm = per_row ? out : malloc((size_t)rows * sizeof(float));
	if (!rm)
		return fos_seterr(err, FOS_ENOMEM, "out of memory for %lld row maxima", (long long)rows);
	amax_job j = {x, dtype, cols, rm};
	fos_parallel_for(cpu_threads(be), rows, 1 + 65536 / cols, amax_rows, &j);
	if (!per_row) {
		float m = 0.0f;
		for (int64_t r = 0; r < rows; r++)
			m = fos_absmax(m, rm[r]);
		out[0] = m;
		free(rm);
	}
	return FOS_OK;
}

/* ---- quantize ------------------------------------------------------------------------------ */

typedef struct {
	const void *x;
	int dtype;
	int64_t rows, cols;
	fos_qcfg cfg;
	const float *amax; /* 1 or rows */
	fos_qtensor *q;
	uint16_t *decoded;
	int trans;        /* x stored transposed, (cols, rows) */
	volatile int oom; /* a worker could not get its row buffer */
} quant_job;

/* Codes of 16 elements under scale byte sf; returns the candidate error (section 3). */
static float candidate(const float *xf, uint32_t sf, float s_dec, float amax, float d, int mse, uint8_t *q)
{
	float inv = fos_inv_scale(sf, s_dec);
	float sff = fos_e4m3_to_f32(sf);
	float err = 0.0f;
	for (int i = 0; i < 16; i++) {
		q[i] = (uint8_t)fos_e2m1_encode(xf[i] * inv);
		err = err + fos_46_elem_err(q[i], sff, amax, d, xf[i], mse);
	}
	return err;
}

static void store_block(quant_job *j, int64_t r, int64_t blk, const uint8_t *q, uint32_t sf)
{
	uint8_t *codes = j->q->codes + r * (j->cols / 2) + blk * 8;
	for (int i = 0; i < 8; i++)
		codes[i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
	j->q->scales[r * (j->cols / 16) + blk] = (uint8_t)sf;
	if (j->decoded) {
		float sff = fos_e4m3_to_f32(sf);
		uint16_t *dec = j->decoded + r * j->cols + blk * 16;
		for (int i = 0; i < 16; i++)
			dec[i] = fos_f32_to_bf16(fos_e2m1_value(q[i]) * sff);
	}
}

static void quant_rows_1x16(void *ctx, int64_t r0, int64_t r1)
{
	quant_job *j = ctx;
	float *row = malloc((size_t)j->cols * sizeof(float));
	if (!row) {
		j->oom = 1;
		return;
	}
	float d = fos_bound_d(j->cfg.bound);
	int mse = j->cfg.err_mode == FOS_ERR_MSE;
	for (int64_t r = r0; r < r1; r++) {
		float a = j->cfg.row_scaled ? j->amax[r] : j->amax[0];
		float s_enc = fos_s_enc(a, d);
		float s_dec = 1.0f / s_enc;
		load_row_t(j->x, j->dtype, j->rows, j->cols, r, j->trans, row);
		for (int64_t b = 0; b < j->cols / 16; b++) {
			const float *xf = row + b * 16;
			float bamax = 0.0f;
			for (int i = 0; i < 16; i++)
				bamax = fos_absmax(bamax, xf[i]);
			uint8_t q6[16], q4[16];
			if (j->cfg.recipe == FOS_RECIPE_NVFP4) {
				uint32_t sf = fos_grad_scale(bamax, s_enc);
				float inv = fos_inv_scale(sf, s_dec);
				for (int i = 0; i < 16; i++)
					q6[i] = (uint8_t)fos_e2m1_encode(xf[i] * inv);
				store_block(j, r, b, q6, sf);
				continue;
			}
			uint32_t sf6, sf4;
			fos_46_candidates(bamax, s_enc, &sf6, &sf4);
			float e6 = candidate(xf, sf6, s_dec, a, d, mse, q6);
			float e4 = candidate(xf, sf4, s_dec, a, d, mse, q4);
			if (e4 < e6)
				store_block(j, r, b, q4, sf4);
			else
				store_block(j, r, b, q6, sf6);
		}
	}
	free(row);
}

static void quant_tiles_16x16(void *ctx, int64_t t0, int64_t t1)
{
	quant_job *j = ctx;
	int64_t cols = j->cols;
	float *rows = malloc((size_t)cols * 16 * sizeof(float));
	if (!rows) {
		j->oom = 1;
		return;
	}
	float a = j->amax[0];
	float d = fos_bound_d(j->cfg.bound);
	float s_enc = fos_s_enc(a, d);
	float s_dec = 1.0f / s_enc;
	int mse = j->cfg.err_mode == FOS_ERR_MSE;
	for (int64_t t = t0; t < t1; t++) {
		for (int i = 0; i < 16; i++)
			load_row_t(j->x, j->dtype, j->rows, cols, t * 16 + i, j->trans, rows + i * cols);
		for (int64_t b = 0; b < cols / 16; b++) {
			float bamax = 0.0f;
			for (int i = 0; i < 16; i++)
				for (int c = 0; c < 16; c++)
					bamax = fos_absmax(bamax, rows[i * cols + b * 16 + c]);
			if (j->cfg.recipe == FOS_RECIPE_NVFP4) { /* plain: one scale from the tile's amax */
				uint32_t sf = fos_grad_scale(bamax, s_enc);
				float inv = fos_inv_scale(sf, s_dec);
				for (int i = 0; i < 16; i++) {
					uint8_t q[16];
					for (int c = 0; c < 16; c++)
						q[c] = (uint8_t)fos_e2m1_encode(rows[i * cols + b * 16 + c] * inv);
					store_block(j, t * 16 + i, b, q, sf);
				}
				continue;
			}
			uint32_t sf6, sf4;
			fos_46_candidates(bamax, s_enc, &sf6, &sf4);
			uint8_t q6[16][16], q4[16][16];
			float e6[16], e4[16];
			for (int i = 0; i < 16; i++) {
				const float *xf = rows + i * cols + b * 16;
				e6[i] = candidate(xf, sf6, s_dec, a, d, mse, q6[i]);
				e4[i] = candidate(xf, sf4, s_dec, a, d, mse, q4[i]);
			}
			int pick4 = fos_tile_err_sum(e4) < fos_tile_err_sum(e6);
			for (int i = 0; i < 16; i++)
				store_block(j, t * 16 + i, b, pick4 ? q4[i] : q6[i], pick4 ? sf4 : sf6);
		}
	}
	free(rows);
}

static int quantize_any(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, int trans,
			const fos_qcfg *cfg, const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	int rc = fos_qcfg_check(cfg, rows, cols, err);
	if (rc)
		return rc;
	if (dtype != FOS_BF16 && dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown input dtype %d", dtype);
	if (trans && cfg->row_scaled)
		return fos_seterr(err, FOS_EINVAL, "quantize of a transposed input is per-tensor only, not row-scaled");
	int64_t na = cfg->row_scaled ? rows : 1;
	if (amax_in) {
		if (amax_in != q->amax)
			memcpy(q->amax, amax_in, (size_t)na * sizeof(float));
	} else if ((rc = trans ? cpu_amax(be, x, dtype, cols, rows, 0, q->amax, err) /* same set of values */
			       : cpu_amax(be, x, dtype, rows, cols, cfg->row_scaled, q->amax, err))) {
		return rc;
	}
	q->rows = rows;
	q->cols = cols;
	q->bound = cfg->bound;
	q->row_scaled = cfg->row_scaled;
	quant_job j = {x, dtype, rows, cols, *cfg, q->amax, q, decoded, trans, 0};
	if (cfg->block == FOS_BLOCK_16X16)
		fos_parallel_for(cpu_threads(be), rows / 16, 1 + 4096 / cols, quant_tiles_16x16, &j);
	else
		fos_parallel_for(cpu_threads(be), rows, 1 + 16384 / cols, quant_rows_1x16, &j);
	if (j.oom)
		return fos_seterr(err, FOS_ENOMEM, "out of memory for quantize row buffers (%lld columns)",
				  (long long)cols);
	return FOS_OK;
}

int cpu_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		 const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	return quantize_any(be, x, dtype, rows, cols, 0, cfg, amax_in, q, decoded, err);
}

int cpu_quantize_t(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		   const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	return quantize_any(be, x, dtype, rows, cols, 1, cfg, amax_in, q, decoded, err);
}

/* ---- dequantize / decode ------------------------------------------------------------------- */

typedef struct {
	const fos_qtensor *q;
	int out_dtype; /* FOS_BF16, FOS_F32, or -1: decode (no amax) to bf16 */
	void *out;
} deq_job;

static void deq_rows(void *ctx, int64_t r0, int64_t r1)
{
	deq_job *j = ctx;
	const fos_qtensor *q = j->q;
	float d = fos_bound_d(q->bound);
	for (int64_t r = r0; r < r1; r++) {
		float a = q->row_scaled ? q->amax[r] : q->amax[0];
		for (int64_t b = 0; b < q->cols / 16; b++) {
			uint32_t sf = q->scales[r * (q->cols / 16) + b];
			float dec = j->out_dtype < 0 ? fos_e4m3_to_f32(sf) : fos_dec_scale(sf, a, d);
			const uint8_t *codes = q->codes + r * (q->cols / 2) + b * 8;
			int64_t o = r * q->cols + b * 16;
			for (int i = 0; i < 16; i++) {
				uint32_t code = (codes[i / 2] >> ((i & 1) * 4)) & 15u;
				float v = fos_e2m1_value(code) * dec;
				if (j->out_dtype == FOS_F32)
					((float *)j->out)[o + i] = v;
				else
					((uint16_t *)j->out)[o + i] = fos_f32_to_bf16(v);
			}
		}
	}
}

static int check_q(const fos_qtensor *q, fos_err *err)
{
	if (q->rows <= 0 || q->cols <= 0 || q->cols % 16)
		return fos_seterr(err, FOS_EINVAL, "quantized shape (%lld, %lld): columns must be a positive multiple of 16",
				  (long long)q->rows, (long long)q->cols);
	if (q->bound != 256 && q->bound != 448)
		return fos_seterr(err, FOS_EINVAL, "bound %d is not 256 or 448", q->bound);
	return FOS_OK;
}

int cpu_dequantize(fos_backend *be, const fos_qtensor *q, int out_dtype, void *out, fos_err *err)
{
	int rc = check_q(q, err);
	if (rc)
		return rc;
	if (out_dtype != FOS_BF16 && out_dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown output dtype %d", out_dtype);
	deq_job j = {q, out_dtype, out};
	fos_parallel_for(cpu_threads(be), q->rows, 1 + 16384 / q->cols, deq_rows, &j);
	return FOS_OK;
}

int cpu_decode(fos_backend *be, const fos_qtensor *q, uint16_t *out, fos_err *err)
{
	int rc = check_q(q, err);
	if (rc)
		return rc;
	deq_job j = {q, -1, out};
	fos_parallel_for(cpu_threads(be), q->rows, 1 + 16384 / q->cols, deq_rows, &j);
	return FOS_OK;
}
