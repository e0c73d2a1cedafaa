/* wcache.c: the weight cache (see wcache.h): a most-recently-used list of attached entries, a list
 * of detached entries still referenced, byte accounting and LRU eviction, the decoded tier, the
 * lanes' decode scratch and an entry's other form of W (four_over_six, fosd_wcache_form; its bytes
 * are the entry's). Invariants (under wc->mu): bytes is the sum of the live entries' bytes,
 * tier_bytes that of their tier copies (plus a copy being made, reserved before it is allocated);
 * a tier copy with tier_refs > 0 is never freed. */
#include "wcache.h"
#include "util.h"
#include "log.h"
#include "fos.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fosd_wcache_init(fosd_wcache *wc, fos_backend *be, uint64_t budget)
{
	memset(wc, 0, sizeof *wc);
	wc->be = be;
	wc->budget = budget;
	wc->tier_budget = budget / FOSD_TIER_BUDGET_DIV;
	wc->hn = 64;
	wc->hb = calloc(wc->hn, sizeof *wc->hb);
	if (!wc->hb)
		return -1;
	if (pthread_mutex_init(&wc->mu, NULL)) {
		free(wc->hb);
		wc->hb = NULL;
		return -1;
	}
	return 0;
}

static void wc_free_entry(fosd_wcache *wc, fosd_weight *w)
{
	fosd_retire_mark(&wc->retire, wc->be, w->made_ev);
	w->alt.master = NULL; /* qw's, borrowed */
	fos_qweight_free(wc->be, &w->alt);
	fos_qweight_free(wc->be, &w->qw);
	if (w->tier_dec)
		wc->be->free(wc->be, w->tier_dec);
	free(w);
}

void fosd_wcache_destroy(fosd_wcache *wc)
{
	fosd_weight *w = wc->head;
	while (w) {
		fosd_weight *n = w->next;
		wc_free_entry(wc, w);
		w = n;
	}
	w = wc->detached;
	while (w) {
		fosd_weight *n = w->next;
		wc_free_entry(wc, w);
		w = n;
	}
	wc->head = wc->tail = wc->detached = NULL;
	free(wc->hb);
	wc->hb = NULL;
	wc->hn = 0;
	for (int i = 0; i < FOSD_WC_LANES; i++) /* device memory is shared by the lanes' instances */
		fos_wscratch_free(wc->be, &wc->scratch[i]);
	pthread_mutex_destroy(&wc->mu);
}

static void wc_unlink(fosd_wcache *wc, fosd_weight *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		wc->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		wc->tail = w->prev;
	w->prev = w->next = NULL;
}

static void wc_push_front(fosd_wcache *wc, fosd_weight *w)
{
	w->prev = NULL;
	w->next = wc->head;
	if (wc->head)
		wc->head->prev = w;
	wc->head = w;
	if (!wc->tail)
		wc->tail = w;
}

/* Moves an entry's bytes into (add) or out of (sub) the cache's and its owner's counts. Called with
 * wc->mu held. */
static void wc_bytes_move(fosd_wcache *wc, fosd_weight *w, uint64_t add, uint64_t sub)
{
	wc->bytes = wc->bytes + add - sub;
	if (w->owner)
		w->owner->cache_bytes = w->owner->cache_bytes + add - sub;
}

/* The tier's count without w's copy (the copy is freed with the entry). Called with wc->mu held. */
static void wc_tier_gone_locked(fosd_wcache *wc, fosd_weight *w)
{
	if (w->tier_dec) {
		wc->tier_bytes -= w->tier_bytes;
		wc->tier_entries--;
	}
}

static int wc_is(const fosd_weight *w, const fosd_tenant *owner, const char *name)
{
	return w->owner == owner && !strcmp(w->name, name);
}

/* ---- the name index and the idle bytes (see wcache.h); all called with wc->mu held ---- */

