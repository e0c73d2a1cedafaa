/* backend_open.c: picks a backend by name ("cpu", "cuda", "auto"), and the CUDA constructor's
 * fallback for builds without nvcc. */
#include "backend.h"

#include <string.h>

#ifndef FOS_HAVE_CUDA
fos_backend *fos_backend_cuda(int device, fos_err *err)
{
	(void)device;
	fos_seterr(err, FOS_EUNSUPPORTED, "this build has no CUDA backend (built without nvcc)");
	return 0;
}
#endif

fos_backend *fos_backend_open(const char *name, fos_err *err)
{
	if (!name || !strcmp(name, "auto")) {
		fos_err e2;
		fos_backend *be = fos_backend_cuda(0, &e2);
		return be ? be : fos_backend_cpu(0, err);
	}
	if (!strcmp(name, "cpu"))
		return fos_backend_cpu(0, err);
	if (!strcmp(name, "cuda"))
		return fos_backend_cuda(0, err);
	fos_seterr(err, FOS_EINVAL, "unknown backend '%s' (cpu, cuda or auto)", name);
	return 0;
}
