/* support_trust.c: helpers of the trust and fault tests (see support_trust.h). */
#include "support_trust.h"
#include "support_server.h"

#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/protocol/reqrep0/req.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

int tt_write_file(const char *path, const char *text, int mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	size_t n = strlen(text);
	int ok = write(fd, text, n) == (ssize_t)n && fchmod(fd, (mode_t)mode) == 0;
	close(fd);
	return ok ? 0 : -1;
}

int tt_tmpdir(char dir[256])
{
	snprintf(dir, 256, "/tmp/fos-trust-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

void tt_tmpdir_remove(const char *dir)
{
	if (!dir[0] || getenv("FOS_TEST_KEEP"))
		return;
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char p[600];
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
				snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
				unlink(p);
			}
		closedir(d);
	}
	rmdir(dir);
}

int tt_file_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	size_t cap = 1 << 16, n = 0, nl = strlen(needle);
	char *buf = malloc(cap);
	int found = 0;
	size_t r;
	while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
	}
	fclose(f);
	for (size_t i = 0; buf && nl && i + nl <= n && !found; i++)
		found = !memcmp(buf + i, needle, nl);
	free(buf);
	return found;
}

int tt_fosd_run(const char *const *args, const char *log, int timeout_ms)
{
	char bin[1200];
	snprintf(bin, sizeof bin, "%s/fosd", tsrv_build_dir());
	const char *argv[64];
	int argc = 0;
	argv[argc++] = bin;
	argv[argc++] = "--metrics-listen"; /* no HTTP endpoint unless args name one */
	argv[argc++] = "off";
	for (int i = 0; args && args[i] && argc < 63; i++)
		argv[argc++] = args[i];
	argv[argc] = NULL;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	uint64_t t0 = tsrv_now_ms();
	for (;;) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
		if (tsrv_now_ms() - t0 > (uint64_t)timeout_ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(5000);
	}
}

/* Starts BUILD/fosd on s->url (log appended), optionally with an address-space limit, and waits
 * until it answers Health. */
/* nofile: RLIMIT_NOFILE of the daemon (NULL: inherited). */
static int tt_spawn(tsrv *s, uint64_t as_bytes, const struct rlimit *nofile, const char *const *extra)
{
	char bin[1200];
	const char *argv[64];
	tsrv_fosd_argv(s, extra, bin, sizeof bin, argv);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a test that failed before stopping it */
		int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		if (as_bytes) {
			struct rlimit rl = {(rlim_t)as_bytes, (rlim_t)as_bytes};
			if (setrlimit(RLIMIT_AS, &rl))
				_exit(126);
		}
		if (nofile && setrlimit(RLIMIT_NOFILE, nofile))
			_exit(126);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	s->pid = pid;
	uint64_t t0 = tsrv_now_ms();
	while (tsrv_now_ms() - t0 < 15000) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			s->pid = 0;
			tsrv_dump_log(s);
			return -1;
		}
		fos_client *c;
		fos_status st;
		if (fos_connect(s->url, NULL, 1000, &c, &st) == FOS_CODE_OK) {
			fos_close(c);
			return 0;
		}
		usleep(20000);
	}
	return -1;
}

int tt_restart(tsrv *s, int sig, const char *const *extra)
{
	if (s->pid) {
		int status;
		kill(s->pid, sig);
		uint64_t t0 = tsrv_now_ms();
		while (waitpid(s->pid, &status, WNOHANG) != s->pid) {
			if (tsrv_now_ms() - t0 > 20000) {
				kill(s->pid, SIGKILL);
				waitpid(s->pid, &status, 0);
				break;
			}
			usleep(2000);
		}
		s->pid = 0;
	}
	return tt_spawn(s, 0, NULL, extra);
}

static int tt_start_with(tsrv *s, uint64_t as_bytes, const struct rlimit *nofile, const char *const *extra)
{
	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "/tmp/fosd-test-XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	snprintf(s->url, sizeof s->url, "ipc://%s/fosd.sock", s->dir);
	snprintf(s->log, sizeof s->log, "%s/fosd.log", s->dir);
	return tt_spawn(s, as_bytes, nofile, extra);
}

