/* tenants.c: the tokens file (reading without blocking, parsing, permission check), constant-time
 * token matching on SHA-256 digests, and the tenant table with its reload (see tenants.h). No
 * secret ever reaches a log line or a message. Invariant: every tenant object a table ever held is
 * in its `all` array until fosd_tenants_free; `t` (the matching ones) changes only under the
 * table's write lock. */
#include "tenants.h"
#include "config.h"
#include "util.h"
#include "regfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

int fosd_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t acc = 0;
	for (size_t i = 0; i < n; i++)
		acc |= (uint8_t)(x[i] ^ y[i]);
	/* 1 when acc == 0, without a branch on the data */
	return (int)(1u & (((unsigned)acc - 1u) >> 8));
}

static int tn_digest(const char *s, size_t len, uint8_t out[32])
{
	return mbedtls_sha256_ret((const unsigned char *)s, len, out, 0) ? -1 : 0;
}

static void tn_free_tenant(fosd_tenant *t)
{
	if (!t)
		return;
	explicit_bzero(t, sizeof *t);
	free(t);
}

void fosd_tenants_free(fosd_tenants *ts)
{
	if (!ts)
		return;
	for (int i = 0; i < ts->n_all; i++)
		tn_free_tenant(ts->all[i]);
	free(ts->all);
	free(ts->t);
	pthread_rwlock_destroy(&ts->mu);
	free(ts);
}

/* An empty table with its lock; NULL when out of memory. */
static fosd_tenants *tn_table_new(void)
{
	fosd_tenants *ts = calloc(1, sizeof *ts);
	if (!ts)
		return NULL;
	pthread_rwlockattr_t at;
	int bad = pthread_rwlockattr_init(&at);
	/* a reload must not wait behind an endless stream of readers */
	if (!bad)
		pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	if (bad || pthread_rwlock_init(&ts->mu, &at)) {
		if (!bad)
			pthread_rwlockattr_destroy(&at);
		free(ts);
		return NULL;
	}
	pthread_rwlockattr_destroy(&at);
	return ts;
}

/* Room for `more` entries in all. Returns 0 or -1. */
static int tn_reserve_all(fosd_tenants *ts, int more)
{
	if (ts->n_all + more <= ts->cap_all)
		return 0;
	int nc = ts->cap_all ? ts->cap_all : 16;
	while (nc < ts->n_all + more)
		nc *= 2;
	fosd_tenant **na = realloc(ts->all, sizeof *na * (size_t)nc);
	if (!na)
		return -1;
	ts->all = na;
	ts->cap_all = nc;
	return 0;
}

static int tn_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > FOSD_TENANT_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return 0;
	}
	return 1;
}

/* One whitespace-separated field of [p, end): sets *f and *fl, returns the position after it. */
static const char *tn_field(const char *p, const char *end, const char **f, size_t *fl)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	const char *s = p;
	while (p < end && *p != ' ' && *p != '\t' && *p != '\r')
		p++;
	*f = s;
	*fl = (size_t)(p - s);
	return p;
}

/* key=value quota options of a line. Returns 0 or -1 with msg. */
static int tn_option(fosd_tenant *t, const char *f, size_t fl, const char *origin, int lineno, char *msg, size_t msgsz)
{
	char buf[128];
	if (fl >= sizeof buf) {
		snprintf(msg, msgsz, "%s:%d: option too long", origin, lineno);
		return -1;
	}
	memcpy(buf, f, fl);
	buf[fl] = 0;
	char *eq = strchr(buf, '=');
	if (!eq) {
		snprintf(msg, msgsz, "%s:%d: unexpected field %zu bytes long after the secret (options are "
			 "cache=SIZE, contexts=SIZE, inflight=N)", origin, lineno, fl);
		return -1;
	}
	*eq = 0;
	const char *v = eq + 1;
	uint64_t u;
	if (!strcmp(buf, "cache") || !strcmp(buf, "contexts")) {
		if (fosd_parse_size(v, &u)) {
			snprintf(msg, msgsz, "%s:%d: %s=%s is not a size (e.g. 512M, 8G)", origin, lineno, buf, v);
			return -1;
		}
		if (!strcmp(buf, "cache"))
			t->quota_cache = u;
		else
			t->quota_context = u;
		return 0;
	}
	if (!strcmp(buf, "inflight")) {
		char *e;
		errno = 0;
		long n = strtol(v, &e, 10);
		if (errno || e == v || *e || n < 0 || n > 1000000) {
			snprintf(msg, msgsz, "%s:%d: inflight=%s is not a count in [0, 1000000]", origin, lineno, v);
			return -1;
		}
		t->quota_inflight = (int)n;
		return 0;
	}
	snprintf(msg, msgsz, "%s:%d: unknown option '%s' (cache, contexts or inflight)", origin, lineno, buf);
	return -1;
}

