/* cuda_smallm_kern.cuh: the small-M forward GEMM's kernels and launcher (be->gemm_w4): y (M, N) bf16
 * = epilogue(x (M, K) bf16 * decode(W)^T) reading W (N, K) as the cache keeps it, NVFP4 codes (N,
 * K/2: element 2j in the low nibble of byte j) and e4m3 scale bytes (N, K/16), decoded in registers.
 * A header so that two translation units instantiate the same templates: kernels/cuda_smallm.cu the
 * tiles the shape rule picks (libfosnum), tests/support_smallm_variants.cu every variant, the
 * shared-memory decode ones included (the GPU tests and the benchmarks). Two other forms of the same
 * chain live beside it: k_w4p (cuda_smallm_ws.cuh, warp-specialised, a variant only) and k_w4r
 * (cuda_smallm_rp.cuh, warp-private rings and a register pipeline, fosd's pick at small M). The kernels have internal
 * linkage: each of those units launches its own instantiations.
 *
 * Invariants (what makes its bits those of be->decode + be->gemm, i.e. cuBLASLt's, at every M):
 *   - every W element is bf16(e2m1 value * e4m3 scale), exact (NUMERICS.md sections 6, 7), taken
 *     from a per-CTA table of bf16(magnitude * scale) for each of the 256 scale bytes, its sign
 *     flipped by the code's sign bit: be->decode's bytes, -0 and NaN scales included;
 *   - each output's FP32 sum is ONE chain of mma.sync.m16n8k16 (bf16 in, FP32 accumulate) steps over
 *     k16 = 0, 1, ..., K/16 - 1 in order, starting from +0, each k in its own k-slot (no permutation
 *     inside a step), never split over K: the order the H200 measurement of DESIGN.md (Executor) found
 *     to give cuBLASLt's FP32 sums bit for bit (workspace 0, split-K 1). Parallelism comes from N
 *     (CTAs and warps on different N tiles) and from the M tiles of a warp, never from K;
 *   - a row's sum depends on its x row and W only: M, the tile shape, the variant and the ring depth
 *     change which rows a warp holds and when its copies land, never a sum's steps (rows of x beyond
 *     M are zero-filled and never stored);
 *   - the epilogue is the large-M path's (cuda_gemm.cu, fcu_epi1): alpha = rn(ga * gb) from the
 *     amaxes, t = rn(acc * alpha), rn(t * row_scale[m]) when row-scaled, bf16 RNE, then bias.
 * Layout: a CTA owns 8 * NT * WN rows of W (WN warps along N, NT n8 tiles each) and 16 * MT * WM rows
 * of x (WM warps along M, MT m16 tiles each); x is the mma's A operand (ldmatrix from shared
 * memory), decoded W its B operand. K is streamed in chunks of 128 through an S-stage ring of
 * 16-byte (codes, x) and 8-byte (scales) cp.async copies, S - 2 chunks in flight; a warp decodes
 * chunk c into registers in the same straight block as chunk c - 1's 8 mma steps (whose x stays in
 * the ring), so the decode fills the waits of the mma chain. The chain itself is K / 16 dependent
 * mma steps per output at 24 cycles each on an H200 (bench_mma_chain, BENCHMARKS.md session 9); the
 * kernel runs about 140 cycles per step: its per-step decode and copies, not the chain, are the limit.
 * Runs 1 <= M <= 128, K % 128 == 0, N % 8 == 0 (w4_runs); w4_launch checks the shape and alignment
 * and launches one variant with a ring of S stages (0: sized by the grid's residency). */
#ifndef FOS_CUDA_SMALLM_KERN_CUH
#define FOS_CUDA_SMALLM_KERN_CUH

#include "cuda_internal.cuh"
#include "fos_format.h"

#define W4_KC 128		  /* k per chunk (8 mma steps) */
#define W4_CP (W4_KC / 2 + 16)	  /* code bytes per W row in a stage (64 + 16 against bank conflicts) */
#define W4_XP (W4_KC + 8)	  /* bf16 per x row in a stage (128 + 8 against bank conflicts) */
#define W4_MAXM 128		  /* the most rows the kernel runs */
#define W4_MAXS 16		  /* the deepest ring (w4_wait's cases) */

