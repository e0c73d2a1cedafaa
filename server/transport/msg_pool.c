/* msg_pool.c: where nng's large message bodies come from. nng allocates every received message
 * (and every reply) with calloc through nni_zalloc, frees it through nni_free, and owns a message
 * once it is sent, so fosd cannot keep messages per slot. The programs of this tree link the static
 * nng with -Wl,--wrap for nni_msg_alloc, nni_zalloc, nni_alloc and nni_free (Makefile MSGPOOL_WRAP),
 * and blocks of FOSD_MSGPOOL_MIN bytes and more come from here instead:
 *
 *  - reused, not returned to the kernel: their pages stay faulted in (the warm heap of
 *    alloc_tune.c cannot do this past glibc's 32 MiB mmap threshold, and calloc clears every byte
 *    of a reused block: 64 MiB of memset per 64 MiB message);
 *  - not cleared when they are a message body (nni_msg_alloc): every body is written whole before
 *    anyone reads it (a transport receives all its bytes or drops the message; fosw_msg_build
 *    writes the header and clears every gap between tensors; the tensors are then written whole);
 *    other large nni_zalloc blocks are still cleared;
 *  - registered with the device (cudaHostRegister through the pin hook of shm.h) in fosd on the
 *    cuda backend, so that the copy of a request's tensors to the GPU and of a reply's tensors
 *    back is direct DMA from and into the message, not a staged copy of pageable memory.
 *
 * The pool keeps up to `keep` free bytes mapped (fosd: message_pool_bytes), least recently freed
 * unmapped first; buffers are found best fit within 2x their request. */
#include "msg_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct nng_msg nni_msg;

void *__real_nni_zalloc(size_t sz);
void *__real_nni_alloc(size_t sz);
void __real_nni_free(void *p, size_t sz);
int __real_nni_msg_alloc(nni_msg **m, size_t sz);
void *__wrap_nni_zalloc(size_t sz);
void *__wrap_nni_alloc(size_t sz);
void __wrap_nni_free(void *p, size_t sz);
int __wrap_nni_msg_alloc(nni_msg **m, size_t sz);

#define POOL_ALIGN ((size_t)2 << 20) /* mappings in 2 MiB steps (huge pages where the kernel gives them) */

typedef struct pbuf {
	void *p;
	size_t cap;
	const fosd_pin_hook *pinned; /* the hook that pinned it, or NULL */
	struct pbuf *next;
} pbuf;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pbuf *g_free; /* most recently freed first */
static pbuf *g_used;
static uint64_t g_keep = FOSD_MSGPOOL_KEEP;
static const fosd_pin_hook *g_hook;
static fosd_msgpool_stats g_st;
static __thread int t_body; /* inside nni_msg_alloc: its large block is a message body */

static void buf_unmap(pbuf *b)
{
	if (b->pinned)
		b->pinned->unpin(b->p);
	munmap(b->p, b->cap);
	free(b);
}

/* Pins b if a hook is set and the budget allows (b is owned by the caller; g_mu not held). */
static void buf_pin(pbuf *b)
{
	pthread_mutex_lock(&g_mu);
	const fosd_pin_hook *h = g_hook;
	int may = h && !b->pinned && g_st.bytes_pinned + b->cap <= FOSD_MSGPOOL_MAX_PINNED;
	if (may)
		g_st.bytes_pinned += b->cap; /* reserved */
	pthread_mutex_unlock(&g_mu);
	if (!may)
		return;
	char why[160];
	int rc = h->pin(b->p, b->cap, why, sizeof why);
	pthread_mutex_lock(&g_mu);
	if (rc) {
		g_st.bytes_pinned -= b->cap;
		g_st.pin_failures++;
	} else {
		b->pinned = h;
	}
	pthread_mutex_unlock(&g_mu);
}

static void *pool_take(size_t sz)
{
	pthread_mutex_lock(&g_mu);
	pbuf **best = NULL;
	for (pbuf **pp = &g_free; *pp; pp = &(*pp)->next) {
		size_t c = (*pp)->cap;
		if (c >= sz && c - sz <= sz && (!best || c < (*best)->cap))
			best = pp;
	}
	pbuf *b = NULL;
	if (best) {
		b = *best;
		*best = b->next;
		g_st.bytes_free -= b->cap;
		g_st.reused++;
	}
	pthread_mutex_unlock(&g_mu);
	if (!b) {
		size_t cap = (sz + POOL_ALIGN - 1) & ~(POOL_ALIGN - 1);
		if (cap < sz)
			return NULL;
		b = calloc(1, sizeof *b);
		void *p = b ? mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
		if (p == MAP_FAILED) {
			free(b);
			return NULL;
		}
		madvise(p, cap, MADV_HUGEPAGE);
		b->p = p;
		b->cap = cap;
		pthread_mutex_lock(&g_mu);
		g_st.mapped_new++;
		pthread_mutex_unlock(&g_mu);
	}
	if (!b->pinned)
		buf_pin(b);
	pthread_mutex_lock(&g_mu);
	b->next = g_used;
	g_used = b;
	g_st.bytes_used += b->cap;
	g_st.taken++;
	g_st.active = 1;
	pthread_mutex_unlock(&g_mu);
	return b->p;
}

