/* regions.c: the table of registered shared-memory regions (see shm.h): opening a client's object
 * safely (credentials, file type, owner, size), mapping and pinning it once, lookups by (pipe,
 * tenant, name) with reference counts, and release on unregister, connection loss and shutdown.
 *
 * Each region keeps its object open (fstat before each use) and mapped from registration until
 * its last reference goes: one descriptor. rg->fds counts them, a registration in progress
 * included (it takes its unit before it opens anything), and never exceeds rg->max_total, the
 * share of the descriptor limit (fdlimit.c). Running out of descriptors anyway is
 * RESOURCE_EXHAUSTED, never a permission problem. */
#include "shm.h"
#include "util.h"
#include "log.h"
#include "fos_chan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct fosd_region {
	char name[FOSD_REGION_NAME_MAX + 1];
	char *tenant;       /* NULL: anonymous */
	uint32_t pipe;
	int fd;
	uint8_t *base;
	uint64_t size;
	int sealed;         /* F_SEAL_SHRINK: cannot shrink */
	int pinned;
	int refs;           /* 1 while registered + 1 per request using it (under rg->mu) */
	int listed;         /* still in the table */
	atomic_uint_fast64_t uses;
	struct fosd_chan *chan; /* a request channel serves it (chan.c); under rg->mu */
	void (*chan_signal)(struct fosd_chan *c); /* wakes it when the region is unregistered */
	fosd_region *next;
};

static int same_tenant(const char *a, const char *b)
{
	if (!a || !*a)
		return !b || !*b;
	return b && !strcmp(a, b);
}

int fosd_regions_init(fosd_regions *rg, const fos_backend *be)
{
	memset(rg, 0, sizeof *rg);
	if (pthread_mutex_init(&rg->mu, NULL))
		return -1;
	const fosd_pin_hook *h = fosd_shm_cuda_pin_hook();
	if (h && be && !strcmp(h->backend, be->name))
		rg->pin = h;
	rg->host_backend = be && !strcmp(be->name, "cpu");
	rg->max_total = FOSD_SHM_MAX_TOTAL;
	return 0;
}

/* Unpins, unmaps and frees a region nobody references any more (rg->mu not held). */
static void region_free(fosd_regions *rg, fosd_region *r)
{
	if (r->pinned && rg->pin)
		rg->pin->unpin(r->base);
	if (r->base)
		munmap(r->base, (size_t)r->size);
	if (r->fd >= 0)
		close(r->fd);
	pthread_mutex_lock(&rg->mu);
	rg->mapped -= r->size;
	if (r->pinned)
		rg->pinned -= r->size;
	rg->fds--;
	pthread_mutex_unlock(&rg->mu);
	free(r->tenant);
	free(r);
}

/* Gives back the descriptor unit of a registration that failed before it made its region. */
static void fd_unit_return(fosd_regions *rg)
{
	pthread_mutex_lock(&rg->mu);
	rg->fds--;
	pthread_mutex_unlock(&rg->mu);
}

/* The code and message of an open/stat that failed with err: out of descriptors (or kernel
 * memory) is RESOURCE_EXHAUSTED; ENOENT NOT_FOUND; anything else PERMISSION_DENIED. */
