/* cuda_smallm_rp.cuh: the small-M GEMM with warp-private rings and a three-stage register pipeline
 * (k_w4r, variants "RP"), included by cuda_smallm_kern.cuh after its helpers.
 *
 * Why: ncu of k_w4 (BENCHMARKS.md session 10) shows each chunk's decode waiting on a chain of
 * shared-memory loads (scale byte -> table entry -> permutes) that starts after the CTA barrier, so
 * ptxas issues the chunk's 8 dependent HMMA first with NOPs between them and the decode after them;
 * the runtime ring depth's wait_group switch, the barrier and the copy arithmetic add about 35
 * instructions per chunk.
 * Here each of the 4 warps of a CTA owns one n8 tile (8 W rows) and its own cp.async ring of S
 * stages (compile-time: one wait_group, no switch), so __syncwarp replaces the CTA barrier, and in
 * iteration c a warp loads chunk c + 1's code words and table entries into registers, decodes chunk
 * c from the registers loaded in iteration c - 1, and runs chunk c - 1's 8 mma steps: the three are
 * independent, in one basic block, and the decode fills the chain's waits.
 *
 * Stage layout (per warp, SB bytes, 16-aligned): codes 8 rows x W4_CP, scales 8 x 8, then the x rows
 * of this CTA below M (mlive <= 16 MT), W4_XP bf16 each. ldmatrix lanes of x rows >= M read a
 * 272-byte zero area instead (written once), so x rows past M are neither copied nor stored.
 * Invariants: the same chain per output as k_w4 (mma.sync.m16n8k16 per k16 step in k order from +0,
 * each k in its own slot, w4_decode's bytes, the same epilogue): the same bits at every M. */
#ifndef FOS_CUDA_SMALLM_RP_CUH
#define FOS_CUDA_SMALLM_RP_CUH

#include <type_traits>

#define W4R_ZB 272 /* zero area bytes: 8 k16 steps x 32 + 16 */

/* bytes of one warp's stage for mlive x rows */
__host__ __device__ constexpr int w4r_stage_bytes(int mlive)
{
	return 8 * W4_CP + 64 + mlive * W4_XP * 2;
}

template <int S>
__device__ __forceinline__ void w4r_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 4) : "memory");
}