struct w4_args {
	const uint16_t *x;
	const uint8_t *codes, *scales;
	int m, n, k, stages;
	const float *a_amax, *b_amax, *row_scale;
	float a_dinv, b_dinv;
	const uint16_t *bias;
	uint16_t *y;
};

__device__ __forceinline__ uint32_t w4_prmt(uint32_t a, uint32_t b, uint32_t s)
{
	uint32_t r;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
	return r;
}

__device__ __forceinline__ void w4_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
		     "{%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void w4_ldsm4(uint32_t *a, uint32_t addr)
{
	asm("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
		     : "r"(addr));
}

__device__ __forceinline__ void w4_cp16(uint32_t dst, const void *src, int bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void w4_cp8(uint32_t dst, const void *src, int bytes)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

/* Waits until at most S - 2 commit groups of this thread are pending (S 2..16; the kernel passes its
 * ring depth + 1, so S - 3 of its chunks stay pending). */
__device__ __forceinline__ void w4_wait(int S)
{
	switch (S) {
	case 2: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
	case 3: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
	case 4: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
	case 5: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
	case 6: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
	case 7: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
	case 8: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
	case 9: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
	case 10: asm volatile("cp.async.wait_group 8;\n" ::: "memory"); break;
	case 11: asm volatile("cp.async.wait_group 9;\n" ::: "memory"); break;
	case 12: asm volatile("cp.async.wait_group 10;\n" ::: "memory"); break;
	case 13: asm volatile("cp.async.wait_group 11;\n" ::: "memory"); break;
	case 14: asm volatile("cp.async.wait_group 12;\n" ::: "memory"); break;
	case 15: asm volatile("cp.async.wait_group 13;\n" ::: "memory"); break;
	default: asm volatile("cp.async.wait_group 14;\n" ::: "memory"); break;
	}
}

/* Bytes of one stage and of the whole dynamic shared memory of a variant. */
__host__ __device__ constexpr int w4_stage_bytes(int rows_n, int rows_m)
{
	return rows_n * W4_CP + rows_n * 8 + rows_m * W4_XP * 2;
}

/* The CTA's decode table (threads tid of nth fill it): for each scale byte i, the 8 E2M1
 * magnitudes times e4m3(i) as bf16, low bytes in .x/.y and high bytes in .z/.w. */
static __device__ __forceinline__ void w4_table(uint4 *tab, int tid, int nth)
{
	for (int i = tid; i < 256; i += nth) {
		const float sf = fos_e4m3_to_f32((uint32_t)i);
		uint32_t lo[2] = {0, 0}, hi[2] = {0, 0};
#pragma unroll
		for (int c = 0; c < 8; c++) {
			const uint32_t b = fos_f32_to_bf16(FOS_MUL(fos_e2m1_value((uint32_t)c), sf));
			lo[c >> 2] |= (b & 0xFFu) << (8 * (c & 3));
			hi[c >> 2] |= (b >> 8) << (8 * (c & 3));
		}
		tab[i] = make_uint4(lo[0], lo[1], hi[0], hi[1]);
	}
}

/* The 4 W elements k = 2t, 2t + 1, 8 + 2t, 9 + 2t of one k16 block as the mma's b0, b1: v holds
 * their codes in nibbles 0..3, tb the scale's table entry (LO bytes of the 8 magnitudes' bf16 in
 * .x/.y, HI bytes in .z/.w). */
__device__ __forceinline__ void w4_decode(uint32_t v, uint4 tb, uint32_t &b0, uint32_t &b1)
{
	const uint32_t sel = v & 0x7777u;
	const uint32_t lo = w4_prmt(tb.x, tb.y, sel);
	uint32_t hi = w4_prmt(tb.z, tb.w, sel);
	/* byte i of sg: 0xFF where element i's code is negative (bit 4i + 3 of v) */
	const uint32_t sg = w4_prmt(v << 4, v, 0xD9C8u);
	hi ^= sg & 0x80808080u;
	b0 = w4_prmt(lo, hi, 0x5140u);
	b1 = w4_prmt(lo, hi, 0x7362u);
}

template <int MT, int NT, int WN, int WM>
static __global__ void __launch_bounds__(32 * WN * WM, 1) k_w4(const w4_args A)
{
	constexpr int NTH = 32 * WN * WM, RN = 8 * NT * WN, RM = 16 * MT * WM;
	constexpr int SB = w4_stage_bytes(RN, RM);
	constexpr int PC = (RN * 4 + NTH - 1) / NTH, PS = (RN + NTH - 1) / NTH, PX = (RM * 16 + NTH - 1) / NTH;
	extern __shared__ __align__(16) uint8_t w4_smem[];
	uint4 *tab = reinterpret_cast<uint4 *>(w4_smem); /* 256 entries */
	uint8_t *ring = w4_smem + 256 * 16;
	const int S = A.stages;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int wn = warp % WN, wm = warp / WN;
	const int64_t n0 = (int64_t)blockIdx.x * RN;
	const int m0 = blockIdx.y * RM;
	const int k = A.k, nch = k / W4_KC;
	const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

	/* this thread's copies of a chunk: sources at chunk 0 (advanced by the chunk's bytes), shared
	 * offsets in a stage, and sizes (0: zero-filled, past N or M, or no piece) */
	const uint8_t *csrc[PC], *ssrc[PS];
	const uint16_t *xsrc[PX];
	uint32_t cdst[PC], sdst[PS], xdst[PX];
	int con[PC], son[PS], xon[PX];
#pragma unroll
	for (int i = 0; i < PC; i++) {
		const int p = tid + i * NTH, r = p >> 2, q = p & 3;
		con[i] = p < RN * 4 && n0 + r < A.n ? 16 : 0;
		csrc[i] = A.codes + (con[i] ? (n0 + r) * (k / 2) + 16 * q : 0);
		cdst[i] = (uint32_t)(r * W4_CP + 16 * q);
	}
#pragma unroll
	for (int i = 0; i < PS; i++) {
		const int p = tid + i * NTH;
		son[i] = p < RN && n0 + p < A.n ? 8 : 0;
		ssrc[i] = A.scales + (son[i] ? (n0 + p) * (k / 16) : 0);
		sdst[i] = (uint32_t)(RN * W4_CP + 8 * p);
	}
#pragma unroll
	for (int i = 0; i < PX; i++) {
		const int p = tid + i * NTH, r = p >> 4, q = p & 15;
		xon[i] = p < RM * 16 && m0 + r < A.m ? 16 : 0;
		xsrc[i] = A.x + (xon[i] ? (int64_t)(m0 + r) * k + 8 * q : 0);
		xdst[i] = (uint32_t)(RN * (W4_CP + 8) + r * (W4_XP * 2) + 16 * q);
	}
	auto issue_w = [&](int c, int b) {
		const uint32_t base = ring_s + (uint32_t)(b * SB);
#pragma unroll
		for (int i = 0; i < PC; i++)
			if (tid + i * NTH < RN * 4)
				w4_cp16(base + cdst[i], csrc[i] + (size_t)c * (size_t)(con[i] ? W4_KC / 2 : 0), con[i]);
#pragma unroll
		for (int i = 0; i < PS; i++)
			if (tid + i * NTH < RN)
				w4_cp8(base + sdst[i], ssrc[i] + (size_t)c * (size_t)(son[i] ? W4_KC / 16 : 0), son[i]);
	};
	auto issue_x = [&](int c, int b) {
		const uint32_t base = ring_s + (uint32_t)(b * SB);
#pragma unroll
		for (int i = 0; i < PX; i++)
			if (tid + i * NTH < RM * 16)
				w4_cp16(base + xdst[i], xsrc[i] + (size_t)c * (size_t)(xon[i] ? W4_KC : 0), xon[i]);
	};
	auto issue = [&](int c, int b) {
		issue_w(c, b);
		issue_x(c, b);
	};

	/* the ring: chunk c in buffer c % S; S - 2 chunks in flight, so that chunk c - 1's buffer still
	 * holds its x while chunk c is decoded (its mma steps run then) */
	for (int s = 0; s < S - 2; s++) {
		if (s < nch)
			issue(s, s);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
	}
	w4_table(tab, tid, NTH);

	float acc[MT][NT][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				acc[i][j][r] = 0.0f;
	const uint32_t selt = (uint32_t)t | ((uint32_t)(t + 4) << 4);
	const int wrow = wn * 8 * NT + g;		    /* this lane's W row in the stage, tile j: + 8 j */
	const int xrow = wm * 16 * MT + (lane & 15);	    /* this lane's ldmatrix row, tile i: + 16 i */
	const uint32_t xoff = (uint32_t)(RN * (W4_CP + 8)) + (uint32_t)xrow * (W4_XP * 2) + (uint32_t)(lane >> 4) * 16;

	uint32_t bo[NT][W4_KC / 16][2]; /* the previous chunk's decoded W fragments */
	/* the 8 mma steps of chunk cm (x from its buffer bm, W from bo), in k order */
	auto steps = [&](int bm) {
		const uint32_t xs = ring_s + (uint32_t)(bm * SB) + xoff;
#pragma unroll
		for (int s = 0; s < W4_KC / 16; s++)
#pragma unroll
			for (int i = 0; i < MT; i++) {
				uint32_t a[4];
				w4_ldsm4(a, xs + (uint32_t)(i * 16 * W4_XP * 2 + s * 32));
#pragma unroll
				for (int j = 0; j < NT; j++)
					w4_mma(acc[i][j], a, bo[j][s][0], bo[j][s][1]);
			}
	};

	/* chunk c's W fragments (buffer b) into d */
	auto decode = [&](int b, uint32_t (*d)[W4_KC / 16][2]) {
		const uint8_t *st = ring + b * SB;
#pragma unroll
		for (int j = 0; j < NT; j++) {
			const uint8_t *row = st + (wrow + 8 * j) * W4_CP;
			uint4 cw[4];
#pragma unroll
			for (int q = 0; q < 4; q++)
				cw[q] = reinterpret_cast<const uint4 *>(row)[q];
			const uint2 sc = *reinterpret_cast<const uint2 *>(st + RN * W4_CP + 8 * (wrow + 8 * j));
#pragma unroll
			for (int s = 0; s < W4_KC / 16; s++) {
				const uint32_t w0 = (s & 1) ? cw[s >> 1].z : cw[s >> 1].x;
				const uint32_t w1 = (s & 1) ? cw[s >> 1].w : cw[s >> 1].y;
				const uint32_t v = w4_prmt(w0, w1, selt);
				const uint32_t sf = ((s < 4 ? sc.x : sc.y) >> (8 * (s & 3))) & 0xFFu;
				w4_decode(v, tab[sf], d[j][s][0], d[j][s][1]);
			}
		}
	};

	/* chunk 0, then each chunk c decoded beside chunk c - 1's mma steps: one straight block, so the
	 * decode fills the waits of the mma chain */
	if (nch > 0) {
		w4_wait(S - 1); /* at most S - 3 pending: chunk 0 landed (this thread's copies) */
		__syncthreads();
		if (S - 2 < nch)
			issue(S - 2, S - 2);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
		decode(0, bo);
	}
	for (int c = 1, b = 1 % S; c < nch; c++) {
		w4_wait(S - 1); /* at most S - 3 pending: chunk c landed (this thread's copies) */
		__syncthreads(); /* chunk c landed for every thread; chunk c - 2's buffer is free */
		if (c + S - 2 < nch)
			issue(c + S - 2, b >= 2 ? b - 2 : b + S - 2);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
		uint32_t bn[NT][W4_KC / 16][2];
		decode(b, bn);
		steps(b == 0 ? S - 1 : b - 1);
#pragma unroll
		for (int j = 0; j < NT; j++)
#pragma unroll
			for (int s = 0; s < W4_KC / 16; s++) {
				bo[j][s][0] = bn[j][s][0];
				bo[j][s][1] = bn[j][s][1];
			}
		b = b + 1 == S ? 0 : b + 1;
	}
	if (nch > 0)
		steps((nch - 1) % S);
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");

	const float ga = A.a_amax ? FOS_MUL(A.a_amax[0], A.a_dinv) : A.a_dinv;
	const float gb = A.b_amax ? FOS_MUL(A.b_amax[0], A.b_dinv) : A.b_dinv;
	const float alpha = FOS_MUL(ga, gb);
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int row = m0 + wm * 16 * MT + 16 * i + g + 8 * h;
			if (row >= A.m)
				continue;
			const float rs = A.row_scale ? A.row_scale[row] : 0.0f;
#pragma unroll
			for (int j = 0; j < NT; j++) {
				const int64_t col = n0 + wn * 8 * NT + 8 * j + 2 * t;
				if (col >= A.n)
					continue;
				uint32_t bb = 0;
				if (A.bias)
					bb = *reinterpret_cast<const uint32_t *>(A.bias + col);
				const uint16_t y0 = fcu_epi1(acc[i][j][2 * h], alpha, rs, A.row_scale != 0, (uint16_t)bb,
							     A.bias != 0);
				const uint16_t y1 = fcu_epi1(acc[i][j][2 * h + 1], alpha, rs, A.row_scale != 0,
							     (uint16_t)(bb >> 16), A.bias != 0);
				*reinterpret_cast<uint32_t *>(A.y + (int64_t)row * A.n + col) = y0 | ((uint32_t)y1 << 16);
			}
		}
}

/* The epilogue of the forms with one n8 tile per warp (k_w4s, k_w4p, k_w4r), as k_w4's: this lane's
 * columns col, col + 1 of the rows m0 + 16 i + g + 8 h below M, through fcu_epi1 with alpha, the
 * product of the two global scales, the row scale and the bias. */
template <int MT>
static __device__ __forceinline__ void w4_store1(const w4_args &A, const float (&acc)[MT][4], int m0, int g, int64_t col)
{
	const float ga = A.a_amax ? FOS_MUL(A.a_amax[0], A.a_dinv) : A.a_dinv;
	const float gb = A.b_amax ? FOS_MUL(A.b_amax[0], A.b_dinv) : A.b_dinv;
	const float alpha = FOS_MUL(ga, gb);
	if (col >= A.n)
		return;
	uint32_t bb = 0;
	if (A.bias)
		bb = *reinterpret_cast<const uint32_t *>(A.bias + col);
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int row = m0 + 16 * i + g + 8 * h;
			if (row >= A.m)
				continue;
			const float rs = A.row_scale ? A.row_scale[row] : 0.0f;
			const uint16_t y0 = fcu_epi1(acc[i][2 * h], alpha, rs, A.row_scale != 0, (uint16_t)bb, A.bias != 0);
			const uint16_t y1 =
				fcu_epi1(acc[i][2 * h + 1], alpha, rs, A.row_scale != 0, (uint16_t)(bb >> 16), A.bias != 0);
			*reinterpret_cast<uint32_t *>(A.y + (int64_t)row * A.n + col) = y0 | ((uint32_t)y1 << 16);
		}
}

