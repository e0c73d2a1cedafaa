/* test_server_devmem.c: the device data plane's table and per-request checks (server/devmem/)
 * against a stand-in backend whose "IPC handles" name host buffers: a handle's first byte gives
 * its allocation's size in KiB (0: the driver refuses it) and its third the byte it is filled with, so every check the cuda backend relies
 * on runs on the CPU: handle and UUID forms, the GPU UUID, connections without peer credentials,
 * ranges past the allocation and offset + length overflow, per-connection and per-tenant
 * ownership (another tenant's CloseDeviceMemory is NOT_FOUND; its own mapping shares the one open
 * of the allocation, which is unmapped with the last mapping), release
 * on disconnect deferred while a request holds the mapping, the per-connection limit (least
 * recently used idle mapping closed), in-place output targets only when aligned and large enough,
 * snapshots of checked inputs, and the stats counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devmem.h"

static const unsigned char k_uuid[16] = {0xfa, 0xce, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

typedef struct fake {
	int opens, closes, ev_opens, ev_closes, reads;
} fake;
static fake g_fake;

/* A mapping is a fresh 4096-aligned host buffer (the driver would return the same address for a
 * second open of one handle; the table never relies on either). */
static int f_open(fos_backend *be, const unsigned char h[64], void **base, size_t *size, fos_err *err)
{
	(void)be;
	if (!h[0])
		return fos_seterr(err, FOS_EINVAL, "cudaIpcOpenMemHandle: invalid resource handle");
	size_t n = (size_t)h[0] * 1024;
	void *p = NULL;
	if (posix_memalign(&p, 4096, n))
		return fos_seterr(err, FOS_ENOMEM, "no memory");
	memset(p, h[2], n); /* the allocation's bytes: its id */
	*base = p;
	*size = n;
	g_fake.opens++;
	return FOS_OK;
}

static void f_close(fos_backend *be, void *base)
{
	(void)be;
	free(base);
	g_fake.closes++;
}

static int f_ev_open(fos_backend *be, const unsigned char h[64], void **ev, fos_err *err)
{
	(void)be;
	(void)err;
	*ev = malloc(1);
	(void)h;
	g_fake.ev_opens++;
	return FOS_OK;
}

static void f_ev_close(fos_backend *be, void *ev)
{
	(void)be;
	free(ev);
	g_fake.ev_closes++;
}

static int f_ev_wait(fos_backend *be, void *ev, fos_err *err)
{
	(void)be;
	(void)ev;
	(void)err;
	return FOS_OK;
}

static int f_read(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	(void)be;
	(void)err;
	memcpy(dst, src, n);
	g_fake.reads++;
	return FOS_OK;
}

static int f_d2d(fos_backend *be, void *dst, const void *src, size_t n, fos_err *err)
{
	(void)be;
	(void)err;
	memcpy(dst, src, n);
	return FOS_OK;
}

static fos_backend g_be;
static fosd_devmaps g_dm;

static int setup(void **state)
{
	(void)state;
	memset(&g_fake, 0, sizeof g_fake);
	memset(&g_be, 0, sizeof g_be);
	g_be.name = "fake";
	snprintf(g_be.device, sizeof g_be.device, "stand-in GPU");
	memcpy(g_be.uuid, k_uuid, 16);
	g_be.has_uuid = 1;
	g_be.ipc_open = f_open;
	g_be.ipc_close = f_close;
	g_be.ipc_event_open = f_ev_open;
	g_be.ipc_event_close = f_ev_close;
	g_be.ipc_event_wait = f_ev_wait;
	g_be.ipc_event_sync = f_ev_wait;
	g_be.read_sync = f_read;
	g_be.d2d = f_d2d;
	if (fosd_devmaps_init(&g_dm, &g_be))
		return -1;
	for (uint32_t p = 1; p <= 3; p++)
		fosd_devmaps_pipe_opened(&g_dm, p);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fosd_devmaps_destroy(&g_dm);
	/* every open closed exactly once */
	assert_int_equal(g_fake.opens, g_fake.closes);
	assert_int_equal(g_fake.ev_opens, g_fake.ev_closes);
	return 0;
}

/* A (rows, cols) bf16 tensor at offset of the allocation handle h names. */
typedef struct dt {
	Fos__Tensor t;
	Fos__CudaRef ref;
	int64_t shape[2];
	uint8_t handle[64];
	uint8_t uuid[16];
} dt;

