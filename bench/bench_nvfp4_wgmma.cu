/* bench_nvfp4_wgmma.cu: an experiment of issue 19 (step 2), not used by fosd: a Hopper (sm_90a)
 * GEMM for larger M that reads the weight as NVFP4 (e2m1 codes + e4m3 scale bytes, 0.5625 bytes
 * per element, the form the weight cache keeps) and decodes it into shared memory, against the
 * current path (be->decode into a bf16 scratch, then be->gemm) and a plain bf16 cuBLASLt GEMM.
 *
 * The kernel: y (M, N) bf16 = x (M, K) bf16 * W^T with W (N, K) as codes (N, K/2: element 2j in the
 * low nibble of byte j) and scale bytes (N, K/16); every W element is bf16(e2m1 value * e4m3 scale),
 * exact (NUMERICS.md sections 6 and 7), so the math is the bf16 GEMM of the current path on the
 * decoded W; x stands for the decoded bf16 X of a forward. alpha 1, no epilogue but the bf16 cast
 * (round to nearest even). Scale bytes never carry the sign bit (fosd's quantizers never set it);
 * the kernel ignores it.
 *   - A tile is BM rows (BM / 64 consumer warpgroups of 64 rows) by BN columns of y; a CTA walks K in
 *     steps of 64 through an S-stage shared-memory ring, for one tile or (persistent variants) for
 *     tiles blockIdx.x, + gridDim.x, ... in turn, the ring running on from one tile to the next.
 *     The first P warpgroups (P = 1 or 2) are the producers. They decode W's bytes of a step with
 *     the byte permutes of fcu_dec_words (cuda_q46.cuh) from a 2 KiB table of the 8 magnitudes of
 *     each scale byte (all the table rows of a step loaded before the wait for its stage), store
 *     the bf16 W tile (BN x 64) in the same 128-byte swizzled K-major layout the TMA writes (16-byte
 *     chunk c of row r at r * 128 + ((c ^ (r % 8)) * 16)), fence the generic stores for the async
 *     proxy and arrive on the stage's "full" mbarrier; U = 2: two steps are decoded together and
 *     share one fence. W's bytes come into an R-slot ring, R - 1 steps ahead, by one of:
 *       TW 0: each producer thread copies its own bytes (codes and the row's 4 scale bytes of the
 *             step) with cp.async; producer thread 0 loads the x tile (BM x 64 bf16) by TMA
 *             (128-byte swizzle, rows past M read as zeros) onto "full";
 *       TW 1: a loader warp after the consumers (its lane 0) issues every TMA: the x tile once the
 *             stage is free, W's codes as a box of 32 bytes x BN rows per step and W's scale bytes
 *             as a box of 16 bytes (4 steps) x BN rows every 4th step, onto the slot's "rawfull"
 *             mbarrier; the producers only read shared memory (their scale words of 4 steps kept
 *             in registers), arrive on the slot's "rawempty" once they have read it, decode and
 *             write shared memory;
 *       TW 2: the same TMA loads issued by producer thread 0 (no extra warp: the thread count, so
 *             the register budget, of TW 0; the 128 x 256 tile needs it).
 *     The consumers wait on "full", issue 4 wgmma.mma_async m64nBNk16 (bf16, FP32 accumulators in
 *     registers, both operands K-major from shared memory through descriptors: 128-byte swizzle,
 *     1024-byte stride between 8-row groups, the start advanced 32 bytes per k16), keep one wgmma
 *     group in flight, free a stage on its "empty" mbarrier once its group is complete, and write
 *     the bf16 cast of a finished tile from the accumulators.
 *   - Every output's FP32 sum is the same sequence of k16 steps in K order whatever the tile shape,
 *     the grid or M (no split-K, nothing chosen by M): bits are deterministic and do not depend on M
 *     (batch-invariant).
 *   - Needs N % BN == 0, K % 64 == 0 (TW 1, 2: K % 256 == 0), codes 16-byte and scales 4-byte
 *     (TW 1, 2: 16-byte) aligned (the launcher refuses other operands); any M >= 1.
 *   - A wait on an mbarrier gives up after about 0.2 s, sets a device flag and lets the CTA run to
 *     its end (garbage out): the bench reports the variant as hung instead of hanging. FW 0 reads
 *     the flag (a global load) and the global clock every 16th try of a wait, FW 1 ("fast waits")
 *     the SM's cycle counter every 256th try and the flag every 4096th.
 *
 * The program quantizes a random bf16 W with the weight's default options (4/6, 16x16 blocks, MAE,
 * bound 256: fos_qweight_make_uses), decodes it with fos_qweight_decode for the reference paths,
 * and for each shape (M x N x K) 16, 128, 1024, 8192 x 4096 x 4096 and 16 x 4096 x 14336 prints
 * markdown rows: the median of NRUN timed runs (CUDA events on the backend's stream, after 3
 * warm-ups; all ops of a shape alternate run by run) of every kernel variant, of decode + be->gemm,
 * of be->gemm alone on the decoded W, and of the plain bf16 cuBLASLt GEMM (fos_cuda_gemm_baseline,
 * 32 MiB workspace), once with L2 flushed before each op (a 256 MiB memset outside the timed
 * interval) and once hot; and the checks (run first: a wrong or hung variant is left out of the
 * timings): each variant against the current path (differing elements, max ulps, max |diff|,
 * SQNR) and against an FP64 reference on rows 0..15, bits run to run, each row's bits over M in
 * {1, 16, 128, 1024, 8192} (rows of every smaller M against the largest run), and bits across
 * variants. Exit status 1 if a variant is wrong (SQNR against the
 * current path below 60 dB, bits changing run to run or with M, a hung wait), else 0; without a
 * usable sm_90 GPU it says so and exits 0. Usage: bench_nvfp4_wgmma [hot] [smoke] [vars=I,J,...] (hot:
 * no L2-flushed rows; smoke: the checks at 128x4096x4096 and the bit checks up to M = 1024, no
 * timing; vars: only these kernel variants, by index). */
#include "backend.h"
#include "bench_util.h"
#include "cuda_backend.h"
#include "support_cuda_baseline.h"
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"
#include "fos_format.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fos_backend *be;
static fos_err err;

