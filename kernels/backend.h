/* backend.h: the one interface every numerics backend (cpu, cuda) implements, and the linear layer
 * (forward / backward under every override) composed from it in linear.c.
 *
 * Memory model: every pointer passed to a backend op lives in that backend's memory (host memory
 * for cpu, device memory for cuda), allocated with be->alloc. Move bytes in and out with be->h2d /
 * be->d2h (for cpu these are memcpy). Ops may be asynchronous on the backend's stream; d2h and
 * sync wait for completion. All ops return FOS_OK or an error code with err->msg filled; they never
 * print and never abort. Shapes are row-major; "cols" is the contiguous dimension. */
#ifndef FOS_BACKEND_H
#define FOS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "fos_wire_enums.h"

#ifdef __cplusplus
extern "C" {
#endif

enum fos_rc {
	FOS_OK = 0,
	FOS_EINVAL = 1,      /* bad shape / option / argument: a caller error */
	FOS_ENOMEM = 2,      /* allocation failed */
	FOS_EINTERNAL = 3,   /* backend failure (CUDA error, ...) */
	FOS_EUNSUPPORTED = 4 /* backend cannot do this (e.g. no GPU) */
};

typedef struct fos_err {
	int rc;
	char msg[256];
} fos_err;

/* Sets err (if non-NULL) and returns rc. */
int fos_seterr(fos_err *err, int rc, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* Options share the wire's numbers (fos_wire_enums.h); element types and block modes count from 0
 * and are mapped to and from the wire's by the four functions below, nowhere else. */
enum fos_dtype { FOS_BF16 = 0, FOS_F32 = 1 };
enum fos_recipe { FOS_RECIPE_4OVER6 = FOS_QRECIPE_4OVER6, FOS_RECIPE_NVFP4 = FOS_QRECIPE_NVFP4 }; /* NVFP4 = gradient quantizer */
enum fos_block { FOS_BLOCK_1X16 = 0, FOS_BLOCK_16X16 = 1 };
enum fos_errmode { FOS_ERR_MAE = FOS_ERRMODE_MAE, FOS_ERR_MSE = FOS_ERRMODE_MSE };
enum fos_override {
	FOS_OVR_DEFAULT = FOS_OVERRIDE_DEFAULT,
	FOS_OVR_QUANTIZED = FOS_OVERRIDE_QUANTIZED,
	FOS_OVR_HIGH_PRECISION = FOS_OVERRIDE_HIGH_PRECISION,
	FOS_OVR_DEQUANTIZED = FOS_OVERRIDE_DEQUANTIZED
};

/* Which forward operands use 4/6 (NUMERICS.md section 11); the others use plain NVFP4 (the section 5
 * quantizer with the operand's own block shape and amax, bound 448). ALL is 0: today's recipe. */
enum fos_scope { FOS_SCOPE_ALL = 0, FOS_SCOPE_WEIGHTS = 1, FOS_SCOPE_ACTIVATIONS = 2, FOS_SCOPE_NONE = 3 };
/* Whether scope quantizes W (resp. X) with 4/6. */
static inline int fos_scope_w46(int scope) { return scope == FOS_SCOPE_ALL || scope == FOS_SCOPE_WEIGHTS; }
static inline int fos_scope_x46(int scope) { return scope == FOS_SCOPE_ALL || scope == FOS_SCOPE_ACTIVATIONS; }
/* "all", "weights", "activations", "none"; else "?". */
static inline const char *fos_scope_name(int scope)
{
	static const char *const n[] = {"all", "weights", "activations", "none"};
	return scope >= 0 && scope <= FOS_SCOPE_NONE ? n[scope] : "?";
}
/* The scope of a name above; -1 for any other. */
int fos_scope_parse(const char *name);
/* FOS_FOUR_OVER_SIX_ALL .. _NONE -> FOS_SCOPE_*; FOS_FOUR_OVER_SIX_DEFAULT -> dflt; any other: -1. */
static inline int fos_scope_from_wire(int wire, int dflt)
{
	return wire == FOS_FOUR_OVER_SIX_DEFAULT ? dflt
	       : (wire >= FOS_FOUR_OVER_SIX_ALL && wire <= FOS_FOUR_OVER_SIX_NONE) ? wire - FOS_FOUR_OVER_SIX_ALL
									   : -1;
}
/* FOS_SCOPE_* -> the wire's (never FOS_FOUR_OVER_SIX_DEFAULT). */
static inline int fos_scope_to_wire(int scope) { return scope + FOS_FOUR_OVER_SIX_ALL; }

/* FOS_DTYPE_BF16 / FOS_DTYPE_F32 -> FOS_BF16 / FOS_F32; any other wire type: -1. */
static inline int fos_dtype_from_wire(int wire)
{
	return wire == FOS_DTYPE_BF16 ? FOS_BF16 : wire == FOS_DTYPE_F32 ? FOS_F32 : -1;
}
/* FOS_BF16 / FOS_F32 -> the wire's. */
static inline int fos_dtype_to_wire(int dt) { return dt == FOS_F32 ? FOS_DTYPE_F32 : FOS_DTYPE_BF16; }
/* FOS_BLOCKS_1X16 / FOS_BLOCKS_16X16 -> FOS_BLOCK_*; FOS_BLOCKS_DEFAULT -> dflt; any other: -1. */
static inline int fos_block_from_wire(int wire, int dflt)
{
	return wire == FOS_BLOCKS_DEFAULT ? dflt
	       : wire == FOS_BLOCKS_1X16  ? FOS_BLOCK_1X16
	       : wire == FOS_BLOCKS_16X16 ? FOS_BLOCK_16X16
					  : -1;
}
/* FOS_BLOCK_* -> the wire's (never FOS_BLOCKS_DEFAULT). */
static inline int fos_block_to_wire(int block) { return block == FOS_BLOCK_16X16 ? FOS_BLOCKS_16X16 : FOS_BLOCKS_1X16; }

static inline size_t fos_dtype_size(int dt) { return dt == FOS_F32 ? 4 : 2; }

/* A small op's largest input (bytes): the one threshold of fosd's small ops (run at once on the
 * receiving thread when nothing is queued), of the lanes' own buffers, and of the forwards
 * linear.c replays through be->replay. */
#define FOS_SMALL_OP_BYTES ((size_t)2 << 20)

/* How to quantize. Defaults (fos_qcfg_default): 4over6, 1x16, MAE, bound 256, per-tensor. */
typedef struct fos_qcfg {
	int recipe;     /* enum fos_recipe; NVFP4 (plain, section 5) requires bound 448 (else EINVAL) */
	int block;      /* enum fos_block; 16x16 only per-tensor */
	int err_mode;   /* enum fos_errmode */
	int bound;      /* 256 or 448 */
	int row_scaled; /* 1: one amax per row (1x16 only) */
} fos_qcfg;

fos_qcfg fos_qcfg_default(void);
/* Checks cfg and the shape (cols % 16, rows % 16 for 16x16); message names the bad value. */
int fos_qcfg_check(const fos_qcfg *cfg, int64_t rows, int64_t cols, fos_err *err);

/* A quantized tensor in backend memory: codes (rows, cols/2), scales (rows, cols/16),
 * amax (1 float, or rows floats when row_scaled). */
typedef struct fos_qtensor {
	int64_t rows, cols;
	int bound;
	int row_scaled;
	uint8_t *codes;
	uint8_t *scales;
	float *amax;
} fos_qtensor;

typedef struct fos_backend fos_backend;

/* GEMM epilogue (NUMERICS.md section 7), all pointers in backend memory:
 *   ga = a_amax ? rn(a_amax[0] * a_dinv) : a_dinv;  gb likewise;  alpha = rn(ga * gb)
 *   t = rn(acc * alpha); if row_scale: t = rn(t * row_scale[m]); y = bf16(t)
 *   if bias: y = bf16(float(y) + float(bias[n]))
 * A plain bf16 GEMM uses a_amax = b_amax = NULL, a_dinv = b_dinv = 1 (alpha = 1, exact). */
typedef struct fos_gemm_epi {
	const float *a_amax;
	float a_dinv;
	const float *b_amax;
	float b_dinv;
	const float *row_scale; /* M floats or NULL */
	const uint16_t *bias;    /* N bf16 or NULL */
} fos_gemm_epi;

static inline fos_gemm_epi fos_gemm_epi_plain(void)
{
	fos_gemm_epi e = {0, 1.0f, 0, 1.0f, 0, 0};
	return e;
}

struct fos_backend {
	const char *name; /* "cpu" or "cuda" */
	char device[128]; /* human description, e.g. "NVIDIA H200 (sm_90)" or "2 CPU threads" */
	unsigned char uuid[16]; /* the GPU's UUID (cudaDeviceProp.uuid); has_uuid 0 for cpu */
	int has_uuid;
	void *impl;
	/* Set by fosd's executor while an asynchronous request runs on this instance (PROTOCOL.md
	 * "Asynchronous requests"): linear.c then leaves out the syncs that only make its results
	 * (a weight, saved operands, gradients) safe for other instances or host reads at once, since
	 * the executor synchronizes this instance before anything else touches them (its frees are
	 * stream-ordered). 0 elsewhere. */
	int defer_sync;

	void (*destroy)(fos_backend *be);

	/* ---- memory ---- */
	void *(*alloc)(fos_backend *be, size_t bytes); /* NULL on failure; 64-byte aligned */
	void (*free)(fos_backend *be, void *p);
	int (*h2d)(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err);
	int (*d2h)(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err); /* waits */
	int (*d2d)(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err);
	int (*sync)(fos_backend *be, fos_err *err);
	/* dst[0, n) = 0 bytes, stream-ordered like d2d. */
	int (*zero)(fos_backend *be, void *dst, size_t n, fos_err *err);

	/* ---- elementwise / layout ---- */
	/* amax of x (rows, cols) of dtype: out[0] per tensor, or out[r] per row when per_row. */
	int (*amax)(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, int per_row,
		    float *out, fos_err *err);
	/* dst (cols, rows) = src (rows, cols)^T, element size esize (2 or 4). */
	int (*transpose)(fos_backend *be, const void *src, void *dst, int64_t rows, int64_t cols,
			 size_t esize, fos_err *err);

	/* ---- quantize / dequantize ---- */
	/* Quantizes x (rows, cols) into q (q->codes, q->scales, q->amax preallocated by the caller;
	 * q->rows/cols/bound/row_scaled are set by the op). amax_in: NULL to compute the amax (per
	 * tensor or per row), else a backend pointer to the amax to use (1 or rows floats); it is
	 * copied into q->amax. decoded: optional (rows, cols) bf16 output of e2m1 value * e4m3 scale
	 * (no amax), the exact GEMM operand of section 7. */
	int (*quantize)(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols,
			const fos_qcfg *cfg, const float *amax_in, fos_qtensor *q, uint16_t *decoded,
			fos_err *err);
	/* Optional (NULL when not offered): quantize of an input stored transposed. The logical
	 * (rows, cols) tensor is X[r, c] = x[c * rows + r] (x is stored (cols, rows)); the outputs are
	 * bit for bit those of quantize on the transposed copy. Per-tensor only (row_scaled: EINVAL).
	 * linear.c uses it, when present, for the columnwise X and dY^T instead of a transpose. */
	int (*quantize_t)(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols,
			  const fos_qcfg *cfg, const float *amax_in, fos_qtensor *q, uint16_t *decoded,
			  fos_err *err);
	/* out (rows, cols) of out_dtype = dequantize(q) (section 6). */
	int (*dequantize)(fos_backend *be, const fos_qtensor *q, int out_dtype, void *out, fos_err *err);
	/* out (rows, cols) bf16 = e2m1 value * e4m3 scale, no amax (exact in bf16). */
	int (*decode)(fos_backend *be, const fos_qtensor *q, uint16_t *out, fos_err *err);

	/* ---- GEMM ---- */
	/* y (M, N) bf16 = epilogue( sum_k a[m,k] * b[n,k] ), a (M, K) bf16, b (N, K) bf16, FP32
	 * accumulation in an order that depends on nothing but K (deterministic). See fos_gemm_epi. */
	int (*gemm)(fos_backend *be, const uint16_t *a, const uint16_t *b, int64_t m, int64_t n, int64_t k,
		    const struct fos_gemm_epi *epi, uint16_t *y, fos_err *err);
	/* Optional (NULL when not offered): gemm with stored-transposed operands. trans_a: a is stored
	 * (K, M), i.e. A[m, k] = a[k * M + m]; trans_b: b is stored (K, N), B[n, k] = b[k * N + n].
	 * Same accumulation order and epilogue as gemm, so the bits equal gemm on the transposed copies.
	 * linear.c uses it, when present, instead of explicit transposes. */
	int (*gemm_ex)(fos_backend *be, const uint16_t *a, int trans_a, const uint16_t *b, int trans_b, int64_t m,
		       int64_t n, int64_t k, const struct fos_gemm_epi *epi, uint16_t *y, fos_err *err);
	/* db (N) bf16 = bf16( sum over m of float(dy[m, n]) ), dy (M, N) bf16, fixed order. */
	int (*colsum)(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, uint16_t *db, fos_err *err);

	/* Optional (NULL when not offered; cpu: NULL): the GEMM of gemm with b = decode(w) (w (N, K),
	 * b's bits exactly be->decode's), reading w's codes and scales itself: y (M, N) bf16 =
	 * epilogue(sum_k a[m,k] * decode(w)[n,k]), a (M, K) bf16, the bits of be->decode + be->gemm
	 * with the same epi (cuda: the same in-order FP32 chain per output as its cuBLASLt GEMM), so a
	 * row's bits never depend on which of the two served it. gemm_w4_takes answers 1 for the shapes
	 * where the backend prefers it (linear.c asks, and then uses it for the forward's GEMM); gemm_w4
	 * refuses (EINVAL) only shapes it cannot run (cuda: M > 128, K % 128, N % 8). */
	int (*gemm_w4_takes)(fos_backend *be, int64_t m, int64_t n, int64_t k);
	int (*gemm_w4)(fos_backend *be, const uint16_t *a, const struct fos_qtensor *w, int64_t m,
		       const struct fos_gemm_epi *epi, uint16_t *y, fos_err *err);

	/* ---- recorded work ---- */
	/* Optional (NULL when not offered): runs run(be, arg, err). run must only queue work on this
	 * backend instance's stream (allocations and frees included, no waits, no host reads of
	 * results) that depends on nothing but the bytes of key and the contents of backend memory;
	 * the backend may record that work and, for a later call with the same key, replay the
	 * recording instead of calling run (cuda: CUDA graphs). Same bits either way. */
	int (*replay)(fos_backend *be, const void *key, size_t keylen,
		      int (*run)(fos_backend *be, void *arg, fos_err *err), void *arg, fos_err *err);

	/* ---- fused gradient operands ---- */
	/* Optional (NULL when not offered; cpu: NULL): both decoded GEMM operands of the quantized
	 * backward's gradient from one read of dy (m, n) bf16, with no codes or scales written. amax: a
	 * backend pointer to dy's per-tensor amax (already computed). With g = {NVFP4, 1x16, MAE, 448,
	 * per-tensor} (section 5):
	 *   dec_rows   (m, n) = exactly the `decoded` output of quantize(dy, FOS_BF16, m, n, &g, amax);
	 *   dec_cols_t (n, m) = exactly the `decoded` output of quantize_t(dy, FOS_BF16, n, m, &g, amax),
	 *                       i.e. of dY^T quantized along m;
	 * bf16 e2m1 value * e4m3 scale (section 6, no amax), bit for bit. m and n must be positive
	 * multiples of 16 (else FOS_EINVAL naming them); FOS_EUNSUPPORTED when switched off (cuda: kernel
	 * variant bit 9). Callers fall back to quantize + quantize_t on FOS_EINVAL / FOS_EUNSUPPORTED. */
	int (*grad_pair)(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, const float *amax,
			 uint16_t *dec_rows, uint16_t *dec_cols_t, fos_err *err);

	/* ---- a second stream (optional; cpu: NULL) ---- */
	/* side_begin: the work queued from now until side_end runs on the instance's side stream,
	 * after everything queued before side_begin; side_end: back to the main stream, which does not
	 * wait; side_join: the main stream waits for the side work (call it before using what the side
	 * work wrote, and before the op ends). Work of other ops may run beside it meanwhile: only
	 * speed depends on this, never the bytes. Used by linear.c to decode W beside X's quantize. */
	int (*side_begin)(fos_backend *be, fos_err *err);
	int (*side_end)(fos_backend *be, fos_err *err);
	int (*side_join)(fos_backend *be, fos_err *err);

	/* ---- memory and events of other processes on the same GPU (optional; cpu: all NULL) ---- */
	/* Maps the allocation a 64-byte CUDA IPC memory handle exports: *base its start here, *size its
	 * bytes (the whole allocation, from the driver); ipc_close unmaps it. A handle is opened at most
	 * once per process (the driver refuses a second open: "already mapped"). FOS_EINVAL for a handle
	 * the driver refuses (message from the driver). */
	int (*ipc_open)(fos_backend *be, const unsigned char handle[64], void **base, size_t *size, fos_err *err);
	void (*ipc_close)(fos_backend *be, void *base);
	/* Opens a 64-byte CUDA IPC event handle (*ev: the event here); ipc_event_close destroys it. */
	int (*ipc_event_open)(fos_backend *be, const unsigned char handle[64], void **ev, fos_err *err);
	void (*ipc_event_close)(fos_backend *be, void *ev);
	/* This instance's stream waits for the event's last record (no CPU wait). */
	int (*ipc_event_wait)(fos_backend *be, void *ev, fos_err *err);
	/* The CPU waits for the event's last record. */
	int (*ipc_event_sync)(fos_backend *be, void *ev, fos_err *err);
	/* This instance's own interprocess event, for a client to wait on: done_event_handle writes
	 * its 64-byte CUDA IPC handle (the event is made on first use; the same handle every time);
	 * done_event_record records it on the stream after the work queued so far (what sync would
	 * wait for). */
	int (*done_event_handle)(fos_backend *be, unsigned char handle[64], fos_err *err);
	int (*done_event_record)(fos_backend *be, fos_err *err);
	/* dst (host) = n bytes at src (device), synchronously and outside this instance's stream (a
	 * small read on a thread that is not the instance's, e.g. of checked inputs). */
	int (*read_sync)(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err);
	/* Asynchronous requests (PROTOCOL.md "Asynchronous requests"; optional, cpu: NULL):
	 * write_u32 stores v at dst (4 bytes of device memory, a client's mapped word) in this
	 * instance's stream order, after the work queued so far and visible to other processes'
	 * streams waiting on it (cuStreamWriteValue32). mark_record records a plain event (made on
	 * first use into *ev, reused after) after the work queued so far; mark_done says whether it
	 * completed (1), not yet (0) or failed (-1; thread-safe, any thread); mark_free destroys it;
	 * mark_wait makes this instance's later work wait until a mark another instance recorded has
	 * completed (cudaStreamWaitEvent: the device waits, not the host). */
	int (*write_u32)(fos_backend *be, void *dst, uint32_t v, fos_err *err);
	int (*mark_record)(fos_backend *be, void **ev, fos_err *err);
	int (*mark_done)(fos_backend *be, void *ev);
	void (*mark_free)(fos_backend *be, void *ev);
	int (*mark_wait)(fos_backend *be, void *ev, fos_err *err);
};

/* Backend constructors. fos_backend_cuda returns NULL (with err) when built without CUDA or when
 * no GPU is usable. threads <= 0 means one per online CPU. */
fos_backend *fos_backend_cpu(int threads, fos_err *err);
fos_backend *fos_backend_cuda(int device, fos_err *err);
/* "cpu", "cuda" or "auto" (cuda if usable, else cpu). */
fos_backend *fos_backend_open(const char *name, fos_err *err);

/* ---- quantized-tensor helpers (qtensor.c) ---- */
/* Allocates codes/scales/amax for a (rows, cols) tensor in backend memory. */
int fos_qtensor_alloc(fos_backend *be, fos_qtensor *q, int64_t rows, int64_t cols, int row_scaled,
		      fos_err *err);
void fos_qtensor_free(fos_backend *be, fos_qtensor *q);
size_t fos_qtensor_bytes(int64_t rows, int64_t cols, int row_scaled);
/* Quantizes bf16 x (rows, cols) into a fresh q under cfg (amax_in: the tensor amax given, else
 * NULL), and into *dec a fresh bf16 decoding of q when dec is not NULL; trans: x is stored
 * transposed, (cols, rows). On failure nothing stays allocated. */
int fos_qtensor_quantize_new(fos_backend *be, const void *x, int trans, int64_t rows, int64_t cols, const fos_qcfg *cfg,
			     const float *amax_in, fos_qtensor *q, uint16_t **dec, fos_err *err);

/* ---- the linear layer (linear.c), all pointers in backend memory ---- */

/* Options of one linear layer. */
typedef struct fos_linear_opts {
	int override;     /* enum fos_override */
	int weight_block; /* enum fos_block, default 16x16 */
	int err_mode;     /* enum fos_errmode */
	int bound;        /* 256 or 448 */
	int row_scaled;   /* row-scaled activations */
	int four_over_six; /* enum fos_scope: which operands use 4/6 (default all) */
} fos_linear_opts;

/* How a layer of options o quantizes W (rowwise, and its columnwise copy): 4/6 with o's weight_block,
 * err_mode and bound, or plain NVFP4 (bound 448) with o's weight_block; per-tensor. */
fos_qcfg fos_linear_wcfg(const fos_linear_opts *o);
/* How it quantizes X: 1x16, 4/6 with o's err_mode and bound or plain NVFP4; row_scaled as given. */
fos_qcfg fos_linear_xcfg(const fos_linear_opts *o, int row_scaled);

fos_linear_opts fos_linear_opts_default(void);
/* Validates shapes (M >= 1; N and K positive multiples of 16: NUMERICS.md section 8, outputs are
 * those of the same layer on inputs zero-padded to multiples of 128) and option combinations;
 * resolves DEFAULT. */
int fos_linear_check(const fos_linear_opts *o, int64_t m, int64_t n, int64_t k, int *resolved_override,
		     fos_err *err);

/* The uses a weight is made for (PutWeight's uses, PROTOCOL.md "Weight uses"); what it keeps
 * follows from them and nothing else:
 *   FOS_USE_FORWARD        forwards without a backward: the rowwise codes, scales and amax;
 *   FOS_USE_DEQUANTIZED    the dequantized backward: the same (deq(W) is their dequantization);
 *   FOS_USE_QUANTIZED      the quantized backward: plus the columnwise codes and scales;
 *   FOS_USE_HIGH_PRECISION the high_precision backward: plus the bf16 master.
 * A forward that saves a context for override o needs fos_use_of_override(o); one that saves
 * nothing needs FOS_USE_FORWARD. */
enum fos_wuse {
	FOS_USE_FORWARD = 1,
	FOS_USE_QUANTIZED = 2,
	FOS_USE_HIGH_PRECISION = 4,
	FOS_USE_DEQUANTIZED = 8,
	FOS_USES_ALL = 15
};
/* The use a saved context of resolved override ovr (quantized, high_precision, dequantized) needs. */
static inline int fos_use_of_override(int ovr)
{
	return ovr == FOS_OVR_HIGH_PRECISION ? FOS_USE_HIGH_PRECISION
	       : ovr == FOS_OVR_DEQUANTIZED  ? FOS_USE_DEQUANTIZED
					     : FOS_USE_QUANTIZED;
}
/* "forward", "quantized", "high_precision", "dequantized" for one FOS_USE_* bit, else "?". */
const char *fos_use_name(int use);
/* uses as names joined by ',' into buf ("" for none); returns buf. */
char *fos_uses_str(int uses, char *buf, size_t bufsz);

/* A quantized weight, as the cache keeps it: only what its uses need (see enum fos_wuse). No
 * decoded (bf16) operand is kept: a GEMM decodes the codes it needs (be->decode, exact) into a
 * scratch buffer (fos_wops) or uses a decoded copy its caller keeps. */
typedef struct fos_qweight {
	int64_t n, k;
	fos_linear_opts opts;
	int uses;            /* FOS_USE_* bits the weight was made for */
	fos_qtensor q;       /* (N, K) rowwise: always */
	fos_qtensor qcol;    /* (K, N) columnwise: with FOS_USE_QUANTIZED, else codes NULL */
	uint16_t *master;    /* (N, K) bf16 original: with FOS_USE_HIGH_PRECISION, else NULL */
} fos_qweight;

/* A weight's bytes by part: codes = rowwise codes, scales and amax; columnwise = the columnwise
 * codes, scales and amax; master = the bf16 master. */
typedef struct fos_qweight_parts {
	size_t codes, columnwise, master;
} fos_qweight_parts;

/* Quantizes w (N, K) bf16 (backend memory) as fos_linear_wcfg(o) says (o's override and row_scaled
 * are ignored), keeping what uses (FOS_USE_* bits, at least one; else EINVAL) need. */
int fos_qweight_make_uses(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
			  int uses, fos_qweight *qw, fos_err *err);
/* fos_qweight_make_uses with uses forward and dequantized, plus high_precision and quantized when
 * keep_master, plus quantized when want_col. */
int fos_qweight_make(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
		     int keep_master, int want_col, fos_qweight *qw, fos_err *err);
void fos_qweight_free(fos_backend *be, fos_qweight *qw);
/* What fos_qweight_make_uses keeps for an (n, k) weight, by part (p may be NULL); the sum. */
size_t fos_qweight_bytes_for(int64_t n, int64_t k, int uses, fos_qweight_parts *p);
size_t fos_qweight_bytes(const fos_qweight *qw);
/* out (N, K) bf16 = the exact GEMM operand of the rowwise codes (col 0), or out (K, N) of the
 * columnwise ones (col 1; EINVAL without them): be->decode, stream-ordered. */
int fos_qweight_decode(fos_backend *be, const fos_qweight *qw, int col, uint16_t *out, fos_err *err);

/* A reusable backend buffer (a fosd lane's decode scratch): grows to the largest size asked, is
 * used by one backend instance at a time (its stream orders the reuse), freed by fos_wscratch_free. */
typedef struct fos_wscratch {
	void *p;
	size_t cap;
} fos_wscratch;
/* At least n bytes of ws (growing it: the old buffer is freed stream-ordered); NULL with err. */
void *fos_wscratch_get(fos_backend *be, fos_wscratch *ws, size_t n, fos_err *err);
void fos_wscratch_free(fos_backend *be, fos_wscratch *ws);

/* Where a layer call gets the weight's decoded operands (all optional; NULL members: decode on
 * demand into ws, or into a buffer of the call when ws is NULL too): wdec, the rowwise decoding
 * (N, K) already made (fosd's decoded tier); wcol_dec, the columnwise one (K, N). Both must be
 * exactly fos_qweight_decode's output; results are the same bits either way. */
typedef struct fos_wops {
	fos_wscratch *ws;
	const uint16_t *wdec;
	const uint16_t *wcol_dec;
} fos_wops;

/* What a forward keeps for the backward of its resolved override (section 8). */
typedef struct fos_saved {
	int override; /* resolved */
	int four_over_six; /* the forward's scope (the form of W its backward uses) */
	int64_t m, n, k;
	int has_bias;
	fos_qtensor xq;       /* dequantized: rowwise x; (codes NULL otherwise) */
	fos_qtensor xcol;     /* quantized: columnwise x (K, M) */
	uint16_t *xcol_decoded;
	uint16_t *x;          /* high_precision: bf16 X (M, K) */
	float *x_amax;        /* quantized: x amax (1 float) */
} fos_saved;

/* y (M, N) bf16 = forward(x (M, K) bf16, qw) [+ bias (N) bf16]. o gives the call's override,
 * row_scaled and four_over_six scope; its weight_block, err_mode and bound must equal qw->opts (X is
 * quantized with the same err_mode and bound as the weight), and its scope must quantize W as the
 * weight was (4/6 or plain; else EINVAL naming both scopes). If saved is non-NULL it is filled with what the backward
 * of the resolved override needs (free with fos_saved_free); the weight must have been made for
 * that override's use (fos_use_of_override; else EINVAL naming it). wo: see fos_wops (NULL: none). */
int fos_linear_forward_w(fos_backend *be, const uint16_t *x, int64_t m, const fos_qweight *qw, const fos_wops *wo,
			 const fos_linear_opts *o, const uint16_t *bias, uint16_t *y, fos_saved *saved, fos_err *err);
/* fos_linear_forward_w with wo NULL. */
int fos_linear_forward(fos_backend *be, const uint16_t *x, int64_t m, const fos_qweight *qw,
		       const fos_linear_opts *o, const uint16_t *bias, uint16_t *y, fos_saved *saved,
		       fos_err *err);
/* dx (M, K), dw (N, K), db (N, optional) bf16 from dy (M, N) bf16 and what forward saved.
 * qw must be the same weight, made for the saved override's use (else EINVAL naming it). dx or dw
 * NULL: that gradient is not computed (its GEMM and operands skipped; the other gradients' bits
 * are the same as with it). */
int fos_linear_backward_w(fos_backend *be, const fos_saved *saved, const fos_qweight *qw, const fos_wops *wo,
			  const uint16_t *dy, uint16_t *dx, uint16_t *dw, uint16_t *db, fos_err *err);
/* fos_linear_backward_w with wo NULL. */
int fos_linear_backward(fos_backend *be, const fos_saved *saved, const fos_qweight *qw, const uint16_t *dy,
			uint16_t *dx, uint16_t *dw, uint16_t *db, fos_err *err);
void fos_saved_free(fos_backend *be, fos_saved *s);
size_t fos_saved_bytes(const fos_saved *s);

#ifdef __cplusplus
}
#endif
#endif
