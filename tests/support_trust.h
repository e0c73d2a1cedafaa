/* support_trust.h: helpers of the trust and fault tests: files with given permissions, a raw SP
 * client over ipc (to stop in the middle of a message or vanish), raw nng requests with any
 * token and deadline, test certificates made with mbedTLS at run time, a process's RSS and open
 * files, and a fingerprint of cached weights (forward outputs compared bit for bit with the
 * in-process reference). */
#ifndef FOS_SUPPORT_TRUST_H
#define FOS_SUPPORT_TRUST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_server.h"

/* Writes text to path with the given mode. Returns 0 or -1. */
int tt_write_file(const char *path, const char *text, int mode);

/* A fresh temporary directory (/tmp/fos-trust-XXXXXX) in dir; 0 or -1. */
int tt_tmpdir(char dir[256]);
/* Removes the files in dir, then dir (kept when $FOS_TEST_KEEP is set). */
void tt_tmpdir_remove(const char *dir);
/* 1 when the file contains needle (a byte string). */
int tt_file_contains(const char *path, const char *needle);

/* Runs BUILD/fosd with args (NULL-terminated) to its exit, stderr and stdout to log; SIGKILLed after
 * timeout_ms. Returns the exit status, 128+signal, or -1. For startup errors. */
int tt_fosd_run(const char *const *args, const char *log, int timeout_ms);

/* Replaces the daemon of s by a fresh one on the same URL and log (appended), with the same
 * backend and extra args: the old one gets sig first (SIGKILL: no drain) and is reaped. Waits
 * until the new one answers Health (up to 15 s). Returns 0 or -1. */
int tt_restart(tsrv *s, int sig, const char *const *extra);
/* tsrv_start with the daemon's address space limited to as_bytes (RLIMIT_AS): its allocations
 * beyond it fail. Returns 0 or -1. */
int tt_start_limited(tsrv *s, uint64_t as_bytes, const char *const *extra);
/* tsrv_start with the daemon's descriptor limit (RLIMIT_NOFILE) set to soft and hard. Returns 0 or
 * -1. */
int tt_start_nofile(tsrv *s, uint64_t soft, uint64_t hard, const char *const *extra);

/* ---- raw SP over ipc -------------------------------------------------------------------------- */

/* Connects a Unix socket to ipc URL url. Returns the fd or -1. */
int tt_ipc_connect(const char *url);
/* Sends the SP handshake of a REQ socket and reads the peer's. Returns 0 or -1. */
int tt_sp_handshake(int fd);
/* Sends the first n bytes (n <= total) of one SP message carrying body (request id rid). */
int tt_sp_send_partial(int fd, uint32_t rid, const void *body, size_t len, size_t n);
/* Receives one SP message within timeout_ms: *body malloc'd (without the request id). Returns its
 * length, or -1. */
ssize_t tt_sp_recv(int fd, int timeout_ms, uint8_t **body);

/* ---- raw requests ------------------------------------------------------------------------------ */

/* One request through a fresh nng REQ socket: rq (id, token, deadline as set by the caller) with
 * the given tensors placed in the data section. Returns the status code of the reply (or -1 if
 * none came within timeout_ms); msg gets the status message; *reply (if not NULL) the reply. */
typedef struct tt_tensor {
	Fos__Tensor *t;
	int dtype, ndim;
	int64_t shape[2];
	const void *data;
} tt_tensor;
int tt_raw_call(const char *url, Fos__Request *rq, tt_tensor *ts, int nt, int timeout_ms, char *msg, size_t msgsz,
		nng_msg **reply);
/* The message body of rq with its tensors (malloc'd; *len its length), for raw sockets. */
uint8_t *tt_build(Fos__Request *rq, tt_tensor *ts, int nt, size_t *len);
/* The status code and message of a reply body (-1 if it does not decode). */
int tt_reply_code(const void *body, size_t len, char *msg, size_t msgsz);

/* A request in flight on its own nng socket (started by tt_async_start, finished by
 * tt_async_wait, which returns the reply's status code or -1). */
typedef struct tt_async {
	nng_socket sock;
	nng_aio *aio;
	uint64_t t_start_ms, t_done_ms;
} tt_async;
int tt_async_start(tt_async *a, const char *url, Fos__Request *rq, tt_tensor *ts, int nt, int timeout_ms);
int tt_async_wait(tt_async *a, char *msg, size_t msgsz);
/* Waits (up to timeout_ms) until device 0 of the fosd at url runs n requests on its lanes with
 * nothing queued: requests started with tt_async_start are then past receiving and resolving,
 * which "in flight" alone does not say. 0, or -1 on timeout or a failed Stats. */
int tt_wait_lanes_busy(const char *url, uint64_t n, int timeout_ms);

/* ---- certificates ------------------------------------------------------------------------------ */

/* Makes, in dir: ca.pem (a CA), server.pem + server.key (CN = cn, signed by the CA; key mode 0600)
 * and other-ca.pem (an unrelated CA). EC P-256 keys. Returns 0 or -1 (msg). */
int tt_make_certs(const char *dir, const char *cn, char *msg, size_t msgsz);
/* The same, the server certificate with a subjectAltName extension (san_der: its DER value). */
int tt_make_certs_san(const char *dir, const char *cn, const unsigned char *san_der, size_t san_len, char *msg,
		      size_t msgsz);

/* ---- processes --------------------------------------------------------------------------------- */

/* VmRSS of pid in KiB (-1 if unknown). */
long tt_rss_kb(pid_t pid);
/* Open file descriptors of pid (-1 if unknown). */
int tt_fd_count(pid_t pid);
/* Threads of pid (-1 if unknown). */
int tt_thread_count(pid_t pid);
/* The port fosd logged for a tcp or tls+tcp listener URL ("listening on URL (port N)"), 0 if none. */
int tt_logged_port(const char *log_path, const char *url);

/* ---- weight fingerprints ------------------------------------------------------------------------- */

/* A weight (N, K) and an X (M, K) with the expected Y = forward(X) of the reference. */
typedef struct tt_weight {
	char name[64];
	int64_t n, k, m;
	uint16_t *w, *x, *y;
} tt_weight;

/* Makes deterministic data and the reference Y. Returns 0 or -1. */
int tt_weight_make(tt_weight *tw, const char *name, int64_t n, int64_t k, int64_t m, uint64_t seed);
void tt_weight_free(tt_weight *tw);
/* Puts it (version 1, pinned if pin). Returns the status code. */
int tt_weight_put(fos_client *c, const tt_weight *tw, int pin, fos_status *st);
/* Forward of its X: returns the status code; FOS_CODE_DATA_LOSS when Y differs from the reference. */
int tt_weight_check(fos_client *c, const tt_weight *tw, fos_status *st);
/* Forward of its X with save_context (Y discarded), filling ctx. Returns the status code. */
int tt_weight_save_context(fos_client *c, const tt_weight *tw, fos_context *ctx, fos_status *st);
/* 1 when the caller's tenant has a weight of that name cached, 0 when not, -1 when the list fails. */
int tt_weight_listed(fos_client *c, const char *name);

/* Connects with a token (NULL: none), failing the test on error; tt_connect's requests time out
 * after 20 s, tt_connect_ms's after timeout_ms. */
fos_client *tt_connect(const char *url, const char *token);
fos_client *tt_connect_ms(const char *url, const char *token, int timeout_ms);

/* 1 under AddressSanitizer (RLIMIT_AS tests cannot run). */
int tt_under_asan(void);
/* Seconds from $name, else dflt. */
int tt_env_seconds(const char *name, int dflt);

#endif
