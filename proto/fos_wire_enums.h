/* fos_wire_enums.h: the element types and option values of the wire (fos.proto's DType, Override,
 * Block, ErrMode, Recipe, FourOverSix, HealthResult.Mps), the one set of these numbers for libfos's
 * callers (fos.h includes this header and is installed beside it), the numerics (backend.h) and fosd.
 *
 * backend.h names the override, error mode and recipe values through these (FOS_OVR_QUANTIZED is
 * FOS_OVERRIDE_QUANTIZED, ...). Its element types and block modes are numbered from 0 (kernels and
 * their tests count through them), so they differ from the wire's, where 0 means "unset/default":
 * fos_dtype_from_wire, fos_dtype_to_wire, fos_block_from_wire and fos_block_to_wire below are the
 * one place that maps between the two. */
#ifndef FOS_WIRE_ENUMS_H
#define FOS_WIRE_ENUMS_H

/* Element types (the wire's fos.DType). */
enum fos_wire_dtype {
	FOS_DTYPE_BF16 = 1, /* bfloat16 bit patterns, 2 bytes */
	FOS_DTYPE_F32 = 2,  /* float, 4 bytes */
	FOS_DTYPE_U8 = 3,   /* packed E2M1 codes, two per byte (element 2j in the low nibble) */
	FOS_DTYPE_E4M3 = 4  /* float8_e4m3fn scales */
};

/* Option values (the wire's enums; 0 is always the default). */
enum fos_override_opt {
	FOS_OVERRIDE_DEFAULT = 0, /* quantized, or high_precision with row-scaled X */
	FOS_OVERRIDE_QUANTIZED = 1,
	FOS_OVERRIDE_HIGH_PRECISION = 2,
	FOS_OVERRIDE_DEQUANTIZED = 3
};
enum fos_block_opt { FOS_BLOCKS_DEFAULT = 0, FOS_BLOCKS_1X16 = 1, FOS_BLOCKS_16X16 = 2 };
enum fos_errmode_opt { FOS_ERRMODE_MAE = 0, FOS_ERRMODE_MSE = 1 };
enum fos_recipe_opt { FOS_QRECIPE_4OVER6 = 0, FOS_QRECIPE_NVFP4 = 1 };
/* Which forward operands use 4/6 (the wire's fos.FourOverSix, NUMERICS.md section 11); the others
 * use plain NVFP4. DEFAULT: ALL for PutWeight and Linear, the weight's own scope for Forward. */
enum fos_four_over_six_opt {
	FOS_FOUR_OVER_SIX_DEFAULT = 0,
	FOS_FOUR_OVER_SIX_ALL = 1,
	FOS_FOUR_OVER_SIX_WEIGHTS = 2,
	FOS_FOUR_OVER_SIX_ACTIVATIONS = 3,
	FOS_FOUR_OVER_SIX_NONE = 4
};

/* Whether fosd's GPU work runs under NVIDIA MPS (the wire's HealthResult.Mps; fos_server_mps). */
enum fos_mps_state { FOS_MPS_UNKNOWN = 0, FOS_MPS_NOT_APPLICABLE = 1, FOS_MPS_OFF = 2, FOS_MPS_ON = 3 };

#endif
