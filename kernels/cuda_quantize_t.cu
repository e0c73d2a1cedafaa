/* cuda_quantize_t.cu: the CUDA backend's quantize_t op: the quantizers of fcu_quantize (4/6 1x16
 * and 16x16 per tensor, plain NVFP4 1x16 and 16x16 per tensor) on an input stored transposed, read in place
 * through shared-memory tiles streamed by the cp.async ring of cuda_ring.cuh. The per-block
 * arithmetic is that of the rowwise kernels (fcu_blk46 / fcu_blk46_tile / fcu_blk_grad / fcu_blk_grad_tile
 * of cuda_qblock.cuh), so the outputs are those of fcu_quantize on the transpose, bit for bit. */
#include "cuda_internal.cuh"
#include "cuda_q46.cuh"
#include "cuda_qblock.cuh"
#include "cuda_ring.cuh"

#include <stdint.h>

#define QT FCU_QT

enum { FCU_QT_46 = 0, FCU_QT_46_TILE = 1, FCU_QT_GRAD = 2, FCU_QT_GRAD_TILE = 3 };

/* ---- quantize of an input stored transposed (quantize_t) ------------------------------------- */

/* The logical (rows, cols) tensor is X[r, c] = x[c * rows + r]: its 1x16 block (r, b) is a strip
 * of 16 stored rows in one stored column. A CTA takes a tile of QTT_R logical rows x QTT_C logical
 * columns (QTT_C / 16 = 4 blocks per logical row): the tile's QTT_C stored rows of QTT_R elements
 * (one 128-byte line each for bf16, two for f32) are copied into a ring buffer with 16-byte
 * cp.async (zero-filled past the edges); then each thread gathers one block's 16 elements from a
 * stored column of the tile and runs the same per-block arithmetic as the rowwise kernels
 * (fcu_blk46 / fcu_blk46_tile / fcu_blk_grad). Lane mapping: the W blocks of a logical row on W
 * neighbouring lanes (W = 4; 2 for 16x16, whose 16 row-groups must share a warp), so a warp's code
 * and decoded stores cover whole 32-byte sectors of consecutive logical rows. In a tile buffer,
 * stored row j starts at j * QTT_R + (j / 16) * (32 / W) elements: the skew puts the strips of a
 * warp's W blocks on disjoint banks, and the 16-byte copies stay conflict-free. The tiles are the
 * work items of a cp.async ring (cuda_ring.cuh): up to 3 tiles (24 KiB of bf16) in flight per CTA
 * while one is worked on. Tiles are walked in stored order (rev: from the end, as the rowwise
 * kernels do after an amax pass). Stored rows that are not 16-byte aligned take element loads
 * instead. */
#define QTT_R 64 /* logical rows per tile */
#define QTT_C 64 /* logical columns per tile */

