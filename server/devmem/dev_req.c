/* dev_req.c: one request's use of client GPU memory (devmem.h): resolving tensors that name device
 * memory and device output targets, the wait event, the client addresses handed to the op as its
 * own buffers, and writing results that could not be computed in place. */
#include "devmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fosd_dev_req_begin(fosd_dev_req *q, fosd_devmaps *dm, uint32_t pipe, const char *tenant)
{
	fosd_dev_req_end(q);
	q->dm = dm;
	q->pipe = pipe;
	q->tenant = tenant;
	q->no_peer = 0;
}

void fosd_dev_req_event_done(fosd_dev_req *q)
{
	if (q->ev)
		fosd_devmaps_release(q->dm, q->ev);
	q->ev = NULL;
	q->ev_waited = 0;
}

void fosd_dev_req_end(fosd_dev_req *q)
{
	for (int i = 0; i < q->n_refs; i++)
		fosd_devmaps_release(q->dm, q->refs[i]);
	for (int i = 0; i < FOSW_MAX_TENSORS; i++) {
		if (q->out[i].m)
			fosd_devmaps_release(q->dm, q->out[i].m);
		q->out[i].m = NULL;
	}
	if (q->ev)
		fosd_devmaps_release(q->dm, q->ev);
	if (q->word)
		fosd_devmaps_release(q->dm, q->word);
	q->word = NULL;
	q->word_ptr = NULL;
	q->word_value = 0;
	for (int i = 0; i < q->n_snaps; i++)
		free(q->snaps[i]);
	q->ev = NULL;
	q->ev_waited = 0;
	q->n_refs = q->n_snaps = q->n_borrowed = 0;
}

