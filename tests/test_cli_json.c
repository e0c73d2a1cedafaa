/* test_cli_json.c: the CLI's JSON reader and writer (client/cli/cli_json.c): well-formed documents by
 * hand (nesting, escapes, \u and surrogate pairs to UTF-8, 64-bit integers kept exact as text),
 * malformed ones refused with a line/column message, and writer output read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void parse_ok(const char *text, cli_jv *v)
{
	fos_err e = {0, ""};
	if (cli_json_parse(text, strlen(text), v, &e))
		fail_msg("refused %s: %s", text, e.msg);
}

static void test_parse_documents(void **state)
{
	(void)state;
	cli_jv v;
	parse_ok(" { \"a\" : [1, -2.5e3, true, false, null, \"x\"], \"b\": {\"c\": {\"d\": 18446744073709551615}},"
		 " \"e\": [], \"f\": {} }\n",
		 &v);
	assert_int_equal(v.type, CLI_JOBJ);
	assert_int_equal(v.n, 4);
	const cli_jv *a = cli_json_get(&v, "a");
	assert_non_null(a);
	assert_int_equal(a->type, CLI_JARR);
	assert_int_equal(a->n, 6);
	assert_true(a->items[0].type == CLI_JNUM && a->items[0].num == 1.0);
	assert_true(a->items[1].num == -2500.0);
	assert_true(a->items[2].type == CLI_JBOOL && a->items[2].b == 1);
	assert_true(a->items[3].type == CLI_JBOOL && a->items[3].b == 0);
	assert_int_equal(a->items[4].type, CLI_JNULL);
	assert_string_equal(a->items[5].str, "x");
	const cli_jv *d = cli_json_path(&v, "b.c.d");
	assert_non_null(d);
	assert_string_equal(d->num_raw, "18446744073709551615");
	assert_null(cli_json_path(&v, "b.c.x"));
	assert_null(cli_json_path(&v, "a.b"));
	assert_int_equal(cli_json_get(&v, "e")->n, 0);
	assert_int_equal(cli_json_get(&v, "f")->type, CLI_JOBJ);
	cli_json_free(&v);

	/* escapes: \" \\ \/ \n \t, U+00E9 (2 bytes), U+20AC (3), U+1F600 as a surrogate pair (4) */
	parse_ok("\"q\\\" b\\\\ s\\/ n\\n t\\t \\u00e9 \\u20AC \\ud83d\\ude00\"", &v);
	assert_int_equal(v.type, CLI_JSTR);
	assert_string_equal(v.str, "q\" b\\ s/ n\n t\t \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
	cli_json_free(&v);
	parse_ok("0", &v);
	assert_true(v.type == CLI_JNUM && v.num == 0.0);
	cli_json_free(&v);
}

static void test_parse_refuses(void **state)
{
	(void)state;
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"", "unexpected end"},
		{"{\"a\": 1,}", "member name"},
		{"[1, 2,]", "unexpected character"},
		{"[1 2]", "expected ',' or ']'"},
		{"{\"a\" 1}", "expected ':'"},
		{"{a: 1}", "member name"},
		{"\"abc", "unterminated string"},
		{"\"a\\qb\"", "bad escape"},
		{"\"\\ud83d\"", "unpaired surrogate"},
		{"\"\\u00zz\"", "bad hex digit"},
		{"\"\\u0000\"", "\\u0000"},
		{"\"tab\there\"", "control character"},
		{"01", "unexpected text after"},
		{"1.", "no digit after '.'"},
		{"1e", "no digit in the exponent"},
		{"-", "bad number"},
		{"tru", "unexpected character"},
		{"{} x", "unexpected text after"},
		{"[1]\n]", "line 2 column 1"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cli_jv v;
		fos_err e = {0, ""};
		if (!cli_json_parse(bad[i].text, strlen(bad[i].text), &v, &e))
			fail_msg("accepted %s", bad[i].text);
		if (!strstr(e.msg, bad[i].why))
			fail_msg("%s: message '%s' does not say '%s'", bad[i].text, e.msg, bad[i].why);
	}
	/* nesting deeper than 64 levels */
	char deep[200];
	memset(deep, '[', 100);
	memset(deep + 100, ']', 100);
	cli_jv v;
	fos_err e = {0, ""};
	assert_int_not_equal(cli_json_parse(deep, 200, &v, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "nested too deeply"));
}

static void test_writer_round_trip(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	cli_jw w;
	cli_jw_init(&w, f, 1);
	cli_jw_obj(&w, NULL);
	cli_jw_str(&w, "s", "a\"b\\c\n\x01");
	cli_jw_u64(&w, "u", UINT64_MAX);
	cli_jw_i64(&w, "i", -42);
	cli_jw_dbl(&w, "d", 0.25);
	cli_jw_dbl(&w, "inf", INFINITY);
	cli_jw_bool(&w, "t", 1);
	cli_jw_null(&w, "z");
	cli_jw_arr(&w, "arr");
	cli_jw_i64(&w, NULL, 1);
	cli_jw_obj(&w, NULL);
	cli_jw_end(&w, '}');
	cli_jw_arr(&w, NULL);
	cli_jw_end(&w, ']');
	cli_jw_end(&w, ']');
	cli_jw_end(&w, '}');
	assert_int_equal(fclose(f), 0);
	cli_jv v;
	fos_err e = {0, ""};
	if (cli_json_parse(buf, len, &v, &e))
		fail_msg("writer output does not parse (%s):\n%s", e.msg, buf);
	assert_string_equal(cli_json_get(&v, "s")->str, "a\"b\\c\n\x01");
	assert_string_equal(cli_json_get(&v, "u")->num_raw, "18446744073709551615");
	assert_true(cli_json_get(&v, "i")->num == -42.0);
	assert_true(cli_json_get(&v, "d")->num == 0.25);
	assert_int_equal(cli_json_get(&v, "inf")->type, CLI_JNULL);
	assert_int_equal(cli_json_get(&v, "t")->b, 1);
	assert_int_equal(cli_json_get(&v, "z")->type, CLI_JNULL);
	const cli_jv *arr = cli_json_get(&v, "arr");
	assert_int_equal(arr->n, 3);
	assert_int_equal(arr->items[1].type, CLI_JOBJ);
	assert_int_equal(arr->items[2].type, CLI_JARR);
	cli_json_free(&v);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_documents),
		cmocka_unit_test(test_parse_refuses),
		cmocka_unit_test(test_writer_round_trip),
	};
	return cmocka_run_group_tests_name("cli_json", tests, NULL, NULL);
}
