/* npy.c: the .npy reader and writer (see npy.h). The header is a Python dict literal; this file has a
 * small strict parser for the three keys numpy writes ('descr', 'fortran_order', 'shape') and
 * refuses everything else with a message naming what is wrong. */
#include "npy.h"
#include "regfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Puts "prefix: " in front of err->msg (keeps the rc). */
static int npy_prefix(fos_err *err, const char *prefix)
{
	if (!err)
		return FOS_EINVAL;
	char tmp[sizeof err->msg];
	memcpy(tmp, err->msg, sizeof tmp);
	tmp[sizeof tmp - 1] = 0;
	return fos_seterr(err, err->rc, "%s: %s", prefix, tmp);
}

size_t npy_dtype_size(int dtype)
{
	return dtype == NPY_F4 ? 4 : (dtype == NPY_U2 ? 2 : 1);
}

const char *npy_dtype_descr(int dtype)
{
	return dtype == NPY_F4 ? "<f4" : (dtype == NPY_U2 ? "<u2" : "|u1");
}

const char *npy_dtype_human(int dtype)
{
	return dtype == NPY_F4 ? "float32 ('<f4')" : (dtype == NPY_U2 ? "bf16 ('<u2')" : "uint8 ('|u1')");
}

char *npy_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
	size_t n = 0;
	if (!cap)
		return buf;
	buf[0] = 0;
	int w = snprintf(buf, cap, "(");
	n = w > 0 ? (size_t)w : 0;
	for (int i = 0; i < ndim && n < cap; i++) {
		w = snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	if (n < cap)
		snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")");
	return buf;
}

void npy_free(npy_array *a)
{
	if (!a)
		return;
	free(a->data);
	memset(a, 0, sizeof *a);
}

/* ---- header parsing ---------------------------------------------------------------------------- */

typedef struct npy_lex {
	const char *start, *p, *end;
} npy_lex;

static void npy_skip_ws(npy_lex *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
		l->p++;
}

static size_t npy_off(const npy_lex *l)
{
	return (size_t)(l->p - l->start);
}

/* What the lexer sees next, for messages: "'x'" or "the end of the header". */
static const char *npy_next_desc(const npy_lex *l, char *buf, size_t cap)
{
	if (l->p >= l->end)
		snprintf(buf, cap, "the end of the header");
	else
		snprintf(buf, cap, "'%c'", *l->p);
	return buf;
}

static int npy_expect(npy_lex *l, char c, const char *where, fos_err *err)
{
	npy_skip_ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return FOS_OK;
	}
	char nb[32];
	return fos_seterr(err, FOS_EINVAL, "bad .npy header: expected '%c' %s at offset %zu, found %s", c, where,
			  npy_off(l), npy_next_desc(l, nb, sizeof nb));
}

/* A Python string literal without escapes: 'abc' or "abc". */
static int npy_parse_string(npy_lex *l, char *out, size_t cap, const char *what, fos_err *err)
{
	npy_skip_ws(l);
	char nb[32];
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: expected a quoted %s at offset %zu, found %s", what,
				  npy_off(l), npy_next_desc(l, nb, sizeof nb));
	char q = *l->p++;
	size_t n = 0;
	while (l->p < l->end && *l->p != q) {
		if (*l->p == '\\')
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: escape sequence in %s at offset %zu", what,
					  npy_off(l));
		if (n + 1 >= cap)
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: %s at offset %zu is too long", what,
					  npy_off(l));
		out[n++] = *l->p++;
	}
	if (l->p >= l->end)
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: unterminated string in %s", what);
	l->p++;
	out[n] = 0;
	return FOS_OK;
}

static int npy_is_ident(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* True or False. */
static int npy_parse_bool(npy_lex *l, int *v, fos_err *err)
{
	npy_skip_ws(l);
	size_t left = (size_t)(l->end - l->p);
	if (left >= 4 && !memcmp(l->p, "True", 4) && (left == 4 || !npy_is_ident(l->p[4]))) {
		l->p += 4;
		*v = 1;
		return FOS_OK;
	}
	if (left >= 5 && !memcmp(l->p, "False", 5) && (left == 5 || !npy_is_ident(l->p[5]))) {
		l->p += 5;
		*v = 0;
		return FOS_OK;
	}
	return fos_seterr(err, FOS_EINVAL, "bad .npy header: 'fortran_order' must be True or False (offset %zu)",
			  npy_off(l));
}

/* A nonnegative decimal integer, optionally with the 'L' suffix old Python 2 numpy wrote. */
static int npy_parse_dim(npy_lex *l, int64_t *v, fos_err *err)
{
	npy_skip_ws(l);
	char nb[32];
	if (l->p < l->end && *l->p == '-')
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: negative dimension in 'shape' at offset %zu",
				  npy_off(l));
	if (l->p >= l->end || *l->p < '0' || *l->p > '9')
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: expected an integer in 'shape' at offset %zu, found %s",
				  npy_off(l), npy_next_desc(l, nb, sizeof nb));
	int64_t x = 0;
	while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
		int d = *l->p - '0';
		if (x > (INT64_MAX - d) / 10)
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: dimension too large in 'shape' at offset %zu",
					  npy_off(l));
		x = x * 10 + d;
		l->p++;
	}
	if (l->p < l->end && (*l->p == 'L' || *l->p == 'l'))
		l->p++;
	if (l->p < l->end && npy_is_ident(*l->p))
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: bad integer in 'shape' at offset %zu", npy_off(l));
	*v = x;
	return FOS_OK;
}

