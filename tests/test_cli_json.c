/* test_cli_json.c: the CLI's JSON reader (jansson underneath) and writer (client/cli/cli_json.c):
 * well-formed documents by hand (nesting, escapes, \u and surrogate pairs to UTF-8, integers up to
 * 2^63 - 1 kept exact as text, larger ones read as doubles), malformed ones (and duplicate member
 * names, nesting past 64 levels) refused with a line/column message, and writer output read back,
 * the context file's 64-bit fields included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "support_json.h"

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
	parse_ok(" { \"a\" : [1, -2.5e3, true, false, null, \"x\"], \"b\": {\"c\": {\"d\": 9223372036854775807}},"
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
	assert_string_equal(d->num_raw, "9223372036854775807");
	assert_true(d->num == 9223372036854775807.0);
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
	/* an integer past 2^63 - 1: the document still reads, its numbers as doubles (the small ones
	 * keep their digits; the big one is the nearest double) */
	parse_ok("{\"big\": 18446744073709551615, \"small\": 5, \"neg\": -3, \"f\": 0.5}", &v);
	assert_true(cli_json_get(&v, "big")->num == 18446744073709551616.0);
	assert_string_equal(cli_json_get(&v, "big")->num_raw, "1.8446744073709552e+19");
	assert_string_equal(cli_json_get(&v, "small")->num_raw, "5");
	assert_string_equal(cli_json_get(&v, "neg")->num_raw, "-3");
	assert_true(cli_json_get(&v, "f")->num == 0.5);
	cli_json_free(&v);
}

static void test_parse_refuses(void **state)
{
	(void)state;
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"", "line 1 column 0: unexpected token near end of file"},
		{"{\"a\": 1,}", "line 1 column 9: string or '}' expected"},
		{"[1, 2,]", "line 1 column 7: unexpected token near ']'"},
		{"[1 2]", "']' expected near '2'"},
		{"{\"a\" 1}", "':' expected near '1'"},
		{"{a: 1}", "string or '}' expected near 'a'"},
		{"\"abc", "premature end of input"},
		{"\"a\\qb\"", "invalid escape"},
		{"\"\\ud83d\"", "invalid Unicode '\\uD83D'"},
		{"\"\\udc00\"", "invalid Unicode '\\uDC00'"},
		{"\"\\u00zz\"", "invalid escape"},
		{"\"\\u0000\"", "\\u0000 is not allowed"},
		{"\"tab\there\"", "control character 0x9"},
		{"01", "invalid token near '0'"},
		{"1.", "invalid token near '1.'"},
		{"1e", "invalid token near '1e'"},
		{"-", "invalid token near '-'"},
		{"tru", "invalid token near 'tru'"},
		{"{} x", "end of file expected near 'x'"},
		{"[1]\n]", "line 2 column 1: end of file expected"},
		{"{\"a\": 1, \"a\": 2}", "duplicate object key"},
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
	cli_jw_u64(&w, "u63", INT64_MAX);
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
	/* past 2^63 - 1: a real of 10 significant digits (jansson has no unsigned integers) */
	assert_true(fabs(cli_json_get(&v, "u")->num / 18446744073709551616.0 - 1) < 1e-9);
	assert_true(cli_json_get(&v, "u63")->num == 9223372036854775807.0);
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

/* The writer's bytes (what scripts read): 2-space indents, or one line with ", " and ": "; a string
 * that is not UTF-8 still makes a document that parses (its stray bytes as '?'). */
static void test_writer_format(void **state)
{
	(void)state;
	for (int pretty = 0; pretty < 2; pretty++) {
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		assert_non_null(f);
		cli_jw w;
		cli_jw_init(&w, f, pretty);
		cli_jw_obj(&w, NULL);
		cli_jw_u64(&w, "a", 1);
		cli_jw_arr(&w, "b");
		cli_jw_bool(&w, NULL, 1);
		cli_jw_null(&w, NULL);
		cli_jw_end(&w, ']');
		cli_jw_dbl(&w, "c", 0.125);
		cli_jw_obj(&w, "e");
		cli_jw_end(&w, '}');
		cli_jw_str(&w, "p", "caf\xc3\xa9 \xff/x");
		cli_jw_end(&w, '}');
		assert_int_equal(fclose(f), 0);
		const char *want = pretty ? "{\n  \"a\": 1,\n  \"b\": [\n    true,\n    null\n  ],\n  \"c\": 0.125,\n"
					    "  \"e\": {},\n  \"p\": \"caf\xc3\xa9 ?/x\"\n}\n"
					  : "{\"a\": 1, \"b\": [true, null], \"c\": 0.125, \"e\": {}, \"p\": \"caf\xc3\xa9 ?/x\"}\n";
		assert_string_equal(buf, want);
		cli_jv v;
		fos_err e = {0, ""};
		if (cli_json_parse(buf, len, &v, &e))
			fail_msg("does not parse (%s): %s", e.msg, buf);
		cli_json_free(&v);
		free(buf);
	}
}

/* The context file: 64-bit fields come back exact (a version past 2^63 - 1 too), the file ends
 * with a newline, and a version that fits is written as a JSON number. */
static void test_context_file(void **state)
{
	(void)state;
	char dir[] = "/tmp/fos-test-json-XXXXXX", path[64], text[4096];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/ctx.json", dir);
	static const uint64_t versions[] = {1, (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX};
	for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
		cli_ctxfile cf, back;
		memset(&cf, 0, sizeof cf);
		cf.ctx.id = UINT64_MAX - i;
		snprintf(cf.ctx.weight, sizeof cf.ctx.weight, "w.%zu", i);
		cf.ctx.weight_version = versions[i];
		cf.ctx.m = 3;
		cf.ctx.n = 16;
		cf.ctx.k = 32;
		cf.ctx.ttl_ms = 60000;
		snprintf(cf.server, sizeof cf.server, "ipc:///tmp/x.sock");
		snprintf(cf.x_path, sizeof cf.x_path, "/data/x.npy");
		fos_err e = {0, ""};
		if (cli_ctxfile_write(path, &cf, &e) || cli_ctxfile_read(path, &back, &e))
			fail_msg("version %llu: %s", (unsigned long long)versions[i], e.msg);
		assert_true(back.ctx.id == cf.ctx.id);
		assert_true(back.ctx.weight_version == versions[i]);
		assert_string_equal(back.ctx.weight, cf.ctx.weight);
		assert_true(back.ctx.m == 3 && back.ctx.n == 16 && back.ctx.k == 32 && back.ctx.ttl_ms == 60000);
		assert_string_equal(back.x_path, "/data/x.npy");
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		size_t n = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		text[n] = 0;
		assert_true(n > 2 && text[n - 1] == '\n' && text[n - 2] == '}');
		char want[64];
		snprintf(want, sizeof want, versions[i] <= (uint64_t)INT64_MAX ? "\"weight_version\": %llu,"
									      : "\"weight_version\": \"%llu\",",
			 (unsigned long long)versions[i]);
		if (!strstr(text, want))
			fail_msg("no '%s' in:\n%s", want, text);
	}
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_documents),
		cmocka_unit_test(test_parse_refuses),
		cmocka_unit_test(test_writer_round_trip),
		cmocka_unit_test(test_writer_format),
		cmocka_unit_test(test_context_file),
	};
	return cmocka_run_group_tests_name("cli_json", tests, NULL, NULL);
}
