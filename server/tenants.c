/* tenants.c: the tokens file (parsing, permission check), constant-time token matching on SHA-256
 * digests, and the tenant table (see tenants.h). No secret ever reaches a log line or a message. */
#include "tenants.h"
#include "config.h"
#include "util.h"

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

void fosd_tenants_free(fosd_tenants *ts)
{
	if (!ts)
		return;
	if (ts->t)
		explicit_bzero(ts->t, sizeof *ts->t * (size_t)ts->n);
	free(ts->t);
	free(ts);
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
	fosd_tenants *ts = calloc(1, sizeof *ts);
	if (!ts) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	int cap = 0, lineno = 0;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		lineno++;
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
		if (ts->n >= FOSD_MAX_TENANTS) {
			snprintf(msg, msgsz, "%s:%d: more than %d tenants", origin, lineno, FOSD_MAX_TENANTS);
			goto fail;
		}
		if (ts->n == cap) {
			int nc = cap ? cap * 2 : 16;
			fosd_tenant *nt = calloc((size_t)nc, sizeof *nt);
			if (!nt) {
				snprintf(msg, msgsz, "out of memory");
				goto fail;
			}
			if (ts->t) {
				memcpy(nt, ts->t, sizeof *nt * (size_t)ts->n);
				explicit_bzero(ts->t, sizeof *nt * (size_t)ts->n);
				free(ts->t);
			}
			ts->t = nt;
			cap = nc;
		}
		fosd_tenant *t = &ts->t[ts->n];
		memset(t, 0, sizeof *t);
		memcpy(t->name, name, nlen);
		t->name[nlen] = 0;
		t->quota_cache = d ? d->cache : 0;
		t->quota_context = d ? d->context : 0;
		t->quota_inflight = d ? d->inflight : 0;
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
		for (int i = 0; i < ts->n; i++) {
			if (!strcmp(ts->t[i].name, t->name)) {
				snprintf(msg, msgsz, "%s:%d: tenant '%s' is listed twice", origin, lineno, t->name);
				goto fail;
			}
			if (fosd_ct_equal(ts->t[i].digest, t->digest, 32)) {
				snprintf(msg, msgsz, "%s:%d: tenant '%s' has the same secret as tenant '%s'", origin, lineno,
					 t->name, ts->t[i].name);
				goto fail;
			}
		}
		ts->n++;
	}
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
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		snprintf(msg, msgsz, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	if (sb.st_size > (16 << 20)) {
		snprintf(msg, msgsz, "%s: larger than 16 MiB", path);
		close(fd);
		return -1;
	}
	*insecure = (sb.st_mode & 077) != 0;
	size_t n = (size_t)sb.st_size, got = 0;
	char *buf = malloc(n + 1);
	if (!buf) {
		snprintf(msg, msgsz, "out of memory");
		close(fd);
		return -1;
	}
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	int rc = fosd_tenants_parse(buf, got, path, d, out, msg, msgsz);
	explicit_bzero(buf, n + 1);
	free(buf);
	return rc;
}

fosd_tenant *fosd_tenants_match(fosd_tenants *ts, const char *token, size_t len)
{
	if (!ts || len == 0 || len > FOSD_SECRET_MAX)
		return NULL;
	uint8_t dg[32];
	if (tn_digest(token, len, dg))
		return NULL;
	/* look at every tenant and select the match with masks, not branches */
	uintptr_t found = 0;
	for (int i = 0; i < ts->n; i++) {
		uintptr_t mask = (uintptr_t)0 - (uintptr_t)fosd_ct_equal(dg, ts->t[i].digest, 32);
		found |= mask & (uintptr_t)&ts->t[i];
	}
	explicit_bzero(dg, sizeof dg);
	return (fosd_tenant *)found;
}

fosd_tenant *fosd_tenants_find(fosd_tenants *ts, const char *name)
{
	for (int i = 0; ts && i < ts->n; i++)
		if (!strcmp(ts->t[i].name, name))
			return &ts->t[i];
	return NULL;
}
