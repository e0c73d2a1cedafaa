/* trust_config.h: the configuration keys of tenants, TLS and per-tenant quotas (tokens,
 * allow_insecure_tcp, tls_cert, tls_key, tls_key_password, tenant_cache_bytes,
 * tenant_context_bytes, tenant_inflight) and the listener rules that depend on them. config.c
 * hands these keys here. */
#ifndef FOSD_TRUST_CONFIG_H
#define FOSD_TRUST_CONFIG_H

#include <stddef.h>

#include "config.h"

/* Sets key from v: 0 done, -1 bad value (msg), 1 not a key of this file. */
int fosd_trust_config_set(fosd_config *c, const char *key, const char *v, char *msg, size_t msgsz);
/* 1 when key is one of this file's keys. */
int fosd_trust_config_known(const char *key);
/* 1 for boolean keys, which as flags take no separate value (--allow-insecure-tcp). */
int fosd_trust_config_is_flag(const char *key);
void fosd_trust_config_usage(void *stream);
void fosd_trust_config_free(fosd_config *c);

/* Listener rules: only ipc://, tcp[46]:// and tls+tcp[46]:// URLs; a network listener needs a
 * tokens file or allow_insecure_tcp; a tls+tcp listener needs tls_cert and tls_key. Returns 0 or
 * -1 with msg. */
int fosd_trust_config_check(fosd_config *c, char *msg, size_t msgsz);

/* 1 for tcp://, tcp4://, tcp6:// and their tls+ forms. */
int fosd_url_is_network(const char *url);
/* 1 for tls+tcp://, tls+tcp4://, tls+tcp6://. */
int fosd_url_is_tls(const char *url);

#endif
