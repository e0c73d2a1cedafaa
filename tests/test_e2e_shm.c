/* test_e2e_shm.c: the shared-memory data plane against a real fosd (CPU backend, ipc): forward,
 * backward, linear, quantize and dequantize with inputs and results in regions give exactly the
 * bytes of the inline path (and of the in-process reference); bad region references (unregistered
 * name, another connection's region, offset past the end, offset + length overflow, a nonzero
 * data-section offset, bad result names and capacities, bad keys, a region shrunk under fosd,
 * another tenant's region on the same connection) get precise statuses while the daemon keeps
 * serving; a client that dies holding regions leaves no registration and no mapping behind;
 * libfos registers its regions again after a reconnect;
 * `fos load --shm` moves only headers through the socket; and the guarded copy survives a
 * SIGBUS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nng/nng.h>

#include "fos.h"
#include "fos_wire.h"
#include "shm.h"
#include "support_server.h"
#include "support_assert.h"
#include "support_raw.h"
#include "support_trust.h"

#define M 128
#define K 128
#define N 256

static tsrv g_srv;
static uint16_t g_w[N * K], g_x[M * K], g_b[N], g_dy[M * N];

static fos_client *connect_or_fail(void)
{
	return tt_connect(g_srv.url, NULL);
}

static int setup_server(void **state)
{
	(void)state;
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	tsrv_fill_bf16(g_w, N * K, 11, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 12, 1.0f);
	tsrv_fill_bf16(g_b, N, 13, 0.5f);
	tsrv_fill_bf16(g_dy, M * N, 14, 0.1f);
	return tsrv_put_weight_bf16(&g_srv, "w", N, K, g_w);
}

static int teardown_server(void **state)
{
	(void)state;
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return rc == 0 ? 0 : -1;
}

/* The server's region counts must come back to zero (up to 5 s: connection teardown is async). */
static void expect_no_regions(fos_client *c)
{
	uint64_t n = 1, bytes = 1, mapped = 1;
	fos_status st;
	uint64_t t0 = tsrv_now_ms();
	while (tsrv_now_ms() - t0 < 5000) {
		ASSERT_OK(fos_region_stats(c, &n, &bytes, &mapped, &st), st);
		if (!n && !bytes && !mapped)
			return;
		usleep(20000);
	}
	fail_msg("fosd still has %llu regions (%llu bytes registered, %llu mapped)", (unsigned long long)n,
		 (unsigned long long)bytes, (unsigned long long)mapped);
}

