/* test_cli_check.c: `fos check OURS REFERENCE` (build/fos as a subprocess): elements that differ,
 * the largest ulp distance (bf16 and f32, across zero, -0 == +0), SQNR, NaN/inf handling, uint8,
 * each criterion (--bitwise, --max-ulps, --min-sqnr) both ways with its exit status, --json read
 * back, and the comparisons that cannot be made (exit 2, one "fos: " line). Every expected number
 * is worked out by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "cli.h"
#include "test_cli_harness.h"
#include "support_json.h"

#define CHK "check"

static int check_setup(void **state)
{
	if (th_setup(state))
		return -1;
	uint16_t ones[16], a[16];
	for (int i = 0; i < 16; i++)
		ones[i] = 0x3F80; /* bf16 1.0 */
	th_save(th_p("ref.npy"), NPY_U2, 2, 4, 4, ones);
	th_save(th_p("same.npy"), NPY_U2, 2, 4, 4, ones);
	/* one element ([1, 1], flat 5) one bf16 ulp up: 1 + 2^-7 */
	memcpy(a, ones, sizeof a);
	a[5] = 0x3F81;
	th_save(th_p("ulp1.npy"), NPY_U2, 2, 4, 4, a);
	/* -0 against +0 */
	uint16_t z0[16], z1[16];
	memcpy(z0, ones, sizeof z0);
	memcpy(z1, ones, sizeof z1);
	z0[3] = 0x8000;
	z1[3] = 0x0000;
	th_save(th_p("negzero.npy"), NPY_U2, 2, 4, 4, z0);
	th_save(th_p("poszero.npy"), NPY_U2, 2, 4, 4, z1);
	/* smallest positive denormal against the smallest negative one: 2 ulps across zero */
	z0[3] = 0x0001;
	z1[3] = 0x8001;
	th_save(th_p("dpos.npy"), NPY_U2, 2, 4, 4, z0);
	th_save(th_p("dneg.npy"), NPY_U2, 2, 4, 4, z1);
	/* NaN on one side; two NaNs with different payloads; +inf against -inf */
	memcpy(a, ones, sizeof a);
	a[0] = 0x7FC0;
	th_save(th_p("nan.npy"), NPY_U2, 2, 4, 4, a);
	a[0] = 0x7FC1;
	th_save(th_p("nan2.npy"), NPY_U2, 2, 4, 4, a);
	a[0] = 0x7F80;
	th_save(th_p("pinf.npy"), NPY_U2, 2, 4, 4, a);
	a[0] = 0xFF80;
	th_save(th_p("ninf.npy"), NPY_U2, 2, 4, 4, a);
	/* float32 */
	float f1[3] = {1, 1, 1}, f2[3] = {1, 2, 1};
	th_save(th_p("f1.npy"), NPY_F4, 1, 3, 0, f1);
	th_save(th_p("f2.npy"), NPY_F4, 1, 3, 0, f2);
	/* uint8 codes */
	uint8_t c1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, c2[8] = {1, 2, 3, 4, 5, 6, 7, 11};
	th_save(th_p("c1.npy"), NPY_U1, 2, 2, 4, c1);
	th_save(th_p("c2.npy"), NPY_U1, 2, 2, 4, c2);
	/* mismatches */
	th_save(th_p("ref2x8.npy"), NPY_U2, 2, 2, 8, ones);
	float f16[16] = {0};
	th_save(th_p("ref_f32.npy"), NPY_F4, 2, 4, 4, f16);
	return 0;
}

static void run_check(th_result *r, const char *ours, const char *ref, const char *opt1, const char *opt2)
{
	const char *args[8] = {CHK, th_p(ours), th_p(ref), opt1, opt2, NULL};
	th_runv(r, args);
}

/* Exit code and a piece of stdout; nothing on stderr. */
static void expect(const th_result *r, int code, const char *needle)
{
	if (r->status != code || r->err[0] || !strstr(r->out, needle))
		fail_msg("exit %d (want %d), stderr [%s], stdout does %scontain '%s':\n%s", r->status, code, r->err,
			 strstr(r->out, needle) ? "" : "not ", needle, r->out);
}

static void parse_json(const th_result *r, cli_jv *v)
{
	fos_err e = {0, ""};
	if (cli_json_parse(r->out, strlen(r->out), v, &e))
		fail_msg("--json output does not parse (%s):\n%s", e.msg, r->out);
}

