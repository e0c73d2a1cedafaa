/* gpu_device_tensors.c: device tensors through libfos (fos_tensor_cuda, client/libfos/libfos_cuda.c)
 * against a real cuda fosd on the same GPU (the protocol-level suite is tests/gpu_e2e_devmem.c).
 * This process allocates with cudaMalloc, fills, and passes device tensors for every op: PutWeight's
 * W; Forward's X, bias and Y (with a saved context) and Backward's dY, dX, dW, db; Linear's X, W,
 * bias, dY, Y, dX, dW, db; Quantize's X, amax in, codes, scales, amax; Dequantize's codes, scales,
 * amax and output (bf16 and f32); the expect of a checked Forward. Every result is bit-identical to
 * the same op through host memory on the same fosd, over the socket and through a request
 * channel, and with fos_set_cuda_stream's event ordering (an input copied asynchronously on the
 * stream, not synchronized), and with fos_set_cuda_order's outputs ordered on a stream too (calls
 * answered before their GPU work ended), and with FOS_CUDA_ORDER_ASYNC (calls that return before fosd
 * read them; a failure reported by the next call), also from two clients at once on two lanes. A weight put from device memory is put again from libfos's host copy
 * (reput_weights) after fosd lost it. Also: fos_cuda_release closes fosd's mappings (Stats
 * device_mappings); memory freed and allocated again at the same address gets a new handle and
 * fosd reads the new bytes; a client process that exits with its mappings open leaves none behind
 * (Stats, and the GPU's free memory back to where it was). Skips cleanly without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "libfos_internal.h"
#include "support_assert.h"
#include "support_server.h"
#include "support_stats.h"
#include "support_trust.h"

extern char **environ;

#ifdef FOS_HAVE_CUDA
/* The CUDA runtime calls used here, by their C ABI (cudaError_t is an int-sized enum). */
extern int cudaMalloc(void **p, size_t n);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
extern int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);
extern int cudaMemGetInfo(size_t *free_b, size_t *total_b);
extern int cudaGetDeviceCount(int *n);
extern int cudaDeviceSynchronize(void);
extern int cudaStreamCreate(void **s);
extern int cudaStreamDestroy(void *s);
extern int cudaStreamSynchronize(void *s);
#define H2D 1
#define D2H 2
#else
static int cudaGetDeviceCount(int *n)
{
	*n = 0;
	return 1;
}
static int cudaMalloc(void **p, size_t n)
{
	(void)n;
	*p = NULL;
	return 2;
}
static int cudaFree(void *p)
{
	(void)p;
	return 0;
}
static int cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
	(void)dst, (void)src, (void)n, (void)kind;
	return 1;
}
static int cudaMemGetInfo(size_t *f, size_t *t)
{
	*f = *t = 0;
	return 1;
}
static int cudaDeviceSynchronize(void)
{
	return 1;
}
#define H2D 1
#define D2H 2
#endif

#define M 256
#define K 256
#define N 512

static tsrv g_srv;
static int g_have;
static uint16_t g_w[N * K], g_x[M * K], g_dy[M * N], g_b[N];

#define NEED()                                                                                          \
	do {                                                                                            \
		if (!g_have)                                                                            \
			skip();                                                                         \
	} while (0)

/* ---- device memory ------------------------------------------------------------------------------ */

static void *dalloc(size_t n)
{
	void *p = NULL;
	assert_int_equal(cudaMalloc(&p, n), 0);
	return p;
}

static void *dcopy(const void *h, size_t n)
{
	void *p = dalloc(n);
	assert_int_equal(cudaMemcpy(p, h, n, H2D), 0);
	return p;
}

/* The device bytes at d equal the host bytes at h. */
/* The stream every_op's calls are ordered on (fos_set_cuda_order), or NULL: results are read
 * after it. */
static void *g_order_stream;

static void same_dev(const void *d, const void *h, size_t n, const char *what)
{
	uint8_t *got = malloc(n);
	assert_non_null(got);
	if (g_order_stream)
		assert_int_equal(cudaStreamSynchronize(g_order_stream), 0);
	assert_int_equal(cudaMemcpy(got, d, n, D2H), 0);
	if (memcmp(got, h, n)) {
		size_t i = 0;
		while (((const uint8_t *)h)[i] == got[i])
			i++;
		free(got);
		fail_msg("%s: device result differs from the host path at byte %zu of %zu", what, i, n);
	}
	free(got);
}

static fos_client *conn(void)
{
	return tt_connect_ms(g_srv.url, NULL, 60000);
}

/* Polls until Stats name == want (up to 10 s); returns the last value. */
static uint64_t wait_stat(fos_client *c, const char *name, uint64_t want)
{
	uint64_t v = 0;
	for (int i = 0; i < 200; i++) {
		if ((v = tstat(c, name)) == want)
			break;
		usleep(50000);
	}
	return v;
}