/* Lines of /proc/PID/maps of fosd that mention needle. */
static int fosd_maps_count(const char *needle)
{
	char path[64], line[1024];
	snprintf(path, sizeof path, "/proc/%d/maps", (int)g_srv.pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* ---- bit-identical results ------------------------------------------------------------------ */

static void test_forward_backward(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	/* inline: forward with a bias and a saved context, then backward */
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), b = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_tensor dy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	fos_tensor y0 = fos_tensor_out(), dx0 = fos_tensor_out(), dw0 = fos_tensor_out(), db0 = fos_tensor_out();
	fos_forward_opts fo = {0, FOS_OVERRIDE_DEFAULT, 0, 1, 0};
	fos_context ctx;
	ASSERT_OK(fos_forward(c, "w", &x, &b, &fo, &y0, &ctx, &st), st);
	ASSERT_OK(fos_backward(c, &ctx, &dy, NULL, &dx0, &dw0, &db0, &st), st);
	/* the same through the in-process reference */
	uint16_t *yr = malloc(M * N * 2), *dxr = malloc(M * K * 2), *dwr = malloc(N * K * 2), *dbr = malloc(N * 2);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, g_b, g_dy, M, N, K, &o, yr, dxr, dwr, dbr), 0);
	assert_memory_equal(y0.data, yr, M * N * 2);
	assert_memory_equal(dx0.data, dxr, M * K * 2);

	/* shm: every input and every result in regions (a memfd and a POSIX one) */
	for (int kind = 0; kind < 2; kind++) {
		fos_region *in, *out;
		size_t in_sz = (M * K + N + M * N) * 2 + 3 * 64, out_sz = (M * N + M * K + N * K + N) * 2 + 4 * 64;
		ASSERT_OK(fos_region_create(c, "in", in_sz, kind, &in, &st), st);
		ASSERT_OK(fos_region_create(c, NULL, out_sz, kind, &out, &st), st);
		uint8_t *ib = fos_region_data(in), *ob = fos_region_data(out);
		/* odd offsets: any alignment is allowed */
		size_t ox = 2, obias = ox + M * K * 2 + 6, ody = obias + N * 2 + 10;
		memcpy(ib + ox, g_x, M * K * 2);
		memcpy(ib + obias, g_b, N * 2);
		memcpy(ib + ody, g_dy, M * N * 2);
		memset(ob, 0xA5, out_sz);
		fos_tensor sx = fos_tensor_shm(in, ox, FOS_DTYPE_BF16, M, K);
		fos_tensor sb = fos_tensor_shm(in, obias, FOS_DTYPE_BF16, N, 0);
		fos_tensor sdy = fos_tensor_shm(in, ody, FOS_DTYPE_BF16, M, N);
		size_t oy = 64, odx = oy + M * N * 2 + 64, odw = odx + M * K * 2 + 2, odb = odw + N * K * 2 + 64;
		fos_tensor sy = fos_tensor_shm(out, oy, FOS_DTYPE_BF16, M, N);
		fos_tensor sdx = fos_tensor_shm(out, odx, FOS_DTYPE_BF16, M, K);
		fos_tensor sdw = fos_tensor_shm(out, odw, FOS_DTYPE_BF16, N, K);
		fos_tensor sdb = fos_tensor_shm(out, odb, FOS_DTYPE_BF16, N, 0);
		assert_non_null(sx.data);
		assert_non_null(sdb.data);
		fos_context c2;
		ASSERT_OK(fos_forward(c, "w", &sx, &sb, &fo, &sy, &c2, &st), st);
		assert_ptr_equal(sy.data, ob + oy); /* written in place */
		assert_int_equal(sy.size, M * N * 2);
		assert_memory_equal(ob + oy, y0.data, M * N * 2);
		ASSERT_OK(fos_backward(c, &c2, &sdy, NULL, &sdx, &sdw, &sdb, &st), st);
		assert_memory_equal(ob + odx, dx0.data, M * K * 2);
		assert_memory_equal(ob + odw, dw0.data, N * K * 2);
		assert_memory_equal(ob + odb, db0.data, N * 2);
		/* nothing written outside the results */
		assert_int_equal(ob[oy - 1], 0xA5);
		assert_int_equal(ob[odx - 1], 0xA5);
		assert_int_equal(ob[odb + N * 2], 0xA5);

		/* mixed: x inline, bias in shm, y inline */
		fos_tensor ym = fos_tensor_out();
		ASSERT_OK(fos_forward(c, "w", &x, &sb, NULL, &ym, NULL, &st), st);
		assert_memory_equal(ym.data, y0.data, M * N * 2);
		free(ym.data);
		ASSERT_OK(fos_region_destroy(in, &st), st);
		ASSERT_OK(fos_region_destroy(out, &st), st);
	}
	expect_no_regions(c);
	free(yr);
	free(dxr);
	free(dwr);
	free(dbr);
	free(y0.data);
	free(dx0.data);
	free(dw0.data);
	free(db0.data);
	fos_close(c);
}

static void test_linear(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	for (int ovr = FOS_OVERRIDE_QUANTIZED; ovr <= FOS_OVERRIDE_DEQUANTIZED; ovr++) {
		fos_linear_config cfg = {ovr, 0, 0, 0, 0, 0};
		fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), w = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
		fos_tensor b = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b), dy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out(), db = fos_tensor_out();
		ASSERT_OK(fos_linear(c, &x, &w, &b, &dy, &cfg, &y, &dx, &dw, &db, &st), st);

		fos_region *r;
		size_t sz = 2 * (M * K + N * K + N + M * N) * 2 + (M * K + N * K) * 2 + 16 * 64;
		ASSERT_OK(fos_region_create(c, "lin", sz, FOS_REGION_MEMFD, &r, &st), st);
		uint8_t *p = fos_region_data(r);
		size_t o = 0;
#define PLACE(name, bytes) size_t name = o; o += ((bytes) + 63) / 64 * 64
		PLACE(ox, M * K * 2);
		PLACE(ow, N * K * 2);
		PLACE(ob, N * 2);
		PLACE(ody, M * N * 2);
		PLACE(oy, M * N * 2);
		PLACE(odx, M * K * 2);
		PLACE(odw, N * K * 2);
		PLACE(odb, N * 2);