int fosd_tenants_parse(const char *text, size_t len, const char *origin, const fosd_tenant_defaults *d,
		       fosd_tenants **out, char *msg, size_t msgsz)
{
	*out = NULL;
	fosd_tenants *ts = tn_table_new();
	if (!ts) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	int lineno = 0;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		lineno++;
		/* a NUL would end the secret or the line early for anything reading it as a C string */
		if (memchr(p, 0, (size_t)(le - p))) {
			snprintf(msg, msgsz, "%s:%d: a NUL byte (tokens and names are text)", origin, lineno);
			goto fail;
		}
		/* a trailing comment starts at " #" (a secret may hold '#', but not start with it) */
		const char *ce = le;
		for (const char *q = p; q < le; q++)
			if (*q == '#' && (q == p || q[-1] == ' ' || q[-1] == '\t')) {
				ce = q;
				break;
			}
		const char *name, *secret, *f;
		size_t nlen, slen, fl;
		const char *q = tn_field(p, ce, &name, &nlen);
		p = nl ? nl + 1 : end;
		if (nlen == 0)
			continue;
		q = tn_field(q, ce, &secret, &slen);
		if (!tn_name_ok(name, nlen)) {
			snprintf(msg, msgsz, "%s:%d: the tenant name must be 1 to %d bytes of [A-Za-z0-9._-]", origin, lineno,
				 FOSD_TENANT_NAME_MAX);
			goto fail;
		}
		if (slen == 0) {
			snprintf(msg, msgsz, "%s:%d: tenant '%.*s' has no secret ('NAME SECRET' expected)", origin, lineno,
				 (int)nlen, name);
			goto fail;
		}
		if (slen < FOSD_SECRET_MIN || slen > FOSD_SECRET_MAX) {
			snprintf(msg, msgsz, "%s:%d: the secret of tenant '%.*s' is %zu bytes; %d to %d are required", origin,
				 lineno, (int)nlen, name, slen, FOSD_SECRET_MIN, FOSD_SECRET_MAX);
			goto fail;
		}
		for (size_t i = 0; i < slen; i++)
			if ((unsigned char)secret[i] < 0x21 || (unsigned char)secret[i] > 0x7e) {
				snprintf(msg, msgsz, "%s:%d: the secret of tenant '%.*s' has a byte outside printable ASCII",
					 origin, lineno, (int)nlen, name);
				goto fail;
			}
		if (ts->n_all >= FOSD_MAX_TENANTS) {
			snprintf(msg, msgsz, "%s:%d: more than %d tenants", origin, lineno, FOSD_MAX_TENANTS);
			goto fail;
		}
		fosd_tenant *t = calloc(1, sizeof *t);
		if (!t || tn_reserve_all(ts, 1)) {
			free(t);
			snprintf(msg, msgsz, "out of memory");
			goto fail;
		}
		ts->all[ts->n_all++] = t; /* owned by the table from here on */
		memcpy(t->name, name, nlen);
		t->name[nlen] = 0;
		atomic_init(&t->quota_cache, d ? d->cache : 0);
		atomic_init(&t->quota_context, d ? d->context : 0);
		atomic_init(&t->quota_inflight, d ? d->inflight : 0);
		t->salt = fosd_random_u64();
		atomic_init(&t->inflight, 0);
		if (tn_digest(secret, slen, t->digest)) {
			snprintf(msg, msgsz, "%s:%d: cannot hash the secret", origin, lineno);
			goto fail;
		}
		for (;;) {
			q = tn_field(q, ce, &f, &fl);
			if (!fl)
				break;
			if (tn_option(t, f, fl, origin, lineno, msg, msgsz))
				goto fail;
		}
		for (int i = 0; i < ts->n_all - 1; i++) {
			if (!strcmp(ts->all[i]->name, t->name)) {
				snprintf(msg, msgsz, "%s:%d: tenant '%s' is listed twice", origin, lineno, t->name);
				goto fail;
			}
			if (fosd_ct_equal(ts->all[i]->digest, t->digest, 32)) {
				snprintf(msg, msgsz, "%s:%d: tenant '%s' has the same secret as tenant '%s'", origin, lineno,
					 t->name, ts->all[i]->name);
				goto fail;
			}
		}
	}
	/* a fresh table: every object it owns matches */
	if (ts->n_all > 0 && !(ts->t = malloc(sizeof *ts->t * (size_t)ts->n_all))) {
		snprintf(msg, msgsz, "out of memory");
		goto fail;
	}
	for (int i = 0; i < ts->n_all; i++)
		ts->t[i] = ts->all[i];
	ts->n = ts->n_all;
	if (ts->n == 0) {
		snprintf(msg, msgsz, "%s: no tenants (one 'NAME SECRET' a line expected)", origin);
		goto fail;
	}
	*out = ts;
	return 0;
fail:
	fosd_tenants_free(ts);
	return -1;
}