static int setup(void **state)
{
	(void)state;
	int n = 0;
	if (cudaGetDeviceCount(&n) || n < 1) {
		printf("gpu_device_tensors: no CUDA device: skipping\n");
		return 0;
	}
	tsrv_fill_bf16(g_w, N * K, 41, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 42, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 43, 0.1f);
	tsrv_fill_bf16(g_b, N, 44, 0.5f);
	setenv("FOS_TEST_BACKEND", "cuda", 1);
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	fos_client *c = conn();
	uint8_t u[16];
	fos_status st;
	int rc = fos_server_gpu_uuid(c, u, &st);
	fos_close(c);
	if (rc) {
		fprintf(stderr, "the cuda fosd reports no GPU UUID: %s\n", st.message);
		return -1;
	}
	g_have = 1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (g_have) {
		tsrv_stop(&g_srv, SIGTERM, 20000);
		tsrv_cleanup(&g_srv);
	}
	return 0;
}

/* ---- every op, device against host ----------------------------------------------------------- */

static void every_op(fos_client *c, const char *tag)
{
	fos_status st;
	char wh[64], wd[64];
	snprintf(wh, sizeof wh, "%s.wh", tag);
	snprintf(wd, sizeof wd, "%s.wd", tag);
	uint16_t *dW = dcopy(g_w, sizeof g_w), *dX = dcopy(g_x, sizeof g_x), *dDY = dcopy(g_dy, sizeof g_dy),
		 *dB = dcopy(g_b, sizeof g_b);
	uint64_t dev_before = tstat(c, "device_tensors");
	int sent = 0;

	/* PutWeight: W from device memory equals W from host memory (same forward through both) */
	fos_tensor hw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), dw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW);
	ASSERT_OK(fos_put_weight(c, wh, 1, &hw, NULL, NULL, &st), st);
	ASSERT_OK(fos_put_weight(c, wd, 1, &dw, NULL, NULL, &st), st);
	sent++;
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), hb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	static uint16_t y_h[M * N], y_h2[M * N];
	fos_tensor yh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_h), yh2 = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_h2);
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	fos_context ch, cd;
	ASSERT_OK(fos_forward(c, wh, &hx, &hb, &fo, &yh, &ch, &st), st);
	ASSERT_OK(fos_forward(c, wd, &hx, &hb, NULL, &yh2, NULL, &st), st);
	assert_memory_equal(y_h, y_h2, sizeof y_h);

	/* Forward: X, bias, Y on the device; then Backward: dY, dX, dW, db on the device */
	uint16_t *dY = dalloc(sizeof y_h);
	fos_tensor dx_in = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), db_in = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dB);
	fos_tensor yd = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY);
	ASSERT_OK(fos_forward(c, wh, &dx_in, &db_in, &fo, &yd, &cd, &st), st);
	sent += 3;
	assert_int_equal(yd.ndim, 2);
	assert_int_equal(yd.shape[1], N);
	assert_ptr_equal(yd.data, dY);
	same_dev(dY, y_h, sizeof y_h, "forward y");
	static uint16_t dx_h[M * K], dw_h[N * K], dbias_h[N];
	fos_tensor gxh = fos_tensor_2d(FOS_DTYPE_BF16, M, K, dx_h), gwh = fos_tensor_2d(FOS_DTYPE_BF16, N, K, dw_h),
		   gbh = fos_tensor_1d(FOS_DTYPE_BF16, N, dbias_h);
	fos_tensor hdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy), ddy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dDY);
	ASSERT_OK(fos_backward(c, &ch, &hdy, NULL, &gxh, &gwh, &gbh, &st), st);
	uint16_t *dGX = dalloc(sizeof dx_h), *dGW = dalloc(sizeof dw_h), *dGB = dalloc(sizeof dbias_h);
	fos_tensor gxd = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dGX), gwd = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dGW),
		   gbd = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dGB);
	ASSERT_OK(fos_backward(c, &cd, &ddy, NULL, &gxd, &gwd, &gbd, &st), st);
	sent += 4;
	same_dev(dGX, dx_h, sizeof dx_h, "backward dx");
	same_dev(dGW, dw_h, sizeof dw_h, "backward dw");
	same_dev(dGB, dbias_h, sizeof dbias_h, "backward db");

	/* a checked Forward whose expect is fosd's Y in device memory */
	fos_check_result cr;
	ASSERT_OK(fos_forward_check(c, wh, &dx_in, &db_in, NULL, &yd, NULL, &cr, &st), st);
	sent += 3;
	assert_true(cr.consistent);
	assert_int_equal(cr.differ, 0);

	/* Linear: every input and output on the device */
	static uint16_t ly[M * N], lx[M * K], lw[N * K], lb[N];
	fos_tensor lyh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, ly), lxh = fos_tensor_2d(FOS_DTYPE_BF16, M, K, lx),
		   lwh = fos_tensor_2d(FOS_DTYPE_BF16, N, K, lw), lbh = fos_tensor_1d(FOS_DTYPE_BF16, N, lb);
	ASSERT_OK(fos_linear(c, &hx, &hw, &hb, &hdy, NULL, &lyh, &lxh, &lwh, &lbh, &st), st);
	ASSERT_OK(fos_linear(c, &dx_in, &dw, &db_in, &ddy, NULL, &yd, &gxd, &gwd, &gbd, &st), st);
	sent += 8;
	same_dev(dY, ly, sizeof ly, "linear y");
	same_dev(dGX, lx, sizeof lx, "linear dx");
	same_dev(dGW, lw, sizeof lw, "linear dw");
	same_dev(dGB, lb, sizeof lb, "linear db");

	/* Quantize (per-tensor, then row-scaled with amax in), Dequantize to bf16 and f32 */
	static uint8_t qc_h[M * K / 2], qs_h[M * K / 16];
	static float qa_h[M];
	uint8_t *dQC = dalloc(sizeof qc_h), *dQS = dalloc(sizeof qs_h);
	float *dQA = dalloc(sizeof qa_h);
	for (int rs = 0; rs < 2; rs++) {
		fos_quant_config qcfg = {0, 0, 0, 0, rs};
		int64_t na = rs ? M : 1;
		fos_tensor ch_ = fos_tensor_2d(FOS_DTYPE_U8, M, K / 2, qc_h), sh = fos_tensor_2d(FOS_DTYPE_E4M3, M, K / 16, qs_h),
			   ah = fos_tensor_1d(FOS_DTYPE_F32, na, qa_h);
		ASSERT_OK(fos_quantize(c, &hx, &qcfg, NULL, &ch_, &sh, &ah, &st), st);
		fos_tensor cdv = fos_tensor_cuda(FOS_DTYPE_U8, M, K / 2, dQC), sdv = fos_tensor_cuda(FOS_DTYPE_E4M3, M, K / 16, dQS),
			   adv = fos_tensor_cuda(FOS_DTYPE_F32, na, 0, dQA);
		ASSERT_OK(fos_quantize(c, &dx_in, &qcfg, NULL, &cdv, &sdv, &adv, &st), st);
		sent += 4;
		same_dev(dQC, qc_h, sizeof qc_h, rs ? "quantize codes (row-scaled)" : "quantize codes");
		same_dev(dQS, qs_h, sizeof qs_h, "quantize scales");
		same_dev(dQA, qa_h, (size_t)na * 4, "quantize amax");
		/* amax in from device memory */
		float *dAin = dcopy(qa_h, (size_t)na * 4);
		fos_tensor ain_h = fos_tensor_1d(FOS_DTYPE_F32, na, qa_h), ain_d = fos_tensor_cuda(FOS_DTYPE_F32, na, 0, dAin);
		static uint8_t qc2[M * K / 2];
		fos_tensor c2 = fos_tensor_2d(FOS_DTYPE_U8, M, K / 2, qc2), s2 = fos_tensor_out(), a2 = fos_tensor_out();
		ASSERT_OK(fos_quantize(c, &hx, &qcfg, &ain_h, &c2, &s2, &a2, &st), st);
		free(s2.data);
		free(a2.data);
		fos_tensor s3 = fos_tensor_out(), a3 = fos_tensor_out();
		ASSERT_OK(fos_quantize(c, &dx_in, &qcfg, &ain_d, &cdv, &s3, &a3, &st), st);
		sent += 3;
		same_dev(dQC, qc2, sizeof qc2, "quantize codes with amax in");
		free(s3.data);
		free(a3.data);
		cudaFree(dAin);
		/* dequantize the device codes, scales and amax into device memory */
		fos_tensor ci = fos_tensor_cuda(FOS_DTYPE_U8, M, K / 2, dQC), si = fos_tensor_cuda(FOS_DTYPE_E4M3, M, K / 16, dQS),
			   ai = fos_tensor_cuda(FOS_DTYPE_F32, na, 0, dQA);
		fos_tensor chh = fos_tensor_2d(FOS_DTYPE_U8, M, K / 2, qc_h), shh = fos_tensor_2d(FOS_DTYPE_E4M3, M, K / 16, qs_h),
			   ahh = fos_tensor_1d(FOS_DTYPE_F32, na, qa_h);
		for (int f32 = 0; f32 < 2; f32++) {
			int odt = f32 ? FOS_DTYPE_F32 : FOS_DTYPE_BF16;
			size_t ob = (size_t)M * K * (f32 ? 4 : 2);
			void *oh = malloc(ob), *od = dalloc(ob);
			fos_tensor to_h = fos_tensor_2d(odt, M, K, oh);
			fos_tensor to_d = fos_tensor_cuda(odt, M, K, od);
			ASSERT_OK(fos_dequantize(c, &chh, &shh, &ahh, 0, rs, odt, &to_h, &st), st);
			ASSERT_OK(fos_dequantize(c, &ci, &si, &ai, 0, rs, odt, &to_d, &st), st);
			sent += 4;
			same_dev(od, oh, ob, f32 ? "dequantize f32" : "dequantize bf16");
			free(oh);
			cudaFree(od);
		}
	}
	/* fosd counted them (device_tensors: read or written in place) */
	assert_true(tstat(c, "device_tensors") >= dev_before + (uint64_t)sent);
	assert_true(tstat(c, "device_mappings") >= 1);

	void *all[] = {dW, dX, dDY, dB, dY, dGX, dGW, dGB, dQC, dQS, dQA};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		fos_cuda_release(c, all[i], &st); /* before cudaFree: fosd lets go first */
		cudaFree(all[i]);
	}
	ASSERT_OK(fos_drop_weight(c, wh, &st), st);
	ASSERT_OK(fos_drop_weight(c, wd, &st), st);
}

