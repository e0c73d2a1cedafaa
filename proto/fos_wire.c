/* libfos_wire.c: message framing shared by libfos and fosd: splitting a received body into its
 * protobuf header and data section, checking tensor descriptors against the data section, and
 * building outgoing messages. See fos_wire.h and proto/PROTOCOL.md. */
#include "fos_wire.h"

#include <stdio.h>
#include <string.h>

size_t fosw_dtype_size(int dtype)
{
	switch (dtype) {
	case FOS__DTYPE__DTYPE_BF16:
		return 2;
	case FOS__DTYPE__DTYPE_F32:
		return 4;
	case FOS__DTYPE__DTYPE_U8:
	case FOS__DTYPE__DTYPE_E4M3:
		return 1;
	default:
		return 0;
	}
}

const char *fosw_dtype_name(int dtype)
{
	switch (dtype) {
	case FOS__DTYPE__DTYPE_BF16:
		return "bf16";
	case FOS__DTYPE__DTYPE_F32:
		return "f32";
	case FOS__DTYPE__DTYPE_U8:
		return "u8";
	case FOS__DTYPE__DTYPE_E4M3:
		return "e4m3";
	case FOS__DTYPE__DTYPE_UNSPECIFIED:
		return "unspecified";
	default:
		return "unknown";
	}
}

const char *fosw_code_name(int code)
{
	static const char *const names[] = {
		"OK",		     "CANCELLED", "UNKNOWN",	  "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
		"NOT_FOUND",	     "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
		"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",    "INTERNAL",
		"UNAVAILABLE",	     "DATA_LOSS", "UNAUTHENTICATED",
	};
	if (code < 0 || code >= (int)(sizeof names / sizeof names[0]))
		return "UNKNOWN_CODE";
	return names[code];
}

int fosw_split(const void *body, size_t len, const uint8_t **hdr, size_t *hlen, const uint8_t **data,
	       size_t *dlen, char *msg, size_t msgsz)
{
	const uint8_t *b = body;
	if (len < 4) {
		snprintf(msg, msgsz, "message of %zu bytes is shorter than its 4-byte header length", len);
		return -1;
	}
	uint32_t h = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	if (h > FOSW_MAX_HEADER) {
		snprintf(msg, msgsz, "header length %u exceeds the limit of %u bytes", h, FOSW_MAX_HEADER);
		return -1;
	}
	if ((uint64_t)h > len - 4) {
		snprintf(msg, msgsz, "header length %u exceeds the %zu bytes that follow it", h, len - 4);
		return -1;
	}
	uint64_t ds = fosw_data_start(h);
	*hdr = b + 4;
	*hlen = h;
	if (ds >= len) { /* no data section (the padding may be absent or partial) */
		*data = b + len;
		*dlen = 0;
	} else {
		*data = b + ds;
		*dlen = len - (size_t)ds;
	}
	return 0;
}

uint64_t fosw_shape_bytes(int dtype, int ndim, const int64_t *shape)
{
	uint64_t n = fosw_dtype_size(dtype);
	for (int i = 0; i < ndim; i++)
		n *= (uint64_t)shape[i];
	return n;
}