static size_t wc_hash(const fosd_tenant *owner, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)(uintptr_t)owner * 0x9E3779B97F4A7C15ull);
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return (size_t)(h ^ (h >> 29));
}

static fosd_weight *wc_lookup(fosd_wcache *wc, const fosd_tenant *owner, const char *name)
{
	fosd_weight *w = wc->hb[wc_hash(owner, name) & (wc->hn - 1)];
	while (w && (wc->probes++, !wc_is(w, owner, name)))
		w = w->hnext;
	return w;
}

/* Adds an attached entry; doubles the buckets first when entries outgrow them (if that memory is
 * short the chains grow longer instead: still correct). */
static void wc_index_add(fosd_wcache *wc, fosd_weight *w)
{
	if (wc->entries >= wc->hn) {
		size_t nn = wc->hn * 2;
		fosd_weight **nb = calloc(nn, sizeof *nb);
		if (nb) {
			for (fosd_weight *v = wc->head; v; v = v->next) { /* the attached ones, w not yet */
				size_t b = wc_hash(v->owner, v->name) & (nn - 1);
				v->hnext = nb[b];
				nb[b] = v;
			}
			free(wc->hb);
			wc->hb = nb;
			wc->hn = nn;
		}
	}
	size_t b = wc_hash(w->owner, w->name) & (wc->hn - 1);
	w->hnext = wc->hb[b];
	wc->hb[b] = w;
}

static void wc_index_del(fosd_wcache *wc, fosd_weight *w)
{
	fosd_weight **pp = &wc->hb[wc_hash(w->owner, w->name) & (wc->hn - 1)];
	while (*pp && *pp != w)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = w->hnext;
	w->hnext = NULL;
}

/* Whether eviction may free w: attached, unpinned, unused. */
static int wc_idle(const fosd_weight *w)
{
	return !w->detached && !w->pinned && w->refs == 0;
}

/* After w's refs or attachment changed from a state whose wc_idle was was: idle_bytes follows. */
static void wc_idle_update(fosd_wcache *wc, const fosd_weight *w, int was)
{
	int now = wc_idle(w);
	if (now && !was)
		wc->idle_bytes += w->bytes;
	else if (was && !now)
		wc->idle_bytes -= w->bytes;
}

/* Removes an attached entry from the table. Returns it when nobody uses it (the caller frees it
 * after unlocking, so readers never wait on backend frees), else keeps it on the detached list
 * until its last user releases it and returns NULL. Called with wc->mu held. */
static fosd_weight *wc_detach_locked(fosd_wcache *wc, fosd_weight *w)
{
	int was = wc_idle(w);
	wc_index_del(wc, w);
	wc_unlink(wc, w);
	wc->entries--;
	w->detached = 1;
	wc_idle_update(wc, w, was);
	if (w->refs == 0) {
		wc_bytes_move(wc, w, 0, w->bytes);
		wc_tier_gone_locked(wc, w);
		return w;
	}
	w->next = wc->detached;
	wc->detached = w;
	return NULL;
}

static void wc_free_cb(void *owner, void *obj)
{
	wc_free_entry(owner, obj);
}

/* Frees a list of entries linked by next (after wc->mu was released), through the retirer: lanes
 * may still read them (retire.h). */
static void wc_free_list(fosd_wcache *wc, fosd_weight *w)
{
	while (w) {
		fosd_weight *n = w->next;
		fosd_retire(&wc->retire, wc_free_cb, wc, w);
		w = n;
	}
}

fosd_weight *fosd_wcache_find_in(fosd_wcache *wc, const fosd_tenant *owner, const char *name)
{
	pthread_mutex_lock(&wc->mu);
	fosd_weight *w = wc_lookup(wc, owner, name);
	pthread_mutex_unlock(&wc->mu);
	return w;
}

