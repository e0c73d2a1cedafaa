/* libfos_ops.c: libfos's operations: health (and its devices), stats, the weight cache (with
 * placements over several devices), forward / backward (with the
 * recompute of an expired context), release, quantize, dequantize and the one-shot linear. Each
 * fills a fos.Request, calls fosc_call (through call_result) and copies the reply's results out. */
#include "libfos_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_str(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

/* Outputs that libfos may allocate: on failure, what it allocated is freed again. */
typedef struct outset {
	fos_tensor *t[4];
	int allocated[4];
	int n;
} outset;

static void outset_add(outset *o, fos_tensor *t)
{
	o->t[o->n] = t;
	o->allocated[o->n] = t && !t->data;
	o->n++;
}

static int outset_fail(outset *o, int code)
{
	for (int i = 0; i < o->n; i++)
		if (o->t[i] && o->allocated[i] && o->t[i]->data) {
			free(o->t[i]->data);
			o->t[i]->data = NULL;
			o->t[i]->size = 0;
		}
	return code;
}

/* fosc_call, then the reply's result, which must be of case want. Returns that result (the oneof
 * member; *code OK, r to free with fosc_reply_free), or NULL with *code the call's failure, or
 * DATA_LOSS "the reply has no <what>" (r freed). */
static const void *call_result(fos_client *c, Fos__Request *rq, fosc_in *ins, int nin,
			       Fos__Response__ResultCase want, const char *what, fosc_reply *r, int *code,
			       fos_status *st)
{
	*code = fosc_call(c, rq, ins, nin, r, st);
	if (*code)
		return NULL;
	/* The oneof's members are all struct pointers in one union (same representation, C11 6.2.5):
	 * reading it through any member gives the one of the case set. */
	const void *res = r->resp->result_case == want ? (const void *)r->resp->health : NULL;
	if (!res) {
		fosc_reply_free(r);
		*code = fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no %s", what);
	}
	return res;
}

/* The weight of a Forward and the version it needs (0: any), put again on a NOT_FOUND. */
typedef struct reput_of {
	const char *name;
	uint64_t version;
} reput_of;

/* One op's call: its inputs, the outputs fosd may write straight into a shared-memory region
 * (names[i] for outs[i]; NULL entries are not asked for), the result case it answers with, and
 * for a Forward the weight libfos puts again (then retries once) when fosd answers NOT_FOUND. */
typedef struct opcall {
	fosc_in *ins;
	int nin;
	const char *const *names;
	fos_tensor *const *outs;
	int nout;
	Fos__Response__ResultCase want;
	const char *what;
	const reput_of *reput;
} opcall;

/* What one op's call leaves: the reply (to free with fosc_reply_free when the result came), the
 * status code, and the outputs, so that a failure copying them out frees what libfos allocated. */
typedef struct opreply {
	fosc_reply r;
	int code;
	outset os;
} opreply;

/* call_result for oc, after asking for its outputs in regions or device memory; fills rp. */
static const void *op_call(fos_client *c, Fos__Request *rq, const opcall *oc, opreply *rp, fos_status *st)
{
	fosc_shm_outs so;
	rp->os = (outset){{0}, {0}, 0};
	memset(&rp->r, 0, sizeof rp->r);
	if (oc->nout) {
		fosc_shm_outputs(c, rq, &so, oc->names, oc->outs, oc->nout);
		if ((rp->code = fosc_cuda_outputs(c, rq, &so, oc->names, oc->outs, oc->nout, st)))
			return NULL;
	}
	const void *res = call_result(c, rq, oc->ins, oc->nin, oc->want, oc->what, &rp->r, &rp->code, st);
	if (!res && oc->reput && rp->code == FOS_CODE_NOT_FOUND &&
	    fosc_reput_any(c, oc->reput->name, oc->reput->version) == FOS_CODE_OK)
		res = call_result(c, rq, oc->ins, oc->nin, oc->want, oc->what, &rp->r, &rp->code, st);
	if (res)
		for (int i = 0; i < oc->nout; i++)
			outset_add(&rp->os, oc->outs[i]);
	return res;
}

const Fos__StatsResult *fosc_stats_call(fos_client *c, fosc_reply *r, int *code, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_STATS;
	rq.stats = &sr;
	return call_result(c, &rq, NULL, 0, FOS__RESPONSE__RESULT_STATS, "stats result", r, code, st);
}

int fos_health(fos_client *c, fos_health_info *out, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &h;
	const opcall oc = {NULL, 0, NULL, NULL, 0, FOS__RESPONSE__RESULT_HEALTH, "health result", NULL};
	opreply rp;
	const Fos__HealthResult *hr = op_call(c, &rq, &oc, &rp, st);
	if (!hr)
		return rp.code;
	memset(out, 0, sizeof *out);
	copy_str(out->version, sizeof out->version, hr->version);
	copy_str(out->backend, sizeof out->backend, hr->backend);
	copy_str(out->device, sizeof out->device, hr->device);
	out->uptime_ms = hr->uptime_ms;
	out->max_message_bytes = hr->max_message_bytes;
	out->draining = hr->draining;
	fosc_cuda_health(c, hr);
	fosc_reply_free(&rp.r);
	return FOS_CODE_OK;
}

