/* tenants.h: tenants, their tokens and their quotas.
 *
 * A tokens file (`fosd --tokens FILE`) lists one tenant a line: `NAME SECRET [cache=SIZE]
 * [contexts=SIZE] [inflight=N]`. A request's auth_token is the secret, a byte string compared as a
 * whole (a NUL byte in it is refused); fosd keeps only the SHA-256 digest of each secret and
 * compares the digest of a presented token with every tenant's digest in constant time, so neither
 * the match nor its position leaks through timing. Secrets are never logged or put into a message.
 *
 * Each tenant's weights and saved contexts form their own namespace (another tenant's name or
 * context id is NOT_FOUND, exactly as a missing one), with optional quotas: weight-cache bytes,
 * saved-context bytes and requests in flight. Without a tokens file there are no tenant objects:
 * every request belongs to the one anonymous tenant, written NULL throughout the server.
 *
 * Lifetime: a tenant object is never freed before its table (fosd_tenants_free, at exit), because
 * requests in flight and cached weights (fosd_weight.owner) point to it. A reload
 * (fosd_tenants_replace) keeps the object of every tenant whose name and secret are unchanged, so
 * its weights, contexts and usage stay; a tenant removed (or whose secret changed) is retired:
 * its token stops matching at once, its object stays, and it is used again should the same name
 * and secret come back. */
#ifndef FOSD_TENANTS_H
#define FOSD_TENANTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FOSD_TENANT_NAME_MAX 64
#define FOSD_SECRET_MIN 16
#define FOSD_SECRET_MAX 1024
#define FOSD_MAX_TENANTS 4096

typedef struct fosd_tenant {
	char name[FOSD_TENANT_NAME_MAX + 1];
	uint8_t digest[32];      /* SHA-256 of the secret (the secret itself is not kept) */
	uint64_t salt;           /* random: mixed into client ids, so duplicate detection is per tenant */
	/* quotas (a reload may change them while requests read them, hence atomic) */
	_Atomic uint64_t quota_cache;   /* weight-cache bytes; 0: only the global budget */
	_Atomic uint64_t quota_context; /* saved-context bytes; 0: only the global budget */
	atomic_int quota_inflight;      /* requests in flight; 0: no limit */
	/* usage */
	uint64_t cache_bytes;    /* guarded by the weight cache's lock (wcache.c) */
	uint64_t context_bytes;  /* guarded by the contexts' lock (contexts.c) */
	atomic_int inflight;     /* requests authenticated and not yet answered (auth.c) */
} fosd_tenant;

typedef struct fosd_tenants {
	fosd_tenant **t;   /* the tenants whose tokens match now; changes only under mu (write) */
	int n;
	fosd_tenant **all; /* every object the table owns: those of t and the retired ones */
	int n_all, cap_all;
	pthread_rwlock_t mu; /* readers: match and find; writer: fosd_tenants_replace */
	atomic_ullong auth_failures; /* requests with a wrong or missing token */
	atomic_ullong warned_ns;     /* last warning about them (rate limited) */
	atomic_ullong warned_count;
} fosd_tenants;

/* Defaults for quotas a line does not set. */
typedef struct fosd_tenant_defaults {
	uint64_t cache, context;
	int inflight;
} fosd_tenant_defaults;

/* Parses the text of a tokens file (origin names it in messages). Blank lines and lines starting
 * with # are skipped, and " #" starts a trailing comment. Tenant names: 1..64 bytes of
 * [A-Za-z0-9._-]; secrets: 16..1024 bytes of printable ASCII without spaces, not starting with #;
 * names and secrets are unique; a NUL byte anywhere refuses the file. Returns 0 with *out (free
 * with fosd_tenants_free), or -1 with msg naming the line, never the secret. The text is not
 * modified. */
int fosd_tenants_parse(const char *text, size_t len, const char *origin, const fosd_tenant_defaults *d,
		       fosd_tenants **out, char *msg, size_t msgsz);

/* Reads and parses a tokens file: opened without blocking (a FIFO or a device never stalls the
 * caller), only a regular file of at most FOSD_TOKENS_FILE_MAX bytes. *insecure is set to 1 when
 * group or others may read or write it (the caller warns). The file's bytes are wiped from memory
 * after parsing. */
#define FOSD_TOKENS_FILE_MAX ((size_t)16 << 20)
int fosd_tenants_load(const char *path, const fosd_tenant_defaults *d, fosd_tenants **out, int *insecure,
		      char *msg, size_t msgsz);

void fosd_tenants_free(fosd_tenants *ts);

/* What fosd_tenants_replace did to one tenant (for the log). */
enum { FOSD_TENANT_ADDED, FOSD_TENANT_REMOVED, FOSD_TENANT_KEPT };
typedef void (*fosd_tenant_note)(void *arg, const fosd_tenant *t, int what);

/* Makes the tenants of fresh (a table just parsed, consumed in all cases) the ones whose tokens
 * match in ts, at once for every later fosd_tenants_match. A tenant of fresh whose name and
 * secret equal a tenant ts holds (current or retired) keeps that object, with fresh's quotas; the
 * others are added. Tenants of ts missing from fresh are retired (see Lifetime above). note (may
 * be NULL) hears each added, removed and kept tenant. Safe while other threads match and find;
 * two replaces of one table must not overlap (reload.c runs one at a time). Returns 0, or -1
 * (out of memory: ts unchanged) with msg. */
int fosd_tenants_replace(fosd_tenants *ts, fosd_tenants *fresh, fosd_tenant_note note, void *arg, char *msg,
			 size_t msgsz);

/* The tenant whose secret is token[0..len) (all len bytes), or NULL. Takes the same time whichever
 * tenant (if any) matches; tokens longer than FOSD_SECRET_MAX are refused without hashing, and a
 * token holding a NUL byte matches nobody. */
fosd_tenant *fosd_tenants_match(fosd_tenants *ts, const char *token, size_t len);

/* The tenant of this name, or NULL (configuration and tests; not for authentication). */
fosd_tenant *fosd_tenants_find(fosd_tenants *ts, const char *name);

/* Constant-time comparison of n bytes: 1 when equal. */
int fosd_ct_equal(const void *a, const void *b, size_t n);

#endif