static void test_identical(void **state)
{
	(void)state;
	th_result r;
	run_check(&r, "same.npy", "ref.npy", NULL, NULL);
	expect(&r, 0, "consistent: bitwise identical");
	expect(&r, 0, "differ:      0 ");
	expect(&r, 0, "16 elements");
	expect(&r, 0, "sqnr:        inf dB");
	assert_null(strstr(r.out, "first:"));
	run_check(&r, "same.npy", "ref.npy", "--min-sqnr", "300");
	expect(&r, 0, "consistent: within --min-sqnr 300 dB");
	run_check(&r, "c1.npy", "c1.npy", NULL, NULL);
	expect(&r, 0, "consistent");
}

/* One element 1 ulp off: sig = sum ref^2 = 16, noise = (2^-7)^2 = 2^-14, so
 * SQNR = 10 log10(2^4 / 2^-14) = 180 log10(2) = 54.1854 dB. */
static void test_one_ulp(void **state)
{
	(void)state;
	th_result r;
	run_check(&r, "ulp1.npy", "ref.npy", NULL, NULL);
	expect(&r, 1, "NOT consistent: 1 of 16 elements differ (--bitwise)");
	expect(&r, 1, "first:       [1, 1]: ours 1.0078125, reference 1");
	expect(&r, 1, "max ulps:    1 bf16 at [1, 1]: ours 1.0078125, reference 1");
	expect(&r, 1, "sqnr:        54.19 dB");
	run_check(&r, "ulp1.npy", "ref.npy", "--bitwise", NULL);
	expect(&r, 1, "NOT consistent");
	run_check(&r, "ulp1.npy", "ref.npy", "--min-sqnr", "54");
	expect(&r, 0, "consistent: within --min-sqnr 54 dB");
	run_check(&r, "ulp1.npy", "ref.npy", "--min-sqnr", "54.2");
	expect(&r, 1, "NOT consistent: SQNR 54.19 dB < --min-sqnr 54.2 dB");
	run_check(&r, "ulp1.npy", "ref.npy", "--max-ulps", "1");
	expect(&r, 0, "consistent: within --max-ulps 1");
	run_check(&r, "ulp1.npy", "ref.npy", "--max-ulps", "0");
	expect(&r, 1, "NOT consistent: max 1 bf16 ulps > --max-ulps 0");
	/* both criteria */
	const char *args[] = {CHK, th_p("ulp1.npy"), th_p("ref.npy"), "--max-ulps", "1", "--min-sqnr", "60", NULL};
	th_runv(&r, args);
	expect(&r, 1, "SQNR 54.19 dB < --min-sqnr 60 dB");

	run_check(&r, "ulp1.npy", "ref.npy", "--json", "--min-sqnr=50");
	cli_jv v;
	parse_json(&r, &v);
	assert_int_equal(r.status, 0);
	assert_true(cli_json_get(&v, "differ")->num == 1);
	assert_true(cli_json_get(&v, "elements")->num == 16);
	assert_true(cli_json_get(&v, "max_ulps")->num == 1);
	assert_string_equal(cli_json_get(&v, "max_ulps_at")->str, "[1, 1]");
	assert_string_equal(cli_json_get(&v, "first_differ_at")->str, "[1, 1]");
	assert_string_equal(cli_json_get(&v, "ulp")->str, "bf16");
	assert_string_equal(cli_json_get(&v, "dtype")->str, "bf16");
	assert_true(fabs(cli_json_get(&v, "sqnr_db")->num - 180.0 * log10(2.0)) < 1e-6);
	assert_int_equal(cli_json_get(&v, "consistent")->b, 1);
	assert_int_equal(cli_json_get(&v, "exact")->b, 0);
	assert_string_equal(cli_json_get(&v, "criterion")->str, "min_sqnr");
	const cli_jv *shape = cli_json_get(&v, "shape");
	assert_true(shape->n == 2 && shape->items[0].num == 4 && shape->items[1].num == 4);
	cli_json_free(&v);
}