static int open_errno_code(int err, const char *key, const char *what, char *msg, size_t msgsz)
{
	if (fosd_fd_exhausted(err) || err == ENOMEM) {
		snprintf(msg, msgsz, "key '%s': %s: out of file descriptors (%s); fosd's descriptor limit is reached, "
			 "retry after other regions or connections are released", key, what, strerror(err));
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	snprintf(msg, msgsz, "key '%s': %s: %s", key, what, strerror(err));
	return err == ENOENT ? FOS__CODE__NOT_FOUND : FOS__CODE__PERMISSION_DENIED;
}

/* Takes r out of the table (rg->mu held); returns 1 when the caller must free it. */
static int unlist_locked(fosd_regions *rg, fosd_region *r)
{
	fosd_region **pp = &rg->head;
	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
	r->next = NULL;
	r->listed = 0;
	if (r->chan)
		r->chan_signal(r->chan); /* its thread ends and drops its reference */
	rg->count--;
	rg->bytes -= r->size;
	return --r->refs == 0;
}

void fosd_regions_destroy(fosd_regions *rg)
{
	for (;;) {
		pthread_mutex_lock(&rg->mu);
		fosd_region *r = rg->head;
		int gone = r ? unlist_locked(rg, r) : 0;
		pthread_mutex_unlock(&rg->mu);
		if (!r)
			break;
		if (gone)
			region_free(rg, r);
	}
	fosd_pipeset_free(&rg->live);
	pthread_mutex_destroy(&rg->mu);
}

void fosd_regions_pipe_opened(fosd_regions *rg, uint32_t pipe)
{
	pthread_mutex_lock(&rg->mu);
	int rc = fosd_pipeset_add(&rg->live, pipe);
	pthread_mutex_unlock(&rg->mu);
	if (rc) /* without an entry the connection cannot register regions: no leak */
		fosd_warn("shm: out of memory tracking connection %u", (unsigned)pipe);
}

static fosd_region *find_locked(fosd_regions *rg, uint32_t pipe, const char *tenant, const char *name)
{
	for (fosd_region *r = rg->head; r; r = r->next)
		if (r->pipe == pipe && same_tenant(r->tenant, tenant) && !strcmp(r->name, name))
			return r;
	return NULL;
}

/* Opens the object key names for a peer (pid, uid); returns the fd or -1 with *code and msg. */
static int open_key(const char *key, int peer_pid, int peer_uid, int *code, char *msg, size_t msgsz)
{
	char path[64];
	struct stat before, st;
	int fd = -1;
	memset(&before, 0, sizeof before);
	*code = FOS__CODE__INVALID_ARGUMENT;
	if (!strncmp(key, "fd:", 3)) {
		char *end;
		errno = 0;
		long n = strtol(key + 3, &end, 10);
		if (key[3] < '0' || key[3] > '9' || *end || errno || n < 0 || n > 1 << 24) {
			snprintf(msg, msgsz, "key '%s': fd:N with N a file descriptor number expected", key);
			return -1;
		}
		snprintf(path, sizeof path, "/proc/%d/fd/%ld", peer_pid, n);
		/* look before opening: only a regular file of the peer's is ever opened */
		if (stat(path, &before)) {
			int err = errno;
			char what[96];
			snprintf(what, sizeof what, "cannot open file descriptor %ld of the client (pid %d)", n, peer_pid);
			*code = open_errno_code(err, key, what, msg, msgsz);
			return -1;
		}
		if (!S_ISREG(before.st_mode) || (int)before.st_uid != peer_uid) {
			*code = S_ISREG(before.st_mode) ? FOS__CODE__PERMISSION_DENIED : FOS__CODE__INVALID_ARGUMENT;
			snprintf(msg, msgsz, "key '%s': %s", key,
				 S_ISREG(before.st_mode) ? "the object is not owned by the client's uid"
							 : "not a regular file (a memfd or shared-memory object expected)");
			return -1;
		}
		fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	} else if (!strncmp(key, "shm:/", 5)) {
		const char *nm = key + 4;
		size_t len = strlen(nm);
		for (size_t i = 1; i < len; i++) {
			char c = nm[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
			      c == '_' || c == '-')) {
				snprintf(msg, msgsz, "key '%s': a POSIX shm name is '/' then [A-Za-z0-9._-]", key);
				return -1;
			}
		}
		if (len < 2 || len > 200 || !strcmp(nm, "/.") || !strcmp(nm, "/..")) {
			snprintf(msg, msgsz, "key '%s': a POSIX shm name is '/' then 1 to 199 of [A-Za-z0-9._-]", key);
			return -1;
		}
		fd = shm_open(nm, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0);
	} else {
		snprintf(msg, msgsz, "key '%s': 'fd:N' or 'shm:/NAME' expected", key);
		return -1;
	}
	if (fd < 0) {
		*code = open_errno_code(errno, key, "cannot open the object", msg, msgsz);
		return -1;
	}
	if (fstat(fd, &st)) {
		*code = FOS__CODE__INTERNAL;
		snprintf(msg, msgsz, "key '%s': fstat: %s", key, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(msg, msgsz, "key '%s': not a regular file (a memfd or shared-memory object expected)", key);
		close(fd);
		return -1;
	}
	if ((int)st.st_uid != peer_uid) {
		*code = FOS__CODE__PERMISSION_DENIED;
		snprintf(msg, msgsz, "key '%s': the object belongs to uid %d, the client is uid %d", key, (int)st.st_uid,
			 peer_uid);
		close(fd);
		return -1;
	}
	if (!strncmp(key, "fd:", 3) && (st.st_dev != before.st_dev || st.st_ino != before.st_ino)) {
		*code = FOS__CODE__FAILED_PRECONDITION;
		snprintf(msg, msgsz, "key '%s': the file descriptor changed while it was opened", key);
		close(fd);
		return -1;
	}
	return fd;
}

int fosd_regions_register(fosd_regions *rg, uint32_t pipe, const char *tenant, int peer_pid, int peer_uid,
			  const char *name, const char *key, uint64_t size, fosd_region_info *info, char *msg,
			  size_t msgsz)
{
	int code;
	if (size < 1 || size > FOSD_SHM_MAX_SIZE || size > (uint64_t)SIZE_MAX) {
		snprintf(msg, msgsz, "region size %llu is not in 1 .. %llu", (unsigned long long)size,
			 (unsigned long long)FOSD_SHM_MAX_SIZE);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	/* refuse early what the table would refuse anyway; take a descriptor unit before opening */
	pthread_mutex_lock(&rg->mu);
	int mine = 0;
	for (fosd_region *r = rg->head; r; r = r->next)
		mine += r->pipe == pipe;
	int dup = find_locked(rg, pipe, tenant, name) != NULL;
	uint64_t held = rg->fds, most = rg->max_total;
	int room = !dup && mine < FOSD_SHM_MAX_PER_PIPE && held < most;
	if (room)
		rg->fds++;
	pthread_mutex_unlock(&rg->mu);
	if (dup) {
		snprintf(msg, msgsz, "region '%s' is already registered on this connection", name);
		return FOS__CODE__ALREADY_EXISTS;
	}
	if (mine >= FOSD_SHM_MAX_PER_PIPE) {
		snprintf(msg, msgsz, "too many regions on this connection: %d registered, at most %d per connection", mine,
			 FOSD_SHM_MAX_PER_PIPE);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	if (!room) {
		snprintf(msg, msgsz,
			 "too many shared-memory regions in all: %llu hold a descriptor (registered or still in use), at "
			 "most %llu (fosd's share of its descriptor limit for regions; unregister some, or raise the "
			 "limit)",
			 (unsigned long long)held, (unsigned long long)most);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}

	int fd = open_key(key, peer_pid, peer_uid, &code, msg, msgsz);
	if (fd < 0) {
		fd_unit_return(rg);
		return code;
	}
	struct stat st;
	memset(&st, 0, sizeof st);
	if (fstat(fd, &st) || (uint64_t)st.st_size < size) {
		snprintf(msg, msgsz, "region '%s': the object is %lld bytes, smaller than the %llu registered", name,
			 (long long)st.st_size, (unsigned long long)size);
		close(fd);
		fd_unit_return(rg);
		return FOS__CODE__INVALID_ARGUMENT;
	}
	int seals = fcntl(fd, F_GET_SEALS);
	fosd_region *r = calloc(1, sizeof *r);
	if (!r || (tenant && *tenant && !(r->tenant = strdup(tenant)))) {
		free(r);
		close(fd);
		fd_unit_return(rg);
		snprintf(msg, msgsz, "out of memory");
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	snprintf(r->name, sizeof r->name, "%s", name);
	r->pipe = pipe;
	r->fd = fd;
	r->size = size;
	r->sealed = seals >= 0 && (seals & F_SEAL_SHRINK);
	void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int err = errno;
		snprintf(msg, msgsz, "region '%s': cannot map %llu bytes: %s%s", name, (unsigned long long)size,
			 strerror(err), fosd_fd_exhausted(err) ? " (out of file descriptors)" : "");
		close(fd);
		free(r->tenant);
		free(r);
		fd_unit_return(rg);
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	r->base = p;
	pthread_mutex_lock(&rg->mu);
	rg->mapped += size;
	int may_pin = rg->pin && rg->pinned + size <= FOSD_SHM_MAX_PINNED;
	if (may_pin)
		rg->pinned += size; /* reserved; given back below if pinning fails */
	pthread_mutex_unlock(&rg->mu);
	if (may_pin) {
		char why[256];
		if (rg->pin->pin(r->base, (size_t)size, why, sizeof why) == 0) {
			r->pinned = 1;
		} else {
			fosd_warn("region '%s' (%llu bytes) is not pinned for DMA (%s): copies go through the CPU", name,
				  (unsigned long long)size, why);
			pthread_mutex_lock(&rg->mu);
			rg->pinned -= size;
			pthread_mutex_unlock(&rg->mu);
		}
	}
	pthread_mutex_lock(&rg->mu);
	int dup_now = find_locked(rg, pipe, tenant, name) != NULL; /* a concurrent request */
	if (dup_now || !fosd_pipeset_has(&rg->live, pipe)) {
		pthread_mutex_unlock(&rg->mu);
		r->refs = 0;
		region_free(rg, r);
		if (!dup_now) { /* the connection closed meanwhile: nobody could release it later */
			snprintf(msg, msgsz, "the connection closed before region '%s' was registered", name);
			return FOS__CODE__UNAVAILABLE;
		}
		snprintf(msg, msgsz, "region '%s' is already registered on this connection", name);
		return FOS__CODE__ALREADY_EXISTS;
	}
	r->refs = 1;
	r->listed = 1;
	r->next = rg->head;
	rg->head = r;
	rg->count++;
	rg->bytes += size;
	pthread_mutex_unlock(&rg->mu);
	if (info) {
		memset(info, 0, sizeof *info);
		snprintf(info->name, sizeof info->name, "%s", r->name);
		info->size = r->size;
		info->sealed = r->sealed;
		info->pinned = r->pinned;
	}
	fosd_info("shm: region '%s' registered (%llu bytes, %s, %s) by pid %d", name, (unsigned long long)size,
		   r->sealed ? "sealed" : "not sealed", r->pinned ? "pinned" : "not pinned", peer_pid);
	return 0;
}

int fosd_regions_unregister(fosd_regions *rg, uint32_t pipe, const char *tenant, const char *name, char *msg,
			    size_t msgsz)
{
	pthread_mutex_lock(&rg->mu);
	fosd_region *r = find_locked(rg, pipe, tenant, name);
	int gone = r ? unlist_locked(rg, r) : 0;
	pthread_mutex_unlock(&rg->mu);
	if (!r) {
		snprintf(msg, msgsz, "shm region '%s' is not registered on this connection", name);
		return FOS__CODE__NOT_FOUND;
	}
	if (gone)
		region_free(rg, r);
	return 0;
}

int fosd_regions_list(fosd_regions *rg, uint32_t pipe, const char *tenant, fosd_region_info **out, size_t *n)
{
	pthread_mutex_lock(&rg->mu);
	size_t cnt = 0;
	for (fosd_region *r = rg->head; r; r = r->next)
		cnt += r->pipe == pipe && same_tenant(r->tenant, tenant);
	fosd_region_info *a = calloc(cnt ? cnt : 1, sizeof *a);
	if (!a) {
		pthread_mutex_unlock(&rg->mu);
		return -1;
	}
	size_t i = 0;
	for (fosd_region *r = rg->head; r; r = r->next)
		if (r->pipe == pipe && same_tenant(r->tenant, tenant)) {
			snprintf(a[i].name, sizeof a[i].name, "%s", r->name);
			a[i].size = r->size;
			a[i].sealed = r->sealed;
			a[i].pinned = r->pinned;
			a[i].uses = atomic_load(&r->uses);
			a[i].channel_bytes = r->chan ? fos_chan_cap(r->size) : 0;
			i++;
		}
	pthread_mutex_unlock(&rg->mu);
	*out = a;
	*n = cnt;
	return 0;
}

void fosd_regions_pipe_closed(fosd_regions *rg, uint32_t pipe)
{
	int released = 0;
	pthread_mutex_lock(&rg->mu);
	fosd_pipeset_remove(&rg->live, pipe);
	pthread_mutex_unlock(&rg->mu);
	for (;;) {
		pthread_mutex_lock(&rg->mu);
		fosd_region *r = rg->head;
		while (r && r->pipe != pipe)
			r = r->next;
		int gone = r ? unlist_locked(rg, r) : 0;
		pthread_mutex_unlock(&rg->mu);
		if (!r)
			break;
		released++;
		if (gone)
			region_free(rg, r);
	}
	if (released)
		fosd_debug("shm: connection %u closed: %d region(s) released", (unsigned)pipe, released);
}

void fosd_regions_stats(fosd_regions *rg, uint64_t *count, uint64_t *bytes, uint64_t *mapped)
{
	pthread_mutex_lock(&rg->mu);
	*count = rg->count;
	*bytes = rg->bytes;
	*mapped = rg->mapped;
	pthread_mutex_unlock(&rg->mu);
}

fosd_region *fosd_regions_acquire(fosd_regions *rg, uint32_t pipe, const char *tenant, const char *name, int *code,
				  char *msg, size_t msgsz)
{
	pthread_mutex_lock(&rg->mu);
	fosd_region *r = find_locked(rg, pipe, tenant, name);
	if (r)
		r->refs++;
	pthread_mutex_unlock(&rg->mu);
	if (!r) {
		*code = FOS__CODE__NOT_FOUND;
		snprintf(msg, msgsz, "shm region '%s' is not registered on this connection", name);
	}
	return r;
}

void fosd_regions_release(fosd_regions *rg, fosd_region *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&rg->mu);
	int gone = --r->refs == 0;
	pthread_mutex_unlock(&rg->mu);
	if (gone)
		region_free(rg, r);
}

uint8_t *fosd_region_base(const fosd_region *r)
{
	return r->base;
}

uint64_t fosd_region_size(const fosd_region *r)
{
	return r->size;
}

const char *fosd_region_name(const fosd_region *r)
{
	return r->name;
}

int fosd_region_pinned(const fosd_region *r)
{
	return r->pinned;
}

void fosd_region_count_use(fosd_region *r)
{
	atomic_fetch_add(&r->uses, 1);
}

int fosd_region_check_now(const fosd_region *r, uint64_t off, uint64_t len, char *msg, size_t msgsz)
{
	if (r->sealed)
		return 0;
	struct stat st;
	if (fstat(r->fd, &st)) {
		snprintf(msg, msgsz, "shm region '%s': fstat: %s", r->name, strerror(errno));
		return FOS__CODE__FAILED_PRECONDITION;
	}
	if ((uint64_t)st.st_size < off + len) {
		snprintf(msg, msgsz,
			 "shm region '%s' was shrunk to %lld bytes (registered with %llu); bytes [%llu, %llu) are gone: "
			 "unregister it and register it again",
			 r->name, (long long)st.st_size, (unsigned long long)r->size, (unsigned long long)off,
			 (unsigned long long)(off + len));
		return FOS__CODE__FAILED_PRECONDITION;
	}
	return 0;
}

int fosd_region_sealed(const fosd_region *r)
{
	return r->sealed;
}

int fosd_region_set_chan(fosd_regions *rg, fosd_region *r, struct fosd_chan *c, void (*signal)(struct fosd_chan *c))
{
	pthread_mutex_lock(&rg->mu);
	int rc = 0;
	if (c && (!r->listed || r->chan)) {
		rc = -1;
	} else {
		r->chan = c;
		r->chan_signal = signal;
	}
	pthread_mutex_unlock(&rg->mu);
	return rc;
}
