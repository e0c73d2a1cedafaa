/* mps.c: is fosd an MPS client (mps.h)? The evidence, most direct first:
 *  1. the CUDA driver's device attribute cudaDevAttrMpsEnabled (133; drivers of CUDA 12.x on):
 *     "contexts created on this device will be shared via MPS", asked in fosd's own process after
 *     its backend made its context, so it answers for fosd itself and holds in any PID namespace
 *     (a container);
 *  2. where the driver does not know the attribute (an older driver answers cudaErrorInvalidValue):
 *     NVML's process lists of the GPU (nvml.h fosd_nvml_mps), fosd's pid among the MPS clients or
 *     among the plain compute processes; a pid in neither list (NVML lists the host's pids) is
 *     unknown, never off;
 *  3. else unknown. The environment is no evidence: CUDA_MPS_PIPE_DIRECTORY names where a daemon
 *     would answer, not that one did (without it CUDA looks in /tmp/nvidia-mps).
 * Builds without CUDA have only cpu devices (not applicable). */
#include "mps.h"
#include "log.h"
#include "fos.pb-c.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef FOS_HAVE_CUDA
/* The CUDA runtime calls used here, with their C ABI (cudaError_t and cudaDeviceAttr are int-sized
 * enums), so that server/ needs no CUDA include path; libcudart is linked in CUDA builds. */
extern int cudaDeviceGetAttribute(int *value, int attr, int device);
extern int cudaGetLastError(void);
extern const char *cudaGetErrorString(int error);
#define FOSD_CUDA_DEV_ATTR_MPS_ENABLED 133 /* cudaDevAttrMpsEnabled */
#endif

_Static_assert((int)FOS__HEALTH_RESULT__MPS__MPS_UNKNOWN == (int)FOS_MPS_UNKNOWN &&
		       (int)FOS__HEALTH_RESULT__MPS__MPS_NOT_APPLICABLE == (int)FOS_MPS_NOT_APPLICABLE &&
		       (int)FOS__HEALTH_RESULT__MPS__MPS_OFF == (int)FOS_MPS_OFF &&
		       (int)FOS__HEALTH_RESULT__MPS__MPS_ON == (int)FOS_MPS_ON,
	       "HealthResult.Mps and fos_mps_state are one numbering");

/* "GPU-" and the 16 bytes as 8-4-4-4-12 lowercase hex digits, as NVML and nvidia-smi write it. */
static void uuid_str(const unsigned char u[16], char out[41])
{
	char *p = out + sprintf(out, "GPU-");
	for (int i = 0; i < 16; i++)
		p += sprintf(p, "%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
}

int fosd_mps_device(const fos_backend *be, int ordinal, fosd_nvml **nvml, char *how, size_t howsz)
{
	if (strcmp(be->name, "cuda")) {
		snprintf(how, howsz, "the %s backend runs no GPU work", be->name);
		return FOS_MPS_NOT_APPLICABLE;
	}
	char attr[160] = "";
#ifdef FOS_HAVE_CUDA
	int v = 0, e = cudaDeviceGetAttribute(&v, FOSD_CUDA_DEV_ATTR_MPS_ENABLED, ordinal);
	if (!e) {
		snprintf(how, howsz, "CUDA: contexts on this device are %sshared through MPS", v ? "" : "not ");
		return v ? FOS_MPS_ON : FOS_MPS_OFF;
	}
	cudaGetLastError(); /* not sticky; clear it */
	snprintf(attr, sizeof attr, "CUDA has no cudaDevAttrMpsEnabled here (%s); ", cudaGetErrorString(e));
#else
	(void)ordinal;
#endif
	if (!be->has_uuid) {
		snprintf(how, howsz, "%sno GPU UUID to ask NVML about", attr);
		return FOS_MPS_UNKNOWN;
	}
	char why[256] = "", uuid[41];
	if (!*nvml)
		*nvml = fosd_nvml_open(NULL, why, sizeof why);
	uuid_str(be->uuid, uuid);
	char evidence[384];
	int st = *nvml ? fosd_nvml_mps(*nvml, uuid, (unsigned)getpid(), evidence, sizeof evidence) : FOS_MPS_UNKNOWN;
	snprintf(how, howsz, "%s%s", attr, *nvml ? evidence : why);
	return st;
}

int fosd_mps_combine(const int *states, int n)
{
	int gpus = 0, on = 0, off = 0;
	for (int i = 0; i < n; i++) {
		gpus += states[i] != FOS_MPS_NOT_APPLICABLE;
		on += states[i] == FOS_MPS_ON;
		off += states[i] == FOS_MPS_OFF;
	}
	if (!gpus)
		return FOS_MPS_NOT_APPLICABLE;
	if (off)
		return FOS_MPS_OFF;
	return on == gpus ? FOS_MPS_ON : FOS_MPS_UNKNOWN;
}

const char *fosd_mps_name(int state)
{
	switch (state) {
	case FOS_MPS_ON: return "on";
	case FOS_MPS_OFF: return "off";
	case FOS_MPS_NOT_APPLICABLE: return "not applicable";
	default: return "unknown";
	}
}
