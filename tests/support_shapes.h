/* support_shapes.h: the reference side of the shape rule (NUMERICS.md section 8) for the tests that
 * check it (test_linear_shapes on the CPU backend, gpu_shapes on CUDA): one linear layer's inputs
 * on the host, the same inputs zero-padded to multiples of 128 (M with zero rows of X and dY, K with
 * zero columns of X and W, N with zero rows of W, zero columns of dY and zero bias), a run of the
 * layer (weight, forward with a saved context, backward) on any backend, and the comparison of a
 * layer's outputs with the matching slices of the padded layer's outputs. The padded run is the
 * existing 128-multiple path; the rule says the unpadded outputs must equal its slices bit for bit.
 * Also the shape and option lists both tests walk. Every global is prefixed shp_. */
#ifndef FOS_SUPPORT_SHAPES_H
#define FOS_SUPPORT_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* One option combination of the layer, and how its weight is made. */
typedef struct shp_opt {
	const char *name;
	int override, weight_block, err_mode, bound, row_scaled, bias;
	int keep_master, want_col; /* fos_qweight_make's flags */
} shp_opt;

extern const shp_opt shp_opts[];
extern const int shp_nopts;

/* (M, N, K) shapes: together every M in {1, 2, 15, 17, 100, 129, 1000} and every N and K in
 * {16, 48, 144, 272, 1040}; none of these values is a multiple of 128. */
extern const int64_t shp_shapes[][3];
extern const int shp_nshapes;

fos_linear_opts shp_opts_of(const shp_opt *o);

/* A layer: host inputs (bias and dy may be NULL) and host outputs (filled by shp_run; dx, dw only
 * with dy, db only with dy and bias). */
typedef struct shp_layer {
	int64_t m, n, k;
	uint16_t *x, *w, *bias, *dy;
	uint16_t *y, *dx, *dw, *db;
} shp_layer;

/* Random inputs: X roughly N(0, 1) with every 7th row 40x larger (so row scaling matters) and -0
 * sprinkled in, W N(0, 0.05^2) with an all-zero 16-element block, dY N(0, 0.1^2) with -0
 * sprinkled in, bias N(0, 0.5^2). special 1: X also holds +-inf and NaN; 2: W holds -inf and NaN;
 * 3: dY holds +inf and NaN (0: none). */
void shp_inputs(shp_layer *l, int64_t m, int64_t n, int64_t k, int bias, int dy, int special, uint64_t seed);
/* p = l's inputs zero-padded to the next multiples of 128 (no outputs yet). */
void shp_pad(const shp_layer *l, shp_layer *p);
void shp_free(shp_layer *l);
int64_t shp_up128(int64_t v);

/* Runs the layer on be from l's host inputs: fos_qweight_make(keep_master, want_col), forward (with
 * a saved context when dy is set), backward; allocates and fills l's outputs. rc and err as the
 * calls return them. */
int shp_run(fos_backend *be, const fos_linear_opts *o, int keep_master, int want_col, shp_layer *l, fos_err *err);

/* Compares l's outputs with the slices of p's (p: a layer of at least l's shape). nan_equal: NaN
 * equals NaN whatever the payload, else bits. Returns 0, or -1 with msg naming the output, the
 * element and both values. */
int shp_cmp_sliced(const shp_layer *l, const shp_layer *p, int nan_equal, char *msg, size_t msgsz);

/* The whole check for one shape and option on be: inputs from seed (special as for shp_inputs;
 * then NaN equals NaN), the layer on (m, n, k), the layer on the padded inputs, the comparison.
 * Returns 0, or -1 with msg. */
int shp_check_padded(fos_backend *be, int64_t m, int64_t n, int64_t k, const shp_opt *opt, int special,
		     uint64_t seed, char *msg, size_t msgsz);

#endif
