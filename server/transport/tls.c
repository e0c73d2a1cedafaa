/* tls.c: TLS configuration of tls+tcp:// listeners (see tls.h). The key file's bytes are wiped
 * from memory once nng has parsed them. */
#include "tls.h"
#include "log.h"
#include "regfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/supplemental/tls/tls.h>

#define TLS_FILE_MAX ((size_t)1 << 20) /* a PEM certificate chain or key */

/* A whole PEM file, NUL-terminated (regfile.h); *mode gets its permission bits. */
static char *tls_read_file(const char *path, size_t *len, int *mode, char *msg, size_t msgsz)
{
	struct stat sb;
	char *buf = fos_read_regular(path, TLS_FILE_MAX, len, &sb, msg, msgsz);
	if (buf)
		*mode = (int)(sb.st_mode & 0777);
	return buf;
}

int fosd_tls_listener_setup(nng_listener l, const fosd_config *cfg, char *msg, size_t msgsz)
{
	size_t clen = 0, klen = 0;
	int cmode = 0, kmode = 0, rv, rc = -1;
	nng_tls_config *tc = NULL;
	char *cert = tls_read_file(cfg->tls_cert, &clen, &cmode, msg, msgsz);
	char *key = cert ? tls_read_file(cfg->tls_key, &klen, &kmode, msg, msgsz) : NULL;
	if (!cert || !key)
		goto out;
	if (kmode & 077)
		fosd_warn("tls: the key file %s may be read by group or others (mode %04o); chmod 600 it", cfg->tls_key,
			  kmode);
	if ((rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_SERVER))) {
		snprintf(msg, msgsz, "tls: %s", nng_strerror(rv));
		goto out;
	}
	if ((rv = nng_tls_config_version(tc, NNG_TLS_1_2, NNG_TLS_1_3)) &&
	    (rv = nng_tls_config_version(tc, NNG_TLS_1_2, NNG_TLS_1_2))) {
		snprintf(msg, msgsz, "tls: cannot require TLS 1.2: %s", nng_strerror(rv));
		goto out;
	}
	if ((rv = nng_tls_config_own_cert(tc, cert, key, cfg->tls_key_password))) {
		snprintf(msg, msgsz, "tls: the certificate %s and key %s were not accepted: %s", cfg->tls_cert,
			 cfg->tls_key, nng_strerror(rv));
		goto out;
	}
	if ((rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_NONE)) ||
	    (rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tc))) {
		snprintf(msg, msgsz, "tls: cannot configure the listener: %s", nng_strerror(rv));
		goto out;
	}
	rc = 0;
out:
	if (tc)
		nng_tls_config_free(tc); /* the listener holds its own reference */
	if (key) {
		explicit_bzero(key, klen);
		free(key);
	}
	free(cert);
	return rc;
}
