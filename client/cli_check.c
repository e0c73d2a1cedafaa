/* cli_check.c: `fos check OURS.npy REFERENCE.npy`: the inference-consistency check. It counts the
 * elements whose bits differ, measures the largest difference in ulps of the arrays' own type
 * (bf16 ulps for bf16, f32 ulps for f32) and the SQNR of OURS against REFERENCE, and says whether
 * the result is consistent under the chosen criterion: bitwise (default), --max-ulps N and/or
 * --min-sqnr DB. Exit 0 consistent, 1 not consistent, 2 when the comparison cannot be made.
 *
 * ulp distance: a float's bits, read as sign-magnitude, map to an ordered integer (key = magnitude
 * bits, negated when the sign bit is set), so neighbouring floats differ by one and -0 == +0; the
 * distance of two finite values is |key(a) - key(b)|. NaN or infinity on one side only (or
 * infinities of opposite signs) is a "non-finite mismatch": infinitely many ulps, never consistent
 * except under --bitwise when the bits agree. SQNR = 10 log10(sum ref^2 / sum (ours - ref)^2)
 * over the elements finite on both sides, in double precision. */
#include "cli.h"
#include "fos_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t cli_ulp_key_bf16(uint16_t bits)
{
	int64_t mag = bits & 0x7FFF;
	return (bits & 0x8000) ? -mag : mag;
}

int64_t cli_ulp_key_f32(uint32_t bits)
{
	int64_t mag = bits & 0x7FFFFFFFu;
	return (bits & 0x80000000u) ? -mag : mag;
}

typedef struct cli_cmp {
	size_t n, differ, nonfinite;
	int64_t max_ulps; /* over finite pairs */
	size_t max_at;    /* flat index of the first element with max_ulps (valid when differ) */
	size_t nonfinite_at;
	double sig, noise;
} cli_cmp;

static void cli_compare(const npy_array *a, const npy_array *b, cli_cmp *r)
{
	memset(r, 0, sizeof *r);
	r->n = a->count;
	r->max_at = (size_t)-1;
	r->nonfinite_at = (size_t)-1;
	for (size_t i = 0; i < a->count; i++) {
		uint32_t ab, bb;
		double av, bv;
		int64_t ka, kb;
		int nan_a, nan_b, inf_a, inf_b;
		if (a->dtype == NPY_U1) {
			uint8_t x = ((const uint8_t *)a->data)[i], y = ((const uint8_t *)b->data)[i];
			if (x != y) {
				r->differ++;
				int64_t d = x > y ? x - y : y - x;
				if (r->max_at == (size_t)-1 || d > r->max_ulps) {
					r->max_ulps = d;
					r->max_at = i;
				}
			}
			continue;
		}
		if (a->dtype == NPY_U2) {
			ab = ((const uint16_t *)a->data)[i];
			bb = ((const uint16_t *)b->data)[i];
			if (ab == bb) {
				float f = fos_bf16_to_f32((uint16_t)ab);
				if (isfinite(f))
					r->sig += (double)f * (double)f;
				continue;
			}
			ka = cli_ulp_key_bf16((uint16_t)ab);
			kb = cli_ulp_key_bf16((uint16_t)bb);
			av = fos_bf16_to_f32((uint16_t)ab);
			bv = fos_bf16_to_f32((uint16_t)bb);
		} else {
			ab = ((const uint32_t *)a->data)[i];
			bb = ((const uint32_t *)b->data)[i];
			if (ab == bb) {
				float f = fos_u2f(ab);
				if (isfinite(f))
					r->sig += (double)f * (double)f;
				continue;
			}
			ka = cli_ulp_key_f32(ab);
			kb = cli_ulp_key_f32(bb);
			av = fos_u2f(ab);
			bv = fos_u2f(bb);
		}
		r->differ++;
		nan_a = isnan(av);
		nan_b = isnan(bv);
		inf_a = isinf(av);
		inf_b = isinf(bv);
		if (nan_a && nan_b)
			continue; /* two NaNs (different payloads): the same non-number */
		if (nan_a || nan_b || inf_a || inf_b) {
			/* only one side non-finite, or +inf vs -inf (equal infinities have equal bits) */
			if (!r->nonfinite++)
				r->nonfinite_at = i;
			continue;
		}
		int64_t d = ka > kb ? ka - kb : kb - ka;
		if (r->max_at == (size_t)-1 || d > r->max_ulps) {
			r->max_ulps = d;
			r->max_at = i;
		}
		r->sig += bv * bv;
		r->noise += (av - bv) * (av - bv);
	}
}

