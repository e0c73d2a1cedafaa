/* auth.c: request authentication and the requests-in-flight quota (see auth.h). Failures are
 * counted and logged at most once every 10 s (with how many there were), never with the token.
 * Every request is matched against the tenants of now (a reload may have removed one since the
 * connection's previous request). */
#include "auth.h"
#include "log.h"
#include "trust_config.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#define FOSD_AUTH_WARN_NS (10ull * 1000000000ull)

int fosd_auth_setup(const fosd_config *cfg, fosd_tenants **out, char *msg, size_t msgsz)
{
	*out = NULL;
	int network = 0;
	for (int i = 0; i < cfg->n_listen; i++)
		network |= fosd_url_is_network(cfg->listen[i]);
	if (!cfg->tokens_path) {
		if (network)
			fosd_warn("no tokens file and allow_insecure_tcp: one anonymous tenant, and anyone who can reach "
				  "a tcp listener can use, replace and drop every weight");
		else
			fosd_info("no tokens file: one anonymous tenant, ipc listeners only (access is the socket's "
				  "file permissions, ipc_mode %04o)", cfg->ipc_mode);
		return 0;
	}
	fosd_tenant_defaults d = {cfg->tenant_cache_bytes, cfg->tenant_context_bytes, cfg->tenant_inflight};
	int insecure = 0;
	if (fosd_tenants_load(cfg->tokens_path, &d, out, &insecure, msg, msgsz))
		return -1;
	if (insecure)
		fosd_warn("tokens file %s may be read or written by group or others; chmod 600 it", cfg->tokens_path);
	fosd_info("tenants: %d from %s; every request but Health must carry a tenant's token", (*out)->n,
		  cfg->tokens_path);
	for (int i = 0; i < cfg->n_listen; i++)
		if (fosd_url_is_network(cfg->listen[i]) && !fosd_url_is_tls(cfg->listen[i]))
			fosd_warn("listen %s: tokens travel in clear over plain tcp; use tls+tcp:// off this host",
				  cfg->listen[i]);
	return 0;
}

const char *fosd_tenant_name(const fosd_tenant *t)
{
	return t ? t->name : NULL;
}

static void auth_note_failure(fosd_tenants *ts, int missing)
{
	unsigned long long n = atomic_fetch_add(&ts->auth_failures, 1) + 1;
	uint64_t now = fosd_now_ns();
	unsigned long long last = atomic_load(&ts->warned_ns);
	if ((last == 0 || now - last >= FOSD_AUTH_WARN_NS) && atomic_compare_exchange_strong(&ts->warned_ns, &last, now)) {
		unsigned long long before = atomic_exchange(&ts->warned_count, n);
		fosd_warn("auth: %llu request(s) refused with a wrong or missing token since the last report (latest: %s "
			  "token)",
			  n - before, missing ? "no" : "a wrong");
	}
}

int fosd_auth_request(fosd_rqsrv *srv, fosd_request *s, char *msg, size_t msgsz)
{
	fosd_tenants *ts = srv->tenants;
	s->tenant = NULL;
	s->tenant_counted = 0;
	if (!ts)
		return 0; /* one anonymous tenant: tokens are ignored */
	/* the token is the whole byte string of the field (a NUL in it makes it match nobody) */
	const char *tok = (const char *)s->rq->auth_token.data;
	size_t len = tok ? s->rq->auth_token.len : 0;
	if (len == 0) {
		/* Health answers without a token (liveness probes); it says nothing about any tenant */
		if (fosd_op_flags(s->op) & FOSD_OPF_NO_TOKEN)
			return 0;
		auth_note_failure(ts, 1);
		snprintf(msg, msgsz, "this fosd requires an auth token (the secret of a tenant)");
		return FOS__CODE__UNAUTHENTICATED;
	}
	fosd_tenant *t = fosd_tenants_match(ts, tok, len);
	if (!t) {
		auth_note_failure(ts, 0);
		snprintf(msg, msgsz, "the auth token is not valid");
		return FOS__CODE__UNAUTHENTICATED;
	}
	s->tenant = t;
	/* duplicate detection is per tenant: another tenant cannot address this one's request ids */
	if (s->client_id) {
		s->client_id ^= t->salt;
		if (!s->client_id)
			s->client_id = t->salt;
	}
	if (fosd_op_flags(s->op) & FOSD_OPF_NO_TOKEN)
		return 0;
	int n = atomic_fetch_add(&t->inflight, 1) + 1;
	int quota = atomic_load(&t->quota_inflight);
	int share = 0;
	int slots = srv->cfg ? srv->cfg->concurrency : 0;
	if (!quota && slots && __atomic_load_n(&ts->n, __ATOMIC_RELAXED) > 1) {
		/* several tenants and no quota of its own: at most half of the request slots */
		quota = slots / 2 > 0 ? slots / 2 : 1;
		share = 1;
	}
	if (quota && n > quota) {
		atomic_fetch_sub(&t->inflight, 1);
		if (share)
			snprintf(msg, msgsz,
				 "tenant '%s' already has %d requests in flight, its share (half of concurrency; "
				 "inflight= in the tokens file sets its own)",
				 t->name, quota);
		else
			snprintf(msg, msgsz, "tenant '%s' already has %d requests in flight, its limit", t->name, quota);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	s->tenant_counted = 1;
	return 0;
}

void fosd_auth_done(fosd_request *s)
{
	if (s->tenant_counted && s->tenant) {
		atomic_fetch_sub(&s->tenant->inflight, 1);
		s->tenant_counted = 0;
	}
}
