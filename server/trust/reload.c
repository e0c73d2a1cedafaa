/* reload.c: fosd_reload (see reload.h). Invariants: a reload changes the tenant table only
 * through fosd_tenants_replace (no tenant object is ever freed while fosd runs), and the
 * configuration object only in the fields of the keys the config table marks FOSD_CK_RELOAD
 * (fosd_config_apply_reloadable), which no request path reads (log_level takes effect through its
 * row's on_reload, fosd_log_set_level; the tenant_* defaults through the tenants' own quota
 * fields). */
#include "reload.h"
#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t reload_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct reload_counts {
	int added, removed, kept;
} reload_counts;

static void reload_note(void *arg, const fosd_tenant *t, int what)
{
	reload_counts *k = arg;
	if (what == FOSD_TENANT_ADDED) {
		k->added++;
		fosd_info("reload: tenant '%s' added", t->name);
	} else if (what == FOSD_TENANT_REMOVED) {
		k->removed++;
		fosd_info("reload: tenant '%s' removed (or its secret changed): its token is refused from now on",
			  t->name);
	} else {
		k->kept++;
	}
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static int reload_locked(fosd_server *srv)
{
	fosd_config *cur = srv->cfg, nc;
	char msg[1024];
	fosd_config_defaults(&nc);
	int have_new = 0;
	if (cur->argv) {
		if (fosd_config_parse_args(&nc, cur->argc, cur->argv, msg, sizeof msg) ||
		    fosd_config_finish(&nc, msg, sizeof msg)) {
			fosd_warn("reload: configuration: %s; nothing changed", msg);
			fosd_config_free(&nc);
			return -1;
		}
		have_new = 1;
	}
	const fosd_config *want = have_new ? &nc : cur;
	if (srv->tenants) {
		/* the file fosd started with; a new path waits for a restart (said below) */
		fosd_tenant_defaults d = {want->tenant_cache_bytes, want->tenant_context_bytes, want->tenant_inflight};
		fosd_tenants *fresh;
		int insecure = 0;
		if (fosd_tenants_load(cur->tokens_path, &d, &fresh, &insecure, msg, sizeof msg)) {
			fosd_warn("reload: tokens: %s; nothing changed, the %d tenants of before stay", msg, srv->tenants->n);
			fosd_config_free(&nc);
			return -1;
		}
		if (insecure)
			fosd_warn("tokens file %s may be read or written by group or others; chmod 600 it", cur->tokens_path);
		reload_counts k = {0, 0, 0};
		int n = fresh->n;
		if (fosd_tenants_replace(srv->tenants, fresh, reload_note, &k, msg, sizeof msg)) {
			fosd_warn("reload: tokens: %s; nothing changed", msg);
			fosd_config_free(&nc);
			return -1;
		}
		fosd_info("reload: tenants: %d from %s (%d added, %d removed, %d unchanged with their weights and "
			  "contexts)",
			  n, cur->tokens_path, k.added, k.removed, k.kept);
	}
	if (have_new) {
		fosd_config_apply_reloadable(cur, &nc);
		char diff[512], reloadable[256];
		fosd_config_fixed_diff(cur, &nc, diff, sizeof diff);
		fosd_config_reloadable(reloadable, sizeof reloadable);
		if (diff[0])
			fosd_warn("reload: changed, waiting for a restart: %s (a reload applies the tokens file and %s)",
				  diff, reloadable);
		if (!same_str(cur->tokens_path, nc.tokens_path) && !srv->tenants)
			fosd_warn("reload: fosd started without a tokens file; tenants need a restart");
		fosd_config_free(&nc);
	}
	return 0;
}

int fosd_reload(fosd_server *srv)
{
	pthread_mutex_lock(&reload_mu);
	int rc = reload_locked(srv);
	pthread_mutex_unlock(&reload_mu);
	return rc;
}

void fosd_reload_on_signal(uv_signal_t *h, int signum)
{
	(void)signum;
	fosd_info("SIGHUP: reloading the tokens file and the settings that can change at run time");
	if (fosd_reload(h->data))
		fosd_warn("SIGHUP: reload refused, everything stays as it was");
	else
		fosd_info("SIGHUP: reload done");
}
