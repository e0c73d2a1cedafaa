/* cuda_blocks.cu: the CUDA backend's block cache, between be->alloc / be->free and the device's
 * stream-ordered pool. With several threads allocating at once (fosd's lanes), the pool's
 * cudaMallocAsync + cudaFreeAsync pair costs the host far more than a kernel launch (bench/
 * BENCHMARKS.md, bench_host_cost), and a layer's step makes dozens of them; most are of the same
 * sizes every step. So freed blocks are kept on host-side lists and handed out again without a
 * driver call.
 *
 * Invariants (the same stream-order rules the pool has, so callers see no difference):
 *   - A block freed through instance I goes to I's list with the stream I queues on at that moment
 *     (its stream, or its side stream during side work), and is handed out only by I while I
 *     queues on that same stream: the free came after every use of the block that the caller
 *     ordered before it on that stream, and the next use is queued on it, after them (the pool's
 *     own reuse on one stream).
 *   - An instance whose frees are of idle memory (fos_cuda_set_frees_idle: no queued work on any
 *     stream reads what it frees, as for fosd's retired cache frees) puts its blocks on its device's
 *     idle list, which every instance of the device takes from.
 *   - Every block the cache handed out is in one registry (address -> size), whoever frees it;
 *     be->free of an address not in it goes straight to cudaFreeAsync.
 *   - Blocks over FCU_KEEP_BLOCK bytes, and frees that would take a list over its byte cap, go
 *     back to the pool at once; an allocation the pool refuses first returns every list's blocks to
 *     the pool (each on the stream it was freed on) and tries again once.
 * Locks: the registry's mutex (which also guards the instance list and the idle lists) and each
 * instance's own (its list); a path that holds both takes the registry's first. */
#include "cuda_internal.cuh"

#include <stdint.h>
#include <stdlib.h>

#define FCU_KEEP_BLOCK ((size_t)64 << 20)      /* larger blocks are never kept */
#define FCU_KEEP_INSTANCE ((size_t)512 << 20)  /* bytes kept per instance */
#define FCU_KEEP_IDLE ((size_t)1 << 30)        /* bytes kept per device's idle list */
#define FCU_REG_BUCKETS 4096
#define FCU_MAX_DEVICES 64

/* A block the cache handed out (in the registry), or one on a list (also in the registry). */
struct fcu_block {
	void *p;
	size_t n;
	int dev;
	cudaStream_t st;             /* on an instance's list: the stream it was freed on */
	struct fcu_block *reg_next;  /* registry chain */
	struct fcu_block *list_next; /* on a free list */
};

/* A free list: blocks by exact size, most recently freed first. */
struct fcu_blist {
	struct fcu_block *head;
	size_t bytes;
};

