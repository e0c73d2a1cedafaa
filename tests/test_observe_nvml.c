/* test_observe_nvml.c: the GPU numbers of /metrics (server/observe/nvml.c) over a fake NVML (the
 * functions below, handed over by name as dlsym would): two GPUs read with their UUID, name,
 * utilization, memory, power and temperature, a number the GPU does not support left out (its
 * has_ flag 0), a device whose handle fails skipped; nvmlInit failing or a missing function is a
 * NULL handle with the reason, never a crash; a library that is absent (as on a CPU host) or is
 * not NVML (libm) likewise; fosd_nvml_sample and fosd_nvml_close take NULL. fosd_nvml_mps (mps.c's
 * fallback): a pid among a GPU's MPS clients is on, among its plain compute processes off, in
 * neither (another PID namespace), on a GPU NVML does not know, with a list that fails or with an
 * NVML lacking the _v3 lists (which leaves the numbers above working) unknown; a list longer than
 * the first buffer is read whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "fos_wire_enums.h"
#include "nvml.h"

/* ---- the fake NVML -------------------------------------------------------------------------- */

static int g_init_rc, g_inited, g_shutdowns, g_count = 3;

typedef struct {
	unsigned int gpu, memory;
} fake_util;
typedef struct {
	unsigned long long total, free, used;
} fake_mem;

static int f_init(void)
{
	g_inited += !g_init_rc;
	return g_init_rc;
}
static int f_shutdown(void)
{
	g_shutdowns++;
	return 0;
}
static const char *f_error_string(int r)
{
	return r == 9 ? "Driver Not Loaded" : "Unknown Error";
}
static int f_count(unsigned int *n)
{
	*n = (unsigned)g_count;
	return 0;
}
/* devices 0 and 2 answer; 1's handle fails (e.g. a GPU lost); a handle points at its index */
static int g_devs[3] = {0, 1, 2};
static int f_handle(unsigned int i, void **d)
{
	if (i == 1 || i > 2)
		return 15;
	*d = &g_devs[i];
	return 0;
}
static int idx(void *d)
{
	return *(int *)d;
}
static int f_uuid(void *d, char *out, unsigned int n)
{
	snprintf(out, n, "GPU-0000000%d-fake", idx(d));
	return 0;
}
static int f_name(void *d, char *out, unsigned int n)
{
	snprintf(out, n, "%s", idx(d) ? "NVIDIA \"Fake\" H100" : "NVIDIA H200");
	return 0;
}
static int f_util(void *d, fake_util *u)
{
	u->gpu = idx(d) ? 3 : 97;
	u->memory = 40;
	return 0;
}
static int f_mem(void *d, fake_mem *m)
{
	m->total = 150ull << 30;
	m->used = (uint64_t)(idx(d) + 1) << 30;
	m->free = m->total - m->used;
	return 0;
}
static int f_power(void *d, unsigned int *mw)
{
	if (idx(d))
		return 3; /* NVML_ERROR_NOT_SUPPORTED */
	*mw = 412345;
	return 0;
}
static int f_temp(void *d, int sensor, unsigned int *t)
{
	if (sensor != 0)
		return 2;
	*t = 50 + (unsigned)idx(d);
	return 0;
}

/* the process lists of GPU 0 (GPU 2's are empty): pids, as NVML's _v3 calls fill them */
typedef struct {
	unsigned int pid;
	unsigned long long used;
	unsigned int gi, ci;
} fake_proc;
static unsigned g_mps_pids[200], g_cpu_pids[200];
static unsigned g_n_mps, g_n_cpu;
static int g_list_rc, g_list_calls;
static int f_by_uuid(const char *uuid, void **d)
{
	for (int i = 0; i < 3; i += 2) {
		char u[64];
		snprintf(u, sizeof u, "GPU-0000000%d-fake", i);
		if (!strcmp(uuid, u)) {
			*d = &g_devs[i];
			return 0;
		}
	}
	return 6; /* NVML_ERROR_NOT_FOUND */
}
static int fake_list(void *d, unsigned int *count, fake_proc *out, const unsigned *pids, unsigned n)
{
	g_list_calls++;
	if (g_list_rc)
		return g_list_rc;
	if (idx(d))
		n = 0;
	if (*count < n) {
		*count = n;
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	}
	for (unsigned i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof out[i]);
		out[i].pid = pids[i];
		out[i].used = 1ull << 20;
	}
	*count = n;
	return 0;
}
static int f_mps_procs(void *d, unsigned int *count, fake_proc *out)
{
	return fake_list(d, count, out, g_mps_pids, g_n_mps);
}
static int f_cpu_procs(void *d, unsigned int *count, fake_proc *out)
{
	return fake_list(d, count, out, g_cpu_pids, g_n_cpu);
}

