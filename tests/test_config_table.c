/* test_config_table.c: fosd's one table of settings (config.h fosd_config_keys) and what comes
 * from it. deploy/fosd.conf.example documents exactly the table's file keys, each first line
 * `#key = value` with the row's default (a key without a default shows an example value; only a
 * repeatable key may repeat), and its SIGHUP paragraph names exactly the reloadable keys. Every
 * row's field has the size of its type, reloadable rows are scalars, every default parses to the
 * values written here by hand, every row is a flag of `fosd --help` and a file key (or, for
 * --config, a flag only), the reload list and a reload's copy cover the reloadable keys only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "support_server.h"

static FILE *open_example(void)
{
	FILE *in = fopen("deploy/fosd.conf.example", "r");
	if (!in) {
		char p[1200];
		snprintf(p, sizeof p, "%s/../deploy/fosd.conf.example", tsrv_build_dir());
		in = fopen(p, "r");
	}
	return in;
}

static int is_file_key(const fosd_config_key *k)
{
	return !(k->flags & FOSD_CK_FLAG_ONLY);
}

static void test_example_documents_table(void **state)
{
	(void)state;
	FILE *in = open_example();
	if (!in)
		skip();
	int seen[64] = {0};
	assert_true(fosd_config_nkeys <= 64);
	char line[2048], prose[16384] = "";
	size_t plen = 0;
	int lineno = 0;
	while (fgets(line, sizeof line, in)) {
		lineno++;
		line[strcspn(line, "\n")] = 0;
		/* a setting line: '#' right before a lowercase key, then " =" and the value */
		if (line[0] == '#' && islower((unsigned char)line[1])) {
			char *eq = strstr(line, " =");
			if (!eq)
				fail_msg("example line %d: '%s' is no '#key = value'", lineno, line);
			*eq = 0;
			const char *key = line + 1, *val = eq[2] == ' ' ? eq + 3 : eq + 2;
			const fosd_config_key *k = fosd_config_key_find(key);
			if (!k || !is_file_key(k))
				fail_msg("example line %d: '%s' is not a key of the table", lineno, key);
			int i = (int)(k - fosd_config_keys);
			if (seen[i]++) {
				if (k->type != FOSD_CT_LIST)
					fail_msg("example line %d: %s again (only a repeatable key may repeat)", lineno, key);
				continue;
			}
			if (k->def && strcmp(val, k->def))
				fail_msg("example line %d: %s = '%s', but its default is '%s'", lineno, key, val, k->def);
		} else if (line[0] == '#' && plen < sizeof prose - 1) {
			/* comment text, as one line */
			plen += (size_t)snprintf(prose + plen, sizeof prose - plen, "%s ", line + (line[1] == ' ' ? 2 : 1));
		}
	}
	fclose(in);
	for (size_t i = 0; i < fosd_config_nkeys; i++)
		if (is_file_key(&fosd_config_keys[i]) && !seen[i])
			fail_msg("deploy/fosd.conf.example does not document %s", fosd_config_keys[i].key);

	/* "... again and applies A, B, C and D, and rereads the tokens file": the reloadable keys */
	const char *a = strstr(prose, "again and applies ");
	assert_non_null(a);
	a += strlen("again and applies ");
	const char *e = strstr(a, ", and rereads");
	assert_non_null(e);
	char list[512];
	snprintf(list, sizeof list, "%.*s", (int)(e - a), a);
	int named = 0;
	for (char *tok = strtok(list, " ,"); tok; tok = strtok(NULL, " ,")) {
		if (!strcmp(tok, "and"))
			continue;
		const fosd_config_key *k = fosd_config_key_find(tok);
		if (!k || !(k->flags & FOSD_CK_RELOAD))
			fail_msg("the example's SIGHUP paragraph names '%s', which is no reloadable key", tok);
		named++;
	}
	int reloadable = 0;
	for (size_t i = 0; i < fosd_config_nkeys; i++)
		reloadable += (fosd_config_keys[i].flags & FOSD_CK_RELOAD) != 0;
	assert_int_equal(named, reloadable);
}

