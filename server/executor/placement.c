/* placement.c: which device runs a request (fosd_place, called by dispatch.c before the request's
 * tensors are resolved, since device tensors are opened on the device that runs it), and the
 * stages of the ops that touch several devices: PutWeight puts the weight on each chosen device in
 * turn, then drops it from the devices it leaves; DropWeight drops it from each device holding it.
 *
 * The rules (PROTOCOL.md "Devices"): a forward runs on a device holding its weight (the one of its
 * device tensors' GPU, else the least busy); a backward or ReleaseContext where its context is; an
 * op without a weight (Linear, Quantize, Dequantize) on its device tensors' GPU, else the least
 * busy device; everything else on device 0. "Least busy": fewest requests queued and running;
 * "least loaded": fewest cached bytes; ties go to the lower index.
 *
 * Invariants: s->dev < n_devs always; a staged op runs on one device at a time (a stage is one run
 * of its handler, queued on that device like any request), so no request ever holds the gates of
 * two devices. With one device every request runs on device 0 and nothing is staged. */
#include "executor.h"

#include <stdio.h>
#include <string.h>

#define BIT(i) (1u << (unsigned)(i))

static int lowest(uint32_t m)
{
	return m ? __builtin_ctz(m) : -1;
}

static int count(uint32_t m)
{
	return __builtin_popcount(m);
}

fosd_device *fosd_device_by_uuid(fosd_exec *srv, const uint8_t *uuid)
{
	for (int i = 0; uuid && i < srv->n_devs; i++) {
		const fos_backend *be = srv->devs[i].be;
		if (be->has_uuid && !memcmp(be->uuid, uuid, sizeof be->uuid))
			return &srv->devs[i];
	}
	return NULL;
}

/* The GPU UUID of the request's first device tensor (an input's or an output's CudaRef), found
 * by walking the message; NULL when it has none. */
static const uint8_t *first_uuid(const ProtobufCMessage *m, int depth)
{
	if (!m || depth > 4)
		return NULL;
	const ProtobufCMessageDescriptor *d = m->descriptor;
	if (d == &fos__cuda_ref__descriptor) {
		const Fos__CudaRef *r = (const Fos__CudaRef *)m;
		return r->gpu_uuid.len == 16 ? r->gpu_uuid.data : NULL;
	}
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		const char *base = (const char *)m;
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) { /* only the member that is set */
			uint32_t which;
			memcpy(&which, base + f->quantifier_offset, sizeof which);
			if (which != f->id)
				continue;
		}
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n;
			ProtobufCMessage **a;
			memcpy(&n, base + f->quantifier_offset, sizeof n);
			memcpy(&a, base + f->offset, sizeof a);
			for (size_t j = 0; j < n; j++) {
				const uint8_t *u = first_uuid(a[j], depth + 1);
				if (u)
					return u;
			}
		} else {
			ProtobufCMessage *sub;
			memcpy(&sub, base + f->offset, sizeof sub);
			const uint8_t *u = first_uuid(sub, depth + 1);
			if (u)
				return u;
		}
	}
	return NULL;
}

/* The devices holding the caller's weight name (and, in *same, those holding version). */
static uint32_t holders(fosd_exec *srv, const fosd_job *s, const char *name, uint64_t version, uint32_t *same)
{
	uint32_t m = 0, v = 0;
	for (int i = 0; name && i < srv->n_devs; i++) {
		uint64_t have = 0;
		if (fosd_wcache_holds(&srv->devs[i].wc, s->tenant, name, &have)) {
			m |= BIT(i);
			if (have == version)
				v |= BIT(i);
		}
	}
	if (same)
		*same = v;
	return m;
}

static uint64_t busy(fosd_device *d)
{
	return fosd_device_queued(d) + (uint64_t)atomic_load(&d->running);
}

static uint64_t cached(fosd_device *d)
{
	fosd_wcache_stats st;
	fosd_wcache_stats_get(&d->wc, &st);
	return st.bytes;
}

/* Of the devices in m (none: all), the one with the least of key. */
static int least(fosd_exec *srv, uint32_t m, uint64_t (*key)(fosd_device *))
{
	int best = -1;
	uint64_t bk = 0;
	for (int i = 0; i < srv->n_devs; i++) {
		if (m && !(m & BIT(i)))
			continue;
		uint64_t k = key(&srv->devs[i]);
		if (best < 0 || k < bk) {
			best = i;
			bk = k;
		}
	}
	return best < 0 ? 0 : best;
}

/* "0, 2" */
static void list_devices(uint32_t m, char *out, size_t outsz)
{
	size_t n = 0;
	out[0] = 0;
	for (int i = 0; m >> i && n < outsz; i++)
		if (m & BIT(i))
			n += (size_t)snprintf(out + n, outsz - n, "%s%d", n ? ", " : "", i);
}

