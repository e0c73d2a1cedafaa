/* libfos_shm.c: libfos's shared-memory regions (fos.h, "shared-memory regions"): creating a memfd
 * or POSIX shm object, mapping it and registering it with fosd under a key fosd can open ("fd:N":
 * fosd opens /proc/<our pid>/fd/N after checking our credentials on the ipc connection), the
 * handle's list of regions, turning tensors that lie in a region into references (inputs) and
 * ShmOutputs (results written in place), checking such results in the reply, and registering
 * again after a reconnect. */
#include "libfos_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct fos_region {
	fos_client *c;
	char name[FOS_NAME_MAX + 1];
	char key[300];
	uint8_t *base;
	size_t size;
	int fd;    /* created here: ours to close; -1 when attached */
	int owned; /* created here: unmapped and closed by fos_region_destroy */
	struct fos_region *next;
};

static atomic_uint fosc_region_seq;

int fosc_region_register(fos_client *c, const char *name, const char *key, uint64_t size, int channel,
			 uint32_t spin_us, uint64_t *channel_bytes, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__RegisterRegionRequest rr = FOS__REGISTER_REGION_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_REGISTER_REGION;
	rq.register_region = &rr;
	rr.name = (char *)name;
	rr.key = (char *)key;
	rr.size = size;
	rr.channel = channel != 0;
	rr.spin_us = spin_us;
	fosc_reply r;
	int code = fosc_call(c, &rq, NULL, 0, &r, st);
	if (!code) {
		if (channel_bytes)
			*channel_bytes = r.resp->register_region && r.resp->register_region->info
						 ? r.resp->register_region->info->channel_bytes
						 : 0;
		fosc_reply_free(&r);
	}
	return code;
}

static int fosc_register(fos_client *c, const char *name, const char *key, uint64_t size, fos_status *st)
{
	return fosc_region_register(c, name, key, size, 0, 0, NULL, st);
}

int fosc_region_unregister(fos_client *c, const char *name, fos_status *st)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__UnregisterRegionRequest ur = FOS__UNREGISTER_REGION_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_UNREGISTER_REGION;
	rq.unregister_region = &ur;
	ur.name = (char *)name;
	fosc_reply r;
	int code = fosc_call_cleanup(c, &rq, &r, st); /* with no connection fosd holds none of ours */
	if (!code)
		fosc_reply_free(&r);
	return code;
}

static void fosc_region_add(fos_client *c, fos_region *r)
{
	pthread_mutex_lock(&c->shm_mu);
	r->next = c->regions;
	c->regions = r;
	pthread_mutex_unlock(&c->shm_mu);
}

static void fosc_region_unmap(fos_region *r)
{
	if (r->owned) {
		if (r->base)
			munmap(r->base, r->size);
		if (r->fd >= 0)
			close(r->fd);
	}
	free(r);
}

/* Registers r (already mapped) and adds it to the handle; frees it on failure. */
static int fosc_region_finish(fos_client *c, fos_region *r, fos_region **out, fos_status *st)
{
	int code = fosc_register(c, r->name, r->key, r->size, st);
	if (code) {
		fosc_region_unmap(r);
		return code;
	}
	fosc_region_add(c, r);
	*out = r;
	return fosc_status(st, FOS_CODE_OK, "region '%s' registered (%zu bytes)", r->name, r->size);
}

static int fosc_region_new(fos_client *c, const char *name, size_t size, fos_region **rp, fos_status *st)
{
	if (!c || !c->shm_mu_ok)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no client handle");
	if (!size)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "a region needs at least 1 byte");
	fos_region *r = calloc(1, sizeof *r);
	if (!r)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	r->c = c;
	r->fd = -1;
	r->size = size;
	if (name) {
		size_t n = strlen(name);
		if (n < 1 || n > FOS_NAME_MAX) {
			free(r);
			return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "region name must be 1 to %d bytes",
					   FOS_NAME_MAX);
		}
		memcpy(r->name, name, n + 1);
	} else {
		snprintf(r->name, sizeof r->name, "libfos.%d.%u", (int)getpid(), atomic_fetch_add(&fosc_region_seq, 1));
	}
	*rp = r;
	return FOS_CODE_OK;
}