static void test_every_op_socket(void **state)
{
	(void)state;
	NEED();
	fos_client *c = conn();
	every_op(c, "sock");
	fos_close(c);
}

static void test_every_op_channel(void **state)
{
	(void)state;
	NEED();
	fos_client *c = conn();
	fos_status st;
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	uint64_t before = tstat(c, "channel_requests");
	every_op(c, "chan");
	assert_true(tstat(c, "channel_requests") > before + 20); /* the ops went through the channel */
	ASSERT_OK(fos_channel_close(c, &st), st);
	fos_close(c);
}

/* ---- event ordering ---------------------------------------------------------------------------- */

static void test_event_stream(void **state)
{
	(void)state;
	NEED();
#ifdef FOS_HAVE_CUDA
	fos_client *c = conn();
	fos_status st;
	void *stream = NULL;
	assert_int_equal(cudaStreamCreate(&stream), 0);
	ASSERT_OK(fos_set_cuda_stream(c, stream, &st), st);
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), hw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	static uint16_t y_h[M * N];
	fos_tensor yh = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_h);
	fos_linear_config lc = {0, 0, 0, 0, 0, 0};
	ASSERT_OK(fos_linear(c, &hx, &hw, NULL, NULL, &lc, &yh, NULL, NULL, NULL, &st), st);
	uint16_t *dX = dalloc(sizeof g_x), *dW = dcopy(g_w, sizeof g_w), *dY = dalloc(sizeof y_h);
	for (int i = 0; i < 4; i++) {
		/* X arrives on the stream, unsynchronized: fosd's stream waits for the recorded event */
		assert_int_equal(cudaMemcpyAsync(dX, g_x, sizeof g_x, H2D, stream), 0);
		fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), dw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW),
			   dy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY);
		ASSERT_OK(fos_linear(c, &dx, &dw, NULL, NULL, &lc, &dy, NULL, NULL, NULL, &st), st);
		same_dev(dY, y_h, sizeof y_h, "linear y with event ordering");
		assert_int_equal(cudaMemcpy(dX, g_dy, sizeof g_x, H2D), 0); /* other bytes before the next copy */
	}
	ASSERT_OK(fos_set_cuda_stream(c, NULL, &st), st);
	fos_close(c);
	cudaFree(dX);
	cudaFree(dW);
	cudaFree(dY);
	cudaStreamDestroy(stream);
