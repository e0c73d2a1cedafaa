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

#include "cli.h"
#include "fos.h"
#include "support_server.h"
#include "support_assert.h"
#include "test_cli_harness.h"
#include "support_json.h"

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
	fos_forward_opts fo = {0, FOS_OVERRIDE_DEFAULT, 0, 1, 0};
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
	fos_linear_config cfg = {FOS_OVERRIDE_DEFAULT, 0, 0, 0, 0, 0};
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

/* ---- ListWeights in pages ---------------------------------------------------------------------- */

#define NW 10000
static char g_names[NW][129];
static int g_wdim; /* the smallest weight fosd accepts: 16x16, or 128x128 where N and K must be 128s */

/* Name i: 64 to 128 bytes, in an order unrelated to i (all of them in one reply would take more
 * than 1 MiB) */
static void make_name(int i, char *out)
{
	uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
	h ^= h >> 29;
	int len = 64 + (int)(h % 65); /* up to 128 */
	int n = snprintf(out, 129, "pg/%016llx.%d-", (unsigned long long)h, i);
	for (; n < len; n++)
		out[n] = "abcdefghijklmnopqrstuvwxyz0123456789._:/-"[(h >> (n % 40)) % 41];
	out[n] = 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct put_job {
	int from, to;
	const uint16_t *w;
	int rc;
	char msg[800];
} put_job;

static void *put_range(void *arg)
{
	put_job *j = arg;
	fos_client *c;
	fos_status st;
	if ((j->rc = fos_connect(g_small.url, NULL, 60000, &c, &st))) {
		snprintf(j->msg, sizeof j->msg, "connect: %s", st.message);
		return NULL;
	}
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, g_wdim, g_wdim, j->w);
	for (int i = j->from; i < j->to && !j->rc; i++)
		if ((j->rc = fos_put_weight(c, g_names[i], 1, &tw, NULL, NULL, &st)))
			snprintf(j->msg, sizeof j->msg, "put %s: %s", g_names[i], st.message);
	fos_close(c);
	return NULL;
}

/* Puts the NW weights into the 160K fosd (once). */
static void put_many(void)
{
	static int done;
	if (done)
		return;
	static uint16_t w[128 * 128];
	tsrv_fill_bf16(w, 128 * 128, 31, 0.05f);
	fos_client *c = connect_to(&g_small);
	fos_status st;
	fos_tensor t16 = fos_tensor_2d(FOS_DTYPE_BF16, 16, 16, w);
	g_wdim = fos_put_weight(c, "pg-probe", 1, &t16, NULL, NULL, &st) == FOS_CODE_OK ? 16 : 128;
	if (g_wdim == 16)
		ASSERT_OK(fos_drop_weight(c, "pg-probe", &st), st);
	fos_close(c);
	for (int i = 0; i < NW; i++)
		make_name(i, g_names[i]);
	enum { T = 4 };
	put_job jobs[T];
	pthread_t th[T];
	for (int t = 0; t < T; t++) {
		jobs[t] = (put_job){NW * t / T, NW * (t + 1) / T, w, 0, ""};
		assert_int_equal(pthread_create(&th[t], NULL, put_range, &jobs[t]), 0);
	}
	for (int t = 0; t < T; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < T; t++)
		if (jobs[t].rc)
			fail_msg("%s: %s", fos_code_name(jobs[t].rc), jobs[t].msg);
	done = 1;
}

/* The NW names sorted by strcmp, then "w" (the weight the setup put) in its place: what a full
 * listing of the 160K fosd must give */
static const char **expected_names(size_t *n)
{
	const char **e = malloc((NW + 1) * sizeof *e);
	assert_non_null(e);
	for (int i = 0; i < NW; i++)
		e[i] = g_names[i];
	e[NW] = "w";
	qsort(e, NW + 1, sizeof *e, cmp_str);
	*n = NW + 1;
	return e;
}

static void expect_listing(const fos_weight_info *l, size_t n, const char *what)
{
	size_t ne;
	const char **e = expected_names(&ne);
	if (n != ne)
		fail_msg("%s: %zu weights listed, %zu expected", what, n, ne);
	for (size_t i = 0; i < n; i++)
		if (strcmp(l[i].name, e[i]))
			fail_msg("%s: entry %zu is '%s', '%s' expected", what, i, l[i].name, e[i]);
	free(e);
}

