/* cuda_internal.cuh: what the CUDA backend's files (kernels/cuda_*.cu) share: the per-instance
 * state, error helpers that turn a CUDA or cuBLASLt status into FOS_EINTERNAL with a message, the
 * grid sizing of the persistent kernels, what every quantize launch takes besides its shape
 * (fcu_qa), and the ops' prototypes. Not a public header. */
#ifndef FOS_CUDA_INTERNAL_CUH
#define FOS_CUDA_INTERNAL_CUH

#include "backend.h"
#include "cuda_backend.h"
#include "fos_format.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>
#include <type_traits>

/* One cached GEMM plan: descriptors and the algorithm chosen once for a shape, operand layout and
 * output kind. */
struct fcu_plan {
	int64_t m, n, k;
	int ta, tb;   /* operand a stored (K, M) / b stored (K, N) (gemm_ex); 0, 0 for gemm */
	int out_f32;  /* 1: FP32 D (own epilogue), 0: bf16 D with cuBLASLt alpha */
	int dev_alpha; /* alpha read from device memory */
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
	int splitk;
	unsigned long long use;
};

#define FCU_MAX_PLANS 64
#define FCU_NEVENTS 32

struct fcu_impl {
	int dev;
	int sms;
	int pools; /* stream-ordered allocator usable */
	cudaStream_t st;
	cublasLtHandle_t lt;
	pthread_mutex_t mu; /* guards the plan cache */
	struct fcu_plan plans[FCU_MAX_PLANS];
	int nplans;
	unsigned long long tick;
	float *scal;    /* device: [0] alpha, [1] beta = 0 */
	float *acc;     /* device FP32 GEMM output scratch */
	size_t acc_bytes;
	int h2d_nowait; /* h2d returns without waiting for the copy (fos_cuda_set_h2d_nowait) */
	const void *amax_x; /* input of the last amax pass: a walk-direction hint (atomic, relaxed) */
	void *graphs;       /* recorded work by key (cuda_graph.cu), made on first use */
	void *blocks;       /* the block cache (cuda_blocks.cu); NULL: alloc and free go to the pool */
	void *recording;    /* the entry being recorded: be->alloc/free give and keep its memory */
	int use_graphs;     /* replay records and launches graphs (default 1; $FOS_CUDA_GRAPHS=0: off) */
	unsigned long long graph_recorded, graph_launched, graph_failed;
	cudaEvent_t ev[FCU_NEVENTS];
	cudaStream_t side;       /* the side stream (backend.h side_begin) */
	cudaStream_t main_st;    /* while side work is queued: the main stream (st is then side) */
	cudaEvent_t fork_ev, join_ev;
	cudaEvent_t done_ev;     /* interprocess (backend.h done_event_*), made on first use */
	unsigned char done_handle[64];
};

static inline struct fcu_impl *fcu(fos_backend *be)
{
	return (struct fcu_impl *)be->impl;
}

/* CUDA status -> FOS_EINTERNAL with the call site's words and CUDA's error string. */
static inline int fcu_check(cudaError_t e, fos_err *err, const char *what)
{
	if (e == cudaSuccess)
		return FOS_OK;
	return fos_seterr(err, FOS_EINTERNAL, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(e),
			  cudaGetErrorName(e));
}

/* After a kernel launch: launch errors (bad configuration, no kernel image) and earlier async ones. */
static inline int fcu_launched(fos_err *err, const char *what)
{
	return fcu_check(cudaGetLastError(), err, what);
}

static inline int fcu_lt_check(cublasStatus_t s, fos_err *err, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return FOS_OK;
	return fos_seterr(err, FOS_EINTERNAL, "cuBLASLt error in %s: status %d (%s)", what, (int)s,
			  cublasLtGetStatusString(s));
}

/* Sets the switch *field of be's instance to on != 0 (the fos_cuda_set_* of cuda_backend.h). */
static inline int fcu_set_switch(fos_backend *be, int fcu_impl::*field, int on, fos_err *err)
{
	if (!be || strcmp(be->name, "cuda"))
		return fos_seterr(err, FOS_EINVAL, "not a cuda backend");
	fcu(be)->*field = on != 0;
	return FOS_OK;
}