int fosd_wcache_holds(fosd_wcache *wc, const fosd_tenant *owner, const char *name, uint64_t *version)
{
	pthread_mutex_lock(&wc->mu);
	fosd_weight *w = wc_lookup(wc, owner, name);
	if (w && version)
		*version = w->version;
	pthread_mutex_unlock(&wc->mu);
	return w != NULL;
}

fosd_weight *fosd_wcache_find(fosd_wcache *wc, const char *name)
{
	return fosd_wcache_find_in(wc, NULL, name);
}

int fosd_wcache_acquire(fosd_wcache *wc, const char *name, uint64_t version, fosd_weight **out, char *msg,
			size_t msgsz)
{
	return fosd_wcache_acquire_in(wc, NULL, name, version, out, msg, msgsz);
}

int fosd_wcache_acquire_in(fosd_wcache *wc, const fosd_tenant *owner, const char *name, uint64_t version,
			   fosd_weight **out, char *msg, size_t msgsz)
{
	pthread_mutex_lock(&wc->mu);
	fosd_weight *w = wc_lookup(wc, owner, name);
	if (!w) {
		wc->misses++;
		pthread_mutex_unlock(&wc->mu);
		snprintf(msg, msgsz, "weight '%s' is not in the cache", name);
		return FOS__CODE__NOT_FOUND;
	}
	if (version && w->version != version) {
		uint64_t have = w->version;
		wc->misses++;
		pthread_mutex_unlock(&wc->mu);
		snprintf(msg, msgsz, "weight '%s' is cached at version %llu, not %llu", name,
			 (unsigned long long)have, (unsigned long long)version);
		return FOS__CODE__FAILED_PRECONDITION;
	}
	wc->hits++;
	int was = wc_idle(w);
	w->refs++;
	wc_idle_update(wc, w, was);
	w->uses++;
	w->last_used_ns = fosd_now_ns();
	if (wc->head != w) {
		wc_unlink(wc, w);
		wc_push_front(wc, w);
	}
	pthread_mutex_unlock(&wc->mu);
	*out = w;
	return 0;
}

void fosd_wcache_acquire_ref(fosd_wcache *wc, fosd_weight *w)
{
	pthread_mutex_lock(&wc->mu);
	int was = wc_idle(w);
	w->refs++;
	wc_idle_update(wc, w, was);
	pthread_mutex_unlock(&wc->mu);
}

void fosd_wcache_release(fosd_wcache *wc, fosd_weight *w)
{
	fosd_weight *dead = NULL;
	pthread_mutex_lock(&wc->mu);
	int was = wc_idle(w);
	--w->refs;
	wc_idle_update(wc, w, was);
	if (w->refs == 0 && w->detached) {
		fosd_weight **pp = &wc->detached;
		while (*pp && *pp != w)
			pp = &(*pp)->next;
		if (*pp)
			*pp = w->next;
		wc_bytes_move(wc, w, 0, w->bytes);
		wc_tier_gone_locked(wc, w);
		dead = w;
		dead->next = NULL;
	}
	pthread_mutex_unlock(&wc->mu);
	wc_free_list(wc, dead);
}

static int wc_evictable(const fosd_weight *w, const fosd_weight *reclaim)
{
	return w != reclaim && !w->pinned && w->refs == 0;
}

int fosd_wcache_reserve(fosd_wcache *wc, uint64_t need, const fosd_weight *reclaim, char *msg, size_t msgsz)
{
	return fosd_wcache_reserve_in(wc, NULL, need, reclaim, msg, msgsz);
}

/* The bytes of tier copies nobody reads, but keep's. Called with wc->mu held. */
static uint64_t wc_tier_droppable_locked(fosd_wcache *wc, const fosd_weight *keep)
{
	uint64_t b = 0;
	for (int l = 0; l < 2; l++)
		for (fosd_weight *w = l ? wc->detached : wc->head; w; w = w->next, wc->probes++)
			if (w != keep && w->tier_dec && !w->tier_refs)
				b += w->tier_bytes;
	return b;
}

