/* safetensors.c: the .safetensors reader (see safetensors.h). The header's JSON is parsed by
 * jansson; this file checks what the format requires of it and reads tensors with pread, so a
 * checkpoint larger than memory is read one tensor at a time. */
#include "safetensors.h"
#include "fos_format.h"
#include "regfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int safet_fail(fos_err *err, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

static int safet_fail(fos_err *err, const char *path, const char *fmt, ...)
{
	char why[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return fos_seterr(err, FOS_EINVAL, "%s: %s", path, why);
}

/* Bytes per element of the dtypes of the safetensors format; 0 for a name fos does not know. */
static unsigned safet_elem_size(const char *dt)
{
	static const struct {
		const char *name;
		unsigned size;
	} sizes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
		     {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
		     {"F64", 8},  {"I64", 8}, {"U64", 8}};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		if (!strcmp(dt, sizes[i].name))
			return sizes[i].size;
	return 0;
}

static int safet_read_exact(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* One header entry into t; 0 or -1 with err set. */
static int safet_entry(const safet_file *f, const char *key, json_t *v, safet_tensor *t, fos_err *err)
{
	const char *p = f->path;
	if (!json_is_object(v))
		return safet_fail(err, p, "header entry '%s' is not an object", key);
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
	       *off = json_object_get(v, "data_offsets");
	if (!json_is_string(dt))
		return safet_fail(err, p, "tensor '%s': \"dtype\" is missing or not a string", key);
	if (!json_is_array(sh) || json_array_size(sh) > SAFET_MAX_DIMS)
		return safet_fail(err, p, "tensor '%s': \"shape\" is missing or not an array of at most %d sizes", key,
				  SAFET_MAX_DIMS);
	if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) ||
	    !json_is_integer(json_array_get(off, 1)))
		return safet_fail(err, p, "tensor '%s': \"data_offsets\" is missing or not [begin, end]", key);
	t->name = strdup(key);
	if (!t->name)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	snprintf(t->dtype_name, sizeof t->dtype_name, "%s", json_string_value(dt));
	t->dtype = !strcmp(json_string_value(dt), "BF16") ? SAFET_BF16
		   : !strcmp(json_string_value(dt), "F32") ? SAFET_F32
							   : SAFET_OTHER;
	t->ndim = (int)json_array_size(sh);
	t->count = 1;
	for (int i = 0; i < t->ndim; i++) {
		json_t *d = json_array_get(sh, (size_t)i);
		if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > ((json_int_t)1 << 40))
			return safet_fail(err, p, "tensor '%s': shape entry %d is not a size in [0, 2^40]", key, i);
		t->shape[i] = (int64_t)json_integer_value(d);
		if (t->shape[i] && t->count > (UINT64_C(1) << 56) / (uint64_t)t->shape[i])
			return safet_fail(err, p, "tensor '%s': shape has too many elements", key);
		t->count *= (uint64_t)t->shape[i];
	}
	json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
	if (b < 0 || e < b || (uint64_t)e > f->data_len)
		return safet_fail(err, p,
				  "tensor '%s': data_offsets [%lld, %lld] are not a range inside the %llu data bytes "
				  "(truncated file?)",
				  key, (long long)b, (long long)e, (unsigned long long)f->data_len);
	t->begin = (uint64_t)b;
	t->end = (uint64_t)e;
	unsigned es = safet_elem_size(t->dtype_name);
	if (es && t->end - t->begin != t->count * es)
		return safet_fail(err, p, "tensor '%s': %llu bytes for %llu %s elements (expected %llu)", key,
				  (unsigned long long)(t->end - t->begin), (unsigned long long)t->count, t->dtype_name,
				  (unsigned long long)(t->count * es));
	return 0;
}

static int safet_by_name(const void *a, const void *b)
{
	return strcmp(((const safet_tensor *)a)->name, ((const safet_tensor *)b)->name);
}