/* A Python tuple of dimensions: (), (n,), (a, b), (a, b,) ... */
static int npy_parse_shape(npy_lex *l, npy_array *a, fos_err *err)
{
	int rc = npy_expect(l, '(', "to open 'shape' (a tuple)", err);
	if (rc)
		return rc;
	a->ndim = 0;
	npy_skip_ws(l);
	if (l->p < l->end && *l->p == ')') {
		l->p++;
		return FOS_OK;
	}
	for (;;) {
		if (a->ndim >= NPY_MAX_DIMS)
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: more than %d dimensions in 'shape'",
					  NPY_MAX_DIMS);
		int64_t d = 0;
		if ((rc = npy_parse_dim(l, &d, err)))
			return rc;
		a->shape[a->ndim++] = d;
		npy_skip_ws(l);
		char nb[32];
		if (l->p < l->end && *l->p == ',') {
			l->p++;
			npy_skip_ws(l);
			if (l->p < l->end && *l->p == ')') {
				l->p++;
				return FOS_OK;
			}
			continue;
		}
		if (l->p < l->end && *l->p == ')') {
			if (a->ndim == 1)
				return fos_seterr(err, FOS_EINVAL,
						  "bad .npy header: 'shape' (%lld) is not a tuple (a 1-d shape is written (%lld,))",
						  (long long)a->shape[0], (long long)a->shape[0]);
			l->p++;
			return FOS_OK;
		}
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: expected ',' or ')' in 'shape' at offset %zu, found %s",
				  npy_off(l), npy_next_desc(l, nb, sizeof nb));
	}
}

static int npy_parse_descr(npy_lex *l, npy_array *a, fos_err *err)
{
	npy_skip_ws(l);
	if (l->p < l->end && (*l->p == '[' || *l->p == '{'))
		return fos_seterr(err, FOS_EINVAL, "structured dtypes are not supported (fos reads '<u2' bf16 bits, "
						    "'<f4' float32, '|u1' uint8)");
	char d[40];
	int rc = npy_parse_string(l, d, sizeof d, "'descr'", err);
	if (rc)
		return rc;
	if (!strcmp(d, "<u2"))
		a->dtype = NPY_U2;
	else if (!strcmp(d, "<f4"))
		a->dtype = NPY_F4;
	else if (!strcmp(d, "|u1") || !strcmp(d, "<u1"))
		a->dtype = NPY_U1;
	else
		return fos_seterr(err, FOS_EINVAL, "unsupported dtype '%s' (fos reads '<u2' bf16 bits, '<f4' float32, "
						    "'|u1' uint8%s)",
				  d, strstr(d, "V2") ? "; save bf16 as its bit pattern, x.view(np.uint16)" : "");
	return FOS_OK;
}

/* Checks magic and version; gives the preamble length (10 or 12) and the header length. */
static int npy_preamble(const unsigned char *b, size_t len, size_t *prefix, size_t *hlen, fos_err *err)
{
	if (len < 10 || memcmp(b, npy_magic, 6)) {
		if (len >= 6 && memcmp(b, npy_magic, 6))
			return fos_seterr(err, FOS_EINVAL, "not a .npy file (no \\x93NUMPY magic at the start)");
		return fos_seterr(err, FOS_EINVAL, "not a .npy file (%zu bytes, too short for the .npy preamble)", len);
	}
	int major = b[6], minor = b[7];
	if ((major != 1 && major != 2 && major != 3) || minor != 0)
		return fos_seterr(err, FOS_EINVAL, "unsupported .npy format version %d.%d (1.0, 2.0 and 3.0 are read)",
				  major, minor);
	if (major == 1) {
		*prefix = 10;
		*hlen = (size_t)b[8] | ((size_t)b[9] << 8);
	} else {
		if (len < 12)
			return fos_seterr(err, FOS_EINVAL, "not a .npy file (%zu bytes, too short for the .npy preamble)", len);
		*prefix = 12;
		*hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
	}
	if (*hlen > NPY_MAX_HEADER)
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: header length %zu is above the limit of %u bytes",
				  *hlen, NPY_MAX_HEADER);
	return FOS_OK;
}