#endif
}

/* FOS_CUDA_ORDER_OUTPUTS: every op again, ordered on a stream; fosd answers the calls whose
 * results are all in device memory before their work ends (the stream made to wait for its
 * event), the others as usual, and every result is the host path's. */
static void test_every_op_stream_order(void **state)
{
	(void)state;
	NEED();
#ifdef FOS_HAVE_CUDA
	for (int chan = 0; chan < 2; chan++) {
		fos_client *c = conn();
		fos_status st;
		if (chan)
			ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
		assert_int_equal(cudaStreamCreate(&g_order_stream), 0);
		ASSERT_OK(fos_set_cuda_order(c, g_order_stream, FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS, &st), st);
		uint64_t before = atomic_load(&c->done_waits);
		every_op(c, chan ? "ochan" : "osock");
		/* PutWeight of W, Forward, Backward, Linear (twice), Dequantize into device memory: early */
		uint64_t early = atomic_load(&c->done_waits) - before;
		fprintf(stderr, "%s: %llu calls answered before their work ended\n", chan ? "channel" : "socket",
			(unsigned long long)early);
		assert_true(early >= 4);
		ASSERT_OK(fos_set_cuda_order(c, NULL, 0, &st), st);
		assert_int_equal(cudaStreamSynchronize(g_order_stream), 0);
		cudaStreamDestroy(g_order_stream);
		g_order_stream = NULL;
		fos_close(c);
	}
#endif
}

