/* cuda_smallm_ws.cuh: the warp-specialised form of the small-M GEMM (k_w4p, variants "WSP"),
 * included by cuda_smallm_kern.cuh after its helpers (w4_args, w4_decode, w4_table, the copies).
 *
 * A CTA owns RN = 32 W rows (4 consumer warps, one n8 tile each) and RM = 16 MT x rows; NP producer
 * warps stream W's codes, scales and x through an S-stage cp.async ring (theirs alone, ordered by a
 * named barrier among them), decode W into a D-stage ring of bf16 tiles [row][k] in shared memory
 * (with a copy of x's live rows) and hand each stage over through mbarriers: full[d] (the producers
 * wrote chunk c, d = c % D) and empty[d] (the consumers are done reading it). A consumer warp only
 * waits for full, loads its fragments by ldmatrix and runs its chain: no CTA-wide barrier per chunk,
 * so the decode of later chunks overlaps the chain instead of alternating with it (k_w4s, which
 * does the same with one __syncthreads per chunk, measured slower than k_w4: BENCHMARKS.md session 9).
 *
 * Invariants: the same chain per output as k_w4 (one mma.sync.m16n8k16 per k16 step in k order from
 * +0, each k in its own slot; the same decode bytes, w4_decode; the same epilogue): the same bits.
 * PROBE != 0 (bench only, wrong bits): 1 = the producers skip the decode (the W tile keeps what it
 * held), measuring the copies and the chain without the decode. x rows >= M of every decoded stage
 * are zeroed once, before the first barrier, and never written again. */
#ifndef FOS_CUDA_SMALLM_WS_CUH
#define FOS_CUDA_SMALLM_WS_CUH

#define W4P_RN 32 /* W rows per CTA */
#define W4P_D 4	  /* decoded stages */

__host__ __device__ constexpr int w4p_dstage_bytes(int rows_m)
{
	return (W4P_RN + rows_m) * W4_XP * 2;
}

