/* test_cli_load_device.c: `fos load --device` (client/cli/cli_load.c; build/fos as a subprocess)
 * against a real fosd (CPU backend unless $FOS_TEST_BACKEND; private ipc socket): without a CUDA
 * driver ($FOS_CUDA_DRIVER naming a missing library) the run fails at its setup with one error line
 * saying so, exit 1, nothing on stdout and no weight left behind; --device with --shm is a usage
 * error (exit 2); --help documents --device; and against a cuda fosd on a host with a GPU (run
 * with FOS_TEST_BACKEND=cuda) forward, linear and quantize runs with device tensors, over the
 * socket and through request channels, complete with every request OK. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos.h"
#include "support_server.h"
#include "test_cli_harness.h"

static tsrv g_srv;

static int setup(void **state)
{
	if (th_setup(state))
		return -1;
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	return 0;
}

static int teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

static void test_no_driver(void **state)
{
	(void)state;
	static const char *const env[] = {"FOS_CUDA_DRIVER=/nonexistent/libcuda.so.1", NULL};
	static const char *const ops[] = {"forward", "linear", "quantize"};
	for (size_t i = 0; i < 3; i++) {
		int q = !strcmp(ops[i], "quantize"); /* X only: no --n */
		const char *args[] = {"load", "--device", "--op", ops[i], "--m", "128", "--k", "128", "--requests", "2",
				      "--warmup", "0", q ? NULL : "--n", "128", NULL};
		th_result r;
		th_runv_env(&r, env, args);
		th_expect_fail(&r, 1, "no CUDA driver");
		if (!strstr(r.err, "--device"))
			fail_msg("the error does not name --device: %s", r.err);
	}
	th_result r;
	th_run(&r, "list-weights", NULL);
	th_expect_ok(&r);
	if (strstr(r.out, "fos-load-"))
		fail_msg("a load weight was left behind:\n%s", r.out);
}

static void test_usage(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "load", "--device", "--shm", "--requests", "1", NULL);
	th_expect_fail(&r, 2, "--device and --shm exclude each other");
	th_run(&r, "load", "--help", NULL);
	if (r.status || !strstr(r.out, "--device") || !strstr(r.out, "[--shm | --device]") ||
	    !strstr(r.out, "GPU memory"))
		fail_msg("load --help does not document --device:\n%s", r.out);
}

static void test_cuda_fosd(void **state)
{
	(void)state;
	if (strcmp(tsrv_backend_name(), "cuda"))
		skip(); /* needs a cuda fosd and a GPU: FOS_TEST_BACKEND=cuda on the GPU host */
	static const char *const ops[] = {"forward", "linear", "quantize", "backward"};
	for (int chan = 0; chan < 2; chan++)
		for (size_t i = 0; i < 4; i++) {
			int q = !strcmp(ops[i], "quantize"); /* X only: no --n */
			const char *args[] = {"load", "--device", "--op", ops[i], "--m", "256", "--k", "256", "--requests", "50",
					      "--warmup", "0", "--concurrency", "2", "--connections", "2",
					      chan ? "--channel" : "--no-progress", q ? NULL : "--n", "256", NULL};
			th_result r;
			th_runv(&r, args);
			th_expect_ok(&r);
			if (!strstr(r.out, "50 ok, 0 failed"))
				fail_msg("load --device --op %s%s:\n%s", ops[i], chan ? " --channel" : "", r.out);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_driver),
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_cuda_fosd),
	};
	return cmocka_run_group_tests_name("cli_load_device", tests, setup, teardown);
}
