/* support_standin.c: the stand-in GPU fosd of the stream-ordered tests (support_standin.h). The
 * backend's UUID is the fake driver's ordinal 0, so libfos sends device tensors to it. */
#include "support_standin.h"
#include "support_fake_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chan.h"
#include "fdlimit.h"
#include "util.h"

/* The hooks every stand-in has: interprocess events that are tokens, already complete; reads
 * from "device" memory that is host memory. */
static int g_ev_token;
static int ev_open(fos_backend *be, const unsigned char h[64], void **ev, fos_err *e)
{
	(void)be, (void)h, (void)e;
	*ev = &g_ev_token;
	return FOS_OK;
}

static void ev_close(fos_backend *be, void *ev)
{
	(void)be, (void)ev;
}

static int ev_sync(fos_backend *be, void *ev, fos_err *e)
{
	(void)be, (void)ev, (void)e;
	return FOS_OK;
}

static int read_sync(fos_backend *be, void *dst, const void *src, size_t n, fos_err *e)
{
	(void)be, (void)e;
	memcpy(dst, src, n);
	return FOS_OK;
}

static void (*g_hooks)(fos_backend *be);

/* A stand-in backend: the cpu one with the common hooks, then the test's. */
static fos_backend *standin_backend(fos_backend *cpu, fos_err *e)
{
	fos_backend *be = fos_backend_cpu(2, e);
	if (!be)
		return NULL;
	if (cpu)
		*cpu = *be;
	be->ipc_event_open = ev_open;
	be->ipc_event_close = ev_close;
	be->ipc_event_sync = ev_sync;
	be->read_sync = read_sync;
	g_hooks(be);
	f_uuid(be->uuid, 0); /* the fake driver's GPU */
	be->has_uuid = 1;
	return be;
}

static fos_backend *lane_open(fosd_exec *x, fosd_device *d, int i, fos_err *e)
{
	(void)x, (void)d, (void)i;
	return standin_backend(NULL, e);
}

int standin_start_lanes(fosd_server *srv, fosd_config *cfg, const char *tag, char *url, size_t urlsz,
			fos_backend *cpu, void (*hooks)(fos_backend *be), int lanes)
{
	char msg[1024], sizes[512], nl[16];
	snprintf(url, urlsz, "ipc:///tmp/fos-%s-%d.sock", tag, (int)getpid());
	snprintf(nl, sizeof nl, "%d", lanes);
	char *argv[] = {"fosd", "--backend", "cpu", "--listen", url, "--streams", nl, "--workers", lanes > 2 ? nl : "2", NULL};
	fosd_config_defaults(cfg);
	if (fosd_config_parse_args(cfg, 9, argv, msg, sizeof msg) || fosd_config_finish(cfg, msg, sizeof msg)) {
		fprintf(stderr, "config: %s\n", msg);
		return -1;
	}
	fosd_config_size_auto(cfg, 0, fosd_host_memory_bytes(), sizes, sizeof sizes);
	fos_err e;
	memset(&e, 0, sizeof e);
	g_hooks = hooks;
	fos_backend *be = standin_backend(cpu, &e);
	if (!be) {
		fprintf(stderr, "cpu backend: %s\n", e.msg);
		return -1;
	}
	fos_backend *bes[1] = {be};
	int ids[1] = {0};
	if (fosd_server_init(srv, cfg, bes, ids, 1, msg, sizeof msg) || fosd_fdlimit_setup(srv, msg, sizeof msg)) {
		fprintf(stderr, "fosd: %s\n", msg);
		return -1;
	}
	fosd_srv_exec(srv)->lane_open = lane_open;
	if (fosd_executor_start(fosd_srv_exec(srv), msg, sizeof msg) ||
	    fosd_transport_start(fosd_srv_tp(srv), msg, sizeof msg)) {
		fprintf(stderr, "fosd: %s\n", msg);
		return -1;
	}
	return 0;
}

int standin_start(fosd_server *srv, fosd_config *cfg, const char *tag, char *url, size_t urlsz, fos_backend *cpu,
		  void (*hooks)(fos_backend *be))
{
	return standin_start_lanes(srv, cfg, tag, url, urlsz, cpu, hooks, 1);
}

void standin_stop(fosd_server *srv, fosd_config *cfg)
{
	fosd_chans_stop_all(fosd_srv_tp(srv));
	fosd_executor_stop(fosd_srv_exec(srv));
	fosd_transport_close(fosd_srv_tp(srv));
	fosd_server_destroy(srv);
	fosd_config_free(cfg);
	fosc_cuda_override(NULL);
}

void *standin_dev_buf(int slot, size_t n, const void *init)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n)) {
		fprintf(stderr, "standin_dev_buf: out of memory for %zu bytes\n", n);
		abort();
	}
	if (init)
		memcpy(p, init, n);
	else
		memset(p, 0, n);
	fake_alloc_at(slot, (uint64_t)(uintptr_t)p, n, 100 + (uint64_t)slot);
	return p;
}
