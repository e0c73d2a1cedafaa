/* wcache.h: the weight cache: quantized weights by name (one version each), memory accounted
 * against a budget, LRU eviction of unpinned entries nobody uses, reference counts so an entry in
 * use by a request or a saved context is never freed under it.
 *
 * An entry keeps only what its uses need (fos_qweight, backend.h); its bytes (by part) are what the
 * budget and its tenant's quota count. No decoded operand is part of an entry: a GEMM decodes into
 * its lane's scratch (fosd_wcache_scratch; counted as scratch, not cache), or, for a small forward
 * (M <= FOSD_TIER_MAX_M), reads a decoded copy from the decoded tier: at most one bf16 copy per
 * entry, made on such a forward, bounded by tier_budget, inside the global budget but never in a
 * tenant's quota, dropped (least recently used first) before any entry is evicted, and whenever a
 * new copy needs its room. A copy in use by a forward (tier_refs) is never dropped.
 *
 * Locking: every call that allocates or frees backend memory, or changes an entry, is made by an
 * executor worker holding the backend lock (srv->be_mu); wc->mu additionally guards the table for
 * the readers that do not hold the backend lock (list, stats). */
#ifndef FOSD_WCACHE_H
#define FOSD_WCACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "fos.pb-c.h"
#include "retire.h"
#include "tenants.h"

#define FOSD_NAME_MAX 128
/* Lanes with a decode scratch of their own (fosd_wcache_scratch); a lane beyond: none. */
#define FOSD_WC_LANES 64
/* The largest M of a forward the decoded tier serves. */
#define FOSD_TIER_MAX_M 256
/* The decoded tier's bound: this fraction of the cache budget. */
#define FOSD_TIER_BUDGET_DIV 8

typedef struct fosd_weight {
	char name[FOSD_NAME_MAX + 1];
	uint64_t version;
	fos_qweight qw;
	int pinned;
	size_t bytes;      /* accounted bytes (fos_qweight_bytes) */
	fos_qweight_parts parts; /* bytes by part (their sum is bytes) */
	int has_master, has_col; /* copies of qw's state, read under wc->mu */
	/* The other form of W (4/6 for a plain-W scope's entry, plain for a 4/6 one: NUMERICS.md
	 * section 11), made from qw's master by fosd_wcache_form on first need; its bytes are in bytes
	 * and parts. alt borrows qw's master (alt.master == qw.master, never freed through alt).
	 * alt_state: 0 none, 1 being made, 2 made; under wc->mu. */
	fos_qweight alt;
	int alt_state;
	uint16_t *tier_dec; /* the decoded tier's copy (N, K) bf16, or NULL; under wc->mu */
	size_t tier_bytes;  /* its bytes (0 without one) */
	int tier_refs;      /* forwards reading tier_dec now */
	int tier_making;    /* a forward is making the copy (its bytes are in the tier's count) */
	uint64_t tier_used_ns;
	int refs;          /* requests and contexts using it */
	int detached;      /* dropped, replaced or evicted: freed when refs reaches 0 */
	uint64_t last_used_ns;
	uint64_t uses;
	fosd_tenant *owner; /* its tenant (NULL: anonymous): names are per tenant */
	/* Put by an asynchronous request: a mark recorded on its lane's stream after the quantization
	 * (a request on another lane makes its stream wait for it before reading qw), and that lane;
	 * made_ev NULL: its work was synchronized before it was inserted. Freed with the entry. */
	void *made_ev;
	int made_lane;
	struct fosd_weight *prev, *next; /* attached entries, most recently used first */
	struct fosd_weight *hnext;       /* the name index's chain (attached entries) */
} fosd_weight;