static Fos__Tensor *dev_tensor(dt *d, uint8_t kib, uint8_t fill, uint8_t id, uint64_t offset, int64_t rows,
			       int64_t cols)
{
	memset(d, 0, sizeof *d);
	fos__tensor__init(&d->t);
	fos__cuda_ref__init(&d->ref);
	d->handle[0] = kib;
	(void)fill;
	d->handle[2] = id;
	memcpy(d->uuid, k_uuid, 16);
	d->ref.ipc_handle.data = d->handle;
	d->ref.ipc_handle.len = 64;
	d->ref.gpu_uuid.data = d->uuid;
	d->ref.gpu_uuid.len = 16;
	d->ref.offset = offset;
	d->shape[0] = rows;
	d->shape[1] = cols;
	d->t.dtype = FOS__DTYPE__DTYPE_BF16;
	d->t.n_shape = 2;
	d->t.shape = d->shape;
	d->t.length = (uint64_t)rows * (uint64_t)cols * 2;
	d->t.cuda = &d->ref;
	return &d->t;
}

static void expect_get(fosd_dev_req *q, Fos__Tensor *t, int snapshot, int code, const char *needle)
{
	fosw_tensor out;
	char msg[512] = "";
	int got = 0;
	int rc = fosd_dev_tensor_get(q, t, "x", snapshot, &out, &got, msg, sizeof msg);
	if (code == 0 && rc)
		fail_msg("expected success, got %d: %s", got, msg);
	if (code) {
		assert_int_equal(rc, -1);
		if (got != code)
			fail_msg("got code %d (%s), expected %d", got, msg, code);
		if (needle && !strstr(msg, needle))
			fail_msg("message '%s' does not mention '%s'", msg, needle);
	}
}