static double cli_sqnr_db(const cli_cmp *r)
{
	if (r->noise == 0)
		return INFINITY;
	if (r->sig == 0)
		return -INFINITY;
	return 10.0 * log10(r->sig / r->noise);
}

/* "[3, 17]" for flat index i of shape */
static void cli_index_str(const npy_array *a, size_t i, char *buf, size_t cap)
{
	size_t idx[NPY_MAX_DIMS];
	for (int d = a->ndim - 1; d >= 0; d--) {
		size_t dim = (size_t)a->shape[d];
		idx[d] = dim ? i % dim : 0;
		i = dim ? i / dim : 0;
	}
	size_t used = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < a->ndim && used < cap; d++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%zu", d ? ", " : "", idx[d]);
	if (used < cap)
		snprintf(buf + used, cap - used, "]");
}

static double cli_elem(const npy_array *a, size_t i)
{
	if (a->dtype == NPY_U1)
		return ((const uint8_t *)a->data)[i];
	if (a->dtype == NPY_U2)
		return fos_bf16_to_f32(((const uint16_t *)a->data)[i]);
	return fos_u2f(((const uint32_t *)a->data)[i]);
}

enum { CF_BITWISE, CF_SQNR, CF_ULPS, CF_JSON, CF_COUNT };

int cli_check_main(const cli_global *g, int argc, char **argv)
{
	(void)g;
	cli_flag flags[CF_COUNT] = {
		[CF_BITWISE] = {"--bitwise", NULL, "consistent only when every element has the same bits (the\n"
						   "default when no other criterion is given)", 0, 0},
		[CF_SQNR] = {"--min-sqnr", "DB", "consistent when the SQNR of OURS against REFERENCE is at\n"
						 "least DB decibels and no element is NaN/inf on one side only", 0, 0},
		[CF_ULPS] = {"--max-ulps", "N", "consistent when no element is more than N ulps (of the\n"
						"arrays' dtype) from the reference; may be combined with\n"
						"--min-sqnr (both must hold)", 0, 0},
		[CF_JSON] = {"--json", NULL, "print the result as one JSON object", 0, 0},
	};
	static const char *const pos_names[] = {"OURS.npy", "REFERENCE.npy"};
	static const char *const pos_help[] = {"the result to check: bf16 ('<u2'), float32 ('<f4') or uint8",
					       "the reference: the same dtype and shape"};
	cli_cmd cmd = {
		.name = "check",
		.synopsis = "OURS.npy REFERENCE.npy [--bitwise | --min-sqnr DB | --max-ulps N] [--json]",
		.summary = "Inference-consistency check: compare a result with a reference, element by element.",
		.about = "Reports how many elements differ (in their bits), the largest difference in ulps of\n"
			 "the dtype (bf16 ulps for bf16, f32 ulps for float32; -0 and +0 are 0 ulps apart) and\n"
			 "the SQNR in dB = 10 log10(sum ref^2 / sum (ours - ref)^2). uint8 arrays (codes, scales)\n"
			 "compare bitwise only.",
		.pos_names = pos_names,
		.pos_help = pos_help,
		.npos = 2,
		.flags = flags,
		.nflags = CF_COUNT,
		.footer = "Exit status: 0 consistent; 1 not consistent; 2 the comparison could not be made (bad\n"
			  "command line, unreadable file, dtype or shape mismatch).",
	};
	fos_err err = {0, ""};
	int rc = cli_parse(&cmd, argc, argv, &err);
	if (rc == CLI_HELP_SHOWN)
		return CLI_EXIT_OK;
	if (rc)
		return cli_report(&err, CLI_EXIT_USAGE);
	double min_sqnr = 0;
	uint64_t max_ulps = 0;
	int bitwise = flags[CF_BITWISE].given, by_sqnr = flags[CF_SQNR].given, by_ulps = flags[CF_ULPS].given;
	if (bitwise && (by_sqnr || by_ulps))
		return cli_fail(CLI_EXIT_USAGE, "check: --bitwise cannot be combined with --min-sqnr or --max-ulps");
	if (by_sqnr && cli_parse_double("--min-sqnr", flags[CF_SQNR].value, &min_sqnr, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	if (by_ulps && cli_parse_u64("--max-ulps", flags[CF_ULPS].value, 0, UINT32_MAX, &max_ulps, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	if (!by_sqnr && !by_ulps)
		bitwise = 1;

	const char *op = cmd.pos[0], *rp = cmd.pos[1];
	npy_array a, b;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	int code = CLI_EXIT_USAGE;
	if (cli_load(op, &a, &err) || cli_load(rp, &b, &err))
		goto fail;
	char as[200], bs[200];
	npy_shape_str(a.ndim, a.shape, as, sizeof as);
	npy_shape_str(b.ndim, b.shape, bs, sizeof bs);
	if (a.dtype != b.dtype) {
		cli_errf(&err, "check: dtypes differ: %s is %s, %s is %s (convert one first)", op, npy_dtype_human(a.dtype),
			 rp, npy_dtype_human(b.dtype));
		goto fail;
	}
	int same_shape = a.ndim == b.ndim;
	for (int d = 0; same_shape && d < a.ndim; d++)
		same_shape = a.shape[d] == b.shape[d];
	if (!same_shape) {
		cli_errf(&err, "check: shapes differ: %s is %s, %s is %s", op, as, rp, bs);
		goto fail;
	}
	if (a.dtype == NPY_U1 && (by_sqnr || by_ulps)) {
		cli_errf(&err, "check: %s holds uint8 (codes or scales), which compare bitwise only: drop %s", op,
			 by_sqnr ? "--min-sqnr" : "--max-ulps");
		goto fail;
	}

	cli_cmp r;
	cli_compare(&a, &b, &r);
	double sqnr = cli_sqnr_db(&r);
	int is_float = a.dtype != NPY_U1;
	const char *ulp_unit = a.dtype == NPY_U2 ? "bf16" : "f32";
	int consistent;
	char why[200];
	if (bitwise) {
		consistent = r.differ == 0;
		if (consistent)
			snprintf(why, sizeof why, "bitwise identical");
		else
			snprintf(why, sizeof why, "%zu of %zu elements differ (--bitwise)", r.differ, r.n);
	} else {
		consistent = r.nonfinite == 0;
		if (!consistent) {
			char at[100];
			cli_index_str(&a, r.nonfinite_at, at, sizeof at);
			snprintf(why, sizeof why, "%zu elements are NaN/inf on one side only (first at %s)", r.nonfinite, at);
		} else if (by_ulps && r.max_ulps > (int64_t)max_ulps) {
			consistent = 0;
			snprintf(why, sizeof why, "max %lld %s ulps > --max-ulps %llu", (long long)r.max_ulps, ulp_unit,
				 (unsigned long long)max_ulps);
		} else if (by_sqnr && !(sqnr >= min_sqnr)) {
			consistent = 0;
			snprintf(why, sizeof why, "SQNR %.2f dB < --min-sqnr %g dB", sqnr, min_sqnr);
		} else {
			size_t used = (size_t)snprintf(why, sizeof why, "within");
			if (by_ulps)
				used += (size_t)snprintf(why + used, sizeof why - used, " --max-ulps %llu",
							 (unsigned long long)max_ulps);
			if (by_sqnr)
				snprintf(why + used, sizeof why - used, "%s --min-sqnr %g dB", by_ulps ? " and" : "", min_sqnr);
		}
	}
	char at[100] = "";
	if (r.max_at != (size_t)-1)
		cli_index_str(&a, r.max_at, at, sizeof at);

	if (flags[CF_JSON].given) {
		cli_jw w;
		cli_jw_init(&w, stdout, 1);
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "ours", op);
		cli_jw_str(&w, "reference", rp);
		cli_jw_str(&w, "dtype", a.dtype == NPY_U1 ? "uint8" : (a.dtype == NPY_U2 ? "bf16" : "float32"));
		cli_jw_arr(&w, "shape");
		for (int d = 0; d < a.ndim; d++)
			cli_jw_i64(&w, NULL, a.shape[d]);
		cli_jw_end(&w, ']');
		cli_jw_u64(&w, "elements", r.n);
		cli_jw_u64(&w, "differ", r.differ);
		cli_jw_u64(&w, "nonfinite_mismatches", r.nonfinite);
		if (r.max_at != (size_t)-1) {
			cli_jw_i64(&w, "max_ulps", r.max_ulps);
			cli_jw_str(&w, "max_ulps_at", at);
		} else {
			cli_jw_i64(&w, "max_ulps", 0);
			cli_jw_null(&w, "max_ulps_at");
		}
		cli_jw_str(&w, "ulp", is_float ? ulp_unit : "uint8");
		if (is_float && isfinite(sqnr))
			cli_jw_dbl(&w, "sqnr_db", sqnr);
		else
			cli_jw_null(&w, "sqnr_db");
		cli_jw_bool(&w, "exact", r.differ == 0);
		cli_jw_str(&w, "criterion", bitwise ? "bitwise" : (by_sqnr && by_ulps ? "max_ulps+min_sqnr" : (by_sqnr ? "min_sqnr" : "max_ulps")));
		cli_jw_bool(&w, "consistent", consistent);
		cli_jw_str(&w, "reason", why);
		cli_jw_end(&w, '}');
	} else {
		printf("compared %s with %s: %s %s, %zu elements\n", op, rp, npy_dtype_human(a.dtype), as, r.n);
		printf("  differ:      %zu (%.4g %%)\n", r.differ, r.n ? 100.0 * (double)r.differ / (double)r.n : 0.0);
		if (r.max_at != (size_t)-1)
			printf("  max ulps:    %lld %s at %s: ours %.9g, reference %.9g\n", (long long)r.max_ulps,
			       is_float ? ulp_unit : "(byte value)", at, cli_elem(&a, r.max_at), cli_elem(&b, r.max_at));
		else if (r.nonfinite)
			printf("  max ulps:    (every differing element is NaN/inf on one side)\n");
		else
			printf("  max ulps:    0\n");
		if (r.nonfinite)
			printf("  non-finite:  %zu elements NaN/inf on one side only\n", r.nonfinite);
		if (is_float) {
			if (isinf(sqnr) && sqnr > 0)
				printf("  sqnr:        inf dB (no difference in value)\n");
			else if (isinf(sqnr))
				printf("  sqnr:        -inf dB (the reference is all zeros)\n");
			else
				printf("  sqnr:        %.2f dB\n", sqnr);
		}
		printf("%s: %s\n", consistent ? "consistent" : "NOT consistent", why);
	}
	code = consistent ? CLI_EXIT_OK : CLI_EXIT_FAIL;
	if (fflush(stdout)) {
		cli_errf(&err, "check: cannot write the result to stdout");
		code = CLI_EXIT_USAGE;
		goto fail;
	}
	npy_free(&a);
	npy_free(&b);
	return code;
fail:
	cli_report(&err, CLI_EXIT_USAGE);
	npy_free(&a);
	npy_free(&b);
	return CLI_EXIT_USAGE;
}
