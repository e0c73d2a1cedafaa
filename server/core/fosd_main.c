/* fosd_main.c: the fosd program: read the configuration, open the backend (and say which one and
 * on what device), start the executor, the listeners and the HTTP metrics endpoint when asked,
 * run the control loop until a drain finishes, then tear down. Exit status 0 after a clean drain, 1 on a startup error, an
 * abandoned drain or a backend that failed for good, 2 on a usage error. */
#include "server.h"
#include "fdlimit.h"
#include "http_metrics.h"
#include "msg_pool.h"
#include "auth.h"
#include "log.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static fos_backend *open_backend(const fosd_config *cfg, fos_err *err)
{
	if (!strcmp(cfg->backend, "cpu"))
		return fos_backend_cpu(cfg->threads, err);
	if (!strcmp(cfg->backend, "cuda"))
		return fos_backend_cuda(cfg->device, err);
	fos_err cerr;
	fos_backend *be = fos_backend_cuda(cfg->device, &cerr);
	if (be)
		return be;
	fosd_info("backend auto: no CUDA backend (%s); using the CPU", cerr.msg);
	return fos_backend_cpu(cfg->threads, err);
}

int main(int argc, char **argv)
{
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
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN); /* until the control loop reloads on it (reload.c) */
	fosd_tune_malloc(); /* a warm heap for large messages (alloc_tune.c) */
	if (cfg.config_path)
		fosd_info("configuration from %s", cfg.config_path);
	fosd_tenants *tenants = NULL;
	if (fosd_auth_setup(&cfg, &tenants, msg, sizeof msg)) {
		fosd_error("tokens: %s", msg);
		fosd_config_free(&cfg);
		return 2;
	}

	fos_err err;
	memset(&err, 0, sizeof err);
	fos_backend *be = open_backend(&cfg, &err);
	if (!be) {
		fosd_error("cannot open the %s backend: %s", cfg.backend, err.msg);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	fosd_info("backend %s on %s", be->name, be->device);
	fosd_info("limits: cache %llu bytes, contexts %llu bytes (ttl %llu ms), messages %llu bytes, %d workers, "
		  "%d concurrent requests",
		  (unsigned long long)cfg.cache_bytes, (unsigned long long)cfg.context_bytes,
		  (unsigned long long)cfg.context_ttl_ms, (unsigned long long)cfg.max_message_bytes, cfg.workers,
		  cfg.concurrency);

	static fosd_server srv;
	int code = 1;
	if (fosd_server_init(&srv, &cfg, be, msg, sizeof msg)) {
		fosd_error("%s", msg);
		be->destroy(be);
		fosd_tenants_free(tenants);
		fosd_config_free(&cfg);
		return 1;
	}
	srv.tenants = tenants;
	fosd_info("message pool: bodies from %zu KiB reused, %llu bytes kept free, %s", FOSD_MSGPOOL_MIN >> 10,
		  (unsigned long long)cfg.message_pool_bytes,
		  srv.regions.pin ? "pinned for device DMA" : "not pinned (no device)");
	fosd_http_metrics *http = NULL; /* GET /metrics and /healthz (metrics_listen) */
	if (fosd_fdlimit_setup(&srv, msg, sizeof msg) || /* the caps below (fdlimit.h) */
	    fosd_executor_start(&srv, msg, sizeof msg) || fosd_transport_start(&srv, msg, sizeof msg) ||
	    (cfg.metrics_listen && fosd_http_metrics_start(&srv, cfg.metrics_listen, &http, msg, sizeof msg))) {
		fosd_error("%s", msg);
	} else {
		fosd_info("ready");
		code = fosd_control_run(&srv);
	}
	fosd_control_watchdog(code); /* the teardown below always ends */
	fosd_http_metrics_stop(http); /* no handler reads srv after this */
	fosd_chans_stop_all(&srv);    /* channel threads hand requests to the executor: they stop first */
	fosd_executor_stop(&srv);
	fosd_transport_close(&srv);
	fosd_server_destroy(&srv);
	fosd_tenants_free(tenants);
	fosd_info("stopped (exit %d)", code);
	fosd_config_free(&cfg);
	return code;
}