struct fcu_blocks {
	pthread_mutex_t mu; /* guards list */
	struct fcu_blist list;
	int frees_idle;
	fos_backend *be;
	struct fcu_blocks *next; /* the instance list */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fcu_block *reg[FCU_REG_BUCKETS];
static struct fcu_blocks *instances;
static struct fcu_blist idle[FCU_MAX_DEVICES];

static size_t reg_hash(const void *p)
{
	uintptr_t x = (uintptr_t)p >> 8; /* blocks are 256-byte multiples */
	x ^= x >> 17;
	x *= 0x9E3779B97F4A7C15ull;
	return (size_t)(x >> 40) % FCU_REG_BUCKETS;
}

/* Under reg_mu: the registered block at p, unlinked from the registry when take. */
static struct fcu_block *reg_find(const void *p, int take)
{
	for (struct fcu_block **pp = &reg[reg_hash(p)]; *pp; pp = &(*pp)->reg_next)
		if ((*pp)->p == p) {
			struct fcu_block *b = *pp;
			if (take)
				*pp = b->reg_next;
			return b;
		}
	return 0;
}

/* The first block of exactly n bytes on l freed on stream st (any stream: st NULL), taken off it;
 * NULL: none. */
static struct fcu_block *blist_take(struct fcu_blist *l, size_t n, cudaStream_t st)
{
	for (struct fcu_block **pp = &l->head; *pp; pp = &(*pp)->list_next)
		if ((*pp)->n == n && (!st || (*pp)->st == st)) {
			struct fcu_block *b = *pp;
			*pp = b->list_next;
			l->bytes -= n;
			return b;
		}
	return 0;
}

/* Puts b on l unless that would take l over cap; 1 if kept. */
static int blist_put(struct fcu_blist *l, struct fcu_block *b, size_t cap)
{
	if (b->n > FCU_KEEP_BLOCK || l->bytes + b->n > cap)
		return 0;
	b->list_next = l->head;
	l->head = b;
	l->bytes += b->n;
	return 1;
}

/* Gives every block of l back to the pool, each on the stream it was freed on (idle blocks: on st),
 * and drops them from the registry (reg_mu held). */
static void blist_release_locked(struct fcu_blist *l, cudaStream_t st)
{
	while (l->head) {
		struct fcu_block *b = l->head;
		l->head = b->list_next;
		reg_find(b->p, 1);
		cudaFreeAsync(b->p, b->st ? b->st : st);
		free(b);
	}
	l->bytes = 0;
}

static struct fcu_blocks *blocks_of(fos_backend *be)
{
	return (struct fcu_blocks *)fcu(be)->blocks;
}

int fcu_blocks_open(fos_backend *be, fos_err *err)
{
	struct fcu_blocks *c = (struct fcu_blocks *)calloc(1, sizeof *c);
	if (!c || pthread_mutex_init(&c->mu, 0)) {
		free(c);
		return fos_seterr(err, FOS_ENOMEM, "out of memory for the cuda backend's block cache");
	}
	c->be = be;
	pthread_mutex_lock(&reg_mu);
	c->next = instances;
	instances = c;
	pthread_mutex_unlock(&reg_mu);
	fcu(be)->blocks = c;
	return FOS_OK;
}

/* Before the instance's stream is destroyed: its list back to the pool; its device's idle list too
 * when this was the last instance of the device. */
void fcu_blocks_close(fos_backend *be)
{
	struct fcu_impl *im = fcu(be);
	struct fcu_blocks *c = blocks_of(be);
	if (!c)
		return;
	pthread_mutex_lock(&reg_mu);
	int others = 0;
	for (struct fcu_blocks **pp = &instances; *pp;) {
		if (*pp == c) {
			*pp = c->next;
			continue;
		}
		others += fcu((*pp)->be)->dev == im->dev;
		pp = &(*pp)->next;
	}
	pthread_mutex_lock(&c->mu);
	blist_release_locked(&c->list, im->st);
	pthread_mutex_unlock(&c->mu);
	if (!others && im->dev >= 0 && im->dev < FCU_MAX_DEVICES)
		blist_release_locked(&idle[im->dev], im->st);
	pthread_mutex_unlock(&reg_mu);
	pthread_mutex_destroy(&c->mu);
	free(c);
	im->blocks = 0;
}

/* Out of device memory: every list's blocks back to the pool (each on the stream it was freed on),
 * then the instance's stream waited for, so that at least its own frees have completed. */
static void blocks_release_all(fos_backend *be)
{
	struct fcu_impl *im = fcu(be);
	pthread_mutex_lock(&reg_mu);
	for (struct fcu_blocks *c = instances; c; c = c->next) {
		pthread_mutex_lock(&c->mu);
		blist_release_locked(&c->list, fcu(c->be)->st);
		pthread_mutex_unlock(&c->mu);
	}
	for (int d = 0; d < FCU_MAX_DEVICES; d++)
		if (idle[d].head)
			blist_release_locked(&idle[d], im->st);
	pthread_mutex_unlock(&reg_mu);
	cudaStreamSynchronize(im->st);
	cudaGetLastError();
}

/* n: a multiple of 256. NULL: out of device memory (not sticky). */
void *fcu_blocks_alloc(fos_backend *be, size_t n)
{
	struct fcu_impl *im = fcu(be);
	struct fcu_blocks *c = blocks_of(be);
	struct fcu_block *b = 0;
	pthread_mutex_lock(&c->mu);
	b = blist_take(&c->list, n, im->st);
	pthread_mutex_unlock(&c->mu);
	if (b)
		return b->p;
	if (im->dev < FCU_MAX_DEVICES) {
		pthread_mutex_lock(&reg_mu);
		b = idle[im->dev].head ? blist_take(&idle[im->dev], n, 0) : 0;
		pthread_mutex_unlock(&reg_mu);
		if (b)
			return b->p;
	}
	b = (struct fcu_block *)calloc(1, sizeof *b);
	if (!b)
		return 0;
	void *p = 0;
	cudaError_t e = cudaMallocAsync(&p, n, im->st);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* an out-of-memory is not sticky: clear it */
		blocks_release_all(be);
		e = cudaMallocAsync(&p, n, im->st);
	}
	if (e != cudaSuccess || (uintptr_t)p % 64) { /* the interface promises 64-byte alignment */
		if (e == cudaSuccess)
			cudaFreeAsync(p, im->st);
		cudaGetLastError();
		free(b);
		return 0;
	}
	b->p = p;
	b->n = n;
	b->dev = im->dev;
	pthread_mutex_lock(&reg_mu);
	struct fcu_block *stale = reg_find(p, 1); /* never expected: the pool gave p out again */
	size_t h = reg_hash(p);
	b->reg_next = reg[h];
	reg[h] = b;
	pthread_mutex_unlock(&reg_mu);
	free(stale);
	return p;
}