int fosd_tenants_load(const char *path, const fosd_tenant_defaults *d, fosd_tenants **out, int *insecure,
		      char *msg, size_t msgsz)
{
	*out = NULL;
	*insecure = 0;
	struct stat sb;
	size_t got;
	char *buf = fos_read_regular(path, FOSD_TOKENS_FILE_MAX, &got, &sb, msg, msgsz);
	if (!buf)
		return -1;
	*insecure = (sb.st_mode & 077) != 0;
	int rc = fosd_tenants_parse(buf, got, path, d, out, msg, msgsz);
	explicit_bzero(buf, got);
	free(buf);
	return rc;
}

fosd_tenant *fosd_tenants_match(fosd_tenants *ts, const char *token, size_t len)
{
	if (!ts || len == 0 || len > FOSD_SECRET_MAX)
		return NULL;
	/* 1 when some byte is NUL, without a branch on the data: no secret holds one */
	unsigned nul = 0;
	for (size_t i = 0; i < len; i++)
		nul |= 1u & (((unsigned)(uint8_t)token[i] - 1u) >> 8);
	uint8_t dg[32];
	if (tn_digest(token, len, dg))
		return NULL;
	/* look at every tenant and select the match with masks, not branches */
	uintptr_t found = 0;
	pthread_rwlock_rdlock(&ts->mu);
	for (int i = 0; i < ts->n; i++) {
		uintptr_t mask = (uintptr_t)0 - (uintptr_t)fosd_ct_equal(dg, ts->t[i]->digest, 32);
		found |= mask & (uintptr_t)ts->t[i];
	}
	pthread_rwlock_unlock(&ts->mu);
	found &= (uintptr_t)nul - 1u;
	explicit_bzero(dg, sizeof dg);
	return (fosd_tenant *)found;
}

fosd_tenant *fosd_tenants_find(fosd_tenants *ts, const char *name)
{
	if (!ts)
		return NULL;
	fosd_tenant *r = NULL;
	pthread_rwlock_rdlock(&ts->mu);
	for (int i = 0; i < ts->n && !r; i++)
		if (!strcmp(ts->t[i]->name, name))
			r = ts->t[i];
	pthread_rwlock_unlock(&ts->mu);
	return r;
}

/* The object of ts (current or retired) with t's name and secret, or NULL. */
static fosd_tenant *tn_same(const fosd_tenants *ts, const fosd_tenant *t)
{
	for (int i = 0; i < ts->n_all; i++)
		if (!strcmp(ts->all[i]->name, t->name) && fosd_ct_equal(ts->all[i]->digest, t->digest, 32))
			return ts->all[i];
	return NULL;
}

static int tn_in(fosd_tenant *const *t, int n, const fosd_tenant *x)
{
	for (int i = 0; i < n; i++)
		if (t[i] == x)
			return 1;
	return 0;
}

int fosd_tenants_replace(fosd_tenants *ts, fosd_tenants *fresh, fosd_tenant_note note, void *arg, char *msg,
			 size_t msgsz)
{
	int n = fresh->n, rc = -1;
	fosd_tenant **nt = malloc(sizeof *nt * (size_t)(n ? n : 1));
	/* all of ts only grows here, and ts's readers never look at it: no lock needed for it; the
	 * room is made first so that nothing below can fail half way */
	if (!nt || tn_reserve_all(ts, n)) {
		snprintf(msg, msgsz, "out of memory");
		free(nt);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		fosd_tenant *f = fresh->t[i], *old = tn_same(ts, f);
		if (old) {
			/* the same tenant: its object (weights, contexts, usage, salt) stays, with the new quotas */
			atomic_store(&old->quota_cache, atomic_load(&f->quota_cache));
			atomic_store(&old->quota_context, atomic_load(&f->quota_context));
			atomic_store(&old->quota_inflight, atomic_load(&f->quota_inflight));
			nt[i] = old;
		} else {
			nt[i] = f;
		}
	}
	for (int i = 0; i < n; i++)
		if (nt[i] == fresh->t[i]) {
			ts->all[ts->n_all++] = nt[i];
			/* ts owns it now: fresh must not free it */
			for (int j = 0; j < fresh->n_all; j++)
				if (fresh->all[j] == nt[i])
					fresh->all[j] = NULL;
		}
	pthread_rwlock_wrlock(&ts->mu);
	fosd_tenant **old_t = ts->t;
	int old_n = ts->n;
	ts->t = nt;
	ts->n = n;
	pthread_rwlock_unlock(&ts->mu);
	if (note) {
		for (int i = 0; i < n; i++)
			note(arg, nt[i], tn_in(old_t, old_n, nt[i]) ? FOSD_TENANT_KEPT : FOSD_TENANT_ADDED);
		for (int i = 0; i < old_n; i++)
			if (!tn_in(nt, n, old_t[i]))
				note(arg, old_t[i], FOSD_TENANT_REMOVED);
	}
	free(old_t);
	rc = 0;
out:
	fosd_tenants_free(fresh);
	return rc;
}
