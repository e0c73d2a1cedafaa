/* contexts.c: saved forward contexts (see contexts.h): a hash table by id, an age list for TTL
 * expiry and budget eviction, and tombstones of recently removed ids. */
#include "contexts.h"
#include "util.h"
#include "log.h"
#include "fos.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fosd_contexts_init(fosd_contexts *cx, fos_backend *be, fosd_wcache *wc, uint64_t budget, uint64_t ttl_ms)
{
	memset(cx, 0, sizeof *cx);
	cx->be = be;
	cx->wc = wc;
	cx->budget = budget;
	cx->ttl_ms = ttl_ms;
	cx->nbuckets = 4096;
	cx->buckets = calloc(cx->nbuckets, sizeof *cx->buckets);
	if (!cx->buckets)
		return -1;
	if (pthread_mutex_init(&cx->mu, NULL)) {
		free(cx->buckets);
		return -1;
	}
	return 0;
}

static void cx_free_now(fosd_contexts *cx, fosd_context *c)
{
	fosd_retire_mark(&cx->retire, cx->be, c->made_ev);
	fos_saved_free(cx->be, &c->saved);
	if (c->w)
		fosd_wcache_release(cx->wc, c->w);
	free(c);
}

static void cx_free_cb(void *owner, void *obj)
{
	cx_free_now(owner, obj);
}

void fosd_context_free(fosd_contexts *cx, fosd_context *c)
{
	fosd_retire(&cx->retire, cx_free_cb, cx, c); /* lanes may still read it (retire.h) */
}

void fosd_contexts_destroy(fosd_contexts *cx)
{
	fosd_context *c = cx->oldest;
	while (c) {
		fosd_context *n = c->next;
		cx_free_now(cx, c);
		c = n;
	}
	free(cx->buckets);
	cx->buckets = NULL;
	pthread_mutex_destroy(&cx->mu);
}

static fosd_tenant *cx_owner(const fosd_context *c)
{
	return c->w ? c->w->owner : NULL;
}

static size_t cx_bucket(const fosd_contexts *cx, uint64_t id)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 40) % cx->nbuckets;
}

static fosd_context *cx_find_locked(fosd_contexts *cx, uint64_t id)
{
	fosd_context *c = cx->buckets[cx_bucket(cx, id)];
	while (c && c->id != id)
		c = c->hnext;
	return c;
}

/* Unlinks c from the table and the age list; called with cx->mu held. */
static void cx_unlink_locked(fosd_contexts *cx, fosd_context *c, int why)
{
	if (!c->linked)
		return;
	c->linked = 0;
	fosd_context **pp = &cx->buckets[cx_bucket(cx, c->id)];
	while (*pp && *pp != c)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = c->hnext;
	if (c->prev)
		c->prev->next = c->next;
	else
		cx->oldest = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		cx->newest = c->prev;
	cx->bytes -= c->bytes;
	if (cx_owner(c))
		cx_owner(c)->context_bytes -= c->bytes;
	cx->count--;
	if (why == FOSD_CTX_EXPIRED)
		cx->expired++;
	else if (why == FOSD_CTX_EVICTED)
		cx->evicted++;
	unsigned t = cx->tomb_next++ % FOSD_CTX_TOMBSTONES;
	cx->tomb_id[t] = c->id;
	cx->tomb_why[t] = (uint8_t)why;
	cx->tomb_owner[t] = cx_owner(c);
}

void fosd_contexts_remove(fosd_contexts *cx, fosd_context *c, int why)
{
	pthread_mutex_lock(&cx->mu);
	int was = c->linked;
	cx_unlink_locked(cx, c, why);
	pthread_mutex_unlock(&cx->mu);
	if (was) /* else whoever removed it frees it */
		fosd_context_free(cx, c);
}

