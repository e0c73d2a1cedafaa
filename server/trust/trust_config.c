/* trust_config.c: the listener rules that depend on the trust keys (see trust_config.h). The keys
 * themselves (tokens, allow_insecure_tcp, tls_*, tenant_*) are rows of config.c's key table. */
#include "trust_config.h"

#include <stdio.h>
#include <string.h>

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
