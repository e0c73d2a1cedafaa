/* test_deploy_systemd.c: what deploy/fosd.service relies on, against a real fosd: the notify
 * protocol (a unix datagram socket as $NOTIFY_SOCKET gets READY=1 once fosd answers, WATCHDOG=1
 * pings when $WATCHDOG_USEC asks for them, STOPPING=1 when SIGTERM starts the drain, in that
 * order), --ipc-mode (the socket's permissions, checked with stat), the sizes left at "auto"
 * (cache 25 % and contexts 12.5 % of the host's memory on the cpu backend, read here with
 * sysinfo and the cgroup limit; an explicit size wins; both printed at start), the plain
 * words of backend auto when no GPU can be used; and, where systemd's tools are installed, that
 * `systemd-analyze security` rates deploy/fosd.service below 4.0 and that deploy/fosd.sysusers
 * creates the fosd user and group; and that `systemd-analyze verify` finds nothing to say about
 * fosd.service with deploy/nvidia-mps.service beside it (and does about a broken copy), fosd.service
 * wanting and following the MPS unit with its pipe directory set (README.md "Sharing a GPU with
 * trainers: MPS"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <limits.h>
#include <unistd.h>

#include "config.h"
#include "fos.h"
#include "support_server.h"

/* Receives datagrams on fd until one contains want or timeout_ms passes; every datagram seen
 * is appended to log (cap bytes). Returns 1 when want was seen. */
static int wait_for(int fd, const char *want, int timeout_ms, char *log, size_t cap)
{
	uint64_t t0 = tsrv_now_ms();
	while ((int)(tsrv_now_ms() - t0) < timeout_ms) {
		struct pollfd p = {fd, POLLIN, 0};
		int left = timeout_ms - (int)(tsrv_now_ms() - t0);
		if (poll(&p, 1, left > 0 ? left : 0) <= 0)
			continue;
		char buf[1024];
		ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = 0;
		size_t used = strlen(log);
		snprintf(log + used, cap - used, "[%s]", buf);
		if (strstr(buf, want))
			return 1;
	}
	return 0;
}

static void test_notify(void **state)
{
	(void)state;
	char dir[] = "/tmp/fosd-notify-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", dir);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	setenv("WATCHDOG_USEC", "200000", 1); /* no WATCHDOG_PID: meant for whoever reads it */
	tsrv s;
	int started = tsrv_start(&s, NULL);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	assert_int_equal(started, 0);
	char log[8192] = "";
	int ready = wait_for(fd, "READY=1", 5000, log, sizeof log);
	int pinged = ready && wait_for(fd, "WATCHDOG=1", 5000, log, sizeof log);
	int early_stop = strstr(log, "STOPPING=1") != NULL;
	kill(s.pid, SIGTERM);
	int stopping = wait_for(fd, "STOPPING=1", 10000, log, sizeof log);
	int rc = tsrv_stop(&s, 0, 10000); /* SIGTERM was sent: only wait */
	int logged = tsrv_log_contains(&s, "systemd watchdog: 200 ms");
	if (!ready || !pinged || !stopping || rc != 0 || !logged)
		tsrv_dump_log(&s);
	tsrv_cleanup(&s);
	close(fd);
	unlink(sa.sun_path);
	rmdir(dir);
	if (!ready)
		fail_msg("no READY=1 from fosd (got %s)", log);
	if (!pinged)
		fail_msg("no WATCHDOG=1 from fosd with WATCHDOG_USEC=200000 (got %s)", log);
	if (early_stop)
		fail_msg("STOPPING=1 before the signal (got %s)", log);
	if (!stopping)
		fail_msg("no STOPPING=1 after SIGTERM (got %s)", log);
	assert_true(strstr(log, "READY=1") < strstr(log, "STOPPING=1"));
	assert_non_null(strstr(log, "STATUS=serving on ipc://"));
	assert_int_equal(rc, 0);
	assert_true(logged);
}