int fos_region_create(fos_client *c, const char *name, size_t size, int kind, fos_region **out, fos_status *st)
{
	if (!out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no place for the region");
	*out = NULL;
	if (kind != FOS_REGION_MEMFD && kind != FOS_REGION_POSIX)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "unknown region kind %d", kind);
	fos_region *r;
	int code = fosc_region_new(c, name, size, &r, st);
	if (code)
		return code;
	r->owned = 1;
	const char *what;
	if (kind == FOS_REGION_MEMFD) {
		char label[160];
		snprintf(label, sizeof label, "libfos:%s", r->name);
		what = "memfd_create";
		r->fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	} else {
		char shm_name[96];
		unsigned seq = atomic_fetch_add(&fosc_region_seq, 1);
		snprintf(shm_name, sizeof shm_name, "/libfos-%d-%u-%llx", (int)getpid(), seq,
			 (unsigned long long)(c->client_id & 0xffffffffffull));
		what = "shm_open";
		r->fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (r->fd >= 0)
			shm_unlink(shm_name); /* only our descriptor (and fosd's) keep it */
	}
	if (r->fd < 0 || ftruncate(r->fd, (off_t)size)) {
		int err = errno;
		code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "%s of %zu bytes: %s", r->fd < 0 ? what : "ftruncate",
				   size, strerror(err));
		fosc_region_unmap(r);
		return code;
	}
	/* a sealed memfd can neither shrink nor grow: fosd never meets a shrunk region */
	if (kind == FOS_REGION_MEMFD && fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		code = fosc_status(st, FOS_CODE_INTERNAL, "sealing the memfd: %s", strerror(errno));
		fosc_region_unmap(r);
		return code;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (p == MAP_FAILED) {
		code = fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "mapping %zu bytes: %s", size, strerror(errno));
		fosc_region_unmap(r);
		return code;
	}
	r->base = p;
	snprintf(r->key, sizeof r->key, "fd:%d", r->fd);
	return fosc_region_finish(c, r, out, st);
}

int fos_region_attach(fos_client *c, const char *name, const char *key, void *base, size_t size, fos_region **out,
		      fos_status *st)
{
	if (!out)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no place for the region");
	*out = NULL;
	if (!key || !*key || strlen(key) >= sizeof((fos_region *)0)->key || !base)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "attach needs a key and the mapped memory");
	fos_region *r;
	int code = fosc_region_new(c, name, size, &r, st);
	if (code)
		return code;
	r->base = base;
	snprintf(r->key, sizeof r->key, "%s", key);
	return fosc_region_finish(c, r, out, st);
}

int fos_region_destroy(fos_region *r, fos_status *st)
{
	if (!r)
		return fosc_status(st, FOS_CODE_OK, "nothing to destroy");
	fos_client *c = r->c;
	pthread_mutex_lock(&c->shm_mu);
	fos_region **pp = &c->regions;
	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
	pthread_mutex_unlock(&c->shm_mu);
	if (fosc_inherited(c)) { /* a forked child's copy of its parent's region: unmapped here only */
		fosc_status(st, FOS_CODE_OK, "region '%s' unmapped in this forked child (the parent keeps it)", r->name);
		fosc_region_unmap(r);
		return FOS_CODE_OK;
	}
	fos_status ust;
	int code = fosc_region_unregister(c, r->name, &ust);
	/* a server that is gone, or a connection that was replaced, has released it already */
	if (code == FOS_CODE_NOT_FOUND || code == FOS_CODE_UNAVAILABLE || code == FOS_CODE_DEADLINE_EXCEEDED)
		code = FOS_CODE_OK;
	if (code)
		fosc_status(st, code, "unregistering region '%s': %s", r->name, ust.message);
	else
		fosc_status(st, FOS_CODE_OK, "region '%s' released", r->name);
	fosc_region_unmap(r);
	return code;
}

void *fos_region_data(const fos_region *r)
{
	return r ? r->base : NULL;
}

size_t fos_region_size(const fos_region *r)
{
	return r ? r->size : 0;
}

const char *fos_region_name(const fos_region *r)
{
	return r ? r->name : NULL;
}

int fos_region_fd(const fos_region *r)
{
	return r && r->owned ? r->fd : -1;
}

fos_tensor fos_tensor_shm(const fos_region *r, size_t offset, int dtype, int64_t d0, int64_t d1)
{
	fos_tensor t = d1 > 0 ? fos_tensor_2d(dtype, d0, d1, NULL) : fos_tensor_1d(dtype, d0, NULL);
	size_t bytes = fos_tensor_bytes(&t);
	if (r && bytes && offset <= r->size && bytes <= r->size - offset)
		t.data = r->base + offset;
	t.size = bytes;
	return t;
}

/* The region of c holding [p, p + len), or NULL; c->shm_mu held. */
static fos_region *fosc_region_of(fos_client *c, const void *p, size_t len, size_t *off)
{
	const uint8_t *b = p;
	for (fos_region *r = c->regions; r; r = r->next)
		if (b >= r->base && b < r->base + r->size) {
			size_t o = (size_t)(b - r->base);
			if (len > r->size - o)
				return NULL; /* runs past the end: not a region tensor */
			*off = o;
			return r;
		}
	return NULL;
}

int fosc_shm_in(fos_client *c, const fos_tensor *in, Fos__Tensor *t, int64_t *shape_store, Fos__ShmRef *ref)
{
	if (!c->shm_mu_ok || !in->data || in->mem != FOS_MEM_HOST)
		return 0;
	size_t off = 0;
	pthread_mutex_lock(&c->shm_mu);
	fos_region *r = c->regions ? fosc_region_of(c, in->data, fos_tensor_bytes(in), &off) : NULL;
	pthread_mutex_unlock(&c->shm_mu);
	if (!r)
		return 0;
	fosw_placer none;
	memset(&none, 0, sizeof none);
	fosw_tensor_init(t, shape_store, &none, in->dtype, in->ndim, in->shape);
	t->offset = 0;
	fos__shm_ref__init(ref);
	ref->region = r->name;
	ref->offset = off;
	t->shm = ref;
	return 1;
}

