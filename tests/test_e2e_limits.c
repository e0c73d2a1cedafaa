/* test_e2e_limits.c: what max_message_bytes bounds, and the paged ListWeights, against real fosds
 * (CPU backend, ipc).
 *
 * Results written into shared-memory regions travel as references, so they are bounded by their
 * regions, not by max_message_bytes: with --max-message-bytes 160K, a 256 KiB Y, dX + dW + db of
 * 193 KiB, a Linear's Y, dX, dW and a 256 KiB (bf16) or 512 KiB (f32) Dequantize output all come
 * back through regions (over the socket and through a request channel), bit-identical to the
 * inline results of a fosd with the default 1 GiB limit; the same results inline still get
 * RESOURCE_EXHAUSTED naming the message limit, and a mix (the big result in a region, the small
 * ones inline) works.
 *
 * ListWeights pages (PROTOCOL.md): 10000 weights with names of up to 128 bytes are listed through
 * fos_list_weights (which follows the pages), through fos_list_weights_page with several page
 * sizes, and through `fos list-weights` (text and --json): every name exactly once, in name order;
 * a weight added and one dropped between two pages neither makes the listing skip nor repeat any
 * other; a page never exceeds its page_size nor a small max_message_bytes; a bad page token is
 * INVALID_ARGUMENT and fosd keeps serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"
#include "support_assert.h"

#define M 256
#define K 128
#define N 512

static tsrv g_small, g_big; /* --max-message-bytes 160K, and the default limit */
static uint16_t g_w[N * K], g_x[M * K], g_b[N], g_dy[M * N], g_q[M * N];

static fos_client *connect_to(const tsrv *s)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(s->url, NULL, 30000, &c, &st);
	if (rc)
		fail_msg("connect %s: %s: %s", s->url, fos_code_name(rc), st.message);
	return c;
}

static int setup(void **state)
{
	(void)state;
	const char *small[] = {"--workers", "2", "--max-message-bytes", "160K", NULL};
	const char *big[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_small, small))
		return -1;
	if (tsrv_start(&g_big, big))
		return -1;
	tsrv_fill_bf16(g_w, N * K, 21, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 22, 1.0f);
	tsrv_fill_bf16(g_b, N, 23, 0.5f);
	tsrv_fill_bf16(g_dy, M * N, 24, 0.1f);
	tsrv_fill_bf16(g_q, M * N, 25, 2.0f);
	const tsrv *both[2] = {&g_small, &g_big};
	for (int i = 0; i < 2; i++) {
		fos_client *c;
		fos_status st;
		if (fos_connect(both[i]->url, NULL, 30000, &c, &st))
			return -1;
		fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
		int rc = fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st);
		fos_close(c);
		if (rc) {
			fprintf(stderr, "put w: %s: %s\n", fos_code_name(rc), st.message);
			return -1;
		}
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	int rc = 0;
	tsrv *both[2] = {&g_small, &g_big};
	for (int i = 0; i < 2; i++) {
		int r = tsrv_stop(both[i], SIGTERM, 20000);
		if (r != 0) {
			tsrv_dump_log(both[i]);
			rc = -1;
		}
		tsrv_cleanup(both[i]);
	}
	return rc;
}

/* fails unless the call gave RESOURCE_EXHAUSTED naming the message limit */
static void expect_over_limit(int rc, const fos_status *st, const char *what)
{
	if (rc != FOS_CODE_RESOURCE_EXHAUSTED || !strstr(st->message, "message limit"))
		fail_msg("%s: %s (%s), expected RESOURCE_EXHAUSTED naming the message limit", what, fos_code_name(rc),
			 st->message);
}

#define ALIGN64(n) (((size_t)(n) + 63) / 64 * 64)

/* ---- results into regions above max_message_bytes -------------------------------------------- */

/* Forward (Y 256 KiB) and its backward (dX 64 KiB + dW 128 KiB + db 1 KiB), over the socket or
 * through a request channel. */
