/* cuda_grad_pair.cu: the CUDA backend's grad_pair op (backend.h): both decoded operands of the
 * quantized backward's gradient from ONE read of dY (m, n) bf16, no codes and no scales written:
 *   dec_rows   (m, n) = the bf16 decoding of the NVFP4 gradient quantize of dY along rows, exactly
 *                       the `decoded` of fcu_quantize(dy, m, n, {NVFP4, 1x16, MAE, 448}, amax);
 *   dec_cols_t (n, m) = the same of dY^T along m, exactly the `decoded` of fcu_quantize_t(dy, n, m,
 *                       same cfg, amax).
 * Bit-identical to those by construction: every 1x16 block goes through the same block function
 * (fcu_blk_grad of cuda_qblock.cuh), tables (fcu_pt_setup: sinv, sdec) and decoding (fcu_dec_pt) as
 * k_grad_1x16 / k_quant_t, with the same e4m3 path and the same raw input bits per block.
 *
 * Layout: a persistent CTA walks tiles of GP_R = 64 rows x GP_C = 64 columns of dY (row-major tile
 * order; from the end when the amax pass just read dY, as the quantize kernels do: its tail is still
 * in L2) through the cp.async ring of cuda_ring.cuh, 4 tile buffers deep. Per tile, each of the 256
 * threads owns one row block and one column block:
 *   phase 1: row j = t / 4, columns 16 (t % 4) .. + 15 (four lanes cover a row's 128 bytes): two
 *            16-byte shared loads, the block arithmetic, 32 bytes to dec_rows;
 *   phase 2: column c = 8 warp + lane / 4, rows 16 (lane % 4) .. + 15 (four lanes cover a column's
 *            64 rows, 128 contiguous bytes of dec_cols_t): 16 two-byte shared loads, the block
 *            arithmetic, 32 bytes to dec_cols_t.
 * In a tile buffer, row j starts at element j * GP_S + (j / 16) * 8 with GP_S = 72: the phase-1
 * 16-byte loads of a quarter-warp (two rows) and the phase-2 gathers of a warp (8 columns x the 4
 * row groups) hit disjoint banks, and the cp.async 16-byte copies (a quarter-warp per row) too.
 * Rows past m and columns past n are zero-filled in the tile and never stored (m and n are
 * multiples of 16, so each block is wholly in or out). Each phase only reads the tile, so one
 * barrier per tile (the ring's) is all the synchronisation. */
#include "cuda_internal.cuh"
#include "cuda_qblock.cuh"
#include "cuda_ring.cuh"

#include <stdint.h>

#define GP_T 256 /* threads per CTA */
#define GP_R 64	 /* dY rows per tile */
#define GP_C 64	 /* dY columns per tile */
#define GP_S 72	 /* a tile row's stride in elements (64 + 8: conflict-free phase-1 loads) */
#define GP_NS 4	 /* ring buffers */

/* One tile buffer in elements: 64 rows, the last one starting at 63 * GP_S + 3 * 8. */
static constexpr int GP_TSZ = GP_R * GP_S + 3 * 8;
static_assert((GP_TSZ * 2) % 16 == 0, "tile buffer alignment");
static_assert(GP_T == 256 && GP_R == 64 && GP_C == 64, "thread mapping: 4 threads per row and per column");

__device__ __forceinline__ int gp_row_off(int j)
{
	return j * GP_S + (j >> 4) * 8;
}

