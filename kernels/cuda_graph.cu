/* cuda_graph.cu: backend.h's `replay` for the CUDA backend: the stream work a caller queues for a
 * key is recorded into a CUDA graph the second time the key is seen, and later calls with the same
 * key launch the graph instead of making every API call again. A small forward queues a memset,
 * three kernels and a cuBLASLt matmul, whose host-side cost can exceed their GPU time at M = 128;
 * one graph launch costs a few microseconds. The graph
 * holds the very kernels with the very arguments of the recorded call (the cuBLASLt plan included),
 * so its results are the same bits.
 *
 * A key names everything the work depends on except the contents of device memory (pointers,
 * shapes, options); this file adds the instance's one-CTA and GEMM path switches. Entries:
 * FCU_GRAPHS per instance, least recently used replaced. A recording that fails (an API call that
 * cannot be captured, an instantiation error) marks the key never to be recorded again and the
 * work runs the ordinary way.
 *
 * Memory the recorded work allocates (the quantized X) is not recorded as graph allocation nodes:
 * the graph memory pool is shared by every stream, and launches on different lanes that share its
 * pages serialize (bench/BENCHMARKS.md). While a key is recorded, be->alloc makes ordinary allocations the entry owns (freed
 * with the entry) and be->free of them is a no-op: each graph has its own scratch. */
#include "cuda_internal.cuh"

#include <stdlib.h>
#include <string.h>

#define FCU_GRAPHS 16
#define FCU_KEY_MAX 256

#define FCU_GRAPH_BUFS 8

struct fcu_graph {
	unsigned char key[FCU_KEY_MAX];
	size_t keylen;
	int seen, never;
	cudaGraphExec_t exec;
	unsigned long long use;
	void *buf[FCU_GRAPH_BUFS]; /* memory the recorded work allocated: the graph's own */
	int nbuf, buf_failed;
};

static void fcu_graph_free_bufs(struct fcu_graph *e)
{
	for (int i = 0; i < e->nbuf; i++)
		cudaFree(e->buf[i]);
	e->nbuf = 0;
	cudaGetLastError();
}

struct fcu_graphs {
	struct fcu_graph g[FCU_GRAPHS];
	int n;
	unsigned long long tick;
};

static struct fcu_graph *fcu_graph_find(struct fcu_impl *im, const void *key, size_t keylen)
{
	struct fcu_graphs *gs = (struct fcu_graphs *)im->graphs;
	for (int i = 0; i < gs->n; i++) {
		struct fcu_graph *e = &gs->g[i];
		if (e->keylen == keylen && !memcmp(e->key, key, keylen))
			return e;
	}
	return 0;
}

/* A slot for a new key: a free one, else the least recently used (its graph destroyed once the
 * stream has finished with it). */
static struct fcu_graph *fcu_graph_slot(struct fcu_impl *im)
{
	struct fcu_graphs *gs = (struct fcu_graphs *)im->graphs;
	struct fcu_graph *e;
	if (gs->n < FCU_GRAPHS) {
		e = &gs->g[gs->n++];
	} else {
		e = &gs->g[0];
		for (int i = 1; i < FCU_GRAPHS; i++)
			if (gs->g[i].use < e->use)
				e = &gs->g[i];
		cudaStreamSynchronize(im->st);
		if (e->exec)
			cudaGraphExecDestroy(e->exec);
		fcu_graph_free_bufs(e);
		cudaGetLastError();
	}
	memset(e, 0, sizeof *e);
	return e;
}

/* Records run's work on the instance's stream into a graph; 0 and *out on success. On failure
 * nothing was queued (a capture queues nothing) and the error is cleared. */
