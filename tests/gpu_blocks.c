/* gpu_blocks.c: the CUDA backend's block cache (kernels/cuda_blocks.cu): a block freed on an
 * instance is handed out again by that instance and no other, and only on the stream it was freed
 * on (side work's stream apart from the instance's own); a block freed on another instance goes to
 * that one's list; an instance whose frees are idle (fos_cuda_set_frees_idle) feeds its
 * device's shared list, which every instance takes from; blocks over the size cap are never kept;
 * an allocation the device refuses returns every kept block and fails cleanly, and the next one
 * works. Then data: four threads, each with its own instance, chain amaxes through blocks that are
 * freed and handed out again while the work that used them is still queued (on their own stream
 * and across a pair of instances), each result against the CPU's amax of the bytes written. Skips
 * cleanly (exit 0) when there is no usable GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support_gpu.h"
#include "backend.h"
#include "fos_format.h"
#ifdef FOS_HAVE_CUDA
#include "cuda_backend.h"
#endif

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FOS_HAVE_CUDA
static fos_backend *open_cuda(void)
{
	fos_err e;
	memset(&e, 0, sizeof e);
	fos_backend *b = fos_backend_cuda(0, &e);
	assert_non_null(b);
	return b;
}

/* Bytes the cache keeps: b's own list (idle 0), or its device's idle list (idle 1). */
static size_t kept(fos_backend *b, int idle)
{
	size_t n[2] = {0, 0};
	fos_err e;
	assert_int_equal(fos_cuda_blocks_kept(b, &n[0], &n[1], &e), FOS_OK);
	return n[idle != 0];
}
#define kept_own(b) kept(b, 0)
#define kept_idle(b) kept(b, 1)
#endif

static void test_reuse_own(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_backend *a = open_cuda();
	size_t k0 = kept_own(a);
	void *p = a->alloc(a, 1000);
	assert_non_null(p);
	a->free(a, p);
	assert_int_equal(kept_own(a), k0 + 1024); /* 256-byte multiples */
	void *q = a->alloc(a, 1000);
	assert_ptr_equal(q, p);
	assert_int_equal(kept_own(a), k0);
	void *r = a->alloc(a, 2000); /* another size: not the kept block */
	assert_ptr_not_equal(r, q);
	a->free(a, q);
	a->free(a, r);
	a->destroy(a);
#endif
}

/* Side work queues on another stream: a block freed there is reused there only. */
static void test_side_stream(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_backend *a = open_cuda();
	fos_err e;
	void *p = a->alloc(a, 3072);
	assert_non_null(p);
	assert_int_equal(a->side_begin(a, &e), FOS_OK);
	assert_int_equal(a->zero(a, p, 3072, &e), FOS_OK); /* a use on the side stream */
	a->free(a, p);
	assert_int_equal(a->side_end(a, &e), FOS_OK);
	void *q = a->alloc(a, 3072); /* main stream, not joined yet: not the side's block */
	assert_ptr_not_equal(q, p);
	assert_int_equal(a->side_join(a, &e), FOS_OK);
	assert_int_equal(a->side_begin(a, &e), FOS_OK);
	void *r = a->alloc(a, 3072); /* side again: its own block back */
	assert_ptr_equal(r, p);
	a->free(a, r);
	assert_int_equal(a->side_end(a, &e), FOS_OK);
	assert_int_equal(a->side_join(a, &e), FOS_OK);
	a->free(a, q);
	assert_int_equal(a->sync(a, &e), FOS_OK);
	a->destroy(a);
#endif
}

static void test_cross_instance(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_backend *a = open_cuda(), *b = open_cuda();
	fos_err e;
	size_t ka = kept_own(a), kb = kept_own(b);
	void *p = a->alloc(a, 4096);
	assert_non_null(p);
	assert_int_equal(a->sync(a, &e), FOS_OK);
	b->free(b, p); /* b's stream order now: b's list */
	assert_int_equal(kept_own(a), ka);
	assert_int_equal(kept_own(b), kb + 4096);
	void *pa = a->alloc(a, 4096);
	assert_ptr_not_equal(pa, p);
	void *pb = b->alloc(b, 4096);
	assert_ptr_equal(pb, p);
	a->free(a, pa);
	b->free(b, pb);
	a->destroy(a);
	b->destroy(b);
#endif
}

static void test_idle_list(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_backend *a = open_cuda(), *f = open_cuda(), *b = open_cuda();
	fos_err e;
	assert_int_equal(fos_cuda_set_frees_idle(f, 1, &e), FOS_OK);
	assert_int_equal(fos_cuda_set_frees_idle(g_cpu, 1, &e), FOS_EINVAL); /* not a cuda backend */
	size_t ki = kept_idle(a);
	void *p = a->alloc(a, 8192 + 1);
	assert_non_null(p);
	assert_int_equal(a->sync(a, &e), FOS_OK); /* nothing queued reads p: f may free it */
	size_t kf = kept_own(f);
	f->free(f, p);
	assert_int_equal(kept_idle(a), ki + 8448);
	assert_int_equal(kept_idle(b), ki + 8448); /* the device's list, seen from any instance */
	assert_int_equal(kept_own(f), kf);
	void *q = b->alloc(b, 8448);
	assert_ptr_equal(q, p);
	assert_int_equal(kept_idle(a), ki);
	b->free(b, q);
	assert_int_equal(kept_own(b), 8448);
	f->destroy(f);
	a->destroy(a);
	b->destroy(b);
#endif
}