int npy_parse_header(const void *buf, size_t len, npy_array *a, size_t *data_offset, fos_err *err)
{
	const unsigned char *b = (const unsigned char *)buf;
	memset(a, 0, sizeof *a);
	size_t prefix, hlen;
	int rc = npy_preamble(b, len, &prefix, &hlen, err);
	if (rc)
		return rc;
	if (len - prefix < hlen)
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: truncated (header length %zu, only %zu bytes follow)",
				  hlen, len - prefix);
	const char *h = (const char *)b + prefix;
	for (size_t i = 0; i < hlen; i++) {
		unsigned char c = (unsigned char)h[i];
		if (c == 0 || c >= 0x80 || (c < 0x20 && c != '\n' && c != '\r' && c != '\t'))
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: unexpected byte 0x%02x at offset %zu", c, i);
	}
	npy_lex l = {h, h, h + hlen};
	if ((rc = npy_expect(&l, '{', "at the start of the header (a dict)", err)))
		return rc;
	int seen_descr = 0, seen_fortran = 0, seen_shape = 0, fortran = 0;
	for (;;) {
		npy_skip_ws(&l);
		if (l.p < l.end && *l.p == '}') {
			l.p++;
			break;
		}
		char key[32];
		if ((rc = npy_parse_string(&l, key, sizeof key, "key", err)))
			return rc;
		if ((rc = npy_expect(&l, ':', "after a key", err)))
			return rc;
		int *seen;
		if (!strcmp(key, "descr")) {
			seen = &seen_descr;
			if (!*seen && (rc = npy_parse_descr(&l, a, err)))
				return rc;
		} else if (!strcmp(key, "fortran_order")) {
			seen = &seen_fortran;
			if (!*seen && (rc = npy_parse_bool(&l, &fortran, err)))
				return rc;
		} else if (!strcmp(key, "shape")) {
			seen = &seen_shape;
			if (!*seen && (rc = npy_parse_shape(&l, a, err)))
				return rc;
		} else {
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: unknown key '%s'", key);
		}
		if (*seen)
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: key '%s' appears twice", key);
		*seen = 1;
		npy_skip_ws(&l);
		if (l.p < l.end && *l.p == ',') {
			l.p++;
			continue;
		}
		if (l.p < l.end && *l.p == '}') {
			l.p++;
			break;
		}
		char nb[32];
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: expected ',' or '}' at offset %zu, found %s",
				  npy_off(&l), npy_next_desc(&l, nb, sizeof nb));
	}
	npy_skip_ws(&l);
	if (l.p != l.end)
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: unexpected text after the dict at offset %zu",
				  npy_off(&l));
	if (!seen_descr || !seen_fortran || !seen_shape)
		return fos_seterr(err, FOS_EINVAL, "bad .npy header: missing key '%s'",
				  !seen_descr ? "descr" : (!seen_fortran ? "fortran_order" : "shape"));
	if (fortran)
		return fos_seterr(err, FOS_EINVAL, "fortran_order True is not supported (save a C-ordered array, "
						    "e.g. np.save(f, np.ascontiguousarray(x)))");
	size_t esize = npy_dtype_size(a->dtype), count = 1;
	for (int i = 0; i < a->ndim; i++) {
		uint64_t d = (uint64_t)a->shape[i];
		if (d && count > (SIZE_MAX / esize) / d) {
			char sb[160];
			return fos_seterr(err, FOS_EINVAL, "bad .npy header: shape %s is too large",
					  npy_shape_str(a->ndim, a->shape, sb, sizeof sb));
		}
		count *= (size_t)d;
	}
	a->count = count;
	a->nbytes = count * esize;
	*data_offset = prefix + hlen;
	return FOS_OK;
}

static int npy_size_mismatch(const npy_array *a, size_t have, fos_err *err)
{
	char sb[160];
	npy_shape_str(a->ndim, a->shape, sb, sizeof sb);
	if (have < a->nbytes)
		return fos_seterr(err, FOS_EINVAL, "truncated .npy data: shape %s of %s needs %zu bytes, the file has %zu",
				  sb, npy_dtype_descr(a->dtype), a->nbytes, have);
	return fos_seterr(err, FOS_EINVAL, "%zu bytes of trailing data after the array (shape %s of %s)",
			  have - a->nbytes, sb, npy_dtype_descr(a->dtype));
}

