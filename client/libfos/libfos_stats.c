/* libfos_stats.c: fos_stats_take and its accessors, Stats as a list of named values that grows with
 * the wire without changing the C ABI.
 *
 * The list is made by walking the StatsResult message through protobuf-c's descriptors, so every
 * numeric field fosd sends is in it by its fos.proto name, new ones included, with no code here:
 * a scalar field is "NAME"; a field of a nested message is "NAME.FIELD"; an element of a repeated
 * message is named by its first field's value (a string, an enum's value name, or an unsigned
 * number in decimal) and its other fields follow: "ops.forward.requests",
 * "ops.forward.latency.p99_us", "ops.forward.codes.NOT_FOUND.count", "devices.1.cache_bytes". Strings other than such a naming first field are kept
 * apart (fos_stats_text). Names are unique within a snapshot (a repeated element whose name was
 * already taken is skipped), in the order of the message. */
#include "libfos_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FOSC_STATS_NAME_MAX 256

typedef struct fosc_stat {
	char *name;
	int is_double;
	uint64_t u;
	double d;
	char *text; /* a string field: the value; u and d unused */
} fosc_stat;

struct fos_stats_snapshot {
	fosc_stat *v;
	size_t n, cap;
	int oom;
};

static void snap_add(fos_stats_snapshot *s, const char *name, int is_double, uint64_t u, double d, const char *text)
{
	if (s->oom)
		return;
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name))
			return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		fosc_stat *nv = realloc(s->v, cap * sizeof *nv);
		if (!nv) {
			s->oom = 1;
			return;
		}
		s->v = nv;
		s->cap = cap;
	}
	fosc_stat *e = &s->v[s->n];
	memset(e, 0, sizeof *e);
	e->name = strdup(name);
	e->text = text ? strdup(text) : NULL;
	if (!e->name || (text && !e->text)) {
		free(e->name);
		free(e->text);
		s->oom = 1;
		return;
	}
	e->is_double = is_double;
	e->u = u;
	e->d = d;
	s->n++;
}

/* The name an element of a repeated message takes: its first field's value (a number written into
 * buf), or NULL. */
static const char *elem_name(const ProtobufCMessage *m, char *buf, size_t cap)
{
	const ProtobufCMessageDescriptor *md = m->descriptor;
	if (md->n_fields == 0)
		return NULL;
	const ProtobufCFieldDescriptor *f = &md->fields[0];
	const char *p = (const char *)m + f->offset;
	if (f->label == PROTOBUF_C_LABEL_REPEATED)
		return NULL;
	if (f->type == PROTOBUF_C_TYPE_STRING)
		return *(char *const *)p;
	if (f->type == PROTOBUF_C_TYPE_ENUM) {
		const ProtobufCEnumValue *ev =
			protobuf_c_enum_descriptor_get_value((const ProtobufCEnumDescriptor *)f->descriptor, *(const int *)p);
		return ev ? ev->name : NULL;
	}
	if (f->type == PROTOBUF_C_TYPE_UINT32 || f->type == PROTOBUF_C_TYPE_FIXED32) {
		snprintf(buf, cap, "%u", (unsigned)*(const uint32_t *)p);
		return buf;
	}
	if (f->type == PROTOBUF_C_TYPE_UINT64 || f->type == PROTOBUF_C_TYPE_FIXED64) {
		snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p);
		return buf;
	}
	return NULL;
}

static void walk(fos_stats_snapshot *s, const ProtobufCMessage *m, const char *prefix, int skip_first, int depth);

static void walk_field(fos_stats_snapshot *s, const ProtobufCFieldDescriptor *f, const void *p, const char *name,
		       int depth)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_INT64: /* a signed value as its two's complement bits */
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		snap_add(s, name, 0, *(const uint64_t *)p, 0, NULL);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		snap_add(s, name, 0, *(const uint32_t *)p, 0, NULL);
		break;
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_ENUM:
		snap_add(s, name, 0, (uint64_t)(int64_t) * (const int32_t *)p, 0, NULL);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		snap_add(s, name, 0, *(const protobuf_c_boolean *)p ? 1 : 0, 0, NULL);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		snap_add(s, name, 1, 0, *(const double *)p, NULL);
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		snap_add(s, name, 1, 0, *(const float *)p, NULL);
		break;
	case PROTOBUF_C_TYPE_STRING:
		snap_add(s, name, 0, 0, 0, *(char *const *)p ? *(char *const *)p : "");
		break;
	case PROTOBUF_C_TYPE_MESSAGE:
		if (*(ProtobufCMessage *const *)p)
			walk(s, *(ProtobufCMessage *const *)p, name, 0, depth + 1);
		break;
	case PROTOBUF_C_TYPE_BYTES:
		break;
	}
}