#undef PLACE
		assert_true(o <= sz);
		memcpy(p + ox, g_x, M * K * 2);
		memcpy(p + ow, g_w, N * K * 2);
		memcpy(p + ob, g_b, N * 2);
		memcpy(p + ody, g_dy, M * N * 2);
		fos_tensor sx = fos_tensor_shm(r, ox, FOS_DTYPE_BF16, M, K), sw = fos_tensor_shm(r, ow, FOS_DTYPE_BF16, N, K);
		fos_tensor sb = fos_tensor_shm(r, ob, FOS_DTYPE_BF16, N, 0), sdy = fos_tensor_shm(r, ody, FOS_DTYPE_BF16, M, N);
		fos_tensor sy = fos_tensor_shm(r, oy, FOS_DTYPE_BF16, M, N), sdx = fos_tensor_shm(r, odx, FOS_DTYPE_BF16, M, K);
		fos_tensor sdw = fos_tensor_shm(r, odw, FOS_DTYPE_BF16, N, K), sdb = fos_tensor_shm(r, odb, FOS_DTYPE_BF16, N, 0);
		ASSERT_OK(fos_linear(c, &sx, &sw, &sb, &sdy, &cfg, &sy, &sdx, &sdw, &sdb, &st), st);
		assert_memory_equal(p + oy, y.data, M * N * 2);
		assert_memory_equal(p + odx, dx.data, M * K * 2);
		assert_memory_equal(p + odw, dw.data, N * K * 2);
		assert_memory_equal(p + odb, db.data, N * 2);
		/* shm inputs, inline results */
		fos_tensor y2 = fos_tensor_out(), dx2 = fos_tensor_out(), dw2 = fos_tensor_out(), db2 = fos_tensor_out();
		ASSERT_OK(fos_linear(c, &sx, &sw, &sb, &sdy, &cfg, &y2, &dx2, &dw2, &db2, &st), st);
		assert_memory_equal(y2.data, y.data, M * N * 2);
		assert_memory_equal(dw2.data, dw.data, N * K * 2);
		fos_tensor *all[] = {&y, &dx, &dw, &db, &y2, &dx2, &dw2, &db2};
		for (int i = 0; i < 8; i++)
			free(all[i]->data);
		ASSERT_OK(fos_region_destroy(r, &st), st);
	}
	expect_no_regions(c);
	fos_close(c);
}

static void test_quantize_dequantize(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	enum { R = 64, C = 256 };
	float xf[R * C], am[R];
	for (int i = 0; i < R * C; i++)
		xf[i] = (float)((i * 37) % 101 - 50) * 0.173f;
	for (int i = 0; i < R; i++)
		am[i] = 30.0f + (float)i;
	for (int rs = 0; rs < 2; rs++) {
		fos_quant_config qc = {FOS_QRECIPE_4OVER6, FOS_BLOCKS_1X16, FOS_ERRMODE_MSE, 256, rs};
		fos_tensor x = fos_tensor_2d(FOS_DTYPE_F32, R, C, xf), a = fos_tensor_1d(FOS_DTYPE_F32, rs ? R : 1, am);
		fos_tensor codes = fos_tensor_out(), scales = fos_tensor_out(), amax = fos_tensor_out();
		ASSERT_OK(fos_quantize(c, &x, &qc, &a, &codes, &scales, &amax, &st), st);
		fos_tensor out = fos_tensor_out();
		ASSERT_OK(fos_dequantize(c, &codes, &scales, &amax, 256, rs, FOS_DTYPE_BF16, &out, &st), st);

		fos_region *r;
		ASSERT_OK(fos_region_create(c, "q", 1 << 20, FOS_REGION_POSIX, &r, &st), st);
		uint8_t *p = fos_region_data(r);
		size_t ox = 0, oa = R * C * 4, oc = oa + 4096, os = oc + R * C / 2 + 64, om = os + R * C / 16 + 64,
		       oo = om + 4096;
		memcpy(p + ox, xf, sizeof xf);
		memcpy(p + oa, am, sizeof am);
		fos_tensor sx = fos_tensor_shm(r, ox, FOS_DTYPE_F32, R, C), sa = fos_tensor_shm(r, oa, FOS_DTYPE_F32, rs ? R : 1, 0);
		fos_tensor sc = fos_tensor_shm(r, oc, FOS_DTYPE_U8, R, C / 2), ss = fos_tensor_shm(r, os, FOS_DTYPE_E4M3, R, C / 16);
		fos_tensor sm = fos_tensor_shm(r, om, FOS_DTYPE_F32, rs ? R : 1, 0);
		ASSERT_OK(fos_quantize(c, &sx, &qc, &sa, &sc, &ss, &sm, &st), st);
		assert_memory_equal(p + oc, codes.data, R * C / 2);
		assert_memory_equal(p + os, scales.data, R * C / 16);
		assert_memory_equal(p + om, amax.data, amax.size);
		/* dequantize from the region into the region */
		fos_tensor so = fos_tensor_shm(r, oo, FOS_DTYPE_BF16, R, C);
		ASSERT_OK(fos_dequantize(c, &sc, &ss, &sm, 256, rs, FOS_DTYPE_BF16, &so, &st), st);
		assert_memory_equal(p + oo, out.data, R * C * 2);
		/* a scale byte with its sign bit set is refused from a region as inline */
		p[os + 3] |= 0x80;
		fos_tensor o2 = fos_tensor_out();
		ASSERT_CODE(fos_dequantize(c, &sc, &ss, &sm, 256, rs, FOS_DTYPE_BF16, &o2, &st), FOS_CODE_INVALID_ARGUMENT, st);
		assert_non_null(strstr(st.message, "negative"));
		free(codes.data);
		free(scales.data);
		free(amax.data);
		free(out.data);
		ASSERT_OK(fos_region_destroy(r, &st), st);
	}
	expect_no_regions(c);
	fos_close(c);
}

