/* test_messages.c: messages that name the real problem (issue 25 point 8).
 *   - `--devices 100000` says the ordinal is too large, naming it and the limits, not that the
 *     value is no list of ordinals (in-process and from fosd, exit 2);
 *   - TLS to 127.0.0.1 with a certificate for localhost: the connect names the mismatch (the
 *     certificate's names and the server name, an address mbedTLS never matches) and the way out,
 *     --tls-server-name, from mbedTLS's verify flags; with that name it connects; a CA that did not
 *     sign it is named as such; libfos and the fos CLI alike. The certificate too (an IP
 *     SAN 127.0.0.1 beside DNS localhost), and one with an IP SAN alone (no name can match). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "fos.h"
#include "support_server.h"
#include "support_trust.h"

static void test_devices_too_large(void **state)
{
	(void)state;
	int ids[FOSD_MAX_DEVICES], n;
	char msg[400];
	assert_int_equal(fosd_config_devices("100000", ids, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "ordinal 100000 in '100000' is too large: device ordinals go from 0 to 64, at most 16 devices"));
	assert_int_equal(fosd_config_devices("0,65", ids, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "ordinal 65 in '0,65' is too large"));
	assert_int_equal(fosd_config_devices("99999999999999999999", ids, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "ordinal 99999999999999999999 in"));
	/* not ordinals at all: the old message */
	assert_int_equal(fosd_config_devices("0,x", ids, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "is not all or a list of device ordinals"));
	assert_int_equal(fosd_config_devices("-3", ids, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "is not all or a list of device ordinals"));
	assert_int_equal(fosd_config_devices("0,64", ids, &n, msg, sizeof msg), 0);
	assert_int_equal(n, 2);
	/* and from fosd */
	char dir[256], log[320], url[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(log, sizeof log, "%s/fosd.log", dir);
	snprintf(url, sizeof url, "ipc://%s/x.sock", dir);
	const char *args[] = {"--backend", "cpu", "--listen", url, "--devices", "100000", NULL};
	assert_int_equal(tt_fosd_run(args, log, 10000), 2);
	assert_true(tt_file_contains(log, "ordinal 100000 in '100000' is too large"));
	tt_tmpdir_remove(dir);
}

static int connect_tls(const char *url, const char *ca, const char *name, fos_status *st)
{
	fos_connect_opts o;
	memset(&o, 0, sizeof o);
	o.ca_file = ca;
	o.server_name = name;
	o.timeout_ms = 5000;
	fos_client *c = NULL;
	int rc = fos_connect_with(url, &o, &c, st);
	if (c)
		fos_close(c);
	return rc;
}

