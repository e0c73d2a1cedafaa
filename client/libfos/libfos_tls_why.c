/* libfos_tls_why.c: why a TLS connection to fosd was refused, for the message of a failed connect.
 * nng says only that the peer could not be authenticated; this file makes one handshake of its
 * own with mbedTLS (the library nng uses) to the same address, with the same CA file and server
 * name, verification optional so that the handshake completes, and turns mbedTLS's verify flags
 * into words: a certificate for other names (naming them, and the way out), one no CA of the file
 * signed, one expired or not valid yet. It never changes what is accepted: the probe's connection
 * is closed without a byte of the protocol. */
#include "libfos_internal.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

/* "localhost, fosd.example, 10.0.0.5": the certificate's DNS and IP subject alternative names,
 * else its subject CN (what mbedTLS compares with the server name); dns gets the first DNS name
 * (or the CN), "" when it has none. */
static void cert_names(const mbedtls_x509_crt *crt, char *out, size_t n, char *dns, size_t dnssz)
{
	size_t used = 0;
	out[0] = dns[0] = 0;
	for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s && s->buf.p; s = s->next) {
		char one[80] = "";
		int tag = s->buf.tag & 0x1F;
		if (tag == 2 && s->buf.len < 64) { /* dNSName */
			snprintf(one, sizeof one, "%.*s", (int)s->buf.len, (const char *)s->buf.p);
			if (!dns[0])
				snprintf(dns, dnssz, "%s", one);
		}
		else if (tag == 7 && (s->buf.len == 4 || s->buf.len == 16)) /* iPAddress */
			inet_ntop(s->buf.len == 4 ? AF_INET : AF_INET6, s->buf.p, one, sizeof one);
		if (one[0] && used + strlen(one) + 3 < n)
			used += (size_t)snprintf(out + used, n - used, "%s%s", used ? ", " : "", one);
	}
	if (used)
		return;
	for (const mbedtls_x509_name *a = &crt->subject; a; a = a->next)
		if (a->oid.p && !MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &a->oid) && a->val.len < n) {
			snprintf(out, n, "%.*s", (int)a->val.len, (const char *)a->val.p);
			snprintf(dns, dnssz, "%s", out);
			return;
		}
	snprintf(out, n, "no name");
}

int fosc_tls_why(const char *host, const char *port, const char *ca_file, const char *server_name, int timeout_ms,
		 char *why, size_t whysz)
{
	mbedtls_net_context net;
	mbedtls_ssl_context ssl;
	mbedtls_ssl_config conf;
	mbedtls_x509_crt ca;
	mbedtls_entropy_context ent;
	mbedtls_ctr_drbg_context drbg;
	mbedtls_net_init(&net);
	mbedtls_ssl_init(&ssl);
	mbedtls_ssl_config_init(&conf);
	mbedtls_x509_crt_init(&ca);
	mbedtls_entropy_init(&ent);
	mbedtls_ctr_drbg_init(&drbg);
	int found = -1, rc;
	if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, (const unsigned char *)"fos-tls-why", 11) ||
	    mbedtls_x509_crt_parse_file(&ca, ca_file) < 0 ||
	    mbedtls_net_connect(&net, host, port, MBEDTLS_NET_PROTO_TCP))
		goto out;
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	setsockopt(net.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(net.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
					MBEDTLS_SSL_PRESET_DEFAULT))
		goto out;
	mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_OPTIONAL);
	mbedtls_ssl_conf_ca_chain(&conf, &ca, NULL);
	mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &drbg);
	if (mbedtls_ssl_setup(&ssl, &conf) || mbedtls_ssl_set_hostname(&ssl, server_name))
		goto out;
	mbedtls_ssl_set_bio(&ssl, &net, mbedtls_net_send, mbedtls_net_recv, NULL);
	while ((rc = mbedtls_ssl_handshake(&ssl)) == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE)
		;
	if (rc)
		goto out;
	uint32_t flags = mbedtls_ssl_get_verify_result(&ssl);
	const mbedtls_x509_crt *peer = mbedtls_ssl_get_peer_cert(&ssl);
	if (!flags || !peer)
		goto out;
	size_t used = 0;
	why[0] = 0;
	if (flags & MBEDTLS_X509_BADCERT_CN_MISMATCH) {
		char names[160], dns[80];
		unsigned char addr[16];
		int literal = inet_pton(AF_INET, server_name, addr) == 1 || inet_pton(AF_INET6, server_name, addr) == 1;
		cert_names(peer, names, sizeof names, dns, sizeof dns);
		/* short: the CLI's message keeps 255 bytes in all */
		if (dns[0])
			used += (size_t)snprintf(why + used, whysz - used, "the certificate is for %s, not '%s'%s; use --tls-server-name %s",
						 names, server_name, literal ? " (an address: mbedTLS matches DNS names only)" : "",
						 dns);
		else
			used += (size_t)snprintf(why + used, whysz - used,
						 "the certificate is for %s, not '%s', and has no DNS name (all mbedTLS matches): add "
						 "one (SAN DNS:NAME), use --tls-server-name NAME",
						 names, server_name);
	}
	if ((flags & MBEDTLS_X509_BADCERT_NOT_TRUSTED) && used < whysz)
		used += (size_t)snprintf(why + used, whysz - used, "%sno CA of the CA file %s signed the server's certificate",
					 used ? "; " : "", ca_file);
	if ((flags & MBEDTLS_X509_BADCERT_EXPIRED) && used < whysz)
		used += (size_t)snprintf(why + used, whysz - used, "%sthe server's certificate has expired", used ? "; " : "");
	if ((flags & MBEDTLS_X509_BADCERT_FUTURE) && used < whysz)
		used += (size_t)snprintf(why + used, whysz - used, "%sthe server's certificate is not valid yet",
					 used ? "; " : "");
	if (!used) { /* another verify failure: mbedTLS's own words */
		char info[300];
		if (mbedtls_x509_crt_verify_info(info, sizeof info, "", flags) > 0) {
			for (char *p = info; *p; p++)
				if (*p == '\n')
					*p = *(p + 1) ? ';' : 0;
			snprintf(why, whysz, "the server's certificate was refused:%s", info);
			used = 1;
		}
	}
	found = used ? 0 : -1;
	mbedtls_ssl_close_notify(&ssl);
out:
	mbedtls_net_free(&net);
	mbedtls_ssl_free(&ssl);
	mbedtls_ssl_config_free(&conf);
	mbedtls_x509_crt_free(&ca);
	mbedtls_ctr_drbg_free(&drbg);
	mbedtls_entropy_free(&ent);
	return found;
}