static void test_rows(void **state)
{
	(void)state;
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		for (const char *p = k->key; *p; p++)
			if (!islower((unsigned char)*p) && *p != '_' && !isdigit((unsigned char)*p))
				fail_msg("key '%s': only a-z, 0-9 and _", k->key);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(k->key, fosd_config_keys[j].key))
				fail_msg("key '%s' twice", k->key);
		assert_ptr_equal(fosd_config_key_find(k->key), k);
		if (!k->help || !*k->help)
			fail_msg("key '%s' has no help", k->key);
		size_t want = 0;
		switch (k->type) {
		case FOSD_CT_INT:
		case FOSD_CT_BOOL:
		case FOSD_CT_OCTAL:
			want = sizeof(int);
			break;
		case FOSD_CT_SIZE:
		case FOSD_CT_DURATION:
			want = sizeof(uint64_t);
			break;
		case FOSD_CT_STRING:
		case FOSD_CT_URL:
			want = sizeof(char *);
			break;
		case FOSD_CT_ENUM: {
			assert_non_null(k->choices);
			size_t longest = 0;
			for (int c = 0; k->choices[c]; c++)
				longest = strlen(k->choices[c]) > longest ? strlen(k->choices[c]) : longest;
			want = k->size == sizeof(int) ? sizeof(int) : k->size;
			assert_true(k->size == sizeof(int) || k->size > longest);
			break;
		}
		case FOSD_CT_LIST:
			want = (size_t)k->hi * sizeof(char *);
			assert_non_null(k->check);
			break;
		}
		if (k->size != want)
			fail_msg("key '%s': its field has %zu bytes, its type wants %zu", k->key, k->size, want);
		if ((k->flags & FOSD_CK_RELOAD) &&
		    (k->type == FOSD_CT_STRING || k->type == FOSD_CT_URL || k->type == FOSD_CT_LIST))
			fail_msg("key '%s': a reload copies scalars only", k->key);
		if (k->type == FOSD_CT_INT || k->type == FOSD_CT_OCTAL)
			assert_true(k->lo <= k->hi);
		/* its default parses as a file value and as a flag */
		if (k->def && is_file_key(k)) {
			fosd_config c;
			char msg[512], flag[128];
			fosd_config_defaults(&c);
			if (fosd_config_set(&c, k->key, k->def, msg, sizeof msg))
				fail_msg("default of %s: %s", k->key, msg);
			fosd_config_free(&c);
			snprintf(flag, sizeof flag, "--%s=%s", k->key, k->def);
			for (char *p = flag + 2; *p != '='; p++)
				if (*p == '_')
					*p = '-';
			char *argv[] = {"fosd", flag, NULL};
			fosd_config_defaults(&c);
			if (fosd_config_parse_args(&c, 2, argv, msg, sizeof msg))
				fail_msg("%s: %s", flag, msg);
			fosd_config_free(&c);
		}
	}
	/* --config is a flag, not a file key */
	fosd_config c;
	char msg[256];
	fosd_config_defaults(&c);
	assert_int_equal(fosd_config_set(&c, "config", "/x", msg, sizeof msg), -1);
	assert_string_equal(msg, "unknown setting 'config'");
	fosd_config_free(&c);
}

/* The defaults, written here from the documentation (README, the example file). */
static void test_defaults(void **state)
{
	(void)state;
	fosd_config c;
	char msg[256];
	fosd_config_defaults(&c);
	assert_string_equal(c.backend, "auto");
	assert_int_equal(c.threads, 0);
	assert_int_equal(c.device, 0);
	assert_int_equal(c.workers, 2);
	assert_int_equal(c.streams, 0);
	assert_int_equal(c.concurrency, 64);
	assert_true(c.cache_bytes == FOSD_SIZE_AUTO); /* sized at start (fosd_config_size_auto) */
	assert_true(c.context_bytes == FOSD_SIZE_AUTO);
	assert_int_equal(c.context_ttl_ms, 60000);
	assert_int_equal(c.max_message_bytes, 1ull << 30);
	assert_true(c.message_pool_bytes == FOSD_SIZE_AUTO);
	assert_int_equal(c.channel_spin_us, 50);
	assert_int_equal(c.drain_timeout_ms, 30000);
	assert_int_equal(c.sweep_interval_ms, 1000);
	assert_int_equal(c.dedup_window_ms, 600000);
	assert_int_equal(c.send_timeout_ms, 10000);
	assert_int_equal(c.connection_requests, 0);
	assert_int_equal(c.max_connections, 0);
	assert_int_equal(c.metrics_max_connections, 64);
	assert_int_equal(c.metrics_idle_timeout_ms, 10000);
	assert_int_equal(c.ipc_mode, 0600);
	assert_int_equal(c.log_level, FOSD_LOG_INFO);
	assert_string_equal(c.metrics_listen, "http://127.0.0.1:9464");
	assert_null(c.tokens_path);
	assert_int_equal(c.allow_insecure_tcp, 0);
	assert_null(c.tls_cert);
	assert_null(c.tls_key);
	assert_null(c.tls_key_password);
	assert_int_equal(c.tenant_cache_bytes, 0);
	assert_int_equal(c.tenant_context_bytes, 0);
	assert_int_equal(c.tenant_inflight, 0);
	assert_int_equal(c.n_listen, 0); /* the listen default applies when none is given */
	assert_int_equal(fosd_config_finish(&c, msg, sizeof msg), 0);
	assert_int_equal(c.n_listen, 1);
	assert_string_equal(c.listen[0], FOSD_DEFAULT_URL);
	fosd_config_free(&c);
}