int fosw_tensor_get(const Fos__Tensor *t, const uint8_t *data, size_t dlen, const char *what, fosw_tensor *out,
		    uint64_t *max_end, int *code, char *msg, size_t msgsz)
{
	*code = FOS__CODE__INVALID_ARGUMENT;
	if (!t) {
		snprintf(msg, msgsz, "tensor %s is missing", what);
		return -1;
	}
	if (t->shm) {
		*code = FOS__CODE__UNIMPLEMENTED;
		snprintf(msg, msgsz, "tensor %s: shared-memory references are not supported yet", what);
		return -1;
	}
	if (t->cuda) {
		*code = FOS__CODE__UNIMPLEMENTED;
		snprintf(msg, msgsz, "tensor %s: device tensors are not supported here", what);
		return -1;
	}
	size_t es = fosw_dtype_size(t->dtype);
	if (!es) {
		snprintf(msg, msgsz, "tensor %s: dtype %d (%s) is not valid", what, (int)t->dtype,
			 fosw_dtype_name(t->dtype));
		return -1;
	}
	if (t->n_shape < 1 || t->n_shape > FOSW_MAX_DIMS) {
		snprintf(msg, msgsz, "tensor %s has %zu dimensions (1 or %d expected)", what, t->n_shape,
			 FOSW_MAX_DIMS);
		return -1;
	}
	/* product of dims, each >= 1, checked against overflow (limit 2^62 bytes) */
	uint64_t bytes = es;
	for (size_t i = 0; i < t->n_shape; i++) {
		int64_t d = t->shape[i];
		if (d < 1) {
			snprintf(msg, msgsz, "tensor %s: dimension %zu is %lld (must be >= 1)", what, i,
				 (long long)d);
			return -1;
		}
		if ((uint64_t)d > ((uint64_t)1 << 62) / bytes) {
			snprintf(msg, msgsz, "tensor %s: shape is too large", what);
			return -1;
		}
		bytes *= (uint64_t)d;
	}
	if (t->length != bytes) {
		snprintf(msg, msgsz, "tensor %s: length %llu does not match its shape and dtype (%llu bytes)",
			 what, (unsigned long long)t->length, (unsigned long long)bytes);
		return -1;
	}
	if (t->offset % FOSW_ALIGN) {
		snprintf(msg, msgsz, "tensor %s: offset %llu is not a multiple of %u", what,
			 (unsigned long long)t->offset, FOSW_ALIGN);
		return -1;
	}
	if (t->offset > dlen || t->length > dlen - t->offset) {
		snprintf(msg, msgsz, "tensor %s: bytes [%llu, %llu) lie outside the %zu-byte data section", what,
			 (unsigned long long)t->offset, (unsigned long long)t->offset + t->length, dlen);
		return -1;
	}
	out->dtype = t->dtype;
	out->ndim = (int)t->n_shape;
	for (int i = 0; i < FOSW_MAX_DIMS; i++)
		out->shape[i] = i < out->ndim ? t->shape[i] : 1;
	out->ptr = data + t->offset;
	out->len = (size_t)t->length;
	out->shm = NULL;
	out->cuda = NULL;
	if (max_end && t->offset + t->length > *max_end)
		*max_end = t->offset + t->length;
	*code = FOS__CODE__OK;
	return 0;
}

int fosw_check_trailing(uint64_t max_end, size_t dlen, char *msg, size_t msgsz)
{
	if (dlen > fosw_align(max_end)) {
		snprintf(msg, msgsz, "message has %llu bytes beyond its last tensor",
			 (unsigned long long)(dlen - max_end));
		return -1;
	}
	return 0;
}

uint64_t fosw_tensor_init(Fos__Tensor *t, int64_t *shape_store, fosw_placer *pl, int dtype, int ndim,
			  const int64_t *shape)
{
	fos__tensor__init(t);
	t->dtype = dtype;
	t->n_shape = (size_t)ndim;
	for (int i = 0; i < ndim; i++)
		shape_store[i] = shape[i];
	t->shape = shape_store;
	t->length = fosw_shape_bytes(dtype, ndim, shape);
	t->offset = pl->cursor;
	uint64_t end = t->offset + t->length;
	pl->cursor = fosw_align(end);
	if (pl->n < FOSW_MAX_TENSORS) {
		pl->gap_at[pl->n] = end;
		pl->gap_len[pl->n] = pl->cursor - end;
		pl->n++;
	}
	return t->offset;
}

int fosw_msg_build(const ProtobufCMessage *hdr, const fosw_placer *pl, nng_msg **out, uint8_t **data)
{
	size_t hlen = protobuf_c_message_get_packed_size(hdr);
	if (hlen > FOSW_MAX_HEADER)
		return NNG_EMSGSIZE;
	uint64_t ds = fosw_data_start(hlen);
	uint64_t dlen = pl ? pl->cursor : 0;
	uint64_t total = ds + dlen;
	if (total > (uint64_t)SIZE_MAX / 2)
		return NNG_EMSGSIZE;
	nng_msg *m;
	int rv = nng_msg_alloc(&m, (size_t)total);
	if (rv)
		return rv;
	uint8_t *b = nng_msg_body(m);
	b[0] = (uint8_t)hlen;
	b[1] = (uint8_t)(hlen >> 8);
	b[2] = (uint8_t)(hlen >> 16);
	b[3] = (uint8_t)(hlen >> 24);
	protobuf_c_message_pack(hdr, b + 4);
	memset(b + 4 + hlen, 0, (size_t)(ds - 4 - hlen));
	if (pl)
		for (int i = 0; i < pl->n; i++)
			memset(b + ds + pl->gap_at[i], 0, (size_t)pl->gap_len[i]);
	*out = m;
	if (data)
		*data = b + ds;
	return 0;
}
