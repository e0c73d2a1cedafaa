/* trust_config.h: the listener rules that depend on the trust keys of the configuration (tokens,
 * allow_insecure_tcp, tls_cert, tls_key; rows of config.c's key table like every key), checked
 * by fosd_config_finish. */
#ifndef FOSD_TRUST_CONFIG_H
#define FOSD_TRUST_CONFIG_H

#include <stddef.h>

#include "config.h"

/* Listener rules: only ipc://, tcp[46]:// and tls+tcp[46]:// URLs; a network listener needs a
 * tokens file or allow_insecure_tcp; a tls+tcp listener needs tls_cert and tls_key. Returns 0 or
 * -1 with msg. */
int fosd_trust_config_check(fosd_config *c, char *msg, size_t msgsz);

/* 1 for tcp://, tcp4://, tcp6:// and their tls+ forms. */
int fosd_url_is_network(const char *url);
/* 1 for tls+tcp://, tls+tcp4://, tls+tcp6://. */
int fosd_url_is_tls(const char *url);

#endif
