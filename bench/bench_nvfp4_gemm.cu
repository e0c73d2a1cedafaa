/* bench_nvfp4_gemm.cu: an experiment of issue 19, not used by fosd: a small-M GEMM for sm_90 that
 * reads the weight as NVFP4 (codes + e4m3 scale bytes, 0.5625 bytes per element, the form the
 * weight cache keeps) and decodes it in registers, against the current path (be->decode into a
 * bf16 scratch, then be->gemm) and a plain bf16 cuBLASLt GEMM of the same shape.
 *
 * The kernel: y (M, N) bf16 = x (M, K) bf16 * W^T, W (N, K) as codes (N, K/2: element 2j in the low
 * nibble of byte j) and scale bytes (N, K/16); every W element is bf16(e2m1 value * e4m3 scale),
 * exact (NUMERICS.md sections 6 and 7), so the math is the bf16 GEMM of the current path on the
 * decoded W; FP32 accumulation on mma.sync.m16n8k16 (bf16 in, f32 accumulators); alpha 1, no
 * epilogue but the bf16 cast (round to nearest even). Scale bytes never carry the sign bit (fosd's
 * quantizers never set it); the kernel ignores it.
 *   - A CTA owns 16 * MT rows and 8 * NT columns; its WK warps split K into WK equal slices (a
 *     split fixed by the kernel, never by M), each walks its slice in chunks of 128 k, and the WK
 *     partial sums are added in warp order, ((p0 + p1) + p2) + ..., through shared memory.
 *   - Within a chunk, lane (g, t) (g = lane / 4, t = lane % 4) loads 16 code bytes and 2 scale
 *     bytes of W row n0 + 8j + g: the 32 elements k = 32t .. 32t + 31 (two 1x16 blocks), decoded by
 *     the byte permutes of fcu_dec_words (cuda_q46.cuh, proven against the table by fos_cuda_selftest
 *     4) from a 2 KiB per-CTA table of the 8 magnitudes of each scale byte. mma step s (0..7) feeds
 *     the pairs k = 32t + 4s + {0, 1} to the k-slots 2t, 2t + 1 and 32t + 4s + {2, 3} to 2t + 8,
 *     2t + 9, for B (W) and A (x, the same lane's rows g and g + 8, loaded as 64 contiguous bytes)
 *     alike: a fixed permutation of k inside the chunk, so each 16-byte load serves 8 mma steps.
 *   - Every output's FP32 sum is the same sequence of mma steps whatever M, MT and NT: bits are
 *     deterministic and do not depend on M (batch-invariant) nor on MT / NT; they do depend on WK
 *     (another split, other partial sums), and differ from cuBLASLt's (another order).
 *   - The next chunk's W (and, for MT = 1, x) is loaded into registers while the current one is
 *     decoded and multiplied. Needs N % (8 NT) == 0 and K % (128 WK) == 0 (the launcher refuses
 *     other shapes).
 *
 * The program quantizes a random bf16 W with the weight's default options (4/6, 16x16 blocks, MAE,
 * bound 256: fos_qweight_make_uses) and decodes it with be->decode for the reference path, then for
 * each shape (M x N x K) 16x4096x4096, 128x4096x4096, 16x4096x14336 prints markdown rows: the
 * median of 21 timed runs (CUDA events on the backend's stream, after 3 warm-ups; all ops of a shape
 * alternate run by run) of every kernel variant, of decode + be->gemm, of be->gemm alone on the
 * decoded W, and of the plain bf16 cuBLASLt GEMM (fos_cuda_gemm_baseline, 32 MiB workspace), once
 * with L2 flushed before each op (a 256 MiB memset outside the timed interval: the weight comes
 * from HBM, as for a model's successive layers) and once hot (back to back, the weight in L2);
 * then the checks: each variant against be->gemm on the decoded W (differing elements, max ulps,
 * SQNR) and against an FP64 reference on rows 0..15, run-to-run bits, bits over M in {1, 16, 128,
 * 1024} (rows of a larger M against the smaller run). Exit status 1 if a variant is wrong (SQNR
 * against be->gemm below 60 dB, bits changing run to run or with M), else 0; without a GPU it says
 * so and exits 0. Usage: bench_nvfp4_gemm [hot] (hot: skip the L2-flushed rows). */
