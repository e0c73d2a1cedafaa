/* trust_config.c: configuration of tenants, TLS and per-tenant quotas (see trust_config.h). */
#include "trust_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int tc_strdup(char **dst, const char *v, const char *key, char *msg, size_t msgsz)
{
	if (!*v) {
		snprintf(msg, msgsz, "%s: empty value", key);
		return -1;
	}
	char *d = strdup(v);
	if (!d) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	free(*dst);
	*dst = d;
	return 0;
}

static int tc_bool(const char *v, int *out)
{
	if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1") || !strcasecmp(v, "on")) {
		*out = 1;
		return 0;
	}
	if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0") || !strcasecmp(v, "off")) {
		*out = 0;
		return 0;
	}
	return -1;
}

int fosd_trust_config_set(fosd_config *c, const char *key, const char *v, char *msg, size_t msgsz)
{
	if (!strcmp(key, "tokens"))
		return tc_strdup(&c->tokens_path, v, key, msg, msgsz);
	if (!strcmp(key, "tls_cert"))
		return tc_strdup(&c->tls_cert, v, key, msg, msgsz);
	if (!strcmp(key, "tls_key"))
		return tc_strdup(&c->tls_key, v, key, msg, msgsz);
	if (!strcmp(key, "tls_key_password")) {
		if (!*v) { /* an empty password: none */
			free(c->tls_key_password);
			c->tls_key_password = NULL;
			return 0;
		}
		return tc_strdup(&c->tls_key_password, v, key, msg, msgsz);
	}
	if (!strcmp(key, "allow_insecure_tcp")) {
		if (tc_bool(v, &c->allow_insecure_tcp)) {
			snprintf(msg, msgsz, "allow_insecure_tcp: '%s' is not true or false", v);
			return -1;
		}
		return 0;
	}
	if (!strcmp(key, "tenant_cache_bytes") || !strcmp(key, "tenant_context_bytes")) {
		uint64_t u;
		if (fosd_parse_size(v, &u)) {
			snprintf(msg, msgsz, "%s: '%s' is not a size (e.g. 512M, 8G; 0 for no quota)", key, v);
			return -1;
		}
		if (!strcmp(key, "tenant_cache_bytes"))
			c->tenant_cache_bytes = u;
		else
			c->tenant_context_bytes = u;
		return 0;
	}
	if (!strcmp(key, "tenant_inflight")) {
		char *end;
		errno = 0;
		long n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < 0 || n > 1000000) {
			snprintf(msg, msgsz, "tenant_inflight: '%s' is not a count in [0, 1000000] (0: no limit)", v);
			return -1;
		}
		c->tenant_inflight = (int)n;
		return 0;
	}
	return 1;
}

int fosd_trust_config_known(const char *key)
{
	static const char *const keys[] = {"tokens",	       "allow_insecure_tcp", "tls_cert",
					   "tls_key",	       "tls_key_password",   "tenant_cache_bytes",
					   "tenant_context_bytes", "tenant_inflight"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!strcmp(key, keys[i]))
			return 1;
	return 0;
}

int fosd_trust_config_is_flag(const char *key)
{
	return !strcmp(key, "allow_insecure_tcp");
}

void fosd_trust_config_usage(void *stream)
{
	fprintf((FILE *)stream,
		"  --tokens FILE            tenants: one 'NAME SECRET [cache=SIZE] [contexts=SIZE] [inflight=N]'\n"
		"                           a line; requests must carry a tenant's secret as auth_token\n"
		"                           (default: none, one anonymous tenant, ipc listeners only);\n"
		"                           SIGHUP rereads it\n"
		"  --allow-insecure-tcp     allow tcp:// and tls+tcp:// listeners without a tokens file\n"
		"  --tls-cert FILE          PEM certificate (chain) of tls+tcp:// listeners\n"
		"  --tls-key FILE           PEM private key of tls+tcp:// listeners\n"
		"  --tls-key-password PW    password of an encrypted key\n"
		"  --tenant-cache-bytes SIZE    default weight-cache quota of a tenant (0: none)\n"
		"  --tenant-context-bytes SIZE  default saved-context quota of a tenant (0: none)\n"
		"  --tenant-inflight N      default limit of a tenant's requests in flight (0: none)\n");
}

void fosd_trust_config_free(fosd_config *c)
{
	free(c->tokens_path);
	free(c->tls_cert);
	free(c->tls_key);
	if (c->tls_key_password) {
		memset(c->tls_key_password, 0, strlen(c->tls_key_password));
		free(c->tls_key_password);
	}
	c->tokens_path = c->tls_cert = c->tls_key = c->tls_key_password = NULL;
}

static int tc_prefix(const char *url, const char *p)
{
	return !strncmp(url, p, strlen(p));
}

int fosd_url_is_tls(const char *url)
{
	return tc_prefix(url, "tls+tcp://") || tc_prefix(url, "tls+tcp4://") || tc_prefix(url, "tls+tcp6://");
}

int fosd_url_is_network(const char *url)
{
	return tc_prefix(url, "tcp://") || tc_prefix(url, "tcp4://") || tc_prefix(url, "tcp6://") ||
	       fosd_url_is_tls(url);
}

int fosd_trust_config_check(fosd_config *c, char *msg, size_t msgsz)
{
	for (int i = 0; i < c->n_listen; i++) {
		const char *u = c->listen[i];
		if (!tc_prefix(u, "ipc://") && !fosd_url_is_network(u)) {
			snprintf(msg, msgsz, "listen %s: only ipc://, tcp:// and tls+tcp:// URLs are supported", u);
			return -1;
		}
		if (fosd_url_is_network(u) && !c->tokens_path && !c->allow_insecure_tcp) {
			snprintf(msg, msgsz,
				 "listen %s: a network listener without a tokens file lets anyone who can reach the "
				 "port use fosd; give --tokens FILE, or --allow-insecure-tcp to accept that",
				 u);
			return -1;
		}
		if (fosd_url_is_tls(u) && (!c->tls_cert || !c->tls_key)) {
			snprintf(msg, msgsz, "listen %s: a tls+tcp listener needs tls_cert and tls_key", u);
			return -1;
		}
	}
	return 0;
}
