/* tls.h: TLS for tls+tcp:// listeners: the certificate chain and private key of the config
 * (tls_cert, tls_key, tls_key_password), through nng's mbedTLS engine (TLS 1.2). Clients verify
 * the server against a CA file; they are authenticated by their tokens, not by certificates. */
#ifndef FOSD_TLS_H
#define FOSD_TLS_H

#include <stddef.h>

#include <nng/nng.h>

#include "config.h"

/* Gives listener l (not yet started) its TLS configuration. Warns when the key file may be read by
 * group or others. Returns 0 or -1 with msg (which never contains key material). */
int fosd_tls_listener_setup(nng_listener l, const fosd_config *cfg, char *msg, size_t msgsz);

#endif
