/* support_gpu.c: the backends the GPU suites share (support_gpu.h). */
#include "support_gpu.h"

#include <stdio.h>

fos_backend *g_cpu, *g_gpu;

int tgpu_open(const char *name)
{
	fos_err e;
	g_cpu = fos_backend_cpu(0, &e);
	if (!g_cpu)
		return -1;
	g_gpu = fos_backend_cuda(0, &e);
	if (!g_gpu) {
		printf("%s: no CUDA backend (%s): skipping\n", name, e.msg);
		return 0;
	}
	printf("%s: %s\n", name, g_gpu->device);
	return 0;
}

int tgpu_close(void **state)
{
	(void)state;
	if (g_gpu)
		g_gpu->destroy(g_gpu);
	if (g_cpu)
		g_cpu->destroy(g_cpu);
	g_gpu = g_cpu = NULL;
	return 0;
}
