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
 *     Warpgroup 0 is the producer: its thread 0 loads the x tile (BM x 64 bf16) by TMA (128-byte
 *     swizzle, rows past M read as zeros) onto the stage's "full" mbarrier; all 128 producer threads
 *     copy their W bytes (codes and the row's 4 scale bytes of the step) with cp.async into a
 *     private R-slot ring (R - 1 steps ahead), decode them with the byte permutes of fcu_dec_words
 *     (cuda_q46.cuh) from a 2 KiB table of the 8 magnitudes of each scale byte, store the bf16 W
 *     tile (BN x 64) in the same 128-byte swizzled K-major layout the TMA writes (16-byte chunk c of
 *     row r at r * 128 + ((c ^ (r % 8)) * 16)), fence the generic stores for the async proxy and
 *     arrive on "full". The consumers wait on "full", issue 4 wgmma.mma_async m64nBNk16 (bf16, FP32
 *     accumulators in registers, both operands K-major from shared memory through descriptors:
 *     128-byte swizzle, 1024-byte stride between 8-row groups, the start advanced 32 bytes per k16),
 *     keep one wgmma group in flight, free a stage on its "empty" mbarrier once its group is
 *     complete, and write the bf16 cast of a finished tile from the accumulators.
 *   - Cluster variants (CL CTAs along N, consecutive tiles of the same rows): the CTAs share the x
 *     tile, rank r loading rows r BM / CL .. of it into all of them (TMA multicast), and a stage is
 *     reused only once the consumers of every CTA of the cluster have released it.
 *   - Every output's FP32 sum is the same sequence of k16 steps in K order whatever the tile shape,
 *     the grid or M (no split-K, nothing chosen by M): bits are deterministic and do not depend on M
 *     (batch-invariant).
 *   - Needs N % (BN CL) == 0, K % 64 == 0, codes 16-byte and scales 4-byte aligned (the launcher
 *     refuses other operands); any M >= 1.
 *   - A wait on an mbarrier gives up after about 0.2 s, sets a device flag and lets the CTA run to
 *     its end (garbage out): the bench reports the variant as hung instead of hanging.
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

/* The same with cluster-scope acquire: for a barrier that consumers of other CTAs arrive on. */
__device__ __forceinline__ uint32_t mbar_try_cl(uint32_t bar, uint32_t parity)
{
	uint32_t ok;
	asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
		     "selp.u32 %0, 1, 0, p;\n}\n"
		     : "=r"(ok)
		     : "r"(bar), "r"(parity)
		     : "memory");
	return ok;
}

/* Arrive on the barrier at CTA-relative address bar of CTA `rank` of this cluster (cluster-scope
 * release). */
__device__ __forceinline__ void mbar_arrive_cl(uint32_t bar, uint32_t rank)
{
	uint32_t r;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(bar), "r"(rank));
	asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(r) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank(void)
{
	uint32_t r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}

