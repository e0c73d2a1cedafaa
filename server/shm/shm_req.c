/* shm_req.c: one request's use of shared-memory regions (see shm.h): resolving tensors that name a
 * region, checking Request.shm_outputs against the op's result message (by field name, through
 * the protobuf descriptors, so every op with Tensor results supports them), copying region bytes
 * into backend memory and results back out, and the references held meanwhile. */
#include "shm.h"
#include "log.h"
#include "optable.h"
#include "rc_code.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BOUNCE_CHUNK ((size_t)16 << 20)

void fosd_shm_req_begin(fosd_shm_req *q, fosd_regions *rg, fosd_devmaps *dm, uint32_t pipe, int op,
			const char *tenant)
{
	fosd_shm_req_end(q);
	q->rg = rg;
	q->pipe = pipe;
	q->op = op;
	q->tenant = tenant;
	fosd_dev_req_begin(&q->dev, dm, pipe, tenant);
}

void fosd_shm_req_end(fosd_shm_req *q)
{
	for (int i = 0; i < q->n_refs; i++)
		fosd_regions_release(q->rg, q->refs[i]);
	for (int i = 0; i < q->n_snaps; i++)
		free(q->snaps[i]);
	for (int i = 0; i < FOSW_MAX_TENSORS; i++) {
		if (q->out[i].r)
			fosd_regions_release(q->rg, q->out[i].r);
		q->out[i].r = NULL;
		q->out_of_t[i] = -1;
	}
	q->n_refs = q->n_snaps = q->n_out = 0;
	q->outs = NULL;
	fosd_dev_req_end(&q->dev);
}

int fosd_shm_wants_snapshot(int op, const char *what)
{
	if (op == FOSD_OP_QUANTIZE)
		return !strcmp(what, "amax");
	if (op == FOSD_OP_DEQUANTIZE)
		return !strcmp(what, "scales") || !strcmp(what, "amax");
	return 0;
}

int fosd_shm_tensor_get(fosd_shm_req *q, const Fos__Tensor *t, const char *what, fosw_tensor *out, int *code,
			char *msg, size_t msgsz)
{
	const Fos__ShmRef *ref = t->shm;
	*code = FOS__CODE__INVALID_ARGUMENT;
	if (t->offset) {
		snprintf(msg, msgsz, "tensor %s names a shm region, so its data-section offset must be 0 (got %llu)", what,
			 (unsigned long long)t->offset);
		return -1;
	}
	/* dtype, shape and length exactly as for an inline tensor */
	Fos__Tensor tmp = *t;
	tmp.shm = NULL;
	static const uint8_t none;
	if (fosw_tensor_get(&tmp, &none, (size_t)t->length, what, out, NULL, code, msg, msgsz))
		return -1;
	*code = FOS__CODE__INVALID_ARGUMENT;
	if (!ref->region || !ref->region[0]) {
		snprintf(msg, msgsz, "tensor %s: its shm reference names no region", what);
		return -1;
	}
	if (q->n_refs >= FOSD_SHM_MAX_REFS) {
		snprintf(msg, msgsz, "tensor %s: a request may name at most %d shm tensors", what, FOSD_SHM_MAX_REFS);
		return -1;
	}
	fosd_region *r = fosd_regions_acquire(q->rg, q->pipe, q->tenant, ref->region, code, msg, msgsz);
	if (!r) {
		char m[FOSD_MSG_MAX];
		snprintf(m, sizeof m, "tensor %s: %s", what, msg);
		snprintf(msg, msgsz, "%s", m);
		return -1;
	}
	q->refs[q->n_refs++] = r;
	uint64_t size = fosd_region_size(r), off = ref->offset, len = t->length;
	if (off > size || len > size - off) {
		snprintf(msg, msgsz,
			 "tensor %s: %llu bytes at offset %llu lie outside shm region '%s' of %llu bytes", what,
			 (unsigned long long)len, (unsigned long long)off, ref->region, (unsigned long long)size);
		return -1;
	}
	int rc = fosd_region_check_now(r, off, len, msg, msgsz);
	if (rc) {
		*code = rc;
		return -1;
	}
	fosd_region_count_use(r);
	out->ptr = fosd_region_base(r) + off;
	out->shm = r;
	if (fosd_shm_wants_snapshot(q->op, what)) {
		void *copy = malloc(len ? (size_t)len : 1);
		if (!copy || q->n_snaps >= FOSD_SHM_MAX_REFS) {
			free(copy);
			*code = FOS__CODE__RESOURCE_EXHAUSTED;
			snprintf(msg, msgsz, "tensor %s: out of memory copying it out of shm region '%s'", what, ref->region);
			return -1;
		}
		if (fosd_shm_copy(copy, out->ptr, (size_t)len)) {
			free(copy);
			*code = FOS__CODE__FAILED_PRECONDITION;
			snprintf(msg, msgsz, "tensor %s: shm region '%s' shrank while it was read", what, ref->region);
			return -1;
		}
		q->snaps[q->n_snaps++] = copy;
		out->ptr = copy;
		out->shm = NULL; /* from here on an ordinary host tensor */
	}
	*code = 0;
	return 0;
}

