/* test_duration_shared.c: fosd's config and the fos CLI read durations with one parser
 * (proto/fos_duration.c): for every input both accept or both refuse, with the same value (the
 * CLI's in ns, the config's in ms, rounded to the nearest ms) and the same reason; the values are
 * written out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cli.h"
#include "config.h"
#include "fos_duration.h"

static void test_same_verdicts(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		int ok;
		uint64_t ns;     /* when ok */
		const char *why; /* when not */
	} cases[] = {
		{"250ms", 1, 250000000ull, NULL},
		{"1.5s", 1, 1500000000ull, NULL},
		{"30", 1, 30000000000ull, NULL},
		{"2min", 1, 120000000000ull, NULL},
		{"5m", 1, 300000000000ull, NULL},
		{"1h", 1, 3600000000000ull, NULL},
		{"0.25ms", 1, 250000ull, NULL},
		{"576h", 1, 576ull * 3600 * 1000000000ull, NULL},
		{"1e3", 0, 0, "not a decimal number"},
		{".5s", 0, 0, "not a decimal number"},
		{" 5s", 0, 0, "not a decimal number"},
		{"+5s", 0, 0, "not a decimal number"},
		{"nan", 0, 0, "not a decimal number"},
		{"-1s", 0, 0, "negative"},
		{"3days", 0, 0, "its unit is not ms, s, m or h"},
		{"577h", 0, 0, "longer than 24 days"},
		{"99999999999999999999999s", 0, 0, "longer than 24 days"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint64_t ms = 7, ns = 7;
		const char *why = NULL;
		int srv = fosd_parse_duration_why(cases[i].s, &ms, &why);
		fos_err e = {0, ""};
		int cli = cli_parse_duration("--duration", cases[i].s, &ns, &e);
		if (cases[i].ok) {
			if (srv || cli)
				fail_msg("'%s': want accepted; fosd %d (%s), fos: %s", cases[i].s, srv, why ? why : "", e.msg);
			assert_int_equal(ns, cases[i].ns);
			assert_int_equal(ms, (cases[i].ns + 500000) / 1000000);
		} else {
			if (!srv || !cli)
				fail_msg("'%s': want refused by both; fosd %d, fos %d", cases[i].s, srv, cli);
			assert_string_equal(why, cases[i].why);
			if (!strstr(e.msg, cases[i].why) || !strstr(e.msg, "--duration"))
				fail_msg("'%s': fos says '%s', want the reason '%s'", cases[i].s, e.msg, cases[i].why);
		}
	}
	/* the CLI wants a positive duration; the config takes 0 (off) */
	uint64_t v = 1;
	fos_err e = {0, ""};
	assert_int_equal(fosd_parse_duration_ms("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_not_equal(cli_parse_duration("--timeout", "0", &v, &e), 0);
	/* rounding to the nearest unit, halves up */
	assert_int_equal(fos_parse_duration("0.0005s", 1000000, &v, NULL), 0);
	assert_int_equal(v, 1);
	assert_int_equal(fos_parse_duration("0.0004999s", 1000000, &v, NULL), 0);
	assert_int_equal(v, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_verdicts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