static int fcu_graph_record(fos_backend *be, struct fcu_graph *ent, int (*run)(fos_backend *, void *, fos_err *),
			    void *arg)
{
	struct fcu_impl *im = fcu(be);
	fos_err e;
	memset(&e, 0, sizeof e);
	/* relaxed: the entry's memory is allocated with cudaMalloc while capturing */
	if (cudaStreamBeginCapture(im->st, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	im->recording = ent;
	int rc = run(be, arg, &e);
	im->recording = 0;
	cudaGraph_t g = 0;
	cudaError_t ce = cudaStreamEndCapture(im->st, &g);
	if (rc || ent->buf_failed || ce != cudaSuccess || !g) {
		if (g)
			cudaGraphDestroy(g);
		fcu_graph_free_bufs(ent);
		cudaGetLastError();
		return -1;
	}
	ce = cudaGraphInstantiate(&ent->exec, g, 0);
	cudaGraphDestroy(g);
	if (ce != cudaSuccess) {
		ent->exec = 0;
		fcu_graph_free_bufs(ent);
		cudaGetLastError();
		return -1;
	}
	return 0;
}

void *fcu_graph_alloc(fos_backend *be, size_t n)
{
	struct fcu_graph *e = (struct fcu_graph *)fcu(be)->recording;
	void *p = 0;
	if (e->nbuf >= FCU_GRAPH_BUFS || cudaMalloc(&p, n) != cudaSuccess) {
		cudaGetLastError();
		e->buf_failed = 1; /* the recording is dropped; the caller sees an allocation failure */
		return 0;
	}
	e->buf[e->nbuf++] = p;
	return p;
}

int fcu_graph_owns(fos_backend *be, const void *p)
{
	struct fcu_graph *e = (struct fcu_graph *)fcu(be)->recording;
	for (int i = 0; i < e->nbuf; i++)
		if (e->buf[i] == p)
			return 1;
	return 0;
}

extern "C" int fcu_replay(fos_backend *be, const void *key, size_t keylen,
			  int (*run)(fos_backend *be, void *arg, fos_err *err), void *arg, fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	if (!im->use_graphs || keylen > FCU_KEY_MAX)
		return run(be, arg, err);
	if (!im->graphs) {
		im->graphs = calloc(1, sizeof(struct fcu_graphs));
		if (!im->graphs)
			return run(be, arg, err);
	}
	struct fcu_graphs *gs = (struct fcu_graphs *)im->graphs;
	struct fcu_graph *e = fcu_graph_find(im, key, keylen);
	if (!e) {
		e = fcu_graph_slot(im);
		memcpy(e->key, key, keylen);
		e->keylen = keylen;
	}
	e->use = ++gs->tick;
	if (!e->exec) {
		/* the first call runs as usual (it also makes the GEMM plan, which cannot be recorded) */
		if (e->never || ++e->seen < 2)
			return run(be, arg, err);
		int rc = fcu_enter(be, err);
		if (rc)
			return rc;
		if (fcu_graph_record(be, e, run, arg)) {
			e->exec = 0;
			e->never = 1;
			im->graph_failed++;
			return run(be, arg, err);
		}
		im->graph_recorded++;
	}
	im->graph_launched++;
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	return fcu_check(cudaGraphLaunch(e->exec, im->st), err, "cudaGraphLaunch");
}

extern "C" int fos_cuda_set_graphs(fos_backend *be, int on, fos_err *err)
{
	return fcu_set_switch(be, &fcu_impl::use_graphs, on, err);
}

extern "C" int fos_cuda_graph_stats(fos_backend *be, unsigned long long *recorded, unsigned long long *launched,
				    unsigned long long *failed, fos_err *err)
{
	(void)err;
	struct fcu_impl *im = fcu(be);
	*recorded = im->graph_recorded;
	*launched = im->graph_launched;
	*failed = im->graph_failed;
	return FOS_OK;
}

void fcu_graph_release(fos_backend *be)
{
	struct fcu_impl *im = fcu(be);
	struct fcu_graphs *gs = (struct fcu_graphs *)im->graphs;
	if (!gs)
		return;
	for (int i = 0; i < gs->n; i++) {
		if (gs->g[i].exec)
			cudaGraphExecDestroy(gs->g[i].exec);
		fcu_graph_free_bufs(&gs->g[i]);
	}
	cudaGetLastError();
	free(gs);
	im->graphs = 0;
}
