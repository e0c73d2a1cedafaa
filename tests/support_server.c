/* support_server.c: helpers for the daemon tests (see support_server.h): a real fosd in a
 * temporary directory, test data, and the in-process reference computations. */
#include "support_server.h"
#include "fos.h"
#include "fos_format.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t tsrv_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

const char *tsrv_build_dir(void)
{
	static char dir[1024];
	const char *env = getenv("FOS_BUILD");
	if (env && *env)
		return env;
	char exe[1024];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return "build";
	exe[n] = 0;
	char *d = dirname(exe); /* BUILD/tests */
	snprintf(dir, sizeof dir, "%s", d);
	d = dirname(dir); /* BUILD */
	memmove(dir, d, strlen(d) + 1);
	return dir;
}

void tsrv_dump_log(const tsrv *s)
{
	FILE *f = fopen(s->log, "r");
	if (!f)
		return;
	char line[1024];
	fprintf(stderr, "---- fosd log (%s) ----\n", s->log);
	while (fgets(line, sizeof line, f))
		fputs(line, stderr);
	fprintf(stderr, "---- end of fosd log ----\n");
	fclose(f);
}

int tsrv_log_contains(const tsrv *s, const char *needle)
{
	FILE *f = fopen(s->log, "r");
	if (!f)
		return 0;
	char line[2048];
	int found = 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

void tsrv_fosd_argv(const tsrv *s, const char *const *extra, char *bin, size_t binsz, const char **argv)
{
	snprintf(bin, binsz, "%s/fosd", tsrv_build_dir());
	int argc = 0;
	argv[argc++] = bin;
	argv[argc++] = "--backend";
	argv[argc++] = tsrv_backend_name();
	argv[argc++] = "--threads";
	argv[argc++] = "2";
	argv[argc++] = "--listen";
	argv[argc++] = s->url;
	/* no HTTP endpoint unless the test asks for one (after this): fosds of tests run side by side */
	argv[argc++] = "--metrics-listen";
	argv[argc++] = "off";
	for (int i = 0; extra && extra[i] && argc < 62; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;
}

int tsrv_start(tsrv *s, const char *const *extra)
{
	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "/tmp/fosd-test-XXXXXX");
	if (!mkdtemp(s->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(s->url, sizeof s->url, "ipc://%s/fosd.sock", s->dir);
	snprintf(s->log, sizeof s->log, "%s/fosd.log", s->dir);
	char bin[1200];
	const char *argv[64];
	tsrv_fosd_argv(s, extra, bin, sizeof bin, argv);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return -1;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a test that failed before stopping it */
		int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	s->pid = pid;
	uint64_t t0 = tsrv_now_ms();
	while (tsrv_now_ms() - t0 < 15000) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			s->pid = 0;
			fprintf(stderr, "fosd exited during startup (status %d)\n", status);
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
	fprintf(stderr, "fosd did not answer within 15 s\n");
	tsrv_dump_log(s);
	return -1;
}

int tsrv_stop(tsrv *s, int sig, int timeout_ms)
{
	if (!s->pid)
		return -1;
	kill(s->pid, sig);
	uint64_t t0 = tsrv_now_ms();
	for (;;) {
		int status;
		pid_t r = waitpid(s->pid, &status, WNOHANG);
		if (r == s->pid) {
			s->pid = 0;
			if (WIFEXITED(status))
				return WEXITSTATUS(status);
			if (WIFSIGNALED(status))
				return 128 + WTERMSIG(status);
			return -1;
		}
		if (tsrv_now_ms() - t0 > (uint64_t)timeout_ms) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &status, 0);
			s->pid = 0;
			return -1;
		}
		usleep(5000);
	}
}

void tsrv_cleanup(tsrv *s)
{
	if (s->pid) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
	if (s->dir[0] && getenv("FOS_TEST_KEEP")) {
		fprintf(stderr, "keeping %s (FOS_TEST_KEEP)\n", s->dir);
		s->dir[0] = 0;
	}
	if (s->dir[0]) {
		char p[400];
		snprintf(p, sizeof p, "%s/fosd.sock", s->dir);
		unlink(p);
		unlink(s->log);
		rmdir(s->dir);
		s->dir[0] = 0;
	}
}

/* ---- data ----------------------------------------------------------------------------------- */

static uint64_t tsrv_mix(uint64_t *st)
{
	uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void tsrv_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale)
{
	uint64_t st = seed * 0xD1B54A32D192ED03ull + 1;
	for (size_t i = 0; i < n; i++) {
		float u = 0;
		for (int j = 0; j < 4; j++)
			u += (float)(tsrv_mix(&st) >> 40) / (float)(1ull << 24);
		p[i] = fos_f32_to_bf16((u - 2.0f) * 1.7320508f * scale);
	}
}

/* ---- references ----------------------------------------------------------------------------- */

static pthread_mutex_t tsrv_ref_mu = PTHREAD_MUTEX_INITIALIZER;
static fos_backend *tsrv_ref_be;

const char *tsrv_backend_name(void)
{
	const char *b = getenv("FOS_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

fos_backend *tsrv_ref_backend(void)
{
	pthread_mutex_lock(&tsrv_ref_mu);
	if (!tsrv_ref_be) {
		fos_err e;
		if (!strcmp(tsrv_backend_name(), "cpu"))
			tsrv_ref_be = fos_backend_cpu(2, &e);
		else
			tsrv_ref_be = fos_backend_open(tsrv_backend_name(), &e);
		if (!tsrv_ref_be)
			fprintf(stderr, "reference backend %s: %s\n", tsrv_backend_name(), e.msg);
	}
	pthread_mutex_unlock(&tsrv_ref_mu);
	return tsrv_ref_be;
}

int tsrv_ref_linear(const uint16_t *x, const uint16_t *w, const uint16_t *bias, const uint16_t *dy, int64_t m,
		    int64_t n, int64_t k, const fos_linear_opts *o, uint16_t *y, uint16_t *dx, uint16_t *dw,
		    uint16_t *db)
{
	fos_backend *be = tsrv_ref_backend();
	if (!be)
		return FOS_EINTERNAL;
	fos_err e;
	int resolved, rc = fos_linear_check(o, m, n, k, &resolved, &e);
	if (rc)
		return rc;
	size_t mk = (size_t)(m * k) * 2, nk = (size_t)(n * k) * 2, mn = (size_t)(m * n) * 2;
	uint16_t *xd = be->alloc(be, mk), *wd = be->alloc(be, nk), *yd = be->alloc(be, mn);
	uint16_t *bd = bias ? be->alloc(be, (size_t)n * 2) : NULL;
	uint16_t *dyd = dy ? be->alloc(be, mn) : NULL, *dxd = dy ? be->alloc(be, mk) : NULL;
	uint16_t *dwd = dy ? be->alloc(be, nk) : NULL, *dbd = dy && bias ? be->alloc(be, (size_t)n * 2) : NULL;
	be->h2d(be, xd, x, mk, &e);
	be->h2d(be, wd, w, nk, &e);
	if (bias)
		be->h2d(be, bd, bias, (size_t)n * 2, &e);
	if (dy)
		be->h2d(be, dyd, dy, mn, &e);
	fos_qweight qw;
	fos_saved sv;
	memset(&sv, 0, sizeof sv);
	pthread_mutex_lock(&tsrv_ref_mu);
	rc = fos_qweight_make(be, wd, n, k, o, dy && resolved == FOS_OVR_HIGH_PRECISION,
			      dy && resolved == FOS_OVR_QUANTIZED, &qw, &e);
	if (!rc) {
		rc = fos_linear_forward(be, xd, m, &qw, o, bd, yd, dy ? &sv : NULL, &e);
		if (!rc && dy)
			rc = fos_linear_backward(be, &sv, &qw, dyd, dxd, dwd, dbd, &e);
		if (dy)
			fos_saved_free(be, &sv);
		fos_qweight_free(be, &qw);
	}
	pthread_mutex_unlock(&tsrv_ref_mu);
	if (rc)
		fprintf(stderr, "reference linear failed: %s\n", e.msg);
	if (!rc) {
		rc = be->d2h(be, y, yd, mn, &e);
		if (!rc && dy) {
			rc = be->d2h(be, dx, dxd, mk, &e);
			if (!rc)
				rc = be->d2h(be, dw, dwd, nk, &e);
			if (!rc && bias)
				rc = be->d2h(be, db, dbd, (size_t)n * 2, &e);
		}
	}
	void *bufs[] = {xd, wd, yd, bd, dyd, dxd, dwd, dbd};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		if (bufs[i])
			be->free(be, bufs[i]);
	return rc;
}

int tsrv_ref_quantize(const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		      const float *amax_in, uint8_t *codes, uint8_t *scales, float *amax)
{
	fos_backend *be = tsrv_ref_backend();
	fos_err e;
	fos_qtensor q;
	size_t xb = (size_t)(rows * cols) * fos_dtype_size(dtype);
	int64_t na = cfg->row_scaled ? rows : 1;
	void *xd = be->alloc(be, xb);
	float *ad = amax_in ? be->alloc(be, (size_t)na * 4) : NULL;
	be->h2d(be, xd, x, xb, &e);
	if (amax_in)
		be->h2d(be, ad, amax_in, (size_t)na * 4, &e);
	pthread_mutex_lock(&tsrv_ref_mu);
	int rc = fos_qtensor_alloc(be, &q, rows, cols, cfg->row_scaled, &e);
	if (!rc) {
		rc = be->quantize(be, xd, dtype, rows, cols, cfg, ad, &q, NULL, &e);
		if (!rc)
			rc = be->d2h(be, codes, q.codes, (size_t)(rows * cols / 2), &e);
		if (!rc)
			rc = be->d2h(be, scales, q.scales, (size_t)(rows * cols / 16), &e);
		if (!rc)
			rc = be->d2h(be, amax, q.amax, (size_t)na * 4, &e);
		fos_qtensor_free(be, &q);
	}
	pthread_mutex_unlock(&tsrv_ref_mu);
	be->free(be, xd);
	if (ad)
		be->free(be, ad);
	return rc;
}

int tsrv_ref_dequantize(const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows, int64_t cols,
			int bound, int row_scaled, int out_dtype, void *out)
{
	fos_backend *be = tsrv_ref_backend();
	fos_err e;
	fos_qtensor q;
	size_t ob = (size_t)(rows * cols) * fos_dtype_size(out_dtype);
	void *od = be->alloc(be, ob);
	pthread_mutex_lock(&tsrv_ref_mu);
	int rc = fos_qtensor_alloc(be, &q, rows, cols, row_scaled, &e);
	if (!rc) {
		be->h2d(be, q.codes, codes, (size_t)(rows * cols / 2), &e);
		be->h2d(be, q.scales, scales, (size_t)(rows * cols / 16), &e);
		be->h2d(be, q.amax, amax, (size_t)(row_scaled ? rows : 1) * 4, &e);
		q.rows = rows;
		q.cols = cols;
		q.bound = bound;
		q.row_scaled = row_scaled;
		rc = be->dequantize(be, &q, out_dtype, od, &e);
		if (!rc)
			rc = be->d2h(be, out, od, ob, &e);
		fos_qtensor_free(be, &q);
	}
	pthread_mutex_unlock(&tsrv_ref_mu);
	be->free(be, od);
	return rc;
}

int tsrv_tcp_connect(int port, int timeout_s)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {timeout_s, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
		close(fd);
		return -1;
	}
	return fd;
}

int tsrv_put_weight_bf16(const tsrv *s, const char *name, int64_t n, int64_t k, const uint16_t *w)
{
	fos_client *c;
	fos_status st;
	int rc = fos_connect(s->url, NULL, 20000, &c, &st);
	if (!rc) {
		fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, n, k, w);
		rc = fos_put_weight(c, name, 1, &tw, NULL, NULL, &st);
		fos_close(c);
	}
	if (rc)
		fprintf(stderr, "tsrv_put_weight_bf16 %s: %s: %s\n", name, fos_code_name(rc), st.message);
	return rc ? -1 : 0;
}
