/* cuda_transpose.cu: the CUDA backend's transpose op, dst (cols, rows) = src (rows, cols)^T for
 * 1-, 2- and 4-byte elements, through shared-memory tiles: 2-byte elements with even rows and
 * columns and 4-byte aligned pointers move as 4-byte pairs in 64x64 tiles (k_transpose16), every
 * other case element by element in 32x32 tiles (k_transpose). */
#include "cuda_internal.cuh"
#include "fos_format.h"

#include <stdint.h>

/* Generic: 32x32 tiles, block (32, 8). dst (cols, rows) = src (rows, cols)^T. */
template <typename T>
__global__ void k_transpose(const T *__restrict__ src, T *__restrict__ dst, int64_t rows, int64_t cols)
{
	__shared__ T tile[32][33];
	const int64_t c0 = (int64_t)blockIdx.x * 32, r0 = (int64_t)blockIdx.y * 32;
	for (int j = threadIdx.y; j < 32; j += 8) {
		int64_t r = r0 + j, c = c0 + threadIdx.x;
		if (r < rows && c < cols)
			tile[j][threadIdx.x] = src[r * cols + c];
	}
	__syncthreads();
	for (int j = threadIdx.y; j < 32; j += 8) {
		int64_t c = c0 + j, r = r0 + threadIdx.x; /* dst row c, column r */
		if (c < cols && r < rows)
			dst[c * rows + r] = tile[threadIdx.x][j];
	}
}

/* 2-byte elements, even rows and cols: 64x64 tiles moved as 4-byte pairs, block (32, 8). */
__global__ void k_transpose16(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, int64_t rows,
			      int64_t cols)
{
	__shared__ uint16_t tile[64][65];
	const int64_t c0 = (int64_t)blockIdx.x * 64, r0 = (int64_t)blockIdx.y * 64;
	const int tx = threadIdx.x, ty = threadIdx.y;
	for (int j = ty; j < 64; j += 8) {
		int64_t r = r0 + j, c = c0 + 2 * tx;
		if (r < rows && c < cols) {
			uint32_t w = *reinterpret_cast<const uint32_t *>(src + r * cols + c);
			tile[j][2 * tx] = (uint16_t)w;
			tile[j][2 * tx + 1] = (uint16_t)(w >> 16);
		}
	}
	__syncthreads();
	for (int j = ty; j < 64; j += 8) {
		int64_t c = c0 + j, r = r0 + 2 * tx; /* dst row c, columns r, r + 1 */
		if (c < cols && r < rows) {
			uint32_t w = tile[2 * tx][j] | ((uint32_t)tile[2 * tx + 1][j] << 16);
			*reinterpret_cast<uint32_t *>(dst + c * rows + r) = w;
		}
	}
}

int fcu_transpose(fos_backend *be, const void *src, void *dst, int64_t rows, int64_t cols, size_t es, fos_err *err)
{
	if (rows <= 0 || cols <= 0 || (es != 1 && es != 2 && es != 4))
		return fos_seterr(err, FOS_EINVAL, "transpose of (%lld, %lld) x %zu bytes", (long long)rows,
				  (long long)cols, es);
	if ((rows + 31) / 32 > 65535 || (cols + 31) / 32 > 0x7FFFFFFF)
		return fos_seterr(err, FOS_EINVAL, "transpose of (%lld, %lld): too many rows", (long long)rows,
				  (long long)cols);
	int rc = fcu_enter(be, err);
	if (rc)
		return rc;
	cudaStream_t st = fcu(be)->st;
	dim3 bs(32, 8);
	if (es == 2 && rows % 2 == 0 && cols % 2 == 0 && fcu_aligned(src, 4) && fcu_aligned(dst, 4)) {
		dim3 g((unsigned)((cols + 63) / 64), (unsigned)((rows + 63) / 64));
		k_transpose16<<<g, bs, 0, st>>>(static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), rows,
						 cols);
		return fcu_launched(err, "transpose kernel launch");
	}
	dim3 g((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32));
	if (es == 1)
		k_transpose<uint8_t><<<g, bs, 0, st>>>(static_cast<const uint8_t *>(src), static_cast<uint8_t *>(dst),
						       rows, cols);
	else if (es == 2)
		k_transpose<uint16_t><<<g, bs, 0, st>>>(static_cast<const uint16_t *>(src),
							static_cast<uint16_t *>(dst), rows, cols);
	else
		k_transpose<uint32_t><<<g, bs, 0, st>>>(static_cast<const uint32_t *>(src),
							static_cast<uint32_t *>(dst), rows, cols);
	return fcu_launched(err, "transpose kernel launch");
}