static void *npy_alloc(size_t nbytes)
{
	size_t n = (nbytes + 63) & ~(size_t)63;
	if (n < nbytes)
		return NULL;
	return aligned_alloc(64, n ? n : 64);
}

int npy_read_mem(const void *buf, size_t len, npy_array *a, fos_err *err)
{
	size_t off;
	int rc = npy_parse_header(buf, len, a, &off, err);
	if (rc)
		return rc;
	if (len - off != a->nbytes) {
		rc = npy_size_mismatch(a, len - off, err);
		memset(a, 0, sizeof *a);
		return rc;
	}
	a->data = npy_alloc(a->nbytes);
	if (!a->data) {
		memset(a, 0, sizeof *a);
		return fos_seterr(err, FOS_ENOMEM, "out of memory for %zu bytes of array data", len - off);
	}
	if (a->nbytes)
		memcpy(a->data, (const char *)buf + off, a->nbytes);
	return FOS_OK;
}

/* read() until n bytes or EOF; returns the count, or -1 on an error (errno set). */
static ssize_t npy_read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int npy_read_fd(int fd, const struct stat *st, uint64_t max_count, const char *what, npy_array *a,
		       fos_err *err)
{
	unsigned char pre[12];
	ssize_t n = npy_read_full(fd, pre, sizeof pre);
	if (n < 0)
		return fos_seterr(err, FOS_EINVAL, "cannot read: %s", strerror(errno));
	size_t prefix, hlen;
	int rc = npy_preamble(pre, (size_t)n, &prefix, &hlen, err);
	if (rc)
		return rc;
	size_t total = prefix + hlen;
	unsigned char *hb = malloc(total > (size_t)n ? total : (size_t)n);
	if (!hb)
		return fos_seterr(err, FOS_ENOMEM, "out of memory for a %zu-byte header", total);
	memcpy(hb, pre, (size_t)n);
	size_t have = (size_t)n;
	if (total > have) {
		n = npy_read_full(fd, hb + have, total - have);
		if (n < 0) {
			free(hb);
			return fos_seterr(err, FOS_EINVAL, "cannot read: %s", strerror(errno));
		}
		have += (size_t)n;
	}
	size_t off;
	rc = npy_parse_header(hb, have, a, &off, err);
	/* bytes read past the header (only when the header was shorter than 12 - prefix bytes) */
	size_t extra = have > off && rc == FOS_OK ? have - off : 0;
	unsigned char extra_bytes[12];
	if (extra)
		memcpy(extra_bytes, hb + off, extra);
	free(hb);
	if (rc)
		return rc;
	if ((uint64_t)a->count > max_count) {
		char sb[NPY_MAX_DIMS * 22 + 8];
		rc = fos_seterr(err, FOS_EINVAL, "shape %s has %llu elements, more than %llu (%s)",
				npy_shape_str(a->ndim, a->shape, sb, sizeof sb), (unsigned long long)a->count,
				(unsigned long long)max_count, what);
		memset(a, 0, sizeof *a);
		return rc;
	}
	size_t fsize = (size_t)st->st_size; /* a regular file's (npy_read) */
	if (fsize < off || fsize - off != a->nbytes) {
		rc = npy_size_mismatch(a, fsize < off ? 0 : fsize - off, err);
		memset(a, 0, sizeof *a);
		return rc;
	}
	a->data = npy_alloc(a->nbytes);
	if (!a->data) {
		memset(a, 0, sizeof *a);
		return fos_seterr(err, FOS_ENOMEM, "out of memory for %zu bytes of array data", a->nbytes);
	}
	size_t got = extra < a->nbytes ? extra : a->nbytes;
	memcpy(a->data, extra_bytes, got);
	if (a->nbytes > got) {
		n = npy_read_full(fd, (char *)a->data + got, a->nbytes - got);
		if (n < 0) {
			rc = fos_seterr(err, FOS_EINVAL, "cannot read: %s", strerror(errno));
			npy_free(a);
			return rc;
		}
		got += (size_t)n;
	}
	unsigned char one;
	size_t more = extra > a->nbytes ? extra - a->nbytes : 0;
	if (got == a->nbytes && !more) {
		n = npy_read_full(fd, &one, 1);
		if (n < 0) {
			rc = fos_seterr(err, FOS_EINVAL, "cannot read: %s", strerror(errno));
			npy_free(a);
			return rc;
		}
		more = (size_t)n;
	}
	if (got != a->nbytes || more) {
		npy_array h = *a;
		h.data = NULL;
		rc = npy_size_mismatch(&h, got + more, err);
		npy_free(a);
		return rc;
	}
	return FOS_OK;
}