static int safet_by_begin(const void *a, const void *b)
{
	const safet_tensor *x = *(const safet_tensor *const *)a, *y = *(const safet_tensor *const *)b;
	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* No two tensors share a byte (empty tensors share none). */
static int safet_check_overlap(safet_file *f, fos_err *err)
{
	if (f->n < 2)
		return 0;
	const safet_tensor **o = malloc(f->n * sizeof *o);
	if (!o)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	for (size_t i = 0; i < f->n; i++)
		o[i] = &f->t[i];
	qsort(o, f->n, sizeof *o, safet_by_begin);
	int rc = 0;
	uint64_t end = 0;
	const safet_tensor *last = NULL;
	for (size_t i = 0; i < f->n && !rc; i++) {
		if (o[i]->begin == o[i]->end)
			continue;
		if (last && o[i]->begin < end)
			rc = safet_fail(err, f->path, "tensors '%s' and '%s' overlap in the data", last->name, o[i]->name);
		end = o[i]->end;
		last = o[i];
	}
	free(o);
	return rc;
}

static int safet_parse(safet_file *f, fos_err *err)
{
	const char *p = f->path;
	struct stat sb;
	if (fstat(f->fd, &sb))
		return fos_seterr(err, FOS_EINVAL, "%s: cannot stat: %s", p, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return safet_fail(err, p, "not a regular file");
	uint64_t size = (uint64_t)sb.st_size;
	unsigned char lenb[8];
	if (size < 8 || safet_read_exact(f->fd, lenb, 8, 0))
		return safet_fail(err, p, "not a safetensors file (%llu bytes, shorter than the 8-byte header length)",
				  (unsigned long long)size);
	uint64_t h = 0;
	for (int i = 7; i >= 0; i--)
		h = (h << 8) | lenb[i];
	if (h < 2 || h > SAFET_MAX_HEADER || h > size - 8)
		return safet_fail(err, p, "not a safetensors file (header length %llu, file %llu bytes)",
				  (unsigned long long)h, (unsigned long long)size);
	f->data_start = 8 + h;
	f->data_len = size - f->data_start;
	char *hdr = malloc(h);
	if (!hdr)
		return fos_seterr(err, FOS_ENOMEM, "out of memory reading a %llu-byte header", (unsigned long long)h);
	if (safet_read_exact(f->fd, hdr, h, 8)) {
		free(hdr);
		return fos_seterr(err, FOS_EINVAL, "%s: cannot read the header: %s", p, strerror(errno));
	}
	json_error_t je;
	json_t *root = json_loadb(hdr, h, JSON_REJECT_DUPLICATES, &je);
	free(hdr);
	if (!root)
		return safet_fail(err, p, "bad safetensors header (JSON line %d column %d: %s)", je.line, je.column,
				  je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return safet_fail(err, p, "bad safetensors header (not a JSON object)");
	}
	size_t cap = json_object_size(root);
	f->t = calloc(cap ? cap : 1, sizeof *f->t);
	if (!f->t) {
		json_decref(root);
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	}
	const char *key;
	json_t *v;
	int rc = 0;
	json_object_foreach(root, key, v)
	{
		if (!strcmp(key, "__metadata__")) {
			if (!json_is_object(v)) {
				rc = safet_fail(err, p, "\"__metadata__\" is not an object");
				break;
			}
			continue;
		}
		rc = safet_entry(f, key, v, &f->t[f->n], err);
		if (f->t[f->n].name)
			f->n++; /* freed by safet_close even when the entry was bad */
		if (rc)
			break;
	}
	json_decref(root);
	if (rc)
		return rc;
	qsort(f->t, f->n, sizeof *f->t, safet_by_name);
	return safet_check_overlap(f, err);
}

int safet_open(const char *path, safet_file *f, fos_err *err)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	f->path = strdup(path);
	if (!f->path)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	struct stat sb;
	char why[sizeof err->msg];
	/* a regular file only: a FIFO or /dev/zero is refused before any read (regfile.h) */
	f->fd = fos_open_regular(path, FOS_REGFILE_ANY, &sb, why, sizeof why);
	if (f->fd < 0) {
		safet_close(f);
		return fos_seterr(err, FOS_EINVAL, "%s", why);
	}
	int rc = safet_parse(f, err);
	if (rc)
		safet_close(f);
	return rc;
}

int safet_read_bf16(const safet_file *f, const safet_tensor *t, uint16_t **out, fos_err *err)
{
	*out = NULL;
	if (t->dtype != SAFET_BF16 && t->dtype != SAFET_F32)
		return safet_fail(err, f->path, "tensor '%s' has dtype %s (BF16 or F32 expected)", t->name, t->dtype_name);
	size_t nb = (size_t)(t->end - t->begin), ob = (size_t)t->count * 2;
	size_t cap = ((nb > ob ? nb : ob) + 63) & ~(size_t)63;
	void *buf = aligned_alloc(64, cap ? cap : 64);
	if (!buf)
		return fos_seterr(err, FOS_ENOMEM, "out of memory reading tensor '%s' (%zu bytes)", t->name, nb);
	if (safet_read_exact(f->fd, buf, nb, f->data_start + t->begin)) {
		free(buf);
		return fos_seterr(err, FOS_EINVAL, "%s: cannot read tensor '%s' (%zu bytes)", f->path, t->name, nb);
	}
	if (t->dtype == SAFET_F32) { /* in place: the i-th bf16 lies below the i-th float */
		uint16_t *b = buf;
		const float *src = buf;
		for (size_t i = 0; i < t->count; i++) {
			float v;
			memcpy(&v, &src[i], sizeof v);
			b[i] = fos_f32_to_bf16(v);
		}
	}
	*out = buf;
	return FOS_OK;
}

void safet_close(safet_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	for (size_t i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->path);
	memset(f, 0, sizeof *f);
	f->fd = -1;
}

char *safet_shape_str(const safet_tensor *t, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = 0;
	used += (size_t)snprintf(buf, cap, "(");
	for (int i = 0; i < t->ndim && used < cap; i++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
	if (used < cap)
		snprintf(buf + used, cap - used, t->ndim == 1 ? ",)" : ")");
	return buf;
}
