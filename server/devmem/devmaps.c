/* devmaps.c: the table of client GPU allocations and IPC events fosd has open (devmem.h): one entry
 * per (pipe, tenant, kind, handle), reference counted by the requests using it, closed by
 * CloseDeviceMemory, by its pipe going away, or as the least recently used idle entry of a pipe at
 * its limit; an entry closed while referenced is let go by its last release. Below the entries,
 * each allocation is opened once for the whole process (the driver refuses a second open of a
 * handle: "already mapped"), shared by every entry naming its handle and unmapped with the last.
 * Entries and counters are guarded by dm->mu; the process-wide opens by dm->open_mu, which also
 * serializes the backend calls that open and close them (never while holding dm->mu). */
#include "devmem.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One allocation opened in this process. */
typedef struct fosd_devopen {
	struct fosd_devopen *next;
	uint8_t handle[FOSD_DEV_HANDLE_BYTES];
	void *base;
	size_t size;
	int users; /* entries using it */
} fosd_devopen;

struct fosd_devmap {
	fosd_devmap *next;
	fosd_devopen *open; /* memory: the process-wide open */
	uint32_t pipe;
	char *tenant; /* NULL: anonymous */
	int is_event;
	uint8_t handle[FOSD_DEV_HANDLE_BYTES];
	void *base;   /* the mapping, or the event */
	size_t size;
	int refs;     /* requests using it now */
	int listed;   /* in dm->head (not yet closed) */
	uint64_t last_use;
};