int tt_start_limited(tsrv *s, uint64_t as_bytes, const char *const *extra)
{
	return tt_start_with(s, as_bytes, NULL, extra);
}

int tt_start_nofile(tsrv *s, uint64_t soft, uint64_t hard, const char *const *extra)
{
	struct rlimit rl = {(rlim_t)soft, (rlim_t)hard};
	return tt_start_with(s, 0, &rl, extra);
}

/* ---- raw SP over ipc ------------------------------------------------------------------------- */

int tt_ipc_connect(const char *url)
{
	if (strncmp(url, "ipc://", 6))
		return -1;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", url + 6);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int tt_write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int tt_read_all(int fd, void *p, size_t n, int timeout_ms)
{
	uint8_t *b = p;
	uint64_t t0 = tsrv_now_ms();
	while (n) {
		int left = timeout_ms - (int)(tsrv_now_ms() - t0);
		if (left <= 0)
			return -1;
		struct pollfd pf = {fd, POLLIN, 0};
		if (poll(&pf, 1, left) <= 0)
			continue;
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

int tt_sp_handshake(int fd)
{
	/* 0x00 'S' 'P' 0x00, protocol (REQ = 0x30) big-endian, reserved */
	uint8_t h[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0}, peer[8];
	if (tt_write_all(fd, h, 8) || tt_read_all(fd, peer, 8, 5000))
		return -1;
	return peer[1] == 'S' && peer[2] == 'P' && peer[5] == 0x31 ? 0 : -1;
}

int tt_sp_send_partial(int fd, uint32_t rid, const void *body, size_t len, size_t n)
{
	uint64_t total = 4 + (uint64_t)len;
	size_t all = 9 + 4 + len;
	uint8_t *m = malloc(all);
	if (!m)
		return -1;
	m[0] = 1;
	for (int i = 0; i < 8; i++)
		m[1 + i] = (uint8_t)(total >> (56 - 8 * i));
	rid |= 0x80000000u;
	m[9] = (uint8_t)(rid >> 24), m[10] = (uint8_t)(rid >> 16), m[11] = (uint8_t)(rid >> 8), m[12] = (uint8_t)rid;
	memcpy(m + 13, body, len);
	int rc = tt_write_all(fd, m, n < all ? n : all);
	free(m);
	return rc;
}

ssize_t tt_sp_recv(int fd, int timeout_ms, uint8_t **body)
{
	uint8_t h[9];
	*body = NULL;
	if (tt_read_all(fd, h, 9, timeout_ms))
		return -1;
	uint64_t len = 0;
	for (int i = 0; i < 8; i++)
		len = len << 8 | h[1 + i];
	if (len < 4 || len > (1u << 30))
		return -1;
	uint8_t *b = malloc((size_t)len);
	if (!b || tt_read_all(fd, b, (size_t)len, timeout_ms)) {
		free(b);
		return -1;
	}
	memmove(b, b + 4, (size_t)len - 4);
	*body = b;
	return (ssize_t)(len - 4);
}

/* ---- raw requests ---------------------------------------------------------------------------- */

int tt_raw_call(const char *url, Fos__Request *rq, tt_tensor *ts, int nt, int timeout_ms, char *msg, size_t msgsz,
		nng_msg **reply)
{
	nng_socket sock;
	nng_msg *m = NULL;
	int code = -1;
	if (reply)
		*reply = NULL;
	snprintf(msg, msgsz, "no reply");
	if (nng_req0_open(&sock))
		return -1;
	nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, timeout_ms);
	if (nng_dial(sock, url, NULL, 0))
		goto out;
	int64_t shapes[FOSW_MAX_TENSORS][FOSW_MAX_DIMS];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	for (int i = 0; i < nt; i++)
		fosw_tensor_init(ts[i].t, shapes[i], &pl, ts[i].dtype, ts[i].ndim, ts[i].shape);
	uint8_t *data;
	if (fosw_msg_build(&rq->base, &pl, &m, &data))
		goto out;
	for (int i = 0; i < nt; i++)
		memcpy(data + ts[i].t->offset, ts[i].data, (size_t)ts[i].t->length);
	if (nng_sendmsg(sock, m, 0)) {
		nng_msg_free(m);
		goto out;
	}
	if (nng_recvmsg(sock, &m, 0))
		goto out;
	const uint8_t *hdr, *d;
	size_t hlen, dlen;
	char why[256];
	if (!fosw_split(nng_msg_body(m), nng_msg_len(m), &hdr, &hlen, &d, &dlen, why, sizeof why)) {
		Fos__Response *resp = fos__response__unpack(NULL, hlen, hdr);
		if (resp) {
			code = resp->status ? resp->status->code : 0;
			snprintf(msg, msgsz, "%s", resp->status && resp->status->message ? resp->status->message : "");
			fos__response__free_unpacked(resp, NULL);
		}
	}
	if (reply)
		*reply = m;
	else
		nng_msg_free(m);
out:
	nng_close(sock);
	return code;
}

uint8_t *tt_build(Fos__Request *rq, tt_tensor *ts, int nt, size_t *len)
{
	int64_t shapes[FOSW_MAX_TENSORS][FOSW_MAX_DIMS];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	for (int i = 0; i < nt; i++)
		fosw_tensor_init(ts[i].t, shapes[i], &pl, ts[i].dtype, ts[i].ndim, ts[i].shape);
	nng_msg *m;
	uint8_t *data;
	if (fosw_msg_build(&rq->base, &pl, &m, &data))
		return NULL;
	for (int i = 0; i < nt; i++)
		memcpy(data + ts[i].t->offset, ts[i].data, (size_t)ts[i].t->length);
	*len = nng_msg_len(m);
	uint8_t *b = malloc(*len);
	if (b)
		memcpy(b, nng_msg_body(m), *len);
	nng_msg_free(m);
	return b;
}

int tt_reply_code(const void *body, size_t len, char *msg, size_t msgsz)
{
	const uint8_t *hdr, *d;
	size_t hlen, dlen;
	char why[256];
	if (fosw_split(body, len, &hdr, &hlen, &d, &dlen, why, sizeof why))
		return -1;
	Fos__Response *resp = fos__response__unpack(NULL, hlen, hdr);
	if (!resp)
		return -1;
	int code = resp->status ? resp->status->code : 0;
	if (msg)
		snprintf(msg, msgsz, "%s", resp->status && resp->status->message ? resp->status->message : "");
	fos__response__free_unpacked(resp, NULL);
	return code;
}

int tt_async_start(tt_async *a, const char *url, Fos__Request *rq, tt_tensor *ts, int nt, int timeout_ms)
{
	memset(a, 0, sizeof *a);
	size_t len;
	uint8_t *b = tt_build(rq, ts, nt, &len);
	nng_msg *m;
	if (!b || nng_req0_open(&a->sock)) {
		free(b);
		return -1;
	}
	nng_socket_set_ms(a->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if (nng_dial(a->sock, url, NULL, 0) || nng_aio_alloc(&a->aio, NULL, NULL) || nng_msg_alloc(&m, len)) {
		free(b);
		nng_close(a->sock);
		return -1;
	}
	memcpy(nng_msg_body(m), b, len);
	free(b);
	a->t_start_ms = tsrv_now_ms();
	nng_aio_set_timeout(a->aio, timeout_ms);
	nng_aio_set_msg(a->aio, m);
	nng_send_aio(a->sock, a->aio);
	nng_aio_wait(a->aio);
	if (nng_aio_result(a->aio)) {
		nng_msg_free(m);
		nng_aio_free(a->aio);
		nng_close(a->sock);
		return -1;
	}
	nng_recv_aio(a->sock, a->aio);
	return 0;
}

int tt_async_wait(tt_async *a, char *msg, size_t msgsz)
{
	nng_aio_wait(a->aio);
	a->t_done_ms = tsrv_now_ms();
	int code = -1;
	if (!nng_aio_result(a->aio)) {
		nng_msg *m = nng_aio_get_msg(a->aio);
		code = tt_reply_code(nng_msg_body(m), nng_msg_len(m), msg, msgsz);
		nng_msg_free(m);
	}
	nng_aio_free(a->aio);
	nng_close(a->sock);
	return code;
}

/* ---- certificates ------------------------------------------------------------------------------ */

typedef struct tt_rng {
	mbedtls_entropy_context ent;
	mbedtls_ctr_drbg_context drbg;
} tt_rng;

static int tt_keygen(tt_rng *r, mbedtls_pk_context *k)
{
	mbedtls_pk_init(k);
	return mbedtls_pk_setup(k, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)) ||
	       mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*k), mbedtls_ctr_drbg_random, &r->drbg);
}