/* Makes this instance's device current for the calling thread. */
static inline int fcu_enter(fos_backend *be, fos_err *err)
{
	return fcu_check(cudaSetDevice(fcu(be)->dev), err, "cudaSetDevice");
}

/* Grid size for a grid-stride loop over n items with blocks of bs threads. */
static inline unsigned fcu_grid(fos_backend *be, int64_t n, int bs, int per_sm)
{
	int64_t g = (n + bs - 1) / bs;
	int64_t cap = (int64_t)fcu(be)->sms * per_sm;
	if (g > cap)
		g = cap;
	return (unsigned)(g < 1 ? 1 : g);
}

static inline int fcu_aligned(const void *p, size_t a)
{
	return ((uintptr_t)p % a) == 0;
}

#define FCU_QT 256 /* threads per CTA of the elementwise and quantize kernels */

/* Resident CTAs per SM of a kernel with bs threads, asked once per kernel (cuda_backend.cu).
 * max_smem: first ask for the largest shared-memory carveout (the cp.async ring kernels). */
int fcu_occupancy(const void *kernel, int bs, int max_smem = 0);

template <class K>
static inline unsigned fcu_grid_for(fos_backend *be, K kernel, int64_t items, int bs)
{
	return fcu_grid(be, items, bs, fcu_occupancy((const void *)kernel, bs));
}

/* What every quantize launch takes besides its shape: where the kernel reads the amax (q->amax, or
 * the caller's per-tensor amax_in, which the kernel then copies to amax_out = q->amax: no separate
 * copy on the stream), and how it walks. Only speed depends on these, never the bytes. */
struct fcu_qa {
	const float *amax;
	float *amax_out;
	int hw;      /* 1: the hardware e4m3 conversion (equal to the software encode: self-test 2) */
	int rev;     /* walk from the end */
	int one_cta; /* one CTA per launch (a grid the tests ask for: fcu_quantize_cta) */
};

static inline fcu_qa fcu_qargs(fos_backend *be, const void *x, int amax_given, const float *amax, float *amax_out,
			       int one_cta)
{
	struct fcu_impl *im = fcu(be);
	fcu_qa A;
	A.amax = amax;
	A.amax_out = amax_out;
	A.hw = 1;
	/* From the end when the last amax pass read these bytes (computed here, or the caller's
	 * amax(x) just before, as the quantized backward does): its tail is still in L2. Only a
	 * direction: every walk gives the same bytes. */
	A.rev = !amax_given || x == __atomic_load_n(&im->amax_x, __ATOMIC_RELAXED);
	A.one_cta = one_cta;
	return A;
}

/* The first checks of quantize and quantize_t: the config against the (logical) shape, the dtype. */
static inline int fcu_qcheck(const fos_qcfg *cfg, int dtype, int64_t rows, int64_t cols, fos_err *err)
{
	int rc = fos_qcfg_check(cfg, rows, cols, err);
	if (rc)
		return rc;
	if (dtype != FOS_BF16 && dtype != FOS_F32)
		return fos_seterr(err, FOS_EINVAL, "unknown input dtype %d", dtype);
	return FOS_OK;
}

/* Where a per-tensor quantize kernel reads the amax and where it copies it (fcu_qa): a given amax
 * is read where it is and copied into q->amax, unless it is q->amax already. */
static inline void fcu_qamax(const fos_qtensor *q, const float *amax_in, const float **asrc, float **adst)
{
	*asrc = q->amax;
	*adst = 0;
	if (amax_in && amax_in != q->amax) {
		*asrc = amax_in;
		*adst = q->amax;
	}
}

/* Records the quantized tensor's shape and options once its kernels are queued. */
static inline void fcu_qset(fos_qtensor *q, int64_t rows, int64_t cols, const fos_qcfg *cfg)
{
	q->rows = rows;
	q->cols = cols;
	q->bound = cfg->bound;
	q->row_scaled = cfg->row_scaled;
}

