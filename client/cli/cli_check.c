/* cli_check.c: `fos check OURS.npy REFERENCE.npy`: the inference-consistency check, and
 * `fos check --remote NAME X.npy Y.npy`: the same check made by fosd, which computes its own Y of
 * X against the cached weight NAME, compares Y.npy with it and sends back only the numbers
 * (Forward with expect, PROTOCOL.md "Checks"; no Y crosses the socket).
 *
 * It counts the elements whose bits differ, measures the largest difference in ulps of the arrays'
 * own type (bf16 ulps for bf16, f32 ulps for f32), the SQNR of OURS against REFERENCE, and says
 * whether the result is consistent under the chosen criterion: bitwise (default), --max-ulps N
 * and/or --min-sqnr DB. Exit 0 consistent, 1 not consistent, 2 when the comparison cannot be made.
 * The numbers and the verdict come from kernels/compare.c (definitions in compare.h), the code
 * fosd runs for --remote too, and both forms print through one report function: for the same
 * arrays, `fos check --remote NAME X.npy Y.npy` prints what `fos check Y.npy FOSD_Y.npy` prints,
 * but for the first line. */
#include "cli.h"
#include "cli_shm.h"
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the report shows: a comparison made here or by fosd. */
typedef struct check_view {
	const char *ours, *reference; /* how the report names the two sides */
	const char *weight, *x;       /* --remote: the weight and X (NULL locally) */
	int dtype;                    /* NPY_* */
	int ndim;
	const int64_t *shape;
	fos_cmp r;                    /* counts, positions and their bits (sig and noise unused) */
	double sqnr;
	const char *criterion;
	int consistent;
	const char *why;
} check_view;

static void check_print(const check_view *v, int json)
{
	const fos_cmp *r = &v->r;
	int is_float = r->type != FOS_CMP_U8;
	const char *ulp_unit = r->type == FOS_CMP_BF16 ? "bf16" : "f32";
	char shape[200], at[100] = "", first[100] = "";
	npy_shape_str(v->ndim, v->shape, shape, sizeof shape);
	if (r->max_at != FOS_CMP_NONE)
		fos_cmp_index_str(v->ndim, v->shape, r->max_at, at, sizeof at);
	if (r->first_differ != FOS_CMP_NONE)
		fos_cmp_index_str(v->ndim, v->shape, r->first_differ, first, sizeof first);
	if (json) {
		cli_jw w;
		cli_jw_init(&w, stdout, 1);
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "ours", v->ours);
		cli_jw_str(&w, "reference", v->reference);
		if (v->weight) {
			cli_jw_str(&w, "weight", v->weight);
			cli_jw_str(&w, "x", v->x);
		}
		cli_jw_str(&w, "dtype", v->dtype == NPY_U1 ? "uint8" : (v->dtype == NPY_U2 ? "bf16" : "float32"));
		cli_jw_arr(&w, "shape");
		for (int d = 0; d < v->ndim; d++)
			cli_jw_i64(&w, NULL, v->shape[d]);
		cli_jw_end(&w, ']');
		cli_jw_u64(&w, "elements", r->n);
		cli_jw_u64(&w, "differ", r->differ);
		cli_jw_u64(&w, "nonfinite_mismatches", r->nonfinite);
		if (r->first_differ != FOS_CMP_NONE)
			cli_jw_str(&w, "first_differ_at", first);
		else
			cli_jw_null(&w, "first_differ_at");
		cli_jw_i64(&w, "max_ulps", r->max_at != FOS_CMP_NONE ? r->max_ulps : 0);
		if (r->max_at != FOS_CMP_NONE)
			cli_jw_str(&w, "max_ulps_at", at);
		else
			cli_jw_null(&w, "max_ulps_at");
		cli_jw_str(&w, "ulp", is_float ? ulp_unit : "uint8");
		if (is_float && isfinite(v->sqnr))
			cli_jw_dbl(&w, "sqnr_db", v->sqnr);
		else
			cli_jw_null(&w, "sqnr_db");
		cli_jw_bool(&w, "exact", r->differ == 0);
		cli_jw_str(&w, "criterion", v->criterion);
		cli_jw_bool(&w, "consistent", v->consistent);
		cli_jw_str(&w, "reason", v->why);
		cli_jw_end(&w, '}');
		return;
	}
	if (v->weight)
		printf("compared %s with fosd's Y of weight '%s' on %s: %s %s, %zu elements\n", v->ours, v->weight, v->x,
		       npy_dtype_human(v->dtype), shape, r->n);
	else
		printf("compared %s with %s: %s %s, %zu elements\n", v->ours, v->reference, npy_dtype_human(v->dtype),
		       shape, r->n);
	printf("  differ:      %zu (%.4g %%)\n", r->differ, r->n ? 100.0 * (double)r->differ / (double)r->n : 0.0);
	if (r->first_differ != FOS_CMP_NONE)
		printf("  first:       %s: ours %.9g, reference %.9g\n", first,
		       fos_cmp_bits_value(r->type, r->first_bits[0]), fos_cmp_bits_value(r->type, r->first_bits[1]));
	if (r->max_at != FOS_CMP_NONE)
		printf("  max ulps:    %lld %s at %s: ours %.9g, reference %.9g\n", (long long)r->max_ulps,
		       is_float ? ulp_unit : "(byte value)", at, fos_cmp_bits_value(r->type, r->max_bits[0]),
		       fos_cmp_bits_value(r->type, r->max_bits[1]));
	else if (r->nonfinite)
		printf("  max ulps:    (every differing element is NaN/inf on one side)\n");
	else
		printf("  max ulps:    0\n");
	if (r->nonfinite)
		printf("  non-finite:  %zu elements NaN/inf on one side only\n", r->nonfinite);
	if (is_float) {
		if (isinf(v->sqnr) && v->sqnr > 0)
			printf("  sqnr:        inf dB (no difference in value)\n");
		else if (isinf(v->sqnr))
			printf("  sqnr:        -inf dB (the reference is all zeros)\n");
		else
			printf("  sqnr:        %.2f dB\n", v->sqnr);
	}
	printf("%s: %s\n", v->consistent ? "consistent" : "NOT consistent", v->why);
}

