/* config_report.c: which source won, settings that do nothing, and `fosd --check-config`
 * (config_report.h). A row is "set" when its value differs from the row's default, compared as
 * fosd_config_key_show renders both, so the same rule serves every type. */
#include "config_report.h"
#include "auth.h"
#include "log.h"
#include "tenants.h"
#include "trust_config.h"

#include <dirent.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row k of c rendered (malloc'd; NULL when out of memory). */
static char *key_text(const fosd_config *c, const fosd_config_key *k)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fosd_config_key_show(c, k, f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* 1 when row k of c differs from its default (a LIST: holds any entry). */
static int key_is_set(const fosd_config *c, const char *key)
{
	const fosd_config_key *k = fosd_config_key_find(key);
	if (!k)
		return 0;
	fosd_config d;
	fosd_config_defaults(&d);
	char *a = key_text(c, k), *b = key_text(&d, k);
	int set = a && b && strcmp(a, b) != 0;
	free(a);
	free(b);
	fosd_config_free(&d);
	return set;
}

static void notes_add(fosd_config *c, const char *line)
{
	size_t old = c->notes ? strlen(c->notes) : 0, n = strlen(line);
	char *p = realloc(c->notes, old + n + 2);
	if (!p)
		return; /* a note lost to a lack of memory changes nothing else */
	memcpy(p + old, line, n);
	p[old + n] = '\n';
	p[old + n + 1] = 0;
	c->notes = p;
}

void fosd_config_note_flag(fosd_config *c, const fosd_config_key *k, const char *flag, const char *value)
{
	if (!c->config_path || !key_is_set(c, k->key))
		return;
	char *was = key_text(c, k);
	const char *eq = strchr(flag, '=');
	int flen = eq ? (int)(eq - flag) : (int)strlen(flag);
	char line[1024];
	if (k->flags & FOSD_CK_SECRET)
		snprintf(line, sizeof line, "%s: the command line's %.*s wins over the value in %s", k->key, flen, flag,
			 c->config_path);
	else if (k->type == FOSD_CT_LIST)
		snprintf(line, sizeof line, "%s: the command line's %.*s %s replaces every %s of %s (%s; flags win over the file)",
			 k->key, flen, flag, value, k->key, c->config_path, was ? was : "?");
	else
		snprintf(line, sizeof line, "%s: the command line's %.*s %s wins over %s = %s in %s", k->key, flen, flag,
			 value, k->key, was ? was : "?", c->config_path);
	free(was);
	notes_add(c, line);
}

static void warn_add(char *out, size_t outsz, size_t *used, int *n, const char *fmt, const char *a, const char *b)
{
	if (*used >= outsz)
		return;
	int w = snprintf(out + *used, outsz - *used, fmt, a, b);
	if (w > 0)
		*used += (size_t)w < outsz - *used ? (size_t)w : outsz - *used - 1;
	if (*used + 1 < outsz) {
		out[(*used)++] = '\n';
		out[*used] = 0;
	}
	(*n)++;
}

int fosd_config_warnings(const fosd_config *c, char *out, size_t outsz)
{
	size_t used = 0;
	int n = 0, tls = 0, tcp = 0, ipc = 0;
	if (outsz)
		out[0] = 0;
	for (int i = 0; i < c->n_listen; i++) {
		tls |= fosd_url_is_tls(c->listen[i]);
		tcp |= fosd_url_is_network(c->listen[i]);
		ipc |= !strncmp(c->listen[i], "ipc://", 6);
	}
	static const char *const tls_keys[] = {"tls_cert", "tls_key", "tls_key_password"};
	for (size_t i = 0; i < sizeof tls_keys / sizeof tls_keys[0]; i++)
		if (!tls && key_is_set(c, tls_keys[i]))
			warn_add(out, outsz, &used, &n, "%s is set but no listener is tls+tcp://: it does nothing%s",
				 tls_keys[i], "");
	if (!tcp && c->allow_insecure_tcp)
		warn_add(out, outsz, &used, &n, "allow_insecure_tcp is set but no listener is tcp:// or tls+tcp://: it %s%s",
			 "does nothing", "");
	if (!ipc && key_is_set(c, "ipc_mode"))
		warn_add(out, outsz, &used, &n, "ipc_mode is set but no listener is ipc://: it does nothing%s%s", "", "");
	static const char *const quota_keys[] = {"tenant_cache_bytes", "tenant_context_bytes", "tenant_inflight"};
	for (size_t i = 0; i < sizeof quota_keys / sizeof quota_keys[0]; i++)
		if (!c->tokens_path && key_is_set(c, quota_keys[i]))
			warn_add(out, outsz, &used, &n,
				 "%s is set but there is no tokens file (one anonymous tenant, no quotas): it does %s",
				 quota_keys[i], "nothing");
	static const char *const http_keys[] = {"metrics_max_connections", "metrics_idle_timeout"};
	for (size_t i = 0; i < sizeof http_keys / sizeof http_keys[0]; i++)
		if (!c->metrics_listen && key_is_set(c, http_keys[i]))
			warn_add(out, outsz, &used, &n, "%s is set but metrics_listen is off: it does %s", http_keys[i],
				 "nothing");
	if (!strcmp(c->backend, "cuda") && key_is_set(c, "threads"))
		warn_add(out, outsz, &used, &n, "threads is set but the backend is cuda (threads are the cpu %s's)%s",
			 "backend", "");
	if (c->devices && key_is_set(c, "device"))
		warn_add(out, outsz, &used, &n, "device is set but devices (%s) is too: devices wins, device does %s",
			 c->devices, "nothing");
	return n;
}

void fosd_config_log_report(const fosd_config *c)
{
	char buf[4096];
	for (const char *p = c->notes; p && *p;) {
		const char *nl = strchr(p, '\n');
		int n = nl ? (int)(nl - p) : (int)strlen(p);
		fosd_info("%.*s", n, p);
		p += n + (nl ? 1 : 0);
	}
	fosd_config_warnings(c, buf, sizeof buf);
	for (const char *p = buf; *p;) {
		const char *nl = strchr(p, '\n');
		int n = nl ? (int)(nl - p) : (int)strlen(p);
		fosd_warn("%.*s", n, p);
		p += n + (nl ? 1 : 0);
	}
}

int fosd_check_config_wanted(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--check-config") || !strncmp(argv[i], "--check-config=", 15))
			return 1;
	return 0;
}

/* The TLS certificate chain and key parse (what nng reads when a tls+tcp listener starts); without
 * such a listener they are never read (fosd_config_warnings says so). */
static int check_tls_files(const fosd_config *c, char *msg, size_t msgsz)
{
	int rc = 0, tls = 0;
	char why[128];
	for (int i = 0; i < c->n_listen; i++)
		tls |= fosd_url_is_tls(c->listen[i]);
	if (!tls)
		return 0;
	if (c->tls_cert) {
		mbedtls_x509_crt crt;
		mbedtls_x509_crt_init(&crt);
		int e = mbedtls_x509_crt_parse_file(&crt, c->tls_cert);
		mbedtls_x509_crt_free(&crt);
		if (e) {
			mbedtls_strerror(e, why, sizeof why);
			snprintf(msg, msgsz, "tls_cert %s: not a readable PEM certificate (%s)", c->tls_cert, why);
			return -1;
		}
	}
	if (c->tls_key) {
		mbedtls_pk_context pk;
		mbedtls_pk_init(&pk);
		int e = mbedtls_pk_parse_keyfile(&pk, c->tls_key, c->tls_key_password);
		mbedtls_pk_free(&pk);
		if (e) {
			mbedtls_strerror(e, why, sizeof why);
			snprintf(msg, msgsz, "tls_key %s: not a readable PEM private key%s (%s)", c->tls_key,
				 c->tls_key_password ? " for tls_key_password" : "", why);
			rc = -1;
		}
	}
	return rc;
}

int fosd_check_config_main(int argc, char **argv)
{
	fosd_config cfg;
	char msg[1024];
	fosd_log_set_level(FOSD_LOG_WARN); /* the check prints its own findings; the log only warnings */
	fosd_config_defaults(&cfg);
	int rc = fosd_config_parse_args(&cfg, argc, argv, msg, sizeof msg);
	if (rc > 0) { /* --help or --version printed */
		fosd_config_free(&cfg);
		return 0;
	}
	if (rc == 0 && !fosd_config_finish(&cfg, msg, sizeof msg)) {
		for (const char *p = cfg.notes; p && *p; p = strchr(p, '\n') + 1)
			fprintf(stderr, "fosd: note: %.*s\n", (int)(strchr(p, '\n') - p), p);
		fosd_tenants *ts = NULL;
		DIR *d = NULL;
		char why[900];
		if (fosd_auth_setup(&cfg, &ts, why, sizeof why)) {
			snprintf(msg, sizeof msg, "tokens: %s", why);
			rc = -1;
		} else if (check_tls_files(&cfg, msg, sizeof msg)) {
			rc = -1;
		} else if (cfg.weights_dir && !(d = opendir(cfg.weights_dir))) {
			snprintf(msg, sizeof msg, "weights %s: cannot read the directory", cfg.weights_dir);
			rc = -1;
		}
		if (d)
			closedir(d);
		fosd_tenants_free(ts);
	} else {
		rc = -1;
	}
	if (rc) {
		fprintf(stderr, "fosd: ERROR: %s\n", msg);
		fosd_config_free(&cfg);
		return 1;
	}
	char warn[4096];
	int nw = fosd_config_warnings(&cfg, warn, sizeof warn);
	for (const char *p = warn; *p; p = strchr(p, '\n') + 1)
		fprintf(stderr, "fosd: warning: %.*s\n", (int)(strchr(p, '\n') - p), p);
	fprintf(stderr, "fosd: configuration OK%s%s%s (%d warning%s)\n", cfg.config_path ? " (" : "",
		cfg.config_path ? cfg.config_path : "", cfg.config_path ? ")" : "", nw, nw == 1 ? "" : "s");
	fosd_config_free(&cfg);
	return 0;
}