/* The template dispatch of the quantize launchers: calls f(t, mse, dec) with t an fcu_type of the
 * input element (float for FOS_F32, uint16_t for bf16), mse (MSE candidate error, else MAE) and dec
 * (a decoded output is written) as std::bool_constant. */
template <typename T> struct fcu_type {
	using type = T;
};
template <typename T, class F>
static inline void fcu_qdispatch_t(bool mse, bool dec, const F &f)
{
	if (mse && dec)
		f(fcu_type<T>(), std::true_type(), std::true_type());
	else if (mse)
		f(fcu_type<T>(), std::true_type(), std::false_type());
	else if (dec)
		f(fcu_type<T>(), std::false_type(), std::true_type());
	else
		f(fcu_type<T>(), std::false_type(), std::false_type());
}
template <class F>
static inline void fcu_qdispatch(int dtype, bool mse, bool dec, const F &f)
{
	if (dtype == FOS_F32)
		fcu_qdispatch_t<float>(mse, dec, f);
	else
		fcu_qdispatch_t<uint16_t>(mse, dec, f);
}

/* Grid of a quantize launch over items (threads' worth of work): persistent, sized by occupancy;
 * ring: the kernel is a cp.async ring kernel (largest shared-memory carveout). */
template <class K>
static inline unsigned fcu_qgrid(fos_backend *be, K kernel, int64_t items, const fcu_qa &A, int ring)
{
	const int occ = fcu_occupancy((const void *)kernel, FCU_QT, ring);
	return A.one_cta ? 1u : fcu_grid(be, items, FCU_QT, occ);
}

/* ops (cuda_amax.cu, cuda_transpose.cu, cuda_quantize.cu, cuda_quantize_t.cu, cuda_dequantize.cu) */
int fcu_amax(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, int per_row, float *out,
	     fos_err *err);
int fcu_transpose(fos_backend *be, const void *src, void *dst, int64_t rows, int64_t cols, size_t esize,
		  fos_err *err);
int fcu_quantize(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		 const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err);
int fcu_quantize_t(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		   const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err);
/* The same with the grid chosen: one_cta 1 runs each launch on one CTA (a persistent kernel then
 * walks every work item itself, so each cp.async ring buffer is refilled many times at small
 * shapes: what the GPU tests ask for, tests/support_cuda_hooks.cu), 0 sizes it by occupancy (the
 * backend's ops). Same bytes either way. */
int fcu_quantize_cta(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		     const float *amax_in, fos_qtensor *q, uint16_t *decoded, int one_cta, fos_err *err);
int fcu_quantize_t_cta(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		       const float *amax_in, fos_qtensor *q, uint16_t *decoded, int one_cta, fos_err *err);
int fcu_dequantize(fos_backend *be, const fos_qtensor *q, int out_dtype, void *out, fos_err *err);
int fcu_decode(fos_backend *be, const fos_qtensor *q, uint16_t *out, fos_err *err);
/* the rowwise plain NVFP4 quantize of fcu_quantize (cuda_gradient.cu): x (rows, cols = 16 bpr;
 * nblk = rows bpr 1x16 blocks), bf16 or f32, in cfg's block shape (1x16 or 16x16) and amax (per
 * tensor or, 1x16 only, per row in A.amax), into q's codes and scales, and their decoding into dec
 * unless NULL */
void fcu_grad_rows(fos_backend *be, const void *x, int dtype, int64_t rows, int nblk, int bpr, const fos_qcfg *cfg,
		   const fcu_qa &A, fos_qtensor *q, uint16_t *dec);
/* ops (cuda_grad_pair.cu) */
int fcu_grad_pair(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, const float *amax, uint16_t *dec_rows,
		  uint16_t *dec_cols_t, fos_err *err);
int fcu_grad_pair_cta(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, const float *amax, uint16_t *dec_rows,
		      uint16_t *dec_cols_t, int one_cta, fos_err *err);
/* ops (cuda_gemm.cu) */
int fcu_gemm(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
	     const fos_gemm_epi *epi, uint16_t *y, fos_err *err);