/* fos health over TLS; its stderr in err. */
static int cli_health(const char *url, const char *ca, const char *name, char *err, size_t errsz)
{
	char cmd[2000], ep[600];
	snprintf(ep, sizeof ep, "/tmp/fos-msg-%d.err", (int)getpid());
	snprintf(cmd, sizeof cmd, "timeout 20 '%s/fos' health --server '%s' --tls-ca '%s'%s%s%s 2>'%s' >/dev/null",
		 tsrv_build_dir(), url, ca, name ? " --tls-server-name '" : "", name ? name : "", name ? "'" : "", ep);
	int rc = system(cmd);
	err[0] = 0;
	FILE *f = fopen(ep, "r");
	if (f) {
		size_t got = fread(err, 1, errsz - 1, f);
		err[got] = 0;
		fclose(f);
	}
	unlink(ep);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_tls_name_mismatch(void **state)
{
	(void)state;
	char dir[256], msg[300], ca[320], other[320], cert[320], key[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	if (tt_make_certs(dir, "localhost", msg, sizeof msg))
		fail_msg("certificates: %s", msg);
	snprintf(ca, sizeof ca, "%s/ca.pem", dir);
	snprintf(other, sizeof other, "%s/other-ca.pem", dir);
	snprintf(cert, sizeof cert, "%s/server.pem", dir);
	snprintf(key, sizeof key, "%s/server.key", dir);
	tsrv s;
	const char *args[] = {"--listen", "tls+tcp://127.0.0.1:0", "--allow-insecure-tcp", "--tls-cert", cert,
			      "--tls-key", key, NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	int port = tt_logged_port(s.log, "tls+tcp://127.0.0.1:0");
	assert_true(port > 0);
	char url[128];
	snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
	fos_status st;
	/* the URL's host as the name: an address the certificate (for localhost) cannot match */
	assert_int_equal(connect_tls(url, ca, NULL, &st), FOS_CODE_UNAVAILABLE);
	if (!strstr(st.message, "TLS: the certificate is for localhost, not '127.0.0.1' (an address: mbedTLS matches DNS "
				"names only); use --tls-server-name localhost"))
		fail_msg("the message does not name the mismatch: %s", st.message);
	assert_null(strstr(st.message, "signed by a CA"));
	/* another DNS name: the mismatch without the address remark */
	assert_int_equal(connect_tls(url, ca, "fosd.example.com", &st), FOS_CODE_UNAVAILABLE);
	assert_non_null(strstr(st.message, "is for localhost, not 'fosd.example.com'; use --tls-server-name localhost"));
	/* the way out works */
	assert_int_equal(connect_tls(url, ca, "localhost", &st), FOS_CODE_OK);
	/* a CA that did not sign it: said so, naming the CA file */
	assert_int_equal(connect_tls(url, other, "localhost", &st), FOS_CODE_UNAVAILABLE);
	char want[400];
	snprintf(want, sizeof want, "no CA of the CA file %s signed the server's certificate", other);
	if (!strstr(st.message, want))
		fail_msg("the message does not name the CA: %s", st.message);
	/* the CLI says the same */
	char err[4096];
	assert_int_equal(cli_health(url, ca, NULL, err, sizeof err), 1);
	if (!strstr(err, "is for localhost, not '127.0.0.1' (an address: mbedTLS matches DNS names only); use "
			 "--tls-server-name localhost"))
		fail_msg("fos health said: %s", err);
	assert_int_equal(cli_health(url, ca, "localhost", err, sizeof err), 0);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
	tt_tmpdir_remove(dir);
}

/* A server certificate whose subjectAltName is san (DER), connected to at 127.0.0.1. */
static void san_case(const unsigned char *san, size_t len, const char *want, const char *good_name)
{
	char dir[256], msg[300], ca[320], cert[320], key[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	if (tt_make_certs_san(dir, "fosd test server", san, len, msg, sizeof msg))
		fail_msg("certificates: %s", msg);
	snprintf(ca, sizeof ca, "%s/ca.pem", dir);
	snprintf(cert, sizeof cert, "%s/server.pem", dir);
	snprintf(key, sizeof key, "%s/server.key", dir);
	tsrv s;
	const char *args[] = {"--listen", "tls+tcp://127.0.0.1:0", "--allow-insecure-tcp", "--tls-cert", cert,
			      "--tls-key", key, NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	int port = tt_logged_port(s.log, "tls+tcp://127.0.0.1:0");
	char url[128];
	snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
	fos_status st;
	assert_int_equal(connect_tls(url, ca, NULL, &st), FOS_CODE_UNAVAILABLE);
	if (!strstr(st.message, want))
		fail_msg("the message does not say '%s': %s", want, st.message);
	if (good_name)
		assert_int_equal(connect_tls(url, ca, good_name, &st), FOS_CODE_OK);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
	tt_tmpdir_remove(dir);
}

static void test_tls_ip_san(void **state)
{
	(void)state;
	/* SEQUENCE { [7] 127.0.0.1, [2] "localhost" } */
	static const unsigned char ip_dns[] = {0x30, 0x11, 0x87, 0x04, 127, 0, 0, 1, 0x82, 0x09,
					       'l',  'o',  'c',  'a',  'l', 'h', 'o', 's', 't'};
	san_case(ip_dns, sizeof ip_dns,
		 "TLS: the certificate is for 127.0.0.1, localhost, not '127.0.0.1' (an address: mbedTLS matches DNS names "
		 "only); use --tls-server-name localhost",
		 "localhost");
	/* SEQUENCE { [7] 127.0.0.1 }: no name mbedTLS could match */
	static const unsigned char ip_only[] = {0x30, 0x06, 0x87, 0x04, 127, 0, 0, 1};
	san_case(ip_only, sizeof ip_only,
		 "the certificate is for 127.0.0.1, not '127.0.0.1', and has no DNS name (all mbedTLS matches): add one (SAN "
		 "DNS:NAME), use --tls-server-name NAME",
		 NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_devices_too_large),
		cmocka_unit_test(test_tls_name_mismatch),
		cmocka_unit_test(test_tls_ip_san),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