/* Returns 1 if p came from the pool (now freed), 0 if not. */
static int pool_give(void *p)
{
	pthread_mutex_lock(&g_mu);
	pbuf **pp = &g_used;
	while (*pp && (*pp)->p != p)
		pp = &(*pp)->next;
	pbuf *b = *pp;
	if (!b) {
		pthread_mutex_unlock(&g_mu);
		return 0;
	}
	*pp = b->next;
	g_st.bytes_used -= b->cap;
	pbuf *drop = NULL;
	if (b->pinned && b->pinned != g_hook) { /* pinned by a hook since withdrawn: do not keep it */
		g_st.bytes_pinned -= b->cap;
		b->next = drop;
		drop = b;
	} else {
		b->next = g_free;
		g_free = b;
		g_st.bytes_free += b->cap;
	}
	while (g_st.bytes_free > g_keep && g_free) { /* unmap the least recently freed */
		pbuf **last = &g_free;
		while ((*last)->next)
			last = &(*last)->next;
		pbuf *o = *last;
		*last = NULL;
		g_st.bytes_free -= o->cap;
		if (o->pinned)
			g_st.bytes_pinned -= o->cap;
		o->next = drop;
		drop = o;
	}
	pthread_mutex_unlock(&g_mu);
	while (drop) {
		pbuf *n = drop->next;
		buf_unmap(drop);
		drop = n;
	}
	return 1;
}

int __wrap_nni_msg_alloc(nni_msg **m, size_t sz)
{
	t_body = 1;
	int rv = __real_nni_msg_alloc(m, sz);
	t_body = 0;
	return rv;
}

void *__wrap_nni_zalloc(size_t sz)
{
	if (sz < FOSD_MSGPOOL_MIN)
		return __real_nni_zalloc(sz);
	void *p = pool_take(sz);
	if (!p)
		return __real_nni_zalloc(sz);
	if (!t_body)
		memset(p, 0, sz);
	return p;
}

void *__wrap_nni_alloc(size_t sz)
{
	if (sz < FOSD_MSGPOOL_MIN)
		return __real_nni_alloc(sz);
	void *p = pool_take(sz);
	return p ? p : __real_nni_alloc(sz);
}

void __wrap_nni_free(void *p, size_t sz)
{
	if (p && sz >= FOSD_MSGPOOL_MIN && pool_give(p))
		return;
	__real_nni_free(p, sz);
}

void fosd_msgpool_set_keep(uint64_t bytes)
{
	pthread_mutex_lock(&g_mu);
	g_keep = bytes;
	pthread_mutex_unlock(&g_mu);
}

void fosd_msgpool_set_pin(const fosd_pin_hook *hook)
{
	pthread_mutex_lock(&g_mu);
	g_hook = hook;
	pbuf *l = g_free; /* the free ones now; the used ones when they are reused */
	g_free = NULL;
	pthread_mutex_unlock(&g_mu);
	pbuf *keep = NULL;
	while (l) {
		pbuf *n = l->next;
		if (!l->pinned)
			buf_pin(l);
		l->next = keep;
		keep = l;
		l = n;
	}
	pthread_mutex_lock(&g_mu);
	while (keep) {
		pbuf *n = keep->next;
		keep->next = g_free;
		g_free = keep;
		keep = n;
	}
	pthread_mutex_unlock(&g_mu);
}

void fosd_msgpool_unpin_all(void)
{
	pthread_mutex_lock(&g_mu);
	g_hook = NULL;
	pbuf *l = g_free;
	g_free = NULL;
	for (pbuf *b = l; b; b = b->next) {
		g_st.bytes_free -= b->cap;
		if (b->pinned)
			g_st.bytes_pinned -= b->cap;
	}
	pthread_mutex_unlock(&g_mu);
	while (l) {
		pbuf *n = l->next;
		buf_unmap(l);
		l = n;
	}
}

void fosd_msgpool_get_stats(fosd_msgpool_stats *out)
{
	pthread_mutex_lock(&g_mu);
	*out = g_st;
	pthread_mutex_unlock(&g_mu);
}