/* FOS_CUDA_ORDER_ASYNC: every op again; PutWeight, Forward, Backward and Linear on device tensors
 * return before fosd has read them (the stream waits on a done word fosd writes), the others run
 * as before, and every result is the host path's bits. Then an asynchronous call that fails (an
 * unknown weight) is reported by the next call with its name, and the stream it was ordered on
 * does not hang (its word was written all the same). */
static void test_every_op_async(void **state)
{
	(void)state;
	NEED();
#ifdef FOS_HAVE_CUDA
	for (int chan = 0; chan < 2; chan++) {
		fos_client *c = conn();
		fos_status st;
		if (chan)
			ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
		assert_int_equal(cudaStreamCreate(&g_order_stream), 0);
		ASSERT_OK(fos_set_cuda_order(c, g_order_stream,
					     FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS | FOS_CUDA_ORDER_ASYNC, &st),
			  st);
		every_op(c, chan ? "achan" : "asock");
		uint64_t n = fos_async_count(c);
		fprintf(stderr, "%s: %llu calls returned before fosd read them\n", chan ? "channel" : "socket",
			(unsigned long long)n);
		assert_true(n >= 4); /* PutWeight of W, Forward, Backward, Linear on the device */
		ASSERT_OK(fos_sync(c, &st), st);

		/* a failure: reported by the next call, and the stream goes on */
		uint16_t *dX = dcopy(g_x, sizeof g_x), *dY = dalloc((size_t)M * N * 2);
		fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), dy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY);
		ASSERT_OK(fos_forward(c, "no.such.weight", &dx, NULL, NULL, &dy, NULL, &st), st);
		assert_int_equal(fos_async_count(c), n + 1);
		assert_int_equal(cudaStreamSynchronize(g_order_stream), 0); /* its word was written */
		fos_health_info hi;
		int rc = fos_health(c, &hi, &st);
		assert_int_equal(rc, FOS_CODE_NOT_FOUND);
		if (!strstr(st.message, "asynchronous Forward of weight 'no.such.weight' (request "))
			fail_msg("the failure's message does not name the call: %s", st.message);
		ASSERT_OK(fos_health(c, &hi, &st), st); /* reported once */
		fos_cuda_release(c, dX, &st);
		fos_cuda_release(c, dY, &st);
		cudaFree(dX);
		cudaFree(dY);
		ASSERT_OK(fos_set_cuda_order(c, NULL, 0, &st), st);
		cudaStreamDestroy(g_order_stream);
		g_order_stream = NULL;
		fos_close(c);
	}
#endif
}

/* FOS_CUDA_ORDER_ASYNC from two clients at once, each ordered on its own stream (fosd runs each
 * connection's calls on a lane of its own): their calls interleaved, each putting its own weight
 * inside every forward (a new version each time, the old one freed while the other lane runs),
 * forwards saving contexts and their backwards into per-iteration buffers; every result is the
 * synchronous host path's bits. */
