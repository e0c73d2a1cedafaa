/* test_cli_hints.c: what a newcomer meets running README's "Try it" (issue 30 items 4, 7, 8): each
 * error a user can fix says how (a weight already cached: --version, put-weight --replace,
 * drop-weight; a weight not cached: list-weights, put-weight; a wrong token: --token, $FOS_TOKEN;
 * a URL fosd cannot have: the schemes), `fos put-weight --replace` replaces a cached weight (the
 * forward then equals `fos linear --local` with the new W, bit for bit), and `fos stats` keeps its
 * columns aligned whatever the op names (close_device_memory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support_server.h"
#include "test_cli_harness.h"

static tsrv g_srv;

static int hints_setup(void **state)
{
	if (th_setup(state) || tsrv_start(&g_srv, NULL))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	static uint16_t x[64 * 128], w1[32 * 128], w2[32 * 128];
	tsrv_fill_bf16(x, 64 * 128, 11, 1.0f);
	tsrv_fill_bf16(w1, 32 * 128, 12, 0.05f);
	tsrv_fill_bf16(w2, 32 * 128, 13, 0.05f);
	int64_t sx[2] = {64, 128}, sw[2] = {32, 128};
	fos_err e = {0, ""};
	if (npy_write(th_p("x.npy"), NPY_U2, 2, sx, x, &e) || npy_write(th_p("w1.npy"), NPY_U2, 2, sw, w1, &e) ||
	    npy_write(th_p("w2.npy"), NPY_U2, 2, sw, w2, &e))
		return -1;
	return 0;
}

static int hints_teardown(void **state)
{
	int st = tsrv_stop(&g_srv, SIGTERM, 20000);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || st ? -1 : 0;
}

static void test_already_cached_says_the_way_out(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "layer0", th_p("w1.npy"), NULL);
	th_expect_ok(&r);
	th_run(&r, "put-weight", "layer0", th_p("w1.npy"), NULL);
	th_expect_fail(&r, 1, "ALREADY_EXISTS: weight 'layer0' version 1 is already cached");
	th_expect_fail(&r, 1, "--version N");
	th_expect_fail(&r, 1, "fos put-weight --replace");
	th_expect_fail(&r, 1, "fos drop-weight NAME");
}

static void test_replace(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "rep", th_p("w1.npy"), NULL);
	th_expect_ok(&r);
	th_run(&r, "put-weight", "rep", th_p("w2.npy"), "--replace", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "cached rep version 1"));
	th_run(&r, "put-weight", "new-by-replace", th_p("w2.npy"), "--replace", NULL); /* nothing to replace */
	th_expect_ok(&r);
	th_run(&r, "forward", "rep", th_p("x.npy"), "--out", th_p("y.npy"), NULL);
	th_expect_ok(&r);
	th_run(&r, "linear", th_p("x.npy"), th_p("w2.npy"), "--out", th_p("ref"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r);
	th_run(&r, "check", th_p("y.npy"), th_p("ref/y.npy"), "--bitwise", NULL);
	th_expect_ok(&r);
	th_run(&r, "linear", th_p("x.npy"), th_p("w1.npy"), "--out", th_p("ref1"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r);
	th_run(&r, "check", th_p("y.npy"), th_p("ref1/y.npy"), "--bitwise", NULL);
	assert_int_equal(r.status, 1); /* the old W's result differs: the weight was replaced */
}

static void test_not_found_points_at_list_and_put(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "forward", "nosuch", th_p("x.npy"), "--out", th_p("y0.npy"), NULL);
	th_expect_fail(&r, 1, "NOT_FOUND: weight 'nosuch'");
	th_expect_fail(&r, 1, "`fos list-weights` shows what is cached, `fos put-weight NAME W.npy` caches it");
	th_run(&r, "drop-weight", "nosuch", NULL);
	th_expect_fail(&r, 1, "fos list-weights");
}

static void test_bad_url_lists_schemes(void **state)
{
	(void)state;
	th_result r;
	static const char *const urls[] = {"http://localhost:1", "/tmp/fosd.sock"};
	for (size_t i = 0; i < 2; i++) {
		th_run(&r, "--server", urls[i], "health", NULL);
		th_expect_fail(&r, 1, "a fosd URL is ipc:///PATH, tcp://HOST:PORT or tls+tcp://HOST:PORT");
	}
}

static void test_unauthenticated_names_token(void **state)
{
	(void)state;
	FILE *f = fopen(th_p("tokens"), "w");
	assert_non_null(f);
	fputs("alice s3cret-alice-0123456789\n", f);
	assert_int_equal(fclose(f), 0);
	tsrv t;
	const char *args[] = {"--tokens", th_p("tokens"), NULL};
	assert_int_equal(tsrv_start(&t, args), 0);
	th_result r1, r2;
	th_run(&r1, "--server", t.url, "--token", "wrong", "list-weights", NULL);
	th_run(&r2, "--server", t.url, "list-weights", NULL);
	int st = tsrv_stop(&t, SIGTERM, 20000);
	tsrv_cleanup(&t);
	assert_int_equal(st, 0);
	th_expect_fail(&r1, 1, "UNAUTHENTICATED");
	th_expect_fail(&r1, 1, "--token T or $FOS_TOKEN");
	th_expect_fail(&r2, 1, "--token T or $FOS_TOKEN");
}

static void test_stats_columns_aligned(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "stats", NULL);
	th_expect_ok(&r);
	char *hdr = strstr(r.out, "\nop ");
	assert_non_null(hdr);
	hdr++;
	char *end = strstr(hdr, "\n\n");
	assert_non_null(end);
	*end = 0;
	char *nl = strchr(hdr, '\n');
	size_t hlen = (size_t)(nl - hdr);
	int rows = 0, long_name = 0;
	for (char *line = nl + 1; line && *line; rows++) {
		char *next = strchr(line, '\n');
		size_t len = next ? (size_t)(next - line) : strlen(line);
		if (len != hlen)
			fail_msg("row of %zu characters under a header of %zu:\n%.*s\n%.*s", len, hlen, (int)hlen, hdr, (int)len,
				 line);
		static const char *const cols[] = {"requests", "errors",   "p50 us",   "p90 us",   "p99 us",
						   "p99.9 us", "max us",   "bytes in", "bytes out"};
		for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) { /* right-aligned: cells end where it does */
			const char *h = strstr(hdr, cols[k]);
			assert_true(h && h < nl);
			size_t c = (size_t)(h - hdr) + strlen(cols[k]) - 1;
			if (line[c] == ' ' || (c + 1 < len && line[c + 1] != ' '))
				fail_msg("column %s is out of line:\n%.*s\n%.*s", cols[k], (int)hlen, hdr, (int)len, line);
		}
		long_name |= !strncmp(line, "close_device_memory ", 20);
		line = next ? next + 1 : NULL;
	}
	assert_true(rows >= 10);
	assert_true(long_name); /* the row that broke the columns is there */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_already_cached_says_the_way_out),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_not_found_points_at_list_and_put),
		cmocka_unit_test(test_bad_url_lists_schemes),
		cmocka_unit_test(test_unauthenticated_names_token),
		cmocka_unit_test(test_stats_columns_aligned),
	};
	return cmocka_run_group_tests(tests, hints_setup, hints_teardown);
}
