/* fosd_main.c: the fosd program: read the configuration, open the backend (and say which one and
 * on what device, or in plain words why auto fell back to the cpu), size the cache, contexts and
 * message pool left at "auto" from that device's memory (or the host's), start the executor, the
 * listeners and the HTTP metrics endpoint when asked, tell systemd it is ready (sdnotify.h), run
 * the control loop until a drain finishes, then tear down. Exit status 0 after a clean drain, 1
 * on a startup error, an abandoned drain or a backend that failed for good, 2 on a usage error. */
#include "server.h"
#include "alloc_tune.h"
#include "fdlimit.h"
#include "http_metrics.h"
#include "msg_pool.h"
#include "auth.h"
#include "config_report.h"
#include "log.h"
#include "mps.h"
#include "sdnotify.h"
#include "weights_repo.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef FOS_HAVE_CUDA
/* The CUDA runtime calls used here, with their C ABI (cudaError_t is an int-sized enum), so that
 * server/ needs no CUDA include path; libcudart is linked in CUDA builds. */
extern int cudaSetDevice(int device);
extern int cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
extern int cudaGetLastError(void);
extern int cudaGetDeviceCount(int *count);
#endif

/* Why the cuda backend could not open, in words an operator acts on. cuda_msg is the backend's
 * own message (the CUDA runtime's, e.g. "CUDA driver version is insufficient for CUDA runtime
 * version" when no driver is installed at all). */
static void no_gpu_reason(const char *cuda_msg, char *out, size_t outsz)
{
#ifdef FOS_HAVE_CUDA
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!drv)
		snprintf(out, outsz, "no usable GPU: the NVIDIA driver (libcuda.so.1) is not installed or not "
				     "visible to fosd");
	else if (access("/dev/nvidiactl", F_OK))
		snprintf(out, outsz, "no usable GPU: the NVIDIA driver is installed but no GPU device "
				     "(/dev/nvidia*) is visible to fosd");
	else
		snprintf(out, outsz, "no usable GPU (%s)", cuda_msg);
	if (drv)
		dlclose(drv);
#else
	(void)cuda_msg;
	snprintf(out, outsz, "this fosd was built without CUDA");
#endif
}

static fos_backend *open_backend(const fosd_config *cfg, int device, fos_err *err)
{
	if (!strcmp(cfg->backend, "cpu"))
		return fos_backend_cpu(cfg->threads, err);
	if (!strcmp(cfg->backend, "cuda"))
		return fos_backend_cuda(device, err);
	fos_err cerr;
	fos_backend *be = fos_backend_cuda(device, &cerr);
	if (be)
		return be;
	char why[512];
	no_gpu_reason(cerr.msg, why, sizeof why);
	fosd_info("backend auto: %s; using the cpu backend", why);
	return fos_backend_cpu(cfg->threads, err);
}

/* The memory of the device the backend runs on; 0 for the cpu backend (or when unknown). */
static uint64_t device_memory_bytes(const fos_backend *be, int device)
{
#ifdef FOS_HAVE_CUDA
	if (!strcmp(be->name, "cuda")) {
		size_t free_b = 0, total = 0;
		if (!cudaSetDevice(device) && !cudaMemGetInfo(&free_b, &total))
			return total;
		cudaGetLastError();
	}
#else
	(void)be;
	(void)device;
#endif
	return 0;
}

/* The devices to serve (--devices; else the one --device): ordinals in ids, their number
 * returned; "all" is every GPU the cuda backend sees (cuda) or one stand-in (cpu). be0 is open on
 * ids[0] already. -1 with msg on an error. */
static int device_list(const fosd_config *cfg, const fos_backend *be0, int *ids, char *msg, size_t msgsz)
{
	int n = 1;
	ids[0] = cfg->device;
	if (!cfg->devices)
		return 1;
	int all = fosd_config_devices(cfg->devices, ids, &n, msg, msgsz);
	if (all < 0)
		return -1;
	if (!all)
		return n;
	ids[0] = 0;
	n = 1;
#ifdef FOS_HAVE_CUDA
	int count = 0;
	if (!strcmp(be0->name, "cuda") && !cudaGetDeviceCount(&count) && count > 1) {
		n = count < FOSD_MAX_DEVICES ? count : FOSD_MAX_DEVICES;
		for (int i = 0; i < n; i++)
			ids[i] = i;
	}
	cudaGetLastError();
#else
	(void)be0;
#endif
	return n;
}