/* The subjectAltName extension's DER of the server certificate tt_make_certs_san writes (none:
 * NULL). */
static const unsigned char *tt_san;
static size_t tt_san_len;

/* Writes a certificate for subject (key sk) signed by issuer (key ik) to path as PEM. */
static int tt_cert(tt_rng *r, const char *path, const char *subject, mbedtls_pk_context *sk, const char *issuer,
		   mbedtls_pk_context *ik, int is_ca, int serial)
{
	mbedtls_x509write_cert c;
	mbedtls_mpi sn;
	unsigned char buf[4096];
	mbedtls_x509write_crt_init(&c);
	mbedtls_mpi_init(&sn);
	int rc = -1;
	mbedtls_x509write_crt_set_version(&c, MBEDTLS_X509_CRT_VERSION_3);
	mbedtls_x509write_crt_set_md_alg(&c, MBEDTLS_MD_SHA256);
	mbedtls_x509write_crt_set_subject_key(&c, sk);
	mbedtls_x509write_crt_set_issuer_key(&c, ik);
	if (mbedtls_mpi_lset(&sn, serial) || mbedtls_x509write_crt_set_serial(&c, &sn) ||
	    mbedtls_x509write_crt_set_subject_name(&c, subject) || mbedtls_x509write_crt_set_issuer_name(&c, issuer) ||
	    mbedtls_x509write_crt_set_validity(&c, "20200101000000", "20991231235959") ||
	    mbedtls_x509write_crt_set_basic_constraints(&c, is_ca, is_ca ? 0 : -1) ||
	    mbedtls_x509write_crt_set_key_usage(&c, is_ca ? (MBEDTLS_X509_KU_KEY_CERT_SIGN | MBEDTLS_X509_KU_CRL_SIGN)
							: (MBEDTLS_X509_KU_DIGITAL_SIGNATURE | MBEDTLS_X509_KU_KEY_AGREEMENT)))
		goto out;
	if (!is_ca && tt_san &&
	    mbedtls_x509write_crt_set_extension(&c, MBEDTLS_OID_SUBJECT_ALT_NAME, MBEDTLS_OID_SIZE(MBEDTLS_OID_SUBJECT_ALT_NAME),
						0, tt_san, tt_san_len))
		goto out;
	if (mbedtls_x509write_crt_pem(&c, buf, sizeof buf, mbedtls_ctr_drbg_random, &r->drbg))
		goto out;
	rc = tt_write_file(path, (const char *)buf, 0644);
out:
	mbedtls_mpi_free(&sn);
	mbedtls_x509write_crt_free(&c);
	return rc;
}