static int place_put(fosd_exec *srv, fosd_job *s, char *msg, size_t msgsz)
{
	const Fos__PutWeightRequest *p = s->rq->put_weight;
	const int n = srv->n_devs;
	uint32_t want = 0, same = 0;
	uint32_t cur = holders(srv, s, p->name, p->version, &same);
	if (p->n_devices) {
		if (p->replicas && p->replicas != p->n_devices) {
			snprintf(msg, msgsz, "put_weight.replicas is %u but put_weight.devices names %zu devices", p->replicas,
				 p->n_devices);
			return FOS__CODE__INVALID_ARGUMENT;
		}
		for (size_t i = 0; i < p->n_devices; i++) {
			uint32_t dv = p->devices[i];
			if (dv >= (uint32_t)n) {
				snprintf(msg, msgsz, "put_weight.devices[%zu] is %u; fosd serves %d device%s (0..%d)", i, dv, n,
					 n == 1 ? "" : "s", n - 1);
				return FOS__CODE__INVALID_ARGUMENT;
			}
			if (want & BIT(dv)) {
				snprintf(msg, msgsz, "put_weight.devices[%zu] repeats device %u", i, dv);
				return FOS__CODE__INVALID_ARGUMENT;
			}
			want |= BIT(dv);
		}
	} else {
		if (p->replicas > (uint32_t)n) {
			snprintf(msg, msgsz, "put_weight.replicas is %u; fosd serves %d device%s", p->replicas, n,
				 n == 1 ? "" : "s");
			return FOS__CODE__INVALID_ARGUMENT;
		}
		int r = p->replicas ? (int)p->replicas : (cur ? count(cur) : 1);
		/* where it is now first, then the GPU of its device tensor, then the least loaded */
		for (int i = 0; i < n && count(want) < r; i++)
			if (cur & BIT(i))
				want |= BIT(i);
		fosd_device *own = fosd_device_by_uuid(srv, first_uuid(&s->rq->base, 0));
		if (own && count(want) < r)
			want |= BIT(own->index);
		while (count(want) < r) {
			uint32_t rest = ((n >= 32 ? 0u : BIT(n)) - 1u) & ~want;
			want |= BIT(least(srv, rest, cached));
		}
	}
	uint32_t put = want & ~same;
	if (!put) /* the same version everywhere asked: ALREADY_EXISTS, as with one device */
		put = BIT(lowest(want));
	s->placed = want;
	s->drop_todo = cur & ~want;
	s->dev = lowest(put);
	s->put_todo = put & ~BIT(s->dev);
	return 0;
}

static int place_forward(fosd_exec *srv, fosd_job *s, char *msg, size_t msgsz)
{
	const char *name = s->rq->forward->weight;
	uint32_t have = holders(srv, s, name, 0, NULL);
	if (!have)
		return 0; /* NOT_FOUND, from device 0 */
	fosd_device *own = fosd_device_by_uuid(srv, first_uuid(&s->rq->base, 0));
	if (own && !(have & BIT(own->index))) {
		char on[64];
		list_devices(have, on, sizeof on);
		snprintf(msg, msgsz,
			 "weight '%s' has no copy on device %d (%s), the GPU of this request's device tensors; it is on "
			 "device%s %s: put it there too (PutWeight devices or replicas)",
			 name, own->index, own->be->device, count(have) == 1 ? "" : "s", on);
		return FOS__CODE__FAILED_PRECONDITION;
	}
	s->dev = own ? own->index : least(srv, have, busy);
	return 0;
}

/* Backward, ReleaseContext: the device that has the context, else the one that had it (its
 * NOT_FOUND says why), else device 0. */
static int place_context(fosd_exec *srv, fosd_job *s, uint64_t id)
{
	int was = -1;
	for (int i = 0; i < srv->n_devs; i++) {
		int k = fosd_contexts_knows(&srv->devs[i].cx, s->tenant, id);
		if (k == 2)
			return i;
		if (k == 1 && was < 0)
			was = i;
	}
	return was < 0 ? 0 : was;
}

int fosd_place(fosd_exec *srv, fosd_job *s, char *msg, size_t msgsz)
{
	const Fos__Request *rq = s->rq;
	s->dev = 0;
	s->put_todo = s->drop_todo = s->placed = 0;
	s->stages_done = 0;
	switch (s->op) {
	case FOSD_OP_PUT_WEIGHT:
		return place_put(srv, s, msg, msgsz);
	case FOSD_OP_DROP_WEIGHT: {
		uint32_t have = holders(srv, s, rq->drop_weight->name, 0, NULL);
		if (have) {
			s->dev = lowest(have);
			s->drop_todo = have & ~BIT(s->dev);
		}
		return 0;
	}
	case FOSD_OP_FORWARD:
		return srv->n_devs > 1 ? place_forward(srv, s, msg, msgsz) : 0;
	case FOSD_OP_BACKWARD:
		s->dev = srv->n_devs > 1 ? place_context(srv, s, rq->backward->context_id) : 0;
		return 0;
	case FOSD_OP_RELEASE_CONTEXT:
		s->dev = srv->n_devs > 1 ? place_context(srv, s, rq->release_context->context_id) : 0;
		return 0;
	case FOSD_OP_LINEAR:
	case FOSD_OP_QUANTIZE:
	case FOSD_OP_DEQUANTIZE:
		if (srv->n_devs > 1) {
			fosd_device *own = fosd_device_by_uuid(srv, first_uuid(&rq->base, 0));
			s->dev = own ? own->index : least(srv, 0, busy);
		}
		return 0;
	default:
		return 0;
	}
}

int fosd_place_next_stage(fosd_job *s)
{
	s->stages_done++;
	uint32_t *todo = s->put_todo ? &s->put_todo : s->drop_todo ? &s->drop_todo : NULL;
	if (!todo)
		return 0;
	s->dev = lowest(*todo);
	*todo &= ~BIT(s->dev);
	return 1;
}
