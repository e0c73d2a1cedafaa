/* gpu_mps.c: Health's mps against a real cuda fosd (the device run; every test skips without a GPU):
 *  - fosd started with CUDA_MPS_PIPE_DIRECTORY naming an empty directory (no daemon answers there,
 *    so CUDA gives fosd a context of its own) answers MPS_OFF, logs it with the evidence, and
 *    `fos health` prints "mps:         off";
 *  - fosd started after a private MPS control daemon (nvidia-cuda-mps-control -d with its own pipe
 *    and log directories, as deploy/run-fosd.sh starts one; skipped without the tool) answers
 *    MPS_ON and `fos health` prints "mps:         on"; the daemon is told to quit after;
 *  - in both, NVML's process lists (nvml.h fosd_nvml_mps, mps.c's fallback for drivers without
 *    cudaDevAttrMpsEnabled) agree with the answer for fosd's pid, or cannot see that pid (another
 *    PID namespace: unknown), never the opposite.
 * Run: make CUDA=1 test-gpu, or build/tests/gpu_mps alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fos.h"
#include "nvml.h"
#include "support_server.h"
#include "support_trust.h"

#ifdef FOS_HAVE_CUDA
extern int cudaGetDeviceCount(int *n);
#else
static int cudaGetDeviceCount(int *n)
{
	*n = 0;
	return 0;
}
#endif

static int g_gpus;

/* Starts a cuda fosd with CUDA_MPS_PIPE_DIRECTORY=pipe; its answer: Health's mps (libfos), the
 * `fos health` text into out, and what NVML says of its pid into *nvml_st / nvml_how. -1 when it
 * does not start and may_fail. */
static int fosd_mps(const char *pipe, int may_fail, char *out, size_t cap, int *nvml_st, char *nvml_how,
		    size_t howsz)
{
	setenv("FOS_TEST_BACKEND", "cuda", 1);
	setenv("CUDA_MPS_PIPE_DIRECTORY", pipe, 1);
	tsrv s;
	int started = tsrv_start(&s, NULL);
	unsetenv("CUDA_MPS_PIPE_DIRECTORY");
	if (started && may_fail) {
		tsrv_cleanup(&s);
		return -1;
	}
	assert_int_equal(started, 0);
	fos_client *c = tt_connect_ms(s.url, NULL, 60000);
	assert_non_null(c);
	int mps = fos_server_mps(c);
	uint8_t u[16];
	char uuid[41] = "";
	fos_status st;
	assert_int_equal(fos_server_gpu_uuid(c, u, &st), FOS_CODE_OK);
	fos_gpu_uuid_str(u, uuid);
	fos_close(c);

	char cmd[PATH_MAX + 512];
	snprintf(cmd, sizeof cmd, "'%s/fos' --server '%s' health 2>&1", tsrv_build_dir(), s.url);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	out[fread(out, 1, cap - 1, p)] = 0;
	assert_int_equal(pclose(p), 0);

	char why[256];
	fosd_nvml *n = fosd_nvml_open(NULL, why, sizeof why);
	*nvml_st = n ? fosd_nvml_mps(n, uuid, (unsigned)s.pid, nvml_how, howsz) : FOS_MPS_UNKNOWN;
	if (!n)
		snprintf(nvml_how, howsz, "%s", why);
	fosd_nvml_close(n);

	int logged = tsrv_log_contains(&s, mps == FOS_MPS_ON ? "mps: on on cuda:0 (" : "mps: off on cuda:0 (");
	printf("gpu_mps: CUDA_MPS_PIPE_DIRECTORY=%s: Health mps %d; NVML: %s\n", pipe, mps, nvml_how);
	if (!logged)
		tsrv_dump_log(&s);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 30000), 0);
	tsrv_cleanup(&s);
	assert_true(logged);
	return mps;
}

static void test_without_mps(void **state)
{
	(void)state;
	if (!g_gpus)
		skip();
	char dir[] = "/tmp/fosd-nomps-XXXXXX", out[4096], how[512];
	assert_non_null(mkdtemp(dir)); /* no daemon in it */
	int nv;
	int mps = fosd_mps(dir, 0, out, sizeof out, &nv, how, sizeof how);
	rmdir(dir);
	assert_int_equal(mps, FOS_MPS_OFF);
	assert_non_null(strstr(out, "\n  mps:         off ("));
	assert_true(nv == FOS_MPS_OFF || nv == FOS_MPS_UNKNOWN);
}

static void test_with_private_daemon(void **state)
{
	(void)state;
	if (!g_gpus || system("command -v nvidia-cuda-mps-control >/dev/null 2>&1"))
		skip();
	char dir[] = "/tmp/fosd-mps-XXXXXX", cmd[1024], out[4096], how[512];
	assert_non_null(mkdtemp(dir));
	snprintf(cmd, sizeof cmd,
		 "mkdir -p %s/pipe %s/log && CUDA_MPS_PIPE_DIRECTORY=%s/pipe CUDA_MPS_LOG_DIRECTORY=%s/log "
		 "nvidia-cuda-mps-control -d",
		 dir, dir, dir, dir);
	assert_int_equal(system(cmd), 0);
	char pipe[64];
	snprintf(pipe, sizeof pipe, "%s/pipe", dir);
	int nv;
	int mps = fosd_mps(pipe, 0, out, sizeof out, &nv, how, sizeof how);
	/* the answer is the process's, not the GPU's: a fosd pointed elsewhere while the daemon runs
	 * is not an MPS client (where the GPU lets such a process start beside an MPS server) */
	char empty[64], out2[4096], how2[512];
	snprintf(empty, sizeof empty, "%s/log", dir); /* no daemon's pipe there */
	int nv2, other = fosd_mps(empty, 1, out2, sizeof out2, &nv2, how2, sizeof how2);
	snprintf(cmd, sizeof cmd, "echo quit | CUDA_MPS_PIPE_DIRECTORY=%s/pipe nvidia-cuda-mps-control; sleep 1; rm -rf %s",
		 dir, dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(mps, FOS_MPS_ON);
	assert_non_null(strstr(out, "\n  mps:         on\n"));
	assert_true(nv == FOS_MPS_ON || nv == FOS_MPS_UNKNOWN);
	printf("gpu_mps: a fosd outside the running daemon: %s\n",
	       other < 0 ? "did not start beside the MPS server" : other == FOS_MPS_OFF ? "mps off" : "NOT off");
	assert_true(other == -1 || other == FOS_MPS_OFF);
}

int main(void)
{
	if (cudaGetDeviceCount(&g_gpus) || g_gpus <= 0) {
		g_gpus = 0;
		printf("gpu_mps: no usable GPU, skipping\n");
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_without_mps),
		cmocka_unit_test(test_with_private_daemon),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
