/* test_trust_units.c: the trust pieces in-process. The tokens-file parser (comments, options,
 * defaults, every refusal, no secret in any message), token matching (only the exact secret;
 * digests compared in constant time), the configuration keys and listener rules (tokens,
 * allow_insecure_tcp as a bare flag, tls_*, tenant_* defaults), URL classes, and the per-tenant
 * namespaces and quota accounting of the weight cache and the saved contexts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "contexts.h"
#include "tenants.h"
#include "trust_config.h"
#include "wcache.h"

#define S1 "secret-one-0123456789"
#define S2 "secret-two-abcdefghij"

static void test_parse(void **state)
{
	(void)state;
	const char text[] = "# tenants\n"
			    "\n"
			    "  alice  " S1 "  cache=1M contexts=2k inflight=3 # trailing\n"
			    "bob\t" S2 "\r\n"
			    "c.d_e-f #hash-in-the-middle-is-part" "\n";
	fosd_tenant_defaults d = {100, 200, 7};
	fosd_tenants *ts;
	char msg[256];
	assert_int_equal(fosd_tenants_parse(text, sizeof text - 1, "t", &d, &ts, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "t:5: tenant 'c.d_e-f' has no secret")); /* " #" starts a comment */
	const char ok[] = "alice " S1 " cache=1M contexts=2k inflight=3 # trailing\nbob\t" S2 "\r\ncarol x#" S1 "\n";
	assert_int_equal(fosd_tenants_parse(ok, sizeof ok - 1, "t", &d, &ts, msg, sizeof msg), 0);
	assert_int_equal(ts->n, 3);
	fosd_tenant *a = fosd_tenants_find(ts, "alice"), *b = fosd_tenants_find(ts, "bob"),
		    *c = fosd_tenants_find(ts, "carol");
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_int_equal(a->quota_cache, 1 << 20);
	assert_int_equal(a->quota_context, 2048);
	assert_int_equal(a->quota_inflight, 3);
	assert_int_equal(b->quota_cache, 100); /* the defaults */
	assert_int_equal(b->quota_context, 200);
	assert_int_equal(b->quota_inflight, 7);
	assert_true(a->salt != b->salt);
	/* only the exact secret matches */
	assert_ptr_equal(fosd_tenants_match(ts, S1, strlen(S1)), a);
	assert_ptr_equal(fosd_tenants_match(ts, S2, strlen(S2)), b);
	assert_ptr_equal(fosd_tenants_match(ts, "x#" S1, strlen("x#" S1)), c); /* '#' inside a secret */
	assert_null(fosd_tenants_match(ts, S1, strlen(S1) - 1));
	assert_null(fosd_tenants_match(ts, S1 "x", strlen(S1) + 1));
	assert_null(fosd_tenants_match(ts, "", 0));
	char big[FOSD_SECRET_MAX + 2];
	memset(big, 'a', sizeof big);
	assert_null(fosd_tenants_match(ts, big, sizeof big));
	fosd_tenants_free(ts);

	/* refusals name the line, never the secret */
	static const struct {
		const char *text, *needle, *secret;
	} bad[] = {
		{"a " S1 "\na " S2 "\n", ":2: tenant 'a' is listed twice", S2},
		{"a " S1 "\nb " S1 "\n", ":2: tenant 'b' has the same secret as tenant 'a'", S1},
		{"a 123456789012345\n", ":1: the secret of tenant 'a' is 15 bytes", "123456789012345"},
		{"a/b " S1 "\n", ":1: the tenant name", S1},
		{"a " S1 " x=1\n", ":1: unknown option 'x'", S1},
		{"a " S1 " inflight=-1\n", ":1: inflight=-1 is not a count", S1},
		{"a " S1 " " S2 "\n", ":1: unexpected field", S2},
		{"a " S1 "\x01" "\n", "outside printable ASCII", S1},
		{"\n# nothing\n", "no tenants", NULL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ts = NULL;
		assert_int_equal(fosd_tenants_parse(bad[i].text, strlen(bad[i].text), "f", NULL, &ts, msg, sizeof msg), -1);
		assert_null(ts);
		if (!strstr(msg, bad[i].needle))
			fail_msg("case %zu: '%s' does not say '%s'", i, msg, bad[i].needle);
		if (bad[i].secret)
			assert_null(strstr(msg, bad[i].secret));
	}
	assert_int_equal(fosd_ct_equal("abc", "abc", 3), 1);
	assert_int_equal(fosd_ct_equal("abc", "abd", 3), 0);
	assert_int_equal(fosd_ct_equal("\x80", "\x00", 1), 0);
}