static void test_forms_and_checks(void **state)
{
	(void)state;
	fosd_dev_req q;
	memset(&q, 0, sizeof q);
	fosd_dev_req_begin(&q, &g_dm, 1, NULL);
	dt d;

	/* a good tensor: the address is base + offset, in the device tensor's mapping */
	fosw_tensor out;
	char msg[512];
	int code;
	assert_int_equal(fosd_dev_tensor_get(&q, dev_tensor(&d, 4, 7, 1, 512, 16, 32), "x", 0, &out, &code, msg, sizeof msg),
			 0);
	assert_non_null(out.cuda);
	assert_int_equal(out.len, 16 * 32 * 2);
	assert_int_equal((uintptr_t)out.ptr % 4096, 512);
	assert_int_equal(out.ptr[0], 1);
	assert_true(fosd_dev_inplace_ok(&out));

	/* forms */
	dev_tensor(&d, 4, 0, 1, 0, 16, 32);
	d.ref.ipc_handle.len = 10;
	expect_get(&q, &d.t, 0, FOS__CODE__INVALID_ARGUMENT, "ipc_handle is 10 bytes");
	dev_tensor(&d, 4, 0, 1, 0, 16, 32);
	d.ref.gpu_uuid.len = 3;
	expect_get(&q, &d.t, 0, FOS__CODE__INVALID_ARGUMENT, "gpu_uuid is 3 bytes");
	dev_tensor(&d, 4, 0, 1, 0, 16, 32);
	d.t.offset = 64;
	expect_get(&q, &d.t, 0, FOS__CODE__INVALID_ARGUMENT, "no data-section offset");
	dev_tensor(&d, 4, 0, 1, 0, 16, 32);
	Fos__ShmRef sr = FOS__SHM_REF__INIT;
	d.t.shm = &sr;
	expect_get(&q, &d.t, 0, FOS__CODE__INVALID_ARGUMENT, "no shm reference");
	/* lengths that do not match the shape, or overflow it */
	dev_tensor(&d, 4, 0, 1, 0, 16, 32);
	d.t.length = 100;
	expect_get(&q, &d.t, 0, FOS__CODE__INVALID_ARGUMENT, NULL);
	dev_tensor(&d, 4, 0, 1, 0, INT64_C(1) << 40, INT64_C(1) << 40);
	expect_get(&q, &d.t, 0, FOS__CODE__INVALID_ARGUMENT, NULL);

	/* another GPU */
	dev_tensor(&d, 4, 0, 1, 0, 16, 32);
	d.uuid[15] ^= 1;
	expect_get(&q, &d.t, 0, FOS__CODE__FAILED_PRECONDITION, "but fosd runs on GPU face0102030405060708090a0b0c0d0e");

	/* ranges: past the end, exactly the end, offset + length overflowing */
	expect_get(&q, dev_tensor(&d, 4, 0, 1, 4096 - 1023, 16, 32), 0, FOS__CODE__INVALID_ARGUMENT,
		   "lie outside the client's GPU allocation of 4096 bytes");
	expect_get(&q, dev_tensor(&d, 4, 0, 1, 4096 - 1024, 16, 32), 0, 0, NULL);
	expect_get(&q, dev_tensor(&d, 4, 0, 1, UINT64_MAX - 100, 16, 32), 0, FOS__CODE__INVALID_ARGUMENT, "lie outside");

	/* a handle the driver refuses */
	expect_get(&q, dev_tensor(&d, 0, 0, 9, 0, 16, 32), 0, FOS__CODE__INVALID_ARGUMENT, "cannot open the CUDA IPC");

	/* an unaligned address is staged, not used in place */
	assert_int_equal(fosd_dev_tensor_get(&q, dev_tensor(&d, 4, 0, 1, 2, 16, 32), "x", 0, &out, &code, msg, sizeof msg),
			 0);
	assert_false(fosd_dev_inplace_ok(&out));

	/* a snapshot is a host copy (read with read_sync), not a device address */
	int reads = g_fake.reads;
	assert_int_equal(fosd_dev_tensor_get(&q, dev_tensor(&d, 4, 5, 1, 0, 16, 32), "amax", 1, &out, &code, msg, sizeof msg),
			 0);
	assert_null(out.cuda);
	assert_int_equal(out.ptr[100], 1);
	assert_int_equal(g_fake.reads, reads + 1);

	/* one mapping for handle 1 however often it is named */
	uint64_t count = 0, bytes = 0, tensors = 0, staged = 0;
	fosd_devmaps_stats(&g_dm, &count, &bytes, &tensors, &staged);
	assert_int_equal(count, 1);
	assert_int_equal(bytes, 4096);
	assert_int_equal(tensors, 4);
	fosd_dev_req_end(&q);

	/* a connection without peer credentials (tcp) */
	fosd_dev_req_begin(&q, &g_dm, 2, NULL);
	fosd_dev_req_set_peer(&q, 0);
	expect_get(&q, dev_tensor(&d, 4, 0, 1, 0, 16, 32), 0, FOS__CODE__FAILED_PRECONDITION, "ipc:// connection");
	fosd_dev_req_end(&q);
	fosd_devmaps_pipe_closed(&g_dm, 1);
	fosd_devmaps_stats(&g_dm, &count, &bytes, NULL, NULL);
	assert_int_equal(count, 0);
	assert_int_equal(bytes, 0);
}

/* A cpu fosd's table (no backend with IPC) refuses every device tensor. */
static void test_cpu_refuses(void **state)
{
	(void)state;
	fosd_devmaps cpu;
	fos_backend plain;
	memset(&plain, 0, sizeof plain);
	plain.name = "cpu";
	assert_int_equal(fosd_devmaps_init(&cpu, &plain), 0);
	fosd_dev_req q;
	memset(&q, 0, sizeof q);
	fosd_dev_req_begin(&q, &cpu, 1, NULL);
	dt d;
	expect_get(&q, dev_tensor(&d, 4, 0, 1, 0, 16, 32), 0, FOS__CODE__FAILED_PRECONDITION, "need a cuda fosd");
	Fos__Request rq = FOS__REQUEST__INIT;
	uint8_t ev[64] = {1};
	rq.cuda_wait_event.data = ev;
	rq.cuda_wait_event.len = 64;
	char msg[256];
	assert_int_equal(fosd_dev_event_check(&q, &rq, msg, sizeof msg), FOS__CODE__FAILED_PRECONDITION);
	fosd_dev_req_end(&q);
	fosd_devmaps_destroy(&cpu);
}