static void forward_backward(int channel)
{
	fos_status st;
	fos_forward_opts fo = {0, FOS_OVERRIDE_DEFAULT, 0, 1};
	fos_backward_opts keep = {1, NULL, NULL};
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), b = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_tensor dy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);

	/* the reference: everything inline at the default limit */
	fos_client *big = connect_to(&g_big);
	fos_tensor y0 = fos_tensor_out(), dx0 = fos_tensor_out(), dw0 = fos_tensor_out(), db0 = fos_tensor_out();
	fos_context c0;
	ASSERT_OK(fos_forward(big, "w", &x, &b, &fo, &y0, &c0, &st), st);
	ASSERT_OK(fos_backward(big, &c0, &dy, NULL, &dx0, &dw0, &db0, &st), st);
	fos_close(big);

	fos_client *c = connect_to(&g_small);
	uint64_t chan0 = 0;
	if (channel) {
		ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
		fos_stats_info si;
		ASSERT_OK(fos_stats(c, &si, &st), st);
		chan0 = si.channel_requests;
	}
	size_t oy = 64, odx = oy + ALIGN64(M * N * 2), odw = odx + ALIGN64(M * K * 2), odb = odw + ALIGN64(N * K * 2);
	size_t ody = odb + ALIGN64(N * 2) + 64, sz = ody + ALIGN64(M * N * 2);
	fos_region *r;
	ASSERT_OK(fos_region_create(c, NULL, sz, FOS_REGION_MEMFD, &r, &st), st);
	uint8_t *p = fos_region_data(r);
	memset(p, 0xA5, sz);
	memcpy(p + ody, g_dy, M * N * 2); /* dY (256 KiB) from the region: inline it would be over the limit */
	fos_tensor sdy = fos_tensor_shm(r, ody, FOS_DTYPE_BF16, M, N);

	/* Y inline is over the limit; into the region it is not */
	fos_tensor yi = fos_tensor_out();
	fos_context ctx;
	expect_over_limit(fos_forward(c, "w", &x, &b, &fo, &yi, &ctx, &st), &st, "forward, Y inline");
	free(yi.data);
	fos_tensor sy = fos_tensor_shm(r, oy, FOS_DTYPE_BF16, M, N);
	ASSERT_OK(fos_forward(c, "w", &x, &b, &fo, &sy, &ctx, &st), st);
	assert_ptr_equal(sy.data, p + oy);
	assert_memory_equal(p + oy, y0.data, M * N * 2);
	assert_int_equal(p[oy - 1], 0xA5);
	assert_int_equal(p[odx], 0xA5);

	/* the backward: all inline is over the limit */
	fos_tensor dxi = fos_tensor_out(), dwi = fos_tensor_out(), dbi = fos_tensor_out();
	expect_over_limit(fos_backward(c, &ctx, &sdy, &keep, &dxi, &dwi, &dbi, &st), &st, "backward, all inline");
	assert_true(ctx.id != 0);
	/* dW (128 KiB) into the region, dX and db inline: 65 KiB in the reply */
	fos_tensor sdw = fos_tensor_shm(r, odw, FOS_DTYPE_BF16, N, K);
	ASSERT_OK(fos_backward(c, &ctx, &sdy, &keep, &dxi, &sdw, &dbi, &st), st);
	assert_memory_equal(dxi.data, dx0.data, M * K * 2);
	assert_memory_equal(p + odw, dw0.data, N * K * 2);
	assert_memory_equal(dbi.data, db0.data, N * 2);
	free(dxi.data);
	free(dbi.data);
	memset(p + odw, 0xA5, N * K * 2);
	/* all three into the region */
	fos_tensor sdx = fos_tensor_shm(r, odx, FOS_DTYPE_BF16, M, K), sdb = fos_tensor_shm(r, odb, FOS_DTYPE_BF16, N, 0);
	sdw = fos_tensor_shm(r, odw, FOS_DTYPE_BF16, N, K);
	ASSERT_OK(fos_backward(c, &ctx, &sdy, NULL, &sdx, &sdw, &sdb, &st), st);
	assert_memory_equal(p + odx, dx0.data, M * K * 2);
	assert_memory_equal(p + odw, dw0.data, N * K * 2);
	assert_memory_equal(p + odb, db0.data, N * 2);
	assert_int_equal(p[odb + N * 2], 0xA5);
	assert_int_equal(ctx.id, 0);

	if (channel) { /* the requests went through the channel, not around it */
		fos_stats_info si;
		ASSERT_OK(fos_stats(c, &si, &st), st);
		assert_true(si.channel_requests >= chan0 + 5);
		ASSERT_OK(fos_channel_close(c, &st), st);
	}
	/* fosd keeps serving */
	fos_health_info h;
	ASSERT_OK(fos_health(c, &h, &st), st);
	ASSERT_OK(fos_region_destroy(r, &st), st);
	fos_close(c);
	free(y0.data);
	free(dx0.data);
	free(dw0.data);
	free(db0.data);
}

static void test_forward_backward_socket(void **state)
{
	(void)state;
	forward_backward(0);
}

static void test_forward_backward_channel(void **state)
{
	(void)state;
	forward_backward(1);
}