/* The shared-memory decode form (variants with sdec): NTH = 512 or 256 threads (16 or 8 warps) per CTA,
 * RN = 32 W rows (4 n8 tiles), RM = 16 MT x rows. Every thread decodes 512 / NTH pieces of 8
 * consecutive k of one W row per chunk (one code word, one scale byte, one table entry, two
 * w4_decode, one 16-byte store each) into a double-buffered bf16 tile
 * [row][k] in shared memory; warps 0..3 (one per scheduler) each own one n8 tile and run its chain:
 * per 2 k16 steps one ldmatrix.x4 of W (b0, b1 of both steps) and per step and m16 tile one
 * ldmatrix.x4 of x, then the mma. So the owner's instruction stream holds little besides the chain,
 * and the other warps hide the decode's latencies. Same chain per output as k_w4: same bits. Measured
 * slower than k_w4 at every shape (BENCHMARKS.md session 9: the per-chunk barrier serialises the
 * decode's shared-memory round trips with the chain); kept as variants for that comparison, never
 * picked by w4_pick: only the benchmarks' variant sweep instantiates it
 * (tests/support_smallm_variants.cu). */
#define W4S_RN 32
template <int MT, int NTH>
static __global__ void __launch_bounds__(NTH) k_w4s(const w4_args A)
{
	constexpr int RN = W4S_RN, RM = 16 * MT, PD = RN * 16 / NTH;
	constexpr int SB = w4_stage_bytes(RN, RM), DB = RN * W4_XP * 2; /* decoded tile bytes */
	constexpr int PX = (RM * 16 + NTH - 1) / NTH;
	extern __shared__ __align__(16) uint8_t w4_smem[];
	uint4 *tab = reinterpret_cast<uint4 *>(w4_smem); /* 256 entries */
	uint8_t *dtile = w4_smem + 256 * 16;		 /* 2 decoded tiles */
	uint8_t *ring = dtile + 2 * DB;
	const int S = A.stages;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int64_t n0 = (int64_t)blockIdx.x * RN;
	const int m0 = blockIdx.y * RM;
	const int k = A.k, nch = k / W4_KC;
	const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);
	const uint32_t dt_s = (uint32_t)__cvta_generic_to_shared(dtile);

	/* copies: thread tid < 128 one 16-byte code piece, tid < 32 one row's 8 scale bytes, and x */
	const int cr = tid >> 2, cq = tid & 3;
	const int con = tid < RN * 4 && n0 + cr < A.n ? 16 : 0;
	const uint8_t *csrc = A.codes + (con ? (n0 + cr) * (k / 2) + 16 * cq : 0);
	const uint32_t cdst = (uint32_t)(cr * W4_CP + 16 * cq);
	const int son = tid < RN && n0 + tid < A.n ? 8 : 0;
	const uint8_t *ssrc = A.scales + (son ? (n0 + tid) * (k / 16) : 0);
	const uint32_t sdst = (uint32_t)(RN * W4_CP + 8 * tid);
	const uint16_t *xsrc[PX];
	uint32_t xdst[PX];
	int xon[PX];
