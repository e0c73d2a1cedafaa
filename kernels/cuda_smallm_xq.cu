/* cuda_smallm_xq.cu: the CUDA quantize op's one-launch path for small per-tensor bf16 inputs, 1x16
 * blocks (a small-M forward's X): the amax, the 4/6 (NUMERICS.md section 3) or plain NVFP4 (section 5)
 * quantize and the decoded operand in ONE kernel launch, where the general path queues a memset, the
 * amax kernel and the quantize kernel (about 8.5 us of a graph-replayed forward at M = 1, BENCHMARKS.md
 * session 8).
 *
 * How: one thread block cluster of C <= 8 CTAs (Hopper) covers the tensor; thread t of CTA r holds
 * blocks r QT + t + i C QT (i < PB) in registers, reduces their amax within the CTA, and the CTAs
 * exchange their maxima through distributed shared memory between two cluster barriers: every CTA
 * then knows the tensor's amax, each input byte is read once, and no global counter or memset is
 * needed. Then each CTA quantizes its blocks exactly as k_q46_pt / k_grad_1x16 do.
 *
 * Invariants: the bytes (codes, scales, amax, decoded) are those of the general path (the same amax:
 * max of |x| with NaN dropped, exact and order-free; the same per-tensor tables fcu_pt_setup and
 * block functions fcu_blk46 / fcu_blk_grad of cuda_qblock.cuh, the hardware e4m3 conversion as
 * fcu_qargs chooses). Taken only when the caller gives no amax, the input is bf16, 16-byte aligned,
 * per tensor, 1x16 blocks, and nblk <= 8 * QT * 4 (fcu_xq_takes). */
#include "cuda_internal.cuh"
#include "cuda_qblock.cuh"

#include <cooperative_groups.h>
#include <stdint.h>

namespace cg = cooperative_groups;

#define QT FCU_QT
#define XQ_MAXC 8  /* CTAs per cluster (the portable limit) */
#define XQ_MAXPB 4 /* blocks per thread */

template <int PB, bool GRAD, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT) k_xq(const uint16_t *__restrict__ x, int nblk, float d, uint8_t *__restrict__ codes,
					   uint8_t *__restrict__ scales, float *__restrict__ amax_out,
					   uint16_t *__restrict__ dec)
{
	__shared__ fcu_pt_smem sm;
	__shared__ float part[QT / 32];
	__shared__ float cta_max, all_max;
	cg::cluster_group cl = cg::this_cluster();
	const int nc = (int)cl.num_blocks(), rank = (int)cl.block_rank(), t = threadIdx.x;
	fcu_raw<uint16_t> r[PB];
	float m = 0.0f;
#pragma unroll
	for (int i = 0; i < PB; i++) {
		const int b = rank * QT + t + i * nc * QT;
		if (b < nblk) {
			fcu_load(x + 16 * (int64_t)b, r[i]);
			float xf[16];
			fcu_unpack(r[i], xf);
#pragma unroll
			for (int j = 0; j < 16; j++)
				m = fmaxf(m, fabsf(xf[j])); /* = fos_absmax: drops NaN */
		}
	}
#pragma unroll
	for (int o = 16; o >= 1; o >>= 1)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	if ((t & 31) == 0)
		part[t >> 5] = m;
	__syncthreads();
	if (t == 0) {
		float c = 0.0f;
		for (int w = 0; w < QT / 32; w++)
			c = fmaxf(c, part[w]);
		cta_max = c;
	}
	cl.sync(); /* every CTA's cta_max written */
	if (t == 0) {
		float a = 0.0f;
		for (int q = 0; q < nc; q++)
			a = fmaxf(a, *cl.map_shared_rank(&cta_max, q));
		all_max = a;
		if (rank == 0)
			amax_out[0] = a;
	}
	cl.sync(); /* all_max visible in this CTA; no CTA reads another's cta_max after this */
	const float a = all_max;
	const float dd = GRAD ? 2688.0f : d;
	const float s_enc = fos_s_enc(a, dd), s_dec = FOS_DIV(1.0f, s_enc);
	fcu_pt_setup(sm, a, dd, s_dec, !GRAD, DEC);
	const float r6 = FOS_DIV(1.0f, 6.0f), g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
	const uint32_t svt0 = (uint32_t)__cvta_generic_to_shared(sm.svt);
#pragma unroll
	for (int i = 0; i < PB; i++) {
		const int b = rank * QT + t + i * nc * QT;
		if (b < nblk) {
			uint32_t sf;
			const uint64_t cw = GRAD ? fcu_blk_grad<uint16_t>(r[i], g, 1, sm, &sf)
						 : fcu_blk46<uint16_t, MSE>(r[i], s_enc, r6, 1, sm, svt0, &sf);
			fcu_store_pt<DEC>(b, cw, sf, codes, scales, dec, sm.sdec);
		}
	}
}

