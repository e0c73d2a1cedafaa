/* gpu_devices.c: a cuda fosd over every GPU of the host (`--devices all`). Health lists each GPU
 * (cuda:i, its UUID); a weight put on device i alone runs its forward (every override) and backward
 * there, with the same bits on every device and as the in-process reference; a forward whose X is
 * a device tensor on GPU i runs on device i when the weight has a replica there, and with two or
 * more GPUs a weight kept on device 0 only refuses X from GPU 1 (FAILED_PRECONDITION naming both).
 * With one GPU the loops run once (the --devices path on cuda); skips cleanly without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "fos.h"
#include "fos_wire.h"
#include "support_assert.h"
#include "support_devices.h"
#include "support_raw.h"
#include "support_server.h"
#include "support_trust.h"

#ifdef FOS_HAVE_CUDA
/* The CUDA runtime calls used here, by their C ABI (cudaError_t is an int-sized enum). */
extern int cudaMalloc(void **p, size_t n);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
extern int cudaIpcGetMemHandle(void *handle64, void *p);
extern int cudaGetDeviceCount(int *n);
extern int cudaSetDevice(int d);
#define H2D 1
#else
static int cudaGetDeviceCount(int *n)
{
	*n = 0;
	return 1;
}
#endif

#define M 256
#define N 512
#define K 256
#define MAXD 16

static tsrv g_srv;
static nng_socket g_sock;
static fos_client *g_c;
static int g_ndev; /* devices fosd serves; 0: no GPU, every test skips */
static uint8_t g_uuid[MAXD][16];
static uint16_t g_w[N * K], g_x[M * K], g_dy[M * N];

static int setup(void **state)
{
	(void)state;
	int n = 0;
	if (cudaGetDeviceCount(&n) || n <= 0) {
		printf("gpu_devices: no usable GPU, skipping\n");
		return 0;
	}
	setenv("FOS_TEST_BACKEND", "cuda", 1);
	const char *args[] = {"--devices", "all", NULL};
	if (tsrv_start(&g_srv, args) || traw_open(&g_sock, g_srv.url))
		return -1;
	g_c = tt_connect_ms(g_srv.url, NULL, 60000);
	tsrv_fill_bf16(g_w, N * K, 51, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 52, 1.0f);
	tsrv_fill_bf16(g_dy, M * N, 53, 0.1f);
	g_ndev = n < MAXD ? n : MAXD;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (!g_ndev)
		return 0;
	fos_close(g_c);
	nng_close(g_sock);
	int rc = tsrv_stop(&g_srv, SIGTERM, 30000);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

#define NEED_DEVICES()                                                                                         \
	do {                                                                                                   \
		if (!g_ndev)                                                                                   \
			skip();                                                                                \
	} while (0)

static void put_on(const char *name, const uint32_t *devices, size_t nd, uint32_t replicas)
{
	traw_check(tdev_put(g_sock, name, 1, g_w, N, K, devices, nd, replicas, 0), 0, NULL);
}

static void requests_per_device(uint64_t *out)
{
	tdev_requests(g_sock, g_ndev, out);
}

static int ran_on(const uint64_t *before)
{
	return tdev_ran_on(g_sock, g_ndev, before);
}

static void test_health(void **state)
{
	(void)state;
	NEED_DEVICES();
	Fos__HealthRequest hr = FOS__HEALTH_REQUEST__INIT;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &hr;
	Fos__Response *r = traw_call(g_sock, &rq, NULL, NULL, 0);
	assert_int_equal(r->health->n_devices, g_ndev);
	for (int i = 0; i < g_ndev; i++) {
		const Fos__DeviceInfo *d = r->health->devices[i];
		char want[24];
		snprintf(want, sizeof want, "cuda:%d (", i);
		assert_int_equal(d->index, i);
		assert_string_equal(d->backend, "cuda");
		if (strncmp(d->device, want, strlen(want)))
			fail_msg("device %d is named '%s'", i, d->device);
		assert_int_equal(d->gpu_uuid.len, 16);
		memcpy(g_uuid[i], d->gpu_uuid.data, 16);
		for (int j = 0; j < i; j++)
			assert_memory_not_equal(g_uuid[i], g_uuid[j], 16);
	}
	assert_memory_equal(r->health->gpu_uuid.data, g_uuid[0], 16);
	fos__response__free_unpacked(r, NULL);
}

/* Every override on each device alone: forward with a context, backward; the bits of device 0 and
 * of the in-process reference on every device. */
static void test_each_device_bitwise(void **state)
{
	(void)state;
	NEED_DEVICES();
	static const int ovr[] = {FOS_OVERRIDE_QUANTIZED, FOS_OVERRIDE_HIGH_PRECISION, FOS_OVERRIDE_DEQUANTIZED};
	static const int lov[] = {FOS_OVR_QUANTIZED, FOS_OVR_HIGH_PRECISION, FOS_OVR_DEQUANTIZED};
	uint16_t *ry = malloc(sizeof(uint16_t) * M * N), *rdx = malloc(sizeof(uint16_t) * M * K);
	uint16_t *rdw = malloc(sizeof(uint16_t) * N * K);
	assert_non_null(ry);
	assert_non_null(rdx);
	assert_non_null(rdw);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), tdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	fos_status st;
	for (size_t o = 0; o < sizeof ovr / sizeof ovr[0]; o++) {
		fos_linear_opts lo = fos_linear_opts_default();
		lo.override = lov[o];
		assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, g_dy, M, N, K, &lo, ry, rdx, rdw, NULL), 0);
		for (uint32_t d = 0; d < (uint32_t)g_ndev; d++) {
			char name[32];
			snprintf(name, sizeof name, "dev%u.o%zu", d, o);
			put_on(name, &d, 1, 0);
			fos_forward_opts fo = {.override = ovr[o], .save_context = 1};
			fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
			fos_context ctx;
			uint64_t before[MAXD];
			requests_per_device(before);
			ASSERT_OK(fos_forward(g_c, name, &tx, NULL, &fo, &y, &ctx, &st), st);
			assert_int_equal(ran_on(before), (int)d);
			requests_per_device(before);
			ASSERT_OK(fos_backward(g_c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
			assert_int_equal(ran_on(before), (int)d);
			if (memcmp(y.data, ry, sizeof(uint16_t) * M * N) || memcmp(dx.data, rdx, sizeof(uint16_t) * M * K) ||
			    memcmp(dw.data, rdw, sizeof(uint16_t) * N * K))
				fail_msg("override %zu on device %u: not the reference's bits", o, d);
			free(y.data);
			free(dx.data);
			free(dw.data);
		}
	}
	free(ry);
	free(rdx);
	free(rdw);
}