static void test_help_lists_every_row(void **state)
{
	(void)state;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	fosd_config_usage(f);
	fclose(f);
	assert_int_equal(strncmp(text, "usage: fosd [options]\n", 22), 0);
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		char flag[96];
		snprintf(flag, sizeof flag, "\n  --%s ", k->key);
		for (char *p = flag + 5; *p != ' '; p++)
			if (*p == '_')
				*p = '-';
		if (!strstr(text, flag))
			fail_msg("--help has no line for %s", k->key);
		if (k->type == FOSD_CT_DURATION) { /* what test_trust_config_files finds the duration keys by */
			char dur[100];
			snprintf(dur, sizeof dur, "%.*sDUR ", (int)strlen(flag), flag);
			if (!strstr(text, dur))
				fail_msg("--help shows %s without DUR", k->key);
		}
	}
	assert_null(strstr(text, "{def}"));
	assert_non_null(strstr(text, "  --cache-bytes SIZE       weight cache budget (default auto: 40% of the GPU's memory,\n"));
	assert_non_null(strstr(text, "  --backend auto|cpu|cuda  numerics backend (default auto: cuda if a GPU is usable)\n"));
	assert_non_null(strstr(text, "  --allow-insecure-tcp     allow tcp:// and tls+tcp:// listeners without a tokens file\n"));
	free(text);
}

static void test_reload_keys(void **state)
{
	(void)state;
	char list[256];
	fosd_config_reloadable(list, sizeof list);
	assert_string_equal(list, "log_level, tenant_cache_bytes, tenant_context_bytes, tenant_inflight");
	fosd_config cur, nc;
	char msg[256];
	fosd_config_defaults(&cur);
	fosd_config_defaults(&nc);
	assert_int_equal(fosd_config_finish(&cur, msg, sizeof msg), 0);
	uint64_t cache0 = cur.cache_bytes; /* auto, sized from the host's memory by finish */
	const char *set[][2] = {{"tenant_inflight", "7"}, {"tenant_cache_bytes", "1M"}, {"workers", "9"},
				{"cache_bytes", "1G"}, {"tokens", "/etc/t"}};
	for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
		assert_int_equal(fosd_config_set(&nc, set[i][0], set[i][1], msg, sizeof msg), 0);
	assert_int_equal(fosd_config_finish(&nc, msg, sizeof msg), 0);
	char diff[512];
	fosd_config_fixed_diff(&cur, &nc, diff, sizeof diff);
	assert_string_equal(diff, "workers, cache_bytes, tokens");
	fosd_config_apply_reloadable(&cur, &nc);
	assert_int_equal(cur.tenant_inflight, 7);
	assert_int_equal(cur.tenant_cache_bytes, 1ull << 20);
	assert_int_equal(cur.workers, 2); /* waits for a restart */
	assert_int_equal(cur.cache_bytes, cache0);
	assert_null(cur.tokens_path);
	fosd_config_free(&cur);
	fosd_config_free(&nc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_example_documents_table), cmocka_unit_test(test_rows),
		cmocka_unit_test(test_defaults), cmocka_unit_test(test_help_lists_every_row),
		cmocka_unit_test(test_reload_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