/* Drops tier copies nobody reads (not keep's), least recently used first, through be, until want
 * bytes are freed or none is left. Returns the bytes freed. Called with wc->mu held. */
static uint64_t wc_tier_drop_locked(fosd_wcache *wc, fos_backend *be, uint64_t want, const fosd_weight *keep)
{
	uint64_t freed = 0;
	while (freed < want) {
		fosd_weight *v = NULL;
		for (int l = 0; l < 2; l++)
			for (fosd_weight *w = l ? wc->detached : wc->head; w; w = w->next)
				if (w != keep && w->tier_dec && !w->tier_refs && (!v || w->tier_used_ns < v->tier_used_ns))
					v = w;
		if (!v)
			break;
		be->free(be, v->tier_dec); /* nobody reads it: its readers synced before releasing it */
		v->tier_dec = NULL;
		freed += v->tier_bytes;
		wc->tier_bytes -= v->tier_bytes;
		v->tier_bytes = 0;
		wc->tier_entries--;
		wc->tier_drops++;
	}
	return freed;
}

int fosd_wcache_reserve_in(fosd_wcache *wc, fosd_tenant *owner, uint64_t need, const fosd_weight *reclaim, char *msg,
			   size_t msgsz)
{
	fosd_weight *dead = NULL, *w, *prev;
	int rc = 0;
	pthread_mutex_lock(&wc->mu);
	uint64_t give_back = (reclaim && reclaim->refs == 0) ? reclaim->bytes + reclaim->tier_bytes : 0;
	/* what must be freed for owner's quota (its own entries only; the tier is in no quota) and for
	 * the global budget (entries and the tier) */
	uint64_t quota = owner ? owner->quota_cache : 0, own_used = owner ? owner->cache_bytes : 0;
	uint64_t own_back = (reclaim && reclaim->refs == 0) ? reclaim->bytes : 0;
	uint64_t need_quota = 0, need_budget = 0, own_free = 0, all_free = 0, freed = 0;
	uint64_t used = wc->bytes + wc->tier_bytes;
	if (quota && own_used - own_back + need > quota)
		need_quota = own_used - own_back + need - quota;
	if (used - give_back + need > wc->budget)
		need_budget = used - give_back + need - wc->budget;
	if (!need_quota && !need_budget)
		goto out; /* it fits: nothing to walk, whatever the number of entries */
	/* what eviction may free: kept up to date (idle_bytes), less the entry being replaced; the
	 * walks below run only when it matters (owner's share for its quota, the tier's copies when
	 * the entries alone cannot make the room) */
	all_free = wc->idle_bytes - (reclaim && wc_idle(reclaim) ? reclaim->bytes : 0);
	if (need_quota)
		for (w = wc->head; w; w = w->next, wc->probes++)
			own_free += wc_evictable(w, reclaim) && w->owner == owner ? w->bytes : 0;
	uint64_t tier_free = all_free < need_budget && wc->tier_entries ? wc_tier_droppable_locked(wc, reclaim) : 0;
	if (own_free < need_quota) {
		snprintf(msg, msgsz,
			 "weight cache quota of tenant '%s' exceeded: %llu bytes needed, %llu of its %llu in use by pinned "
			 "or busy weights",
			 owner->name, (unsigned long long)need, (unsigned long long)(own_used - own_back - own_free),
			 (unsigned long long)quota);
		rc = FOS__CODE__RESOURCE_EXHAUSTED;
		goto out;
	}
	if (all_free + tier_free < need_budget) {
		snprintf(msg, msgsz,
			 "weight cache full: %llu bytes needed, %llu of %llu in use by pinned or busy weights",
			 (unsigned long long)need, (unsigned long long)(used - give_back - all_free - tier_free),
			 (unsigned long long)wc->budget);
		rc = FOS__CODE__RESOURCE_EXHAUSTED;
		goto out;
	}
	/* the decoded tier first (never an entry for its sake), then owner's least recently used
	 * entries (enough for both), then anyone's */
	uint64_t tier_freed = need_budget && wc->tier_entries ? wc_tier_drop_locked(wc, wc->be, need_budget, reclaim) : 0;
	need_budget = need_budget > tier_freed ? need_budget - tier_freed : 0;
	for (int pass = 0; pass < 2; pass++) {
		uint64_t want = pass == 0 ? (need_quota > need_budget ? need_quota : need_budget) : need_budget;
		for (w = wc->tail; w && freed < want; w = prev) {
			prev = w->prev;
			wc->probes++;
			if (!wc_evictable(w, reclaim) || (pass == 0 && w->owner != owner))
				continue;
			fosd_info("cache: evicting weight '%s'%s%s v%llu (%zu bytes, least recently used)", w->name,
				  w->owner ? " of " : "", w->owner ? w->owner->name : "", (unsigned long long)w->version,
				  w->bytes);
			freed += w->bytes;
			fosd_weight *d = wc_detach_locked(wc, w);
			d->next = dead;
			dead = d;
			wc->evictions++;
		}
	}
out:
	pthread_mutex_unlock(&wc->mu);
	wc_free_list(wc, dead);
	return rc;
}