static void test_two_clients_async(void **state)
{
	(void)state;
	NEED();
#ifdef FOS_HAVE_CUDA
	enum { IT = 12 };
	static uint16_t w2[N * K], ry[2][M * N], rdx[2][M * K], rdw[2][N * K], rdb[2][N];
	tsrv_fill_bf16(w2, N * K, 45, 0.05f);
	const uint16_t *hw[2] = {g_w, w2};
	fos_client *c[2];
	void *str[2];
	char wn[2][32];
	fos_status st;
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), hb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b),
		   hdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	fos_forward_opts fo = {0, 0, 0, 1, 0};
	for (int i = 0; i < 2; i++) { /* the references: the synchronous host path */
		c[i] = conn();
		snprintf(wn[i], sizeof wn[i], "two.%d", i);
		fos_tensor w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, (void *)hw[i]);
		fos_tensor y = fos_tensor_2d(FOS_DTYPE_BF16, M, N, ry[i]), gx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, rdx[i]),
			   gw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, rdw[i]), gb = fos_tensor_1d(FOS_DTYPE_BF16, N, rdb[i]);
		fos_context ctx;
		ASSERT_OK(fos_put_weight(c[i], wn[i], 1, &w, NULL, NULL, &st), st);
		ASSERT_OK(fos_forward(c[i], wn[i], &hx, &hb, &fo, &y, &ctx, &st), st);
		ASSERT_OK(fos_backward(c[i], &ctx, &hdy, NULL, &gx, &gw, &gb, &st), st);
		ASSERT_OK(fos_drop_weight(c[i], wn[i], &st), st);
	}
	uint16_t *dX = dcopy(g_x, sizeof g_x), *dDY = dcopy(g_dy, sizeof g_dy), *dB = dcopy(g_b, sizeof g_b);
	uint16_t *dW[2], *dY[2], *dGX[2], *dGW[2], *dGB[2];
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), ddy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dDY),
		   db = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dB);
	for (int i = 0; i < 2; i++) {
		dW[i] = dcopy(hw[i], sizeof g_w);
		dY[i] = dalloc((size_t)IT * M * N * 2);
		dGX[i] = dalloc((size_t)IT * M * K * 2);
		dGW[i] = dalloc((size_t)IT * N * K * 2);
		dGB[i] = dalloc((size_t)IT * N * 2);
		assert_int_equal(cudaStreamCreate(&str[i]), 0);
		ASSERT_OK(fos_set_cuda_order(c[i], str[i], FOS_CUDA_ORDER_INPUTS | FOS_CUDA_ORDER_OUTPUTS | FOS_CUDA_ORDER_ASYNC,
					     &st),
			  st);
	}
	for (int it = 0; it < IT; it++)
		for (int i = 0; i < 2; i++) {
			fos_tensor w = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW[i]);
			fos_tensor y = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY[i] + (size_t)it * M * N),
				   gx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dGX[i] + (size_t)it * M * K),
				   gw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dGW[i] + (size_t)it * N * K),
				   gb = fos_tensor_cuda(FOS_DTYPE_BF16, N, 0, dGB[i] + (size_t)it * N);
			fos_context ctx;
			ASSERT_OK(fos_forward_put(c[i], wn[i], 2 + (uint64_t)it, &w, NULL, &dx, &db, &fo, &y, &ctx, &st), st);
			ASSERT_OK(fos_backward(c[i], &ctx, &ddy, NULL, &gx, &gw, &gb, &st), st);
		}
	for (int i = 0; i < 2; i++) {
		ASSERT_OK(fos_sync(c[i], &st), st);
		assert_true(fos_async_count(c[i]) >= 2 * IT);
		assert_int_equal(cudaStreamSynchronize(str[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		for (int it = 0; it < IT; it++) {
			char what[64];
			snprintf(what, sizeof what, "client %d iteration %d y", i, it);
			same_dev(dY[i] + (size_t)it * M * N, ry[i], sizeof ry[i], what);
			snprintf(what, sizeof what, "client %d iteration %d dx", i, it);
			same_dev(dGX[i] + (size_t)it * M * K, rdx[i], sizeof rdx[i], what);
			snprintf(what, sizeof what, "client %d iteration %d dw", i, it);
			same_dev(dGW[i] + (size_t)it * N * K, rdw[i], sizeof rdw[i], what);
			snprintf(what, sizeof what, "client %d iteration %d db", i, it);
			same_dev(dGB[i] + (size_t)it * N, rdb[i], sizeof rdb[i], what);
		}
	for (int i = 0; i < 2; i++) {
		ASSERT_OK(fos_set_cuda_order(c[i], NULL, 0, &st), st);
		void *mine[] = {dW[i], dY[i], dGX[i], dGW[i], dGB[i], dX, dDY, dB};
		for (size_t j = 0; j < sizeof mine / sizeof mine[0]; j++)
			fos_cuda_release(c[i], mine[j], &st);
		ASSERT_OK(fos_drop_weight(c[i], wn[i], &st), st);
		fos_close(c[i]);
		cudaStreamDestroy(str[i]);
		void *bufs[] = {dW[i], dY[i], dGX[i], dGW[i], dGB[i]};
		for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
			cudaFree(bufs[j]);
	}
	cudaFree(dX);
	cudaFree(dDY);
	cudaFree(dB);
#endif
}

/* A weight put from device memory by a handle with reput_weights is put again from libfos's host
 * copy when fosd lost it (here: dropped by another handle of the same tenant). */
static void test_reput_device_weight(void **state)
{
	(void)state;
	NEED();
	fos_client *c = NULL, *other = conn();
	fos_status st;
	fos_connect_opts o = {NULL, 60000, NULL, NULL, 1};
	ASSERT_OK(fos_connect_with(g_srv.url, &o, &c, &st), st);
	uint16_t *dW = dcopy(g_w, sizeof g_w);
	fos_tensor dw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW), hw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	ASSERT_OK(fos_put_weight(c, "reput.d", 1, &dw, NULL, NULL, &st), st);
	ASSERT_OK(fos_put_weight(other, "reput.h", 1, &hw, NULL, NULL, &st), st);
	fos_cuda_release(c, dW, &st);
	cudaFree(dW); /* the copy libfos keeps is on the host */
	ASSERT_OK(fos_drop_weight(other, "reput.d", &st), st);
	static uint16_t y1[M * N], y2[M * N];
	fos_tensor hx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), ty1 = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y1),
		   ty2 = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y2);
	ASSERT_OK(fos_forward(c, "reput.d", &hx, NULL, NULL, &ty1, NULL, &st), st);
	assert_int_equal(fos_reput_count(c), 1);
	ASSERT_OK(fos_forward(other, "reput.h", &hx, NULL, NULL, &ty2, NULL, &st), st);
	assert_memory_equal(y1, y2, sizeof y1);
	ASSERT_OK(fos_drop_weight(c, "reput.d", &st), st);
	ASSERT_OK(fos_drop_weight(other, "reput.h", &st), st);
	fos_close(c);
	fos_close(other);
}