static void walk(fos_stats_snapshot *s, const ProtobufCMessage *m, const char *prefix, int skip_first, int depth)
{
	const ProtobufCMessageDescriptor *md = m->descriptor;
	if (depth > 4)
		return;
	char name[FOSC_STATS_NAME_MAX];
	for (unsigned i = skip_first ? 1 : 0; i < md->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &md->fields[i];
		const char *p = (const char *)m + f->offset;
		int w = prefix[0] ? snprintf(name, sizeof name, "%s.%s", prefix, f->name)
				  : snprintf(name, sizeof name, "%s", f->name);
		if (w < 0 || (size_t)w >= sizeof name)
			continue;
		if (f->label != PROTOBUF_C_LABEL_REPEATED) {
			walk_field(s, f, p, name, depth);
			continue;
		}
		/* repeated: only messages named by their first field are listed */
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		size_t count = *(const size_t *)((const char *)m + f->quantifier_offset);
		ProtobufCMessage *const *elems = *(ProtobufCMessage *const *const *)p;
		for (size_t j = 0; j < count; j++) {
			char num[24];
			const char *en = elems[j] ? elem_name(elems[j], num, sizeof num) : NULL;
			char sub[FOSC_STATS_NAME_MAX];
			if (!en || !en[0] || strchr(en, '.'))
				continue;
			w = snprintf(sub, sizeof sub, "%s.%s", name, en);
			if (w > 0 && (size_t)w < sizeof sub)
				walk(s, elems[j], sub, 1, depth + 1);
		}
	}
}

int fos_stats_take(fos_client *c, fos_stats_snapshot **out, fos_status *st)
{
	if (!out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "fos_stats_take: out is NULL");
	*out = NULL;
	fosc_reply r;
	int code;
	const Fos__StatsResult *res = fosc_stats_call(c, &r, &code, st);
	if (!res)
		return code;
	fos_stats_snapshot *s = calloc(1, sizeof *s);
	if (!s) {
		fosc_reply_free(&r);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "fos_stats_take: out of memory");
	}
	walk(s, &res->base, "", 0, 0);
	fosc_reply_free(&r);
	if (s->oom) {
		fos_stats_free(s);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "fos_stats_take: out of memory");
	}
	*out = s;
	if (st) {
		st->code = FOS_CODE_OK;
		st->message[0] = 0;
	}
	return FOS_CODE_OK;
}

void fos_stats_free(fos_stats_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].text);
	}
	free(s->v);
	free(s);
}

size_t fos_stats_count(const fos_stats_snapshot *s) { return s ? s->n : 0; }

const char *fos_stats_name_at(const fos_stats_snapshot *s, size_t i) { return s && i < s->n ? s->v[i].name : NULL; }

static const fosc_stat *snap_find(const fos_stats_snapshot *s, const char *name)
{
	if (!s || !name)
		return NULL;
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name))
			return &s->v[i];
	return NULL;
}

int fos_stats_get(const fos_stats_snapshot *s, const char *name, uint64_t *out)
{
	const fosc_stat *e = snap_find(s, name);
	if (!e)
		return FOS_CODE_NOT_FOUND;
	if (e->is_double || e->text)
		return FOS_CODE_INVALID_ARGUMENT;
	if (out)
		*out = e->u;
	return FOS_CODE_OK;
}

int fos_stats_get_double(const fos_stats_snapshot *s, const char *name, double *out)
{
	const fosc_stat *e = snap_find(s, name);
	if (!e)
		return FOS_CODE_NOT_FOUND;
	if (e->text)
		return FOS_CODE_INVALID_ARGUMENT;
	if (out)
		*out = e->is_double ? e->d : (double)e->u;
	return FOS_CODE_OK;
}

const char *fos_stats_text(const fos_stats_snapshot *s, const char *name)
{
	const fosc_stat *e = snap_find(s, name);
	return e ? e->text : NULL;
}