static const char *g_missing; /* a name the resolver does not know */

static void *resolve(void *ctx, const char *sym)
{
	(void)ctx;
	static const struct {
		const char *name;
		void (*fn)(void);
	} t[] = {
		{"nvmlInit_v2", (void (*)(void))f_init},
		{"nvmlShutdown", (void (*)(void))f_shutdown},
		{"nvmlErrorString", (void (*)(void))f_error_string},
		{"nvmlDeviceGetCount_v2", (void (*)(void))f_count},
		{"nvmlDeviceGetHandleByIndex_v2", (void (*)(void))f_handle},
		{"nvmlDeviceGetUUID", (void (*)(void))f_uuid},
		{"nvmlDeviceGetName", (void (*)(void))f_name},
		{"nvmlDeviceGetUtilizationRates", (void (*)(void))f_util},
		{"nvmlDeviceGetMemoryInfo", (void (*)(void))f_mem},
		{"nvmlDeviceGetPowerUsage", (void (*)(void))f_power},
		{"nvmlDeviceGetTemperature", (void (*)(void))f_temp},
		{"nvmlDeviceGetHandleByUUID", (void (*)(void))f_by_uuid},
		{"nvmlDeviceGetMPSComputeRunningProcesses_v3", (void (*)(void))f_mps_procs},
		{"nvmlDeviceGetComputeRunningProcesses_v3", (void (*)(void))f_cpu_procs},
	};
	if (g_missing && !strcmp(sym, g_missing))
		return NULL;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(t[i].name, sym)) {
			void *p;
			memcpy(&p, &t[i].fn, sizeof p); /* as dlsym returns a function */
			return p;
		}
	return NULL;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_sample(void **state)
{
	(void)state;
	char msg[256] = "";
	g_init_rc = 0;
	g_missing = NULL;
	fosd_nvml *n = fosd_nvml_open_resolved(resolve, NULL, "fake", msg, sizeof msg);
	assert_non_null(n);
	assert_int_equal(g_inited, 1);
	fosd_gpu_stat g[FOSD_MAX_GPUS];
	assert_int_equal(fosd_nvml_sample(n, g, FOSD_MAX_GPUS), 2); /* 1 of 3 has no handle */
	assert_int_equal(g[0].index, 0);
	assert_string_equal(g[0].uuid, "GPU-00000000-fake");
	assert_string_equal(g[0].name, "NVIDIA H200");
	assert_true(g[0].has_util && g[0].has_mem && g[0].has_power && g[0].has_temp);
	assert_int_equal(g[0].util_gpu, 97);
	assert_int_equal(g[0].util_mem, 40);
	assert_int_equal(g[0].mem_used, 1ull << 30);
	assert_int_equal(g[0].mem_total, 150ull << 30);
	assert_int_equal(g[0].power_mw, 412345);
	assert_int_equal(g[0].temp_c, 50);
	assert_int_equal(g[1].index, 2);
	assert_string_equal(g[1].name, "NVIDIA \"Fake\" H100");
	assert_int_equal(g[1].has_power, 0); /* not supported there */
	assert_int_equal(g[1].mem_used, 3ull << 30);
	assert_int_equal(g[1].temp_c, 52);
	/* at most max */
	assert_int_equal(fosd_nvml_sample(n, g, 1), 1);
	fosd_nvml_close(n);
	assert_int_equal(g_shutdowns, 1);
	/* NULL: nothing */
	assert_int_equal(fosd_nvml_sample(NULL, g, FOSD_MAX_GPUS), 0);
	fosd_nvml_close(NULL);
}