/* A region given by its POSIX name ("shm:/NAME"), mapped by the caller. */
static void test_attach_posix_name(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	char name[64];
	snprintf(name, sizeof name, "/fos-test-%d", (int)getpid());
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	size_t sz = (M * K + M * N) * 2;
	assert_int_equal(ftruncate(fd, (off_t)sz), 0);
	uint8_t *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	char key[80];
	snprintf(key, sizeof key, "shm:%s", name);
	fos_region *r;
	ASSERT_OK(fos_region_attach(c, "posix", key, p, sz, &r, &st), st);
	assert_int_equal(fos_region_fd(r), -1);
	memcpy(p, g_x, M * K * 2);
	fos_tensor sx = fos_tensor_shm(r, 0, FOS_DTYPE_BF16, M, K), sy = fos_tensor_shm(r, M * K * 2, FOS_DTYPE_BF16, M, N);
	ASSERT_OK(fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st), st);
	uint16_t *yr = malloc(M * N * 2);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, yr, NULL, NULL, NULL), 0);
	assert_memory_equal(p + M * K * 2, yr, M * N * 2);
	free(yr);
	ASSERT_OK(fos_region_destroy(r, &st), st);
	munmap(p, sz);
	close(fd);
	shm_unlink(name);
	expect_no_regions(c);
	fos_close(c);
}

/* ---- bad references, over a bare REQ socket --------------------------------------------------- */

typedef struct raw {
	nng_socket sock;
} raw;

static void raw_open(raw *r)
{
	assert_int_equal(traw_open(&r->sock, g_srv.url), 0);
}

static void expect(raw *r, Fos__Request *rq, int code, const char *needle)
{
	traw_expect(r->sock, rq, code, needle);
}

static void expect_register(raw *r, const char *name, const char *key, uint64_t size, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__RegisterRegionRequest rr = FOS__REGISTER_REGION_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_REGISTER_REGION;
	rq.register_region = &rr;
	rr.name = (char *)name;
	rr.key = (char *)key;
	rr.size = size;
	expect(r, &rq, code, needle);
}

/* A forward of "w" with x = (M, K) bf16 at (region, offset) [and y asked to (yregion, yoff, cap)]. */
static void expect_fwd(raw *r, const char *region, uint64_t off, uint64_t t_off, const char *yregion, const char *yname,
		       uint64_t yoff, uint64_t cap, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	Fos__ShmRef ref = FOS__SHM_REF__INIT, yref = FOS__SHM_REF__INIT;
	Fos__ShmOutput so = FOS__SHM_OUTPUT__INIT, *sop = &so;
	int64_t shape[2] = {M, K};
	ref.region = (char *)region;
	ref.offset = off;
	t.dtype = FOS__DTYPE__DTYPE_BF16;
	t.n_shape = 2;
	t.shape = shape;
	t.length = M * K * 2;
	t.offset = t_off;
	t.shm = &ref;
	fr.weight = (char *)"w";
	fr.x = &t;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	if (yregion) {
		yref.region = (char *)yregion;
		yref.offset = yoff;
		so.result = (char *)yname;
		so.shm = &yref;
		so.capacity = cap;
		rq.n_shm_outputs = 1;
		rq.shm_outputs = &sop;
	}
	expect(r, &rq, code, needle);
}

/* Forward of g_x inline through "w" still gives the reference bytes. */
static void check_still_serving(void)
{
	fos_client *c = connect_or_fail();
	fos_status st;
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, "w", &x, NULL, NULL, &y, NULL, &st), st);
	uint16_t *yr = malloc(M * N * 2);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, yr, NULL, NULL, NULL), 0);
	assert_memory_equal(y.data, yr, M * N * 2);
	free(yr);
	free(y.data);
	fos_close(c);
}