static const fos_cmp_labels cli_check_labels = {"--bitwise", "--max-ulps", "--min-sqnr"};

static const char *check_criterion_name(const fos_cmp_criterion *c)
{
	if (c->by_min_sqnr && c->by_max_ulps)
		return "max_ulps+min_sqnr";
	return c->by_min_sqnr ? "min_sqnr" : (c->by_max_ulps ? "max_ulps" : "bitwise");
}

/* Flat index of a point of fosd's check (FOS_CMP_NONE when absent), its bits into bits. */
static size_t check_flat(const fos_check_point *p, int64_t cols, uint32_t bits[2])
{
	if (!p->present)
		return FOS_CMP_NONE;
	bits[0] = p->expect;
	bits[1] = p->y;
	return (size_t)(p->row * cols + p->col);
}

enum { CF_BITWISE, CF_SQNR, CF_ULPS, CF_JSON, CF_REMOTE, CF_BIAS, CF_ROW, CF_VERSION, CF_SHM, CF_COUNT };

/* --remote NAME X.npy Y.npy: fosd's check. Returns the exit status (errors already reported). */
static int check_remote(const cli_global *g, cli_flag *flags, const char *name, const char *xp, const char *yp,
			const fos_cmp_criterion *crit)
{
	fos_err err = {0, ""};
	npy_array x = {0}, y = {0}, bias = {0};
	fos_client *c = NULL;
	cli_shm sh;
	memset(&sh, 0, sizeof sh);
	int code = CLI_EXIT_USAGE;
	const char *bp = flags[CF_BIAS].value;
	uint64_t version = 0;
	if (flags[CF_VERSION].given && cli_parse_u64("--version", flags[CF_VERSION].value, 1, UINT64_MAX, &version, &err))
		goto fail;
	if (cli_load_bf16(xp, 2, "(M, K)", &x, &err) || cli_check_nonempty(&x, xp, &err))
		goto fail;
	if (cli_load(yp, &y, &err))
		goto fail;
	if (y.dtype != NPY_U2) {
		cli_errf(&err, "check: %s holds %s, but fosd's Y is bf16 ('<u2'): a check compares bits, so give Y as bf16",
			 yp, npy_dtype_human(y.dtype));
		goto fail;
	}
	if (y.ndim < 1 || y.ndim > 2 || y.count == 0) {
		char sb[200];
		cli_errf(&err, "check: %s has shape %s; Y is (M, N)", yp, npy_shape_str(y.ndim, y.shape, sb, sizeof sb));
		goto fail;
	}
	if (cli_load_bias(bp, &bias, &err) || cli_connect(g, &c, &err))
		goto fail;
	fos_tensor tx = cli_tensor_bf16(&x);
	fos_tensor te = cli_tensor_bf16(&y);
	fos_tensor tb = fos_tensor_1d(FOS_DTYPE_BF16, bp ? bias.shape[0] : 1, bias.data);
	fos_tensor *px = &tx, *pe = &te, *pb = bp ? &tb : NULL, sx, se, sb;
	if (flags[CF_SHM].given) { /* X, Y (and the bias) copied once into a region */
		size_t need = cli_shm_slot(fos_tensor_bytes(&tx)) + cli_shm_slot(fos_tensor_bytes(&te)) +
			      (bp ? cli_shm_slot(fos_tensor_bytes(&tb)) : 0);
		if (cli_shm_open(c, need, &sh, &err))
			goto fail;
		sx = cli_shm_in(&sh, &tx);
		se = cli_shm_in(&sh, &te);
		px = &sx;
		pe = &se;
		if (bp) {
			sb = cli_shm_in(&sh, &tb);
			pb = &sb;
		}
	}
	fos_forward_opts o = {version, FOS_OVERRIDE_DEFAULT, flags[CF_ROW].given, 0, 0};
	fos_check_criterion fc = {crit->by_max_ulps, (uint32_t)crit->max_ulps, crit->by_min_sqnr, crit->min_sqnr_db};
	fos_check_result res;
	fos_status st;
	if (fos_forward_check(c, name, px, pb, &o, pe, &fc, &res, &st)) {
		char what[200];
		snprintf(what, sizeof what, "check --remote %s", name);
		cli_status_err(&st, what, &err);
		goto fail;
	}
	/* fosd's numbers into the form of a local comparison, for the same verdict text and report */
	check_view v;
	memset(&v, 0, sizeof v);
	fos_cmp_init(&v.r, FOS_CMP_BF16);
	v.r.n = (size_t)res.elements;
	v.r.differ = (size_t)res.differ;
	v.r.nonfinite = (size_t)res.nonfinite;
	v.r.max_ulps = res.max_ulps;
	v.r.max_at = check_flat(&res.max_ulps_at, res.cols, v.r.max_bits);
	v.r.first_differ = check_flat(&res.first_differ, res.cols, v.r.first_bits);
	v.r.nonfinite_at = check_flat(&res.first_nonfinite, res.cols, v.r.nonfinite_bits);
	char why[256];
	int consistent = fos_cmp_verdict(&v.r, res.sqnr_db, crit, &cli_check_labels, y.ndim, y.shape, why, sizeof why);
	v.ours = yp;
	v.reference = "fosd";
	v.weight = name;
	v.x = xp;
	v.dtype = NPY_U2;
	v.ndim = y.ndim;
	v.shape = y.shape;
	v.sqnr = res.sqnr_db;
	v.criterion = check_criterion_name(crit);
	v.consistent = res.consistent;
	v.why = consistent == res.consistent ? why : res.reason; /* fosd's verdict decides */
	if (!g->quiet)
		check_print(&v, g->json);
	code = res.consistent ? CLI_EXIT_OK : CLI_EXIT_FAIL;
	if (fflush(stdout)) {
		cli_errf(&err, "check: cannot write the result to stdout");
		code = CLI_EXIT_USAGE;
		goto fail;
	}
	goto done;
fail:
	cli_report(&err, CLI_EXIT_USAGE);
	code = CLI_EXIT_USAGE;
done:
	cli_shm_close(&sh); /* before the connection goes */
	fos_close(c);
	npy_free(&x);
	npy_free(&y);
	npy_free(&bias);
	return code;
}

