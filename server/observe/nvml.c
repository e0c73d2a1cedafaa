/* nvml.c: the few NVML calls of nvml.h, resolved with dlsym from libnvidia-ml.so.1 (its C ABI:
 * nvmlReturn_t is an int, 0 success; a device is an opaque pointer; the structs below have NVML's
 * layout). Invariant: a fosd_nvml exists only with NVML initialized and every function pointer
 * resolved but the optional ones (the process lists of fosd_nvml_mps: NULL where NVML lacks them);
 * NVML itself is thread-safe, and fosd calls it from the HTTP thread and, at start, mps.c. */
#include "nvml.h"
#include "fos_wire_enums.h"

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
/* nvmlProcessInfo_t of the _v3 process lists */
typedef struct {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
} nvml_proc;
#define NVML_TEMPERATURE_GPU 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
typedef nvml_ret (*nvml_proc_list)(nvml_dev, unsigned int *, nvml_proc *);

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
	/* optional (NULL: this NVML lacks it) */
	nvml_ret (*by_uuid)(const char *, nvml_dev *);
	nvml_proc_list mps_procs, compute_procs;
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
	struct {
		void **fn;
		const char *sym;
	} opt[] = {
		{(void **)&n->by_uuid, "nvmlDeviceGetHandleByUUID"},
		{(void **)&n->mps_procs, "nvmlDeviceGetMPSComputeRunningProcesses_v3"},
		{(void **)&n->compute_procs, "nvmlDeviceGetComputeRunningProcesses_v3"},
	};
	for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
		void *f = resolve(ctx, opt[i].sym);
		memcpy(opt[i].fn, &f, sizeof f);
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

/* 1 when the process list fn of d names pid, 0 when it does not, -1 when it cannot be read. */
static int lists_pid(nvml_proc_list fn, nvml_dev d, unsigned pid)
{
	unsigned int cap = 64;
	for (int tries = 0; tries < 4; tries++) { /* the list may grow between two calls */
		nvml_proc *p = calloc(cap, sizeof *p);
		if (!p)
			return -1;
		unsigned int count = cap;
		nvml_ret r = fn(d, &count, p);
		int found = r ? -1 : 0;
		for (unsigned int i = 0; !r && i < count && i < cap; i++)
			found |= p[i].pid == pid;
		free(p);
		if (r != NVML_ERROR_INSUFFICIENT_SIZE)
			return found;
		cap = count > cap ? count + 16 : cap * 2;
	}
	return -1;
}

int fosd_nvml_mps(fosd_nvml *n, const char *uuid, unsigned pid, char *how, size_t howsz)
{
	char scratch[8];
	if (!how) {
		how = scratch;
		howsz = sizeof scratch;
	}
	nvml_dev d = NULL;
	if (!n || !n->by_uuid || !n->mps_procs || !n->compute_procs) {
		snprintf(how, howsz, "%s", n ? "NVML has no _v3 process lists" : "no NVML");
		return FOS_MPS_UNKNOWN;
	}
	nvml_ret r = n->by_uuid(uuid, &d);
	if (r) {
		const char *e = n->error_string(r);
		snprintf(how, howsz, "NVML does not find %s: %s (%d)", uuid, e ? e : "error", r);
		return FOS_MPS_UNKNOWN;
	}
	int mps = lists_pid(n->mps_procs, d, pid);
	int plain = mps == 1 ? 0 : lists_pid(n->compute_procs, d, pid);
	if (mps == 1) {
		snprintf(how, howsz, "NVML lists pid %u among the MPS clients of %s", pid, uuid);
		return FOS_MPS_ON;
	}
	if (plain == 1) {
		snprintf(how, howsz, "NVML lists pid %u among the compute processes of %s, not its MPS clients", pid,
			 uuid);
		return FOS_MPS_OFF;
	}
	if (mps < 0 || plain < 0)
		snprintf(how, howsz, "NVML cannot list the processes of %s", uuid);
	else
		snprintf(how, howsz, "NVML lists pid %u on %s neither with nor without MPS (another PID namespace?)",
			 pid, uuid);
	return FOS_MPS_UNKNOWN;
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