static void test_zero_and_denormals(void **state)
{
	(void)state;
	th_result r;
	/* -0 vs +0: the bits differ, the values do not: 0 ulps, SQNR inf */
	run_check(&r, "negzero.npy", "poszero.npy", NULL, NULL);
	expect(&r, 1, "1 of 16 elements differ");
	expect(&r, 1, "max ulps:    0 bf16 at [0, 3]");
	run_check(&r, "negzero.npy", "poszero.npy", "--max-ulps", "0");
	expect(&r, 0, "consistent");
	run_check(&r, "negzero.npy", "poszero.npy", "--min-sqnr", "1000");
	expect(&r, 0, "sqnr:        inf dB");
	/* +2^-133 vs -2^-133: keys +1 and -1, 2 ulps */
	run_check(&r, "dpos.npy", "dneg.npy", "--max-ulps", "2");
	expect(&r, 0, "max ulps:    2 bf16 at [0, 3]");
	run_check(&r, "dpos.npy", "dneg.npy", "--max-ulps", "1");
	expect(&r, 1, "max 2 bf16 ulps > --max-ulps 1");
	/* float32 1.0 vs 2.0: 0x40000000 - 0x3F800000 = 2^23 = 8388608 ulps; SQNR 10 log10(3/1) = 4.77 */
	run_check(&r, "f2.npy", "f1.npy", NULL, NULL);
	expect(&r, 1, "max ulps:    8388608 f32 at [1]: ours 2, reference 1");
	expect(&r, 1, "sqnr:        4.77 dB");
	run_check(&r, "f2.npy", "f1.npy", "--min-sqnr", "4.7");
	expect(&r, 0, "consistent");
	run_check(&r, "f2.npy", "f1.npy", "--min-sqnr", "4.8");
	expect(&r, 1, "NOT consistent");
}

static void test_nonfinite(void **state)
{
	(void)state;
	th_result r;
	/* NaN against 1.0: never consistent except bitwise-equal */
	run_check(&r, "nan.npy", "ref.npy", "--min-sqnr", "0");
	expect(&r, 1, "1 elements are NaN/inf on one side only (first at [0, 0])");
	expect(&r, 1, "non-finite:  1");
	expect(&r, 1, "first:       [0, 0]: ours nan, reference 1");
	run_check(&r, "nan.npy", "ref.npy", "--max-ulps", "1000000");
	expect(&r, 1, "NOT consistent");
	run_check(&r, "nan.npy", "ref.npy", "--json", NULL);
	cli_jv v;
	parse_json(&r, &v);
	assert_true(cli_json_get(&v, "nonfinite_mismatches")->num == 1);
	assert_int_equal(cli_json_get(&v, "consistent")->b, 0);
	cli_json_free(&v);
	/* two NaNs with different payloads are the same non-number, but not the same bits */
	run_check(&r, "nan2.npy", "nan.npy", "--max-ulps", "0");
	expect(&r, 0, "consistent");
	run_check(&r, "nan2.npy", "nan.npy", NULL, NULL);
	expect(&r, 1, "1 of 16 elements differ");
	/* +inf vs -inf */
	run_check(&r, "pinf.npy", "ninf.npy", "--max-ulps", "0");
	expect(&r, 1, "NaN/inf on one side only");
	run_check(&r, "pinf.npy", "pinf.npy", "--min-sqnr", "10");
	expect(&r, 0, "consistent");
}

static void test_uint8(void **state)
{
	(void)state;
	th_result r;
	run_check(&r, "c2.npy", "c1.npy", NULL, NULL);
	expect(&r, 1, "max ulps:    3 (byte value) at [1, 3]");
	expect(&r, 1, "1 of 8 elements differ");
	run_check(&r, "c2.npy", "c1.npy", "--min-sqnr", "10");
	th_expect_fail(&r, 2, "compare bitwise only");
}

static void test_cannot_compare(void **state)
{
	(void)state;
	th_result r;
	run_check(&r, "ref.npy", "ref2x8.npy", NULL, NULL);
	th_expect_fail(&r, 2, "shapes differ");
	run_check(&r, "ref.npy", "ref_f32.npy", NULL, NULL);
	th_expect_fail(&r, 2, "dtypes differ");
	run_check(&r, "ref.npy", "nothere.npy", NULL, NULL);
	th_expect_fail(&r, 2, "nothere.npy: cannot open");
	run_check(&r, "ref.npy", "same.npy", "--bitwise", "--min-sqnr=3");
	th_expect_fail(&r, 2, "--bitwise cannot be combined");
	run_check(&r, "ref.npy", "same.npy", "--min-sqnr", "loud");
	th_expect_fail(&r, 2, "bad value 'loud' for --min-sqnr");
	run_check(&r, "ref.npy", "same.npy", "--max-ulps", "1.5");
	th_expect_fail(&r, 2, "bad value '1.5' for --max-ulps");
	run_check(&r, "ref.npy", "same.npy", "--tolerance", "1");
	th_expect_fail(&r, 2, "unknown option '--tolerance'");
	th_run(&r, CHK, th_p("ref.npy"), NULL);
	th_expect_fail(&r, 2, "missing argument REFERENCE.npy");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identical),       cmocka_unit_test(test_one_ulp),
		cmocka_unit_test(test_zero_and_denormals), cmocka_unit_test(test_nonfinite),
		cmocka_unit_test(test_uint8),           cmocka_unit_test(test_cannot_compare),
	};
	return cmocka_run_group_tests_name("cli_check", tests, check_setup, th_teardown);
}