int cli_check_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[CF_COUNT] = {
		[CF_BITWISE] = {"--bitwise", NULL, "consistent only when every element has the same bits (the\n"
						   "default when no other criterion is given)", 0, 0},
		[CF_SQNR] = {"--min-sqnr", "DB", "consistent when the SQNR of OURS against REFERENCE is at\n"
						 "least DB decibels and no element is NaN/inf on one side only", 0, 0},
		[CF_ULPS] = {"--max-ulps", "N", "consistent when no element is more than N ulps (of the\n"
						"arrays' dtype) from the reference; may be combined with\n"
						"--min-sqnr (both must hold)", 0, 0},
		[CF_JSON] = {"--json", NULL, "print the result as one JSON object", 0, 0},
		[CF_REMOTE] = {"--remote", "NAME", "let fosd check: the positionals are then X.npy Y.npy; fosd\n"
						   "computes Y of X with its cached weight NAME (as `fos forward`),\n"
						   "compares Y.npy (bf16, the result to check) with it and sends\n"
						   "back only the numbers: no Y crosses the socket. The report is\n"
						   "that of `fos check Y.npy FOSD_Y.npy`", 0, 0},
		[CF_BIAS] = {"--bias", "B.npy", "--remote: the forward's bias, shape (N,), bf16 or float32", 0, 0},
		[CF_ROW] = {"--row-scaled", NULL, "--remote: the forward scales X per row", 0, 0},
		[CF_VERSION] = {"--version", "V", "--remote: use the cached weight only if it has version V", 0, 0},
		[CF_SHM] = {"--shm", NULL, "--remote: X, Y.npy and the bias go to fosd through a\n"
					   "shared-memory region (an ipc:// fosd on this host)", 0, 0},
	};
	static const char *const pos_names[] = {"OURS.npy", "REFERENCE.npy"};
	static const char *const pos_help[] = {"the result to check: bf16 ('<u2'), float32 ('<f4') or uint8\n"
					       "(with --remote: X.npy, the forward's input, bf16 or float32)",
					       "the reference: the same dtype and shape (with --remote:\n"
					       "Y.npy, the result to check, bf16 (M, N))"};
	cli_cmd cmd = {
		.name = "check",
		.synopsis = "OURS.npy REFERENCE.npy [--bitwise | --min-sqnr DB | --max-ulps N] [--json]\n"
			    "       fos check --remote NAME X.npy Y.npy [--bitwise | --min-sqnr DB | --max-ulps N]\n"
			    "           [--bias B.npy] [--row-scaled] [--version V] [--shm] [--json]",
		.summary = "Inference-consistency check: compare a result with a reference, element by element.",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
		.about = "Reports how many elements differ (in their bits), the first of them, the largest\n"
			 "difference in ulps of the dtype (bf16 ulps for bf16, f32 ulps for float32; -0 and +0\n"
			 "are 0 ulps apart) and the SQNR in dB = 10 log10(sum ref^2 / sum (ours - ref)^2).\n"
			 "uint8 arrays (codes, scales) compare bitwise only. With --remote fosd makes the same\n"
			 "comparison (the same code) of Y.npy against its own Y.",
		.footer = "Exit status: 0 consistent; 1 not consistent; 2 the comparison could not be made (bad\n"
			  "command line, unreadable file, dtype or shape mismatch, or fosd's error).",
	};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;
	fos_cmp_criterion crit = {0, 0, 0, 0};
	int bitwise = flags[CF_BITWISE].given;
	crit.by_min_sqnr = flags[CF_SQNR].given;
	crit.by_max_ulps = flags[CF_ULPS].given;
	if (bitwise && (crit.by_min_sqnr || crit.by_max_ulps))
		return cli_fail(CLI_EXIT_USAGE, "check: --bitwise cannot be combined with --min-sqnr or --max-ulps");
	if (crit.by_min_sqnr && cli_parse_double("--min-sqnr", flags[CF_SQNR].value, &crit.min_sqnr_db, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	if (crit.by_max_ulps && cli_parse_u64("--max-ulps", flags[CF_ULPS].value, 0, UINT32_MAX, &crit.max_ulps, &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	if (flags[CF_REMOTE].given)
		return check_remote(g, flags, flags[CF_REMOTE].value, cmd.pos[0], cmd.pos[1], &crit);
	static const int remote_only[] = {CF_BIAS, CF_ROW, CF_VERSION, CF_SHM};
	for (size_t i = 0; i < sizeof remote_only / sizeof remote_only[0]; i++)
		if (flags[remote_only[i]].given)
			return cli_fail(CLI_EXIT_USAGE, "check: %s needs --remote NAME (it is an option of fosd's forward)",
					flags[remote_only[i]].name);

	const char *op = cmd.pos[0], *rp = cmd.pos[1];
	npy_array a, b;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
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
	if (a.dtype == NPY_U1 && (crit.by_min_sqnr || crit.by_max_ulps)) {
		cli_errf(&err, "check: %s holds uint8 (codes or scales), which compare bitwise only: drop %s", op,
			 crit.by_min_sqnr ? "--min-sqnr" : "--max-ulps");
		goto fail;
	}

	check_view v;
	memset(&v, 0, sizeof v);
	fos_compare(a.dtype == NPY_U1 ? FOS_CMP_U8 : (a.dtype == NPY_U2 ? FOS_CMP_BF16 : FOS_CMP_F32), a.data, b.data,
		    a.count, &v.r);
	v.sqnr = fos_cmp_sqnr_db(&v.r);
	char why[256];
	v.consistent = fos_cmp_verdict(&v.r, v.sqnr, &crit, &cli_check_labels, a.ndim, a.shape, why, sizeof why);
	v.why = why;
	v.ours = op;
	v.reference = rp;
	v.dtype = a.dtype;
	v.ndim = a.ndim;
	v.shape = a.shape;
	v.criterion = check_criterion_name(&crit);
	if (!g->quiet)
		check_print(&v, g->json);
	int code = v.consistent ? CLI_EXIT_OK : CLI_EXIT_FAIL;
	if (fflush(stdout)) {
		cli_errf(&err, "check: cannot write the result to stdout");
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