template <typename T, int MODE, bool MSE, bool DEC>
__global__ void __launch_bounds__(QT, MODE == FCU_QT_GRAD ? 4 : 3) k_quant_t(const T *__restrict__ x, int rows, int cols, int nrt,
						int ntiles, const float *__restrict__ amax, float *__restrict__ amax_out,
						float d, int hw, int rev, int vec, uint8_t *__restrict__ codes,
						uint8_t *__restrict__ scales, uint16_t *__restrict__ dec)
{
	constexpr bool TILE = MODE == FCU_QT_46_TILE || MODE == FCU_QT_GRAD_TILE;
	constexpr bool GRAD = MODE == FCU_QT_GRAD || MODE == FCU_QT_GRAD_TILE; /* plain NVFP4 */
	constexpr int W = TILE ? 2 : 4;			  /* blocks of one logical row on W lanes */
	constexpr int RW = 32 / W;			  /* logical rows per warp (also the skew) */
	constexpr int EPC = 16 / (int)sizeof(T);	  /* elements per 16-byte chunk */
	constexpr int CPR = QTT_R / EPC;		  /* chunks per stored tile row */
	constexpr int NCH = QTT_C * CPR / QT;		  /* chunks per thread */
	constexpr int TSZ = QTT_C * QTT_R + 3 * RW;	  /* one tile buffer, elements (16-byte multiple) */
	constexpr int NS = fcu_ring<T>::NS;
	static_assert(QT == 256 && QTT_C == 64 && QTT_R == 64 && NCH * QT == QTT_C * CPR, "tile shape");
	static_assert((TSZ * sizeof(T)) % 16 == 0, "tile buffer alignment");
	__shared__ fcu_pt_smem sm;
	__shared__ __align__(16) T tile[NS * TSZ];
	const int t = threadIdx.x, lane = t & 31, wp = t >> 5;
	const float a = amax[0];
	if (amax_out && blockIdx.x == 0 && t == 0)
		amax_out[0] = a; /* the caller's amax, copied into the quantized tensor */
	const float s_enc = fos_s_enc(a, GRAD ? 2688.0f : d), s_dec = FOS_DIV(1.0f, s_enc);
	if (GRAD)
		fcu_pt_setup(sm, a, 2688.0f, s_dec, false, DEC);
	else
		fcu_pt_setup(sm, a, d, s_dec, true, DEC);
	const float g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
	const float r6 = FOS_DIV(1.0f, 6.0f);
	const uint32_t svt0 = (uint32_t)__cvta_generic_to_shared(sm.svt);
	const uint32_t tile0 = (uint32_t)__cvta_generic_to_shared(tile);
	constexpr int S = NS;
	const int rl = (wp / (4 / W)) * RW + lane / W; /* this thread's logical row in the tile */
	const int bl = (wp % (4 / W)) * W + lane % W;   /* and its block (0..3) */
	const int bpr = cols / 16;
	/* tile i: its first logical row r0 and column c0 (stored order, c0 major) */
	auto tile_at = [&](int i, int &r0, int &c0) {
		const int ti = rev ? ntiles - 1 - i : i;
		const int ct = ti / nrt;
		r0 = (ti - ct * nrt) * QTT_R;
		c0 = ct * QTT_C;
	};
	auto issue = [&](int i, int buf) { /* tile i into ring buffer buf (no commit) */
		int r0, c0;
		tile_at(i, r0, c0);
#pragma unroll
		for (int h = 0; h < NCH; h++) {
			const int q = t + QT * h, j = q / CPR, k = q % CPR;
			const int c = c0 + j, r = r0 + k * EPC;
			const bool on = c < cols && r < rows;
			fcu_cp_async16(tile0 + (uint32_t)((buf * TSZ + j * QTT_R + (j / 16) * RW + k * EPC) * sizeof(T)),
				       on ? (const void *)(x + (int64_t)c * rows + r) : (const void *)x, on);
		}
	};
	int i = blockIdx.x;
	if (vec)
		fcu_ring_start(ntiles, S, issue);
	for (int buf = 0; i < ntiles; i += gridDim.x, buf = fcu_ring_next(buf, S)) {
		int r0, c0;
		tile_at(i, r0, c0);
		T *tb = tile + buf * TSZ;
		if (vec) {
			fcu_ring_advance(i, buf, ntiles, S, issue);
		} else { /* element loads, consecutive threads along a stored row */
			__syncthreads();
			for (int e = t; e < QTT_C * QTT_R; e += QT) {
				const int j = e / QTT_R, k = e % QTT_R;
				const int c = c0 + j, r = r0 + k;
				tb[j * QTT_R + (j / 16) * RW + k] = (c < cols && r < rows) ? x[(int64_t)c * rows + r] : T(0);
			}
			__syncthreads();
		}
		/* gather this thread's block: logical (rl, 16 bl .. 16 bl + 15) = stored rows 16 bl + jj */
		fcu_raw<T> raw;
		const T *src = tb + (16 * bl) * QTT_R + bl * RW + rl;
		uint32_t *w = reinterpret_cast<uint32_t *>(raw.v);
		if (sizeof(T) == 2) {
			const uint16_t *s16 = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
			for (int jj = 0; jj < 8; jj++)
				w[jj] = (uint32_t)s16[(2 * jj) * QTT_R] | ((uint32_t)s16[(2 * jj + 1) * QTT_R] << 16);
		} else {
			const uint32_t *s32 = reinterpret_cast<const uint32_t *>(src);
#pragma unroll
			for (int jj = 0; jj < 16; jj++)
				w[jj] = s32[jj * QTT_R];
		}
		uint32_t sf;
		uint64_t cw;
		if (MODE == FCU_QT_GRAD)
			cw = fcu_blk_grad<T>(raw, g, hw, sm, &sf);
		else if (MODE == FCU_QT_GRAD_TILE)
			cw = fcu_blk_grad_tile<T, W>(raw, g, hw, sm, &sf); /* row-groups W lanes apart */
		else if (MODE == FCU_QT_46_TILE)
			cw = fcu_blk46_tile<T, MSE, W>(raw, s_enc, r6, hw, sm, svt0, &sf); /* row-groups W lanes apart */
		else
			cw = fcu_blk46<T, MSE>(raw, s_enc, r6, hw, sm, svt0, &sf);
		const int r = r0 + rl, b = c0 / 16 + bl;
		if (r < rows && b < bpr)
			fcu_store_pt<DEC>((int64_t)r * bpr + b, cw, sf, codes, scales, dec, sm.sdec);
	}
}

