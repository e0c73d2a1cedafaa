/* test_cli_cuda_plugin.c: fos loads no CUDA library until --local needs the cuda backend (issue 30
 * item 2). The mappings of the real fos process are read from /proc/PID/maps at its exit: the test
 * runs it under ptrace with PTRACE_O_TRACEEXIT, so fos stops after its last instruction and before
 * its address space is torn down, whatever it loaded during its life still mapped. fosd (which
 * links cuBLASLt and the CUDA runtime) run the same way is the control that the check sees them.
 * Also: `--local --backend cuda` on a machine without the NVIDIA driver says plainly that
 * libcuda.so.1 is missing, loading nothing; `--backend auto` falls back to the cpu; the plugin
 * BUILD/libfos-cuda.so exports the CUDA backend's constructor and nothing of the numerics. Only
 * meaningful on a CUDA build (CUDA=1: nvcc present, a GPU not needed); a CUDA=0 build skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <signal.h>
#include <sys/ptrace.h>

#include "backend.h"
#include "test_cli_harness.h"

/* Runs path argv (stdout and stderr to files of the test dir) under ptrace and copies its
 * /proc/PID/maps at its exit stop into maps; returns the exit status (128 + signal if killed). */
static int run_maps_at_exit(const char *const *argv, char *maps, size_t cap)
{
	maps[0] = 0;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int o = open(th_p(".stdout"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(th_p(".stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || ptrace(PTRACE_TRACEME, 0, 0, 0))
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st, seen_exit = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid); /* the stop at exec */
	assert_true(WIFSTOPPED(st));
	assert_int_equal(ptrace(PTRACE_SETOPTIONS, pid, 0, (void *)(long)(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL)), 0);
	assert_int_equal(ptrace(PTRACE_CONT, pid, 0, 0), 0);
	for (;;) {
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (WIFEXITED(st) || WIFSIGNALED(st))
			break;
		int sig = 0;
		if ((st >> 8) == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
			char p[64];
			snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
			th_slurp(p, maps, cap);
			seen_exit = 1;
		} else if (WIFSTOPPED(st) && WSTOPSIG(st) != SIGTRAP) {
			sig = WSTOPSIG(st); /* deliver the process's own signals */
		}
		assert_int_equal(ptrace(PTRACE_CONT, pid, 0, (void *)(long)sig), 0);
	}
	assert_true(seen_exit);
	assert_true(maps[0]);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The first mapped CUDA library (cudart, cuBLAS(Lt), the driver, fos's plugin) named in maps, or NULL. */
static const char *cuda_mapping(const char *maps)
{
	static const char *const libs[] = {"/libcudart", "/libcublas", "/libcuda.so", "/libfos-cuda.so", "/libnvrtc"};
	for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
		if (strstr(maps, libs[i]))
			return libs[i];
	return NULL;
}

static char maps[1 << 20];

static void skip_without_cuda_build(void)
{
#ifndef FOS_HAVE_CUDA
	skip(); /* a CUDA=0 build: fos links no CUDA library anyway, and there is no plugin */
#endif
}

static void test_version_maps_no_cuda_library(void **state)
{
	(void)state;
	skip_without_cuda_build();
	char fosd[PATH_MAX];
	snprintf(fosd, sizeof fosd, "%.*s/fosd", (int)(strlen(th_fos()) - 4), th_fos());
	const char *control[] = {fosd, "--version", NULL};
	assert_int_equal(run_maps_at_exit(control, maps, sizeof maps), 0);
	if (!strstr(maps, "/libcudart"))
		fail_msg("control: fosd --version (which links the CUDA runtime) shows no libcudart in its maps:\n%s", maps);
	const char *args[] = {th_fos(), "--version", NULL};
	assert_int_equal(run_maps_at_exit(args, maps, sizeof maps), 0);
	const char *lib = cuda_mapping(maps);
	if (lib)
		fail_msg("fos --version mapped %s:\n%s", lib, maps);
}

static int have_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h)
		dlclose(h);
	return h != NULL;
}

static void save_inputs(void)
{
	uint16_t x[4 * 32], w[16 * 32];
	for (size_t i = 0; i < sizeof x / 2; i++)
		x[i] = (uint16_t)(0x3f80 + (i % 7)); /* about 1.0 */
	for (size_t i = 0; i < sizeof w / 2; i++)
		w[i] = (uint16_t)(0xbf00 + (i % 5)); /* about -0.5 */
	th_save(th_p("x.npy"), NPY_U2, 2, 4, 32, x);
	th_save(th_p("w.npy"), NPY_U2, 2, 16, 32, w);
}

static void test_local_cuda_without_driver(void **state)
{
	(void)state;
	skip_without_cuda_build();
	if (have_driver())
		skip(); /* this machine has the driver: the message under test cannot occur */
	save_inputs();
	const char *args[] = {th_fos(), "linear", th_p("x.npy"), th_p("w.npy"), "--out", th_p("out"), "--local",
			      "--backend", "cuda", NULL};
	int rc = run_maps_at_exit(args, maps, sizeof maps);
	char err[4096];
	th_slurp(th_p(".stderr"), err, sizeof err);
	assert_int_equal(rc, 1);
	if (!strstr(err, "libcuda.so.1") || !strstr(err, "not installed") || strstr(err, "insufficient") ||
	    !strstr(err, "--backend cpu"))
		fail_msg("want a plain 'libcuda.so.1 is not installed' message with the way out, got: %s", err);
	const char *lib = cuda_mapping(maps);
	if (lib)
		fail_msg("fos mapped %s although the driver is missing:\n%s", lib, maps);
}

static void test_local_auto_falls_back(void **state)
{
	(void)state;
	skip_without_cuda_build();
	if (have_driver())
		skip();
	save_inputs();
	th_result r;
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--out", th_p("auto"), "--local", "--backend", "auto", NULL);
	th_expect_ok(&r);
	th_run(&r, "linear", th_p("x.npy"), th_p("w.npy"), "--out", th_p("cpu"), "--local", "--backend", "cpu", NULL);
	th_expect_ok(&r);
	char a[4096] = {0}, c[4096] = {0}; /* y.npy (4, 16) bf16: 256 bytes, read whole */
	th_slurp(th_p("auto/y.npy"), a, sizeof a);
	th_slurp(th_p("cpu/y.npy"), c, sizeof c);
	assert_true(a[0]);
	assert_memory_equal(a, c, sizeof a);
}

static void test_plugin_exports(void **state)
{
	(void)state;
	skip_without_cuda_build();
	char so[PATH_MAX];
	snprintf(so, sizeof so, "%.*s/libfos-cuda.so", (int)(strlen(th_fos()) - 4), th_fos());
	void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fail_msg("dlopen %s: %s", so, dlerror());
	typedef fos_backend *(*ctor)(int, fos_err *);
	ctor open = (ctor)dlsym(h, "fos_backend_cuda");
	assert_non_null(open);
	assert_null(dlsym(h, "fos_backend_cpu")); /* the numerics inside stay private */
	assert_null(dlsym(h, "fos_seterr"));
	if (!have_driver()) {
		fos_err e = {0, ""};
		assert_null(open(0, &e)); /* the plugin's own constructor answers, in the CUDA runtime's words */
		assert_int_equal(e.rc, FOS_EUNSUPPORTED);
		assert_non_null(strstr(e.msg, "no usable CUDA GPU"));
	}
	dlclose(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_maps_no_cuda_library),
		cmocka_unit_test(test_local_cuda_without_driver),
		cmocka_unit_test(test_local_auto_falls_back),
		cmocka_unit_test(test_plugin_exports),
	};
	return cmocka_run_group_tests(tests, th_setup, th_teardown);
}