void fcu_blocks_free(fos_backend *be, void *p)
{
	struct fcu_impl *im = fcu(be);
	struct fcu_blocks *c = blocks_of(be);
	pthread_mutex_lock(&reg_mu);
	struct fcu_block *b = reg_find(p, 0);
	int kept = 0;
	if (b && c->frees_idle && b->dev < FCU_MAX_DEVICES) {
		b->st = 0; /* idle: any stream may take it */
		kept = blist_put(&idle[b->dev], b, FCU_KEEP_IDLE);
	} else if (b && !c->frees_idle && b->dev == im->dev) {
		b->st = im->st;
		pthread_mutex_lock(&c->mu);
		kept = blist_put(&c->list, b, FCU_KEEP_INSTANCE);
		pthread_mutex_unlock(&c->mu);
	}
	if (b && !kept)
		reg_find(p, 1);
	pthread_mutex_unlock(&reg_mu);
	if (kept)
		return;
	free(b);
	cudaFreeAsync(p, im->st); /* stream-ordered: after every queued use */
}

extern "C" int fos_cuda_set_frees_idle(fos_backend *be, int on, fos_err *err)
{
	if (!be || strcmp(be->name, "cuda"))
		return fos_seterr(err, FOS_EINVAL, "not a cuda backend");
	struct fcu_blocks *c = blocks_of(be);
	if (c) {
		pthread_mutex_lock(&c->mu);
		c->frees_idle = on != 0;
		pthread_mutex_unlock(&c->mu);
	}
	return FOS_OK;
}

extern "C" int fos_cuda_blocks_kept(fos_backend *be, size_t *own, size_t *idle_bytes, fos_err *err)
{
	if (!be || strcmp(be->name, "cuda"))
		return fos_seterr(err, FOS_EINVAL, "not a cuda backend");
	struct fcu_blocks *c = blocks_of(be);
	*own = *idle_bytes = 0;
	if (!c)
		return FOS_OK;
	pthread_mutex_lock(&reg_mu);
	pthread_mutex_lock(&c->mu);
	*own = c->list.bytes;
	pthread_mutex_unlock(&c->mu);
	int d = fcu(be)->dev;
	if (d >= 0 && d < FCU_MAX_DEVICES)
		*idle_bytes = idle[d].bytes;
	pthread_mutex_unlock(&reg_mu);
	return FOS_OK;
}
