/* server.c: creating and destroying the server object: its devices (each with its backend, weight
 * cache, contexts and GPU mappings), metrics, duplicate detection, regions and locks. The caches'
 * budgets (cache_bytes, context_bytes) are per device. */
#include "server.h"
#include "msg_pool.h"
#include "stats.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The hooks of the stages below (server.h): each gets its own part of the server, whose first
 * part the server is. */
static void *stats_result(fosd_opsrv *o, Fos__StatsResult **st)
{
	return fosd_stats_result(fosd_srv_tp((fosd_server *)o), st);
}

static int device_init(fosd_server *srv, fosd_device *d, int index, fos_backend *be, int ordinal)
{
	fosd_config *cfg = srv->cfg;
	d->index = index;
	d->ordinal = ordinal;
	snprintf(d->name, sizeof d->name, "%s:%d (%s)", be->name, ordinal, be->device);
	d->srv = fosd_srv_exec(srv);
	d->be = be;
	if (pthread_mutex_init(&d->be_mu, NULL) || pthread_mutex_init(&d->q_mu, NULL) ||
	    pthread_cond_init(&d->q_cv, NULL) || fosd_wcache_init(&d->wc, be, cfg->cache_bytes) ||
	    fosd_contexts_init(&d->cx, be, &d->wc, cfg->context_bytes, cfg->context_ttl_ms) ||
	    fosd_devmaps_init(&d->devmaps, be))
		return -1;
	return 0;
}

static void device_destroy(fosd_device *d)
{
	if (!d->srv)
		return;
	fosd_devmaps_destroy(&d->devmaps); /* unmaps while the backend is still there */
	fosd_contexts_destroy(&d->cx);     /* releases weight references first */
	fosd_wcache_destroy(&d->wc);
	pthread_cond_destroy(&d->q_cv);
	pthread_mutex_destroy(&d->q_mu);
	pthread_mutex_destroy(&d->be_mu);
	if (d->be) {
		d->be->destroy(d->be);
		d->be = NULL;
	}
}

int fosd_server_init(fosd_server *srv, fosd_config *cfg, fos_backend **be, const int *ordinals, int n, char *msg,
		     size_t msgsz)
{
	memset(srv, 0, sizeof *srv);
	srv->cfg = cfg;
	srv->start_ns = fosd_now_ns();
	srv->stats_result = stats_result;
	srv->chan_start = fosd_chan_start_op;
	srv->finish = fosd_finish;
	srv->drop_if_gone = fosd_drop_if_client_gone;
	srv->devs = calloc((size_t)(n > 0 ? n : 1), sizeof *srv->devs);
	int ok = srv->devs && n > 0 && n <= FOSD_MAX_DEVICES;
	for (int i = 0; ok && i < n; i++) {
		ok = !device_init(srv, &srv->devs[i], i, be[i], ordinals[i]);
		srv->res[i] = fosd_device_res(&srv->devs[i]); /* what ops see of it */
		srv->n_devs = i + 1; /* destroyed with the server, even half made */
	}
	for (int i = srv->n_devs; i < n; i++) /* never reached a device: freed here */
		be[i]->destroy(be[i]);
	if (ok && cfg->dedup_bytes < FOSD_DEDUP_MIN_BYTES) {
		snprintf(msg, msgsz, "dedup_bytes %llu is below the minimum of %llu (64K)",
			 (unsigned long long)cfg->dedup_bytes, (unsigned long long)FOSD_DEDUP_MIN_BYTES);
		return -1;
	}
	if (!ok || fosd_metrics_init(&srv->metrics) || fosd_dedup_init(&srv->dd, cfg->dedup_window_ms, cfg->dedup_bytes) ||
	    fosd_regions_init(&srv->regions, srv->devs[0].be) || fosd_chans_init(&srv->chans)) {
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
	if (srv->devs)
		fosd_regions_destroy(&srv->regions); /* unpins while the backends are still there */
	fosd_chans_destroy(&srv->chans);
	fosd_msgpool_unpin_all();
	for (int i = 0; i < srv->n_devs; i++)
		device_destroy(&srv->devs[i]);
	free(srv->devs);
	srv->devs = NULL;
	srv->n_devs = 0;
	fosd_dedup_destroy(&srv->dd);
	fosd_metrics_destroy(&srv->metrics);
}