void fosd_wcache_insert(fosd_wcache *wc, fosd_weight *w)
{
	pthread_mutex_lock(&wc->mu);
	fosd_weight *old = wc_lookup(wc, w->owner, w->name);
	fosd_weight *dead = old ? wc_detach_locked(wc, old) : NULL;
	if (dead)
		dead->next = NULL;
	w->bytes = fos_qweight_bytes_for(w->qw.n, w->qw.k, w->qw.uses, &w->parts);
	w->has_master = w->qw.master != NULL;
	w->has_col = w->qw.qcol.codes != NULL;
	w->tier_dec = NULL;
	w->tier_bytes = 0;
	w->tier_refs = w->tier_making = 0;
	w->refs = 0;
	w->detached = 0;
	w->last_used_ns = fosd_now_ns();
	wc_bytes_move(wc, w, w->bytes, 0);
	wc_index_add(wc, w);
	wc->entries++;
	wc_push_front(wc, w);
	wc_idle_update(wc, w, 0);
	pthread_mutex_unlock(&wc->mu);
	wc_free_list(wc, dead);
}

int fosd_wcache_drop(fosd_wcache *wc, const char *name, char *msg, size_t msgsz)
{
	return fosd_wcache_drop_in(wc, NULL, name, msg, msgsz);
}

int fosd_wcache_drop_in(fosd_wcache *wc, const fosd_tenant *owner, const char *name, char *msg, size_t msgsz)
{
	pthread_mutex_lock(&wc->mu);
	fosd_weight *w = wc_lookup(wc, owner, name);
	if (!w) {
		pthread_mutex_unlock(&wc->mu);
		snprintf(msg, msgsz, "weight '%s' is not in the cache", name);
		return FOS__CODE__NOT_FOUND;
	}
	fosd_weight *dead = wc_detach_locked(wc, w);
	if (dead)
		dead->next = NULL;
	pthread_mutex_unlock(&wc->mu);
	wc_free_list(wc, dead);
	return 0;
}

fos_wscratch *fosd_wcache_scratch(fosd_wcache *wc, int lane)
{
	return lane >= 0 && lane < FOSD_WC_LANES ? &wc->scratch[lane] : NULL;
}

void fosd_wcache_scratch_seen(fosd_wcache *wc, int lane)
{
	if (lane < 0 || lane >= FOSD_WC_LANES)
		return;
	pthread_mutex_lock(&wc->mu);
	wc->scratch_seen[lane] = wc->scratch[lane].cap; /* the lane's own field: it is not running */
	pthread_mutex_unlock(&wc->mu);
}