/* Sets srv->mps from its devices (mps.h) and logs each device's state with the evidence (and, when
 * off, what it costs and how to turn MPS on). */
static void mps_detect(fosd_server *srv)
{
	int st[FOSD_MAX_DEVICES];
	fosd_nvml *nvml = NULL;
	for (int i = 0; i < srv->n_devs; i++) {
		char how[768];
		st[i] = fosd_mps_device(srv->devs[i].be, srv->devs[i].ordinal, &nvml, how, sizeof how);
		if (st[i] != FOS_MPS_NOT_APPLICABLE)
			fosd_info("mps: %s on %s (%s)", fosd_mps_name(st[i]), srv->devs[i].name, how);
	}
	fosd_nvml_close(nvml);
	srv->mps = fosd_mps_combine(st, srv->n_devs);
	if (srv->mps == FOS_MPS_OFF)
		fosd_info("mps: off: trainers on this GPU hand work to fosd through a switch of CUDA contexts, "
			  "~0.14 ms of GPU time each (bench/BENCHMARKS.md session 7); start an MPS control daemon "
			  "before fosd and the trainers (README.md \"Sharing a GPU with trainers: MPS\")");
}

int main(int argc, char **argv)
{
	if (fosd_check_config_wanted(argc, argv)) /* --check-config: parse, open nothing (config_report.c) */
		return fosd_check_config_main(argc, argv);
	fosd_config cfg;
	char msg[1024];
	fosd_config_defaults(&cfg);
	int rc = fosd_config_parse_args(&cfg, argc, argv, msg, sizeof msg);
	if (rc > 0) {
		fosd_config_free(&cfg);
		return 0;
	}
	if (rc < 0 || fosd_config_finish(&cfg, msg, sizeof msg)) {
		fprintf(stderr, "fosd: %s\n", msg);
		fosd_config_free(&cfg);
		return 2;
	}
	fosd_log_set_level(cfg.log_level);
	/* SIGTERM/SIGINT wait (pending) until the control loop takes them, so that one arriving while
	 * fosd starts, even after it listens, is a drain; blocked before any thread starts, every
	 * thread inherits the mask and only the loop's thread unblocks them (control.c) */
	fosd_control_block_signals();
	fosd_sd_init(); /* before any thread starts */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN); /* until the control loop reloads on it (reload.c) */
	fosd_tune_malloc(); /* a warm heap for large messages (alloc_tune.c) */
	if (cfg.config_path)
		fosd_info("configuration from %s", cfg.config_path);
	fosd_config_log_report(&cfg); /* which source won; settings that do nothing */
	fosd_tenants *tenants = NULL;
	if (fosd_auth_setup(&cfg, &tenants, msg, sizeof msg)) {
		fosd_error("tokens: %s", msg);
		fosd_config_free(&cfg);
		return 2;
	}

	fos_err err;
	memset(&err, 0, sizeof err);
	int ids[FOSD_MAX_DEVICES];
	if (cfg.devices && fosd_config_devices(cfg.devices, ids, &(int){0}, msg, sizeof msg) == 0)
		cfg.device = ids[0]; /* the first of the list opens first */
	else if (cfg.devices)
		cfg.device = 0;
	fos_backend *be = open_backend(&cfg, cfg.device, &err);
	if (!be && !strcmp(cfg.backend, "cuda") && err.rc == FOS_EUNSUPPORTED) {
		char why[512];
		no_gpu_reason(err.msg, why, sizeof why);
		fosd_error("cannot open the cuda backend: %s (CUDA: %s); --backend auto or cpu runs on the CPU", why,
			   err.msg);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	if (!be) {
		fosd_error("cannot open the %s backend: %s", cfg.backend, err.msg);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	fos_backend *bes[FOSD_MAX_DEVICES] = {be};
	int nd = device_list(&cfg, be, ids, msg, sizeof msg);
	int cpu = strcmp(be->name, "cuda") != 0;
	for (int i = 1; i < nd; i++) { /* the others, on the same backend as the first */
		bes[i] = cpu ? fos_backend_cpu(cfg.threads, &err) : fos_backend_cuda(ids[i], &err);
		if (!bes[i]) {
			fosd_error("cannot open the %s backend on device %d: %s", be->name, ids[i], err.msg);
			nd = -i - 1;
			break;
		}
	}
	if (nd < 0) {
		for (int i = 0; i < FOSD_MAX_DEVICES && bes[i]; i++)
			bes[i]->destroy(bes[i]);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	if (nd == 1)
		fosd_info("backend %s on %s", be->name, be->device);
	for (int i = 0; nd > 1 && i < nd; i++)
		fosd_info("backend %s on %s: device %d (%s %d)", bes[i]->name, bes[i]->device, i, cpu ? "stand-in" : "ordinal",
			  ids[i]);
	char sizes[512];
	/* the budgets are per device: from the first GPU's memory, or the host's shared by cpu stand-ins */
	fosd_config_size_auto(&cfg, device_memory_bytes(be, cfg.device), fosd_host_memory_bytes() / (uint64_t)(cpu ? nd : 1),
			      sizes, sizeof sizes);
	fosd_info("memory: %s%s", sizes, nd > 1 ? " (each device)" : "");
	fosd_info("limits: cache %llu bytes, contexts %llu bytes (ttl %llu ms), messages %llu bytes, %d workers, "
		  "%d concurrent requests",
		  (unsigned long long)cfg.cache_bytes, (unsigned long long)cfg.context_bytes,
		  (unsigned long long)cfg.context_ttl_ms, (unsigned long long)cfg.max_message_bytes, cfg.workers,
		  cfg.concurrency);

	static fosd_server srv;
	int code = 1;
	if (fosd_server_init(&srv, &cfg, bes, ids, nd, msg, sizeof msg)) {
		fosd_error("%s", msg);
		fosd_server_destroy(&srv);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	srv.tenants = tenants;
	mps_detect(&srv); /* Health's mps, /metrics' fosd_mps */
	if (cfg.weights_dir && fosd_weights_repo_load(&srv, cfg.weights_dir, msg, sizeof msg)) { /* before serving */
		fosd_error("%s", msg);
		fosd_server_destroy(&srv);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	int stop = fosd_control_stop_pending();
	if (stop) { /* nothing accepted yet: nothing to drain */
		fosd_info("%s during the start: stopping before serving", stop == SIGINT ? "SIGINT" : "SIGTERM");
		fosd_server_destroy(&srv);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 0;
	}
	fosd_info("message pool: bodies from %zu KiB reused, %llu bytes kept free, %s", FOSD_MSGPOOL_MIN >> 10,
		  (unsigned long long)cfg.message_pool_bytes,
		  srv.regions.pin ? "pinned for device DMA" : "not pinned (no device)");
	fosd_http_metrics *http = NULL; /* GET /metrics and /healthz (metrics_listen) */
	if (fosd_fdlimit_setup(&srv, msg, sizeof msg) || /* the caps below (fdlimit.h) */
	    fosd_executor_start(fosd_srv_exec(&srv), msg, sizeof msg) || fosd_transport_start(fosd_srv_tp(&srv), msg, sizeof msg) ||
	    (cfg.metrics_listen && fosd_http_metrics_start(fosd_srv_tp(&srv), cfg.metrics_listen, &http, msg, sizeof msg))) {
		fosd_error("%s", msg);
	} else {
		fosd_info("ready");
		fosd_sd_notifyf("READY=1\nSTATUS=serving on %s (backend %s, %d device%s)", cfg.listen[0], be->name, nd,
				nd == 1 ? "" : "s");
		code = fosd_control_run(&srv);
	}
	fosd_control_watchdog(code); /* the teardown below always ends */
	fosd_http_metrics_stop(http); /* no handler reads srv after this */
	fosd_chans_stop_all(fosd_srv_tp(&srv));    /* channel threads hand requests to the executor: they stop first */
	fosd_executor_stop(fosd_srv_exec(&srv));
	fosd_transport_close(fosd_srv_tp(&srv));
	fosd_server_destroy(&srv);
	fosd_tenants_free(tenants);
	fosd_info("stopped (exit %d)", code);
	fosd_config_free(&cfg);
	return code;
}
