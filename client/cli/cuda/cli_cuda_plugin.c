/* cli_cuda_plugin.c: fos's fos_backend_cuda in a CUDA build. fos does not link cuBLASLt or the
 * CUDA runtime (loading them costs every fos run about a second and 200 MB); the CUDA backend is
 * the plugin libfos-cuda.so (the Makefile), opened here the first time --local asks for the cuda
 * (or auto) backend and kept open for the life of the process.
 *
 * Where the plugin is looked for, first match wins: $FOS_CUDA_PLUGIN (a path); next to the fos
 * executable (the build directory); EXE_DIR/../lib/fos/ (an install: BINDIR/fos,
 * INSTALL_LIBDIR/fos/libfos-cuda.so). Before any of it, the NVIDIA driver (libcuda.so.1) must be
 * loadable and a GPU device node visible: without them the message says so in plain words, as
 * fosd's does, rather than the CUDA runtime's "CUDA driver version is insufficient". Linked only
 * into fos, never into libfoscli.a (fosd and the tests link the real fos_backend_cuda). */
#include "backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef fos_backend *(*cli_cuda_ctor)(int device, fos_err *err);

static pthread_mutex_t cli_cuda_mu = PTHREAD_MUTEX_INITIALIZER;
static cli_cuda_ctor cli_cuda_open_fn;

/* The directory of the running executable into dir (no trailing slash); 0, or -1 when unknown. */
static int cli_exe_dir(char *dir, size_t cap)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;
	return snprintf(dir, cap, "%s", exe) < (int)cap ? 0 : -1;
}

/* Opens the plugin; its constructor, or NULL with err set (what was tried and why it failed). */
static cli_cuda_ctor cli_cuda_load(fos_err *err)
{
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!drv) {
		fos_seterr(err, FOS_EUNSUPPORTED,
			   "no usable GPU: the NVIDIA driver (libcuda.so.1) is not installed or not visible to fos");
		return NULL;
	}
	dlclose(drv);
	if (access("/dev/nvidiactl", F_OK)) {
		fos_seterr(err, FOS_EUNSUPPORTED,
			   "no usable GPU: the NVIDIA driver is installed but no GPU device (/dev/nvidia*) is visible "
			   "to fos");
		return NULL;
	}
	char paths[3][PATH_MAX + 32];
	int np = 0;
	const char *env = getenv("FOS_CUDA_PLUGIN");
	if (env && env[0])
		snprintf(paths[np++], sizeof paths[0], "%s", env);
	char dir[PATH_MAX];
	if (!cli_exe_dir(dir, sizeof dir)) {
		snprintf(paths[np++], sizeof paths[0], "%s/libfos-cuda.so", dir);
		snprintf(paths[np++], sizeof paths[0], "%s/../lib/fos/libfos-cuda.so", dir);
	}
	char tried[768] = "";
	size_t used = 0;
	for (int i = 0; i < np; i++) {
		void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
		const char *why = h ? "no fos_backend_cuda in it" : dlerror();
		cli_cuda_ctor fn = h ? (cli_cuda_ctor)dlsym(h, "fos_backend_cuda") : NULL;
		if (fn)
			return fn; /* kept open: the backend's code lives in it */
		if (h)
			dlclose(h);
		int w = snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", why ? why : paths[i]);
		if (w > 0 && (size_t)w < sizeof tried - used)
			used += (size_t)w;
	}
	fos_seterr(err, FOS_EUNSUPPORTED,
		   "cannot load fos's CUDA backend (libfos-cuda.so, built and installed beside fos; "
		   "$FOS_CUDA_PLUGIN names another): %s",
		   np ? tried : "the executable's directory is unknown");
	return NULL;
}

fos_backend *fos_backend_cuda(int device, fos_err *err)
{
	pthread_mutex_lock(&cli_cuda_mu);
	if (!cli_cuda_open_fn)
		cli_cuda_open_fn = cli_cuda_load(err);
	cli_cuda_ctor fn = cli_cuda_open_fn;
	pthread_mutex_unlock(&cli_cuda_mu);
	return fn ? fn(device, err) : NULL;
}