typedef struct fosd_wcache {
	pthread_mutex_t mu;
	fos_backend *be;     /* frees entries, tier copies and scratch (any thread may use it) */
	fosd_retirer retire; /* entries are freed through it (retire.h) */
	uint64_t budget;
	uint64_t bytes;      /* all live entries, attached or not */
	uint64_t entries;    /* attached entries */
	uint64_t hits, misses, evictions;
	/* the decoded tier (see the top): bytes of its copies (also in the global budget's count, not
	 * in bytes), its bound, copies held, forwards served from a copy, copies dropped */
	uint64_t tier_bytes, tier_budget, tier_entries, tier_hits, tier_drops;
	/* the lanes' decode scratch (fosd_wcache_scratch), and the bytes each held after its last use */
	fos_wscratch scratch[FOSD_WC_LANES];
	uint64_t scratch_seen[FOSD_WC_LANES];
	fosd_weight *head, *tail; /* attached entries, MRU at head */
	fosd_weight *detached;    /* detached entries still referenced (linked by next) */
	/* the attached entries by (owner, name): hn buckets (a power of two, at least entries, grown
	 * as entries are added), so that a put, a lookup or a drop costs the same however many
	 * entries there are */
	fosd_weight **hb;
	size_t hn;
	/* bytes of the attached entries eviction may free (unpinned, refs 0): kept as they change, so
	 * a reserve that fits needs no walk, and one that cannot be met is refused without one */
	uint64_t idle_bytes;
	/* entries looked at by lookups (index chains) and by reserve's walks: what a put costs, for the
	 * tests that check it does not grow with the number of entries */
	uint64_t probes;
} fosd_wcache;

/* tier_budget starts at budget / FOSD_TIER_BUDGET_DIV (0 switches the tier off). */
int fosd_wcache_init(fosd_wcache *wc, fos_backend *be, uint64_t budget);
/* Frees every entry and the lanes' scratch (through wc->be; shutdown, nothing may be in use). */
void fosd_wcache_destroy(fosd_wcache *wc);

/* Looks up name; version 0 matches any. On success takes a reference (release it with
 * fosd_wcache_release) and marks the entry used. Returns 0, or a gRPC code (NOT_FOUND,
 * FAILED_PRECONDITION for a version mismatch) with msg. */
int fosd_wcache_acquire(fosd_wcache *wc, const char *name, uint64_t version, fosd_weight **out, char *msg,
			size_t msgsz);
void fosd_wcache_acquire_ref(fosd_wcache *wc, fosd_weight *w);
void fosd_wcache_release(fosd_wcache *wc, fosd_weight *w);

/* Makes room for `need` more bytes by evicting LRU entries that are unpinned and unused, not
 * counting `reclaim` (an entry the caller is about to replace; never evicted here). Returns 0, or
 * RESOURCE_EXHAUSTED with msg. */
int fosd_wcache_reserve(fosd_wcache *wc, uint64_t need, const fosd_weight *reclaim, char *msg, size_t msgsz);

/* The entry of this name (attached), or NULL; no reference taken. */
fosd_weight *fosd_wcache_find(fosd_wcache *wc, const char *name);

/* Inserts a freshly made entry (refs 0), replacing (detaching) an entry of the same name. */
void fosd_wcache_insert(fosd_wcache *wc, fosd_weight *w);

/* Detaches the entry of this name. Returns 0 or NOT_FOUND with msg. */
int fosd_wcache_drop(fosd_wcache *wc, const char *name, char *msg, size_t msgsz);

/* Lane lane's decode scratch (fos_wops.ws), used only by that lane; NULL for no lane (-1) or one
 * beyond FOSD_WC_LANES. After the lane's op, fosd_wcache_scratch_seen records its size for Stats. */
fos_wscratch *fosd_wcache_scratch(fosd_wcache *wc, int lane);
void fosd_wcache_scratch_seen(fosd_wcache *wc, int lane);

/* The decoded tier's copy of w (which the caller holds a reference on) for a forward on be: the
 * copy there is, or one made now (be->decode, waited for) when the tier has room for it after
 * dropping copies nobody reads; NULL (decode on demand) when the tier is off, the copy cannot fit,
 * or memory is short. A non-NULL copy is the caller's to read until fosd_wcache_tier_release,
 * which it calls only once its reads of the copy are done (be synced). */
const uint16_t *fosd_wcache_tier_get(fosd_wcache *wc, fosd_weight *w, fos_backend *be);
void fosd_wcache_tier_release(fosd_wcache *wc, fosd_weight *w);
/* The form of w (which the caller holds a reference on) a layer of four_over_six scope needs:
 * &w->qw when scope quantizes W as w was put (4/6 or plain), else w->alt, made now from w's master
 * (within the budget and w's owner's quota, evicting as fosd_wcache_reserve_in does) unless made
 * before; while another lane makes it, a form made for this call alone in *tmp (the caller frees
 * it with fos_qweight_free when *out == tmp). Returns 0, or FAILED_PRECONDITION (no master: the
 * message names both scopes and the way out), RESOURCE_EXHAUSTED or INTERNAL with msg. */