const uint16_t *fosd_wcache_tier_get(fosd_wcache *wc, fosd_weight *w, fos_backend *be)
{
	uint64_t bytes = (uint64_t)w->qw.n * (uint64_t)w->qw.k * 2;
	pthread_mutex_lock(&wc->mu);
	if (w->tier_dec) {
		w->tier_refs++;
		wc->tier_hits++;
		w->tier_used_ns = fosd_now_ns();
		pthread_mutex_unlock(&wc->mu);
		return w->tier_dec;
	}
	if (w->tier_making || w->detached || bytes > wc->tier_budget) {
		pthread_mutex_unlock(&wc->mu);
		return NULL;
	}
	/* room within the tier's bound and the global budget, made by dropping other copies only */
	uint64_t over_tier = wc->tier_bytes + bytes > wc->tier_budget ? wc->tier_bytes + bytes - wc->tier_budget : 0;
	uint64_t total = wc->bytes + wc->tier_bytes + bytes;
	uint64_t over_all = total > wc->budget ? total - wc->budget : 0;
	uint64_t want = over_tier > over_all ? over_tier : over_all;
	if (want && (wc_tier_droppable_locked(wc, w) < want || wc_tier_drop_locked(wc, be, want, w) < want)) {
		pthread_mutex_unlock(&wc->mu);
		return NULL;
	}
	wc->tier_bytes += bytes; /* reserved while the copy is made */
	w->tier_making = 1;
	pthread_mutex_unlock(&wc->mu);

	fos_err e;
	uint16_t *d = be->alloc(be, (size_t)bytes);
	/* waited for: the copy is read by every lane's stream from now on */
	int ok = d && !fos_qweight_decode(be, &w->qw, 0, d, &e) && !be->sync(be, &e);
	pthread_mutex_lock(&wc->mu);
	w->tier_making = 0;
	if (!ok || w->detached) {
		wc->tier_bytes -= bytes;
		pthread_mutex_unlock(&wc->mu);
		if (d)
			be->free(be, d);
		return NULL;
	}
	w->tier_dec = d;
	w->tier_bytes = (size_t)bytes;
	w->tier_refs = 1;
	w->tier_used_ns = fosd_now_ns();
	wc->tier_entries++;
	pthread_mutex_unlock(&wc->mu);
	return d;
}

void fosd_wcache_tier_release(fosd_wcache *wc, fosd_weight *w)
{
	pthread_mutex_lock(&wc->mu);
	w->tier_refs--;
	pthread_mutex_unlock(&wc->mu);
}

uint64_t fosd_wcache_tier_drop_all(fosd_wcache *wc)
{
	pthread_mutex_lock(&wc->mu);
	uint64_t b = wc_tier_drop_locked(wc, wc->be, UINT64_MAX, NULL);
	pthread_mutex_unlock(&wc->mu);
	return b;
}

void fosd_weight_info_of(const fosd_weight *w, uint64_t now_ns, fosd_weight_info *o)
{
	memset(o, 0, sizeof *o);
	memcpy(o->name, w->name, sizeof o->name);
	o->version = w->version;
	o->n = w->qw.n;
	o->k = w->qw.k;
	o->opts = w->qw.opts;
	o->bytes = w->bytes;
	o->parts = w->parts;
	o->tier_bytes = w->tier_dec ? w->tier_bytes : 0;
	o->wuses = w->qw.uses;
	for (int b = 0; b < 4; b++) /* FOS_USE_* bit b is the wire's value b + 1 */
		if (o->wuses & (1 << b))
			o->wire_uses[o->n_wire_uses++] = (Fos__WeightUse)(b + 1);
	o->pinned = w->pinned;
	o->has_master = w->has_master;
	o->has_col = w->has_col;
	o->uses = w->uses;
	o->idle_ms = now_ns > w->last_used_ns ? (now_ns - w->last_used_ns) / 1000000u : 0;
}