void fosc_shm_outputs(fos_client *c, Fos__Request *rq, fosc_shm_outs *st, const char *const *names,
		      fos_tensor *const *outs, int n)
{
	rq->n_shm_outputs = 0;
	rq->shm_outputs = st->p;
	if (!c->shm_mu_ok)
		return;
	pthread_mutex_lock(&c->shm_mu);
	for (int i = 0; c->regions && i < n && i < FOSW_MAX_TENSORS; i++) {
		fos_tensor *o = outs[i];
		size_t off = 0;
		fos_region *r = o && o->mem == FOS_MEM_HOST && o->data && o->size ? fosc_region_of(c, o->data, 1, &off) : NULL;
		if (!r)
			continue;
		size_t k = rq->n_shm_outputs++;
		fos__shm_output__init(&st->o[k]);
		fos__shm_ref__init(&st->ref[k]);
		st->ref[k].region = r->name;
		st->ref[k].offset = off;
		st->o[k].result = (char *)names[i];
		st->o[k].shm = &st->ref[k];
		st->o[k].capacity = o->size < r->size - off ? o->size : r->size - off;
		st->p[k] = &st->o[k];
	}
	pthread_mutex_unlock(&c->shm_mu);
}

int fosc_shm_out(const fosc_reply *r, const Fos__Tensor *t, const char *what, int dtype, int64_t exp_d0,
		 int64_t exp_d1, fos_tensor *out, fos_status *st)
{
	fosw_tensor v;
	int code = fosc_out_ref_check(t, what, dtype, exp_d0, exp_d1, t->offset ? "shm result with an offset" : NULL, &v,
				      st);
	if (code || !out)
		return code;
	fos_client *c = r->c;
	const char *rn = t->shm->region ? t->shm->region : "";
	const uint8_t *p = NULL;
	if (c && c->shm_mu_ok) {
		pthread_mutex_lock(&c->shm_mu);
		for (fos_region *g = c->regions; g; g = g->next)
			if (!strcmp(g->name, rn) && t->shm->offset <= g->size && v.len <= g->size - t->shm->offset)
				p = g->base + t->shm->offset;
		pthread_mutex_unlock(&c->shm_mu);
	}
	if (!p || p != out->data)
		return fosc_status(st, FOS_CODE_DATA_LOSS, "the reply's %s names shm region '%s' offset %llu, not its output buffer",
				   what, rn, (unsigned long long)t->shm->offset);
	return fosc_out_fits(out, &v, what, st);
}

int fosc_shm_reregister(fos_client *c, fos_status *st)
{
	if (!c->shm_mu_ok)
		return fosc_status(st, FOS_CODE_OK, "no regions");
	typedef struct {
		char name[FOS_NAME_MAX + 1];
		char key[300];
		uint64_t size;
	} item;
	pthread_mutex_lock(&c->shm_mu);
	size_t n = 0;
	for (fos_region *r = c->regions; r; r = r->next)
		n++;
	item *a = calloc(n ? n : 1, sizeof *a);
	size_t i = 0;
	for (fos_region *r = c->regions; a && r; r = r->next, i++) {
		memcpy(a[i].name, r->name, sizeof a[i].name);
		memcpy(a[i].key, r->key, sizeof a[i].key);
		a[i].size = r->size;
	}
	pthread_mutex_unlock(&c->shm_mu);
	if (!a)
		return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
	int first = FOS_CODE_OK;
	for (i = 0; i < n; i++) {
		int code = fosc_register(c, a[i].name, a[i].key, a[i].size, st);
		if (code && code != FOS_CODE_ALREADY_EXISTS && !first)
			first = code;
	}
	free(a);
	return first ? first : fosc_status(st, FOS_CODE_OK, "%zu region(s) registered again", n);
}

void fosc_shm_close(fos_client *c)
{
	if (!c->shm_mu_ok)
		return;
	pthread_mutex_lock(&c->shm_mu);
	fos_region *r = c->regions;
	c->regions = NULL;
	pthread_mutex_unlock(&c->shm_mu);
	while (r) {
		fos_region *next = r->next;
		fosc_region_unmap(r);
		r = next;
	}
}

int fos_region_stats(fos_client *c, uint64_t *regions, uint64_t *bytes, uint64_t *mapped, fos_status *st)
{
	fosc_reply r;
	int code;
	const Fos__StatsResult *s = fosc_stats_call(c, &r, &code, st);
	if (!s)
		return code;
	if (regions)
		*regions = s->shm_regions;
	if (bytes)
		*bytes = s->shm_region_bytes;
	if (mapped)
		*mapped = s->shm_mapped_bytes;
	fosc_reply_free(&r);
	return FOS_CODE_OK;
}