/* Every thread of every CTA of the cluster. */
__device__ __forceinline__ void cluster_sync(void)
{
	asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ uint64_t gtimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Waits for the phase of parity `parity` of bar (try_wait suspends the thread until the phase
 * completes or a hardware time limit passes; CL: with cluster-scope acquire); after about 0.2 s sets
 * g_hung and returns, and returns soon while g_hung is set (one hung wait does not make every later
 * one wait too). */
template <bool CL = false> __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
	if (CL ? mbar_try_cl(bar, parity) : mbar_try(bar, parity))
		return;
	const uint64_t t0 = gtimer();
	for (uint32_t spins = 1;; spins++) {
		if (CL ? mbar_try_cl(bar, parity) : mbar_try(bar, parity))
			return;
		if ((spins & 15u) == 0) { /* the clock and the flag only now and then: a global load is slow */
			if (*(volatile unsigned int *)&g_hung)
				return;
			if (gtimer() - t0 > 200000000ull) {
				atomicExch(&g_hung, 1u);
				return;
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

/* The same box, written at the same offset of every CTA of the cluster in mask, each completing
 * on its own barrier at offset bar. */
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
					       uint16_t mask)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
		     "[%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
		     "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
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

template <int BM, int BN, int S, int R> struct wg_cfg {
	static constexpr int C = BM / 64;                  /* consumer warpgroups */
	static constexpr int NT = 128 * (1 + C);           /* threads */
	static constexpr int RPT = BN > 128 ? BN / 128 : 1; /* W rows per producer thread */
	static constexpr int TPR = BN < 128 ? 128 / BN : 1; /* producer threads per W row */
	static constexpr int CBR = 32 / TPR;               /* code bytes of one row per producer thread per step */
	static constexpr int NB = CBR / 8;                 /* 1x16 blocks of one row per producer thread per step */
	static constexpr int CB = RPT * CBR;               /* code bytes per producer thread per step */
	static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
	static constexpr int RAW_C = R * 128 * CB, RAW_S = R * 128 * 4 * RPT;
	static constexpr int SMEM = S * (A_BYTES + B_BYTES) + RAW_C + RAW_S + 2048 + 16 * S + 1024;
	static_assert(BM == 64 || BM == 128, "BM");
	static_assert(BN == 32 || BN == 64 || BN == 128 || BN == 256, "BN");
	static_assert(S >= 3 && R >= 2, "stages");
};

/* Tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... of the (M / BM) x (N / BN) tile grid, N fastest
 * (a grid of one CTA per tile, or a persistent one). Both roles walk the same sequence of steps
 * (tile, k step); step g uses stage g % S in its round g / S and raw slot g % R. With CL > 1 the CTAs
 * of a cluster of CL along N (consecutive tiles: the same rows of x, gridDim.x and N / BN multiples
 * of CL) share the x tile: CTA rank r loads rows r BM / CL .. of it for all of them (TMA multicast),
 * and a stage is free once the consumers of every CTA of the cluster have arrived on its "empty"
 * barrier (each consumer warp arrives on that barrier in all CL CTAs). */
template <int BM, int BN, int S, int R, int CL>
__global__ void __launch_bounds__(wg_cfg<BM, BN, S, R>::NT, 1)
	k_wg(const __grid_constant__ CUtensorMap xmap, const uint8_t *__restrict__ codes,
	     const uint8_t *__restrict__ scales, int m, int n, int k, uint16_t *__restrict__ y)
{
	typedef wg_cfg<BM, BN, S, R> cfg;
	extern __shared__ uint8_t smraw[];
	const uint32_t pad = (1024u - (smem_u32(smraw) & 1023u)) & 1023u;
	uint8_t *sm = smraw + pad;
	uint8_t *sA = sm, *sB = sA + S * cfg::A_BYTES, *rc = sB + S * cfg::B_BYTES, *rs = rc + cfg::RAW_C;
	uint16_t *tab = reinterpret_cast<uint16_t *>(rs + cfg::RAW_S); /* bf16(e2m1 magnitude c * float(sf)), [sf][c] */
	uint64_t *bars = reinterpret_cast<uint64_t *>(tab + 1024);     /* full[S], empty[S] */
	const int tid = threadIdx.x;
	for (int i = tid; i < 128 * 8; i += cfg::NT)
		tab[i] = fos_f32_to_bf16(FOS_MUL(fos_e2m1_value((uint32_t)i & 7u), fos_e4m3_to_f32((uint32_t)i >> 3)));
	if (tid == 0) {
		for (int s = 0; s < S; s++) {
			mbar_init(smem_u32(bars + s), 129);           /* 128 producer threads + the TMA issuer's expect_tx */
			mbar_init(smem_u32(bars + S + s), 4 * cfg::C * CL); /* lane 0 of every consumer warp of the cluster */
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();
	if constexpr (CL > 1)
		cluster_sync(); /* the peers' barriers are initialized before anyone arrives on them */
	const uint32_t rank = CL > 1 ? cluster_rank() : 0;

	const int nk = k / WG_BK, ntn = n / BN, ntiles = ntn * ((m + BM - 1) / BM);
	const int t0 = blockIdx.x, tstep = gridDim.x;
	if (tid < 128) {
		/* producer: row rr of thread tid is W row n0 + tid / TPR + rr * (128 / TPR), its code bytes
		 * part * CBR .. + CBR - 1 of each step's 32 */
		const int part = tid % cfg::TPR, row0 = tid / cfg::TPR;
		const int64_t kc = k / 2, ksc = k / 16;
		const uint32_t myc = smem_u32(rc) + tid * cfg::CB, mys = smem_u32(rs) + tid * 4 * cfg::RPT;
		/* the copy stream, R - 1 steps ahead: (it, iks) is the next step to copy */
		int it = t0, iks = 0, islot = 0;
		auto issue = [&]() {
			if (it < ntiles) {
				const int n0 = (it % ntn) * BN;
				const uint32_t dc = myc + islot * 128 * cfg::CB, ds = mys + islot * 512 * cfg::RPT;
#pragma unroll
				for (int rr = 0; rr < cfg::RPT; rr++) {
					const int64_t r = n0 + row0 + rr * (128 / cfg::TPR);
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
#pragma unroll 1
		for (int i = 0; i < R - 1; i++)
			issue();
		int s = 0, ph = 0, slot = 0;
#pragma unroll 1
		for (int t = t0; t < ntiles; t += tstep) {
			const int m0 = (t / ntn) * BM;
#pragma unroll 1
			for (int ks = 0; ks < nk; ks++) {
				issue();
				cp_wait<R - 1>();
				uint32_t cw[cfg::CB / 4], sfw[cfg::RPT];
				const uint8_t *pc = rc + slot * 128 * cfg::CB + tid * cfg::CB;
				if constexpr (cfg::CB >= 16) {
#pragma unroll
					for (int q = 0; q < cfg::CB / 16; q++) {
						const uint4 v = reinterpret_cast<const uint4 *>(pc)[q];
						cw[4 * q] = v.x;
						cw[4 * q + 1] = v.y;
						cw[4 * q + 2] = v.z;
						cw[4 * q + 3] = v.w;
					}
				} else {
					const uint2 v = *reinterpret_cast<const uint2 *>(pc);
					cw[0] = v.x;
					cw[1] = v.y;
				}
#pragma unroll
				for (int rr = 0; rr < cfg::RPT; rr++)
					sfw[rr] = reinterpret_cast<const uint32_t *>(rs + slot * 512 * cfg::RPT + tid * 4 * cfg::RPT)[rr];
				mbar_wait<(CL > 1)>(smem_u32(bars + S + s), ph ^ 1);
				if (tid == 0) {
					if constexpr (CL > 1) {
						/* slices wholly past row M are not loaded (their rows' outputs are not
						 * stored): nsl slices land here, from ranks 0 .. nsl - 1 */
						constexpr int SR = BM / CL;
						const int left = m - m0, nsl = left >= BM ? CL : (left + SR - 1) / SR;
						mbar_arrive_tx(smem_u32(bars + s), (uint32_t)(nsl * SR * 128));
						if ((int)rank < nsl)
							tma_load_2d_mc(smem_u32(sA + s * cfg::A_BYTES) + rank * SR * 128, &xmap,
								       ks * WG_BK, m0 + (int)rank * SR, smem_u32(bars + s),
								       (uint16_t)((1u << CL) - 1u));
					} else {
						mbar_arrive_tx(smem_u32(bars + s), cfg::A_BYTES);
						tma_load_2d(smem_u32(sA + s * cfg::A_BYTES), &xmap, ks * WG_BK, m0,
							    smem_u32(bars + s));
					}
				}
				const uint32_t bst = smem_u32(sB) + s * cfg::B_BYTES;
#pragma unroll
				for (int rr = 0; rr < cfg::RPT; rr++) {
					const int row = row0 + rr * (128 / cfg::TPR);
					const uint32_t rb = bst + row * 128, sw = (uint32_t)(row & 7);
#pragma unroll
					for (int b = 0; b < cfg::NB; b++) {
						const int bi = part * cfg::NB + b; /* the 1x16 block of the row's 64 k */
						const uint32_t sf = (sfw[rr] >> (8 * bi)) & 0x7Fu;
						const uint4 t4 = *reinterpret_cast<const uint4 *>(tab + sf * 8);
						const int w = rr * (cfg::CBR / 4) + 2 * b;
						uint32_t o[8];
						fcu_dec_words((uint64_t)cw[w] | ((uint64_t)cw[w + 1] << 32), sf, t4.x, t4.y, t4.z, t4.w, o);
						const uint32_t c0 = (uint32_t)(2 * bi), c1 = c0 + 1;
						asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(rb + ((c0 ^ sw) << 4)),
							     "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3])
							     : "memory");
						asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(rb + ((c1 ^ sw) << 4)),
							     "r"(o[4]), "r"(o[5]), "r"(o[6]), "r"(o[7])
							     : "memory");
					}
				}
				fence_async_smem();
				mbar_arrive(smem_u32(bars + s));
				if (++s == S) {
					s = 0;
					ph ^= 1;
				}
				if (++slot == R)
					slot = 0;
			}
		}
		cp_wait<0>();
	} else {
		/* consumers: warpgroup wg owns rows m0 + 64 wg .. + 63 of each tile */
		const int wg = tid / 128 - 1, warp = (tid % 128) / 32, lane = tid % 32;
		const int g = lane >> 2, tq = lane & 3;
		const uint32_t a0 = smem_u32(sA) + wg * 64 * 128, b0 = smem_u32(sB);
		int s = 0, ph = 0;
		auto release = [&](int st) {
			if constexpr (CL > 1) {
#pragma unroll
				for (int r = 0; r < CL; r++)
					mbar_arrive_cl(smem_u32(bars + S + st), (uint32_t)r);
			} else {
				mbar_arrive(smem_u32(bars + S + st));
			}
		};
		float acc[BN / 2];
#pragma unroll 1
		for (int t = t0; t < ntiles; t += tstep) {
#pragma unroll
			for (int i = 0; i < BN / 2; i++)
				acc[i] = 0.0f;
			int sprev = 0;
#pragma unroll 1
			for (int ks = 0; ks < nk; ks++) {
				mbar_wait(smem_u32(bars + s), ph);
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
					release(sprev); /* the previous step's group is complete */
				sprev = s;
				if (++s == S) {
					s = 0;
					ph ^= 1;
				}
			}
			wg_wait<0>();
			acc_fence<BN / 2>(acc);
			if (lane == 0)
				release(sprev);
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
	if constexpr (CL > 1)
		cluster_sync(); /* no CTA leaves while a peer may still multicast into it or arrive on its barriers */
}

/* ---- the launcher ------------------------------------------------------------------------------ */

typedef void (*kern_fn)(const CUtensorMap, const uint8_t *, const uint8_t *, int, int, int, uint16_t *);

struct variant {
	const char *name;
	kern_fn fn;
	int bm, bn, smem, threads;
	int persistent; /* grid: as many CTAs as fit at once (a loop over tiles), else one CTA per tile */
	int cl;         /* cluster size along N (x tile multicast), 1: none */
	int grid_cap;   /* set at start for a persistent variant */
};

#define VAR(bm, bn, s, r, p, cl, sfx)                                                                          \
	{"wgmma BM " #bm " BN " #bn " S " #s " R " #r sfx,                                                     \
	 k_wg<bm, bn, s, r, cl>,                                                                               \
	 bm,                                                                                                   \
	 bn,                                                                                                   \
	 wg_cfg<bm, bn, s, r>::SMEM,                                                                           \
	 wg_cfg<bm, bn, s, r>::NT,                                                                             \
	 p,                                                                                                    \
	 cl,                                                                                                   \
	 0}
static variant variants[] = {
	VAR(128, 128, 4, 8, 0, 1, ""),
	VAR(128, 128, 4, 8, 1, 1, " persistent"),
	VAR(128, 128, 4, 8, 1, 2, " persistent, cluster 2"),
	VAR(128, 256, 3, 6, 1, 1, " persistent"),
	VAR(128, 256, 4, 3, 1, 1, " persistent"),
	VAR(128, 256, 4, 3, 1, 2, " persistent, cluster 2"),
	VAR(64, 64, 6, 12, 0, 1, ""),
	VAR(64, 64, 6, 12, 0, 2, ", cluster 2"),
	VAR(64, 32, 6, 16, 0, 1, ""),
	VAR(64, 32, 6, 16, 0, 4, ", cluster 4"),
	VAR(128, 32, 6, 16, 0, 1, ""),
	VAR(128, 32, 6, 16, 0, 4, ", cluster 4"),
};
#define NVAR ((int)(sizeof variants / sizeof variants[0]))

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

/* Tensor maps of x (boxes of 64 k x `rows` rows) for (pointer, M, K, rows), encoded once and reused
 * (host work kept out of the timed runs). */
struct tmap_ent {
	const void *x;
	int64_t m, k;
	int bm;
	CUtensorMap map;
};
static tmap_ent tmaps[64];
static int ntmaps;

static const CUtensorMap *x_map(const uint16_t *x, int64_t m, int64_t k, int bm)
{
	for (int i = 0; i < ntmaps; i++)
		if (tmaps[i].x == x && tmaps[i].m == m && tmaps[i].k == k && tmaps[i].bm == bm)
			return &tmaps[i].map;
	if (ntmaps == 64)
		ntmaps = 0;
	tmap_ent *e = &tmaps[ntmaps++];
	e->x = x;
	e->m = m;
	e->k = k;
	e->bm = bm;
	const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)m};
	const cuuint64_t strides[1] = {(cuuint64_t)k * 2};
	const cuuint32_t box[2] = {WG_BK, (cuuint32_t)bm};
	const cuuint32_t estr[2] = {1, 1};
	const CUresult r = encode_tiled(&e->map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)x, dims, strides, box, estr,
					CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
					CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "bench_nvfp4_wgmma: cuTensorMapEncodeTiled failed (%d) for %lldx%lld\n", (int)r,
			(long long)m, (long long)k);
		exit(1);
	}
	return &e->map;
}

static int wg_gemm(const variant *v, const uint16_t *x, const fos_qtensor *q, int64_t m, uint16_t *y)
{
	const int64_t n = q->rows, k = q->cols;
	if (m < 1 || n % (v->bn * v->cl) || k % WG_BK || k > (1 << 30) || (n / v->bn) * ((m + v->bm - 1) / v->bm) > (1 << 30) ||
	    ((uintptr_t)q->codes & 15u) || ((uintptr_t)q->scales & 3u) || ((uintptr_t)x & 15u))
		return fos_seterr(&err, FOS_EINVAL, "%s: shape %lldx%lldx%lld or alignment not taken", v->name,
				  (long long)m, (long long)n, (long long)k);
	const CUtensorMap *map = x_map(x, m, k, v->bm / v->cl);
	const int64_t tiles = (n / v->bn) * ((m + v->bm - 1) / v->bm);
	const int64_t grid = v->persistent && tiles > v->grid_cap ? v->grid_cap : tiles; /* a multiple of cl */
	if (v->cl == 1) {
		v->fn<<<(unsigned)grid, v->threads, v->smem, fcu(be)->st>>>(*map, q->codes, q->scales, (int)m, (int)n,
									      (int)k, y);
		return fcu_launched(&err, v->name);
	}
	cudaLaunchConfig_t lc = {};
	cudaLaunchAttribute at[1] = {};
	at[0].id = cudaLaunchAttributeClusterDimension;
	at[0].val.clusterDim.x = (unsigned)v->cl;
	at[0].val.clusterDim.y = 1;
	at[0].val.clusterDim.z = 1;
	lc.gridDim = dim3((unsigned)grid);
	lc.blockDim = dim3((unsigned)v->threads);
	lc.dynamicSmemBytes = (size_t)v->smem;
	lc.stream = fcu(be)->st;
	lc.attrs = at;
	lc.numAttrs = 1;
	const cudaError_t e = cudaLaunchKernelEx(&lc, v->fn, *map, q->codes, q->scales, (int)m, (int)n, (int)k, y);
	if (e != cudaSuccess)
		return fos_seterr(&err, FOS_EINTERNAL, "%s: launch: %s", v->name, cudaGetErrorString(e));
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
		if (variants[v].cl > 1) {
			/* clusters: as many as fit at once, times their size */
			cudaLaunchConfig_t lc = {};
			cudaLaunchAttribute at[1] = {};
			at[0].id = cudaLaunchAttributeClusterDimension;
			at[0].val.clusterDim.x = (unsigned)variants[v].cl;
			at[0].val.clusterDim.y = 1;
			at[0].val.clusterDim.z = 1;
			lc.gridDim = dim3((unsigned)(variants[v].cl * 64));
			lc.blockDim = dim3((unsigned)variants[v].threads);
			lc.dynamicSmemBytes = (size_t)variants[v].smem;
			lc.attrs = at;
			lc.numAttrs = 1;
			int ncl = 0;
			if (cudaOccupancyMaxActiveClusters(&ncl, (const void *)variants[v].fn, &lc) != cudaSuccess || ncl < 1) {
				(void)cudaGetLastError();
				printf("%s: no cluster of %d fits\n", variants[v].name, variants[v].cl);
				per_sm = 0;
			}
			variants[v].grid_cap = ncl * variants[v].cl;
		}
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