__global__ void __launch_bounds__(GP_T, 4)
	k_grad_pair(const uint16_t *__restrict__ x, int m, int n, int ntc, int ntiles, const float *__restrict__ amax,
		    int hw, int rev, uint16_t *__restrict__ dec_rows, uint16_t *__restrict__ dec_cols)
{
	__shared__ fcu_pt_smem sm;
	__shared__ __align__(16) uint16_t tile[GP_NS * GP_TSZ];
	const int t = threadIdx.x, lane = t & 31, wp = t >> 5;
	/* the gradient quantizer's per-tensor setup, as k_grad_1x16 and k_quant_t (FCU_QT_GRAD) */
	const float a = amax[0];
	const float s_enc = fos_s_enc(a, 2688.0f), s_dec = FOS_DIV(1.0f, s_enc);
	fcu_pt_setup(sm, a, 2688.0f, s_dec, false, true);
	const float g = FOS_MUL(s_enc, FOS_ONE_SIXTH);
	const uint32_t tile0 = (uint32_t)__cvta_generic_to_shared(tile);
	constexpr int S = GP_NS;
	const int j1 = t >> 2, b1 = t & 3;		/* phase 1: this thread's row and block in the tile */
	const int c2 = wp * 8 + (lane >> 2), b2 = lane & 3; /* phase 2: its column and 16-row group */
	auto tile_at = [&](int i, int &r0, int &c0) {
		const int ti = rev ? ntiles - 1 - i : i;
		const int tr = ti / ntc;
		r0 = tr * GP_R;
		c0 = (ti - tr * ntc) * GP_C;
	};
	auto issue = [&](int i, int buf) { /* tile i into ring buffer buf (no commit) */
		int r0, c0;
		tile_at(i, r0, c0);
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int q = t + GP_T * h, j = q >> 3, k = q & 7; /* row j, 16-byte chunk k of it */
			const int r = r0 + j, c = c0 + 8 * k;
			const bool on = r < m && c < n;
			fcu_cp_async16(tile0 + (uint32_t)((buf * GP_TSZ + gp_row_off(j) + 8 * k) * 2),
				       on ? (const void *)(x + (int64_t)r * n + c) : (const void *)x, on);
		}
	};
	int i = blockIdx.x;
	fcu_ring_start(ntiles, S, issue);
	for (int buf = 0; i < ntiles; i += gridDim.x, buf = fcu_ring_next(buf, S)) {
		fcu_ring_advance(i, buf, ntiles, S, issue);
		int r0, c0;
		tile_at(i, r0, c0);
		const uint16_t *tb = tile + buf * GP_TSZ;
		{ /* phase 1: a block along the row */
			fcu_raw<uint16_t> raw;
			const uint4 *sp = reinterpret_cast<const uint4 *>(tb + gp_row_off(j1) + 16 * b1);
			raw.v[0] = sp[0];
			raw.v[1] = sp[1];
			uint32_t sf;
			const uint64_t cw = fcu_blk_grad<uint16_t>(raw, g, hw, sm, &sf);
			const int r = r0 + j1, c = c0 + 16 * b1;
			if (r < m && c < n)
				fcu_dec_pt(cw, sf, sm.sdec, dec_rows + (int64_t)r * n + c);
		}
		{ /* phase 2: a block along the column (dY^T's row c, its elements r .. r + 15) */
			fcu_raw<uint16_t> raw;
			const uint16_t *s16 = tb + gp_row_off(16 * b2) + c2; /* rows 16 b2 .. 16 b2 + 15 share the skew */
			uint32_t *w = reinterpret_cast<uint32_t *>(raw.v);
#pragma unroll
			for (int jj = 0; jj < 8; jj++)
				w[jj] = (uint32_t)s16[(2 * jj) * GP_S] | ((uint32_t)s16[(2 * jj + 1) * GP_S] << 16);
			uint32_t sf;
			const uint64_t cw = fcu_blk_grad<uint16_t>(raw, g, hw, sm, &sf);
			const int r = r0 + 16 * b2, c = c0 + c2;
			if (r < m && c < n)
				fcu_dec_pt(cw, sf, sm.sdec, dec_cols + (int64_t)c * m + r);
		}
	}
}

int fcu_grad_pair(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, const float *amax, uint16_t *dec_rows,
		  uint16_t *dec_cols_t, fos_err *err)
{
	return fcu_grad_pair_cta(be, dy, m, n, amax, dec_rows, dec_cols_t, 0, err);
}

int fcu_grad_pair_cta(fos_backend *be, const uint16_t *dy, int64_t m, int64_t n, const float *amax, uint16_t *dec_rows,
		      uint16_t *dec_cols_t, int one_cta, fos_err *err)
{
	struct fcu_impl *im = fcu(be);
	if (m <= 0 || n <= 0 || m % 16 || n % 16)
		return fos_seterr(err, FOS_EINVAL,
				  "grad_pair of a (%lld, %lld) gradient: both dimensions must be positive multiples of 16",
				  (long long)m, (long long)n);
	if (m > 0x7FFFFFFF - GP_R || n > 0x7FFFFFFF - GP_C || m * n / 16 > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "grad_pair of a (%lld, %lld) gradient: more than 2^31 blocks or rows",
				  (long long)m, (long long)n);
	if (!dy || !amax || !dec_rows || !dec_cols_t)
		return fos_seterr(err, FOS_EINVAL, "grad_pair: a NULL pointer");
	if (!fcu_aligned(dy, 16) || !fcu_aligned(dec_rows, 16) || !fcu_aligned(dec_cols_t, 16))
		return fos_seterr(err, FOS_EINVAL, "grad_pair: dy, dec_rows or dec_cols_t not 16-byte aligned");
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	/* the quantize launchers' choices (fcu_qargs): from the end when the last amax pass read dy */
	const fcu_qa A = fcu_qargs(be, dy, 1, amax, 0, one_cta);
	const int ntr = (int)((m + GP_R - 1) / GP_R), ntc = (int)((n + GP_C - 1) / GP_C);
	const int ntiles = ntr * ntc;
	const int occ = fcu_occupancy((const void *)k_grad_pair, GP_T, 1);
	const unsigned grid = A.one_cta ? 1u : fcu_grid(be, (int64_t)ntiles * GP_T, GP_T, occ);
	k_grad_pair<<<grid, GP_T, 0, im->st>>>(dy, (int)m, (int)n, ntc, ntiles, amax, A.hw, A.rev, dec_rows,
					       dec_cols_t);
	return fcu_launched(err, "grad_pair kernel launch");
}