int fcu_gemm_ex(fos_backend *be, const uint16_t *a, int trans_a, const uint16_t *b, int trans_b, int64_t m,
		int64_t n, int64_t k, const fos_gemm_epi *epi, uint16_t *y, fos_err *err);
/* gemm_ex with the path chosen: f32 1 writes FP32 and runs the backend's own epilogue kernel for
 * every GEMM (what the GPU tests compare the bf16 path with, tests/support_cuda_hooks.cu), 0 only
 * for a row-scaled epilogue (the backend's ops). */
int fcu_gemm_path(fos_backend *be, const uint16_t *a, int trans_a, const uint16_t *b, int trans_b, int64_t m,
		  int64_t n, int64_t k, const fos_gemm_epi *epi, uint16_t *y, int f32, fos_err *err);
int fcu_colsum(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, uint16_t *db, fos_err *err);
void fcu_gemm_release(fos_backend *be);
/* replay (cuda_graph.cu) */
extern "C" int fcu_replay(fos_backend *be, const void *key, size_t keylen,
			  int (*run)(fos_backend *be, void *arg, fos_err *err), void *arg, fos_err *err);
void fcu_graph_release(fos_backend *be);
void *fcu_graph_alloc(fos_backend *be, size_t n);
int fcu_graph_owns(fos_backend *be, const void *p);
/* cuda_blocks.cu: n a multiple of 256 */
int fcu_blocks_open(fos_backend *be, fos_err *err);
void fcu_blocks_close(fos_backend *be);
void *fcu_blocks_alloc(fos_backend *be, size_t n);
void fcu_blocks_free(fos_backend *be, void *p);
/* One output of the GEMM epilogue (NUMERICS.md section 7; backend.h fos_gemm_epi): t = rn(acc *
 * alpha), rn(t * rs) when has_rs, bf16 RNE, then bf16(float(y) + float(bias)) when has_bias. The one
 * arithmetic of cuda_gemm.cu's epilogue and of the small-M kernel (cuda_smallm.cu). */
__device__ __forceinline__ uint16_t fcu_epi1(float acc, float alpha, float rs, int has_rs, uint16_t bias, int has_bias)
{
	float t = FOS_MUL(acc, alpha);
	if (has_rs)
		t = FOS_MUL(t, rs);
	uint16_t y = fos_f32_to_bf16(t);
	if (has_bias)
		y = fos_f32_to_bf16(FOS_ADD(fos_bf16_to_f32(y), fos_bf16_to_f32(bias)));
	return y;
}

/* cuda_smallm.cu: sets be's gemm_w4_takes and gemm_w4 (the ops below; the shape rule picks the tile
 * and the launcher the ring depth). fcu_w4_pick: the tile (cuda_smallm_kern.cuh's w4_variant) the
 * shape rule runs m rows of an n-row weight with. */
void fcu_smallm_install(fos_backend *be);
int fcu_w4_takes(fos_backend *be, int64_t m, int64_t n, int64_t k);
int fcu_gemm_w4(fos_backend *be, const uint16_t *a, const fos_qtensor *w, int64_t m, const fos_gemm_epi *epi,
		uint16_t *y, fos_err *err);
struct w4_variant;
const struct w4_variant *fcu_w4_pick(int64_t m, int64_t n);
/* cuda_smallm_xq.cu: the quantize op's one-launch path for small per-tensor bf16 1x16 inputs (amax
 * and quantize in one cluster launch, the general path's bytes); fcu_quantize asks fcu_xq_takes. */
int fcu_xq_takes(const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg, const float *amax_in);
int fcu_xq_small(fos_backend *be, const void *x, int64_t rows, int64_t cols, const fos_qcfg *cfg, fos_qtensor *q,
		 uint16_t *dec, fos_err *err);
/* cuda_ipc.cu: sets be's uuid and its ipc_* and read_sync ops. */
void fcu_ipc_install(fos_backend *be, const unsigned char uuid[16]);
/* cuda_async.cu: sets be's write_u32 and mark_* ops (asynchronous requests). */
void fcu_async_install(fos_backend *be);

#endif