int fos_health_devices(fos_client *c, fos_device_info *out, size_t cap, size_t *n, fos_status *st)
{
	if (!n)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "fos_health_devices: n is NULL");
	*n = 0;
	if (cap && !out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "fos_health_devices: out is NULL with cap %zu", cap);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &h;
	const opcall oc = {NULL, 0, NULL, NULL, 0, FOS__RESPONSE__RESULT_HEALTH, "health result", NULL};
	opreply rp;
	const Fos__HealthResult *hr = op_call(c, &rq, &oc, &rp, st);
	if (!hr)
		return rp.code;
	fosc_cuda_health(c, hr);
	/* a fosd that predates devices serves one: the top-level fields */
	size_t total = hr->n_devices ? hr->n_devices : 1;
	for (size_t i = 0; i < total && i < cap; i++) {
		const Fos__DeviceInfo *d = hr->n_devices ? hr->devices[i] : NULL;
		fos_device_info *o = &out[i];
		memset(o, 0, sizeof *o);
		o->index = d ? d->index : 0;
		copy_str(o->backend, sizeof o->backend, d ? d->backend : hr->backend);
		copy_str(o->device, sizeof o->device, d ? d->device : hr->device);
		const ProtobufCBinaryData *u = d ? &d->gpu_uuid : &hr->gpu_uuid;
		if (u->len == 16) {
			memcpy(o->gpu_uuid, u->data, 16);
			o->has_gpu_uuid = 1;
		}
	}
	fosc_reply_free(&rp.r);
	*n = total;
	if (cap < total && (cap || out))
		return fosc_status(st, FOS_CODE_OUT_OF_RANGE, "fosd serves %zu devices, room for %zu", total, cap);
	return fosc_status(st, FOS_CODE_OK, "%zu device%s", total, total == 1 ? "" : "s");
}

/* One LatencyStats (may be absent: all stay 0) into fos_op_stats' fields PRE_count, PRE_mean_us,
 * PRE_p50_us ... PRE_max_us. */
#define STATS_LATENCY_FROM(o, pre, l)                                                                    \
	do {                                                                                             \
		const Fos__LatencyStats *l_ = (l);                                                       \
		if (l_) {                                                                                \
			(o)->pre##_count = l_->count;                                                    \
			(o)->pre##_mean_us = l_->mean_us;                                                \
			(o)->pre##_p50_us = l_->p50_us;                                                  \
			(o)->pre##_p90_us = l_->p90_us;                                                  \
			(o)->pre##_p99_us = l_->p99_us;                                                  \
			(o)->pre##_p999_us = l_->p999_us;                                                \
			(o)->pre##_max_us = l_->max_us;                                                  \
		}                                                                                        \
	} while (0)