static void test_config_keys(void **state)
{
	(void)state;
	fosd_config c;
	char msg[512];
	fosd_config_defaults(&c);
	char *argv[] = {"fosd",
			"--tokens",
			"/etc/fosd/tokens",
			"--allow-insecure-tcp",
			"--listen",
			"tcp://127.0.0.1:1",
			"--tenant-cache-bytes",
			"1G",
			"--tenant-context-bytes=64M",
			"--tenant-inflight",
			"9",
			NULL};
	assert_int_equal(fosd_config_parse_args(&c, 11, argv, msg, sizeof msg), 0);
	assert_int_equal(fosd_config_finish(&c, msg, sizeof msg), 0);
	assert_string_equal(c.tokens_path, "/etc/fosd/tokens");
	assert_int_equal(c.allow_insecure_tcp, 1);
	assert_int_equal(c.tenant_cache_bytes, 1ull << 30);
	assert_int_equal(c.tenant_context_bytes, 64ull << 20);
	assert_int_equal(c.tenant_inflight, 9);
	fosd_config_free(&c);
	/* a network listener needs tokens or the flag; tls needs a certificate and key */
	fosd_config_defaults(&c);
	char *a2[] = {"fosd", "--listen", "tcp://127.0.0.1:1", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 3, a2, msg, sizeof msg), 0);
	assert_int_equal(fosd_config_finish(&c, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "--allow-insecure-tcp"));
	fosd_config_free(&c);
	fosd_config_defaults(&c);
	char *a3[] = {"fosd", "--listen", "tls+tcp://127.0.0.1:1", "--tokens", "/x", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 5, a3, msg, sizeof msg), 0);
	assert_int_equal(fosd_config_finish(&c, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "tls_cert and tls_key"));
	fosd_config_free(&c);
	fosd_config_defaults(&c);
	char *a4[] = {"fosd", "--allow-insecure-tcp=maybe", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 2, a4, msg, sizeof msg), -1);
	char *a5[] = {"fosd", "--tenant-inflight", "-1", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 3, a5, msg, sizeof msg), -1);
	fosd_config_free(&c);
	assert_true(fosd_url_is_tls("tls+tcp://h:1"));
	assert_true(fosd_url_is_tls("tls+tcp6://[::1]:1"));
	assert_false(fosd_url_is_tls("tcp://h:1"));
	assert_true(fosd_url_is_network("tcp4://h:1"));
	assert_false(fosd_url_is_network("ipc:///tmp/x"));
}

/* A weight entry without backend memory (qw zeroed: 0 bytes) of the given accounted size. */
static fosd_weight *fake_weight(const char *name, fosd_tenant *owner)
{
	fosd_weight *w = calloc(1, sizeof *w);
	snprintf(w->name, sizeof w->name, "%s", name);
	w->version = 1;
	w->owner = owner;
	return w;
}

static void test_namespaces(void **state)
{
	(void)state;
	fosd_tenants *ts;
	char msg[256];
	const char text[] = "alice " S1 "\nbob " S2 "\n";
	assert_int_equal(fosd_tenants_parse(text, sizeof text - 1, "t", NULL, &ts, msg, sizeof msg), 0);
	fosd_tenant *a = ts->t[0], *b = ts->t[1];
	fosd_wcache wc;
	assert_int_equal(fosd_wcache_init(&wc, NULL, 1 << 20), 0);
	fosd_wcache_insert(&wc, fake_weight("w", a));
	fosd_wcache_insert(&wc, fake_weight("w", b)); /* same name, other tenant: another entry */
	fosd_wcache_stats st;
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.entries, 2);
	assert_non_null(fosd_wcache_find_in(&wc, a, "w"));
	assert_ptr_not_equal(fosd_wcache_find_in(&wc, a, "w"), fosd_wcache_find_in(&wc, b, "w"));
	assert_null(fosd_wcache_find_in(&wc, NULL, "w")); /* nor the anonymous tenant's */
	char m1[256], m2[256];
	fosd_weight *got;
	assert_int_equal(fosd_wcache_acquire_in(&wc, NULL, "w", 0, &got, m1, sizeof m1), 5 /* NOT_FOUND */);
	assert_int_equal(fosd_wcache_acquire_in(&wc, NULL, "zz", 0, &got, m2, sizeof m2), 5);
	assert_non_null(strstr(m1, "'w' is not in the cache"));
	assert_int_equal(fosd_wcache_drop_in(&wc, a, "w", msg, sizeof msg), 0);
	assert_non_null(fosd_wcache_find_in(&wc, b, "w"));
	fosd_weight_info *list;
	size_t n;
	assert_int_equal(fosd_wcache_list_in(&wc, a, &list, &n), 0);
	assert_int_equal(n, 0);
	free(list);
	assert_int_equal(fosd_wcache_list_in(&wc, b, &list, &n), 0);
	assert_int_equal(n, 1);
	free(list);
	fosd_wcache_destroy(&wc);
	fosd_tenants_free(ts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_config_keys),
		cmocka_unit_test(test_namespaces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