/* quantize_t: mode and template dispatch of k_quant_t. */
template <typename T, int MODE, bool MSE, bool DEC>
static void fcu_qt_launch(fos_backend *be, const void *x, int rows, int cols, float d, const fcu_qa &A, int vec,
			  fos_qtensor *q, uint16_t *dec)
{
	const int nrt = (rows + QTT_R - 1) / QTT_R, nct = (cols + QTT_C - 1) / QTT_C;
	const int ntiles = nrt * nct;
	auto k = k_quant_t<T, MODE, MSE, DEC>;
	k<<<fcu_qgrid(be, k, (int64_t)ntiles * QT, A, 1), QT, 0, fcu(be)->st>>>(
		static_cast<const T *>(x), rows, cols, nrt, ntiles, A.amax, A.amax_out, d, A.hw, A.rev, vec,
		q->codes, q->scales, dec);
}

template <typename T, bool MSE, bool DEC>
static void fcu_qt_mode(fos_backend *be, const void *x, int rows, int cols, const fos_qcfg *cfg, const fcu_qa &A,
			int vec, fos_qtensor *q, uint16_t *dec)
{
	const float d = fos_bound_d(cfg->bound);
	if (cfg->recipe == FOS_RECIPE_NVFP4 && cfg->block == FOS_BLOCK_16X16)
		fcu_qt_launch<T, FCU_QT_GRAD_TILE, false, DEC>(be, x, rows, cols, d, A, vec, q, dec);
	else if (cfg->recipe == FOS_RECIPE_NVFP4)
		fcu_qt_launch<T, FCU_QT_GRAD, false, DEC>(be, x, rows, cols, d, A, vec, q, dec);
	else if (cfg->block == FOS_BLOCK_16X16)
		fcu_qt_launch<T, FCU_QT_46_TILE, MSE, DEC>(be, x, rows, cols, d, A, vec, q, dec);
	else
		fcu_qt_launch<T, FCU_QT_46, MSE, DEC>(be, x, rows, cols, d, A, vec, q, dec);
}

/* x is stored (cols, rows); the outputs are those of fcu_quantize on the (rows, cols) transpose. */
int fcu_quantize_t(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		   const float *amax_in, fos_qtensor *q, uint16_t *decoded, fos_err *err)
{
	return fcu_quantize_t_cta(be, x, dtype, rows, cols, cfg, amax_in, q, decoded, 0, err);
}

int fcu_quantize_t_cta(fos_backend *be, const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		       const float *amax_in, fos_qtensor *q, uint16_t *decoded, int one_cta, fos_err *err)
{
	int rc = fcu_qcheck(cfg, dtype, rows, cols, err);
	if (rc)
		return rc;
	if (cfg->row_scaled)
		return fos_seterr(err, FOS_EINVAL, "quantize of a transposed input is per-tensor only, not row-scaled");
	if (rows * cols / 16 > 0x7FFFFFFF || rows > 0x7FFFFFFF - QTT_R || cols > 0x7FFFFFFF - QTT_C)
		return fos_seterr(err, FOS_EINVAL, "quantize of (%lld, %lld): more than 2^31 blocks or rows", (long long)rows,
				  (long long)cols);
	if (!fcu_aligned(q->codes, 8) || (decoded && !fcu_aligned(decoded, 16)))
		return fos_seterr(err, FOS_EINVAL, "quantize: codes or decoded pointer not 8/16-byte aligned");
	if ((rc = fcu_enter(be, err)))
		return rc;
	const float *asrc; /* where the kernel reads the amax */
	float *adst;       /* where it copies a given one */
	fcu_qamax(q, amax_in, &asrc, &adst);
	if (!amax_in && (rc = fcu_amax(be, x, dtype, cols, rows, 0, q->amax, err))) /* the stored tensor: same values */
		return rc;
	fcu_qset(q, rows, cols, cfg);
	const size_t es = dtype == FOS_F32 ? 4 : 2;
	const int vec = fcu_aligned(x, 16) && ((size_t)rows * es) % 16 == 0;
	const fcu_qa A = fcu_qargs(be, x, amax_in != 0, asrc, adst, one_cta);
	const bool mse = cfg->err_mode == FOS_ERR_MSE && cfg->recipe != FOS_RECIPE_NVFP4;
	fcu_qdispatch(dtype, mse, decoded != 0, [&](auto t, auto m, auto dec) {
		fcu_qt_mode<typename decltype(t)::type, decltype(m)::value, decltype(dec)::value>(be, x, (int)rows, (int)cols,
												  cfg, A, vec, q, decoded);
	});
	return fcu_launched(err, "quantize_t kernel launch");
}
