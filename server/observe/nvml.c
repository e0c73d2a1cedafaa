/* nvml.c: the few NVML calls of nvml.h, resolved with dlsym from libnvidia-ml.so.1 (its C ABI:
 * nvmlReturn_t is an int, 0 success; a device is an opaque pointer; the structs below have NVML's
 * layout). Invariant: a fosd_nvml exists only with NVML initialized and every function pointer
 * resolved; NVML itself is thread-safe, and fosd calls it from the HTTP thread only. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_ret;
typedef void *nvml_dev;
typedef struct {
	unsigned int gpu, memory;
} nvml_util;
typedef struct {
	unsigned long long total, free, used;
} nvml_mem;
#define NVML_TEMPERATURE_GPU 0

struct fosd_nvml {
	void *dl; /* the library (NULL: functions of fosd_nvml_open_resolved's caller) */
	nvml_ret (*init)(void);
	nvml_ret (*shutdown)(void);
	const char *(*error_string)(nvml_ret);
	nvml_ret (*count)(unsigned int *);
	nvml_ret (*handle)(unsigned int, nvml_dev *);
	nvml_ret (*uuid)(nvml_dev, char *, unsigned int);
	nvml_ret (*name)(nvml_dev, char *, unsigned int);
	nvml_ret (*util)(nvml_dev, nvml_util *);
	nvml_ret (*mem)(nvml_dev, nvml_mem *);
	nvml_ret (*power)(nvml_dev, unsigned int *);
	nvml_ret (*temp)(nvml_dev, int, unsigned int *);
};

static void *dl_resolve(void *dl, const char *sym)
{
	return dlsym(dl, sym);
}

fosd_nvml *fosd_nvml_open_resolved(fosd_nvml_resolve resolve, void *ctx, const char *what, char *msg, size_t msgsz)
{
	fosd_nvml *n = calloc(1, sizeof *n);
	if (!n) {
		snprintf(msg, msgsz, "out of memory");
		return NULL;
	}
	struct {
		void **fn;
		const char *sym;
	} syms[] = {
		{(void **)&n->init, "nvmlInit_v2"},
		{(void **)&n->shutdown, "nvmlShutdown"},
		{(void **)&n->error_string, "nvmlErrorString"},
		{(void **)&n->count, "nvmlDeviceGetCount_v2"},
		{(void **)&n->handle, "nvmlDeviceGetHandleByIndex_v2"},
		{(void **)&n->uuid, "nvmlDeviceGetUUID"},
		{(void **)&n->name, "nvmlDeviceGetName"},
		{(void **)&n->util, "nvmlDeviceGetUtilizationRates"},
		{(void **)&n->mem, "nvmlDeviceGetMemoryInfo"},
		{(void **)&n->power, "nvmlDeviceGetPowerUsage"},
		{(void **)&n->temp, "nvmlDeviceGetTemperature"},
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *f = resolve(ctx, syms[i].sym);
		if (!f) {
			snprintf(msg, msgsz, "%s has no %s", what, syms[i].sym);
			free(n);
			return NULL;
		}
		memcpy(syms[i].fn, &f, sizeof f); /* a function's address, as dlsym gives it */
	}
	nvml_ret r = n->init();
	if (r) {
		const char *e = n->error_string(r);
		snprintf(msg, msgsz, "nvmlInit: %s (%d)", e ? e : "error", r);
		free(n);
		return NULL;
	}
	return n;
}

fosd_nvml *fosd_nvml_open(const char *lib, char *msg, size_t msgsz)
{
	const char *path = lib ? lib : "libnvidia-ml.so.1";
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		snprintf(msg, msgsz, "cannot load %s: %s", path, e ? e : "unknown error");
		return NULL;
	}
	fosd_nvml *n = fosd_nvml_open_resolved(dl_resolve, dl, path, msg, msgsz);
	if (!n) {
		dlclose(dl);
		return NULL;
	}
	n->dl = dl;
	return n;
}

int fosd_nvml_sample(fosd_nvml *n, fosd_gpu_stat *out, int max)
{
	unsigned int count = 0;
	if (!n || n->count(&count))
		return 0;
	int k = 0;
	for (unsigned int i = 0; i < count && k < max; i++) {
		nvml_dev d = NULL;
		if (n->handle(i, &d))
			continue;
		fosd_gpu_stat *g = &out[k++];
		memset(g, 0, sizeof *g);
		g->index = i;
		if (n->uuid(d, g->uuid, sizeof g->uuid))
			g->uuid[0] = 0;
		if (n->name(d, g->name, sizeof g->name))
			g->name[0] = 0;
		g->uuid[sizeof g->uuid - 1] = g->name[sizeof g->name - 1] = 0;
		nvml_util u;
		if (!n->util(d, &u)) {
			g->has_util = 1;
			g->util_gpu = u.gpu;
			g->util_mem = u.memory;
		}
		nvml_mem m;
		if (!n->mem(d, &m)) {
			g->has_mem = 1;
			g->mem_used = m.used;
			g->mem_total = m.total;
		}
		g->has_power = !n->power(d, &g->power_mw);
		g->has_temp = !n->temp(d, NVML_TEMPERATURE_GPU, &g->temp_c);
	}
	return k;
}

void fosd_nvml_close(fosd_nvml *n)
{
	if (!n)
		return;
	n->shutdown();
	if (n->dl)
		dlclose(n->dl);
	free(n);
}