int fos_stats(fos_client *c, fos_stats_info *out, fos_status *st)
{
	fosc_reply r;
	int code;
	const Fos__StatsResult *s = fosc_stats_call(c, &r, &code, st);
	if (!s)
		return code;
	memset(out, 0, sizeof *out);
	out->uptime_ms = s->uptime_ms;
	copy_str(out->backend, sizeof out->backend, s->backend);
	copy_str(out->device, sizeof out->device, s->device);
	for (size_t i = 0; i < s->n_ops && out->n_ops < FOS_STATS_MAX_OPS; i++) {
		const Fos__OpStats *os = s->ops[i];
		fos_op_stats *o = &out->ops[out->n_ops++];
		copy_str(o->op, sizeof o->op, os->op);
		o->requests = os->requests;
		for (size_t j = 0; j < os->n_codes; j++)
			if (os->codes[j]->code >= 0 && os->codes[j]->code < FOS_STATS_CODES)
				o->by_code[os->codes[j]->code] += os->codes[j]->count;
		STATS_LATENCY_FROM(o, lat, os->latency);
		STATS_LATENCY_FROM(o, queue, os->queue);
		STATS_LATENCY_FROM(o, run, os->run);
		o->ran_at_once = os->ran_at_once;
		o->bytes_in = os->bytes_in;
		o->bytes_out = os->bytes_out;
	}
	out->cache_bytes = s->cache_bytes;
	out->cache_budget = s->cache_budget;
	out->cache_entries = s->cache_entries;
	out->cache_hits = s->cache_hits;
	out->cache_misses = s->cache_misses;
	out->cache_evictions = s->cache_evictions;
	out->contexts = s->contexts;
	out->context_bytes = s->context_bytes;
	out->context_budget = s->context_budget;
	out->contexts_expired = s->contexts_expired;
	out->contexts_evicted = s->contexts_evicted;
	out->inflight = s->inflight;
	out->queued = s->queued;
	out->duplicates = s->duplicates;
	out->bad_messages = s->bad_messages;
	out->workers = s->workers;
	out->msg_pool_taken = s->msg_pool_taken;
	out->msg_pool_reused = s->msg_pool_reused;
	out->msg_pool_mapped_new = s->msg_pool_mapped_new;
	out->msg_pool_bytes_free = s->msg_pool_bytes_free;
	out->msg_pool_bytes_used = s->msg_pool_bytes_used;
	out->msg_pool_bytes_pinned = s->msg_pool_bytes_pinned;
	out->msg_pool_pin_failures = s->msg_pool_pin_failures;
	out->msg_pool_active = s->msg_pool_active;
	out->channels = s->channels;
	out->channel_requests = s->channel_requests;
	out->connections = s->connections;
	out->connections_dropped = s->connections_dropped;
	out->connection_refusals = s->connection_refusals;
	out->connections_rejected = s->connections_rejected;
	fosc_reply_free(&r);
	return FOS_CODE_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

static void weight_info_from(const Fos__WeightInfo *wi, fos_weight_info *o)
{
	memset(o, 0, sizeof *o);
	copy_str(o->name, sizeof o->name, wi->name);
	o->version = wi->version;
	o->n = wi->n;
	o->k = wi->k;
	if (wi->config) {
		o->weight_block = wi->config->weight_block;
		o->err_mode = wi->config->err_mode;
		o->bound = (int)wi->config->bound;
	}
	o->bytes = wi->bytes;
	o->pinned = wi->pinned;
	o->has_master = wi->has_master;
	o->has_columnwise = wi->has_columnwise;
	o->uses = wi->uses;
	o->idle_ms = wi->idle_ms;
	for (size_t i = 0; i < wi->n_weight_uses; i++) /* wire value v is bit v - 1 */
		if (wi->weight_uses[i] >= 1 && wi->weight_uses[i] <= 4)
			o->weight_uses |= 1 << (wi->weight_uses[i] - 1);
	o->codes_bytes = wi->codes_bytes;
	o->columnwise_bytes = wi->columnwise_bytes;
	o->master_bytes = wi->master_bytes;
	o->decoded_tier_bytes = wi->decoded_tier_bytes;
}

/* A reply's WeightInfo with its devices (sorted) into e (DATA_LOSS past FOS_DEVICES_MAX). */
static int weight_entry_from(const Fos__WeightInfo *wi, fos_weight_entry *e, fos_status *st)
{
	weight_info_from(wi, &e->info);
	if (wi->n_devices > FOS_DEVICES_MAX)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "weight %s is on %zu devices, more than FOS_DEVICES_MAX (%d)",
				   e->info.name, wi->n_devices, FOS_DEVICES_MAX);
	e->n_devices = wi->n_devices;
	memset(e->devices, 0, sizeof e->devices);
	for (size_t i = 0; i < wi->n_devices; i++) { /* ascending, whatever order fosd sends */
		size_t j = i;
		for (; j > 0 && e->devices[j - 1] > wi->devices[i]; j--)
			e->devices[j] = e->devices[j - 1];
		e->devices[j] = wi->devices[i];
	}
	return FOS_CODE_OK;
}

/* Checks pl and copies it into *out (pl NULL: all 0, the default placement). */
static int place_check(const fos_placement *pl, fosc_place *out, fos_status *st)
{
	memset(out, 0, sizeof *out);
	if (!pl)
		return FOS_CODE_OK;
	if (pl->n_devices && pl->replicas && pl->replicas != pl->n_devices)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
				   "placement: replicas is %u but devices lists %zu devices; give one of them",
				   (unsigned)pl->replicas, pl->n_devices);
	if (pl->n_devices > FOS_DEVICES_MAX)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "placement: devices lists %zu devices, at most %d allowed",
				   pl->n_devices, FOS_DEVICES_MAX);
	if (pl->n_devices && !pl->devices)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "placement: devices is NULL with n_devices %zu",
				   pl->n_devices);
	for (size_t i = 0; i < pl->n_devices; i++) {
		for (size_t j = 0; j < i; j++)
			if (pl->devices[j] == pl->devices[i])
				return fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
						   "placement: devices lists device %u twice (entries %zu and %zu)",
						   (unsigned)pl->devices[i], j, i);
		out->devices[i] = pl->devices[i];
	}
	out->n = pl->n_devices;
	out->replicas = pl->replicas;
	return FOS_CODE_OK;
}