int tt_make_certs(const char *dir, const char *cn, char *msg, size_t msgsz)
{
	tt_rng r;
	mbedtls_pk_context ca, srv, other;
	char path[512], subj[256];
	unsigned char kbuf[2048];
	int rc = -1;
	mbedtls_entropy_init(&r.ent);
	mbedtls_ctr_drbg_init(&r.drbg);
	mbedtls_pk_init(&ca);
	mbedtls_pk_init(&srv);
	mbedtls_pk_init(&other);
	if (mbedtls_ctr_drbg_seed(&r.drbg, mbedtls_entropy_func, &r.ent, (const unsigned char *)"fos-test", 8)) {
		snprintf(msg, msgsz, "cannot seed the random generator");
		goto out;
	}
	if (tt_keygen(&r, &ca) || tt_keygen(&r, &srv) || tt_keygen(&r, &other)) {
		snprintf(msg, msgsz, "key generation failed");
		goto out;
	}
	snprintf(subj, sizeof subj, "CN=%s,O=fos test", cn);
	snprintf(path, sizeof path, "%s/ca.pem", dir);
	if (tt_cert(&r, path, "CN=fos test CA,O=fos test", &ca, "CN=fos test CA,O=fos test", &ca, 1, 1))
		goto certfail;
	snprintf(path, sizeof path, "%s/server.pem", dir);
	if (tt_cert(&r, path, subj, &srv, "CN=fos test CA,O=fos test", &ca, 0, 2))
		goto certfail;
	snprintf(path, sizeof path, "%s/other-ca.pem", dir);
	if (tt_cert(&r, path, "CN=other CA,O=elsewhere", &other, "CN=other CA,O=elsewhere", &other, 1, 3))
		goto certfail;
	if (mbedtls_pk_write_key_pem(&srv, kbuf, sizeof kbuf)) {
		snprintf(msg, msgsz, "cannot write the key");
		goto out;
	}
	snprintf(path, sizeof path, "%s/server.key", dir);
	if (tt_write_file(path, (const char *)kbuf, 0600)) {
		snprintf(msg, msgsz, "cannot write %s", path);
		goto out;
	}
	rc = 0;
	goto out;
certfail:
	snprintf(msg, msgsz, "cannot write a certificate in %s", dir);
out:
	memset(kbuf, 0, sizeof kbuf);
	mbedtls_pk_free(&ca);
	mbedtls_pk_free(&srv);
	mbedtls_pk_free(&other);
	mbedtls_ctr_drbg_free(&r.drbg);
	mbedtls_entropy_free(&r.ent);
	return rc;
}

