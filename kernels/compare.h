/* compare.h: the inference-consistency comparison of two arrays of one element type, the one
 * implementation behind `fos check` (client/cli/cli_check.c) and fosd's Forward with `expect`
 * (server/ops/ops_linear.c), so both give the same numbers for the same arrays by construction.
 *
 * Definitions (OURS against REFERENCE, element by element, in flat row-major order):
 *  - differ: elements whose bits differ.
 *  - ulps: a float's bits, read as sign-magnitude, map to an ordered integer (key = magnitude bits,
 *    negated when the sign bit is set), so neighbouring floats differ by one and -0 == +0; the
 *    distance of two finite values is |key(a) - key(b)| in ulps of the arrays' own type. uint8
 *    arrays (codes, scales) use the byte values' difference.
 *  - non-finite mismatch: NaN or infinity on one side only, or +inf against -inf. Two NaNs (any
 *    payloads) are the same non-number: they differ in bits but are no mismatch.
 *  - SQNR = 10 log10(sum ref^2 / sum (ours - ref)^2) over the elements finite on both sides, the
 *    sums in double precision in flat order: +inf when no value differs, -inf when the reference
 *    is all zeros but a value differs.
 * Elements can be fed in consecutive pieces (fos_cmp_add); the result does not depend on how the
 * array was cut. Free of any I/O: the callers print. */
#ifndef FOS_COMPARE_H
#define FOS_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fos_cmp_type { FOS_CMP_BF16 = 0, FOS_CMP_F32 = 1, FOS_CMP_U8 = 2 };

#define FOS_CMP_NONE ((size_t)-1) /* a position that does not exist */

typedef struct fos_cmp {
	int type;             /* enum fos_cmp_type */
	size_t n;             /* elements compared so far */
	size_t differ;        /* elements whose bits differ */
	size_t nonfinite;     /* non-finite mismatches */
	int64_t max_ulps;     /* the largest distance over pairs finite on both sides (0: none differ) */
	size_t max_at;        /* flat index of the first element at max_ulps, or FOS_CMP_NONE */
	size_t first_differ;  /* flat index of the first element whose bits differ, or FOS_CMP_NONE */
	size_t nonfinite_at;  /* flat index of the first non-finite mismatch, or FOS_CMP_NONE */
	/* the bit patterns (ours, ref) of the elements at max_at, first_differ and nonfinite_at */
	uint32_t max_bits[2], first_bits[2], nonfinite_bits[2];
	double sig, noise;    /* sum ref^2 and sum (ours - ref)^2 (floats finite on both sides) */
} fos_cmp;

/* The ordered integer of a bit pattern (see above). */
int64_t fos_ulp_key_bf16(uint16_t bits);
int64_t fos_ulp_key_f32(uint32_t bits);

/* Starts an empty comparison of elements of type (enum fos_cmp_type). */
void fos_cmp_init(fos_cmp *r, int type);
/* Compares the next count elements: ours[i] against ref[i], both of r's type. */
void fos_cmp_add(fos_cmp *r, const void *ours, const void *ref, size_t count);
/* fos_cmp_init + fos_cmp_add of count elements. */
void fos_compare(int type, const void *ours, const void *ref, size_t count, fos_cmp *r);
/* The SQNR in dB of what was compared (+inf, -inf as described above). */
double fos_cmp_sqnr_db(const fos_cmp *r);
/* A bit pattern of type as a double (bf16 and f32 values exactly; uint8 as the byte value). */
double fos_cmp_bits_value(int type, uint32_t bits);

/* When a comparison is consistent: bitwise when neither bound is set, else no non-finite mismatch
 * and every set bound holds (max_ulps <= max_ulps bound; sqnr >= min_sqnr_db). */
typedef struct fos_cmp_criterion {
	int by_max_ulps;
	uint64_t max_ulps;
	int by_min_sqnr;
	double min_sqnr_db;
} fos_cmp_criterion;

/* How a verdict names the criteria: "--bitwise", "--max-ulps", "--min-sqnr" for the CLI, the wire
 * field names for fosd. */
typedef struct fos_cmp_labels {
	const char *bitwise, *max_ulps, *min_sqnr;
} fos_cmp_labels;

/* "[3, 17]" for flat index i of an array of ndim (0..8) dims shape ("[]" for 0-d). */
void fos_cmp_index_str(int ndim, const int64_t *shape, size_t i, char *buf, size_t cap);

/* Returns 1 when consistent under c, else 0, and writes why into why (the reason in one line;
 * positions formatted against (ndim, shape)). differ, n, nonfinite, nonfinite_at and max_ulps of r
 * are used, and sqnr (fos_cmp_sqnr_db of the same comparison). */
int fos_cmp_verdict(const fos_cmp *r, double sqnr, const fos_cmp_criterion *c, const fos_cmp_labels *l, int ndim,
		    const int64_t *shape, char *why, size_t whysz);

#ifdef __cplusplus
}
#endif

#endif