int npy_read(const char *path, npy_array *a, fos_err *err)
{
	return npy_read_max(path, UINT64_MAX, "", a, err);
}

int npy_read_max(const char *path, uint64_t max_count, const char *what, npy_array *a, fos_err *err)
{
	memset(a, 0, sizeof *a);
	struct stat st;
	char why[sizeof err->msg];
	/* a regular file only (a FIFO or /dev/zero is refused before any read); its size is bounded
	 * by the header's shape, checked against the file's before the data is read */
	int fd = fos_open_regular(path, FOS_REGFILE_ANY, &st, why, sizeof why);
	if (fd < 0)
		return fos_seterr(err, FOS_EINVAL, "%s", why);
	int rc = npy_read_fd(fd, &st, max_count, what, a, err);
	close(fd);
	if (rc)
		npy_prefix(err, path);
	return rc;
}

/* ---- writing ----------------------------------------------------------------------------------- */

size_t npy_header_build(char *buf, size_t cap, int dtype, int ndim, const int64_t *shape)
{
	if (dtype < NPY_U1 || dtype > NPY_F4 || ndim < 0 || ndim > NPY_MAX_DIMS)
		return 0;
	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0)
			return 0;
	char sb[NPY_MAX_DIMS * 22 + 8];
	npy_shape_str(ndim, shape, sb, sizeof sb);
	char dict[sizeof sb + 80];
	int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
			  npy_dtype_descr(dtype), sb);
	if (dl < 0 || (size_t)dl >= sizeof dict)
		return 0;
	/* numpy: pad = 64 - ((preamble + len(dict) + 1) % 64) spaces, then '\n' */
	size_t hl = (size_t)dl + 1, prefix = 10;
	size_t pad = 64 - ((prefix + hl) % 64);
	if (hl + pad > 65535) {
		prefix = 12;
		pad = 64 - ((prefix + hl) % 64);
	}
	size_t total = prefix + hl + pad;
	if (total > cap)
		return 0;
	size_t hlen = hl + pad;
	memcpy(buf, npy_magic, 6);
	buf[6] = (char)(prefix == 10 ? 1 : 2);
	buf[7] = 0;
	buf[8] = (char)(hlen & 0xFF);
	buf[9] = (char)((hlen >> 8) & 0xFF);
	if (prefix == 12) {
		buf[10] = (char)((hlen >> 16) & 0xFF);
		buf[11] = (char)((hlen >> 24) & 0xFF);
	}
	memcpy(buf + prefix, dict, (size_t)dl);
	memset(buf + prefix + dl, ' ', pad);
	buf[total - 1] = '\n';
	return total;
}

static int npy_write_full(int fd, const void *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
		ssize_t w = write(fd, (const char *)buf + done, chunk);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

int npy_write(const char *path, int dtype, int ndim, const int64_t *shape, const void *data, fos_err *err)
{
	char hdr[1024];
	size_t hl = npy_header_build(hdr, sizeof hdr, dtype, ndim, shape);
	if (!hl)
		return fos_seterr(err, FOS_EINVAL, "%s: cannot write: bad dtype or shape", path);
	size_t count = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] && count > SIZE_MAX / 4 / (uint64_t)shape[i])
			return fos_seterr(err, FOS_EINVAL, "%s: cannot write: shape too large", path);
		count *= (size_t)shape[i];
	}
	size_t nbytes = count * npy_dtype_size(dtype);
	if (nbytes && !data)
		return fos_seterr(err, FOS_EINVAL, "%s: cannot write: no data", path);

	size_t plen = strlen(path);
	char *tmp = malloc(plen + 32);
	if (!tmp)
		return fos_seterr(err, FOS_ENOMEM, "%s: out of memory", path);
	snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		int e = errno;
		free(tmp);
		return fos_seterr(err, FOS_EINVAL, "%s: cannot write: %s", path, strerror(e));
	}
	int bad = npy_write_full(fd, hdr, hl) || npy_write_full(fd, data, nbytes);
	int e = errno;
	if (close(fd) && !bad) {
		bad = 1;
		e = errno;
	}
	if (!bad && rename(tmp, path)) {
		bad = 1;
		e = errno;
	}
	if (bad) {
		unlink(tmp);
		free(tmp);
		return fos_seterr(err, FOS_EINTERNAL, "%s: cannot write: %s", path, strerror(e));
	}
	free(tmp);
	return FOS_OK;
}