static void test_bad_references(void **state)
{
	(void)state;
	raw r;
	raw_open(&r);
	size_t sz = (M * K + M * N) * 2 + 4096;
	int fd = memfd_create("fos-test-raw", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)sz), 0);
	uint8_t *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	memcpy(p, g_x, M * K * 2);
	char key[32];
	snprintf(key, sizeof key, "fd:%d", fd);

	/* registration */
	expect_register(&r, "r1", key, sz, FOS_CODE_OK, NULL);
	expect_register(&r, "r1", key, sz, FOS_CODE_ALREADY_EXISTS, "already registered");
	expect_register(&r, "big", key, sz + 1, FOS_CODE_INVALID_ARGUMENT, "smaller than");
	expect_register(&r, "bad", "fd:99999", 4096, FOS_CODE_NOT_FOUND, "99999");
	expect_register(&r, "bad", "fd:x", 4096, FOS_CODE_INVALID_ARGUMENT, "fd:N");
	expect_register(&r, "bad", "file:/etc/passwd", 4096, FOS_CODE_INVALID_ARGUMENT, "expected");
	expect_register(&r, "bad", "shm:/../../etc/passwd", 4096, FOS_CODE_INVALID_ARGUMENT, "POSIX shm name");
	expect_register(&r, "bad", "shm:/fos-test-does-not-exist", 4096, FOS_CODE_NOT_FOUND, "cannot open");
	expect_register(&r, "bad name!", key, sz, FOS_CODE_INVALID_ARGUMENT, "region name");
	expect_register(&r, "bad", key, 0, FOS_CODE_INVALID_ARGUMENT, "size");
	{ /* a pipe is not a shared-memory object */
		int pp[2];
		assert_int_equal(pipe(pp), 0);
		char k2[32];
		snprintf(k2, sizeof k2, "fd:%d", pp[0]);
		expect_register(&r, "bad", k2, 4096, FOS_CODE_INVALID_ARGUMENT, "regular file");
		close(pp[0]);
		close(pp[1]);
	}
	if (geteuid() == 0) { /* an object of another user is refused */
		int fd2 = memfd_create("fos-test-other", MFD_CLOEXEC);
		assert_true(fd2 >= 0);
		assert_int_equal(ftruncate(fd2, 4096), 0);
		assert_int_equal(fchown(fd2, 65534, 65534), 0);
		char k2[32];
		snprintf(k2, sizeof k2, "fd:%d", fd2);
		expect_register(&r, "other", k2, 4096, FOS_CODE_PERMISSION_DENIED, "owned by");
		close(fd2);
	}

	/* references */
	expect_fwd(&r, "r1", 0, 0, NULL, NULL, 0, 0, FOS_CODE_OK, NULL);
	expect_fwd(&r, "nope", 0, 0, NULL, NULL, 0, 0, FOS_CODE_NOT_FOUND, "not registered");
	expect_fwd(&r, "r1", sz - M * K * 2 + 1, 0, NULL, NULL, 0, 0, FOS_CODE_INVALID_ARGUMENT, "outside shm region");
	expect_fwd(&r, "r1", sz + 4096, 0, NULL, NULL, 0, 0, FOS_CODE_INVALID_ARGUMENT, "outside shm region");
	expect_fwd(&r, "r1", UINT64_MAX - 16, 0, NULL, NULL, 0, 0, FOS_CODE_INVALID_ARGUMENT, "outside shm region");
	expect_fwd(&r, "r1", 0, 64, NULL, NULL, 0, 0, FOS_CODE_INVALID_ARGUMENT, "offset must be 0");
	expect_fwd(&r, "", 0, 0, NULL, NULL, 0, 0, FOS_CODE_INVALID_ARGUMENT, "no region");
	/* results */
	expect_fwd(&r, "r1", 0, 0, "r1", "y", 0, sz, FOS_CODE_OK, NULL);
	expect_fwd(&r, "r1", 0, 0, "r1", "z", 0, sz, FOS_CODE_INVALID_ARGUMENT, "not a tensor result");
	expect_fwd(&r, "r1", 0, 0, "r1", "context_id", 0, sz, FOS_CODE_INVALID_ARGUMENT, "not a tensor result");
	expect_fwd(&r, "r1", 0, 0, "nope", "y", 0, sz, FOS_CODE_NOT_FOUND, "not registered");
	expect_fwd(&r, "r1", 0, 0, "r1", "y", 64, sz, FOS_CODE_INVALID_ARGUMENT, "outside shm region");
	expect_fwd(&r, "r1", 0, 0, "r1", "y", UINT64_MAX, 2, FOS_CODE_INVALID_ARGUMENT, "outside shm region");
	expect_fwd(&r, "r1", 0, 0, "r1", "y", 0, 0, FOS_CODE_INVALID_ARGUMENT, "capacity");
	expect_fwd(&r, "r1", 0, 0, "r1", "y", 0, M * N * 2 - 1, FOS_CODE_OUT_OF_RANGE, "has room for");

	/* another connection's region is invisible */
	{
		raw r2;
		raw_open(&r2);
		expect_fwd(&r2, "r1", 0, 0, NULL, NULL, 0, 0, FOS_CODE_NOT_FOUND, "not registered");
		Fos__Request rq = FOS__REQUEST__INIT;
		Fos__UnregisterRegionRequest ur = FOS__UNREGISTER_REGION_REQUEST__INIT;
		rq.op_case = FOS__REQUEST__OP_UNREGISTER_REGION;
		rq.unregister_region = &ur;
		ur.name = (char *)"r1";
		expect(&r2, &rq, FOS_CODE_NOT_FOUND, "not registered");
		nng_close(r2.sock);
	}

	/* a POSIX object shrunk under fosd */
	{
		int fd3 = memfd_create("fos-test-shrink", MFD_CLOEXEC); /* not sealed: may shrink */
		assert_true(fd3 >= 0);
		assert_int_equal(ftruncate(fd3, (off_t)sz), 0);
		char k3[32];
		snprintf(k3, sizeof k3, "fd:%d", fd3);
		expect_register(&r, "shrink", k3, sz, FOS_CODE_OK, NULL);
		expect_fwd(&r, "shrink", 0, 0, "shrink", "y", 0, sz, FOS_CODE_OK, NULL);
		assert_int_equal(ftruncate(fd3, 4096), 0);
		expect_fwd(&r, "shrink", 0, 0, NULL, NULL, 0, 0, FOS_CODE_FAILED_PRECONDITION, "shrunk");
		expect_fwd(&r, "r1", 0, 0, "shrink", "y", 0, sz, FOS_CODE_FAILED_PRECONDITION, "shrunk");
		assert_int_equal(ftruncate(fd3, 0), 0);
		expect_fwd(&r, "shrink", 0, 0, NULL, NULL, 0, 0, FOS_CODE_FAILED_PRECONDITION, "shrunk");
		close(fd3);
	}
	check_still_serving();

	/* unregister; then the name is unknown */
	{
		Fos__Request rq = FOS__REQUEST__INIT;
		Fos__UnregisterRegionRequest ur = FOS__UNREGISTER_REGION_REQUEST__INIT;
		rq.op_case = FOS__REQUEST__OP_UNREGISTER_REGION;
		rq.unregister_region = &ur;
		ur.name = (char *)"r1";
		expect(&r, &rq, FOS_CODE_OK, NULL);
		expect(&r, &rq, FOS_CODE_NOT_FOUND, "not registered");
		expect_fwd(&r, "r1", 0, 0, NULL, NULL, 0, 0, FOS_CODE_NOT_FOUND, "not registered");
	}
	/* closing the connection releases the rest ("shrink") */
	nng_close(r.sock);
	munmap(p, sz);
	close(fd);
	fos_client *c = connect_or_fail();
	expect_no_regions(c);
	fos_close(c);
	assert_int_equal(fosd_maps_count("fos-test-"), 0);
	check_still_serving();
}

