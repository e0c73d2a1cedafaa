/* test_e2e_sigterm_start.c: SIGTERM or SIGINT right after fosd starts is a graceful drain, never
 * the default action: fosd blocks both signals before any thread starts or any socket listens,
 * and its control loop takes them once it runs (control.c). Each try starts a fosd and signals it
 * the moment its ipc socket file appears (half the tries) or first accepts a connection (the
 * others); every try must exit 0 and log the drain. Without the blocking, the signal killed fosd
 * (exit 143) in almost every try. A signal during a long weight-repository load stops the load
 * and fosd exits 0 before serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_server.h"

enum { TRIES = 30 };

/* Starts fosd on a private socket without waiting for it (extra: more arguments); 0 or -1. */
static int spawn_with(tsrv *s, const char *const *extra)
{
	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "/tmp/fosd-test-XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	snprintf(s->url, sizeof s->url, "ipc://%s/fosd.sock", s->dir);
	snprintf(s->log, sizeof s->log, "%s/fosd.log", s->dir);
	char bin[1200];
	const char *argv[64];
	tsrv_fosd_argv(s, extra, bin, sizeof bin, argv);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	s->pid = pid;
	return 0;
}

/* Waits (up to 15 s) until the socket file exists (accept 0) or takes a connection (accept 1). */
static int wait_socket(const tsrv *s, int accept)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char path[400];
	snprintf(path, sizeof path, "%s/fosd.sock", s->dir);
	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	uint64_t t0 = tsrv_now_ms();
	while (tsrv_now_ms() - t0 < 15000) {
		if (!accept) {
			struct stat sb;
			if (!stat(sa.sun_path, &sb))
				return 0;
		} else {
			int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			int ok = fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof sa);
			if (fd >= 0)
				close(fd);
			if (ok)
				return 0;
		}
		if (waitpid(s->pid, &(int){0}, WNOHANG) == s->pid)
			return -1;
		usleep(100);
	}
	return -1;
}

static int spawn(tsrv *s)
{
	return spawn_with(s, NULL);
}

static void signal_at_start(int sig)
{
	int drained = 0;
	for (int i = 0; i < TRIES; i++) {
		tsrv s;
		assert_int_equal(spawn(&s), 0);
		int ready = wait_socket(&s, i & 1);
		int rc = tsrv_stop(&s, sig, 20000);
		if (ready || rc != 0 || !tsrv_log_contains(&s, "drained")) {
			fprintf(stderr, "try %d (signal at the socket's %s): ready %d, exit %d\n", i,
				i & 1 ? "first accept" : "creation", ready, rc);
			tsrv_dump_log(&s);
		} else {
			drained++;
		}
		tsrv_cleanup(&s);
	}
	assert_int_equal(drained, TRIES);
}

static void test_sigterm_at_start(void **state)
{
	(void)state;
	signal_at_start(SIGTERM);
}

static void test_sigint_at_start(void **state)
{
	(void)state;
	signal_at_start(SIGINT);
}

/* A signal while the weight repository loads (2000 files): fosd stops loading and exits 0
 * before it serves ("stopping before serving"), or, if the load was done, drains; never the
 * default action, never the whole load first when it is long. */
static void test_sigterm_during_weights(void **state)
{
	(void)state;
	char dir[] = "/tmp/fos-sigw-XXXXXX";
	assert_non_null(mkdtemp(dir));
	static uint16_t w[64 * 64];
	tsrv_fill_bf16(w, 64 * 64, 3, 0.05f);
	char hdr[128];
	int hl = snprintf(hdr, sizeof hdr, "{'descr': '<u2', 'fortran_order': False, 'shape': (64, 64), }");
	while ((10 + hl + 1) % 64)
		hdr[hl++] = ' ';
	hdr[hl++] = '\n';
	for (int i = 0; i < 2000; i++) {
		char path[300];
		snprintf(path, sizeof path, "%s/w%04d.npy", dir, i);
		FILE *f = fopen(path, "wb");
		assert_non_null(f);
		unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
		assert_int_equal(fwrite(pre, 1, 10, f), 10);
		assert_int_equal(fwrite(hdr, 1, (size_t)hl, f), (size_t)hl);
		assert_int_equal(fwrite(w, 1, sizeof w, f), sizeof w);
		fclose(f);
	}
	int stopped_early = 0;
	for (int t = 0; t < 5; t++) {
		tsrv s;
		const char *extra[] = {"--weights", dir, NULL};
		assert_int_equal(spawn_with(&s, extra), 0);
		uint64_t t0 = tsrv_now_ms();
		while (!tsrv_log_contains(&s, "limits:") && tsrv_now_ms() - t0 < 15000) /* past the signal mask */
			usleep(200);
		usleep((useconds_t)(t * 2000));
		int rc = tsrv_stop(&s, t & 1 ? SIGINT : SIGTERM, 20000);
		int early = tsrv_log_contains(&s, "during the start: stopping before serving");
		if (rc != 0 || !(early || tsrv_log_contains(&s, "drained"))) {
			tsrv_dump_log(&s);
			fail_msg("try %d: exit %d", t, rc);
		}
		stopped_early += early;
		tsrv_cleanup(&s);
	}
	printf("%d of 5 tries stopped during the load\n", stopped_early);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigterm_at_start),
		cmocka_unit_test(test_sigint_at_start),
		cmocka_unit_test(test_sigterm_during_weights),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