/* Outside systemd (no NOTIFY_SOCKET) nothing changes: fosd serves and says nothing about it. */
static void test_no_notify_socket(void **state)
{
	(void)state;
	unsetenv("NOTIFY_SOCKET");
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	assert_false(tsrv_log_contains(&s, "NOTIFY_SOCKET"));
	assert_false(tsrv_log_contains(&s, "watchdog:"));
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

static int socket_mode(const tsrv *s)
{
	struct stat sb;
	assert_int_equal(stat(s->url + strlen("ipc://"), &sb), 0);
	assert_true(S_ISSOCK(sb.st_mode));
	return (int)(sb.st_mode & 07777);
}

static void test_ipc_mode(void **state)
{
	(void)state;
	tsrv s;
	const char *a660[] = {"--ipc-mode", "0660", NULL};
	assert_int_equal(tsrv_start(&s, a660), 0);
	assert_int_equal(socket_mode(&s), 0660);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
	assert_int_equal(tsrv_start(&s, NULL), 0);
	assert_int_equal(socket_mode(&s), 0600); /* the default: only fosd's user */
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

/* The host's memory as the sizing sees it: physical memory (sysinfo), or the cgroup's limit. */
static uint64_t host_memory(void)
{
	struct sysinfo si;
	assert_int_equal(sysinfo(&si), 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t phys = (uint64_t)si.totalram * si.mem_unit / page * page, lim = 0; /* whole pages */
	const char *files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
	for (int i = 0; i < 2 && !lim; i++) {
		FILE *f = fopen(files[i], "r");
		unsigned long long v;
		if (f && fscanf(f, "%llu", &v) == 1)
			lim = v;
		if (f)
			fclose(f);
	}
	return lim && lim < phys ? lim : phys;
}

static void stats_of(const tsrv *s, fos_stats_info *si)
{
	fos_client *c;
	fos_status st;
	assert_int_equal(fos_connect(s->url, NULL, 20000, &c, &st), FOS_CODE_OK);
	assert_int_equal(fos_stats(c, si, &st), FOS_CODE_OK);
	fos_close(c);
}

static void test_auto_sizes(void **state)
{
	(void)state;
	if (strcmp(tsrv_backend_name(), "cpu"))
		skip(); /* on cuda the sizes come from the GPU's memory */
	uint64_t mem = host_memory();
	static fos_stats_info si;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	stats_of(&s, &si);
	assert_true(tsrv_log_contains(&s, "memory: cache "));
	assert_true(tsrv_log_contains(&s, "(auto: 25% of "));
	assert_true(tsrv_log_contains(&s, "GiB host memory)"));
	assert_true(tsrv_log_contains(&s, "contexts "));
	assert_true(tsrv_log_contains(&s, "message pool "));
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
	assert_int_equal(si.cache_budget, mem / 4);
	assert_int_equal(si.context_budget, mem / 8);

	/* an explicit size wins, here and in a config file; the other keys stay auto */
	const char *a[] = {"--cache-bytes", "256M", NULL};
	assert_int_equal(tsrv_start(&s, a), 0);
	stats_of(&s, &si);
	assert_true(tsrv_log_contains(&s, "memory: cache 256 MiB (set)"));
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
	assert_int_equal(si.cache_budget, 256ull << 20);
	assert_int_equal(si.context_budget, mem / 8);
}

/* fosd_config_size_auto's rules on given memory sizes (the cuda case needs no GPU here). */
static void test_size_rules(void **state)
{
	(void)state;
	const uint64_t G = 1ull << 30, M = 1ull << 20;
	fosd_config c;
	char msg[512];
	fosd_config_defaults(&c);
	fosd_config_size_auto(&c, 80 * G, 256 * G, msg, sizeof msg);
	assert_int_equal(c.cache_bytes, 32 * G);   /* 40 % of the GPU's */
	assert_int_equal(c.context_bytes, 16 * G); /* 20 % of the GPU's */
	assert_int_equal(c.message_pool_bytes, 4 * G); /* 1/16 of the host's is 16G: at most 4G */
	assert_non_null(strstr(msg, "cache 32.0 GiB (auto: 40% of 80.0 GiB GPU memory)"));
	/* the same config sized again, now for a smaller device: the auto keys follow */
	fosd_config_size_auto(&c, 16 * G, 256 * G, msg, sizeof msg);
	assert_int_equal(c.cache_bytes, 16 * G / 10 * 4);
	fosd_config_free(&c);

	fosd_config_defaults(&c);
	assert_int_equal(fosd_config_set(&c, "cache_bytes", "3G", msg, sizeof msg), 0);
	assert_int_equal(fosd_config_set(&c, "message_pool_bytes", "AUTO", msg, sizeof msg), 0);
	fosd_config_size_auto(&c, 0, 512 * M, msg, sizeof msg);
	assert_int_equal(c.cache_bytes, 3 * G); /* set: it wins */
	assert_int_equal(c.context_bytes, 64 * M); /* 12.5 % of the host's */
	assert_int_equal(c.message_pool_bytes, 64 * M); /* 32M: at least 64M */
	assert_non_null(strstr(msg, "cache 3.0 GiB (set)"));
	assert_non_null(strstr(msg, "contexts 64 MiB (auto: 12.5% of host memory)"));
	/* "auto" only where it is the default */
	assert_int_equal(fosd_config_set(&c, "tenant_cache_bytes", "auto", msg, sizeof msg), -1);
	assert_int_equal(fosd_config_set(&c, "cache_bytes", "lots", msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "or auto"));
	fosd_config_free(&c);
}

static void test_auto_backend_words(void **state)
{
	(void)state;
	tsrv s;
	const char *a[] = {"--backend", "auto", NULL};
	assert_int_equal(tsrv_start(&s, a), 0);
	int cpu = tsrv_log_contains(&s, "backend cpu on");
	int plain = tsrv_log_contains(&s, "; using the cpu backend") &&
		    (tsrv_log_contains(&s, "this fosd was built without CUDA") ||
		     tsrv_log_contains(&s, "backend auto: no usable GPU"));
	int cryptic = tsrv_log_contains(&s, "driver version is insufficient");
	if (cpu && (!plain || cryptic))
		tsrv_dump_log(&s);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
	if (!cpu)
		skip(); /* a usable GPU: auto picked cuda */
	assert_true(plain);
	assert_false(cryptic);
}

/* deploy/NAME from the source tree (the tests run from it, or BUILD/tests under it). */
static int deploy_path(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "deploy/%s", name);
	if (access(out, R_OK) == 0)
		return 0;
	snprintf(out, cap, "%s/../deploy/%s", tsrv_build_dir(), name);
	return access(out, R_OK);
}

/* Runs cmd through the shell; its stdout (up to cap bytes) into out; returns the exit status. */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_unit_security(void **state)
{
	(void)state;
	char unit[1200], cmd[1400], out[65536];
	if (deploy_path("fosd.service", unit, sizeof unit) || system("command -v systemd-analyze >/dev/null 2>&1"))
		skip();
	snprintf(cmd, sizeof cmd, "systemd-analyze security --offline=true '%s' 2>&1", unit);
	run_cmd(cmd, out, sizeof out);
	const char *lvl = strstr(out, "Overall exposure level for fosd.service: ");
	if (!lvl)
		skip(); /* a systemd without --offline (before 250) */
	double score = atof(lvl + strlen("Overall exposure level for fosd.service: "));
	if (!(score > 0 && score < 4.0))
		fail_msg("systemd-analyze security rates deploy/fosd.service %.1f (at most 4.0 wanted):\n%s", score, out);
	/* the GPU stays reachable and the socket directory is systemd's */
	char text[16384];
	FILE *f = fopen(unit, "r");
	assert_non_null(f);
	text[fread(text, 1, sizeof text - 1, f)] = 0;
	fclose(f);
	assert_non_null(strstr(text, "\nType=notify\n"));
	assert_non_null(strstr(text, "\nRuntimeDirectory=fosd\n"));
	assert_non_null(strstr(text, "--listen ipc:///run/fosd/fosd.sock --ipc-mode 0660"));
	assert_non_null(strstr(text, "\nDeviceAllow=/dev/nvidiactl rw\n"));
	assert_non_null(strstr(text, "\nDeviceAllow=char-nvidia-frontend rw\n"));
	assert_null(strstr(text, "\nPrivateDevices=yes"));
	assert_null(strstr(text, "\nProcSubset=pid"));
}

/* Reads deploy/NAME into text (cap bytes); 0, or -1 when it is not there. */
static int read_deploy(const char *name, char *text, size_t cap)
{
	char path[1200];
	if (deploy_path(name, path, sizeof path))
		return -1;
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	text[fread(text, 1, cap - 1, f)] = 0;
	fclose(f);
	return 0;
}

/* systemd-analyze verify of copies of the two units in dir (their programs replaced by /bin/true,
 * which exists everywhere; sed_extra: one more sed expression for fosd.service, or NULL); its
 * output into out, the exit status returned. */
static int verify_units(const char *dir, const char *sed_extra, char *out, size_t cap)
{
	char fosd[1200], mps[1200], cmd[4 * PATH_MAX];
	assert_int_equal(deploy_path("fosd.service", fosd, sizeof fosd), 0);
	assert_int_equal(deploy_path("nvidia-mps.service", mps, sizeof mps), 0);
	snprintf(cmd, sizeof cmd,
		 "sed -e 's|/usr/local/bin/fosd|/bin/true|g' %s%s%s '%s' >'%s/fosd.service' && "
		 "sed -e 's|/usr/bin/nvidia-cuda-mps-control|/bin/true|g' '%s' >'%s/nvidia-mps.service' && "
		 "cd '%s' && systemd-analyze verify ./fosd.service ./nvidia-mps.service 2>&1",
		 sed_extra ? "-e '" : "", sed_extra ? sed_extra : "", sed_extra ? "'" : "", fosd, dir, mps, dir, dir);
	return run_cmd(cmd, out, cap);
}

static void test_units_with_mps(void **state)
{
	(void)state;
	static char fosd[16384], mps[8192];
	assert_int_equal(read_deploy("fosd.service", fosd, sizeof fosd), 0);
	assert_int_equal(read_deploy("nvidia-mps.service", mps, sizeof mps), 0);
	/* fosd starts the MPS daemon with it, after it, and finds it through its pipe directory */
	assert_non_null(strstr(fosd, "\nWants=nvidia-mps.service\n"));
	const char *after = strstr(fosd, "\nAfter=");
	assert_non_null(after);
	const char *eol = strchr(after + 1, '\n');
	const char *m = strstr(after, "nvidia-mps.service");
	assert_true(m && m < eol);
	assert_non_null(strstr(fosd, "\nEnvironment=CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps\n"));
	assert_non_null(strstr(fosd, "\nReadWritePaths=-/run/nvidia-mps\n"));
	assert_null(strstr(fosd, "\nRemoveIPC=yes")); /* would delete the MPS server's shared memory */
	/* the daemon: its pipe directory is systemd's, it runs as fosd's user, before fosd */
	assert_non_null(strstr(mps, "\nRuntimeDirectory=nvidia-mps\n"));
	assert_non_null(strstr(mps, "\nEnvironment=CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps\n"));
	assert_non_null(strstr(mps, "\nUser=fosd\n"));
	assert_non_null(strstr(mps, "\nBefore=fosd.service\n"));
	assert_non_null(strstr(mps, "\nExecStart=/usr/bin/nvidia-cuda-mps-control -d\n"));
	assert_non_null(strstr(mps, "\nConditionPathExists=/usr/bin/nvidia-cuda-mps-control\n")); /* CPU hosts */

	if (system("command -v systemd-analyze >/dev/null 2>&1"))
		skip();
	char dir[] = "/tmp/fosd-units-XXXXXX", out[8192], cmd[PATH_MAX];
	assert_non_null(mkdtemp(dir));
	int rc = verify_units(dir, NULL, out, sizeof out);
	char bad_out[8192];
	int bad_rc = verify_units(dir, "s/^Wants=/Wantz=/", bad_out, sizeof bad_out);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	if (rc != 0 || out[0])
		fail_msg("systemd-analyze verify fosd.service nvidia-mps.service: exit %d:\n%s", rc, out);
	/* and it does speak up about a broken unit: the check above can fail */
	if (!strstr(bad_out, "Wantz"))
		fail_msg("systemd-analyze verify said nothing of an unknown key (exit %d): %s", bad_rc, bad_out);
}

static void test_sysusers(void **state)
{
	(void)state;
	char file[1200], cmd[2 * PATH_MAX], out[4096];
	if (deploy_path("fosd.sysusers", file, sizeof file) || system("command -v systemd-sysusers >/dev/null 2>&1"))
		skip();
	char root[] = "/tmp/fosd-sysusers-XXXXXX";
	assert_non_null(mkdtemp(root));
	char abs[PATH_MAX];
	assert_non_null(realpath(file, abs));
	snprintf(cmd, sizeof cmd,
		 "mkdir -p '%s/etc' && : > '%s/etc/passwd' && : > '%s/etc/group' && "
		 "systemd-sysusers --root='%s' '%s' >/dev/null 2>&1 && cat '%s/etc/passwd' '%s/etc/group'",
		 root, root, root, root, abs, root, root);
	int rc = run_cmd(cmd, out, sizeof out);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "fosd:x:"));          /* the user */
	assert_non_null(strstr(out, ":/usr/sbin/nologin")); /* no login */
	const char *user = strstr(out, "fosd:x:");
	assert_non_null(strstr(user + 1, "\nfosd:x:")); /* and the group, in etc/group */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_notify),
		cmocka_unit_test(test_no_notify_socket),
		cmocka_unit_test(test_ipc_mode),
		cmocka_unit_test(test_auto_sizes),
		cmocka_unit_test(test_size_rules),
		cmocka_unit_test(test_auto_backend_words),
		cmocka_unit_test(test_unit_security),
		cmocka_unit_test(test_sysusers),
		cmocka_unit_test(test_units_with_mps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
