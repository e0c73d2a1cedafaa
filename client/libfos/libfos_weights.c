/* libfos_weights.c: libfos's weight cache operations: PutWeight (with placements over several
 * devices; the handle remembers each weight for the re-put after a fosd restart), DropWeight and
 * ListWeights (pages, or every page). Each fills a fos.Request, calls fosc_op_call or fosc_call
 * and copies the reply out. */
#include "libfos_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- weights -------------------------------------------------------------------------------- */

static void weight_info_from(const Fos__WeightInfo *wi, fos_weight_info *o)
{
	memset(o, 0, sizeof *o);
	fosc_copy_str(o->name, sizeof o->name, wi->name);
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

int fosc_put_request(Fos__PutWeightRequest *pw, Fos__WeightConfig *wc, Fos__WeightUse uses[4], Fos__Tensor *tw,
		     const char *name, uint64_t version, const fos_weight_config *cfg, fos_status *st)
{
	if (!name)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight name");
	if (cfg && (cfg->uses & ~FOS_WEIGHT_USES_ALL))
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "uses 0x%x has bits other than FOS_WEIGHT_USE_*",
				   (unsigned)cfg->uses);
	fos__put_weight_request__init(pw);
	fos__weight_config__init(wc);
	pw->name = (char *)name;
	pw->version = version;
	pw->w = tw;
	pw->config = wc;
	if (cfg) {
		wc->weight_block = cfg->weight_block;
		wc->err_mode = cfg->err_mode;
		wc->bound = (uint32_t)cfg->bound;
		pw->pin = cfg->pin;
		pw->drop_master = cfg->drop_master;
		pw->eager_columnwise = cfg->eager_columnwise;
		wc->four_over_six = (Fos__FourOverSix)cfg->four_over_six;
	}
	for (int b = 0; cfg && b < 4; b++) /* bit b is wire value b + 1 */
		if (cfg->uses & (1 << b))
			uses[pw->n_uses++] = (Fos__WeightUse)(b + 1);
	pw->uses = uses;
	return FOS_CODE_OK;
}

static int put_weight_call(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
			   const fos_weight_config *cfg, const fosc_place *pl, fos_weight_info *info,
			   fos_weight_entry *entry, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__PutWeightRequest pw;
	Fos__WeightConfig wc;
	Fos__Tensor tw;
	Fos__WeightUse uses[4];
	int code = fosc_put_request(&pw, &wc, uses, &tw, name, version, cfg, st);
	if (code)
		return code;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	uint32_t devs[FOS_DEVICES_MAX];
	if (pl) {
		memcpy(devs, pl->devices, pl->n * sizeof devs[0]);
		pw.devices = devs;
		pw.n_devices = pl->n;
		pw.replicas = pl->replicas;
	}
	fosc_in ins[1] = {{&tw, w, "w"}};
	/* asynchronously with the default placement only, and without the re-put copies (which read W) */
	const fosc_async_desc ad = {"PutWeight", name, 0};
	int gpus = 0; /* fosd's GPUs (Health): over several, a PutWeight runs as stages and cannot go so */
	if (c->cuda_mu_ok) {
		pthread_mutex_lock(&c->cuda_mu);
		gpus = c->n_srv_gpus;
		pthread_mutex_unlock(&c->cuda_mu);
	}
	const int async = !entry && !c->reput && gpus <= 1 && (!pl || (!pl->n && !pl->replicas)) &&
			  fosc_async_wanted(c, ins, 1, NULL, 0);
	const opcall oc = {ins, 1, NULL, NULL, 0, FOS__RESPONSE__RESULT_PUT_WEIGHT, "weight info", NULL,
			   async ? &ad : NULL};
	opreply rp;
	const Fos__PutWeightResult *pr = fosc_op_call(c, &rq, &oc, &rp, st);
	if (!pr && rp.async && !rp.code && info) { /* what the call knows; the rest 0 */
		memset(info, 0, sizeof *info);
		fosc_copy_str(info->name, sizeof info->name, name);
		info->version = version;
		info->n = w->shape[0];
		info->k = w->ndim > 1 ? w->shape[1] : 0;
		info->weight_uses = cfg && cfg->uses ? cfg->uses : FOS_WEIGHT_USES_ALL;
	}
	if (!pr)
		return rp.code;
	if (!pr->info) {
		fosc_reply_free(&rp.r);
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply has no weight info");
	}
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
	const opcall oc = {NULL, 0, NULL, NULL, 0, FOS__RESPONSE__RESULT_LIST_WEIGHTS, "weight list", NULL, NULL};
	opreply rp;
	const Fos__ListWeightsResult *lr = fosc_op_call(c, &rq, &oc, &rp, st);
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