static int put_weight_call(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
			   const fos_weight_config *cfg, const fosc_place *pl, fos_weight_info *info,
			   fos_weight_entry *entry, fos_status *st)
{
	if (!name)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	if (cfg && (cfg->uses & ~FOS_WEIGHT_USES_ALL))
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "uses 0x%x has bits other than FOS_WEIGHT_USE_*",
				   (unsigned)cfg->uses);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	Fos__WeightConfig wc = FOS__WEIGHT_CONFIG__INIT;
	Fos__Tensor tw;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	pw.name = (char *)name;
	pw.version = version;
	pw.w = &tw;
	pw.config = &wc;
	if (cfg) {
		wc.weight_block = cfg->weight_block;
		wc.err_mode = cfg->err_mode;
		wc.bound = (uint32_t)cfg->bound;
		pw.pin = cfg->pin;
		pw.drop_master = cfg->drop_master;
		pw.eager_columnwise = cfg->eager_columnwise;
		wc.four_over_six = (Fos__FourOverSix)cfg->four_over_six;
	}
	Fos__WeightUse uses[4];
	for (int b = 0; cfg && b < 4; b++) /* bit b is wire value b + 1 */
		if (cfg->uses & (1 << b))
			uses[pw.n_uses++] = (Fos__WeightUse)(b + 1);
	pw.uses = uses;
	uint32_t devs[FOS_DEVICES_MAX];
	if (pl) {
		memcpy(devs, pl->devices, pl->n * sizeof devs[0]);
		pw.devices = devs;
		pw.n_devices = pl->n;
		pw.replicas = pl->replicas;
	}
	fosc_in ins[1] = {{&tw, w, "w"}};
	const opcall oc = {ins, 1, NULL, NULL, 0, FOS__RESPONSE__RESULT_PUT_WEIGHT, "weight info", NULL};
	opreply rp;
	const Fos__PutWeightResult *pr = op_call(c, &rq, &oc, &rp, st);
	if (!pr)
		return rp.code;
	if (!pr->info) {
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no weight info");
	}
	int code = FOS_CODE_OK;
	if (info)
		weight_info_from(pr->info, info);
	if (entry)
		code = weight_entry_from(pr->info, entry, st);
	fosc_reply_free(&rp.r);
	return code;
}

int fosc_put_weight_raw(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
			const fos_weight_config *cfg, const fosc_place *pl, fos_status *st)
{
	return put_weight_call(c, name, version, w, cfg, pl, NULL, NULL, st);
}

int fos_put_weight(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
		   const fos_weight_config *cfg, fos_weight_info *info, fos_status *st)
{
	int code = put_weight_call(c, name, version, w, cfg, NULL, info, NULL, st);
	if (code == FOS_CODE_OK)
		fosc_reput_remember(c, name, version, w, cfg, NULL); /* only with reput_weights (libfos_trust.c) */
	return code;
}

int fos_put_weight_on(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
		      const fos_weight_config *cfg, const fos_placement *pl, fos_weight_entry *out, fos_status *st)
{
	fosc_place p;
	int code = place_check(pl, &p, st);
	if (code)
		return code;
	code = put_weight_call(c, name, version, w, cfg, &p, NULL, out, st);
	if (code == FOS_CODE_OK)
		fosc_reput_remember(c, name, version, w, cfg, &p); /* only with reput_weights (libfos_trust.c) */
	return code;
}

int fos_drop_weight(fos_client *c, const char *name, fos_status *st)
{
	if (!name)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__DropWeightRequest dw = FOS__DROP_WEIGHT_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_DROP_WEIGHT;
	rq.drop_weight = &dw;
	dw.name = (char *)name;
	fosc_reply r;
	int code = fosc_call(c, &rq, NULL, 0, &r, st);
	if (!code)
		fosc_reply_free(&r);
	if (code == FOS_CODE_OK || code == FOS_CODE_NOT_FOUND)
		fosc_reput_forget(c, name);
	return code;
}

/* One ListWeights page as fos_weight_info (entries 0) or fos_weight_entry (entries 1) elements. */
static int list_page(fos_client *c, const char *page_token, uint32_t page_size, int entries, void **list,
		     size_t *count, char **next_token, fos_status *st)
{
	*list = NULL;
	*count = 0;
	*next_token = NULL;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ListWeightsRequest lw = FOS__LIST_WEIGHTS_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_LIST_WEIGHTS;
	rq.list_weights = &lw;
	lw.page_token = (char *)(page_token ? page_token : "");
	lw.page_size = page_size;
	const opcall oc = {NULL, 0, NULL, NULL, 0, FOS__RESPONSE__RESULT_LIST_WEIGHTS, "weight list", NULL};
	opreply rp;
	const Fos__ListWeightsResult *lr = op_call(c, &rq, &oc, &rp, st);
	if (!lr)
		return rp.code;
	size_t esz = entries ? sizeof(fos_weight_entry) : sizeof(fos_weight_info);
	char *a = calloc(lr->n_weights ? lr->n_weights : 1, esz);
	char *next = lr->next_page_token && lr->next_page_token[0] ? strdup(lr->next_page_token) : NULL;
	if (!a || (lr->next_page_token && lr->next_page_token[0] && !next)) {
		free(a);
		free(next);
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; i < lr->n_weights; i++) {
		if (!entries) {
			weight_info_from(lr->weights[i], (fos_weight_info *)(void *)(a + i * esz));
			continue;
		}
		int code = weight_entry_from(lr->weights[i], (fos_weight_entry *)(void *)(a + i * esz), st);
		if (code) {
			free(a);
			free(next);
			fosc_reply_free(&rp.r);
			return code;
		}
	}
	*list = a;
	*count = lr->n_weights;
	*next_token = next;
	fosc_reply_free(&rp.r);
	return FOS_CODE_OK;
}