#pragma unroll
	for (int i = 0; i < PX; i++) {
		const int p = tid + i * NTH, r = p >> 4, q = p & 15;
		xon[i] = p < RM * 16 && m0 + r < A.m ? 16 : 0;
		xsrc[i] = A.x + (xon[i] ? (int64_t)(m0 + r) * k + 8 * q : 0);
		xdst[i] = (uint32_t)(RN * (W4_CP + 8) + r * (W4_XP * 2) + 16 * q);
	}
	auto issue = [&](int c, int b) {
		const uint32_t base = ring_s + (uint32_t)(b * SB);
		if (tid < RN * 4)
			w4_cp16(base + cdst, csrc + (size_t)c * (size_t)(con ? W4_KC / 2 : 0), con);
		if (tid < RN)
			w4_cp8(base + sdst, ssrc + (size_t)c * (size_t)(son ? W4_KC / 16 : 0), son);
#pragma unroll
		for (int i = 0; i < PX; i++)
			if (tid + i * NTH < RM * 16)
				w4_cp16(base + xdst[i], xsrc[i] + (size_t)c * (size_t)(xon[i] ? W4_KC : 0), xon[i]);
	};
	for (int s = 0; s < S - 2; s++) {
		if (s < nch)
			issue(s, s);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
	}
	w4_table(tab, tid, NTH);

	/* this thread's decode pieces p = tid + i NTH: W row p / 16, k 8 (p % 16) .. + 7 of the chunk */
	auto decode = [&](int b, int db) {
		const uint8_t *st = ring + b * SB;
#pragma unroll
		for (int i = 0; i < PD; i++) {
			const int p = tid + i * NTH, dr = p >> 4, dq = p & 15;
			const uint32_t v = *reinterpret_cast<const uint32_t *>(st + dr * W4_CP + 4 * dq);
			const uint32_t sf = st[RN * W4_CP + 8 * dr + (dq >> 1)];
			const uint4 tb = tab[sf];
			uint32_t o0, o1, o2, o3;
			w4_decode(v, tb, o0, o1);
			w4_decode(v >> 16, tb, o2, o3);
			*reinterpret_cast<uint4 *>(dtile + db * DB + dr * (W4_XP * 2) + 16 * dq) = make_uint4(o0, o1, o2, o3);
		}
	};

	const bool owner = warp < 4;
	float acc[MT][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			acc[i][r] = 0.0f;
	const uint32_t xoff = (uint32_t)(RN * (W4_CP + 8)) + (uint32_t)(lane & 15) * (W4_XP * 2) + (uint32_t)(lane >> 4) * 16;
	const uint32_t woff = (uint32_t)(warp * 8 + (lane & 7)) * (W4_XP * 2) + (uint32_t)(lane >> 3) * 16;
	/* the owner's 8 mma steps of a chunk: x from ring buffer bm, W from decoded tile db */
	auto steps = [&](int bm, int db) {
		const uint32_t xs = ring_s + (uint32_t)(bm * SB) + xoff, ws = dt_s + (uint32_t)(db * DB) + woff;
#pragma unroll
		for (int s = 0; s < W4_KC / 16; s += 2) {
			uint32_t bw[4];
			w4_ldsm4(bw, ws + (uint32_t)(s * 32));
#pragma unroll
			for (int h = 0; h < 2; h++)
#pragma unroll
				for (int i = 0; i < MT; i++) {
					uint32_t a[4];
					w4_ldsm4(a, xs + (uint32_t)(i * 16 * W4_XP * 2 + (s + h) * 32));
					w4_mma(acc[i], a, bw[2 * h], bw[2 * h + 1]);
				}
		}
	};

	/* iteration c: chunk c decoded into tile c % 2 while the owners run chunk c - 1's steps (x of
	 * chunk c - 1 still in its ring buffer, W in tile (c - 1) % 2); the barrier at each iteration's
	 * start orders the previous iteration's decode before these reads and its reads before the
	 * overwrites */
	for (int c = 0, b = 0; c < nch; c++) {
		w4_wait(S - 1); /* at most S - 3 pending: chunk c landed (this thread's copies) */
		__syncthreads();
		if (c + S - 2 < nch)
			issue(c + S - 2, b >= 2 ? b - 2 : b + S - 2);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
		decode(b, c & 1);
		if (owner && c > 0)
			steps(b == 0 ? S - 1 : b - 1, (c - 1) & 1);
		b = b + 1 == S ? 0 : b + 1;
	}
	__syncthreads();
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
	if (!owner)
		return;
	if (nch > 0)
		steps((nch - 1) % S, (nch - 1) & 1);

	w4_store1<MT>(A, acc, m0, g, n0 + warp * 8 + 2 * t);
}

