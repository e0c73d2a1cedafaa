/* nvml.h: GPU utilization, memory, power and temperature for /metrics, and whether a process runs
 * under MPS on a GPU (mps.c's fallback), read through NVML (libnvidia-ml.so.1, the NVIDIA driver's
 * management library) loaded with dlopen at run time, so fosd neither links nor needs it: on a host
 * without the driver (a CPU host) fosd_nvml_open returns NULL and the page has no GPU series. */
#ifndef FOSD_NVML_H
#define FOSD_NVML_H

#include <stddef.h>
#include <stdint.h>

#define FOSD_MAX_GPUS 16

/* One GPU's numbers; a has_* flag is 0 where NVML does not report that number for the GPU. */
typedef struct fosd_gpu_stat {
	unsigned index;          /* NVML's index */
	char uuid[96], name[96]; /* "GPU-..." and the product name ("" when unknown) */
	int has_util, has_mem, has_power, has_temp;
	unsigned util_gpu, util_mem;      /* percent of the last sample period busy: kernels, memory */
	uint64_t mem_used, mem_total;     /* bytes */
	unsigned power_mw;                /* milliwatts */
	unsigned temp_c;                  /* degrees Celsius, the GPU die */
} fosd_gpu_stat;

typedef struct fosd_nvml fosd_nvml;

/* Loads lib (NULL: "libnvidia-ml.so.1") and initializes NVML; NULL when either fails (why, in
 * msg: the library is absent, or the driver refused), never an error of fosd's. */
fosd_nvml *fosd_nvml_open(const char *lib, char *msg, size_t msgsz);
/* fosd_nvml_open with the functions from resolve(ctx, "nvmlInit_v2") and so on instead of a
 * loaded library (what names them in messages: e.g. the library's path); NULL when one is
 * missing or nvmlInit_v2 fails, why in msg. */
typedef void *(*fosd_nvml_resolve)(void *ctx, const char *sym);
fosd_nvml *fosd_nvml_open_resolved(fosd_nvml_resolve resolve, void *ctx, const char *what, char *msg, size_t msgsz);
/* The numbers of every GPU NVML sees (at most max): their count. */
int fosd_nvml_sample(fosd_nvml *n, fosd_gpu_stat *out, int max);
/* Whether process pid runs under MPS on the GPU whose UUID is uuid ("GPU-" and 32 hex digits, as
 * NVML writes it), from NVML's process lists of that GPU: FOS_MPS_ON (fos_wire_enums.h) when
 * nvmlDeviceGetMPSComputeRunningProcesses_v3 lists pid, FOS_MPS_OFF when only
 * nvmlDeviceGetComputeRunningProcesses_v3 does, FOS_MPS_UNKNOWN when neither does (NVML lists pids
 * of the host's PID namespace: from a container's, fosd's own is not among them), when NVML does
 * not know the GPU or lacks those calls (an older driver), or for n NULL. how (may be NULL) gets
 * the evidence in words. */
int fosd_nvml_mps(fosd_nvml *n, const char *uuid, unsigned pid, char *how, size_t howsz);
/* Shuts NVML down and unloads it. NULL is fine. */
void fosd_nvml_close(fosd_nvml *n);

#endif
