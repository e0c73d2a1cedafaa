/* test_observe_nvml.c: the GPU numbers of /metrics (server/observe/nvml.c) over a fake NVML (the
 * functions below, handed over by name as dlsym would): two GPUs read with their UUID, name,
 * utilization, memory, power and temperature, a number the GPU does not support left out (its
 * has_ flag 0), a device whose handle fails skipped; nvmlInit failing or a missing function is a
 * NULL handle with the reason, never a crash; a library that is absent (as on a CPU host) or is
 * not NVML (libm) likewise; fosd_nvml_sample and fosd_nvml_close take NULL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample),
		cmocka_unit_test(test_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
