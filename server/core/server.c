/* server.c: creating and destroying the server object (caches, metrics, locks). */
#include "server.h"
#include "msg_pool.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

int fosd_server_init(fosd_server *srv, fosd_config *cfg, fos_backend *be, char *msg, size_t msgsz)
{
	memset(srv, 0, sizeof *srv);
	srv->cfg = cfg;
	srv->be = be;
	srv->start_ns = fosd_now_ns();
	if (pthread_mutex_init(&srv->be_mu, NULL) || pthread_mutex_init(&srv->q_mu, NULL) ||
	    pthread_cond_init(&srv->q_cv, NULL) || fosd_metrics_init(&srv->metrics) ||
	    fosd_wcache_init(&srv->wc, be, cfg->cache_bytes) ||
	    fosd_contexts_init(&srv->cx, be, &srv->wc, cfg->context_bytes, cfg->context_ttl_ms) ||
	    fosd_dedup_init(&srv->dd, cfg->dedup_window_ms, 65536) || fosd_regions_init(&srv->regions, be) ||
	    fosd_devmaps_init(&srv->devmaps, be) || fosd_chans_init(&srv->chans)) {
		snprintf(msg, msgsz, "out of memory initializing the server");
		return -1;
	}
	/* large message bodies: kept warm, and pinned on the backend that pins regions (msg_pool.c) */
	fosd_msgpool_set_keep(cfg->message_pool_bytes);
	fosd_msgpool_set_pin(srv->regions.pin);
	return 0;
}

void fosd_server_destroy(fosd_server *srv)
{
	fosd_regions_destroy(&srv->regions); /* unpins while the backend is still there */
	fosd_devmaps_destroy(&srv->devmaps); /* unmaps likewise */
	fosd_chans_destroy(&srv->chans);
	fosd_msgpool_unpin_all();
	fosd_contexts_destroy(&srv->cx); /* releases weight references first */
	fosd_wcache_destroy(&srv->wc);
	fosd_dedup_destroy(&srv->dd);
	fosd_metrics_destroy(&srv->metrics);
	pthread_cond_destroy(&srv->q_cv);
	pthread_mutex_destroy(&srv->q_mu);
	pthread_mutex_destroy(&srv->be_mu);
	if (srv->be) {
		srv->be->destroy(srv->be);
		srv->be = NULL;
	}
}