/* ---- tenants: a region is seen only by requests of the tenant that registered it ------------- */

static void expect_quantize_shm(raw *r, const char *token, const char *region, int code, const char *needle)
{
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	Fos__ShmRef ref = FOS__SHM_REF__INIT;
	int64_t shape[2] = {M, K};
	ref.region = (char *)region;
	t.dtype = FOS__DTYPE__DTYPE_BF16;
	t.n_shape = 2;
	t.shape = shape;
	t.length = M * K * 2;
	t.shm = &ref;
	qr.x = &t;
	rq.op_case = FOS__REQUEST__OP_QUANTIZE;
	rq.quantize = &qr;
	rq.auth_token = (ProtobufCBinaryData){strlen(token), (uint8_t *)token};
	expect(r, &rq, code, needle);
}

static void test_tenants(void **state)
{
	(void)state;
	static const char alice[] = "alice-secret-0123456789", bob[] = "bob-secret-0123456789abc";
	char dir[] = "/tmp/fos-shm-tokens-XXXXXX", path[64];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/tokens", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "alice %s\nbob %s\n", alice, bob);
	fclose(f);
	chmod(path, 0600);
	tsrv s2;
	const char *args[] = {"--tokens", path, NULL};
	if (tsrv_start(&s2, args))
		fail_msg("cannot start fosd with a tokens file");
	raw r;
	assert_int_equal(traw_open(&r.sock, s2.url), 0);
	int fd = memfd_create("fos-test-tenant", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, M * K * 2), 0);
	uint8_t *p = mmap(NULL, M * K * 2, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	memcpy(p, g_x, M * K * 2);
	char key[32];
	snprintf(key, sizeof key, "fd:%d", fd);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__RegisterRegionRequest rr = FOS__REGISTER_REGION_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_REGISTER_REGION;
	rq.register_region = &rr;
	rr.name = (char *)"r";
	rr.key = key;
	rr.size = M * K * 2;
	rq.auth_token = (ProtobufCBinaryData){strlen(alice), (uint8_t *)alice};
	expect(&r, &rq, FOS_CODE_OK, NULL);
	/* on the same connection, bob does not see alice's region, nor can he drop it */
	expect_quantize_shm(&r, alice, "r", FOS_CODE_OK, NULL);
	expect_quantize_shm(&r, bob, "r", FOS_CODE_NOT_FOUND, "not registered");
	Fos__Request ur = FOS__REQUEST__INIT;
	Fos__UnregisterRegionRequest u = FOS__UNREGISTER_REGION_REQUEST__INIT;
	ur.op_case = FOS__REQUEST__OP_UNREGISTER_REGION;
	ur.unregister_region = &u;
	u.name = (char *)"r";
	ur.auth_token = (ProtobufCBinaryData){strlen(bob), (uint8_t *)bob};
	expect(&r, &ur, FOS_CODE_NOT_FOUND, "not registered");
	/* bob may have his own region of the same name */
	rq.auth_token = (ProtobufCBinaryData){strlen(bob), (uint8_t *)bob};
	expect(&r, &rq, FOS_CODE_OK, NULL);
	expect_quantize_shm(&r, bob, "r", FOS_CODE_OK, NULL);
	ur.auth_token = (ProtobufCBinaryData){strlen(alice), (uint8_t *)alice};
	expect(&r, &ur, FOS_CODE_OK, NULL);
	expect_quantize_shm(&r, alice, "r", FOS_CODE_NOT_FOUND, "not registered");
	expect_quantize_shm(&r, bob, "r", FOS_CODE_OK, NULL);
	/* without a token nothing but Health is served */
	rq.auth_token = (ProtobufCBinaryData){0, NULL};
	expect(&r, &rq, FOS_CODE_UNAUTHENTICATED, NULL);
	nng_close(r.sock);
	munmap(p, M * K * 2);
	close(fd);
	int rc = tsrv_stop(&s2, SIGTERM, 10000);
	if (rc)
		tsrv_dump_log(&s2);
	tsrv_cleanup(&s2);
	unlink(path);
	rmdir(dir);
	assert_int_equal(rc, 0);
}