static int same_tenant(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

int fosd_devmaps_init(fosd_devmaps *dm, fos_backend *be)
{
	memset(dm, 0, sizeof *dm);
	dm->be = be && be->ipc_open && be->ipc_close && be->has_uuid ? be : NULL;
	if (pthread_mutex_init(&dm->open_mu, NULL))
		return -1;
	return pthread_mutex_init(&dm->mu, NULL) ? -1 : 0;
}

/* The process-wide open of handle (made now if there is none), with one more user. NULL with a
 * code and msg when the driver refuses it. */
static fosd_devopen *open_get(fosd_devmaps *dm, const uint8_t *handle, int *code, char *msg, size_t msgsz)
{
	pthread_mutex_lock(&dm->open_mu);
	fosd_devopen *o = dm->opens;
	while (o && memcmp(o->handle, handle, FOSD_DEV_HANDLE_BYTES))
		o = o->next;
	if (!o) {
		fos_err e;
		memset(&e, 0, sizeof e);
		o = calloc(1, sizeof *o);
		int rc = o ? dm->be->ipc_open(dm->be, handle, &o->base, &o->size, &e) : FOS_ENOMEM;
		if (rc) {
			free(o);
			pthread_mutex_unlock(&dm->open_mu);
			*code = rc == FOS_EINVAL ? FOS__CODE__INVALID_ARGUMENT
				: rc == FOS_ENOMEM ? FOS__CODE__RESOURCE_EXHAUSTED
						   : FOS__CODE__INTERNAL;
			snprintf(msg, msgsz,
				 "cannot open the CUDA IPC memory handle (is it from a live process on this GPU?): %s",
				 rc == FOS_ENOMEM && !e.msg[0] ? "out of memory" : e.msg);
			return NULL;
		}
		memcpy(o->handle, handle, FOSD_DEV_HANDLE_BYTES);
		o->next = dm->opens;
		dm->opens = o;
		pthread_mutex_lock(&dm->mu);
		dm->bytes += o->size;
		pthread_mutex_unlock(&dm->mu);
	}
	o->users++;
	pthread_mutex_unlock(&dm->open_mu);
	return o;
}

static void open_put(fosd_devmaps *dm, fosd_devopen *o)
{
	pthread_mutex_lock(&dm->open_mu);
	if (--o->users == 0) {
		for (fosd_devopen **pp = &dm->opens; *pp; pp = &(*pp)->next)
			if (*pp == o) {
				*pp = o->next;
				break;
			}
		dm->be->ipc_close(dm->be, o->base);
		pthread_mutex_lock(&dm->mu);
		dm->bytes -= o->size;
		pthread_mutex_unlock(&dm->mu);
		free(o);
	}
	pthread_mutex_unlock(&dm->open_mu);
}

/* Unmaps an entry no longer listed nor referenced. */
static void entry_free(fosd_devmaps *dm, fosd_devmap *m)
{
	if (m->is_event && m->base)
		dm->be->ipc_event_close(dm->be, m->base);
	if (m->open)
		open_put(dm, m->open);
	free(m->tenant);
	free(m);
}

/* Takes m off the list (dm->mu held); the caller frees it when it has no references. */
static void unlist_locked(fosd_devmaps *dm, fosd_devmap *m)
{
	for (fosd_devmap **pp = &dm->head; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	m->listed = 0;
	m->next = NULL;
	if (m->is_event)
		dm->events--;
	else
		dm->count--;
}

void fosd_devmaps_destroy(fosd_devmaps *dm)
{
	fosd_devmap *m = dm->head;
	while (m) {
		fosd_devmap *next = m->next;
		entry_free(dm, m);
		m = next;
	}
	dm->head = NULL;
	fosd_pipeset_free(&dm->live);
	pthread_mutex_destroy(&dm->mu);
	pthread_mutex_destroy(&dm->open_mu);
}

void fosd_devmaps_pipe_opened(fosd_devmaps *dm, uint32_t pipe)
{
	pthread_mutex_lock(&dm->mu);
	/* without room the pipe is simply not live: its device tensors are refused */
	fosd_pipeset_add(&dm->live, pipe);
	pthread_mutex_unlock(&dm->mu);
}

void fosd_devmaps_pipe_closed(fosd_devmaps *dm, uint32_t pipe)
{
	fosd_devmap *gone = NULL;
	pthread_mutex_lock(&dm->mu);
	fosd_pipeset_remove(&dm->live, pipe);
	fosd_devmap *m = dm->head;
	while (m) {
		fosd_devmap *next = m->next;
		if (m->pipe == pipe) {
			unlist_locked(dm, m);
			if (!m->refs) {
				m->next = gone;
				gone = m;
			}
		}
		m = next;
	}
	pthread_mutex_unlock(&dm->mu);
	while (gone) {
		fosd_devmap *next = gone->next;
		entry_free(dm, gone);
		gone = next;
	}
}

static fosd_devmap *find_locked(fosd_devmaps *dm, uint32_t pipe, const char *tenant, int is_event,
				const uint8_t *handle)
{
	for (fosd_devmap *m = dm->head; m; m = m->next)
		if (m->pipe == pipe && m->is_event == is_event && same_tenant(m->tenant, tenant) &&
		    !memcmp(m->handle, handle, FOSD_DEV_HANDLE_BYTES))
			return m;
	return NULL;
}

int fosd_devmaps_close(fosd_devmaps *dm, uint32_t pipe, const char *tenant, const uint8_t *handle, size_t hlen,
		       char *msg, size_t msgsz)
{
	if (hlen != FOSD_DEV_HANDLE_BYTES) {
		snprintf(msg, msgsz, "ipc_handle is %zu bytes; a CUDA IPC memory handle is %d", hlen, FOSD_DEV_HANDLE_BYTES);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	pthread_mutex_lock(&dm->mu);
	fosd_devmap *m = find_locked(dm, pipe, tenant, 0, handle);
	if (!m) {
		pthread_mutex_unlock(&dm->mu);
		snprintf(msg, msgsz, "this connection%s has no mapping of that CUDA IPC handle", tenant ? " and tenant" : "");
		return FOS__CODE__NOT_FOUND;
	}
	unlist_locked(dm, m);
	int now = !m->refs;
	pthread_mutex_unlock(&dm->mu);
	if (now)
		entry_free(dm, m);
	return 0;
}

void fosd_devmaps_stats(fosd_devmaps *dm, uint64_t *count, uint64_t *bytes, uint64_t *tensors, uint64_t *staged)
{
	pthread_mutex_lock(&dm->mu);
	if (count)
		*count = dm->count;
	if (bytes)
		*bytes = dm->bytes;
	if (tensors)
		*tensors = dm->tensors;
	if (staged)
		*staged = dm->staged;
	pthread_mutex_unlock(&dm->mu);
}

void fosd_devmaps_count(fosd_devmaps *dm, int tensors, int staged)
{
	pthread_mutex_lock(&dm->mu);
	dm->tensors += (uint64_t)tensors;
	dm->staged += (uint64_t)staged;
	pthread_mutex_unlock(&dm->mu);
}

/* At the pipe and tenant's limit: unlists the least recently used idle entry of that kind and
 * returns it for the caller to free; NULL when every one is in use. */
static fosd_devmap *evict_locked(fosd_devmaps *dm, uint32_t pipe, const char *tenant, int is_event, int limit,
				 int *full)
{
	int n = 0;
	fosd_devmap *lru = NULL;
	for (fosd_devmap *m = dm->head; m; m = m->next)
		if (m->pipe == pipe && m->is_event == is_event && same_tenant(m->tenant, tenant)) {
			n++;
			if (!m->refs && (!lru || m->last_use < lru->last_use))
				lru = m;
		}
	*full = 0;
	if (n < limit)
		return NULL;
	if (!lru) {
		*full = 1;
		return NULL;
	}
	unlist_locked(dm, lru);
	return lru;
}

fosd_devmap *fosd_devmaps_acquire(fosd_devmaps *dm, uint32_t pipe, const char *tenant, int is_event,
				  const uint8_t handle[FOSD_DEV_HANDLE_BYTES], int *code, char *msg, size_t msgsz)
{
	const char *kind = is_event ? "CUDA IPC event" : "CUDA IPC memory handle";
	pthread_mutex_lock(&dm->mu);
	fosd_devmap *m = find_locked(dm, pipe, tenant, is_event, handle);
	if (m) {
		m->refs++;
		m->last_use = ++dm->tick;
		pthread_mutex_unlock(&dm->mu);
		return m;
	}
	int full;
	fosd_devmap *old = evict_locked(dm, pipe, tenant, is_event, is_event ? FOSD_DEV_MAX_EVENTS : FOSD_DEV_MAX_PER_PIPE,
					&full);
	pthread_mutex_unlock(&dm->mu);
	if (old)
		entry_free(dm, old);
	if (full) {
		*code = FOS__CODE__RESOURCE_EXHAUSTED;
		snprintf(msg, msgsz, "this connection has %d %ss open, all in use by requests in progress",
			 is_event ? FOSD_DEV_MAX_EVENTS : FOSD_DEV_MAX_PER_PIPE, kind);
		return NULL;
	}
	m = calloc(1, sizeof *m);
	if (!m || (tenant && *tenant && !(m->tenant = strdup(tenant)))) {
		free(m);
		*code = FOS__CODE__RESOURCE_EXHAUSTED;
		snprintf(msg, msgsz, "out of memory opening a %s", kind);
		return NULL;
	}
	m->pipe = pipe;
	m->is_event = is_event;
	memcpy(m->handle, handle, FOSD_DEV_HANDLE_BYTES);
	if (is_event) {
		fos_err e;
		memset(&e, 0, sizeof e);
		int rc = dm->be->ipc_event_open(dm->be, handle, &m->base, &e);
		if (rc) {
			m->base = NULL;
			entry_free(dm, m);
			*code = rc == FOS_EINVAL ? FOS__CODE__INVALID_ARGUMENT : FOS__CODE__INTERNAL;
			snprintf(msg, msgsz, "cannot open the %s (is it from a live process on this GPU?): %s", kind, e.msg);
			return NULL;
		}
	} else {
		if (!(m->open = open_get(dm, handle, code, msg, msgsz))) {
			entry_free(dm, m);
			return NULL;
		}
		m->base = m->open->base;
		m->size = m->open->size;
	}
	pthread_mutex_lock(&dm->mu);
	fosd_devmap *dup = find_locked(dm, pipe, tenant, is_event, handle); /* a concurrent request */
	if (dup || !fosd_pipeset_has(&dm->live, pipe)) {
		if (dup) {
			dup->refs++;
			dup->last_use = ++dm->tick;
		}
		pthread_mutex_unlock(&dm->mu);
		entry_free(dm, m); /* gives back its share of the open */
		if (dup)
			return dup;
		*code = FOS__CODE__UNAVAILABLE;
		snprintf(msg, msgsz, "the connection closed while the %s was opened", kind);
		return NULL;
	}
	m->refs = 1;
	m->listed = 1;
	m->last_use = ++dm->tick;
	m->next = dm->head;
	dm->head = m;
	if (is_event)
		dm->events++;
	else
		dm->count++;
	pthread_mutex_unlock(&dm->mu);
	fosd_debug("connection %u: opened a %s (%zu bytes)", (unsigned)pipe, kind, m->size);
	return m;
}

void fosd_devmaps_release(fosd_devmaps *dm, fosd_devmap *m)
{
	pthread_mutex_lock(&dm->mu);
	int now = --m->refs == 0 && !m->listed;
	pthread_mutex_unlock(&dm->mu);
	if (now)
		entry_free(dm, m);
}

uint8_t *fosd_devmap_base(const fosd_devmap *m)
{
	return m->base;
}

uint64_t fosd_devmap_size(const fosd_devmap *m)
{
	return m->size;
}

void *fosd_devmap_event(const fosd_devmap *m)
{
	return m->is_event ? m->base : NULL;
}