/* Linear: x, w, dy in (192 KiB of inputs: from a region too), y, dx, dw out */
static void test_linear(void **state)
{
	(void)state;
	fos_status st;
	fos_linear_config cfg = {FOS_OVERRIDE_DEFAULT, 0, 0, 0, 0};
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_tensor dy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	fos_client *big = connect_to(&g_big);
	fos_tensor y0 = fos_tensor_out(), dx0 = fos_tensor_out(), dw0 = fos_tensor_out();
	ASSERT_OK(fos_linear(big, &x, &w, NULL, &dy, &cfg, &y0, &dx0, &dw0, NULL, &st), st);
	fos_close(big);

	fos_client *c = connect_to(&g_small);
	size_t ox = 0, ow = ox + ALIGN64(M * K * 2), ody = ow + ALIGN64(N * K * 2), oy = ody + ALIGN64(M * N * 2);
	size_t odx = oy + ALIGN64(M * N * 2), odw = odx + ALIGN64(M * K * 2), sz = odw + ALIGN64(N * K * 2);
	fos_region *r;
	ASSERT_OK(fos_region_create(c, NULL, sz, FOS_REGION_MEMFD, &r, &st), st);
	uint8_t *p = fos_region_data(r);
	memcpy(p + ox, g_x, M * K * 2);
	memcpy(p + ow, g_w, N * K * 2);
	memcpy(p + ody, g_dy, M * N * 2);
	fos_tensor sx = fos_tensor_shm(r, ox, FOS_DTYPE_BF16, M, K), sw = fos_tensor_shm(r, ow, FOS_DTYPE_BF16, N, K);
	fos_tensor sdy = fos_tensor_shm(r, ody, FOS_DTYPE_BF16, M, N);
	fos_tensor yi = fos_tensor_out(), dxi = fos_tensor_out(), dwi = fos_tensor_out();
	expect_over_limit(fos_linear(c, &sx, &sw, NULL, &sdy, &cfg, &yi, &dxi, &dwi, NULL, &st), &st,
			  "linear, results inline");
	/* Y and dW into the region, dX (64 KiB) inline */
	fos_tensor sy = fos_tensor_shm(r, oy, FOS_DTYPE_BF16, M, N), sdw = fos_tensor_shm(r, odw, FOS_DTYPE_BF16, N, K);
	ASSERT_OK(fos_linear(c, &sx, &sw, NULL, &sdy, &cfg, &sy, &dxi, &sdw, NULL, &st), st);
	assert_memory_equal(p + oy, y0.data, M * N * 2);
	assert_memory_equal(dxi.data, dx0.data, M * K * 2);
	assert_memory_equal(p + odw, dw0.data, N * K * 2);
	free(dxi.data);
	memset(p + oy, 0, sz - oy);
	/* all into the region */
	fos_tensor sdx = fos_tensor_shm(r, odx, FOS_DTYPE_BF16, M, K);
	sy = fos_tensor_shm(r, oy, FOS_DTYPE_BF16, M, N);
	sdw = fos_tensor_shm(r, odw, FOS_DTYPE_BF16, N, K);
	ASSERT_OK(fos_linear(c, &sx, &sw, NULL, &sdy, &cfg, &sy, &sdx, &sdw, NULL, &st), st);
	assert_memory_equal(p + oy, y0.data, M * N * 2);
	assert_memory_equal(p + odx, dx0.data, M * K * 2);
	assert_memory_equal(p + odw, dw0.data, N * K * 2);
	ASSERT_OK(fos_region_destroy(r, &st), st);
	fos_close(c);
	free(y0.data);
	free(dx0.data);
	free(dw0.data);
}

/* Quantize X (M, N) from a region (256 KiB in), then Dequantize into a region: 256 KiB of bf16,
 * 512 KiB of f32 */
static void test_dequantize(void **state)
{
	(void)state;
	fos_status st;
	fos_client *c = connect_to(&g_small), *big = connect_to(&g_big);
	size_t ox = 0, oout = ALIGN64(M * N * 2), sz = oout + (size_t)M * N * 4;
	fos_region *r;
	ASSERT_OK(fos_region_create(c, NULL, sz, FOS_REGION_MEMFD, &r, &st), st);
	uint8_t *p = fos_region_data(r);
	memcpy(p + ox, g_q, M * N * 2);
	fos_tensor sx = fos_tensor_shm(r, ox, FOS_DTYPE_BF16, M, N);
	fos_tensor codes = fos_tensor_out(), scales = fos_tensor_out(), amax = fos_tensor_out();
	ASSERT_OK(fos_quantize(c, &sx, NULL, NULL, &codes, &scales, &amax, &st), st);
	static const int dts[2] = {FOS_DTYPE_BF16, FOS_DTYPE_F32};
	for (int i = 0; i < 2; i++) {
		size_t bytes = (size_t)M * N * (i ? 4 : 2);
		fos_tensor ref = fos_tensor_out(), in = fos_tensor_out();
		ASSERT_OK(fos_dequantize(big, &codes, &scales, &amax, 0, 0, dts[i], &ref, &st), st);
		assert_int_equal(ref.size, bytes);
		expect_over_limit(fos_dequantize(c, &codes, &scales, &amax, 0, 0, dts[i], &in, &st), &st,
				  "dequantize, out inline");
		free(in.data);
		memset(p + oout, 0xA5, (size_t)M * N * 4);
		fos_tensor so = fos_tensor_shm(r, oout, dts[i], M, N);
		ASSERT_OK(fos_dequantize(c, &codes, &scales, &amax, 0, 0, dts[i], &so, &st), st);
		assert_memory_equal(p + oout, ref.data, bytes);
		free(ref.data);
	}
	ASSERT_OK(fos_region_destroy(r, &st), st);
	free(codes.data);
	free(scales.data);
	free(amax.data);
	fos_close(c);
	fos_close(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward_backward_socket),
		cmocka_unit_test(test_forward_backward_channel),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_dequantize),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