static void test_tenants_and_close(void **state)
{
	(void)state;
	fosd_dev_req a, b;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	dt d;
	char msg[256];
	/* tenant "alice" maps handle 2 on pipe 1 */
	fosd_dev_req_begin(&a, &g_dm, 1, "alice");
	expect_get(&a, dev_tensor(&d, 8, 0, 2, 0, 16, 32), 0, 0, NULL);
	fosd_dev_req_end(&a);
	/* tenant "bob" on the same connection cannot close alice's mapping ... */
	assert_int_equal(fosd_devmaps_close(&g_dm, 1, "bob", d.handle, 64, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	assert_non_null(strstr(msg, "has no mapping"));
	/* ... nor can another connection, or anonymous requests */
	assert_int_equal(fosd_devmaps_close(&g_dm, 2, "alice", d.handle, 64, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	assert_int_equal(fosd_devmaps_close(&g_dm, 1, NULL, d.handle, 64, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	/* bob naming the same handle gets a mapping of his own, on the allocation opened once */
	int opens = g_fake.opens;
	fosd_dev_req_begin(&b, &g_dm, 1, "bob");
	expect_get(&b, dev_tensor(&d, 8, 0, 2, 0, 16, 32), 0, 0, NULL);
	assert_int_equal(g_fake.opens, opens);
	fosd_dev_req_end(&b);
	uint64_t count, bytes;
	fosd_devmaps_stats(&g_dm, &count, &bytes, NULL, NULL);
	assert_int_equal(count, 2);
	assert_int_equal(bytes, 8192); /* one allocation */
	/* a bad handle length */
	assert_int_equal(fosd_devmaps_close(&g_dm, 1, "alice", d.handle, 63, msg, sizeof msg),
			 FOS__CODE__INVALID_ARGUMENT);
	/* alice closes hers while a request of hers still uses it: her mapping goes when that one
	 * ends, the allocation stays open for bob's */
	fosd_dev_req_begin(&a, &g_dm, 1, "alice");
	expect_get(&a, dev_tensor(&d, 8, 0, 2, 0, 16, 32), 0, 0, NULL);
	int closes = g_fake.closes;
	assert_int_equal(fosd_devmaps_close(&g_dm, 1, "alice", d.handle, 64, msg, sizeof msg), 0);
	fosd_dev_req_end(&a);
	assert_int_equal(g_fake.closes, closes);
	fosd_devmaps_stats(&g_dm, &count, NULL, NULL, NULL);
	assert_int_equal(count, 1);
	/* bob closes his: the allocation is unmapped */
	assert_int_equal(fosd_devmaps_close(&g_dm, 1, "bob", d.handle, 64, msg, sizeof msg), 0);
	assert_int_equal(g_fake.closes, closes + 1);
	/* naming it again maps it again */
	opens = g_fake.opens;
	fosd_dev_req_begin(&a, &g_dm, 1, "alice");
	expect_get(&a, dev_tensor(&d, 8, 0, 2, 0, 16, 32), 0, 0, NULL);
	assert_int_equal(g_fake.opens, opens + 1);
	fosd_dev_req_begin(&b, &g_dm, 1, "bob");
	expect_get(&b, dev_tensor(&d, 8, 0, 2, 0, 16, 32), 0, 0, NULL);
	fosd_dev_req_end(&b);
	/* the connection goes away while alice's request runs: nothing unmapped under it */
	closes = g_fake.closes;
	fosd_devmaps_pipe_closed(&g_dm, 1);
	assert_int_equal(g_fake.closes, closes); /* bob's mapping went, the allocation is alice's still */
	fosd_dev_req_end(&a);
	assert_int_equal(g_fake.closes, closes + 1);
	fosd_devmaps_stats(&g_dm, &count, NULL, NULL, NULL);
	assert_int_equal(count, 0);
	/* a closed connection opens nothing more */
	fosd_dev_req_begin(&a, &g_dm, 1, "alice");
	expect_get(&a, dev_tensor(&d, 8, 0, 2, 0, 16, 32), 0, FOS__CODE__UNAVAILABLE, "connection closed");
	fosd_dev_req_end(&a);
}

static void test_limit_and_outputs(void **state)
{
	(void)state;
	fosd_dev_req q;
	memset(&q, 0, sizeof q);
	dt d;
	/* one more than the limit on pipe 3: the least recently used (handle id 0) goes */
	for (int i = 0; i <= FOSD_DEV_MAX_PER_PIPE; i++) {
		fosd_dev_req_begin(&q, &g_dm, 3, NULL);
		dev_tensor(&d, 1, 0, 0, 0, 16, 16);
		d.handle[3] = (uint8_t)(i >> 8);
		d.handle[4] = (uint8_t)i;
		expect_get(&q, &d.t, 0, 0, NULL);
		fosd_dev_req_end(&q);
	}
	uint64_t count;
	fosd_devmaps_stats(&g_dm, &count, NULL, NULL, NULL);
	assert_int_equal(count, FOSD_DEV_MAX_PER_PIPE);
	char msg[256];
	uint8_t h0[64] = {1, 0, 0, 0, 0};
	assert_int_equal(fosd_devmaps_close(&g_dm, 3, NULL, h0, 64, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	uint8_t h1[64] = {1, 0, 0, 0, 1};
	assert_int_equal(fosd_devmaps_close(&g_dm, 3, NULL, h1, 64, msg, sizeof msg), 0);

	/* device output targets: in place only when aligned and large enough */
	fosd_dev_req_begin(&q, &g_dm, 3, NULL);
	Fos__ShmOutput so = FOS__SHM_OUTPUT__INIT;
	dev_tensor(&d, 16, 0, 5, 256, 16, 16);
	so.result = (char *)"y";
	so.cuda = &d.ref;
	so.capacity = 1024;
	assert_int_equal(fosd_dev_output_check(&q, 0, &so, msg, sizeof msg), 0);
	assert_null(fosd_dev_out_inplace(&q, 0, 1025));
	void *p = fosd_dev_out_inplace(&q, 0, 1024);
	assert_non_null(p);
	assert_true(fosd_dev_borrowed(&q, p));
	/* capacity past the allocation */
	so.capacity = 16 * 1024;
	assert_int_equal(fosd_dev_output_check(&q, 1, &so, msg, sizeof msg), FOS__CODE__INVALID_ARGUMENT);
	/* unaligned: written by a copy */
	d.ref.offset = 8;
	so.capacity = 64;
	assert_int_equal(fosd_dev_output_check(&q, 2, &so, msg, sizeof msg), 0);
	assert_null(fosd_dev_out_inplace(&q, 2, 64));
	uint8_t src[64];
	memset(src, 0x3c, sizeof src);
	assert_int_equal(fosd_dev_out_write(&q, &g_be, 2, src, sizeof src, msg, sizeof msg), 0);
	uint64_t staged0, staged1;
	fosd_devmaps_stats(&g_dm, NULL, NULL, NULL, &staged0);
	assert_int_equal(fosd_dev_out_write(&q, &g_be, 0, p, 1024, msg, sizeof msg), 0); /* in place: no copy */
	fosd_devmaps_stats(&g_dm, NULL, NULL, NULL, &staged1);
	assert_int_equal(staged1, staged0);
	fosd_dev_req_end(&q);
	fosd_devmaps_pipe_closed(&g_dm, 3);
	fosd_devmaps_stats(&g_dm, &count, NULL, NULL, NULL);
	assert_int_equal(count, 0);
}

static void test_events(void **state)
{
	(void)state;
	fosd_dev_req q;
	memset(&q, 0, sizeof q);
	Fos__Request rq = FOS__REQUEST__INIT;
	uint8_t ev[64] = {7, 7};
	char msg[256];
	fosd_dev_req_begin(&q, &g_dm, 2, NULL);
	rq.cuda_wait_event.data = ev;
	rq.cuda_wait_event.len = 12;
	assert_int_equal(fosd_dev_event_check(&q, &rq, msg, sizeof msg), FOS__CODE__INVALID_ARGUMENT);
	rq.cuda_wait_event.len = 64;
	assert_int_equal(fosd_dev_event_check(&q, &rq, msg, sizeof msg), 0);
	fos_err e;
	assert_int_equal(fosd_dev_wait(&q, &g_be, &e), 0);
	fosd_dev_req_end(&q);
	/* opened once per connection */
	fosd_dev_req_begin(&q, &g_dm, 2, NULL);
	assert_int_equal(fosd_dev_event_check(&q, &rq, msg, sizeof msg), 0);
	fosd_dev_req_end(&q);
	assert_int_equal(g_fake.ev_opens, 1);
	fosd_devmaps_pipe_closed(&g_dm, 2);
	assert_int_equal(g_fake.ev_closes, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_forms_and_checks, setup, teardown),
		cmocka_unit_test(test_cpu_refuses),
		cmocka_unit_test_setup_teardown(test_tenants_and_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_limit_and_outputs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
