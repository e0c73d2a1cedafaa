/* config_check.c: error helper, defaults and validation of quantize configs and linear options
 * (NUMERICS.md sections 3, 4, 8 and 9: every bad value is named in the message), and the quantize
 * config each four_over_six scope gives W and X (section 11). */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int fos_seterr(fos_err *err, int rc, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
		err->rc = rc;
	}
	return rc;
}

fos_qcfg fos_qcfg_default(void)
{
	fos_qcfg c = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, FOS_ERR_MAE, 256, 0};
	return c;
}

int fos_qcfg_check(const fos_qcfg *c, int64_t rows, int64_t cols, fos_err *err)
{
	if (c->recipe != FOS_RECIPE_4OVER6 && c->recipe != FOS_RECIPE_NVFP4)
		return fos_seterr(err, FOS_EINVAL, "unknown recipe %d", c->recipe);
	if (c->bound != 256 && c->bound != 448)
		return fos_seterr(err, FOS_EINVAL, "bound %d is not 256 or 448", c->bound);
	if (c->block != FOS_BLOCK_1X16 && c->block != FOS_BLOCK_16X16)
		return fos_seterr(err, FOS_EINVAL, "unknown block mode %d", c->block);
	if (c->err_mode != FOS_ERR_MAE && c->err_mode != FOS_ERR_MSE)
		return fos_seterr(err, FOS_EINVAL, "unknown error mode %d", c->err_mode);
	if (c->recipe == FOS_RECIPE_NVFP4 && c->bound != 448)
		return fos_seterr(err, FOS_EINVAL, "the nvfp4 recipe uses bound 448, not %d", c->bound);
	if (c->row_scaled && c->block == FOS_BLOCK_16X16)
		return fos_seterr(err, FOS_EINVAL, "row-scaled quantize needs 1x16 blocks, not 16x16");
	if (rows <= 0 || cols <= 0)
		return fos_seterr(err, FOS_EINVAL, "shape (%lld, %lld) is empty", (long long)rows, (long long)cols);
	if (cols % 16)
		return fos_seterr(err, FOS_EINVAL, "columns %lld not divisible by 16", (long long)cols);
	if (c->block == FOS_BLOCK_16X16 && rows % 16)
		return fos_seterr(err, FOS_EINVAL, "rows %lld not divisible by 16 (16x16 blocks)", (long long)rows);
	return FOS_OK;
}

fos_linear_opts fos_linear_opts_default(void)
{
	fos_linear_opts o = {FOS_OVR_DEFAULT, FOS_BLOCK_16X16, FOS_ERR_MAE, 256, 0, FOS_SCOPE_ALL};
	return o;
}

int fos_scope_parse(const char *name)
{
	for (int s = FOS_SCOPE_ALL; s <= FOS_SCOPE_NONE; s++)
		if (!strcmp(name, fos_scope_name(s)))
			return s;
	return -1;
}

fos_qcfg fos_linear_wcfg(const fos_linear_opts *o)
{
	fos_qcfg c = {FOS_RECIPE_4OVER6, o->weight_block, o->err_mode, o->bound, 0};
	if (!fos_scope_w46(o->four_over_six)) { /* plain NVFP4: section 5 with W's block shape */
		c.recipe = FOS_RECIPE_NVFP4;
		c.err_mode = FOS_ERR_MAE;
		c.bound = 448;
	}
	return c;
}

fos_qcfg fos_linear_xcfg(const fos_linear_opts *o, int row_scaled)
{
	fos_qcfg c = {FOS_RECIPE_4OVER6, FOS_BLOCK_1X16, o->err_mode, o->bound, row_scaled};
	if (!fos_scope_x46(o->four_over_six)) {
		c.recipe = FOS_RECIPE_NVFP4;
		c.err_mode = FOS_ERR_MAE;
		c.bound = 448;
	}
	return c;
}

static const char *dim_name(int i)
{
	return i == 0 ? "M" : (i == 1 ? "N" : "K");
}

int fos_linear_check(const fos_linear_opts *o, int64_t m, int64_t n, int64_t k, int *resolved, fos_err *err)
{
	/* The shape rule (NUMERICS.md section 8): M any value >= 1, N and K positive multiples of 16. */
	int64_t d[3] = {m, n, k};
	if (m < 1)
		return fos_seterr(err, FOS_EINVAL, "M = %lld: M must be at least 1", (long long)m);
	for (int i = 1; i < 3; i++)
		if (d[i] <= 0 || d[i] % 16)
			return fos_seterr(err, FOS_EINVAL, "%s = %lld is not a positive multiple of 16 (N and K must be)",
					  dim_name(i), (long long)d[i]);
	if (o->bound != 256 && o->bound != 448)
		return fos_seterr(err, FOS_EINVAL, "bound %d is not 256 or 448", o->bound);
	if (o->weight_block != FOS_BLOCK_1X16 && o->weight_block != FOS_BLOCK_16X16)
		return fos_seterr(err, FOS_EINVAL, "unknown weight block mode %d", o->weight_block);
	if (o->err_mode != FOS_ERR_MAE && o->err_mode != FOS_ERR_MSE)
		return fos_seterr(err, FOS_EINVAL, "unknown error mode %d", o->err_mode);
	if (o->four_over_six < FOS_SCOPE_ALL || o->four_over_six > FOS_SCOPE_NONE)
		return fos_seterr(err, FOS_EINVAL, "unknown four_over_six scope %d (all, weights, activations or none)",
				  o->four_over_six);
	int ovr = o->override;
	if (ovr < FOS_OVR_DEFAULT || ovr > FOS_OVR_DEQUANTIZED)
		return fos_seterr(err, FOS_EINVAL, "unknown backward override %d", ovr);
	if (ovr == FOS_OVR_DEFAULT)
		ovr = o->row_scaled ? FOS_OVR_HIGH_PRECISION : FOS_OVR_QUANTIZED;
	if (ovr == FOS_OVR_QUANTIZED && o->row_scaled)
		return fos_seterr(err, FOS_EINVAL, "backward override quantized cannot be used with row-scaled X");
	if (resolved)
		*resolved = ovr;
	return FOS_OK;
}