/* The descriptor of the result message of a request's op (the Response field with the number of
 * the Request's op field), or NULL. */
static const ProtobufCMessageDescriptor *result_descriptor(int op_case)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field(&fos__response__descriptor, (unsigned)op_case);
	return f && f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
}

static const ProtobufCFieldDescriptor *tensor_field(const ProtobufCMessageDescriptor *d, const char *name)
{
	const ProtobufCFieldDescriptor *f = d && name ? protobuf_c_message_descriptor_get_field_by_name(d, name) : NULL;
	if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE || f->descriptor != &fos__tensor__descriptor ||
	    f->label == PROTOBUF_C_LABEL_REPEATED)
		return NULL;
	return f;
}

/* Two results written over the same bytes would leave one of them wrong, whichever is written
 * last: targets in one region (or one client allocation) must not overlap. */
static int outputs_disjoint(const fosd_shm_req *q, const Fos__Request *rq, char *msg, size_t msgsz)
{
	for (int i = 1; i < q->n_out; i++)
		for (int j = 0; j < i; j++) {
			const fosd_dev_target *di = &q->dev.out[i], *dj = &q->dev.out[j];
			const void *oi = di->m ? (const void *)di->m : (const void *)q->out[i].r;
			const void *oj = dj->m ? (const void *)dj->m : (const void *)q->out[j].r;
			uint64_t ai = di->m ? di->off : q->out[i].off, ci = di->m ? di->cap : q->out[i].cap;
			uint64_t aj = dj->m ? dj->off : q->out[j].off, cj = dj->m ? dj->cap : q->out[j].cap;
			if (!oi || oi != oj || ai >= aj + cj || aj >= ai + ci) /* bounds checked: no overflow */
				continue;
			const Fos__ShmOutput *si = rq->shm_outputs[i], *sj = rq->shm_outputs[j];
			char where[200];
			if (di->m)
				snprintf(where, sizeof where, "the same device allocation");
			else
				snprintf(where, sizeof where, "shm region '%s'", si->shm->region);
			snprintf(msg, msgsz,
				 "shm_outputs[%d] ('%s', %llu bytes at offset %llu) overlaps shm_outputs[%d] ('%s', %llu bytes at "
				 "offset %llu) in %s: give each result bytes of its own",
				 i, si->result, (unsigned long long)ci, (unsigned long long)ai, j, sj->result,
				 (unsigned long long)cj, (unsigned long long)aj, where);
			return FOS__CODE__INVALID_ARGUMENT;
		}
	return 0;
}