/* Every page of list_page, concatenated. */
static int list_all(fos_client *c, int entries, void **list, size_t *count, fos_status *st)
{
	size_t esz = entries ? sizeof(fos_weight_entry) : sizeof(fos_weight_info);
	char *all = NULL;
	size_t n = 0;
	char *token = NULL;
	*list = NULL;
	*count = 0;
	do {
		void *page;
		size_t k;
		char *next;
		int code = list_page(c, token, 0, entries, &page, &k, &next, st);
		if (code) {
			free(all);
			free(token);
			return code;
		}
		/* a page that brings nothing, or a token that does not move on, would loop forever */
		if (next && (!k || (token && strcmp(next, token) <= 0))) {
			free(page);
			free(next);
			free(all);
			free(token);
			return fosc_status(st, FOS_CODE_DATA_LOSS, "the weight list's next page token does not advance");
		}
		char *grown = k ? realloc(all, (n + k) * esz) : all;
		if (k && !grown) {
			free(page);
			free(next);
			free(all);
			free(token);
			return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
		}
		all = grown;
		if (k)
			memcpy(all + n * esz, page, k * esz);
		n += k;
		free(page);
		free(token);
		token = next;
	} while (token);
	*list = all ? all : calloc(1, esz);
	if (!*list)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	*count = n;
	return FOS_CODE_OK;
}

int fos_list_weights_page(fos_client *c, const char *page_token, uint32_t page_size, fos_weight_info **list,
			  size_t *count, char **next_token, fos_status *st)
{
	void *l;
	int code = list_page(c, page_token, page_size, 0, &l, count, next_token, st);
	*list = l;
	return code;
}

int fos_list_weights(fos_client *c, fos_weight_info **list, size_t *count, fos_status *st)
{
	void *l;
	int code = list_all(c, 0, &l, count, st);
	*list = l;
	return code;
}

int fos_list_weight_entries_page(fos_client *c, const char *page_token, uint32_t page_size,
				 fos_weight_entry **list, size_t *count, char **next_token, fos_status *st)
{
	void *l;
	int code = list_page(c, page_token, page_size, 1, &l, count, next_token, st);
	*list = l;
	return code;
}

int fos_list_weight_entries(fos_client *c, fos_weight_entry **list, size_t *count, fos_status *st)
{
	void *l;
	int code = list_all(c, 1, &l, count, st);
	*list = l;
	return code;
}

/* ---- forward / backward --------------------------------------------------------------------- */

/* Fills rq as a Forward of x (and bias) through weight with o's options; tx and tb are the wire
 * tensors fosc_call fills from x and bias. */
static void forward_request(Fos__Request *rq, Fos__ForwardRequest *fr, const char *weight, Fos__Tensor *tx,
			    Fos__Tensor *tb, const fos_tensor *bias, const fos_forward_opts *o)
{
	rq->op_case = FOS__REQUEST__OP_FORWARD;
	rq->forward = fr;
	fr->weight = (char *)weight;
	fr->x = tx;
	fr->bias = bias ? tb : NULL;
	if (o) {
		fr->weight_version = o->weight_version;
		fr->override = o->override;
		fr->row_scaled = o->row_scaled;
		fr->save_context = o->save_context; /* with expect: refused by fosd, with its message */
		fr->four_over_six = (Fos__FourOverSix)o->four_over_six;
	}
}