int fcu_xq_takes(const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg, const float *amax_in)
{
	const int64_t nblk = rows * cols / 16;
	return !amax_in && dtype == FOS_BF16 && !cfg->row_scaled && cfg->block == FOS_BLOCK_1X16 && fcu_aligned(x, 16) &&
	       nblk >= 1 && nblk <= (int64_t)XQ_MAXC * QT * XQ_MAXPB;
}

template <int PB, bool GRAD, bool MSE, bool DEC>
static cudaError_t xq_launch(cudaStream_t st, int nc, const uint16_t *x, int nblk, float d, fos_qtensor *q,
			     uint16_t *dec)
{
	cudaLaunchConfig_t lc = {};
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeClusterDimension;
	at[0].val.clusterDim.x = (unsigned)nc;
	at[0].val.clusterDim.y = 1;
	at[0].val.clusterDim.z = 1;
	lc.gridDim = dim3((unsigned)nc);
	lc.blockDim = dim3(QT);
	lc.dynamicSmemBytes = 0;
	lc.stream = st;
	lc.attrs = at;
	lc.numAttrs = 1;
	return cudaLaunchKernelEx(&lc, k_xq<PB, GRAD, MSE, DEC>, x, nblk, d, q->codes, q->scales, q->amax, dec);
}

template <bool GRAD, bool MSE, bool DEC>
static cudaError_t xq_pb(cudaStream_t st, int nc, int pb, const uint16_t *x, int nblk, float d, fos_qtensor *q,
			 uint16_t *dec)
{
	if (pb == 1)
		return xq_launch<1, GRAD, MSE, DEC>(st, nc, x, nblk, d, q, dec);
	if (pb == 2)
		return xq_launch<2, GRAD, MSE, DEC>(st, nc, x, nblk, d, q, dec);
	return xq_launch<4, GRAD, MSE, DEC>(st, nc, x, nblk, d, q, dec);
}

int fcu_xq_small(fos_backend *be, const void *x, int64_t rows, int64_t cols, const fos_qcfg *cfg, fos_qtensor *q,
		 uint16_t *dec, fos_err *err)
{
	const int nblk = (int)(rows * cols / 16);
	int nc = (nblk + QT - 1) / QT;
	nc = nc > XQ_MAXC ? XQ_MAXC : nc;
	const int per = (nblk + nc * QT - 1) / (nc * QT), pb = per <= 1 ? 1 : per <= 2 ? 2 : 4;
	const float d = fos_bound_d(cfg->bound);
	const bool grad = cfg->recipe == FOS_RECIPE_NVFP4, mse = cfg->err_mode == FOS_ERR_MSE;
	const uint16_t *xb = static_cast<const uint16_t *>(x);
	cudaStream_t st = fcu(be)->st;
	cudaError_t e;
	if (grad)
		e = dec ? xq_pb<true, false, true>(st, nc, pb, xb, nblk, d, q, dec)
			: xq_pb<true, false, false>(st, nc, pb, xb, nblk, d, q, dec);
	else if (mse)
		e = dec ? xq_pb<false, true, true>(st, nc, pb, xb, nblk, d, q, dec)
			: xq_pb<false, true, false>(st, nc, pb, xb, nblk, d, q, dec);
	else
		e = dec ? xq_pb<false, false, true>(st, nc, pb, xb, nblk, d, q, dec)
			: xq_pb<false, false, false>(st, nc, pb, xb, nblk, d, q, dec);
	fcu_qset(q, rows, cols, cfg);
	return fcu_check(e, err, "quantize (one-launch small path) kernel launch");
}