/* ---- mappings: release, reuse of an address, a client that dies -------------------------------- */

static void test_release_closes(void **state)
{
	(void)state;
	NEED();
	fos_client *c = conn();
	fos_status st;
	uint64_t m0 = wait_stat(c, "device_mappings", 0); /* earlier tests' connections are closed */
	uint16_t *dX = dcopy(g_x, sizeof g_x), *dW = dcopy(g_w, sizeof g_w);
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), dw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW);
	fos_tensor y = fos_tensor_out();
	ASSERT_OK(fos_linear(c, &dx, &dw, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st), st);
	free(y.data);
	assert_int_equal(tstat(c, "device_mappings"), m0 + 2);
	assert_true(tstat(c, "device_mapped_bytes") >= sizeof g_x + sizeof g_w);
	ASSERT_OK(fos_cuda_release(c, dX + 5, &st), st); /* any address inside the allocation */
	assert_int_equal(wait_stat(c, "device_mappings", m0 + 1), m0 + 1);
	ASSERT_CODE(fos_cuda_release(c, dX, &st), FOS_CODE_NOT_FOUND, st);
	ASSERT_OK(fos_cuda_release(c, dW, &st), st);
	assert_int_equal(wait_stat(c, "device_mappings", m0), m0);
	/* used again after its release: mapped again */
	y = fos_tensor_out();
	ASSERT_OK(fos_linear(c, &dx, &dw, NULL, NULL, NULL, &y, NULL, NULL, NULL, &st), st);
	free(y.data);
	assert_int_equal(tstat(c, "device_mappings"), m0 + 2);
	fos_close(c);
	cudaFree(dX);
	cudaFree(dW);
}

static void test_realloc_same_address(void **state)
{
	(void)state;
	NEED();
	fos_client *c = conn();
	fos_status st;
	size_t bytes = sizeof g_x;
	fos_tensor hw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	ASSERT_OK(fos_put_weight(c, "realloc.w", 1, &hw, NULL, NULL, &st), st);
	static uint16_t y_a[M * N], y_b[M * N], y_d[M * N];
	fos_tensor ya = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_a), yb = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_b);
	fos_tensor hxa = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), hxb = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_dy);
	ASSERT_OK(fos_forward(c, "realloc.w", &hxa, NULL, NULL, &ya, NULL, &st), st);
	ASSERT_OK(fos_forward(c, "realloc.w", &hxb, NULL, NULL, &yb, NULL, &st), st); /* g_dy's first M*K values */
	void *a = dcopy(g_x, bytes);
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, a), yd = fos_tensor_2d(FOS_DTYPE_BF16, M, N, y_d);
	ASSERT_OK(fos_forward(c, "realloc.w", &dx, NULL, NULL, &yd, NULL, &st), st);
	assert_memory_equal(y_d, y_a, sizeof y_a);
	uint64_t exports0, closes0;
	fosc_cuda_counts(c, &exports0, &closes0, NULL);
	/* freed without a release (fosd still maps it), and allocated again until the address repeats */
	assert_int_equal(cudaFree(a), 0);
	void *b = NULL, *held[16];
	int nheld = 0;
	for (int i = 0; i < 16; i++) {
		b = dalloc(bytes);
		if (b == a)
			break;
		held[nheld++] = b;
		b = NULL;
	}
	if (!b) {
		printf("realloc: cudaMalloc never gave the freed address again in 16 tries: not tested\n");
	} else {
		assert_int_equal(cudaMemcpy(b, g_dy, bytes, H2D), 0);
		ASSERT_OK(fos_forward(c, "realloc.w", &dx, NULL, NULL, &yd, NULL, &st), st);
		assert_memory_equal(y_d, y_b, sizeof y_b); /* the new bytes, not the old mapping's */
		uint64_t exports1, closes1;
		fosc_cuda_counts(c, &exports1, &closes1, NULL);
		assert_int_equal(exports1, exports0 + 1); /* a new handle */
		assert_int_equal(closes1, closes0 + 1);   /* and the stale one closed */
		fos_cuda_release(c, b, &st);
		cudaFree(b);
	}
	for (int i = 0; i < nheld; i++)
		cudaFree(held[i]);
	ASSERT_OK(fos_drop_weight(c, "realloc.w", &st), st);
	fos_close(c);
}