int fosd_wcache_list_in(fosd_wcache *wc, const fosd_tenant *owner, fosd_weight_info **out, size_t *count)
{
	pthread_mutex_lock(&wc->mu);
	size_t n = (size_t)wc->entries;
	fosd_weight_info *a = calloc(n ? n : 1, sizeof *a);
	if (!a) {
		pthread_mutex_unlock(&wc->mu);
		return -1;
	}
	uint64_t now = fosd_now_ns();
	size_t i = 0;
	for (fosd_weight *w = wc->head; w && i < n; w = w->next)
		if (w->owner == owner)
			fosd_weight_info_of(w, now, &a[i++]);
	pthread_mutex_unlock(&wc->mu);
	*out = a;
	*count = i;
	return 0;
}

static int wc_by_name(const void *a, const void *b)
{
	const fosd_weight *x = *(const fosd_weight *const *)a, *y = *(const fosd_weight *const *)b;
	return strcmp(x->name, y->name);
}

int fosd_wcache_list_page(fosd_wcache *wc, const fosd_tenant *owner, const char *after, size_t max,
			  fosd_weight_info **out, size_t *count, int *more)
{
	*out = NULL;
	*count = 0;
	*more = 0;
	pthread_mutex_lock(&wc->mu);
	size_t n = (size_t)wc->entries, cand = 0;
	fosd_weight **sel = malloc((n ? n : 1) * sizeof *sel);
	size_t cap = n < max ? n : max;
	fosd_weight_info *a = calloc(cap ? cap : 1, sizeof *a);
	if (!sel || !a) {
		pthread_mutex_unlock(&wc->mu);
		free(sel);
		free(a);
		return -1;
	}
	/* names are unique per owner, so "after the last name returned" is a position that entries
	 * added or dropped elsewhere in the order do not move */
	for (fosd_weight *w = wc->head; w && cand < n; w = w->next)
		if (w->owner == owner && strcmp(w->name, after) > 0)
			sel[cand++] = w;
	qsort(sel, cand, sizeof *sel, wc_by_name);
	size_t k = cand < max ? cand : max;
	uint64_t now = fosd_now_ns();
	for (size_t i = 0; i < k; i++)
		fosd_weight_info_of(sel[i], now, &a[i]);
	pthread_mutex_unlock(&wc->mu);
	free(sel);
	*out = a;
	*count = k;
	*more = cand > k;
	return 0;
}

void fosd_wcache_stats_get(fosd_wcache *wc, fosd_wcache_stats *st)
{
	pthread_mutex_lock(&wc->mu);
	st->bytes = wc->bytes;
	st->budget = wc->budget;
	st->entries = wc->entries;
	st->hits = wc->hits;
	st->misses = wc->misses;
	st->evictions = wc->evictions;
	st->tier_bytes = wc->tier_bytes;
	st->tier_budget = wc->tier_budget;
	st->tier_entries = wc->tier_entries;
	st->tier_hits = wc->tier_hits;
	st->tier_drops = wc->tier_drops;
	st->scratch_bytes = 0;
	for (int i = 0; i < FOSD_WC_LANES; i++)
		st->scratch_bytes += wc->scratch_seen[i];
	pthread_mutex_unlock(&wc->mu);
}

/* ---- the other form of W (four_over_six scopes) -------------------------------------------- */

const fos_qweight *fosd_weight_form_of(fosd_weight *w, int scope)
{
	if (fos_scope_w46(scope) == fos_scope_w46(w->qw.opts.four_over_six))
		return &w->qw;
	return w->alt_state == 2 ? &w->alt : NULL; /* set before any context that reads it */
}

/* Makes f, the form of w's weight for scope, from w's master: w's options and uses (alt borrows
 * the master instead of copying it). */
