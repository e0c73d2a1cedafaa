/* support_gpu.h: what the GPU suites (tests/gpu_*.c) share: the CPU reference and the CUDA
 * backend, opened once per suite. Without a usable GPU, g_gpu is NULL and every test that needs it
 * skips (NEED_GPU), so the suites pass cleanly on machines without one; tests that only need the
 * CPU still run. */
#ifndef FOS_SUPPORT_GPU_H
#define FOS_SUPPORT_GPU_H

#include "backend.h"

extern fos_backend *g_cpu, *g_gpu;

/* Group setup: opens the CPU backend (-1 if it cannot be), then CUDA device 0 (a line says which
 * device, or why the suite skips). name prefixes the line. */
int tgpu_open(const char *name);
/* Group teardown: destroys both. */
int tgpu_close(void **state);

#define NEED_GPU()                                                                                             \
	do {                                                                                                   \
		if (!g_gpu)                                                                                    \
			skip();                                                                                \
	} while (0)

#endif