#ifdef FOS_HAVE_CUDA
/* A Forward whose X is a device tensor in GPU i's memory (raw: its reply says the device). */
static Fos__Response *forward_dev_x(const char *weight, int gpu, void *xdev)
{
	uint8_t handle[64];
	assert_int_equal(cudaSetDevice(gpu), 0);
	assert_int_equal(cudaIpcGetMemHandle(handle, xdev), 0);
	Fos__CudaRef cr = FOS__CUDA_REF__INIT;
	cr.ipc_handle.data = handle;
	cr.ipc_handle.len = sizeof handle;
	cr.gpu_uuid.data = g_uuid[gpu];
	cr.gpu_uuid.len = 16;
	Fos__Tensor tx = FOS__TENSOR__INIT;
	int64_t shape[2] = {M, K};
	tx.dtype = FOS__DTYPE__DTYPE_BF16;
	tx.n_shape = 2;
	tx.shape = shape;
	tx.length = sizeof g_x;
	tx.cuda = &cr;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	fr.weight = (char *)weight;
	fr.x = &tx;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	return traw_call(g_sock, &rq, NULL, NULL, 0);
}
#endif

static void test_device_tensor_routing(void **state)
{
	(void)state;
	NEED_DEVICES();
#ifdef FOS_HAVE_CUDA
	if (!g_uuid[0][0] && !g_uuid[0][1] && !g_uuid[0][15])
		skip(); /* test_health did not run */
	put_on("rep", NULL, 0, (uint32_t)g_ndev);
	uint32_t d0 = 0;
	put_on("only0", &d0, 1, 0);
	for (int i = 0; i < g_ndev; i++) {
		void *x = NULL;
		assert_int_equal(cudaSetDevice(i), 0);
		assert_int_equal(cudaMalloc(&x, sizeof g_x), 0);
		assert_int_equal(cudaMemcpy(x, g_x, sizeof g_x, H2D), 0);
		Fos__Response *r = forward_dev_x("rep", i, x);
		if (r->status && r->status->code)
			fail_msg("forward on GPU %d: %s", i, r->status->message);
		assert_int_equal(r->device, i);
		fos__response__free_unpacked(r, NULL);
		if (i > 0) {
			r = forward_dev_x("only0", i, x);
			traw_check(r, FOS__CODE__FAILED_PRECONDITION, "has no copy on device");
		}
		assert_int_equal(cudaFree(x), 0);
	}
	cudaSetDevice(0);
#else
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health),
		cmocka_unit_test(test_each_device_bitwise),
		cmocka_unit_test(test_device_tensor_routing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