static void test_large_not_kept(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_backend *a = open_cuda();
	size_t k0 = kept_own(a);
	void *p = a->alloc(a, (size_t)128 << 20);
	assert_non_null(p);
	a->free(a, p);
	assert_int_equal(kept_own(a), k0);
	a->destroy(a);
#endif
}

static void test_refused(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	fos_backend *a = open_cuda();
	void *p = a->alloc(a, 4096);
	assert_non_null(p);
	a->free(a, p);
	assert_true(kept_own(a) >= 4096);
	assert_null(a->alloc(a, (size_t)1 << 42)); /* 4 TiB: refused */
	assert_int_equal(kept_own(a), 0);	 /* every kept block went back first */
	void *q = a->alloc(a, 4096);		 /* not sticky */
	assert_non_null(q);
	fos_err e;
	assert_int_equal(a->zero(a, q, 4096, &e), FOS_OK);
	assert_int_equal(a->sync(a, &e), FOS_OK);
	a->free(a, q);
	a->destroy(a);
#endif
}

#ifdef FOS_HAVE_CUDA
#define DT_THREADS 4
#define DT_ROUNDS 200
#define DT_N 65536 /* bf16 elements per buffer */

typedef struct {
	fos_backend *be, *peer; /* peer: frees half of this thread's blocks on its own stream */
	uint16_t *src[3];       /* host data, kept for the thread's life */
	float want[3];
	int bad;
} dt_arg;

static uint32_t dt_rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s >> 32);
}

static void *dt_run(void *p)
{
	dt_arg *a = p;
	fos_err e;
	float *amax[DT_ROUNDS];
	for (int r = 0; r < DT_ROUNDS && !a->bad; r++) {
		/* x: a block most likely handed out again, while the last round's amax may still read
		 * the previous one; the amax result: a fresh small block each round */
		uint16_t *x = a->be->alloc(a->be, DT_N * 2);
		amax[r] = a->be->alloc(a->be, sizeof(float));
		if (!x || !amax[r] || a->be->h2d(a->be, x, a->src[r % 3], DT_N * 2, &e) ||
		    a->be->zero(a->be, amax[r], sizeof(float), &e) ||
		    a->be->amax(a->be, x, FOS_BF16, 1, DT_N, 0, amax[r], &e)) {
			a->bad = 1;
			break;
		}
		a->be->free(a->be, x); /* stream-ordered: after this round's amax */
	}
	for (int r = 0; r < DT_ROUNDS && !a->bad; r++) {
		float got = -1.0f;
		if (a->be->d2h(a->be, &got, amax[r], sizeof got, &e) || memcmp(&got, &a->want[r % 3], sizeof got))
			a->bad = 1;
	}
	/* half the results freed by the peer instance: its list, its stream order (after a sync here,
	 * as the caller of a free on another stream must order it) */
	if (!a->bad && a->be->sync(a->be, &e))
		a->bad = 1;
	for (int r = 0; r < DT_ROUNDS; r++) {
		if (r % 2)
			a->peer->free(a->peer, amax[r]); /* while the peer's own thread may use it too */
		else
			a->be->free(a->be, amax[r]);
	}
	return NULL;
}
#endif

static void test_data_threads(void **state)
{
	(void)state;
	NEED_GPU();
#ifdef FOS_HAVE_CUDA
	dt_arg args[DT_THREADS];
	pthread_t th[DT_THREADS];
	uint64_t seed = 0x2545F4914F6CDD1Dull;
	memset(args, 0, sizeof args);
	for (int t = 0; t < DT_THREADS; t++) {
		args[t].be = open_cuda();
		fos_err e;
		assert_int_equal(fos_cuda_set_h2d_nowait(args[t].be, 1, &e), FOS_OK); /* sources kept */
		for (int s = 0; s < 3; s++) {
			args[t].src[s] = malloc(DT_N * 2);
			float m = 0.0f;
			for (int i = 0; i < DT_N; i++) {
				float v = ((float)(dt_rng(&seed) >> 8) / 16777216.0f - 0.5f) * (float)(1 + t * 3 + s);
				args[t].src[s][i] = fos_f32_to_bf16(v);
				m = fmaxf(m, fabsf(fos_bf16_to_f32(args[t].src[s][i])));
			}
			args[t].want[s] = m;
		}
	}
	for (int t = 0; t < DT_THREADS; t++)
		args[t].peer = args[(t + 1) % DT_THREADS].be;
	/* be->alloc and be->free may be called from several threads at once (the cache's locks) */
	for (int t = 0; t < DT_THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, dt_run, &args[t]), 0);
	for (int t = 0; t < DT_THREADS; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < DT_THREADS; t++) {
		assert_int_equal(args[t].bad, 0);
		for (int s = 0; s < 3; s++)
			free(args[t].src[s]);
	}
	for (int t = 0; t < DT_THREADS; t++)
		args[t].be->destroy(args[t].be);
#endif
}

static int setup(void **state)
{
	(void)state;
	return tgpu_open("gpu_blocks");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse_own),    cmocka_unit_test(test_side_stream),
		cmocka_unit_test(test_cross_instance),
		cmocka_unit_test(test_idle_list),    cmocka_unit_test(test_large_not_kept),
		cmocka_unit_test(test_refused),      cmocka_unit_test(test_data_threads),
	};
	return cmocka_run_group_tests(tests, setup, tgpu_close);
}