static void test_failures(void **state)
{
	(void)state;
	char msg[512];
	/* the driver refuses */
	g_init_rc = 9;
	g_missing = NULL;
	assert_null(fosd_nvml_open_resolved(resolve, NULL, "fake", msg, sizeof msg));
	assert_non_null(strstr(msg, "nvmlInit: Driver Not Loaded (9)"));
	/* an old library without one of the functions */
	g_init_rc = 0;
	g_missing = "nvmlDeviceGetCount_v2";
	assert_null(fosd_nvml_open_resolved(resolve, NULL, "fake", msg, sizeof msg));
	assert_string_equal(msg, "fake has no nvmlDeviceGetCount_v2");
	g_missing = NULL;
	/* no library (a CPU host), and a library that is not NVML */
	assert_null(fosd_nvml_open("libnvidia-ml-not-here.so.1", msg, sizeof msg));
	assert_non_null(strstr(msg, "cannot load libnvidia-ml-not-here.so.1"));
	assert_null(fosd_nvml_open("libm.so.6", msg, sizeof msg));
	assert_string_equal(msg, "libm.so.6 has no nvmlInit_v2");
}

static void test_mps(void **state)
{
	(void)state;
	char msg[256] = "", how[256];
	g_init_rc = 0;
	g_missing = NULL;
	fosd_nvml *n = fosd_nvml_open_resolved(resolve, NULL, "fake", msg, sizeof msg);
	assert_non_null(n);
	/* an MPS client: the MPS server and two clients, one of them 4242 */
	g_n_mps = 2;
	g_mps_pids[0] = 17;
	g_mps_pids[1] = 4242;
	g_n_cpu = 1;
	g_cpu_pids[0] = 99; /* nvidia-cuda-mps-server */
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 4242, how, sizeof how), FOS_MPS_ON);
	assert_string_equal(how, "NVML lists pid 4242 among the MPS clients of GPU-00000000-fake");
	/* a process of its own: among the compute processes only */
	g_cpu_pids[0] = 4242;
	g_mps_pids[1] = 18;
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 4242, how, sizeof how), FOS_MPS_OFF);
	assert_non_null(strstr(how, "among the compute processes of GPU-00000000-fake, not its MPS clients"));
	/* in neither list (another PID namespace), or on a GPU listing nothing */
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 5, how, sizeof how), FOS_MPS_UNKNOWN);
	assert_non_null(strstr(how, "neither with nor without MPS"));
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000002-fake", 4242, how, sizeof how), FOS_MPS_UNKNOWN);
	/* a GPU NVML does not know */
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000001-fake", 4242, how, sizeof how), FOS_MPS_UNKNOWN);
	assert_non_null(strstr(how, "NVML does not find GPU-00000001-fake"));
	/* a list that fails */
	g_list_rc = 999;
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 4242, NULL, 0), FOS_MPS_UNKNOWN);
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 4242, how, sizeof how), FOS_MPS_UNKNOWN);
	assert_non_null(strstr(how, "cannot list the processes"));
	g_list_rc = 0;
	/* 150 clients, 4242 the last: past the first buffer, read whole after NVML says how many */
	g_n_mps = 150;
	for (unsigned i = 0; i < g_n_mps; i++)
		g_mps_pids[i] = 1000 + i;
	g_mps_pids[149] = 4242;
	g_list_calls = 0;
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 4242, how, sizeof how), FOS_MPS_ON);
	assert_int_equal(g_list_calls, 2);
	fosd_nvml_close(n);
	assert_int_equal(fosd_nvml_mps(NULL, "GPU-00000000-fake", 4242, how, sizeof how), FOS_MPS_UNKNOWN);
	assert_string_equal(how, "no NVML");
	/* an NVML without the _v3 lists: the numbers still come, MPS is unknown */
	g_missing = "nvmlDeviceGetMPSComputeRunningProcesses_v3";
	n = fosd_nvml_open_resolved(resolve, NULL, "fake", msg, sizeof msg);
	assert_non_null(n);
	fosd_gpu_stat g[FOSD_MAX_GPUS];
	assert_int_equal(fosd_nvml_sample(n, g, FOSD_MAX_GPUS), 2);
	assert_int_equal(fosd_nvml_mps(n, "GPU-00000000-fake", 4242, how, sizeof how), FOS_MPS_UNKNOWN);
	assert_string_equal(how, "NVML has no _v3 process lists");
	fosd_nvml_close(n);
	g_missing = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample),
		cmocka_unit_test(test_failures),
		cmocka_unit_test(test_mps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