template <int MT, int S>
static __global__ void __launch_bounds__(128, 1) k_w4r(const w4_args A)
{
	constexpr int RM = 16 * MT, PX = RM * 16 / 32;
	extern __shared__ __align__(16) uint8_t w4_smem[];
	uint4 *tab = reinterpret_cast<uint4 *>(w4_smem); /* 256 entries */
	uint8_t *zero = w4_smem + 256 * 16;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int64_t n0 = (int64_t)blockIdx.x * 32 + 8 * warp; /* this warp's first W row */
	const int m0 = blockIdx.y * RM;
	const int k = A.k, nch = k / W4_KC;
	const int mlive = A.m - m0 < RM ? A.m - m0 : RM;
	const int SB = w4r_stage_bytes(mlive);
	uint8_t *ring = zero + W4R_ZB + 16 + warp * S * SB; /* 16: keeps the rings 16-aligned after 272 */
	const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

	/* this lane's copies: one 16-byte code piece (row g, quarter t), lanes 0..7 one row's 8 scale
	 * bytes, x pieces p = lane + 32 i below mlive rows */
	const int con = n0 + g < A.n ? 16 : 0;
	const uint8_t *csrc = A.codes + (con ? (n0 + g) * (k / 2) + 16 * t : 0);
	const uint32_t cdst = (uint32_t)(g * W4_CP + 16 * t);
	const int son = lane < 8 && n0 + lane < A.n ? 8 : 0;
	const uint8_t *ssrc = A.scales + (son ? (n0 + lane) * (k / 16) : 0);
	const uint32_t sdst = (uint32_t)(8 * W4_CP + 8 * lane);
	const int xr0 = lane >> 4, npx = (mlive * 16 + 31) / 32;
	const uint16_t *xsrc = A.x + (int64_t)(m0 + (xr0 < mlive ? xr0 : 0)) * k + 8 * (lane & 15);
	const uint32_t xdst = (uint32_t)(8 * W4_CP + 64 + xr0 * (W4_XP * 2) + 16 * (lane & 15));
	auto issue = [&](int c, int b) {
		const uint32_t base = ring_s + (uint32_t)(b * SB);
		w4_cp16(base + cdst, csrc + (size_t)c * (size_t)(con ? W4_KC / 2 : 0), con);
		if (lane < 8)
			w4_cp8(base + sdst, ssrc + (size_t)c * (size_t)(son ? W4_KC / 16 : 0), son);
		/* x piece i of this lane: row xr0 + 2 i, 16 bytes q; pieces past the live rows are skipped
		 * by a uniform branch, so M = 1 pays for one */
		const uint16_t *xs = xsrc + (size_t)c * W4_KC;
		const uint32_t xd = base + xdst;
#pragma unroll
		for (int i = 0; i < PX; i++) {
			if (i >= npx)
				break;
			if (xr0 + 2 * i < mlive)
				w4_cp16(xd + (uint32_t)(i * 2 * W4_XP * 2), xs + (size_t)i * 2 * (size_t)k, 16);
		}
	};
	for (int s = 0; s < S - 2; s++) {
		if (s < nch)
			issue(s, s);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
	}
	w4_table(tab, tid, 128);
	for (int i = tid; i < W4R_ZB / 16; i += 128)
		reinterpret_cast<uint4 *>(zero)[i] = make_uint4(0, 0, 0, 0);
	__syncthreads();

	/* ldmatrix addresses of x (tile i) in buffer 0: live rows in the ring, others in the zero area */
	uint32_t xl[MT];
	bool xlive[MT];
#pragma unroll
	for (int i = 0; i < MT; i++) {
		const int r = 16 * i + (lane & 15);
		xlive[i] = r < mlive;
		xl[i] = xlive[i] ? ring_s + (uint32_t)(8 * W4_CP + 64 + r * (W4_XP * 2) + (lane >> 4) * 16)
				 : (uint32_t)__cvta_generic_to_shared(zero) + (uint32_t)((lane >> 4) * 16);
	}
	const uint32_t selt = (uint32_t)t | ((uint32_t)(t + 4) << 4);

	uint4 cw[2][4];	  /* raw code words of chunks c, c + 1 (by parity) */
	uint4 tb[2][8];	  /* their table entries, one per k16 step */
	uint32_t bd[2][8][2]; /* decoded fragments of chunks c - 1, c (by parity) */
	float acc[MT][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			acc[i][r] = 0.0f;

	auto load = [&](int b, auto P) {
		constexpr int p = decltype(P)::value;
		const uint8_t *row = ring + b * SB + g * W4_CP;
#pragma unroll
		for (int q = 0; q < 4; q++)
			cw[p][q] = reinterpret_cast<const uint4 *>(row)[q];
		const uint2 sc = *reinterpret_cast<const uint2 *>(ring + b * SB + 8 * W4_CP + 8 * g);
#pragma unroll
		for (int s = 0; s < 8; s++) {
			const uint32_t sf = ((s < 4 ? sc.x : sc.y) >> (8 * (s & 3))) & 0xFFu;
			tb[p][s] = tab[sf];
		}
	};
	auto decode = [&](auto P) {
		constexpr int p = decltype(P)::value;
#pragma unroll
		for (int s = 0; s < 8; s++) {
			const uint32_t w0 = (s & 1) ? cw[p][s >> 1].z : cw[p][s >> 1].x;
			const uint32_t w1 = (s & 1) ? cw[p][s >> 1].w : cw[p][s >> 1].y;
			w4_decode(w4_prmt(w0, w1, selt), tb[p][s], bd[p][s][0], bd[p][s][1]);
		}
	};
	auto steps = [&](int bm, auto P) {
		constexpr int p = decltype(P)::value;
		uint32_t xs[MT];
#pragma unroll
		for (int i = 0; i < MT; i++)
			xs[i] = xlive[i] ? xl[i] + (uint32_t)(bm * SB) : xl[i];
#pragma unroll
		for (int s = 0; s < 8; s++)
#pragma unroll
			for (int i = 0; i < MT; i++) {
				uint32_t a[4];
				w4_ldsm4(a, xs[i] + (uint32_t)(s * 32));
				w4_mma(acc[i], a, bd[p][s][0], bd[p][s][1]);
			}
	};
	constexpr std::integral_constant<int, 0> I0{};
	constexpr std::integral_constant<int, 1> I1{};

	/* chunk 0: landed, into registers; iteration 0 decodes it (no mma yet) */
	asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 3) : "memory");
	__syncwarp();
	load(0, I0);
	int bl = 1 % S, bm = 0, bi = S - 2; /* buffers of chunk c + 1 (load), c - 1 (mma), c + S - 2 (issue) */
	if (nch > 1) {
		w4r_wait<S>(); /* chunk 1 landed */
		__syncwarp();
	}
	if (S - 2 < nch)
		issue(S - 2, bi);
	asm volatile("cp.async.commit_group;\n" ::: "memory");
	load(bl, I1);
	decode(I0);
	bl = bl + 1 == S ? 0 : bl + 1;
	bi = bi + 1 == S ? 0 : bi + 1;
	/* iteration c (1 <= c < nch): chunk c + 1 into registers, chunk c decoded, chunk c - 1's steps */
	auto body = [&](int c, auto P) {
		constexpr int p = decltype(P)::value; /* c & 1 */
		if (c + 1 < nch) {
			w4r_wait<S>(); /* chunk c + 1 landed; chunk c - 2's buffer is free */
			__syncwarp();
		}
		if (c + S - 2 < nch)
			issue(c + S - 2, bi);
		asm volatile("cp.async.commit_group;\n" ::: "memory");
		load(bl, std::integral_constant<int, 1 - p>());
		decode(P);
		steps(bm, std::integral_constant<int, 1 - p>());
		bl = bl + 1 == S ? 0 : bl + 1;
		bi = bi + 1 == S ? 0 : bi + 1;
		bm = bm + 1 == S ? 0 : bm + 1;
	};
	int c = 1;
	for (; c + 1 < nch; c += 2) {
		body(c, I1);
		body(c + 1, I0);
	}
	if (c < nch) {
		body(c, I1);
		c++;
	}
	/* chunk nch - 1's steps */
	if ((nch - 1) & 1)
		steps(bm, I1);
	else
		steps(bm, I0);
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");

	w4_store1<MT>(A, acc, m0, g, n0 + 2 * t);
}

#endif