/* ---- a client that dies holding regions ----------------------------------------------------- */

/* The child: a fresh process (nng does not survive fork), started as THIS_BINARY --die URL. It
 * registers two regions, runs a forward through them and kills itself without any cleanup. */
static int die_holding_regions(const char *url)
{
	fos_client *c;
	fos_status st;
	if (fos_connect(url, NULL, 20000, &c, &st))
		return 10;
	fos_region *a, *b;
	if (fos_region_create(c, "a", 1 << 20, FOS_REGION_MEMFD, &a, &st) ||
	    fos_region_create(c, "b", 1 << 20, FOS_REGION_POSIX, &b, &st))
		return 11;
	tsrv_fill_bf16(fos_region_data(a), M * K, 12, 1.0f);
	fos_tensor sx = fos_tensor_shm(a, 0, FOS_DTYPE_BF16, M, K), sy = fos_tensor_shm(b, 0, FOS_DTYPE_BF16, M, N);
	if (fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st))
		return 12;
	uint64_t n = 0;
	if (fos_region_stats(c, &n, NULL, NULL, &st) || n != 2)
		return 13;
	raise(SIGKILL); /* no cleanup at all */
	return 14;
}

static void test_client_death(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "test_e2e_shm", "--die", g_srv.url, (char *)NULL);
		_exit(127);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("the child failed before dying (exit status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	fos_client *c = connect_or_fail();
	expect_no_regions(c);
	fos_close(c);
	assert_int_equal(fosd_maps_count("libfos"), 0);
	check_still_serving();
}

/* ---- a reconnect: libfos registers its regions again ------------------------------------------ */

static void test_reconnect_reregisters(void **state)
{
	(void)state;
	tsrv s3;
	assert_int_equal(tsrv_start(&s3, NULL), 0);
	fos_client *c;
	fos_status st;
	ASSERT_OK(fos_connect(s3.url, NULL, 20000, &c, &st), st);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	ASSERT_OK(fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st), st);
	fos_region *r;
	ASSERT_OK(fos_region_create(c, "keep", (M * K + M * N) * 2, FOS_REGION_MEMFD, &r, &st), st);
	memcpy(fos_region_data(r), g_x, M * K * 2);
	fos_tensor sx = fos_tensor_shm(r, 0, FOS_DTYPE_BF16, M, K), sy = fos_tensor_shm(r, M * K * 2, FOS_DTYPE_BF16, M, N);
	ASSERT_OK(fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st), st);
	/* a new fosd on the same socket: the handle reconnects, the region is unknown there */
	assert_int_equal(tsrv_stop(&s3, SIGTERM, 10000), 0);
	char bin[1200];
	snprintf(bin, sizeof bin, "%s/fosd", tsrv_build_dir());
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(s3.log, O_WRONLY | O_APPEND);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		execl(bin, bin, "--backend", tsrv_backend_name(), "--threads", "2", "--listen", s3.url, "--metrics-listen",
		      "off", (char *)NULL);
		_exit(127);
	}
	s3.pid = pid;
	ASSERT_OK(fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st), st); /* waits for the reconnect */
	memset((uint8_t *)fos_region_data(r) + M * K * 2, 0, M * N * 2);
	ASSERT_OK(fos_forward(c, "w", &sx, NULL, NULL, &sy, NULL, &st), st);
	uint16_t *yr = malloc(M * N * 2);
	fos_linear_opts o = fos_linear_opts_default();
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, yr, NULL, NULL, NULL), 0);
	assert_memory_equal((uint8_t *)fos_region_data(r) + M * K * 2, yr, M * N * 2);
	free(yr);
	uint64_t n = 0;
	ASSERT_OK(fos_region_stats(c, &n, NULL, NULL, &st), st);
	assert_int_equal(n, 1);
	ASSERT_OK(fos_region_destroy(r, &st), st);
	fos_close(c);
	int rc = tsrv_stop(&s3, SIGTERM, 10000);
	if (rc)
		tsrv_dump_log(&s3);
	tsrv_cleanup(&s3);
	assert_int_equal(rc, 0);
}