#include "backend.h"
#include "bench_util.h"
#include "cuda_backend.h"
#include "support_cuda_baseline.h"
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"
#include "fos_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fos_backend *be;
static fos_err err;

#define CK(x)                                                                                                  \
	do {                                                                                                   \
		if ((x) != FOS_OK) {                                                                           \
			fprintf(stderr, "bench_nvfp4_gemm: %s failed: %s\n", #x, err.msg);                     \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

#define CU(x)                                                                                                  \
	do {                                                                                                   \
		cudaError_t e_ = (x);                                                                          \
		if (e_ != cudaSuccess) {                                                                       \
			fprintf(stderr, "bench_nvfp4_gemm: %s: %s\n", #x, cudaGetErrorString(e_));             \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

/* ---- the kernel ------------------------------------------------------------------------------ */

__device__ __forceinline__ void w4_mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
				       uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
	    "{%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 16 words (32 bf16) from p, 16-byte aligned. */
__device__ __forceinline__ void w4_ld64(const uint16_t *p, uint32_t *o)
{
#pragma unroll
	for (int q = 0; q < 4; q++) {
		const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p) + q);
		o[4 * q] = v.x;
		o[4 * q + 1] = v.y;
		o[4 * q + 2] = v.z;
		o[4 * q + 3] = v.w;
	}
}

template <int MT, int NT, int WK>
__global__ void __launch_bounds__(32 * WK) k_w4(const uint16_t *__restrict__ x, const uint8_t *__restrict__ codes,
						const uint8_t *__restrict__ scales, int m, int n, int k,
						uint16_t *__restrict__ y)
{
	constexpr bool PA = MT == 1; /* prefetch x too (registers allow it for one m16 tile) */
	__shared__ __align__(16) uint16_t tab[128 * 8]; /* bf16(e2m1 magnitude c * float(sf)), [sf][c] */
	__shared__ float red[WK][MT * NT * 4][32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
	for (int i = threadIdx.x; i < 128 * 8; i += 32 * WK)
		tab[i] = fos_f32_to_bf16(FOS_MUL(fos_e2m1_value((uint32_t)i & 7u), fos_e4m3_to_f32((uint32_t)i >> 3)));

	const int n0 = blockIdx.x * 8 * NT, m0 = blockIdx.y * 16 * MT;
	const int kw = k / WK, kbeg = warp * kw, nch = kw / 128;
	const uint8_t *cp[NT];
	const uint16_t *sp[NT];
#pragma unroll
	for (int j = 0; j < NT; j++) {
		const int64_t r = n0 + 8 * j + g;
		cp[j] = codes + r * (k / 2) + kbeg / 2 + 16 * t;
		sp[j] = reinterpret_cast<const uint16_t *>(scales + r * (k / 16) + kbeg / 16 + 2 * t);
	}
	const uint16_t *xp[MT][2];
	bool xin[MT][2];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int64_t r = m0 + 16 * i + g + 8 * h;
			xin[i][h] = r < m;
			xp[i][h] = x + (xin[i][h] ? r : 0) * k + kbeg + 32 * t;
		}

	float acc[MT][NT][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				acc[i][j][r] = 0.0f;

	uint4 wc[NT];                 /* next chunk's codes */
	uint32_t wsf[NT];             /* next chunk's two scale bytes */
	uint32_t xa[PA ? MT : 1][2][16]; /* next chunk's x (PA) */
	auto load_w = [&](int c) {
#pragma unroll
		for (int j = 0; j < NT; j++) {
			wc[j] = __ldg(reinterpret_cast<const uint4 *>(cp[j] + 64 * c));
			wsf[j] = __ldg(sp[j] + 4 * c);
		}
	};
	auto load_x = [&](int c, uint32_t (*dst)[16], int i) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			if (xin[i][h])
				w4_ld64(xp[i][h] + 128 * c, dst[h]);
			else
#pragma unroll
				for (int q = 0; q < 16; q++)
					dst[h][q] = 0u;
		}
	};
	if (nch > 0) {
		load_w(0);
		if (PA)
			load_x(0, xa[0], 0);
	}
	__syncthreads(); /* tab */

	for (int c = 0; c < nch; c++) {
		uint4 cc[NT];
		uint32_t cs[NT];
		uint32_t ca[MT][2][16];
#pragma unroll
		for (int j = 0; j < NT; j++) {
			cc[j] = wc[j];
			cs[j] = wsf[j];
		}
		if (PA) {
#pragma unroll
			for (int h = 0; h < 2; h++)
#pragma unroll
				for (int q = 0; q < 16; q++)
					ca[0][h][q] = xa[0][h][q];
		}
		if (c + 1 < nch) {
			load_w(c + 1);
			if (PA)
				load_x(c + 1, xa[0], 0);
		}
		if (!PA) {
#pragma unroll
			for (int i = 0; i < MT; i++)
				load_x(c, ca[i], i);
		}
#pragma unroll
		for (int j = 0; j < NT; j++) {
			/* word q of wd: the bf16 pair k = 32t + 2q, + 1 of this chunk (block q / 8) */
			uint32_t wd[16];
			const uint32_t s0 = cs[j] & 0x7Fu, s1 = (cs[j] >> 8) & 0x7Fu;
			const uint4 r0 = *reinterpret_cast<const uint4 *>(tab + s0 * 8);
			const uint4 r1 = *reinterpret_cast<const uint4 *>(tab + s1 * 8);
			fcu_dec_words((uint64_t)cc[j].x | ((uint64_t)cc[j].y << 32), s0, r0.x, r0.y, r0.z, r0.w, wd);
			fcu_dec_words((uint64_t)cc[j].z | ((uint64_t)cc[j].w << 32), s1, r1.x, r1.y, r1.z, r1.w, wd + 8);
#pragma unroll
			for (int i = 0; i < MT; i++)
#pragma unroll
				for (int s = 0; s < 8; s++)
					w4_mma(acc[i][j], ca[i][0][2 * s], ca[i][1][2 * s], ca[i][0][2 * s + 1],
					       ca[i][1][2 * s + 1], wd[2 * s], wd[2 * s + 1]);
		}
	}

	/* the WK partial sums, added in warp order; element e = (i NT + j) 4 + r of lane l */
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				red[warp][(i * NT + j) * 4 + r][lane] = acc[i][j][r];
	__syncthreads();
	for (int p = threadIdx.x; p < MT * NT * 2 * 32; p += 32 * WK) {
		const int l = p & 31, q = p >> 5, tile = q >> 1, h = q & 1, e = tile * 4 + h * 2;
		float v0 = red[0][e][l], v1 = red[0][e + 1][l];
#pragma unroll
		for (int w = 1; w < WK; w++) {
			v0 = FOS_ADD(v0, red[w][e][l]);
			v1 = FOS_ADD(v1, red[w][e + 1][l]);
		}
		const int i = tile / NT, j = tile % NT;
		const int64_t row = m0 + 16 * i + (l >> 2) + 8 * h;
		const int64_t col = n0 + 8 * j + 2 * (l & 3);
		if (row < m)
			*reinterpret_cast<uint32_t *>(y + row * n + col) =
				(uint32_t)fos_f32_to_bf16(v0) | ((uint32_t)fos_f32_to_bf16(v1) << 16);
	}
}

typedef void (*kern_fn)(const uint16_t *, const uint8_t *, const uint8_t *, int, int, int, uint16_t *);

struct variant {
	const char *name;
	kern_fn fn;
	int mt, nt, wk;
};

static const variant variants[] = {
	{"w4 mma v1 (MT 1, NT 4, WK 8)", k_w4<1, 4, 8>, 1, 4, 8},
	{"w4 mma v2 (MT 1, NT 2, WK 8)", k_w4<1, 2, 8>, 1, 2, 8},
	{"w4 mma v3 (MT 2, NT 4, WK 8)", k_w4<2, 4, 8>, 2, 4, 8},
	{"w4 mma v4 (MT 1, NT 2, WK 16)", k_w4<1, 2, 16>, 1, 2, 16},
};
#define NVAR ((int)(sizeof variants / sizeof variants[0]))

/* The launcher: refuses shapes the variant cannot take. */
static int w4_gemm(const variant *v, const uint16_t *x, const fos_qtensor *q, int64_t m, uint16_t *y)
{
	const int64_t n = q->rows, k = q->cols;
	if (m < 1 || n % (8 * v->nt) || k % (128 * v->wk) || n * k > ((int64_t)1 << 40) || m > 65535 * 16 * v->mt)
		return fos_seterr(&err, FOS_EINVAL, "%s: shape %lldx%lldx%lld not taken (N %% %d, K %% %d)", v->name,
				  (long long)m, (long long)n, (long long)k, 8 * v->nt, 128 * v->wk);
	dim3 grid((unsigned)(n / (8 * v->nt)), (unsigned)((m + 16 * v->mt - 1) / (16 * v->mt)));
	v->fn<<<grid, 32 * v->wk, 0, fcu(be)->st>>>(x, q->codes, q->scales, (int)m, (int)n, (int)k, y);
	return fcu_launched(&err, v->name);
}

/* ---- the driver ------------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static void *dev_alloc(size_t n)
{
	void *d = be->alloc(be, n);
	if (!d) {
		fprintf(stderr, "bench_nvfp4_gemm: out of device memory (%zu bytes)\n", n);
		exit(1);
	}
	return d;
}

static uint16_t *dev_rand(int64_t n, float scale)
{
	uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
	for (int64_t i = 0; i < n; i++)
		h[i] = fos_f32_to_bf16((bench_frand(&rng) + bench_frand(&rng) + bench_frand(&rng)) * scale);
	uint16_t *d = (uint16_t *)dev_alloc((size_t)n * 2);
	CK(be->h2d(be, d, h, (size_t)n * 2, &err));
	free(h);
	return d;
}

static uint16_t *host_copy(const uint16_t *d, int64_t n)
{
	uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
	CK(be->d2h(be, h, d, (size_t)n * 2, &err));
	return h;
}

struct shape_ctx {
	int64_t m, n, k;
	const uint16_t *x;
	fos_qweight qw;
	uint16_t *wdec;    /* the decoded W (N, K) bf16 */
	uint16_t *scratch; /* decode target of the current path */
	uint16_t *y;
	const variant *v;
};

struct op {
	const char *name;
	void (*fn)(shape_ctx *);
	const variant *v;
};

static void op_w4(shape_ctx *s) { CK(w4_gemm(s->v, s->x, &s->qw.q, s->m, s->y)); }
static void op_cur(shape_ctx *s) /* the current path: decode into a scratch, then the backend's GEMM */
{
	const fos_gemm_epi e = fos_gemm_epi_plain();
	CK(fos_qweight_decode(be, &s->qw, 0, s->scratch, &err));
	CK(be->gemm(be, s->x, s->scratch, s->m, s->n, s->k, &e, s->y, &err));
}
static void op_gemm(shape_ctx *s) /* the backend's GEMM on a decoded copy kept (the decoded tier) */
{
	const fos_gemm_epi e = fos_gemm_epi_plain();
	CK(be->gemm(be, s->x, s->wdec, s->m, s->n, s->k, &e, s->y, &err));
}
static void op_base(shape_ctx *s) { CK(fos_cuda_gemm_baseline(be, s->x, s->wdec, s->m, s->n, s->k, s->y, 32u << 20, &err)); }

static int cmpf(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

#define NRUN 21
#define NWARM 3
static void *flush_buf;
static const size_t flush_bytes = (size_t)256 << 20;

/* Medians (us) of NRUN runs of each op, the ops alternating run by run; cold: L2 flushed (a memset
 * of flush_buf) before each op, outside its timed interval. */
static void time_ops(shape_ctx *s, const op *ops, int nops, int cold, double *us)
{
	static float t[16][NRUN];
	for (int it = 0; it < NWARM + NRUN; it++) {
		for (int o = 0; o < nops; o++) {
			if (cold)
				CK(be->zero(be, flush_buf, flush_bytes, &err));
			s->v = ops[o].v;
			CK(fos_cuda_mark(be, 2 * o, &err));
			ops[o].fn(s);
			CK(fos_cuda_mark(be, 2 * o + 1, &err));
		}
		for (int o = 0; o < nops; o++) {
			float ms;
			CK(fos_cuda_elapsed_ms(be, 2 * o, 2 * o + 1, &ms, &err));
			if (it >= NWARM)
				t[o][it - NWARM] = ms;
		}
	}
	for (int o = 0; o < nops; o++) {
		qsort(t[o], NRUN, sizeof(float), cmpf);
		us[o] = t[o][NRUN / 2] * 1000.0;
	}
}

/* bf16 bits as a monotone integer (for ulp distances). */
static int32_t ord16(uint16_t b)
{
	return (b & 0x8000u) ? -(int32_t)(b & 0x7FFFu) : (int32_t)b;
}

struct cmp_res {
	int64_t differ;
	int32_t max_ulps;
	double sqnr_db; /* INFINITY when equal */
};

static cmp_res compare(const uint16_t *a, const uint16_t *ref, int64_t n)
{
	cmp_res r = {0, 0, INFINITY};
	double sig = 0, noise = 0;
	for (int64_t i = 0; i < n; i++) {
		const double fa = fos_bf16_to_f32(a[i]), fr = fos_bf16_to_f32(ref[i]);
		sig += fr * fr;
		noise += (fa - fr) * (fa - fr);
		if (a[i] != ref[i]) {
			r.differ++;
			int32_t u = ord16(a[i]) - ord16(ref[i]);
			u = u < 0 ? -u : u;
			if (u > r.max_ulps)
				r.max_ulps = u;
		}
	}
	if (noise > 0)
		r.sqnr_db = 10.0 * log10(sig / noise);
	return r;
}

/* SQNR (dB) of rows 0..rows-1 of y (bf16, (rows, n)) against ref (double). */
static double sqnr_f64(const uint16_t *y, const double *ref, int64_t cnt)
{
	double sig = 0, noise = 0;
	for (int64_t i = 0; i < cnt; i++) {
		const double d = fos_bf16_to_f32(y[i]) - ref[i];
		sig += ref[i] * ref[i];
		noise += d * d;
	}
	return noise > 0 ? 10.0 * log10(sig / noise) : INFINITY;
}

static int bad; /* failed checks */

static void check(int ok, const char *what)
{
	if (!ok) {
		printf("CHECK FAILED: %s\n", what);
		bad++;
	}
}

static void run_shape(const uint16_t *xall, int64_t mmax, int64_t m, int64_t n, int64_t k, int do_cold)
{
	char shape[64];
	snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)m, (long long)n, (long long)k);
	shape_ctx s;
	memset(&s, 0, sizeof s);
	s.m = m;
	s.n = n;
	s.k = k;
	s.x = xall;
	uint16_t *w = dev_rand(n * k, 0.5f);
	fos_linear_opts o = fos_linear_opts_default();
	CK(fos_qweight_make_uses(be, w, n, k, &o, FOS_USE_FORWARD, &s.qw, &err));
	be->free(be, w);
	s.wdec = (uint16_t *)dev_alloc((size_t)(n * k) * 2);
	s.scratch = (uint16_t *)dev_alloc((size_t)(n * k) * 2);
	CK(fos_qweight_decode(be, &s.qw, 0, s.wdec, &err));
	uint16_t *ybuf = (uint16_t *)dev_alloc((size_t)(mmax * n) * 2);
	s.y = ybuf;

	/* timings */
	op ops[NVAR + 3];
	int nops = 0;
	for (int v = 0; v < NVAR; v++)
		ops[nops++] = op{variants[v].name, op_w4, &variants[v]};
	const int i_cur = nops, i_base = nops + 2;
	ops[nops++] = op{"current path: decode + be->gemm", op_cur, NULL};
	ops[nops++] = op{"be->gemm on a kept decoded W", op_gemm, NULL};
	ops[nops++] = op{"plain bf16 cuBLASLt GEMM", op_base, NULL};
	for (int cold = do_cold; cold >= 0; cold--) {
		double us[NVAR + 3];
		time_ops(&s, ops, nops, cold, us);
		for (int i = 0; i < nops; i++)
			printf("| %s | %s | %s | %.1f us | %.2fx | %.2fx |\n", ops[i].name, shape,
			       cold ? "L2 flushed" : "hot", us[i], us[i] / us[i_base], us[i] / us[i_cur]);
		fflush(stdout);
	}

	/* checks: the reference is be->gemm on the decoded W */
	const int64_t ne = m * n;
	op_gemm(&s);
	uint16_t *yref = host_copy(ybuf, ne);
	op_base(&s);
	uint16_t *ybase = host_copy(ybuf, ne);
	/* FP64 reference on rows 0..15 (the decoded W is exact, so this is the exact GEMM up to FP64) */
	const int64_t rr = m < 16 ? m : 16;
	uint16_t *hx = host_copy(xall, rr * k), *hw = host_copy(s.wdec, n * k);
	double *ref = (double *)malloc((size_t)(rr * n) * sizeof(double));
	for (int64_t i = 0; i < rr; i++)
		for (int64_t c = 0; c < n; c++) {
			double a = 0;
			const uint16_t *xr = hx + i * k, *wr = hw + c * k;
			for (int64_t kk = 0; kk < k; kk++)
				a += (double)fos_bf16_to_f32(xr[kk]) * (double)fos_bf16_to_f32(wr[kk]);
			ref[i * n + c] = a;
		}
	cmp_res cb = compare(ybase, yref, ne);
	printf("check %s: plain cuBLASLt vs be->gemm: %lld of %lld differ, max %d ulps, SQNR %.1f dB; "
	       "be->gemm vs FP64 (rows 0..%lld): %.1f dB\n",
	       shape, (long long)cb.differ, (long long)ne, cb.max_ulps, cb.sqnr_db, (long long)rr - 1,
	       sqnr_f64(yref, ref, rr * n));
	uint16_t *yfirst = NULL;
	for (int v = 0; v < NVAR; v++) {
		const variant *va = &variants[v];
		CK(w4_gemm(va, s.x, &s.qw.q, m, ybuf));
		uint16_t *y1 = host_copy(ybuf, ne);
		CK(w4_gemm(va, s.x, &s.qw.q, m, ybuf));
		uint16_t *y2 = host_copy(ybuf, ne);
		cmp_res c = compare(y1, yref, ne);
		const int same_run = !memcmp(y1, y2, (size_t)ne * 2);
		printf("check %s: %s vs be->gemm: %lld of %lld differ, max %d ulps, SQNR %.1f dB; vs FP64 (rows "
		       "0..%lld): %.1f dB; run to run: %s",
		       shape, va->name, (long long)c.differ, (long long)ne, c.max_ulps, c.sqnr_db, (long long)rr - 1,
		       sqnr_f64(y1, ref, rr * n), same_run ? "same bits" : "BITS DIFFER");
		if (v == 0)
			yfirst = y1;
		else
			printf("; vs %s: %s", variants[0].name,
			       !memcmp(y1, yfirst, (size_t)ne * 2) ? "same bits" : "bits differ");
		printf("\n");
		check(c.sqnr_db >= 60.0, "SQNR against be->gemm >= 60 dB");
		check(same_run, "same bits run to run");
		/* batch invariance: rows of smaller M equal the leading rows of this run, and of larger M */
		const int64_t ms[] = {1, 16, 128, 1024};
		uint16_t *yb = NULL;
		int64_t mb = 0;
		int inv = 1;
		for (int a = 0; a < 4 && ms[a] <= mmax; a++) {
			CK(w4_gemm(va, s.x, &s.qw.q, ms[a], ybuf));
			uint16_t *yc = host_copy(ybuf, ms[a] * n);
			if (yb && memcmp(yc, yb, (size_t)(mb * n) * 2))
				inv = 0;
			const int64_t mm = ms[a] < m ? ms[a] : m;
			if (memcmp(yc, y1, (size_t)(mm * n) * 2))
				inv = 0;
			free(yb);
			yb = yc;
			mb = ms[a];
		}
		free(yb);
		printf("check %s: %s over M in {1, 16, 128, 1024}: %s\n", shape, va->name,
		       inv ? "each row's bits independent of M" : "ROW BITS DEPEND ON M");
		check(inv, "batch invariance");
		free(y2);
		if (v)
			free(y1);
	}
	fflush(stdout);
	free(yfirst);
	free(ref);
	free(hx);
	free(hw);
	free(yref);
	free(ybase);
	be->free(be, ybuf);
	be->free(be, s.scratch);
	be->free(be, s.wdec);
	fos_qweight_free(be, &s.qw);
}

int main(int argc, char **argv)
{
	const int do_cold = !(argc > 1 && !strcmp(argv[1], "hot"));
	be = fos_backend_cuda(0, &err);
	if (!be) {
		printf("bench_nvfp4_gemm: no usable GPU (%s): nothing to measure\n", err.msg);
		return 0;
	}
	printf("bench_nvfp4_gemm on %s\n", be->device);
	for (int v = 0; v < NVAR; v++) {
		cudaFuncAttributes fa;
		CU(cudaFuncGetAttributes(&fa, (const void *)variants[v].fn));
		printf("%s: %d registers, %zu bytes spilled (local), %zu bytes shared, %d threads\n", variants[v].name,
		       fa.numRegs, (size_t)fa.localSizeBytes, (size_t)fa.sharedSizeBytes, 32 * variants[v].wk);
	}
	char desc[128];
	flush_buf = dev_alloc(flush_bytes);
	const int64_t mmax = 1024;
	const int64_t ks[] = {4096, 14336};
	printf("\n| path | MxNxK | L2 | median of %d | vs plain bf16 | vs decode + be->gemm |\n|---|---|---|---|---|---|\n",
	       NRUN);
	for (int ki = 0; ki < 2; ki++) {
		const int64_t k = ks[ki];
		uint16_t *x = dev_rand(mmax * k, 0.5f);
		const int64_t mlist[] = {16, 128};
		for (int mi = 0; mi < (k == 4096 ? 2 : 1); mi++) {
			const int64_t m = mlist[mi];
			run_shape(x, mmax, m, 4096, k, do_cold);
			if (fos_cuda_gemm_describe(be, m, 4096, k, desc, sizeof desc, &err) == FOS_OK)
				printf("be->gemm at %lldx4096x%lld: %s\n", (long long)m, (long long)k, desc);
		}
		be->free(be, x);
	}
	be->free(be, flush_buf);
	be->destroy(be);
	printf("%s: %d failed checks\n", bad ? "FAILED" : "OK", bad);
	return bad ? 1 : 0;
}