__device__ __forceinline__ void w4p_bar_init(uint32_t bar, int count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void w4p_arrive(uint32_t bar)
{
	asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void w4p_wait(uint32_t bar, uint32_t parity)
{
	asm volatile("{\n .reg .pred p;\n W4P_WAIT_%=:\n"
		     " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
		     " @!p bra W4P_WAIT_%=;\n}\n" ::"r"(bar),
		     "r"(parity)
		     : "memory");
}

template <int MT, int NP, int PROBE>
static __global__ void __launch_bounds__(32 * (4 + NP), 1) k_w4p(const w4_args A)
{
	constexpr int RN = W4P_RN, RM = 16 * MT, NPT = 32 * NP;
	constexpr int SB = w4_stage_bytes(RN, RM), DB = w4p_dstage_bytes(RM);
	constexpr int PD = RN * 16 / NPT;		     /* decode pieces (8 k of one row) per producer thread */
	constexpr int PC = (RN * 4 + NPT - 1) / NPT, PX = (RM * 16 + NPT - 1) / NPT;
	extern __shared__ __align__(16) uint8_t w4_smem[];
	uint4 *tab = reinterpret_cast<uint4 *>(w4_smem); /* 256 entries */
	uint64_t *bars = reinterpret_cast<uint64_t *>(w4_smem + 256 * 16); /* full[D], empty[D] */
	uint8_t *dring = w4_smem + 256 * 16 + 128;
	uint8_t *ring = dring + W4P_D * DB;
	const int S = A.stages;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int64_t n0 = (int64_t)blockIdx.x * RN;
	const int m0 = blockIdx.y * RM;
	const int k = A.k, nch = k / W4_KC;
	const int mlive = A.m - m0 < RM ? A.m - m0 : RM; /* x rows of this CTA below M */
	const uint32_t bar_s = (uint32_t)__cvta_generic_to_shared(bars);
	const uint32_t dring_s = (uint32_t)__cvta_generic_to_shared(dring);
	const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

	if (tid == 0)
		for (int d = 0; d < W4P_D; d++) {
			w4p_bar_init(bar_s + 8 * d, NPT);	     /* full: every producer thread */
			w4p_bar_init(bar_s + 8 * (W4P_D + d), 4); /* empty: lane 0 of each consumer warp */
		}
	/* x rows >= M of every decoded stage: zero, once */
	for (int i = tid; i < W4P_D * (RM - mlive) * 16; i += 32 * (4 + NP)) {
		const int d = i / ((RM - mlive) * 16), r = mlive + (i / 16) % (RM - mlive), q = i % 16;
		*reinterpret_cast<uint4 *>(dring + d * DB + (RN + r) * (W4_XP * 2) + 16 * q) = make_uint4(0, 0, 0, 0);
	}
	w4_table(tab, tid, 32 * (4 + NP));
	__syncthreads();

	if (warp >= 4) {
		/* producers */
		const int pt = tid - 128;
		const uint8_t *csrc[PC];
		uint32_t cdst[PC];
		int con[PC];
#pragma unroll
		for (int i = 0; i < PC; i++) {
			const int p = pt + i * NPT, r = p >> 2, q = p & 3;
			con[i] = p < RN * 4 && n0 + r < A.n ? 16 : 0;
			csrc[i] = A.codes + (con[i] ? (n0 + r) * (k / 2) + 16 * q : 0);
			cdst[i] = (uint32_t)(r * W4_CP + 16 * q);
		}
		const int son = pt < RN && n0 + pt < A.n ? 8 : 0;
		const uint8_t *ssrc = A.scales + (son ? (n0 + pt) * (k / 16) : 0);
		const uint32_t sdst = (uint32_t)(RN * W4_CP + 8 * pt);
		const uint16_t *xsrc[PX];
		uint32_t xdst[PX];
		int xon[PX];
#pragma unroll
		for (int i = 0; i < PX; i++) {
			const int p = pt + i * NPT, r = p >> 4, q = p & 15;
			xon[i] = p < mlive * 16 ? 16 : 0;
			xsrc[i] = A.x + (xon[i] ? (int64_t)(m0 + r) * k + 8 * q : 0);
			xdst[i] = (uint32_t)(RN * (W4_CP + 8) + r * (W4_XP * 2) + 16 * q);
		}
		auto issue = [&](int c, int b) {
			const uint32_t base = ring_s + (uint32_t)(b * SB);
#pragma unroll
			for (int i = 0; i < PC; i++)
				if (pt + i * NPT < RN * 4)
					w4_cp16(base + cdst[i], csrc[i] + (size_t)c * (size_t)(con[i] ? W4_KC / 2 : 0), con[i]);
			if (pt < RN)
				w4_cp8(base + sdst, ssrc + (size_t)c * (size_t)(son ? W4_KC / 16 : 0), son);
#pragma unroll
			for (int i = 0; i < PX; i++)
				if (xon[i])
					w4_cp16(base + xdst[i], xsrc[i] + (size_t)c * W4_KC, 16);
		};
		for (int s = 0; s < S - 2; s++) {
			if (s < nch)
				issue(s, s);
			asm volatile("cp.async.commit_group;\n" ::: "memory");
		}
		for (int c = 0, b = 0, d = 0; c < nch; c++) {
			w4_wait(S - 1); /* at most S - 3 pending: chunk c landed (this thread's copies) */
			asm volatile("bar.sync 1, %0;\n" ::"n"(NPT) : "memory"); /* ... every producer's */
			if (c + S - 2 < nch)
				issue(c + S - 2, b >= 2 ? b - 2 : b + S - 2);
			asm volatile("cp.async.commit_group;\n" ::: "memory");
			if (c >= W4P_D)
				w4p_wait(bar_s + 8 * (W4P_D + d), (uint32_t)((c / W4P_D - 1) & 1));
			const uint8_t *st = ring + b * SB;
			uint8_t *dt = dring + d * DB;
			if (!PROBE) {
#pragma unroll
				for (int i = 0; i < PD; i++) {
					const int p = pt + i * NPT, dr = p >> 4, dq = p & 15;
					const uint32_t v = *reinterpret_cast<const uint32_t *>(st + dr * W4_CP + 4 * dq);
					const uint32_t sf = st[RN * W4_CP + 8 * dr + (dq >> 1)];
					const uint4 tb = tab[sf];
					uint32_t o0, o1, o2, o3;
					w4_decode(v, tb, o0, o1);
					w4_decode(v >> 16, tb, o2, o3);
					*reinterpret_cast<uint4 *>(dt + dr * (W4_XP * 2) + 16 * dq) = make_uint4(o0, o1, o2, o3);
				}
			}
#pragma unroll
			for (int i = 0; i < PX; i++)
				if (xon[i])
					*reinterpret_cast<uint4 *>(dt + RN * (W4_XP * 2) + (xdst[i] - RN * (W4_CP + 8))) =
						*reinterpret_cast<const uint4 *>(st + xdst[i]);
			w4p_arrive(bar_s + 8 * d);
			b = b + 1 == S ? 0 : b + 1;
			d = d + 1 == W4P_D ? 0 : d + 1;
		}
		asm volatile("cp.async.wait_group 0;\n" ::: "memory");
		return;
	}

	/* consumers: warp owns W rows 8 warp .. + 7 of the CTA */
	float acc[MT][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			acc[i][r] = 0.0f;
	const uint32_t xoff = (uint32_t)(RN + (lane & 15)) * (W4_XP * 2) + (uint32_t)(lane >> 4) * 16;
	const uint32_t woff = (uint32_t)(warp * 8 + (lane & 7)) * (W4_XP * 2) + (uint32_t)(lane >> 3) * 16;
	for (int c = 0, d = 0; c < nch; c++) {
		w4p_wait(bar_s + 8 * d, (uint32_t)((c / W4P_D) & 1));
		const uint32_t base = dring_s + (uint32_t)(d * DB);
#pragma unroll
		for (int s = 0; s < W4_KC / 16; s += 2) {
			uint32_t bw[4];
			w4_ldsm4(bw, base + woff + (uint32_t)(s * 32));
#pragma unroll
			for (int h = 0; h < 2; h++)
#pragma unroll
				for (int i = 0; i < MT; i++) {
					uint32_t a[4];
					w4_ldsm4(a, base + xoff + (uint32_t)(i * 16 * W4_XP * 2 + (s + h) * 32));
					w4_mma(acc[i], a, bw[2 * h], bw[2 * h + 1]);
				}
		}
		__syncwarp();
		if (lane == 0)
			w4p_arrive(bar_s + 8 * (W4P_D + d));
		d = d + 1 == W4P_D ? 0 : d + 1;
	}

	w4_store1<MT>(A, acc, m0, g, n0 + warp * 8 + 2 * t);
}

#endif