int fosd_shm_outputs_check(fosd_shm_req *q, const Fos__Request *rq, char *msg, size_t msgsz)
{
	size_t n = rq->n_shm_outputs;
	if (!n)
		return 0;
	if (n > FOSW_MAX_TENSORS) {
		snprintf(msg, msgsz, "%zu shm_outputs: at most %d", n, FOSW_MAX_TENSORS);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	const ProtobufCMessageDescriptor *rd = result_descriptor((int)rq->op_case);
	q->outs = rq->shm_outputs;
	for (size_t i = 0; i < n; i++) {
		const Fos__ShmOutput *so = rq->shm_outputs[i];
		const char *res = so->result ? so->result : "";
		if (!tensor_field(rd, res)) {
			snprintf(msg, msgsz, "shm_outputs[%zu]: '%s' is not a tensor result of this operation", i, res);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(rq->shm_outputs[j]->result, res)) {
				snprintf(msg, msgsz, "shm_outputs[%zu]: result '%s' is named twice", i, res);
				return FOS__CODE__INVALID_ARGUMENT;
			}
		if (so->shm && so->cuda) {
			snprintf(msg, msgsz, "shm_outputs[%zu] ('%s') names both a region and device memory", i, res);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (!so->cuda && (!so->shm || !so->shm->region || !so->shm->region[0])) {
			snprintf(msg, msgsz, "shm_outputs[%zu] ('%s') names no region", i, res);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (!so->capacity) {
			snprintf(msg, msgsz, "shm_outputs[%zu] ('%s'): capacity must be at least 1 byte", i, res);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		if (so->cuda) { /* a device output (devmem.h) */
			q->n_out = (int)i + 1;
			int dc = fosd_dev_output_check(&q->dev, (int)i, so, msg, msgsz);
			if (dc)
				return dc;
			continue;
		}
		int code;
		char m[FOSD_MSG_MAX];
		fosd_region *r = fosd_regions_acquire(q->rg, q->pipe, q->tenant, so->shm->region, &code, m, sizeof m);
		if (!r) {
			snprintf(msg, msgsz, "shm_outputs[%zu] ('%s'): %s", i, res, m);
			return code;
		}
		q->out[i].r = r;
		q->n_out = (int)i + 1;
		uint64_t size = fosd_region_size(r), off = so->shm->offset, cap = so->capacity;
		if (off > size || cap > size - off) {
			snprintf(msg, msgsz, "shm_outputs[%zu] ('%s'): %llu bytes at offset %llu lie outside shm region '%s' of %llu bytes",
				 i, res, (unsigned long long)cap, (unsigned long long)off, so->shm->region,
				 (unsigned long long)size);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		int rc = fosd_region_check_now(r, off, cap, m, sizeof m);
		if (rc) {
			snprintf(msg, msgsz, "shm_outputs[%zu] ('%s'): %s", i, res, m);
			return rc;
		}
		q->out[i].off = off;
		q->out[i].cap = cap;
	}
	return outputs_disjoint(q, rq, msg, msgsz);
}

int fosd_shm_output_index(const Fos__Request *rq, const char *result)
{
	for (size_t i = 0; rq && i < rq->n_shm_outputs; i++) {
		const Fos__ShmOutput *so = rq->shm_outputs[i];
		if (so && so->result && !strcmp(so->result, result))
			return (int)i;
	}
	return -1;
}

int fosd_shm_output_named(const Fos__Request *rq, const char *result)
{
	return fosd_shm_output_index(rq, result) >= 0;
}

/* Moves len bytes between a region and backend memory: to_region 1 is backend -> region. Pinned
 * regions on a device backend go by DMA (the pages stay valid even if the object shrinks); host
 * backends copy directly; otherwise through a bounce buffer. Every CPU touch of the mapping is a
 * guarded copy. Returns 0 or a gRPC code with msg. */
static int region_move(fos_backend *be, const fosd_regions *rg, fosd_region *r, uint64_t off, void *dev, size_t len,
		       int to_region, char *msg, size_t msgsz)
{
	int rc = fosd_region_check_now(r, off, len, msg, msgsz);
	if (rc)
		return rc;
	uint8_t *p = fosd_region_base(r) + off;
	fos_err e;
	memset(&e, 0, sizeof e);
	if (rg->host_backend) {
		if (to_region ? fosd_shm_copy(p, dev, len) : fosd_shm_copy(dev, p, len)) {
			snprintf(msg, msgsz, "shm region '%s' shrank while it was %s", fosd_region_name(r),
				 to_region ? "written" : "read");
			return FOS__CODE__FAILED_PRECONDITION;
		}
		return 0;
	}
	if (fosd_region_pinned(r)) {
		rc = to_region ? be->d2h(be, p, dev, len, &e) : be->h2d(be, dev, p, len, &e);
	} else {
		size_t chunk = len < BOUNCE_CHUNK ? len : BOUNCE_CHUNK;
		uint8_t *bounce = malloc(chunk ? chunk : 1);
		if (!bounce) {
			snprintf(msg, msgsz, "out of memory for a %zu-byte bounce buffer", chunk);
			return FOS__CODE__RESOURCE_EXHAUSTED;
		}
		for (size_t o = 0; !rc && o < len; o += chunk) {
			size_t k = len - o < chunk ? len - o : chunk;
			if (to_region) {
				rc = be->d2h(be, bounce, (uint8_t *)dev + o, k, &e);
				if (!rc && fosd_shm_copy(p + o, bounce, k))
					rc = -1;
			} else {
				if (fosd_shm_copy(bounce, p + o, k))
					rc = -1;
				else
					rc = be->h2d(be, (uint8_t *)dev + o, bounce, k, &e);
				/* the bounce buffer is refilled next: the copy must be done (fosd's lanes
				 * may queue h2d without waiting, cuda_backend.h) */
				if (!rc)
					rc = be->sync(be, &e);
			}
		}
		free(bounce);
		if (rc == -1) {
			snprintf(msg, msgsz, "shm region '%s' shrank while it was %s", fosd_region_name(r),
				 to_region ? "written" : "read");
			return FOS__CODE__FAILED_PRECONDITION;
		}
	}
	if (rc) {
		snprintf(msg, msgsz, "%s", e.msg);
		return fosd_code_of_rc(rc);
	}
	return 0;
}

int fosd_tensor_h2d(fos_backend *be, const fosd_regions *rg, fosd_devmaps *dm, void *dst, const fosw_tensor *t, fos_err *e)
{
	if (t->cuda) { /* in the client's GPU memory: a copy on the GPU */
		int rc = be->d2d(be, dst, t->ptr, t->len, e);
		if (!rc)
			fosd_devmaps_count(dm, 0, 1);
		return rc;
	}
	if (!t->shm)
		return be->h2d(be, dst, t->ptr, t->len, e);
	fosd_region *r = t->shm;
	char msg[FOSD_MSG_MAX];
	int code = region_move(be, rg, r, (uint64_t)(t->ptr - fosd_region_base(r)), dst, t->len, 0, msg, sizeof msg);
	if (code)
		return fos_seterr(e, code == FOS__CODE__FAILED_PRECONDITION ? FOSD_RC_PRECONDITION : FOS_EINTERNAL, "%s",
				  msg);
	return FOS_OK;
}

int fosd_shm_outs_place(fosd_shm_req *q, ProtobufCMessage *resp, Fos__Tensor *t, int n, fosw_placer *placer,
			char *msg, size_t msgsz)
{
	for (int i = 0; i < FOSW_MAX_TENSORS; i++)
		q->out_of_t[i] = -1;
	if (!q->n_out || !n)
		return 0;
	/* the result message: the Response field named by its result oneof */
	const Fos__Response *R = (const Fos__Response *)resp;
	const ProtobufCFieldDescriptor *rf =
		protobuf_c_message_descriptor_get_field(&fos__response__descriptor, (unsigned)R->result_case);
	if (!rf || rf->type != PROTOBUF_C_TYPE_MESSAGE)
		return 0;
	const ProtobufCMessage *sub = *(ProtobufCMessage *const *)((const char *)R + rf->offset);
	if (!sub)
		return 0;
	for (int j = 0; j < q->n_out; j++) {
		const ProtobufCFieldDescriptor *f = tensor_field(sub->descriptor, q->outs[j]->result);
		if (!f)
			continue;
		const Fos__Tensor *tp = *(Fos__Tensor *const *)((const char *)sub + f->offset);
		for (int i = 0; tp && i < n; i++) {
			if (&t[i] != tp)
				continue;
			const fosd_dev_target *dout = &q->dev.out[j];
			uint64_t cap = dout->m ? dout->cap : q->out[j].cap;
			if (t[i].length > cap) {
				if (dout->m)
					snprintf(msg, msgsz, "result %s is %llu bytes, its device target has room for %llu",
						 q->outs[j]->result, (unsigned long long)t[i].length,
						 (unsigned long long)cap);
				else
					snprintf(msg, msgsz,
						 "result %s is %llu bytes, its shm target in region '%s' has room for %llu",
						 q->outs[j]->result, (unsigned long long)t[i].length,
						 fosd_region_name(q->out[j].r), (unsigned long long)cap);
				return FOS__CODE__OUT_OF_RANGE;
			}
			q->out_of_t[i] = j;
			q->out[j].used = 1;
			if (dout->m) {
				t[i].cuda = fosd_dev_out_ref(&q->dev, i, q->outs[j]->cuda);
				continue;
			}
			fos__shm_ref__init(&q->out_ref[i]);
			q->out_ref[i].region = (char *)fosd_region_name(q->out[j].r);
			q->out_ref[i].offset = q->out[j].off;
			t[i].shm = &q->out_ref[i];
		}
	}
	/* place the inline outputs again, without the ones that went to regions */
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	for (int i = 0; i < n; i++) {
		if (q->out_of_t[i] >= 0) {
			t[i].offset = 0;
			continue;
		}
		t[i].offset = pl.cursor;
		uint64_t end = pl.cursor + t[i].length;
		pl.cursor = fosw_align(end);
		pl.gap_at[pl.n] = end;
		pl.gap_len[pl.n] = pl.cursor - end;
		pl.n++;
	}
	*placer = pl;
	return 0;
}

int fosd_shm_out_write(fos_backend *be, const fosd_regions *rg, fosd_shm_req *q, int i, const void *dev, size_t len,
		       char *msg, size_t msgsz)
{
	int j = q->out_of_t[i];
	if (j < 0) {
		snprintf(msg, msgsz, "output %d has no shm target", i);
		return FOS__CODE__INTERNAL;
	}
	if (q->dev.out[j].m)
		return fosd_dev_out_write(&q->dev, be, j, dev, len, msg, msgsz);
	fosd_region *r = q->out[j].r;
	int code = region_move(be, rg, r, q->out[j].off, (void *)dev, len, 1, msg, msgsz);
	if (!code)
		fosd_region_count_use(r);
	return code;
}