int fosd_contexts_add(fosd_contexts *cx, fosd_context *c, char *msg, size_t msgsz)
{
	c->bytes = fos_saved_bytes(&c->saved);
	if (c->bytes > cx->budget) {
		snprintf(msg, msgsz, "saved context of %zu bytes exceeds the context budget of %llu bytes", c->bytes,
			 (unsigned long long)cx->budget);
		fosd_context_free(cx, c);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	fosd_tenant *owner = cx_owner(c);
	if (owner && owner->quota_context && c->bytes > owner->quota_context) {
		snprintf(msg, msgsz, "saved context of %zu bytes exceeds the context quota of tenant '%s' (%llu bytes)",
			 c->bytes, owner->name, (unsigned long long)owner->quota_context);
		fosd_context_free(cx, c);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	fosd_context *victims = NULL;
	pthread_mutex_lock(&cx->mu);
	if (c->id && cx_find_locked(cx, c->id)) { /* an id the client chose (ForwardRequest.context_id) */
		pthread_mutex_unlock(&cx->mu);
		snprintf(msg, msgsz, "context id %016llx is already in use; choose another (a random 64-bit one)",
			 (unsigned long long)c->id);
		fosd_context_free(cx, c);
		return FOS__CODE__ALREADY_EXISTS;
	}
	/* the tenant's quota, from its own oldest; then the budget, the tenant's own oldest first */
	for (int pass = 0; pass < 3; pass++) {
		fosd_context *o = cx->oldest;
		while (o) {
			fosd_context *nx = o->next;
			int over = pass == 0 ? (owner && owner->quota_context &&
						owner->context_bytes + c->bytes > owner->quota_context)
					     : cx->bytes + c->bytes > cx->budget;
			if (!over)
				break;
			if (pass == 2 || cx_owner(o) == owner) {
				cx_unlink_locked(cx, o, FOSD_CTX_EVICTED);
				o->next = victims;
				victims = o;
			}
			o = nx;
		}
	}
	while (!c->id || cx_find_locked(cx, c->id))
		c->id = fosd_random_u64();
	c->expires_ns = fosd_now_ns() + cx->ttl_ms * 1000000ull;
	size_t b = cx_bucket(cx, c->id);
	c->hnext = cx->buckets[b];
	cx->buckets[b] = c;
	c->next = NULL;
	c->prev = cx->newest;
	if (cx->newest)
		cx->newest->next = c;
	else
		cx->oldest = c;
	cx->newest = c;
	c->linked = 1;
	cx->bytes += c->bytes;
	if (owner)
		owner->context_bytes += c->bytes;
	cx->count++;
	pthread_mutex_unlock(&cx->mu);
	while (victims) {
		fosd_context *n = victims->next;
		fosd_debug("contexts: evicted %016llx (%zu bytes) to make room", (unsigned long long)victims->id,
			   victims->bytes);
		fosd_context_free(cx, victims);
		victims = n;
	}
	return 0;
}

static const char *cx_why(int why)
{
	switch (why) {
	case FOSD_CTX_RELEASED:
		return "was released";
	case FOSD_CTX_EXPIRED:
		return "expired";
	case FOSD_CTX_EVICTED:
		return "was evicted to stay within the context budget";
	case FOSD_CTX_CONSUMED:
		return "was consumed by its backward";
	default:
		return "does not exist";
	}
}

/* Why owner's context id went away (FOSD_CTX_*, the latest), or 0 when it is not remembered. */
static int cx_tomb_why_locked(const fosd_contexts *cx, const fosd_tenant *owner, uint64_t id)
{
	int why = 0;
	for (unsigned i = 0; i < FOSD_CTX_TOMBSTONES; i++)
		if (cx->tomb_why[i] && cx->tomb_id[i] == id && cx->tomb_owner[i] == owner)
			why = cx->tomb_why[i];
	return why;
}

static int cx_not_found_locked(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id, char *msg, size_t msgsz)
{
	int why = cx_tomb_why_locked(cx, owner, id);
	snprintf(msg, msgsz, "context %016llx %s", (unsigned long long)id, cx_why(why));
	return FOS__CODE__NOT_FOUND;
}

int fosd_contexts_knows(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id)
{
	pthread_mutex_lock(&cx->mu);
	fosd_context *c = id ? cx_find_locked(cx, id) : NULL;
	int known = c && cx_owner(c) == owner ? 2 : (id && cx_tomb_why_locked(cx, owner, id)) ? 1 : 0;
	pthread_mutex_unlock(&cx->mu);
	return known;
}

int fosd_contexts_get(fosd_contexts *cx, uint64_t id, fosd_context **out, char *msg, size_t msgsz)
{
	return fosd_contexts_get_in(cx, NULL, id, out, msg, msgsz);
}

int fosd_contexts_get_in(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id, fosd_context **out, char *msg,
			 size_t msgsz)
{
	pthread_mutex_lock(&cx->mu);
	fosd_context *c = id ? cx_find_locked(cx, id) : NULL;
	if (c && cx_owner(c) != owner)
		c = NULL; /* another tenant's: as if it did not exist */
	if (c && c->expires_ns <= fosd_now_ns()) {
		cx_unlink_locked(cx, c, FOSD_CTX_EXPIRED);
		pthread_mutex_unlock(&cx->mu);
		fosd_context_free(cx, c);
		snprintf(msg, msgsz, "context %016llx expired", (unsigned long long)id);
		return FOS__CODE__NOT_FOUND;
	}
	if (!c) {
		int rc = cx_not_found_locked(cx, owner, id, msg, msgsz);
		pthread_mutex_unlock(&cx->mu);
		return rc;
	}
	pthread_mutex_unlock(&cx->mu);
	*out = c;
	return 0;
}

int fosd_contexts_release(fosd_contexts *cx, uint64_t id, char *msg, size_t msgsz)
{
	return fosd_contexts_release_in(cx, NULL, id, msg, msgsz);
}

int fosd_contexts_release_in(fosd_contexts *cx, const fosd_tenant *owner, uint64_t id, char *msg, size_t msgsz)
{
	fosd_context *c;
	int rc = fosd_contexts_get_in(cx, owner, id, &c, msg, msgsz);
	if (rc)
		return rc;
	fosd_contexts_remove(cx, c, FOSD_CTX_RELEASED);
	return 0;
}

uint64_t fosd_contexts_sweep(fosd_contexts *cx, uint64_t now_ns)
{
	fosd_context *dead = NULL;
	uint64_t n = 0;
	pthread_mutex_lock(&cx->mu);
	/* the age list is in expiry order (one TTL for all) */
	while (cx->oldest && cx->oldest->expires_ns <= now_ns) {
		fosd_context *c = cx->oldest;
		cx_unlink_locked(cx, c, FOSD_CTX_EXPIRED);
		c->next = dead;
		dead = c;
		n++;
	}
	pthread_mutex_unlock(&cx->mu);
	while (dead) {
		fosd_context *nx = dead->next;
		fosd_context_free(cx, dead);
		dead = nx;
	}
	return n;
}

void fosd_contexts_stats_get(fosd_contexts *cx, fosd_contexts_stats *st)
{
	pthread_mutex_lock(&cx->mu);
	st->count = cx->count;
	st->bytes = cx->bytes;
	st->budget = cx->budget;
	st->expired = cx->expired;
	st->evicted = cx->evicted;
	pthread_mutex_unlock(&cx->mu);
}