/* One Forward request; y NULL with skip_output. */
static int forward_call(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
			const fos_forward_opts *o, int skip_output, fos_tensor *y, fos_context *ctx, fos_status *st)
{
	if (!weight)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	if (o && o->save_context && !ctx)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "save_context needs a fos_context to fill");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor tx, tb;
	forward_request(&rq, &fr, weight, &tx, &tb, bias, o);
	fr.skip_output = skip_output;
	fosc_in ins[2] = {{&tx, x, "x"}, {&tb, bias, "bias"}};
	static const char *const out_names[] = {"y"};
	fos_tensor *outs[] = {skip_output ? NULL : y};
	const reput_of ro = {weight, o ? o->weight_version : 0};
	const opcall oc = {ins, bias ? 2 : 1, out_names, outs, 1, FOS__RESPONSE__RESULT_FORWARD,
			   "forward result", &ro};
	opreply rp;
	const Fos__ForwardResult *res = op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	int64_t m = x->shape[0];
	if (!skip_output) {
		/* N is the weight's: any (M, N) */
		if ((rp.code = fosc_out(&rp.r, res->y, "y", FOS_DTYPE_BF16, -1, 0, y, st)))
			goto out;
		if (y->ndim != 2 || y->shape[0] != m) {
			rp.code = outset_fail(&rp.os,
					      fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's y has the wrong shape"));
			goto out;
		}
	}
	if (o && o->save_context) {
		if (!res->context_id) {
			rp.code = fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no context id");
			goto out;
		}
		memset(ctx, 0, sizeof *ctx);
		ctx->id = res->context_id;
		ctx->resolved_override = res->resolved_override;
		ctx->ttl_ms = res->context_ttl_ms;
		copy_str(ctx->weight, sizeof ctx->weight, weight);
		ctx->weight_version = res->weight_version;
		ctx->override = o->override;
		ctx->row_scaled = o->row_scaled;
		ctx->four_over_six = o->four_over_six;
		ctx->m = m;
		ctx->k = x->ndim > 1 ? x->shape[1] : 0;
		ctx->n = y && !skip_output ? y->shape[1] : 0;
		ctx->has_bias = bias != NULL;
	}
out:
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_forward(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st)
{
	if (!y)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no output tensor for y");
	return forward_call(c, weight, x, bias, o, 0, y, ctx, st);
}

static void check_point_from(const Fos__CheckPoint *p, fos_check_point *o)
{
	memset(o, 0, sizeof *o);
	if (!p)
		return;
	o->present = 1;
	o->row = p->row;
	o->col = p->col;
	o->expect = (uint16_t)p->expect;
	o->y = (uint16_t)p->y;
}

int fos_forward_check(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		      const fos_forward_opts *o, const fos_tensor *expect, const fos_check_criterion *crit,
		      fos_check_result *out, fos_status *st)
{
	if (!weight)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	if (!expect)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no expect tensor (the Y to check)");
	if (!out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no fos_check_result to fill");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__CheckCriterion cc = FOS__CHECK_CRITERION__INIT;
	Fos__Tensor tx, te, tb;
	forward_request(&rq, &fr, weight, &tx, &tb, bias, o);
	fr.expect = &te;
	if (crit) {
		cc.by_max_ulps = crit->by_max_ulps != 0;
		cc.max_ulps = crit->max_ulps;
		cc.by_min_sqnr = crit->by_min_sqnr != 0;
		cc.min_sqnr_db = crit->min_sqnr_db;
		fr.criterion = &cc;
	}
	fosc_in ins[3] = {{&tx, x, "x"}, {&te, expect, "expect"}, {&tb, bias, "bias"}};
	const reput_of ro = {weight, o ? o->weight_version : 0};
	const opcall oc = {ins, bias ? 3 : 2, NULL, NULL, 0, FOS__RESPONSE__RESULT_FORWARD, "forward result", &ro};
	opreply rp;
	const Fos__ForwardResult *res = op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	const Fos__CheckResult *cr = res->check;
	if (!cr) {
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no check result");
	}
	int64_t rows = expect->ndim > 0 ? expect->shape[0] : 0, cols = expect->ndim > 1 ? expect->shape[1] : 1;
	if (cr->elements != (uint64_t)(rows * cols)) {
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's check covers %llu elements, expect has %lld",
				   (unsigned long long)cr->elements, (long long)(rows * cols));
	}
	memset(out, 0, sizeof *out);
	out->rows = rows;
	out->cols = cols;
	out->elements = cr->elements;
	out->differ = cr->differ;
	out->nonfinite = cr->nonfinite_mismatches;
	out->max_ulps = cr->max_ulps;
	check_point_from(cr->max_ulps_at, &out->max_ulps_at);
	check_point_from(cr->first_differ, &out->first_differ);
	check_point_from(cr->first_nonfinite, &out->first_nonfinite);
	out->sqnr_db = cr->sqnr_db;
	out->consistent = cr->consistent;
	copy_str(out->reason, sizeof out->reason, cr->reason);
	fosc_reply_free(&rp.r);
	return FOS_CODE_OK;
}

static int backward_call(fos_client *c, fos_context *ctx, const fos_tensor *dy, int keep, fos_tensor *dx,
			 fos_tensor *dw, fos_tensor *db, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__BackwardRequest br = FOS__BACKWARD_REQUEST__INIT;
	Fos__Tensor tdy;
	rq.op_case = FOS__REQUEST__OP_BACKWARD;
	rq.backward = &br;
	br.context_id = ctx->id;
	br.dy = &tdy;
	br.keep_context = keep;
	br.skip_dx = !dx; /* not wanted: not computed (BackwardRequest.skip_dx) */
	br.skip_dw = !dw;
	fosc_in ins[1] = {{&tdy, dy, "dy"}};
	static const char *const out_names[] = {"dx", "dw", "db"};
	fos_tensor *outs[] = {dx, dw, db};
	const opcall oc = {ins, 1, out_names, outs, 3, FOS__RESPONSE__RESULT_BACKWARD, "backward result", NULL};
	opreply rp;
	const Fos__BackwardResult *res = op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	int64_t m = dy->shape[0], n = dy->shape[1], k = ctx->k > 0 ? ctx->k : 0;
	if ((dx && (rp.code = fosc_out(&rp.r, res->dx, "dx", FOS_DTYPE_BF16, k ? m : -1, k, dx, st))) ||
	    (dw && (rp.code = fosc_out(&rp.r, res->dw, "dw", FOS_DTYPE_BF16, k ? n : -1, k, dw, st))))
		goto fail;
	if (res->db) {
		if ((rp.code = fosc_out(&rp.r, res->db, "db", FOS_DTYPE_BF16, n, 0, db, st)))
			goto fail;
	} else {
		fosc_out_none(db);
	}
	if (!keep)
		ctx->id = 0;
	goto out;
fail:
	outset_fail(&rp.os, rp.code);
out:
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_backward(fos_client *c, fos_context *ctx, const fos_tensor *dy, const fos_backward_opts *o,
		 fos_tensor *dx, fos_tensor *dw, fos_tensor *db, fos_status *st)
{
	if (!ctx)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no context");
	if (!dy || dy->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "dy must be a 2-D tensor (M, N)");
	int keep = o ? o->keep_context : 0;
	int code = FOS_CODE_NOT_FOUND;
	if (ctx->id)
		code = backward_call(c, ctx, dy, keep, dx, dw, db, st);
	else
		fosc_status(st, code, "the context was released or consumed");
	if (code != FOS_CODE_NOT_FOUND || !o || !o->recompute_x)
		return code;
	if (ctx->has_bias && !o->recompute_bias)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
				   "the context is gone and its forward had a bias: pass recompute_bias to recompute it");
	/* the context is gone: recompute it from X against the same weight version */
	fos_forward_opts fo = {ctx->weight_version, ctx->override, ctx->row_scaled, 1, ctx->four_over_six};
	fos_context fresh;
	code = forward_call(c, ctx->weight, o->recompute_x, ctx->has_bias ? o->recompute_bias : NULL, &fo, 1, NULL,
			    &fresh, st);
	if (code) {
		if (code == FOS_CODE_NOT_FOUND || code == FOS_CODE_FAILED_PRECONDITION) {
			char m[sizeof st->message];
			snprintf(m, sizeof m, "%s", st ? st->message : "");
			return fosc_status(st, code, "cannot recompute the expired context: %s", m);
		}
		return code;
	}
	int recomputed = ctx->recomputed + 1;
	int64_t n = ctx->n;
	*ctx = fresh;
	ctx->recomputed = recomputed;
	ctx->n = n ? n : dy->shape[1];
	return backward_call(c, ctx, dy, keep, dx, dw, db, st);
}

int fos_release(fos_client *c, fos_context *ctx, fos_status *st)
{
	if (!ctx || !ctx->id)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no context to release");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ReleaseContextRequest rr = FOS__RELEASE_CONTEXT_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_RELEASE_CONTEXT;
	rq.release_context = &rr;
	rr.context_id = ctx->id;
	fosc_reply r;
	int code = fosc_call_cleanup(c, &rq, &r, st); /* no connection: fosd gone, or it expires by its TTL */
	if (!code) {
		fosc_reply_free(&r);
		ctx->id = 0;
	}
	return code;
}

/* ---- stateless ops -------------------------------------------------------------------------- */

int fos_quantize(fos_client *c, const fos_tensor *x, const fos_quant_config *cfg, const fos_tensor *amax_in,
		 fos_tensor *codes, fos_tensor *scales, fos_tensor *amax_out, fos_status *st)
{
	if (!x || x->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "x must be a 2-D tensor (rows, cols)");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
	Fos__QuantConfig qc = FOS__QUANT_CONFIG__INIT;
	Fos__Tensor tx, ta;
	rq.op_case = FOS__REQUEST__OP_QUANTIZE;
	rq.quantize = &qr;
	qr.x = &tx;
	qr.config = &qc;
	qr.amax = amax_in ? &ta : NULL;
	if (cfg) {
		qc.recipe = cfg->recipe;
		qc.block = cfg->block;
		qc.err_mode = cfg->err_mode;
		qc.bound = (uint32_t)cfg->bound;
		qc.row_scaled = cfg->row_scaled;
	}
	fosc_in ins[2] = {{&tx, x, "x"}, {&ta, amax_in, "amax"}};
	static const char *const out_names[] = {"codes", "scales", "amax"};
	fos_tensor *outs[] = {codes, scales, amax_out};
	const opcall oc = {ins, amax_in ? 2 : 1, out_names, outs, 3, FOS__RESPONSE__RESULT_QUANTIZE, "quantize result",
			   NULL};
	opreply rp;
	const Fos__QuantizeResult *res = op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	int64_t rows = x->shape[0], cols = x->shape[1];
	int rs = cfg && cfg->row_scaled;
	if ((rp.code = fosc_out(&rp.r, res->codes, "codes", FOS_DTYPE_U8, rows, cols / 2, codes, st)) ||
	    (rp.code = fosc_out(&rp.r, res->scales, "scales", FOS_DTYPE_E4M3, rows, cols / 16, scales, st)) ||
	    (rp.code = fosc_out(&rp.r, res->amax, "amax", FOS_DTYPE_F32, rs ? rows : 1, 0, amax_out, st)))
		outset_fail(&rp.os, rp.code);
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_dequantize(fos_client *c, const fos_tensor *codes, const fos_tensor *scales, const fos_tensor *amax,
		   int bound, int row_scaled, int out_dtype, fos_tensor *out, fos_status *st)
{
	if (!codes || codes->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "codes must be a 2-D tensor (rows, cols/2)");
	if (out_dtype != FOS_DTYPE_BF16 && out_dtype != FOS_DTYPE_F32)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "out_dtype must be bf16 or f32");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__DequantizeRequest dr = FOS__DEQUANTIZE_REQUEST__INIT;
	Fos__Tensor tc, ts, ta;
	rq.op_case = FOS__REQUEST__OP_DEQUANTIZE;
	rq.dequantize = &dr;
	dr.codes = &tc;
	dr.scales = &ts;
	dr.amax = &ta;
	dr.bound = bound > 0 ? (uint32_t)bound : 0;
	dr.row_scaled = row_scaled;
	dr.out_dtype = out_dtype;
	fosc_in ins[3] = {{&tc, codes, "codes"}, {&ts, scales, "scales"}, {&ta, amax, "amax"}};
	static const char *const out_names[] = {"out"};
	fos_tensor *outs[] = {out};
	const opcall oc = {ins, 3, out_names, outs, 1, FOS__RESPONSE__RESULT_DEQUANTIZE, "dequantize result", NULL};
	opreply rp;
	const Fos__DequantizeResult *res = op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	rp.code = fosc_out(&rp.r, res->out, "out", out_dtype, codes->shape[0], codes->shape[1] * 2, out, st);
	fosc_reply_free(&rp.r);
	return rp.code;
}

int fos_linear(fos_client *c, const fos_tensor *x, const fos_tensor *w, const fos_tensor *bias,
	       const fos_tensor *dy, const fos_linear_config *cfg, fos_tensor *y, fos_tensor *dx, fos_tensor *dw,
	       fos_tensor *db, fos_status *st)
{
	if (!x || x->ndim != 2 || !w || w->ndim != 2)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "x and w must be 2-D tensors");
	if (!y)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no output tensor for y");
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
	Fos__LinearOptions lo = FOS__LINEAR_OPTIONS__INIT;
	Fos__Tensor tx, tw, tb, tdy;
	rq.op_case = FOS__REQUEST__OP_LINEAR;
	rq.linear = &lr;
	lr.x = &tx;
	lr.w = &tw;
	lr.bias = bias ? &tb : NULL;
	lr.dy = dy ? &tdy : NULL;
	lr.options = &lo;
	if (cfg) {
		lo.override = cfg->override;
		lo.weight_block = cfg->weight_block;
		lo.err_mode = cfg->err_mode;
		lo.bound = (uint32_t)cfg->bound;
		lo.row_scaled = cfg->row_scaled;
		lo.four_over_six = (Fos__FourOverSix)cfg->four_over_six;
	}
	fosc_in ins[4];
	int nin = 0;
	ins[nin++] = (fosc_in){&tx, x, "x"};
	ins[nin++] = (fosc_in){&tw, w, "w"};
	if (bias)
		ins[nin++] = (fosc_in){&tb, bias, "bias"};
	if (dy)
		ins[nin++] = (fosc_in){&tdy, dy, "dy"};
	static const char *const out_names[] = {"y", "dx", "dw", "db"};
	fos_tensor *outs[] = {y, dy ? dx : NULL, dy ? dw : NULL, dy ? db : NULL};
	const opcall oc = {ins, nin, out_names, outs, 4, FOS__RESPONSE__RESULT_LINEAR, "linear result", NULL};
	opreply rp;
	const Fos__LinearResult *res = op_call(c, &rq, &oc, &rp, st);
	if (!res)
		return rp.code;
	int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if ((rp.code = fosc_out(&rp.r, res->y, "y", FOS_DTYPE_BF16, m, n, y, st)))
		goto fail;
	if (dy) {
		if ((rp.code = fosc_out(&rp.r, res->dx, "dx", FOS_DTYPE_BF16, m, k, dx, st)) ||
		    (rp.code = fosc_out(&rp.r, res->dw, "dw", FOS_DTYPE_BF16, n, k, dw, st)))
			goto fail;
		if (res->db) {
			if ((rp.code = fosc_out(&rp.r, res->db, "db", FOS_DTYPE_BF16, n, 0, db, st)))
				goto fail;
		} else {
			fosc_out_none(db);
		}
	} else {
		fosc_out_none(dx);
		fosc_out_none(dw);
		fosc_out_none(db);
	}
	goto out;
fail:
	outset_fail(&rp.os, rp.code);
out:
	fosc_reply_free(&rp.r);
	return rp.code;
}