/* ---- fos load --shm --------------------------------------------------------------------------- */

/* Runs BUILD/fos --server URL args... (output discarded); returns its exit status. */
static int run_fos(const char *const *args)
{
	char bin[1200];
	snprintf(bin, sizeof bin, "%s/fos", tsrv_build_dir());
	const char *argv[40];
	int n = 0;
	argv[n++] = bin;
	argv[n++] = "--server";
	argv[n++] = g_srv.url;
	for (int i = 0; args[i] && n < 39; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			close(fd);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void op_counts(fos_client *c, const char *op, uint64_t *requests, uint64_t *bytes_in)
{
	fos_stats_info *s = calloc(1, sizeof *s);
	fos_status st;
	ASSERT_OK(fos_stats(c, s, &st), st);
	*requests = *bytes_in = 0;
	for (int i = 0; i < s->n_ops; i++)
		if (!strcmp(s->ops[i].op, op)) {
			*requests = s->ops[i].requests;
			*bytes_in = s->ops[i].bytes_in;
		}
	free(s);
}

static void test_cli_load_shm(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	static const char *const ops[] = {"forward", "backward", "linear"};
	for (int i = 0; i < 3; i++) {
		uint64_t r0, b0, r1, b1;
		const char *stat_op = i == 1 ? "backward" : ops[i];
		op_counts(c, stat_op, &r0, &b0);
		const char *args[] = {"load", "--shm", "--op", ops[i], "--m", "128", "--n", "256", "--k", "128", "--requests",
				      "12", "--warmup", "0", "--concurrency", "3", "--connections", "2", "--no-progress", NULL};
		int rc = run_fos(args);
		if (rc)
			fail_msg("fos load --shm --op %s exited %d", ops[i], rc);
		op_counts(c, stat_op, &r1, &b1);
		assert_true(r1 - r0 >= 12);
		/* the tensors stayed in shared memory: only headers went through the socket */
		if ((b1 - b0) / (r1 - r0) > 1024)
			fail_msg("%s: %llu bytes per request went through the socket", ops[i],
				 (unsigned long long)((b1 - b0) / (r1 - r0)));
	}
	expect_no_regions(c);
	fos_close(c);
}

/* ---- the guarded copy (fosd's code, in-process) ---------------------------------------------- */

static void test_guarded_copy(void **state)
{
	(void)state;
	long pg = sysconf(_SC_PAGESIZE);
	int fd = memfd_create("fos-test-bus", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4 * pg), 0);
	uint8_t *p = mmap(NULL, (size_t)(4 * pg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	uint8_t buf[4 * 4096 + 64];
	memset(p, 7, (size_t)(4 * pg));
	assert_int_equal(fosd_shm_copy(buf, p, (size_t)(2 * pg)), 0);
	assert_int_equal(buf[pg + 5], 7);
	assert_int_equal(ftruncate(fd, pg), 0);                    /* shrink under the mapping */
	assert_int_equal(fosd_shm_copy(buf, p, (size_t)(2 * pg)), -1); /* read past the end: SIGBUS caught */
	assert_int_equal(fosd_shm_copy(p + pg, buf, 16), -1);          /* write past the end too */
	assert_int_equal(fosd_shm_copy(buf, p, (size_t)pg), 0);        /* what is left still reads */
	assert_int_equal(fosd_shm_copy(buf, p, (size_t)(2 * pg)), -1); /* and again */
	munmap(p, (size_t)(4 * pg));
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--die"))
		return die_holding_regions(argv[2]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_guarded_copy),
		cmocka_unit_test(test_forward_backward),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_quantize_dequantize),
		cmocka_unit_test(test_attach_posix_name),
		cmocka_unit_test(test_bad_references),
		cmocka_unit_test(test_client_death),
		cmocka_unit_test(test_tenants),
		cmocka_unit_test(test_reconnect_reregisters),
		cmocka_unit_test(test_cli_load_shm),
	};
	return cmocka_run_group_tests(tests, setup_server, teardown_server);
}