static void test_list_all_pages(void **state)
{
	(void)state;
	put_many();
	fos_client *c = connect_to(&g_small);
	fos_status st;
	fos_weight_info *l;
	size_t n;
	ASSERT_OK(fos_list_weights(c, &l, &n, &st), st);
	expect_listing(l, n, "fos_list_weights");
	assert_int_equal(l[0].n, g_wdim);
	free(l);

	/* page by page, at several page sizes (0: the default; 20000: fosd's maximum) */
	static const uint32_t sizes[] = {7, 1000, 0, 20000};
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		fos_weight_info *all = malloc((NW + 1) * sizeof *all);
		size_t total = 0, pages = 0;
		char *token = NULL;
		do {
			fos_weight_info *p;
			size_t k;
			char *next;
			ASSERT_OK(fos_list_weights_page(c, token, sizes[si], &p, &k, &next, &st), st);
			uint32_t cap = sizes[si] ? (sizes[si] > 10000 ? 10000 : sizes[si]) : 1000;
			if (k > cap || (!k && next))
				fail_msg("page_size %u: a page of %zu", sizes[si], k);
			/* at least the bytes the page took on the wire: the name with its tag and length
			 * (2 bytes here), 12 for the numbers and the entry's own tag and length */
			size_t bytes = 0;
			for (size_t i = 0; i < k; i++)
				bytes += strlen(p[i].name) + 14;
			if (bytes > 160 * 1024)
				fail_msg("page_size %u: a page of at least %zu bytes, over the 160K limit", sizes[si], bytes);
			assert_true(total + k <= NW + 1);
			memcpy(all + total, p, k * sizeof *p);
			total += k;
			pages++;
			free(p);
			free(token);
			token = next;
		} while (token);
		char what[64];
		snprintf(what, sizeof what, "pages of %u", sizes[si]);
		expect_listing(all, total, what);
		if (sizes[si] == 7)
			assert_int_equal(pages, (NW + 1 + 6) / 7);
		if (sizes[si] == 1000 || !sizes[si]) /* 1000 names of 64..128 bytes fit in 160K */
			assert_int_equal(pages, (NW + 1 + 999) / 1000);
		if (sizes[si] > 10000) /* 10000 of them do not: pages bounded by bytes, not by count */
			assert_true(pages >= 3);
		free(all);
	}
	fos_close(c);
}