int tt_make_certs_san(const char *dir, const char *cn, const unsigned char *san_der, size_t san_len, char *msg,
		      size_t msgsz)
{
	tt_san = san_der;
	tt_san_len = san_len;
	int rc = tt_make_certs(dir, cn, msg, msgsz);
	tt_san = NULL;
	tt_san_len = 0;
	return rc;
}

/* ---- processes --------------------------------------------------------------------------------- */

static long tt_status_field(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v = -1;
	size_t kl = strlen(key);
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			v = strtol(line + kl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

long tt_rss_kb(pid_t pid)
{
	return tt_status_field(pid, "VmRSS");
}

int tt_thread_count(pid_t pid)
{
	return (int)tt_status_field(pid, "Threads");
}

int tt_wait_lanes_busy(const char *url, uint64_t n, int timeout_ms)
{
	fos_client *c = NULL;
	fos_status st;
	if (fos_connect(url, NULL, 5000, &c, &st))
		return -1;
	int rc = -1;
	for (uint64_t t0 = tsrv_now_ms(); tsrv_now_ms() - t0 < (uint64_t)timeout_ms; usleep(2000)) {
		fos_stats_snapshot *snap;
		uint64_t busy = 0, queued = 1;
		if (fos_stats_take(c, &snap, &st))
			break;
		int bad = fos_stats_get(snap, "devices.0.lanes_busy", &busy) || fos_stats_get(snap, "queued", &queued);
		fos_stats_free(snap);
		if (bad)
			break;
		if (busy == n && queued == 0) {
			rc = 0;
			break;
		}
	}
	fos_close(c);
	return rc;
}

int tt_fd_count(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int tt_logged_port(const char *log_path, const char *url)
{
	FILE *f = fopen(log_path, "r");
	if (!f)
		return 0;
	char line[1024], needle[512];
	snprintf(needle, sizeof needle, "listening on %s (port ", url);
	int port = 0;
	while (fgets(line, sizeof line, f)) {
		char *p = strstr(line, needle);
		if (p)
			port = atoi(p + strlen(needle));
	}
	fclose(f);
	return port;
}

/* ---- weight fingerprints ------------------------------------------------------------------------ */

int tt_weight_make(tt_weight *tw, const char *name, int64_t n, int64_t k, int64_t m, uint64_t seed)
{
	memset(tw, 0, sizeof *tw);
	snprintf(tw->name, sizeof tw->name, "%s", name);
	tw->n = n, tw->k = k, tw->m = m;
	tw->w = malloc((size_t)(n * k) * 2);
	tw->x = malloc((size_t)(m * k) * 2);
	tw->y = malloc((size_t)(m * n) * 2);
	if (!tw->w || !tw->x || !tw->y)
		return -1;
	tsrv_fill_bf16(tw->w, (size_t)(n * k), seed, 0.05f);
	tsrv_fill_bf16(tw->x, (size_t)(m * k), seed + 1000, 1.0f);
	fos_linear_opts o = fos_linear_opts_default();
	return tsrv_ref_linear(tw->x, tw->w, NULL, NULL, m, n, k, &o, tw->y, NULL, NULL, NULL) ? -1 : 0;
}

void tt_weight_free(tt_weight *tw)
{
	free(tw->w);
	free(tw->x);
	free(tw->y);
	memset(tw, 0, sizeof *tw);
}

int tt_weight_put(fos_client *c, const tt_weight *tw, int pin, fos_status *st)
{
	fos_tensor w = fos_tensor_2d(FOS_DTYPE_BF16, tw->n, tw->k, tw->w);
	fos_weight_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.pin = pin;
	return fos_put_weight(c, tw->name, 1, &w, &cfg, NULL, st);
}

int tt_weight_save_context(fos_client *c, const tt_weight *tw, fos_context *ctx, fos_status *st)
{
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, tw->m, tw->k, tw->x), y = fos_tensor_out();
	fos_forward_opts o = {0, 0, 0, 1, 0};
	int rc = fos_forward(c, tw->name, &x, NULL, &o, &y, ctx, st);
	free(y.data);
	return rc;
}

int tt_weight_listed(fos_client *c, const char *name)
{
	fos_weight_info *l;
	size_t n;
	fos_status st;
	if (fos_list_weights(c, &l, &n, &st))
		return -1;
	int found = 0;
	for (size_t i = 0; i < n; i++)
		found |= !strcmp(l[i].name, name);
	free(l);
	return found;
}

int tt_weight_check(fos_client *c, const tt_weight *tw, fos_status *st)
{
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, tw->m, tw->k, tw->x), y = fos_tensor_out();
	int rc = fos_forward(c, tw->name, &x, NULL, NULL, &y, NULL, st);
	if (rc)
		return rc;
	if (y.size != (size_t)(tw->m * tw->n) * 2 || memcmp(y.data, tw->y, y.size)) {
		snprintf(st->message, sizeof st->message, "weight '%s': Y differs from the reference", tw->name);
		rc = st->code = FOS_CODE_DATA_LOSS;
	}
	free(y.data);
	return rc;
}

fos_client *tt_connect(const char *url, const char *token)
{
	return tt_connect_ms(url, token, 20000);
}

fos_client *tt_connect_ms(const char *url, const char *token, int timeout_ms)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(url, token, timeout_ms, &c, &st);
	if (rc)
		fail_msg("connect %s: %s: %s", url, fos_code_name(rc), st.message);
	return c;
}

int tt_under_asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	return 1;
#else
	return 0;
#endif
#else
	return 0;
#endif
}

int tt_env_seconds(const char *name, int dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	int n = atoi(v);
	return n > 0 ? n : dflt;
}