int fosd_wcache_form(fosd_wcache *wc, fosd_weight *w, fos_backend *be, int scope, const fos_qweight **out,
		     fos_qweight *tmp, char *msg, size_t msgsz);
/* The form a saved context's backward uses: that of its forward's scope (w->alt or &w->qw), or
 * NULL when that form is not there. */
const fos_qweight *fosd_weight_form_of(fosd_weight *w, int scope);

/* Drops every decoded copy nobody reads; returns the bytes freed. */
uint64_t fosd_wcache_tier_drop_all(fosd_wcache *wc);

/* Per tenant: the same operations on the namespace of owner (NULL: the anonymous tenant; the
 * functions above are these with owner NULL). Another tenant's entry of the same name is invisible:
 * NOT_FOUND with the same message as a missing one. fosd_wcache_insert replaces the entry of the
 * same name and owner (w->owner). fosd_wcache_reserve_in first applies owner's cache quota, by
 * evicting only owner's entries (RESOURCE_EXHAUSTED when they cannot make room: nothing of another
 * tenant is evicted), then the global budget, evicting owner's least recently used entries before
 * anyone else's. Nothing is evicted when the room cannot be made. */
fosd_weight *fosd_wcache_find_in(fosd_wcache *wc, const fosd_tenant *owner, const char *name);
/* Whether owner's weight name is cached (its version in *version, if not NULL); for readers that
 * do not hold the backend lock (placement). */
int fosd_wcache_holds(fosd_wcache *wc, const fosd_tenant *owner, const char *name, uint64_t *version);
int fosd_wcache_acquire_in(fosd_wcache *wc, const fosd_tenant *owner, const char *name, uint64_t version,
			   fosd_weight **out, char *msg, size_t msgsz);
int fosd_wcache_reserve_in(fosd_wcache *wc, fosd_tenant *owner, uint64_t need, const fosd_weight *reclaim, char *msg,
			   size_t msgsz);
int fosd_wcache_drop_in(fosd_wcache *wc, const fosd_tenant *owner, const char *name, char *msg, size_t msgsz);

/* Snapshot for ListWeights: a malloc'd array of copies (qw pointers must not be used). */
typedef struct fosd_weight_info {
	char name[FOSD_NAME_MAX + 1];
	uint64_t version;
	int64_t n, k;
	fos_linear_opts opts;
	uint64_t bytes;
	fos_qweight_parts parts;
	uint64_t tier_bytes; /* its decoded tier copy (not in bytes) */
	int wuses;           /* FOS_USE_* bits it was put for */
	Fos__WeightUse wire_uses[4]; /* the same as the wire's list (n_wire_uses of them) */
	size_t n_wire_uses;
	int pinned, has_master, has_col;
	uint64_t uses, idle_ms;
} fosd_weight_info;
/* Only owner's entries, most recently used first. */
int fosd_wcache_list_in(fosd_wcache *wc, const fosd_tenant *owner, fosd_weight_info **out, size_t *count);
/* One page of owner's entries for ListWeights: those whose names sort after `after` (strcmp; ""
 * for the first page), at most max of them, in name order. *more is 1 when entries sorting after
 * the page's last one are left. Returns 0, or -1 when out of memory. */
int fosd_wcache_list_page(fosd_wcache *wc, const fosd_tenant *owner, const char *after, size_t max,
			  fosd_weight_info **out, size_t *count, int *more);
void fosd_weight_info_of(const fosd_weight *w, uint64_t now_ns, fosd_weight_info *out);

typedef struct fosd_wcache_stats {
	uint64_t bytes, budget, entries, hits, misses, evictions;
	uint64_t tier_bytes, tier_budget, tier_entries, tier_hits, tier_drops;
	uint64_t scratch_bytes; /* the lanes' decode scratch (not cache) */
} fosd_wcache_stats;
void fosd_wcache_stats_get(fosd_wcache *wc, fosd_wcache_stats *st);

#endif