static int wc_form_make(fosd_weight *w, fos_backend *be, int scope, fos_qweight *f, fos_err *e)
{
	fos_linear_opts o = w->qw.opts;
	o.four_over_six = scope;
	int uses = w->qw.uses & ~FOS_USE_HIGH_PRECISION;
	int rc = fos_qweight_make_uses(be, w->qw.master, w->qw.n, w->qw.k, &o, uses ? uses : FOS_USE_FORWARD, f, e);
	if (!rc) {
		f->master = w->qw.master;
		f->uses = w->qw.uses;
	}
	return rc;
}

int fosd_wcache_form(fosd_wcache *wc, fosd_weight *w, fos_backend *be, int scope, const fos_qweight **out,
		     fos_qweight *tmp, char *msg, size_t msgsz)
{
	int w46 = fos_scope_w46(w->qw.opts.four_over_six);
	*out = NULL;
	if (fos_scope_w46(scope) == w46) {
		*out = &w->qw;
		return 0;
	}
	if (!w->qw.master) {
		snprintf(msg, msgsz,
			 "four_over_six '%s' needs W %s; weight '%s' was put for '%s' (W %s) and keeps no master to make "
			 "it from: use a scope with W %s, or put it again for '%s' or with its master",
			 fos_scope_name(scope), w46 ? "plain" : "4/6", w->name, fos_scope_name(w->qw.opts.four_over_six),
			 w46 ? "4/6" : "plain", w46 ? "4/6" : "plain", fos_scope_name(scope));
		return FOS__CODE__FAILED_PRECONDITION;
	}
	pthread_mutex_lock(&wc->mu);
	int state = w->alt_state;
	if (state == 0)
		w->alt_state = 1;
	pthread_mutex_unlock(&wc->mu);
	fos_err e;
	if (state == 2) {
		*out = &w->alt;
		return 0;
	}
	if (state == 1) { /* another lane is making it: one for this call */
		if (wc_form_make(w, be, scope, tmp, &e)) {
			snprintf(msg, msgsz, "quantizing weight '%s' for four_over_six '%s': %s", w->name,
				 fos_scope_name(scope), e.msg);
			return e.rc == FOS_ENOMEM ? FOS__CODE__RESOURCE_EXHAUSTED : FOS__CODE__INTERNAL;
		}
		*out = tmp;
		return 0;
	}
	size_t bytes = fos_qweight_bytes_for(w->qw.n, w->qw.k, w->qw.uses & ~FOS_USE_HIGH_PRECISION, NULL);
	int rc = fosd_wcache_reserve_in(wc, w->owner, bytes, NULL, msg, msgsz);
	/* other lanes read alt once it is published: an asynchronous lane's work is waited for too */
	if (!rc && (wc_form_make(w, be, scope, &w->alt, &e) || (be->defer_sync && be->sync(be, &e)))) {
		snprintf(msg, msgsz, "quantizing weight '%s' for four_over_six '%s': %s", w->name, fos_scope_name(scope),
			 e.msg);
		rc = e.rc == FOS_ENOMEM ? FOS__CODE__RESOURCE_EXHAUSTED : FOS__CODE__INTERNAL;
	}
	pthread_mutex_lock(&wc->mu);
	if (rc) {
		w->alt_state = 0;
	} else {
		fos_qweight_parts p;
		fos_qweight_bytes_for(w->qw.n, w->qw.k, w->qw.uses & ~FOS_USE_HIGH_PRECISION, &p);
		w->bytes += bytes;
		w->parts.codes += p.codes;
		w->parts.columnwise += p.columnwise;
		wc_bytes_move(wc, w, bytes, 0);
		w->alt_state = 2;
		fosd_info("cache: weight '%s' v%llu made for four_over_six '%s' from its master (%zu more bytes)", w->name,
			  (unsigned long long)w->version, fos_scope_name(scope), bytes);
	}
	pthread_mutex_unlock(&wc->mu);
	if (!rc)
		*out = &w->alt;
	return rc;
}