#include "cuda_smallm_ws.cuh"
#include "cuda_smallm_rp.cuh"

/* ---- variants and the launcher ---------------------------------------------------------------- */

typedef void (*w4_kern)(const w4_args);

/* One variant: its kernel and tile shape (name "MT. NT. WN. WM." or "SDEC MT. T."). */
struct w4_variant {
	w4_kern fn;
	int mt, nt, wn, wm;
	const char *name;
	int sdec; /* k_w4s's threads (W decoded into shared memory by all warps; nt 1, wn 4, wm 1), else 0 */
	int wsp;  /* k_w4p's producer warps (warp-specialised, cuda_smallm_ws.cuh; nt 1, wn 4, wm 1), else 0 */
	int probe; /* 1: a timing probe with wrong bits (bench only, never tested for bits) */
	int rp;	   /* k_w4r's ring depth (warp-private rings, register pipeline, cuda_smallm_rp.cuh), else 0 */
};

/* The table entry of k_w4<MT, NT, WN, WM> and of k_w4s<MT, T> (in the including unit). */
#define W4_TILE(MT, NT, WN, WM) \
	{k_w4<MT, NT, WN, WM>, MT, NT, WN, WM, "MT" #MT " NT" #NT " WN" #WN " WM" #WM, 0, 0, 0, 0}
#define W4_SDEC(MT, T) {k_w4s<MT, T>, MT, 1, 4, 1, "SDEC MT" #MT " T" #T, T, 0, 0, 0}
#define W4_WSP(MT, NP) {k_w4p<MT, NP, 0>, MT, 1, 4, 1, "WSP MT" #MT " P" #NP, 0, NP, 0, 0}
#define W4_WSP_NODEC(MT, NP) {k_w4p<MT, NP, 1>, MT, 1, 4, 1, "PROBE WSP MT" #MT " P" #NP " no decode", 0, NP, 1, 0}
#define W4_RP(MT, S) {k_w4r<MT, S>, MT, 1, 4, 1, "RP MT" #MT " S" #S, 0, 0, 0, S}

/* The shapes the kernel runs. */
static inline int w4_runs(int64_t m, int64_t n, int64_t k)
{
	return m >= 1 && m <= W4_MAXM && n >= 8 && n % 8 == 0 && k >= W4_KC && k % W4_KC == 0 && n * k < ((int64_t)1 << 40) &&
	       n < ((int64_t)1 << 30) && k < ((int64_t)1 << 30);
}

/* be->gemm_w4 with variant v and a ring of stages (4..W4_MAXS; 0: as many as let every CTA of the
 * grid be resident at once, at least 4, at most W4_MAXS at M <= 32 and 8 above). */
static inline int w4_launch(fos_backend *be, const struct w4_variant *v, int stages, const uint16_t *a,
			    const fos_qtensor *w, int64_t m, const fos_gemm_epi *epi, uint16_t *y, fos_err *err)
{
	const int64_t n = w->rows, k = w->cols;
	if (!w4_runs(m, n, k))
		return fos_seterr(err, FOS_EINVAL,
				  "gemm_w4 takes 1 <= M <= %d, K a multiple of %d, N a multiple of 8 (M=%lld N=%lld K=%lld)",
				  W4_MAXM, W4_KC, (long long)m, (long long)n, (long long)k);
	if ((uintptr_t)a % 16 || (uintptr_t)w->codes % 16 || (uintptr_t)w->scales % 8 || (uintptr_t)y % 4 ||
	    (epi && epi->bias && (uintptr_t)epi->bias % 4))
		return fos_seterr(err, FOS_EINVAL,
				  "gemm_w4 operands misaligned (x and codes need 16 bytes, scales 8, y and bias 4)");
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	fos_gemm_epi plain = fos_gemm_epi_plain();
	if (!epi)
		epi = &plain;
	struct fcu_impl *im = fcu(be);
	const int rn = 8 * v->nt * v->wn, rm = 16 * v->mt * v->wm;
	const int nth = v->sdec ? v->sdec : v->wsp ? 32 * (4 + v->wsp) : 32 * v->wn * v->wm;
	const int sb = w4_stage_bytes(rn, rm);
	const int fixed = 256 * 16 + (v->sdec ? 2 * rn * W4_XP * 2 : 0) + (v->wsp ? 128 + W4P_D * w4p_dstage_bytes(rm) : 0);
	const unsigned gx = (unsigned)((n + rn - 1) / rn), gy = (unsigned)((m + rm - 1) / rm);
	/* stages: up to W4_MAXS, as many as let every CTA of the grid be resident at once (at least 4):
	 * the chunks in flight (S - 2) are what hides the HBM latency */
	const int64_t ctas = (int64_t)gx * gy, per_sm = (ctas + im->sms - 1) / im->sms;
	const int64_t budget = (int64_t)220 * 1024 / (per_sm < 1 ? 1 : per_sm) - fixed - 1024;
	int S = (int)(budget / sb);
	const int maxs = m <= 32 ? W4_MAXS : 8; /* deeper rings were slower at M >= 64 (session 9, run 2) */
	S = S > maxs ? maxs : S < 4 ? 4 : S;
	if (stages)
		S = stages;
	int smem = fixed + S * sb;
	if (v->rp) { /* its own layout: 4 warp-private rings of v->rp stages, x rows below M only */
		S = v->rp;
		smem = 256 * 16 + W4R_ZB + 16 + 4 * S * w4r_stage_bytes(m < rm ? (int)m : rm);
	}
	rc = fcu_check(cudaFuncSetAttribute((const void *)v->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err,
		       "cudaFuncSetAttribute (gemm_w4 shared memory)");
	if (rc)
		return rc;
	w4_args A;
	A.x = a;
	A.codes = w->codes;
	A.scales = w->scales;
	A.m = (int)m;
	A.n = (int)n;
	A.k = (int)k;
	A.stages = S;
	A.a_amax = epi->a_amax;
	A.b_amax = epi->b_amax;
	A.row_scale = epi->row_scale;
	A.a_dinv = epi->a_dinv;
	A.b_dinv = epi->b_dinv;
	A.bias = epi->bias;
	A.y = y;
	v->fn<<<dim3(gx, gy), nth, smem, im->st>>>(A);
	return fcu_launched(err, "gemm_w4 kernel launch");
}

#endif