/* Runs `fos --server URL list-weights [--json]` into a file; returns its contents (malloc'd). */
static char *run_list_cli(int json, size_t *len)
{
	char out[512];
	snprintf(out, sizeof out, "%s/list.out", g_small.dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *f = freopen(out, "w", stdout);
		if (!f)
			_exit(99);
		const char *fos = th_fos();
		if (json)
			execl(fos, fos, "--server", g_small.url, "list-weights", "--json", (char *)NULL);
		else
			execl(fos, fos, "--server", g_small.url, "list-weights", (char *)NULL);
		_exit(98);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg("fos list-weights%s exited with %d", json ? " --json" : "", status);
	FILE *f = fopen(out, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)sz + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
	buf[sz] = 0;
	fclose(f);
	*len = (size_t)sz;
	return buf;
}

static void test_list_cli(void **state)
{
	(void)state;
	put_many();
	size_t ne, len;
	const char **e = expected_names(&ne);
	/* text: a header line, then one line per weight starting with its name */
	char *text = run_list_cli(0, &len);
	size_t line = 0;
	for (char *p = text, *nl; *p; p = nl + 1, line++) {
		nl = strchr(p, '\n');
		assert_non_null(nl);
		*nl = 0;
		if (line == 0) {
			assert_true(!strncmp(p, "NAME", 4));
			continue;
		}
		if (line > ne)
			fail_msg("fos list-weights: more than %zu lines", ne);
		char name[200];
		assert_int_equal(sscanf(p, "%199s", name), 1);
		if (strcmp(name, e[line - 1]))
			fail_msg("fos list-weights: line %zu names '%s', '%s' expected", line, name, e[line - 1]);
	}
	assert_int_equal(line, ne + 1);
	free(text);
	/* --json */
	char *js = run_list_cli(1, &len);
	cli_jv v;
	fos_err err = {0, ""};
	if (cli_json_parse(js, len, &v, &err))
		fail_msg("fos list-weights --json: %s", err.msg);
	const cli_jv *ws = cli_json_get(&v, "weights");
	assert_non_null(ws);
	assert_int_equal(ws->n, ne);
	for (size_t i = 0; i < ne; i++) {
		const cli_jv *nm = cli_json_get(&ws->items[i], "name");
		assert_non_null(nm);
		if (strcmp(nm->str, e[i]))
			fail_msg("fos list-weights --json: weight %zu is '%s', '%s' expected", i, nm->str, e[i]);
	}
	cli_json_free(&v);
	free(js);
	free(e);
}

/* A weight put and one dropped between two pages: no other weight is skipped or repeated */
static void test_list_changes_between_pages(void **state)
{
	(void)state;
	fos_client *c = connect_to(&g_big);
	fos_status st;
	static uint16_t w[128 * 128];
	tsrv_fill_bf16(w, 128 * 128, 32, 0.05f);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, 128, 128, w);
	char name[32];
	for (int i = 0; i < 30; i++) {
		snprintf(name, sizeof name, "m%02d", i);
		ASSERT_OK(fos_put_weight(c, name, 1, &tw, NULL, NULL, &st), st);
	}
	/* on the big fosd: m00 .. m29 and w */
	fos_weight_info *p;
	size_t k;
	char *next;
	ASSERT_OK(fos_list_weights_page(c, NULL, 10, &p, &k, &next, &st), st);
	assert_int_equal(k, 10);
	assert_non_null(next);
	assert_string_equal(p[0].name, "m00");
	assert_string_equal(p[9].name, "m09");
	free(p);
	ASSERT_OK(fos_drop_weight(c, "m05", &st), st);  /* listed already */
	ASSERT_OK(fos_drop_weight(c, "m09", &st), st);  /* the page's last: the token's own name */
	ASSERT_OK(fos_drop_weight(c, "m15", &st), st);  /* not yet listed */
	ASSERT_OK(fos_put_weight(c, "m00a", 1, &tw, NULL, NULL, &st), st); /* before the token: not listed */
	ASSERT_OK(fos_put_weight(c, "m095", 1, &tw, NULL, NULL, &st), st); /* after it: listed */
	/* a new version of a listed weight replaces it in place: not listed again */
	ASSERT_OK(fos_put_weight(c, "m03", 2, &tw, NULL, NULL, &st), st);
	const char *rest[] = {"m095", "m10", "m11", "m12", "m13", "m14", "m16", "m17", "m18", "m19", "m20", "m21",
			      "m22",  "m23", "m24", "m25", "m26", "m27", "m28", "m29", "w"};
	size_t nrest = sizeof rest / sizeof rest[0], got = 0;
	char *token = next;
	while (token) {
		ASSERT_OK(fos_list_weights_page(c, token, 10, &p, &k, &next, &st), st);
		for (size_t i = 0; i < k; i++, got++) {
			if (got >= nrest)
				fail_msg("listed '%s' past the end", p[i].name);
			assert_string_equal(p[i].name, rest[got]);
		}
		free(p);
		free(token);
		token = next;
	}
	assert_int_equal(got, nrest);
	const char *drop[] = {"m00", "m01", "m02", "m03", "m04", "m06", "m07", "m08", "m00a", "m095", "m10", "m11",
			      "m12", "m13", "m14", "m16", "m17", "m18", "m19", "m20", "m21", "m22", "m23", "m24",
			      "m25", "m26", "m27", "m28", "m29"};
	for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
		ASSERT_OK(fos_drop_weight(c, drop[i], &st), st);
	/* a token whose name is gone is fine: the listing goes on after it */
	ASSERT_OK(fos_list_weights_page(c, "w1:m00", 0, &p, &k, &next, &st), st);
	assert_int_equal(k, 1);
	assert_string_equal(p[0].name, "w");
	assert_null(next);
	free(p);
	fos_close(c);
}

static void test_list_bad_tokens(void **state)
{
	(void)state;
	fos_client *c = connect_to(&g_big);
	fos_status st;
	char long_tok[200];
	snprintf(long_tok, sizeof long_tok, "w1:%0129d", 7); /* a name of 129 bytes */
	const char *bad[] = {"x", "m05", "w1:", "w1:bad name", "w1:\x01", "W1:w", "w2:w", long_tok};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fos_weight_info *p = (fos_weight_info *)1;
		size_t k = 1;
		char *next = (char *)1;
		int rc = fos_list_weights_page(c, bad[i], 0, &p, &k, &next, &st);
		if (rc != FOS_CODE_INVALID_ARGUMENT || !strstr(st.message, "page_token"))
			fail_msg("page_token '%s': %s (%s), expected INVALID_ARGUMENT naming page_token", bad[i],
				 fos_code_name(rc), st.message);
		assert_null(p);
		assert_int_equal(k, 0);
		assert_null(next);
	}
	/* fosd keeps serving, and an empty token is the first page */
	fos_weight_info *p;
	size_t k;
	char *next;
	ASSERT_OK(fos_list_weights_page(c, "", 0, &p, &k, &next, &st), st);
	assert_int_equal(k, 1);
	assert_string_equal(p[0].name, "w");
	assert_null(next);
	free(p);
	fos_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward_backward_socket),
		cmocka_unit_test(test_forward_backward_channel),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_dequantize),
		cmocka_unit_test(test_list_all_pages),
		cmocka_unit_test(test_list_cli),
		cmocka_unit_test(test_list_changes_between_pages),
		cmocka_unit_test(test_list_bad_tokens),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