/* The child: maps 256 MiB through a Linear with device tensors, checks fosd has its mapping, and
 * exits without releasing anything (exit 0 when all that worked). */
#define CHILD_BYTES ((size_t)256 << 20)
static int child_main(const char *url)
{
	fos_client *c = NULL;
	fos_status st;
	if (fos_connect(url, NULL, 60000, &c, &st)) {
		fprintf(stderr, "child: connect: %s\n", st.message);
		return 2;
	}
	uint8_t *big = NULL;
	if (cudaMalloc((void **)&big, CHILD_BYTES) || cudaMemcpy(big, g_x, sizeof g_x, H2D) ||
	    cudaMemcpy(big + sizeof g_x, g_w, sizeof g_w, H2D)) {
		fprintf(stderr, "child: cudaMalloc / cudaMemcpy failed\n");
		return 3;
	}
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, big), dw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, big + sizeof g_x);
	fos_tensor dy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, big + sizeof g_x + sizeof g_w);
	if (fos_linear(c, &dx, &dw, NULL, NULL, NULL, &dy, NULL, NULL, NULL, &st)) {
		fprintf(stderr, "child: linear: %s: %s\n", fos_code_name(st.code), st.message);
		return 4;
	}
	fos_stats_snapshot *s;
	uint64_t maps = 0, bytes = 0;
	if (fos_stats_take(c, &s, &st) || fos_stats_get(s, "device_mappings", &maps) ||
	    fos_stats_get(s, "device_mapped_bytes", &bytes))
		return 5;
	fos_stats_free(s);
	if (maps < 1 || bytes < CHILD_BYTES) {
		fprintf(stderr, "child: fosd reports %llu mappings of %llu bytes\n", (unsigned long long)maps,
			(unsigned long long)bytes);
		return 6;
	}
	_exit(0); /* mappings open, memory not freed, the handle not closed */
}

static void test_child_exit_releases(void **state)
{
	(void)state;
	NEED();
	fos_client *c = conn();
	fos_status st;
	/* the same Linear once from here, so fosd's own buffers for it exist before measuring */
	uint16_t *dX = dcopy(g_x, sizeof g_x), *dW = dcopy(g_w, sizeof g_w), *dY = dalloc((size_t)M * N * 2);
	fos_tensor dx = fos_tensor_cuda(FOS_DTYPE_BF16, M, K, dX), dw = fos_tensor_cuda(FOS_DTYPE_BF16, N, K, dW),
		   dy = fos_tensor_cuda(FOS_DTYPE_BF16, M, N, dY);
	ASSERT_OK(fos_linear(c, &dx, &dw, NULL, NULL, NULL, &dy, NULL, NULL, NULL, &st), st);
	fos_cuda_release(c, dX, &st);
	fos_cuda_release(c, dW, &st);
	fos_cuda_release(c, dY, &st);
	cudaFree(dX);
	cudaFree(dW);
	cudaFree(dY);
	uint64_t m0 = wait_stat(c, "device_mappings", 0), b0 = tstat(c, "device_mapped_bytes");
	size_t free0 = 0, total = 0;
	cudaDeviceSynchronize();
	assert_int_equal(cudaMemGetInfo(&free0, &total), 0);

	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	assert_true(n > 0);
	self[n] = 0;
	char *argv[] = {self, "--child", g_srv.url, NULL};
	pid_t pid;
	assert_int_equal(posix_spawn(&pid, self, NULL, NULL, argv, environ), 0);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg("the child failed (status 0x%x)", status);
	assert_int_equal(wait_stat(c, "device_mappings", m0), m0);
	assert_int_equal(tstat(c, "device_mapped_bytes"), b0);
	/* the child's 256 MiB are free again (fosd holds no mapping of them) */
	size_t free1 = 0;
	for (int i = 0; i < 100; i++) {
		assert_int_equal(cudaMemGetInfo(&free1, &total), 0);
		if (free1 + ((size_t)64 << 20) >= free0)
			break;
		usleep(100000);
	}
	if (free1 + ((size_t)64 << 20) < free0)
		fail_msg("GPU free memory %zu MiB after the child exited, %zu MiB before", free1 >> 20, free0 >> 20);
	fos_close(c);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--child")) {
		tsrv_fill_bf16(g_w, N * K, 41, 0.05f);
		tsrv_fill_bf16(g_x, M * K, 42, 1.0f);
		return child_main(argv[2]);
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_op_socket),
		cmocka_unit_test(test_every_op_channel),
		cmocka_unit_test(test_event_stream),
		cmocka_unit_test(test_every_op_stream_order),
		cmocka_unit_test(test_every_op_async),
		cmocka_unit_test(test_two_clients_async),
		cmocka_unit_test(test_reput_device_weight),
		cmocka_unit_test(test_release_closes),
		cmocka_unit_test(test_realloc_same_address),
		cmocka_unit_test(test_child_exit_releases),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