#define CK(x)                                                                                                  \
	do {                                                                                                   \
		if ((x) != FOS_OK) {                                                                           \
			fprintf(stderr, "bench_nvfp4_wgmma: %s failed: %s\n", #x, err.msg);                    \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

#define CU(x)                                                                                                  \
	do {                                                                                                   \
		cudaError_t e_ = (x);                                                                          \
		if (e_ != cudaSuccess) {                                                                       \
			fprintf(stderr, "bench_nvfp4_wgmma: %s: %s\n", #x, cudaGetErrorString(e_));            \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

/* ---- device helpers (PTX) ---------------------------------------------------------------------- */

__device__ unsigned int g_hung; /* set by a wait that gave up */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_tx(uint32_t bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ uint32_t mbar_try(uint32_t bar, uint32_t parity)
{
	uint32_t ok;
	asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
		     : "=r"(ok)
		     : "r"(bar), "r"(parity)
		     : "memory");
	return ok;
}

__device__ __forceinline__ uint64_t gtimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Waits for the phase of parity `parity` of bar (try_wait suspends the thread until the phase
 * completes or a hardware time limit passes); after about 0.2 s sets g_hung and returns, and returns
 * soon while g_hung is set (one hung wait does not make every later one wait too).
 * FAST 0: the flag and the global clock every 16th try (the clock first at the 16th). FAST 1: no
 * global load in the loop but every 4096th try (the flag), the SM's cycle counter every 256th try
 * (the limit: 4e8 cycles, at least 0.2 s at the H200's clocks). */
template <int FAST> __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
	if constexpr (FAST != 0) {
		long long c0 = 0;
		for (uint32_t spins = 1;; spins++) {
			if (mbar_try(bar, parity))
				return;
			if ((spins & 255u) == 0) {
				if ((spins & 4095u) == 0 && *(volatile unsigned int *)&g_hung)
					return;
				const long long now = clock64();
				if (c0 == 0)
					c0 = now;
				else if (now - c0 > 400000000ll) {
					atomicExch(&g_hung, 1u);
					return;
				}
			}
		}
	} else {
		uint64_t t0 = 0;
		for (uint32_t spins = 1;; spins++) {
			if (mbar_try(bar, parity))
				return;
			if ((spins & 15u) == 0) {
				if (*(volatile unsigned int *)&g_hung)
					return;
				const uint64_t now = gtimer();
				if (t0 == 0)
					t0 = now;
				else if (now - t0 > 200000000ull) {
					atomicExch(&g_hung, 1u);
					return;
				}
			}
		}
	}
}

__device__ __forceinline__ void fence_async_smem(void)
{
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
		     ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
		     : "memory");
}

__device__ __forceinline__ void cp16(uint32_t dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp8(uint32_t dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp4(uint32_t dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit(void)
{
	asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void wg_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator accesses across the asynchronous wgmma. */
template <int R> __device__ __forceinline__ void acc_fence(float *d)
{
#pragma unroll
	for (int i = 0; i < R; i++)
		asm volatile("" : "+f"(d[i])::"memory");
}

/* Shared-memory matrix descriptor of a K-major tile with 128-byte swizzle: start address >> 4 in
 * bits 0..13, leading byte offset (unused with this swizzle, 1) in 16..29, stride byte offset
 * 1024 >> 4 (from one 8-row group to the next) in 32..45, base offset 0 (tiles 1024-aligned),
 * swizzle mode 1 (128 bytes) in 62..63. */
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr)
{
	return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
	       ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wg_mma_n32(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
		     "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
		     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wg_mma_n64(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
		     "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
		     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wg_mma_n128(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
		     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
		     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
		     "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
		       "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
		       "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
		       "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
		       "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
		     : "l"(da), "l"(db));
}

__device__ __forceinline__ void wg_mma_n256(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
		     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
		     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
		     "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
		     "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
		     "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
		     "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
		     "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
		       "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
		       "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
		       "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
		       "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
		       "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
		       "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
		       "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
		       "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
		       "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
		       "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
		       "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
		       "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
		     : "l"(da), "l"(db));
}

template <int BN> __device__ __forceinline__ void wg_mma(float *d, uint64_t da, uint64_t db)
{
	if constexpr (BN == 32)
		wg_mma_n32(d, da, db);
	else if constexpr (BN == 64)
		wg_mma_n64(d, da, db);
	else if constexpr (BN == 128)
		wg_mma_n128(d, da, db);
	else
		wg_mma_n256(d, da, db);
}

/* ---- the kernel ------------------------------------------------------------------------------ */

#define WG_BK 64 /* k per pipeline step: one 128-byte swizzle row of bf16 */

/* TW 0: the producer warpgroup copies W's bytes itself (cp.async, each thread its own) and its
 * thread 0 loads x by TMA; TW 1: an extra warp (the last) loads x and W's bytes by TMA and the
 * producer warpgroup only decodes, from shared memory to shared memory; TW 2: the same loads by TMA,
 * issued by producer thread 0 (no extra warp: the thread count, so the register budget, of TW 0). */
template <int BM, int BN, int S, int R, int TW, int P, int U> struct wg_cfg {
	static constexpr int C = BM / 64;                  /* consumer warpgroups */
	static constexpr int PT = 128 * P;                 /* producer threads (P warpgroups) */
	static constexpr int NTC = PT + 128 * C;           /* producer + consumer threads */
	static constexpr int NT = NTC + (TW == 1 ? 32 : 0); /* threads */
	static constexpr int RPT = BN > PT ? BN / PT : 1;  /* W rows per producer thread */
	static constexpr int TPR = BN < PT ? PT / BN : 1;  /* producer threads per W row */
	static constexpr int CBR = 32 / TPR;               /* code bytes of one row per producer thread per step */
	static constexpr int NB = CBR / 8;                 /* 1x16 blocks of one row per producer thread per step */
	static constexpr int CB = RPT * CBR;               /* code bytes per producer thread per step */
	static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
	static constexpr int RS = (R + 3) / 4;             /* TW: slots of 4 steps' scale bytes */
	static constexpr int RAW_C = R * BN * 32;           /* a slot: the step's BN x 32 code bytes */
	static constexpr int RAW_S = TW ? RS * BN * 16 : R * 128 * 4 * RPT;
	static constexpr int NBAR = 2 * S + (TW ? 2 * R : 0);
	static constexpr int SMEM = S * (A_BYTES + B_BYTES) + RAW_C + RAW_S + 2048 + 8 * NBAR + 1024;
	static_assert(BM == 64 || BM == 128, "BM");
	static_assert(BN == 32 || BN == 64 || BN == 128 || BN == 256, "BN");
	static_assert(S >= 3 && R >= 2, "stages");
	static_assert(CBR >= 8 && (TW != 0 || (P == 1 && U == 1)) && (U == 1 || U == 2) && S >= 2 * U && R >= 2 * U, "producers");
};

/* Tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... of the (M / BM) x (N / BN) tile grid, N fastest
 * (a grid of one CTA per tile, or a persistent one). Every role walks the same sequence of steps
 * (tile, k step); step g uses stage g % S in its round g / S and raw slot g % R (TW: its scale bytes
 * come with the step g - g % 4, in scale slot (g / 4) % RS; K % 256 == 0, so a tile has a multiple
 * of 4 steps). Barriers: full[S] (an arrival of every producer thread and the x TMA's bytes), empty[S]
 * (lane 0 of every consumer warp); TW also rawfull[R] (W's TMA bytes) and rawempty[R] (lane 0 of
 * every producer warp, once it has read the slot into registers). */
template <int BM, int BN, int S, int R, int TW, int P, int U, int FW>
__global__ void __launch_bounds__(wg_cfg<BM, BN, S, R, TW, P, U>::NT, 1)
	k_wg(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap cmap,
	     const __grid_constant__ CUtensorMap smap, const uint8_t *__restrict__ codes,
	     const uint8_t *__restrict__ scales, int m, int n, int k, uint16_t *__restrict__ y)
{
	typedef wg_cfg<BM, BN, S, R, TW, P, U> cfg;
	extern __shared__ uint8_t smraw[];
	const uint32_t pad = (1024u - (smem_u32(smraw) & 1023u)) & 1023u;
	uint8_t *sm = smraw + pad;
	uint8_t *sA = sm, *sB = sA + S * cfg::A_BYTES, *rc = sB + S * cfg::B_BYTES, *rs = rc + cfg::RAW_C;
	uint16_t *tab = reinterpret_cast<uint16_t *>(rs + cfg::RAW_S); /* bf16(e2m1 magnitude c * float(sf)), [sf][c] */
	uint64_t *bars = reinterpret_cast<uint64_t *>(tab + 1024);     /* full[S], empty[S], rawfull[R], rawempty[R] */
	const int tid = threadIdx.x;
	for (int i = tid; i < 128 * 8; i += cfg::NT)
		tab[i] = fos_f32_to_bf16(FOS_MUL(fos_e2m1_value((uint32_t)i & 7u), fos_e4m3_to_f32((uint32_t)i >> 3)));
	if (tid == 0) {
		for (int s = 0; s < S; s++) {
			mbar_init(smem_u32(bars + s), cfg::PT + 1);   /* the producer threads + the x TMA's expect_tx */
			mbar_init(smem_u32(bars + S + s), 4 * cfg::C); /* lane 0 of every consumer warp */
		}
		if constexpr (TW != 0) {
			for (int r = 0; r < R; r++) {
				mbar_init(smem_u32(bars + 2 * S + r), 1);
				mbar_init(smem_u32(bars + 2 * S + R + r), cfg::PT / 32);
			}
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();

	const int nk = k / WG_BK, ntn = n / BN, ntiles = ntn * ((m + BM - 1) / BM);
	const int t0 = blockIdx.x, tstep = gridDim.x;
	int wit = t0, wiks = 0, wj = 0; /* TW: the W stream of the loader, (wit, wiks) is W step wj */
	auto issue_w = [&]() { /* W's bytes of the next step, once raw slot wj % R is free */
		if (wit >= ntiles)
			return;
		const int slot = wj % R, n0 = (wit % ntn) * BN;
		if (wj >= R)
			mbar_wait<FW>(smem_u32(bars + 2 * S + R + slot), ((wj / R) & 1) ^ 1);
		const uint32_t fb = smem_u32(bars + 2 * S + slot);
		const bool sc = (wiks & 3) == 0;
		mbar_arrive_tx(fb, (uint32_t)(BN * 32 + (sc ? BN * 16 : 0)));
		tma_load_2d(smem_u32(rc) + slot * BN * 32, &cmap, wiks * 32, n0, fb);
		if (sc)
			tma_load_2d(smem_u32(rs) + ((wj / 4) % cfg::RS) * BN * 16, &smap, wiks * 4, n0, fb);
		wj++;
		if (++wiks == nk) {
			wiks = 0;
			wit += tstep;
		}
	};
	if (TW == 1 && tid >= cfg::NTC) {
		/* the loader (lane 0 of the last warp): x of step g once stage g % S is free, and W's bytes
		 * of step g + R - 1 once the producers have read raw slot (g - 1) % R */
		if (tid != cfg::NTC)
			return;
#pragma unroll 1
		for (int i = 0; i < R - 1; i++)
			issue_w();
		int s = 0, ph = 0;
#pragma unroll 1
		for (int t = t0; t < ntiles; t += tstep) {
			const int m0 = (t / ntn) * BM;
#pragma unroll 1
			for (int ks = 0; ks < nk; ks++) {
				mbar_wait<FW>(smem_u32(bars + S + s), ph ^ 1);
				mbar_arrive_tx(smem_u32(bars + s), cfg::A_BYTES);
				tma_load_2d(smem_u32(sA + s * cfg::A_BYTES), &xmap, ks * WG_BK, m0, smem_u32(bars + s));
				issue_w();
				if (++s == S) {
					s = 0;
					ph ^= 1;
				}
			}
		}
	} else if (tid < cfg::PT) {
		/* producer: row rr of thread tid is W row n0 + tid / TPR + rr * (PT / TPR), its code bytes
		 * part * CBR .. + CBR - 1 of each step's 32 */
		const int part = tid % cfg::TPR, row0 = tid / cfg::TPR;
		const int64_t kc = k / 2, ksc = k / 16;
		/* TW 0: the copy stream, R - 1 steps ahead, (it, iks) the next step to copy; thread tid's
		 * bytes of a slot at tid * CB (codes) and tid * 4 RPT (scales) */
		const uint32_t myc = smem_u32(rc) + tid * cfg::CB, mys = smem_u32(rs) + tid * 4 * cfg::RPT;
		int it = t0, iks = 0, islot = 0;
		auto issue = [&]() {
			if (it < ntiles) {
				const int n0 = (it % ntn) * BN;
				const uint32_t dc = myc + islot * 128 * cfg::CB, ds = mys + islot * 512 * cfg::RPT;
#pragma unroll
				for (int rr = 0; rr < cfg::RPT; rr++) {
					const int64_t r = n0 + row0 + rr * (cfg::PT / cfg::TPR);
					const uint8_t *src = codes + r * kc + part * cfg::CBR + (int64_t)iks * 32;
					if constexpr (cfg::CBR == 32) {
						cp16(dc + rr * 32, src);
						cp16(dc + rr * 32 + 16, src + 16);
					} else if constexpr (cfg::CBR == 16) {
						cp16(dc + rr * 16, src);
					} else {
						cp8(dc + rr * 8, src);
					}
					cp4(ds + rr * 4, scales + r * ksc + (int64_t)iks * 4);
				}
				if (++iks == nk) {
					iks = 0;
					it += tstep;
				}
			}
			cp_commit(); /* always one group per step (empty past the end) */
			if (++islot == R)
				islot = 0;
		};
		if constexpr (TW == 0) {
#pragma unroll 1
			for (int i = 0; i < R - 1; i++)
				issue();
		} else if (TW == 2 && tid == 0) {
#pragma unroll 1
			for (int i = 0; i < R - 1; i++)
				issue_w();
		}
		int s = 0, ph = 0, slot = 0, rph = 0, qslot = 0;
		uint32_t sq[cfg::RPT][4]; /* TW: the row's scale words of the current 4 steps */
#pragma unroll 1
		for (int t = t0; t < ntiles; t += tstep) {
			const int m0 = (t / ntn) * BM;
#pragma unroll 1
			for (int ks = 0; ks < nk; ks += U) {
				/* U steps at once: their raw bytes, table rows, stages, decodes, one fence */
				uint32_t cw[U][cfg::CB / 4], sfw[U][cfg::RPT];
				int su[U], phu[U], slu[U];
#pragma unroll
				for (int u = 0; u < U; u++) {
					const int kq = ks + u;
					if constexpr (TW == 0) {
						issue();
						cp_wait<R - 1>();
						const uint8_t *pc = rc + slot * 128 * cfg::CB + tid * cfg::CB;
						if constexpr (cfg::CB >= 16) {
#pragma unroll
							for (int q = 0; q < cfg::CB / 16; q++) {
								const uint4 v = reinterpret_cast<const uint4 *>(pc)[q];
								cw[u][4 * q] = v.x;
								cw[u][4 * q + 1] = v.y;
								cw[u][4 * q + 2] = v.z;
								cw[u][4 * q + 3] = v.w;
							}
						} else {
							const uint2 v = *reinterpret_cast<const uint2 *>(pc);
							cw[u][0] = v.x;
							cw[u][1] = v.y;
						}
#pragma unroll
						for (int rr = 0; rr < cfg::RPT; rr++)
							sfw[u][rr] = reinterpret_cast<const uint32_t *>(rs + slot * 512 * cfg::RPT +
												 tid * 4 * cfg::RPT)[rr];
					} else {
						mbar_wait<FW>(smem_u32(bars + 2 * S + slot), rph);
#pragma unroll
						for (int rr = 0; rr < cfg::RPT; rr++) {
							const int row = row0 + rr * (cfg::PT / cfg::TPR);
							const uint8_t *pc = rc + slot * BN * 32 + row * 32 + part * cfg::CBR;
							if constexpr (cfg::CBR == 32) {
								const uint4 v0 = reinterpret_cast<const uint4 *>(pc)[0];
								const uint4 v1 = reinterpret_cast<const uint4 *>(pc)[1];
								cw[u][rr * 8] = v0.x;
								cw[u][rr * 8 + 1] = v0.y;
								cw[u][rr * 8 + 2] = v0.z;
								cw[u][rr * 8 + 3] = v0.w;
								cw[u][rr * 8 + 4] = v1.x;
								cw[u][rr * 8 + 5] = v1.y;
								cw[u][rr * 8 + 6] = v1.z;
								cw[u][rr * 8 + 7] = v1.w;
							} else if constexpr (cfg::CBR == 16) {
								const uint4 v = *reinterpret_cast<const uint4 *>(pc);
								cw[u][rr * 4] = v.x;
								cw[u][rr * 4 + 1] = v.y;
								cw[u][rr * 4 + 2] = v.z;
								cw[u][rr * 4 + 3] = v.w;
							} else {
								const uint2 v = *reinterpret_cast<const uint2 *>(pc);
								cw[u][rr * 2] = v.x;
								cw[u][rr * 2 + 1] = v.y;
							}
							if ((kq & 3) == 0) {
								const uint4 v = *reinterpret_cast<const uint4 *>(rs + qslot * BN * 16 + row * 16);
								sq[rr][0] = v.x;
								sq[rr][1] = v.y;
								sq[rr][2] = v.z;
								sq[rr][3] = v.w;
							}
							const int j = kq & 3;
							sfw[u][rr] = j == 0 ? sq[rr][0] : j == 1 ? sq[rr][1] : j == 2 ? sq[rr][2] : sq[rr][3];
						}
						if ((kq & 3) == 3 && ++qslot == cfg::RS)
							qslot = 0;
					}
					su[u] = s;
					phu[u] = ph;
					slu[u] = slot;
					if (++s == S) {
						s = 0;
						ph ^= 1;
					}
					if (++slot == R) {
						slot = 0;
						rph ^= 1;
					}
				}
				if constexpr (TW != 0) {
					__syncwarp();
					if ((tid & 31) == 0) {
#pragma unroll
						for (int u = 0; u < U; u++)
							mbar_arrive(smem_u32(bars + 2 * S + R + slu[u]));
					}
					if (TW == 2 && tid == 0) {
#pragma unroll
						for (int u = 0; u < U; u++)
							issue_w(); /* step g + R - 1 once every producer warp has read step g - 1 */
					}
				}
				uint4 t4[U][cfg::RPT][cfg::NB]; /* all table rows first, before the waits: their loads overlap them */
#pragma unroll
				for (int u = 0; u < U; u++)
#pragma unroll
					for (int rr = 0; rr < cfg::RPT; rr++)
#pragma unroll
						for (int b = 0; b < cfg::NB; b++) {
							const uint32_t sf = (sfw[u][rr] >> (8 * (part * cfg::NB + b))) & 0x7Fu;
							t4[u][rr][b] = *reinterpret_cast<const uint4 *>(tab + sf * 8);
						}
#pragma unroll
				for (int u = 0; u < U; u++) {
					mbar_wait<FW>(smem_u32(bars + S + su[u]), phu[u] ^ 1);
					if (TW != 1 && tid == 0) {
						mbar_arrive_tx(smem_u32(bars + su[u]), cfg::A_BYTES);
						tma_load_2d(smem_u32(sA + su[u] * cfg::A_BYTES), &xmap, (ks + u) * WG_BK, m0,
							    smem_u32(bars + su[u]));
					}
				}
#pragma unroll
				for (int u = 0; u < U; u++) {
					const uint32_t bst = smem_u32(sB) + su[u] * cfg::B_BYTES;
#pragma unroll
					for (int rr = 0; rr < cfg::RPT; rr++) {
						const int row = row0 + rr * (cfg::PT / cfg::TPR);
						const uint32_t rb = bst + row * 128, sw = (uint32_t)(row & 7);
#pragma unroll
						for (int b = 0; b < cfg::NB; b++) {
							const int bi = part * cfg::NB + b; /* the 1x16 block of the row's 64 k */
							const uint32_t sf = (sfw[u][rr] >> (8 * bi)) & 0x7Fu;
							const uint4 q4 = t4[u][rr][b];
							const int w = rr * (cfg::CBR / 4) + 2 * b;
							uint32_t o[8];
							fcu_dec_words((uint64_t)cw[u][w] | ((uint64_t)cw[u][w + 1] << 32), sf, q4.x, q4.y,
								      q4.z, q4.w, o);
							const uint32_t c0 = (uint32_t)(2 * bi), c1 = c0 + 1;
							/* no "memory" clobber: later loads may move above these stores (the
							 * fence below, volatile with a clobber, keeps them before it) */
							asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(rb + ((c0 ^ sw) << 4)),
								     "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3]));
							asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(rb + ((c1 ^ sw) << 4)),
								     "r"(o[4]), "r"(o[5]), "r"(o[6]), "r"(o[7]));
						}
					}
				}
				fence_async_smem();
#pragma unroll
				for (int u = 0; u < U; u++)
					mbar_arrive(smem_u32(bars + su[u]));
			}
		}
		if constexpr (TW == 0)
			cp_wait<0>();
	} else {
		/* consumers: warpgroup wg owns rows m0 + 64 wg .. + 63 of each tile */
		const int wg = (tid - cfg::PT) / 128, warp = (tid % 128) / 32, lane = tid % 32;
		const int g = lane >> 2, tq = lane & 3;
		const uint32_t a0 = smem_u32(sA) + wg * 64 * 128, b0 = smem_u32(sB);
		int s = 0, ph = 0;
		float acc[BN / 2];
#pragma unroll 1
		for (int t = t0; t < ntiles; t += tstep) {
#pragma unroll
			for (int i = 0; i < BN / 2; i++)
				acc[i] = 0.0f;
			int sprev = 0;
#pragma unroll 1
			for (int ks = 0; ks < nk; ks++) {
				mbar_wait<FW>(smem_u32(bars + s), ph);
				const uint64_t da = sw128_desc(a0 + s * cfg::A_BYTES), db = sw128_desc(b0 + s * cfg::B_BYTES);
				acc_fence<BN / 2>(acc);
				wg_fence();
#pragma unroll
				for (int kk = 0; kk < WG_BK / 16; kk++)
					wg_mma<BN>(acc, da + 2 * kk, db + 2 * kk); /* + 32 bytes per k16 */
				wg_commit();
				acc_fence<BN / 2>(acc);
				wg_wait<1>();
				acc_fence<BN / 2>(acc);
				if (ks > 0 && lane == 0)
					mbar_arrive(smem_u32(bars + S + sprev)); /* the previous step's group is complete */
				sprev = s;
				if (++s == S) {
					s = 0;
					ph ^= 1;
				}
			}
			wg_wait<0>();
			acc_fence<BN / 2>(acc);
			if (lane == 0)
				mbar_arrive(smem_u32(bars + S + sprev));
			const int n0 = (t % ntn) * BN, m0 = (t / ntn) * BM;
			const int64_t r0 = m0 + 64 * wg + 16 * warp + g;
#pragma unroll
			for (int j = 0; j < BN / 8; j++) {
				const int64_t col = n0 + 8 * j + 2 * tq;
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int64_t row = r0 + 8 * h;
					if (row < m)
						*reinterpret_cast<uint32_t *>(y + row * n + col) =
							(uint32_t)fos_f32_to_bf16(acc[4 * j + 2 * h]) |
							((uint32_t)fos_f32_to_bf16(acc[4 * j + 2 * h + 1]) << 16);
				}
			}
		}
	}
}

/* ---- the launcher ------------------------------------------------------------------------------ */

typedef void (*kern_fn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const uint8_t *, const uint8_t *, int,
			int, int, uint16_t *);

struct variant {
	const char *name;
	kern_fn fn;
	int bm, bn, smem, threads;
	int persistent; /* grid: as many CTAs as fit at once (a loop over tiles), else one CTA per tile */
	int tw;         /* W's bytes by TMA from a loader warp (else cp.async by the producers) */
	int grid_cap;   /* set at start for a persistent variant */
};

#define VAR(bm, bn, s, r, p, tw, np, u, fw, sfx)                                                                \
	{"wgmma BM " #bm " BN " #bn " S " #s " R " #r sfx,                                                     \
	 k_wg<bm, bn, s, r, tw, np, u, fw>,                                                                    \
	 bm,                                                                                                   \
	 bn,                                                                                                   \
	 wg_cfg<bm, bn, s, r, tw, np, u>::SMEM,                                                                \
	 wg_cfg<bm, bn, s, r, tw, np, u>::NT,                                                                  \
	 p,                                                                                                    \
	 tw,                                                                                                   \
	 0}
static variant variants[] = {
	VAR(128, 256, 4, 3, 1, 0, 1, 1, 0, " persistent, W by cp.async"),
	VAR(128, 256, 4, 3, 1, 2, 1, 1, 0, " persistent, W by TMA from producer thread 0"),
	VAR(128, 256, 4, 3, 1, 2, 1, 1, 1, " persistent, W by TMA from producer thread 0, fast waits"),
	VAR(128, 128, 5, 8, 1, 2, 1, 1, 0, " persistent, W by TMA from producer thread 0"),
	VAR(128, 128, 5, 8, 1, 2, 1, 2, 0, " persistent, W by TMA from producer thread 0, 2 steps per fence"),
	VAR(128, 128, 5, 8, 1, 2, 1, 1, 1, " persistent, W by TMA from producer thread 0, fast waits"),
	VAR(128, 128, 5, 8, 1, 2, 1, 2, 1, " persistent, W by TMA from producer thread 0, 2 steps per fence, fast waits"),
	VAR(128, 64, 6, 8, 1, 1, 1, 1, 0, " persistent, W by TMA"),
	VAR(128, 32, 6, 16, 0, 1, 1, 1, 0, ", W by TMA"),
	VAR(128, 32, 6, 16, 0, 1, 1, 1, 1, ", W by TMA, fast waits"),
	VAR(64, 256, 4, 4, 1, 1, 1, 1, 0, " persistent, W by TMA"),
	VAR(64, 32, 6, 16, 0, 1, 1, 1, 0, ", W by TMA"),
	VAR(64, 32, 6, 16, 0, 1, 1, 1, 1, ", W by TMA, fast waits"),
};
#define NVAR ((int)(sizeof variants / sizeof variants[0]))
static_assert(NVAR + 3 <= 16, "time_ops times at most 16 ops (fos_cuda_mark's 32 event slots)");

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

/* Tensor maps (2-D, boxes of bi x bo elements of eb bytes) for (pointer, inner x outer extent, box),
 * encoded once and reused (host work kept out of the timed runs): x (bf16, 64 k x BM rows, 128-byte
 * swizzle), W's codes (bytes, 32 x BN) and W's scale bytes (16 x BN, 4 steps). */
struct tmap_ent {
	const void *p;
	int64_t inner, outer;
	int bi, bo;
	CUtensorMap map;
};
static tmap_ent tmaps[64];
static int ntmaps;

static const CUtensorMap *tmap_2d(const void *p, int eb, int64_t inner, int64_t outer, int bi, int bo)
{
	for (int i = 0; i < ntmaps; i++)
		if (tmaps[i].p == p && tmaps[i].inner == inner && tmaps[i].outer == outer && tmaps[i].bi == bi &&
		    tmaps[i].bo == bo)
			return &tmaps[i].map;
	if (ntmaps == 64)
		ntmaps = 0;
	tmap_ent *e = &tmaps[ntmaps++];
	e->p = p;
	e->inner = inner;
	e->outer = outer;
	e->bi = bi;
	e->bo = bo;
	const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
	const cuuint64_t strides[1] = {(cuuint64_t)(inner * eb)};
	const cuuint32_t box[2] = {(cuuint32_t)bi, (cuuint32_t)bo};
	const cuuint32_t estr[2] = {1, 1};
	const CUresult r = encode_tiled(&e->map, eb == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8,
					2, (void *)p, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
					eb == 2 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
					CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "bench_nvfp4_wgmma: cuTensorMapEncodeTiled failed (%d) for %lldx%lld box %dx%d\n", (int)r,
			(long long)outer, (long long)inner, bo, bi);
		exit(1);
	}
	return &e->map;
}

static int wg_gemm(const variant *v, const uint16_t *x, const fos_qtensor *q, int64_t m, uint16_t *y)
{
	const int64_t n = q->rows, k = q->cols;
	if (m < 1 || n % v->bn || k % (v->tw ? 256 : WG_BK) || k > (1 << 30) ||
	    (n / v->bn) * ((m + v->bm - 1) / v->bm) > (1 << 30) || ((uintptr_t)q->codes & 15u) ||
	    ((uintptr_t)q->scales & (v->tw ? 15u : 3u)) || ((uintptr_t)x & 15u))
		return fos_seterr(&err, FOS_EINVAL, "%s: shape %lldx%lldx%lld or alignment not taken", v->name,
				  (long long)m, (long long)n, (long long)k);
	const CUtensorMap *xm = tmap_2d(x, 2, k, m, WG_BK, v->bm);
	/* cp.async variants get x's map in all three places (unused) */
	const CUtensorMap *cm = v->tw ? tmap_2d(q->codes, 1, k / 2, n, 32, v->bn) : xm;
	const CUtensorMap *sm = v->tw ? tmap_2d(q->scales, 1, k / 16, n, 16, v->bn) : xm;
	const int64_t tiles = (n / v->bn) * ((m + v->bm - 1) / v->bm);
	const int64_t grid = v->persistent && tiles > v->grid_cap ? v->grid_cap : tiles;
	v->fn<<<(unsigned)grid, v->threads, v->smem, fcu(be)->st>>>(*xm, *cm, *sm, q->codes, q->scales, (int)m, (int)n,
								      (int)k, y);
	return fcu_launched(&err, v->name);
}

static int hung(void)
{
	unsigned int h = 0, z = 0;
	CU(cudaStreamSynchronize(fcu(be)->st));
	CU(cudaMemcpyFromSymbol(&h, g_hung, sizeof h));
	CU(cudaMemcpyToSymbol(g_hung, &z, sizeof z));
	return h != 0;
}

/* ---- the driver ------------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static void *dev_alloc(size_t n)
{
	void *d = be->alloc(be, n);
	if (!d) {
		fprintf(stderr, "bench_nvfp4_wgmma: out of device memory (%zu bytes)\n", n);
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

static void op_wg(shape_ctx *s) { CK(wg_gemm(s->v, s->x, &s->qw.q, s->m, s->y)); }
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

#define NRUN 15
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
	double max_abs;
	double sqnr_db; /* INFINITY when equal */
};

static cmp_res compare(const uint16_t *a, const uint16_t *ref, int64_t n)
{
	cmp_res r = {0, 0, 0.0, INFINITY};
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
			const double d = fabs(fa - fr);
			if (d > r.max_abs || d != d)
				r.max_abs = d;
		}
	}
	if (noise > 0 || noise != noise)
		r.sqnr_db = 10.0 * log10(sig / noise);
	return r;
}

/* For a failing variant: the first mismatches (more than 1% off) and how they spread. */
static void diagnose(const char *name, const uint16_t *a, const uint16_t *ref, int64_t m, int64_t n)
{
	int shown = 0;
	int64_t bad_el = 0, rowcnt[64] = {0}, colcnt[128] = {0};
	for (int64_t r = 0; r < m; r++)
		for (int64_t c = 0; c < n; c++) {
			const double fa = fos_bf16_to_f32(a[r * n + c]), fr = fos_bf16_to_f32(ref[r * n + c]);
			if (!(fabs(fa - fr) <= 0.01 * fabs(fr) + 1e-3)) {
				bad_el++;
				rowcnt[r % 64]++;
				colcnt[c % 128]++;
				if (shown < 8) {
					printf("  diag %s: y[%lld][%lld] = %g, want %g\n", name, (long long)r, (long long)c, fa, fr);
					shown++;
				}
			}
		}
	printf("  diag %s: %lld of %lld elements off by > 1%%; by row %% 64:", name, (long long)bad_el,
	       (long long)(m * n));
	for (int i = 0; i < 64; i++)
		printf(" %lld", (long long)rowcnt[i]);
	printf("\n  diag %s: by column %% 128:", name);
	for (int i = 0; i < 128; i++)
		printf(" %lld", (long long)colcnt[i]);
	printf("\n");
}

/* SQNR (dB) of cnt leading elements of y (bf16) against ref (double). */
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

static int no_timing;    /* smoke: checks only */
static int bad;          /* failed checks */
static int broken[NVAR]; /* a variant that hung or was wrong is not timed again */

static void check(int ok, const char *what)
{
	if (!ok) {
		printf("CHECK FAILED: %s\n", what);
		bad++;
	}
}

/* One shape: checks first (so a wrong variant is not timed), then the timings. */
static void run_shape(shape_ctx *s, int64_t m, int do_cold, const uint16_t *hx, const uint16_t *hw)
{
	char shape[64];
	snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)m, (long long)s->n, (long long)s->k);
	s->m = m;
	const int64_t n = s->n, k = s->k, ne = m * n;

	op_cur(s);
	uint16_t *yref = host_copy(s->y, ne);
	op_base(s);
	uint16_t *ybase = host_copy(s->y, ne);
	const int64_t rr = m < 16 ? m : 16;
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
	printf("check %s: plain cuBLASLt vs current path: %lld of %lld differ, max %d ulps, max |diff| %.3g, SQNR %.1f dB; "
	       "current path vs FP64 (rows 0..%lld): %.1f dB\n",
	       shape, (long long)cb.differ, (long long)ne, cb.max_ulps, cb.max_abs, cb.sqnr_db, (long long)rr - 1,
	       sqnr_f64(yref, ref, rr * n));
	for (int v = 0; v < NVAR; v++) {
		if (broken[v])
			continue;
		const variant *va = &variants[v];
		CK(be->zero(be, s->y, (size_t)ne * 2, &err));
		CK(wg_gemm(va, s->x, &s->qw.q, m, s->y));
		if (hung()) {
			printf("check %s: %s: A WAIT HUNG (gave up after 0.2 s)\n", shape, va->name);
			check(0, "no hung wait");
			broken[v] = 1;
			continue;
		}
		uint16_t *y1 = host_copy(s->y, ne);
		cmp_res c = compare(y1, yref, ne);
		printf("check %s: %s vs current path: %lld of %lld differ, max %d ulps, max |diff| %.3g, SQNR %.1f dB; "
		       "vs FP64 (rows 0..%lld): %.1f dB\n",
		       shape, va->name, (long long)c.differ, (long long)ne, c.max_ulps, c.max_abs, c.sqnr_db,
		       (long long)rr - 1, sqnr_f64(y1, ref, rr * n));
		if (!(c.sqnr_db >= 60.0)) {
			diagnose(va->name, y1, yref, m, n);
			broken[v] = 1;
		}
		check(c.sqnr_db >= 60.0, "SQNR against the current path >= 60 dB");
		free(y1);
	}
	fflush(stdout);

	if (no_timing) {
		free(ref);
		free(yref);
		free(ybase);
		return;
	}
	op ops[NVAR + 3];
	int nops = 0;
	for (int v = 0; v < NVAR; v++)
		if (!broken[v])
			ops[nops++] = op{variants[v].name, op_wg, &variants[v]};
	const int i_cur = nops, i_base = nops + 2;
	ops[nops++] = op{"current path: decode + be->gemm", op_cur, NULL};
	ops[nops++] = op{"be->gemm on a kept decoded W", op_gemm, NULL};
	ops[nops++] = op{"plain bf16 cuBLASLt GEMM", op_base, NULL};
	for (int cold = do_cold; cold >= 0; cold--) {
		double us[NVAR + 3];
		time_ops(s, ops, nops, cold, us);
		if (hung()) {
			printf("timing %s: A WAIT HUNG during the timed runs\n", shape);
			check(0, "no hung wait (timed runs)");
		}
		for (int i = 0; i < nops; i++)
			printf("| %s | %s | %s | %.1f us | %.2fx | %.2fx |\n", ops[i].name, shape,
			       cold ? "L2 flushed" : "hot", us[i], us[i] / us[i_base], us[i] / us[i_cur]);
		fflush(stdout);
	}
	free(ref);
	free(yref);
	free(ybase);
}

/* Bits run to run, over M (rows of every smaller M against the run at mmax) and across variants. */
static void check_bits(shape_ctx *s, int64_t mmax)
{
	const int64_t n = s->n;
	const int64_t ms[] = {1, 16, 128, 1024, 8192};
	uint16_t *yfirst = NULL;
	int vfirst = -1;
	for (int v = 0; v < NVAR; v++) {
		if (broken[v])
			continue;
		const variant *va = &variants[v];
		CK(wg_gemm(va, s->x, &s->qw.q, mmax, s->y));
		uint16_t *y1 = host_copy(s->y, mmax * n);
		CK(wg_gemm(va, s->x, &s->qw.q, mmax, s->y));
		uint16_t *y2 = host_copy(s->y, mmax * n);
		const int same_run = !memcmp(y1, y2, (size_t)(mmax * n) * 2);
		free(y2);
		int inv = 1;
		for (int a = 0; a < 5 && ms[a] < mmax; a++) {
			CK(be->zero(be, s->y, (size_t)(mmax * n) * 2, &err));
			CK(wg_gemm(va, s->x, &s->qw.q, ms[a], s->y));
			uint16_t *yc = host_copy(s->y, ms[a] * n);
			if (memcmp(yc, y1, (size_t)(ms[a] * n) * 2))
				inv = 0;
			free(yc);
		}
		const int h = hung();
		printf("check %lldx%lldx%lld: %s: run to run %s; over M in {1, 16, 128, 1024, 8192} up to %lld: %s%s",
		       (long long)mmax, (long long)n, (long long)s->k, va->name, same_run ? "same bits" : "BITS DIFFER",
		       (long long)mmax, inv ? "each row's bits independent of M" : "ROW BITS DEPEND ON M",
		       h ? " (A WAIT HUNG)" : "");
		if (vfirst < 0) {
			yfirst = y1;
			vfirst = v;
		} else {
			printf("; vs %s: %s", variants[vfirst].name,
			       !memcmp(y1, yfirst, (size_t)(mmax * n) * 2) ? "same bits" : "bits differ");
			free(y1);
		}
		printf("\n");
		check(same_run, "same bits run to run");
		check(inv, "batch invariance");
		check(!h, "no hung wait (bit checks)");
	}
	free(yfirst);
	fflush(stdout);
}

static void run_k(int64_t k, const int64_t *mlist, int nm, int do_cold)
{
	const int64_t n = 4096, mmax = mlist[nm - 1] > 1024 ? mlist[nm - 1] : 1024;
	shape_ctx s;
	memset(&s, 0, sizeof s);
	s.n = n;
	s.k = k;
	uint16_t *x = dev_rand(mmax * k, 0.5f);
	s.x = x;
	uint16_t *w = dev_rand(n * k, 0.5f);
	fos_linear_opts o = fos_linear_opts_default();
	CK(fos_qweight_make_uses(be, w, n, k, &o, FOS_USE_FORWARD, &s.qw, &err));
	be->free(be, w);
	s.wdec = (uint16_t *)dev_alloc((size_t)(n * k) * 2);
	s.scratch = (uint16_t *)dev_alloc((size_t)(n * k) * 2);
	CK(fos_qweight_decode(be, &s.qw, 0, s.wdec, &err));
	s.y = (uint16_t *)dev_alloc((size_t)(mmax * n) * 2);
	uint16_t *hx = host_copy(x, 16 * k), *hw = host_copy(s.wdec, n * k);
	char desc[128];
	for (int i = 0; i < nm; i++) {
		run_shape(&s, mlist[i], do_cold, hx, hw);
		if (fos_cuda_gemm_describe(be, mlist[i], n, k, desc, sizeof desc, &err) == FOS_OK)
			printf("be->gemm at %lldx%lldx%lld: %s\n", (long long)mlist[i], (long long)n, (long long)k, desc);
	}
	check_bits(&s, mmax);
	free(hx);
	free(hw);
	be->free(be, s.y);
	be->free(be, s.scratch);
	be->free(be, s.wdec);
	be->free(be, x);
	fos_qweight_free(be, &s.qw);
}

int main(int argc, char **argv)
{
	int do_cold = 1, smoke = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "hot"))
			do_cold = 0;
		else if (!strcmp(argv[i], "smoke"))
			smoke = 1;
		else if (!strncmp(argv[i], "vars=", 5)) {
			for (int v = 0; v < NVAR; v++)
				broken[v] = 1;
			for (const char *p = argv[i] + 5; *p;) {
				char *e;
				const long v = strtol(p, &e, 10);
				if (e == p || v < 0 || v >= NVAR) {
					fprintf(stderr, "bench_nvfp4_wgmma: bad vars= list\n");
					return 2;
				}
				broken[v] = 0;
				p = *e == ',' ? e + 1 : e;
			}
		} else {
			fprintf(stderr, "usage: bench_nvfp4_wgmma [hot] [smoke] [vars=I,J,...]\n");
			return 2;
		}
	}
	be = fos_backend_cuda(0, &err);
	if (!be) {
		printf("bench_nvfp4_wgmma: no usable GPU (%s): nothing to measure\n", err.msg);
		return 0;
	}
	cudaDeviceProp pr;
	CU(cudaGetDeviceProperties(&pr, fcu(be)->dev));
	if (pr.major != 9) {
		printf("bench_nvfp4_wgmma: %s is sm_%d%d, the kernel needs sm_90a: nothing to measure\n", pr.name, pr.major,
		       pr.minor);
		return 0;
	}
	cudaDriverEntryPointQueryResult qr;
	void *fn = NULL;
	CU(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr));
	if (!fn || qr != cudaDriverEntryPointSuccess) {
		printf("bench_nvfp4_wgmma: no cuTensorMapEncodeTiled in the driver\n");
		return 1;
	}
	encode_tiled = (PFN_cuTensorMapEncodeTiled_v12000)fn;
	printf("bench_nvfp4_wgmma on %s (%d SMs)\n", be->device, pr.multiProcessorCount);
	for (int v = 0; v < NVAR; v++) {
		cudaFuncAttributes fa;
		CU(cudaFuncSetAttribute((const void *)variants[v].fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
					variants[v].smem));
		CU(cudaFuncGetAttributes(&fa, (const void *)variants[v].fn));
		int per_sm = 0;
		CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)variants[v].fn, variants[v].threads,
								 variants[v].smem));
		variants[v].grid_cap = per_sm * pr.multiProcessorCount;
		printf("%d: %s: %d registers, %zu bytes spilled (local), %d bytes dynamic shared, %d threads, %d CTAs per SM%s\n",
		       v, variants[v].name, fa.numRegs, (size_t)fa.localSizeBytes, variants[v].smem, variants[v].threads, per_sm,
		       broken[v] ? " (not run)" : "");
		if (per_sm < 1) {
			printf("%s: cannot be launched\n", variants[v].name);
			broken[v] = 1;
			bad++;
		}
	}
	flush_buf = dev_alloc(flush_bytes);
	printf("\n| path | MxNxK | L2 | median of %d | vs plain bf16 | vs decode + be->gemm |\n|---|---|---|---|---|---|\n",
	       NRUN);
	const int64_t m4096[] = {16, 128, 1024, 8192}, m14336[] = {16}, msmoke[] = {128};
	if (smoke) {
		no_timing = 1;
		run_k(4096, msmoke, 1, 0);
	} else {
		run_k(4096, m4096, 4, do_cold);
		run_k(14336, m14336, 1, do_cold);
	}
	be->free(be, flush_buf);
	be->destroy(be);
	printf("%s: %d failed checks\n", bad ? "FAILED" : "OK", bad);
	return bad ? 1 : 0;
}