/* The common checks of a CudaRef before its handle is opened. Returns 0 or a code with msg. */
static int ref_check(fosd_dev_req *q, const Fos__CudaRef *ref, const char *what, char *msg, size_t msgsz)
{
	fosd_devmaps *dm = q->dm;
	if (ref->ipc_handle.len != FOSD_DEV_HANDLE_BYTES) {
		snprintf(msg, msgsz, "%s: cuda.ipc_handle is %zu bytes; a CUDA IPC memory handle is %d", what,
			 ref->ipc_handle.len, FOSD_DEV_HANDLE_BYTES);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	if (ref->gpu_uuid.len != FOSD_DEV_UUID_BYTES) {
		snprintf(msg, msgsz, "%s: cuda.gpu_uuid is %zu bytes; a GPU UUID is %d", what, ref->gpu_uuid.len,
			 FOSD_DEV_UUID_BYTES);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	if (!dm || !dm->be) {
		snprintf(msg, msgsz, "%s is a device tensor, but this fosd runs the %s backend: device tensors need a cuda fosd",
			 what, dm && dm->be ? dm->be->name : "cpu");
		return FOS__CODE__FAILED_PRECONDITION;
	}
	if (q->no_peer) {
		snprintf(msg, msgsz,
			 "%s is a device tensor, but this connection has no peer credentials: device tensors need an "
			 "ipc:// connection on fosd's host",
			 what);
		return FOS__CODE__FAILED_PRECONDITION;
	}
	if (memcmp(ref->gpu_uuid.data, dm->be->uuid, FOSD_DEV_UUID_BYTES)) {
		char a[40], b[40];
		for (int i = 0; i < 16; i++) {
			snprintf(a + 2 * i, 3, "%02x", ref->gpu_uuid.data[i]);
			snprintf(b + 2 * i, 3, "%02x", dm->be->uuid[i]);
		}
		snprintf(msg, msgsz, "%s is in the memory of GPU %s, but fosd runs on GPU %s (%s)", what, a, b,
			 dm->be->device);
		return FOS__CODE__FAILED_PRECONDITION;
	}
	return 0;
}

void fosd_dev_req_set_peer(fosd_dev_req *q, int has_peer_credentials)
{
	q->no_peer = !has_peer_credentials;
}

/* Opens (or finds) ref's mapping and checks [off, off + len) lies inside it. */
static fosd_devmap *map_range(fosd_dev_req *q, const Fos__CudaRef *ref, uint64_t len, const char *what, int *code,
			      char *msg, size_t msgsz)
{
	char m[FOSD_DEV_HANDLE_BYTES * 8];
	fosd_devmap *dm = fosd_devmaps_acquire(q->dm, q->pipe, q->tenant, 0, ref->ipc_handle.data, code, m, sizeof m);
	if (!dm) {
		snprintf(msg, msgsz, "%s: %s", what, m);
		return NULL;
	}
	uint64_t size = fosd_devmap_size(dm), off = ref->offset;
	if (off > size || len > size - off) {
		fosd_devmaps_release(q->dm, dm);
		*code = FOS__CODE__INVALID_ARGUMENT;
		snprintf(msg, msgsz, "%s: %llu bytes at offset %llu lie outside the client's GPU allocation of %llu bytes",
			 what, (unsigned long long)len, (unsigned long long)off, (unsigned long long)size);
		return NULL;
	}
	return dm;
}

int fosd_dev_tensor_get(fosd_dev_req *q, const Fos__Tensor *t, const char *what, int snapshot, fosw_tensor *out,
			int *code, char *msg, size_t msgsz)
{
	const Fos__CudaRef *ref = t->cuda;
	*code = FOS__CODE__INVALID_ARGUMENT;
	if (t->offset || t->shm) {
		snprintf(msg, msgsz, "tensor %s names device memory, so it can have no data-section offset and no shm reference",
			 what);
		return -1;
	}
	Fos__Tensor tmp = *t;
	tmp.cuda = NULL;
	static const uint8_t none;
	if (fosw_tensor_get(&tmp, &none, (size_t)t->length, what, out, NULL, code, msg, msgsz))
		return -1;
	char w[64];
	snprintf(w, sizeof w, "tensor %s", what);
	if ((*code = ref_check(q, ref, w, msg, msgsz)))
		return -1;
	if (q->n_refs >= FOSD_DEV_MAX_REFS) {
		*code = FOS__CODE__INVALID_ARGUMENT;
		snprintf(msg, msgsz, "tensor %s: a request may name at most %d device tensors", what, FOSD_DEV_MAX_REFS);
		return -1;
	}
	fosd_devmap *m = map_range(q, ref, t->length, w, code, msg, msgsz);
	if (!m)
		return -1;
	q->refs[q->n_refs++] = m;
	out->ptr = fosd_devmap_base(m) + ref->offset;
	out->cuda = m;
	out->shm = NULL;
	fosd_devmaps_count(q->dm, 1, 0);
	if (snapshot) { /* validation reads it: a host copy, taken after the client's work is done */
		fos_backend *be = q->dm->be;
		void *copy = malloc(t->length ? (size_t)t->length : 1);
		fos_err e;
		memset(&e, 0, sizeof e);
		int rc = copy && q->n_snaps < FOSD_DEV_MAX_REFS ? 0 : FOS_ENOMEM;
		if (!rc && q->ev && !q->ev_waited) {
			rc = be->ipc_event_sync(be, fosd_devmap_event(q->ev), &e);
			q->ev_waited = !rc;
		}
		if (!rc)
			rc = be->read_sync(be, copy, out->ptr, (size_t)t->length, &e);
		if (rc) {
			free(copy);
			*code = rc == FOS_ENOMEM ? FOS__CODE__RESOURCE_EXHAUSTED : FOS__CODE__INTERNAL;
			snprintf(msg, msgsz, "tensor %s: reading it from the client's GPU memory: %s", what,
				 rc == FOS_ENOMEM ? "out of memory" : e.msg);
			return -1;
		}
		q->snaps[q->n_snaps++] = copy;
		out->ptr = copy;
		out->cuda = NULL;
	}
	*code = 0;
	return 0;
}

int fosd_dev_output_check(fosd_dev_req *q, int i, const Fos__ShmOutput *so, char *msg, size_t msgsz)
{
	char w[64];
	snprintf(w, sizeof w, "shm_outputs[%d] ('%s')", i, so->result ? so->result : "");
	int code = ref_check(q, so->cuda, w, msg, msgsz);
	if (code)
		return code;
	fosd_devmap *m = map_range(q, so->cuda, so->capacity, w, &code, msg, msgsz);
	if (!m)
		return code;
	q->out[i].m = m;
	q->out[i].off = so->cuda->offset;
	q->out[i].cap = so->capacity;
	return 0;
}

int fosd_dev_event_check(fosd_dev_req *q, const Fos__Request *rq, char *msg, size_t msgsz)
{
	if (!rq->cuda_wait_event.len)
		return 0;
	if (!q->dm || !q->dm->be || !q->dm->be->ipc_event_open) {
		snprintf(msg, msgsz, "cuda_wait_event is set, but this fosd runs the cpu backend: device tensors need a cuda fosd");
		return FOS__CODE__FAILED_PRECONDITION;
	}
	if (q->no_peer) {
		snprintf(msg, msgsz, "cuda_wait_event needs an ipc:// connection on fosd's host");
		return FOS__CODE__FAILED_PRECONDITION;
	}
	if (rq->cuda_wait_event.len != FOSD_DEV_HANDLE_BYTES) {
		snprintf(msg, msgsz, "cuda_wait_event is %zu bytes; a CUDA IPC event handle is %d", rq->cuda_wait_event.len,
			 FOSD_DEV_HANDLE_BYTES);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	int code;
	char m[FOSD_DEV_HANDLE_BYTES * 8];
	q->ev = fosd_devmaps_acquire(q->dm, q->pipe, q->tenant, 1, rq->cuda_wait_event.data, &code, m, sizeof m);
	if (!q->ev) {
		snprintf(msg, msgsz, "cuda_wait_event: %s", m);
		return code;
	}
	return 0;
}

int fosd_dev_word_check(fosd_dev_req *q, const Fos__Request *rq, char *msg, size_t msgsz)
{
	if (!rq->done_word)
		return 0;
	if (!rq->done_value) {
		snprintf(msg, msgsz, "done_value is 0; an asynchronous request's done word needs a nonzero value");
		return FOS__CODE__INVALID_ARGUMENT;
	}
	if (rq->done_word->offset % 4) {
		snprintf(msg, msgsz, "done_word.offset %llu is not a multiple of 4 (the word is a 32-bit value)",
			 (unsigned long long)rq->done_word->offset);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	int code = ref_check(q, rq->done_word, "done_word", msg, msgsz);
	if (code)
		return code;
	if (!q->dm->be->write_u32) {
		snprintf(msg, msgsz, "done_word is set, but the %s backend cannot write it in stream order",
			 q->dm->be->name);
		return FOS__CODE__FAILED_PRECONDITION;
	}
	fosd_devmap *m = map_range(q, rq->done_word, 4, "done_word", &code, msg, msgsz);
	if (!m)
		return code;
	q->word = m;
	q->word_ptr = fosd_devmap_base(m) + rq->done_word->offset;
	q->word_value = rq->done_value;
	return 0;
}

int fosd_dev_wait(fosd_dev_req *q, fos_backend *be, fos_err *e)
{
	if (!q->ev || q->ev_waited)
		return FOS_OK;
	return be->ipc_event_wait(be, fosd_devmap_event(q->ev), e);
}

void *fosd_dev_out_inplace(fosd_dev_req *q, int i, size_t need)
{
	if (i < 0 || i >= FOSW_MAX_TENSORS || !q->out[i].m || need > q->out[i].cap)
		return NULL;
	uint8_t *p = fosd_devmap_base(q->out[i].m) + q->out[i].off;
	if ((uintptr_t)p % FOSD_DEV_ALIGN)
		return NULL;
	return fosd_dev_borrow(q, p) ? NULL : p;
}

int fosd_dev_borrow(fosd_dev_req *q, void *p)
{
	if (q->n_borrowed >= (int)(sizeof q->borrowed / sizeof q->borrowed[0]))
		return -1;
	q->borrowed[q->n_borrowed++] = p;
	return 0;
}

int fosd_dev_borrowed(const fosd_dev_req *q, const void *p)
{
	for (int i = 0; i < q->n_borrowed; i++)
		if (q->borrowed[i] == p)
			return 1;
	return 0;
}

int fosd_dev_inplace_ok(const fosw_tensor *t)
{
	return t->cuda && (uintptr_t)t->ptr % FOSD_DEV_ALIGN == 0;
}

int fosd_dev_out_write(fosd_dev_req *q, fos_backend *be, int i, const void *src, size_t len, char *msg,
		       size_t msgsz)
{
	uint8_t *dst = fosd_devmap_base(q->out[i].m) + q->out[i].off;
	fosd_devmaps_count(q->dm, 1, dst != src);
	if (dst == src)
		return 0;
	fos_err e;
	memset(&e, 0, sizeof e);
	if (be->d2d(be, dst, src, len, &e)) {
		snprintf(msg, msgsz, "writing into the client's GPU memory: %s", e.msg);
		return FOS__CODE__INTERNAL;
	}
	return 0;
}

Fos__CudaRef *fosd_dev_out_ref(fosd_dev_req *q, int reply_index, const Fos__CudaRef *asked)
{
	Fos__CudaRef *r = &q->out_ref[reply_index];
	*r = *asked;
	return r;
}
