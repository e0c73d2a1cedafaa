/* test_e2e_check.c: a Forward that carries `expect` (the caller's Y) and gets the comparison back
 * instead of Y, against a real fosd (CPU backend, or $FOS_TEST_BACKEND; private ipc socket) with a
 * cached weight. fosd's Y comes from a plain forward first (and equals the in-process reference);
 * then for an identical, a one-ulp-off, a NaN/inf-containing and a wrong-shape expect: every
 * number is worked out here by hand (counts, positions, bits, SQNR from this file's own sums) and
 * must also equal, field by field, the local comparison of the same arrays (kernels/compare.c, the
 * code of `fos check`); each criterion both ways; bad requests (shape, dtype, save_context, bad
 * criteria, a criterion without expect) are INVALID_ARGUMENT naming the field while fosd keeps
 * serving; expect and X in a shared-memory region; and through the CLI: `fos check --remote`
 * exit statuses, its report equal line for line (and in --json) to `fos check Y.npy FOSD_Y.npy`,
 * and `fos load --op check` without errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "cli.h"
#include "compare.h"
#include "fos.h"
#include "fos_wire.h"
#include "support_assert.h"
#include "support_server.h"
#include "test_cli_harness.h"
#include "support_json.h"

#define M 128
#define K 128
#define N 256

static tsrv g_srv;
static uint16_t g_w[N * K], g_x[M * K], g_b[N], g_y[M * N], g_yb[M * N];

static fos_client *connect_or_fail(void)
{
	fos_client *c = NULL;
	fos_status st;
	int rc = fos_connect(g_srv.url, NULL, 20000, &c, &st);
	if (rc)
		fail_msg("connect: %s: %s", fos_code_name(rc), st.message);
	return c;
}

static int setup(void **state)
{
	if (th_setup(state))
		return -1;
	const char *args[] = {"--workers", "2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	tsrv_fill_bf16(g_w, N * K, 21, 0.05f);
	tsrv_fill_bf16(g_x, M * K, 22, 1.0f);
	tsrv_fill_bf16(g_b, N, 23, 0.5f);
	fos_client *c;
	fos_status st;
	if (fos_connect(g_srv.url, NULL, 20000, &c, &st))
		return -1;
	/* fosd's Y by a plain forward, with and without the bias */
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w), tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	fos_tensor tb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_tensor y = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_y), yb = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_yb);
	y.size = yb.size = sizeof g_y;
	int rc = fos_put_weight(c, "w", 1, &tw, NULL, NULL, &st) || fos_forward(c, "w", &tx, NULL, NULL, &y, NULL, &st) ||
		 fos_forward(c, "w", &tx, &tb, NULL, &yb, NULL, &st);
	fos_close(c);
	if (rc) {
		fprintf(stderr, "setup: %s\n", st.message);
		return -1;
	}
	/* ... which is the in-process layer's */
	static uint16_t ref[M * N];
	fos_linear_opts o = fos_linear_opts_default();
	if (tsrv_ref_linear(g_x, g_w, NULL, NULL, M, N, K, &o, ref, NULL, NULL, NULL) || memcmp(ref, g_y, sizeof ref)) {
		fprintf(stderr, "setup: fosd's Y is not the reference's\n");
		return -1;
	}
	th_save(th_p("x.npy"), NPY_U2, 2, M, K, g_x);
	th_save(th_p("y.npy"), NPY_U2, 2, M, N, g_y);
	return 0;
}

static int teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static int check(fos_client *c, const uint16_t *e, const fos_check_criterion *crit, fos_check_result *res,
		 fos_status *st)
{
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), te = fos_tensor_2d(FOS_DTYPE_BF16, M, N, e);
	return fos_forward_check(c, "w", &tx, NULL, NULL, &te, crit, res, st);
}

static void expect_point(const fos_check_point *p, int64_t row, int64_t col, uint16_t e, uint16_t y, const char *what)
{
	if (!p->present || p->row != row || p->col != col || p->expect != e || p->y != y)
		fail_msg("%s: present %d at (%lld, %lld) expect 0x%04x y 0x%04x; want (%lld, %lld) 0x%04x 0x%04x", what,
			 p->present, (long long)p->row, (long long)p->col, p->expect, p->y, (long long)row, (long long)col,
			 e, y);
}

static void expect_same_point(const fos_check_point *p, size_t at, const uint32_t bits[2], const char *what)
{
	if (at == FOS_CMP_NONE) {
		if (p->present)
			fail_msg("%s: fosd reports (%lld, %lld), the local comparison none", what, (long long)p->row,
				 (long long)p->col);
		return;
	}
	expect_point(p, (int64_t)(at / N), (int64_t)(at % N), (uint16_t)bits[0], (uint16_t)bits[1], what);
}

/* fosd's result equals the local comparison of the same arrays (expect "ours", Y the reference),
 * field by field, the verdict and its reason included. */
static void expect_same_as_local(const fos_check_result *res, const uint16_t *e, const fos_check_criterion *crit)
{
	fos_cmp r;
	fos_compare(FOS_CMP_BF16, e, g_y, (size_t)M * N, &r);
	double sqnr = fos_cmp_sqnr_db(&r);
	fos_cmp_criterion cc = {crit ? crit->by_max_ulps : 0, crit ? crit->max_ulps : 0, crit ? crit->by_min_sqnr : 0,
				crit ? crit->min_sqnr_db : 0};
	static const fos_cmp_labels labels = {"bitwise", "max_ulps", "min_sqnr_db"};
	int64_t shape[2] = {M, N};
	char why[256];
	int consistent = fos_cmp_verdict(&r, sqnr, &cc, &labels, 2, shape, why, sizeof why);
	assert_int_equal(res->rows, M);
	assert_int_equal(res->cols, N);
	assert_int_equal(res->elements, r.n);
	assert_int_equal(res->differ, r.differ);
	assert_int_equal(res->nonfinite, r.nonfinite);
	assert_int_equal(res->max_ulps, r.max_ulps);
	expect_same_point(&res->max_ulps_at, r.max_at, r.max_bits, "max_ulps_at");
	expect_same_point(&res->first_differ, r.first_differ, r.first_bits, "first_differ");
	expect_same_point(&res->first_nonfinite, r.nonfinite_at, r.nonfinite_bits, "first_nonfinite");
	if (!(res->sqnr_db == sqnr || (isnan(res->sqnr_db) && isnan(sqnr))))
		fail_msg("sqnr: fosd %.17g, local %.17g", res->sqnr_db, sqnr);
	assert_int_equal(res->consistent, consistent);
	assert_string_equal(res->reason, why);
}

/* sum y^2 over Y (every element is finite): the signal of an SQNR against Y, summed here. */
static double y_signal(void)
{
	double s = 0;
	for (size_t i = 0; i < (size_t)M * N; i++) {
		uint32_t u = (uint32_t)g_y[i] << 16;
		float f;
		memcpy(&f, &u, 4);
		s += (double)f * (double)f;
	}
	return s;
}

static double bf16_value(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* ---- libfos --------------------------------------------------------------------------------- */

static void test_identical(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	fos_check_result res;
	ASSERT_OK(check(c, g_y, NULL, &res, &st), st);
	assert_int_equal(res.elements, M * N);
	assert_int_equal(res.differ, 0);
	assert_int_equal(res.nonfinite, 0);
	assert_int_equal(res.max_ulps, 0);
	assert_false(res.max_ulps_at.present || res.first_differ.present || res.first_nonfinite.present);
	assert_true(isinf(res.sqnr_db) && res.sqnr_db > 0);
	assert_int_equal(res.consistent, 1);
	assert_string_equal(res.reason, "bitwise identical");
	expect_same_as_local(&res, g_y, NULL);
	/* every criterion holds */
	fos_check_criterion ulps0 = {1, 0, 0, 0}, sqnr = {0, 0, 1, 300}, both = {1, 0, 1, 300};
	ASSERT_OK(check(c, g_y, &ulps0, &res, &st), st);
	assert_int_equal(res.consistent, 1);
	assert_string_equal(res.reason, "within max_ulps 0");
	ASSERT_OK(check(c, g_y, &sqnr, &res, &st), st);
	assert_string_equal(res.reason, "within min_sqnr_db 300 dB");
	ASSERT_OK(check(c, g_y, &both, &res, &st), st);
	assert_string_equal(res.reason, "within max_ulps 0 and min_sqnr_db 300 dB");
	/* with the bias: the bias's Y */
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), tb = fos_tensor_1d(FOS_DTYPE_BF16, N, g_b);
	fos_tensor te = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_yb);
	ASSERT_OK(fos_forward_check(c, "w", &tx, &tb, NULL, &te, NULL, &res, &st), st);
	assert_int_equal(res.consistent, 1);
	te.data = g_y; /* Y without the bias differs nearly everywhere */
	ASSERT_OK(fos_forward_check(c, "w", &tx, &tb, NULL, &te, NULL, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	assert_true(res.differ > M * N / 2);
	fos_close(c);
}

static void test_one_ulp(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	fos_check_result res;
	static uint16_t e[M * N];
	memcpy(e, g_y, sizeof e);
	const int64_t row = 5, col = 7;
	const size_t at = (size_t)(row * N + col);
	e[at] = (uint16_t)(g_y[at] + 1); /* one bf16 ulp further from zero */
	assert_true(isfinite(bf16_value(e[at])));
	double d = bf16_value(e[at]) - bf16_value(g_y[at]);
	double want_sqnr = 10.0 * log10(y_signal() / (d * d));
	ASSERT_OK(check(c, e, NULL, &res, &st), st);
	assert_int_equal(res.differ, 1);
	assert_int_equal(res.max_ulps, 1);
	assert_int_equal(res.nonfinite, 0);
	expect_point(&res.first_differ, row, col, e[at], g_y[at], "first_differ");
	expect_point(&res.max_ulps_at, row, col, e[at], g_y[at], "max_ulps_at");
	assert_false(res.first_nonfinite.present);
	assert_true(fabs(res.sqnr_db - want_sqnr) < 1e-9 * want_sqnr);
	assert_int_equal(res.consistent, 0);
	char want[100];
	snprintf(want, sizeof want, "1 of %d elements differ (bitwise)", M * N);
	assert_string_equal(res.reason, want);
	expect_same_as_local(&res, e, NULL);

	/* max ulps: 1 holds, 0 does not */
	fos_check_criterion u1 = {1, 1, 0, 0}, u0 = {1, 0, 0, 0};
	ASSERT_OK(check(c, e, &u1, &res, &st), st);
	assert_int_equal(res.consistent, 1);
	expect_same_as_local(&res, e, &u1);
	ASSERT_OK(check(c, e, &u0, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	assert_string_equal(res.reason, "max 1 bf16 ulps > max_ulps 0");
	expect_same_as_local(&res, e, &u0);
	/* min SQNR both ways, alone and with max ulps */
	fos_check_criterion lo = {0, 0, 1, floor(want_sqnr) - 1}, hi = {0, 0, 1, ceil(want_sqnr) + 1};
	fos_check_criterion both_hi = {1, 1, 1, ceil(want_sqnr) + 1};
	ASSERT_OK(check(c, e, &lo, &res, &st), st);
	assert_int_equal(res.consistent, 1);
	expect_same_as_local(&res, e, &lo);
	ASSERT_OK(check(c, e, &hi, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	assert_non_null(strstr(res.reason, "< min_sqnr_db"));
	expect_same_as_local(&res, e, &hi);
	ASSERT_OK(check(c, e, &both_hi, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	expect_same_as_local(&res, e, &both_hi);

	/* a second element 3 ulps off, later in Y: max ulps moves there, the first difference stays */
	const size_t at2 = (size_t)(100 * N + 200);
	e[at2] = (uint16_t)(g_y[at2] + 3);
	ASSERT_OK(check(c, e, &u1, &res, &st), st);
	assert_int_equal(res.differ, 2);
	assert_int_equal(res.max_ulps, 3);
	expect_point(&res.first_differ, row, col, e[at], g_y[at], "first_differ");
	expect_point(&res.max_ulps_at, 100, 200, e[at2], g_y[at2], "max_ulps_at");
	assert_int_equal(res.consistent, 0);
	assert_string_equal(res.reason, "max 3 bf16 ulps > max_ulps 1");
	expect_same_as_local(&res, e, &u1);
	fos_close(c);
}

static void test_nonfinite(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	fos_check_result res;
	static uint16_t e[M * N];
	memcpy(e, g_y, sizeof e);
	e[3] = 0x7FC0;           /* NaN at (0, 3) */
	e[2 * N + 9] = 0xFF80;   /* -inf at (2, 9) */
	fos_check_criterion u = {1, 1000000, 0, 0}, q = {0, 0, 1, -100};
	ASSERT_OK(check(c, e, NULL, &res, &st), st);
	assert_int_equal(res.differ, 2);
	assert_int_equal(res.nonfinite, 2);
	assert_int_equal(res.max_ulps, 0);
	assert_false(res.max_ulps_at.present); /* no element finite on both sides differs */
	expect_point(&res.first_differ, 0, 3, 0x7FC0, g_y[3], "first_differ");
	expect_point(&res.first_nonfinite, 0, 3, 0x7FC0, g_y[3], "first_nonfinite");
	assert_true(isinf(res.sqnr_db) && res.sqnr_db > 0); /* no finite value differs */
	assert_int_equal(res.consistent, 0);
	expect_same_as_local(&res, e, NULL);
	/* no bound makes a NaN consistent */
	ASSERT_OK(check(c, e, &u, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	assert_string_equal(res.reason, "2 elements are NaN/inf on one side only (first at [0, 3])");
	expect_same_as_local(&res, e, &u);
	ASSERT_OK(check(c, e, &q, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	expect_same_as_local(&res, e, &q);
	/* a NaN with a finite difference after it */
	e[2 * N + 9] = g_y[2 * N + 9];
	e[7 * N] = (uint16_t)(g_y[7 * N] + 2);
	ASSERT_OK(check(c, e, &u, &res, &st), st);
	assert_int_equal(res.differ, 2);
	assert_int_equal(res.nonfinite, 1);
	assert_int_equal(res.max_ulps, 2);
	expect_point(&res.max_ulps_at, 7, 0, e[7 * N], g_y[7 * N], "max_ulps_at");
	assert_true(isfinite(res.sqnr_db));
	expect_same_as_local(&res, e, &u);
	fos_close(c);
}

/* A Forward of X through a bare REQ socket with the given criterion and no expect. */
static void raw_criterion_without_expect(int *code, char *msg, size_t msgsz)
{
	nng_socket sock;
	assert_int_equal(nng_req0_open(&sock), 0);
	assert_int_equal(nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 10000), 0);
	assert_int_equal(nng_dial(sock, g_srv.url, NULL, 0), 0);
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
	Fos__CheckCriterion cc = FOS__CHECK_CRITERION__INIT;
	Fos__Tensor t = FOS__TENSOR__INIT;
	int64_t shape[2] = {M, K};
	t.dtype = FOS__DTYPE__DTYPE_BF16;
	t.n_shape = 2;
	t.shape = shape;
	t.length = sizeof g_x;
	fr.weight = (char *)"w";
	fr.x = &t;
	cc.by_max_ulps = 1;
	cc.max_ulps = 2;
	fr.criterion = &cc;
	rq.id = 9;
	rq.op_case = FOS__REQUEST__OP_FORWARD;
	rq.forward = &fr;
	size_t h = fos__request__get_packed_size(&rq), ds = (size_t)fosw_data_start(h);
	static uint8_t buf[(1 << 16) + sizeof g_x];
	assert_true(ds + sizeof g_x <= sizeof buf);
	memset(buf, 0, ds);
	buf[0] = (uint8_t)h, buf[1] = (uint8_t)(h >> 8), buf[2] = (uint8_t)(h >> 16), buf[3] = (uint8_t)(h >> 24);
	fos__request__pack(&rq, buf + 4);
	memcpy(buf + ds, g_x, sizeof g_x);
	assert_int_equal(nng_send(sock, buf, ds + sizeof g_x, 0), 0);
	nng_msg *m;
	assert_int_equal(nng_recvmsg(sock, &m, 0), 0);
	const uint8_t *hdr, *data;
	size_t hlen, dlen;
	char why[256];
	assert_int_equal(fosw_split(nng_msg_body(m), nng_msg_len(m), &hdr, &hlen, &data, &dlen, why, sizeof why), 0);
	Fos__Response *resp = fos__response__unpack(NULL, hlen, hdr);
	assert_non_null(resp);
	*code = resp->status ? resp->status->code : 0;
	snprintf(msg, msgsz, "%s", resp->status && resp->status->message ? resp->status->message : "");
	fos__response__free_unpacked(resp, NULL);
	nng_msg_free(m);
	nng_close(sock);
}

static void expect_invalid(int rc, const fos_status *st, const char *n1, const char *n2)
{
	if (rc != FOS_CODE_INVALID_ARGUMENT)
		fail_msg("got %s (%s), expected INVALID_ARGUMENT", fos_code_name(rc), st->message);
	if (!strstr(st->message, n1) || (n2 && !strstr(st->message, n2)))
		fail_msg("message '%s' does not mention '%s' and '%s'", st->message, n1, n2 ? n2 : "");
}

static void test_bad_requests(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	fos_check_result res;
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	/* wrong shapes: both named */
	static uint16_t big[N * N];
	fos_tensor half = fos_tensor_2d(FOS_DTYPE_BF16, M, N / 2, g_y), tall = fos_tensor_2d(FOS_DTYPE_BF16, N, N, big);
	fos_tensor flat = fos_tensor_1d(FOS_DTYPE_BF16, N, g_y), tr = fos_tensor_2d(FOS_DTYPE_BF16, N, M, g_y);
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &half, NULL, &res, &st), &st, "expect is (128, 128)",
		       "Y is (128, 256)");
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &tall, NULL, &res, &st), &st, "expect is (256, 256)",
		       "Y is (128, 256)");
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &flat, NULL, &res, &st), &st, "expect is (256,)",
		       "Y is (128, 256)");
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &tr, NULL, &res, &st), &st, "expect is (256, 128)",
		       "Y is (128, 256)");
	/* wrong dtype */
	static float yf[M * N];
	fos_tensor f32 = fos_tensor_2d(FOS_DTYPE_F32, M, N, yf);
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &f32, NULL, &res, &st), &st, "expect", "bf16");
	/* no context with a check */
	fos_tensor te = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_y);
	fos_forward_opts save = {0, FOS_OVERRIDE_DEFAULT, 0, 1, 0};
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, &save, &te, NULL, &res, &st), &st, "save_context", "expect");
	/* criteria */
	fos_check_criterion nan_db = {0, 0, 1, NAN}, inf_db = {0, 0, 1, INFINITY}, stray_ulps = {0, 3, 0, 0},
			    stray_db = {0, 0, 0, 20};
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &te, &nan_db, &res, &st), &st, "min_sqnr_db", "finite");
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &te, &inf_db, &res, &st), &st, "min_sqnr_db", "finite");
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &te, &stray_ulps, &res, &st), &st, "max_ulps = 3",
		       "by_max_ulps");
	expect_invalid(fos_forward_check(c, "w", &tx, NULL, NULL, &te, &stray_db, &res, &st), &st, "min_sqnr_db = 20",
		       "by_min_sqnr");
	int code;
	char msg[400];
	raw_criterion_without_expect(&code, msg, sizeof msg);
	assert_int_equal(code, FOS_CODE_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "criterion is set but there is no expect"));
	/* unknown weight: NOT_FOUND as for a forward */
	ASSERT_CODE(fos_forward_check(c, "nope", &tx, NULL, NULL, &te, NULL, &res, &st), FOS_CODE_NOT_FOUND, st);
	/* libfos's own checks */
	ASSERT_CODE(fos_forward_check(c, "w", &tx, NULL, NULL, NULL, NULL, &res, &st), FOS_CODE_INVALID_ARGUMENT, st);
	ASSERT_CODE(fos_forward_check(c, "w", &tx, NULL, NULL, &te, NULL, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	/* fosd keeps serving, and kept no context */
	ASSERT_OK(fos_forward_check(c, "w", &tx, NULL, NULL, &te, NULL, &res, &st), st);
	assert_int_equal(res.consistent, 1);
	fos_stats_info si;
	ASSERT_OK(fos_stats(c, &si, &st), st);
	assert_int_equal(si.contexts, 0);
	fos_close(c);
}

static void test_shm(void **state)
{
	(void)state;
	fos_client *c = connect_or_fail();
	fos_status st;
	fos_region *rg;
	size_t ox = 2, oe = ox + sizeof g_x + 6; /* odd offsets: any alignment is allowed */
	ASSERT_OK(fos_region_create(c, "chk", oe + sizeof g_y + 64, FOS_REGION_MEMFD, &rg, &st), st);
	uint8_t *p = fos_region_data(rg);
	memcpy(p + ox, g_x, sizeof g_x);
	memcpy(p + oe, g_y, sizeof g_y);
	uint16_t one = (uint16_t)(g_y[N + 1] + 1);
	memcpy(p + oe + 2 * (N + 1), &one, 2); /* (1, 1) one ulp off */
	fos_tensor sx = fos_tensor_shm(rg, ox, FOS_DTYPE_BF16, M, K), se = fos_tensor_shm(rg, oe, FOS_DTYPE_BF16, M, N);
	assert_non_null(sx.data);
	assert_non_null(se.data);
	fos_check_criterion u1 = {1, 1, 0, 0};
	fos_check_result res, inl;
	ASSERT_OK(fos_forward_check(c, "w", &sx, NULL, NULL, &se, &u1, &res, &st), st);
	assert_int_equal(res.differ, 1);
	expect_point(&res.first_differ, 1, 1, one, g_y[N + 1], "first_differ");
	assert_int_equal(res.consistent, 1);
	/* the same as inline */
	static uint16_t e[M * N];
	memcpy(e, p + oe, sizeof e);
	ASSERT_OK(check(c, e, &u1, &inl, &st), st);
	assert_memory_equal(&res, &inl, sizeof res);
	expect_same_as_local(&res, e, &u1);
	/* X inline, expect in the region */
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x);
	ASSERT_OK(fos_forward_check(c, "w", &tx, NULL, NULL, &se, NULL, &res, &st), st);
	assert_int_equal(res.consistent, 0);
	assert_int_equal(res.differ, 1);
	ASSERT_OK(fos_region_destroy(rg, &st), st);
	fos_close(c);
}

/* A Y of more elements than fosd compares at once (2^18, ops_linear.c): differences on both sides
 * of the boundary and at the last element, inline and in a region, equal the local comparison. */
static void test_large(void **state)
{
	(void)state;
	enum { M2 = 1024, N2 = 512 };
	const size_t n = (size_t)M2 * N2, bnd = (size_t)1 << 18;
	fos_client *c = connect_or_fail();
	fos_status st;
	uint16_t *w = malloc((size_t)N2 * K * 2), *x = malloc((size_t)M2 * K * 2), *y = malloc(n * 2), *e = malloc(n * 2);
	assert_true(w && x && y && e);
	tsrv_fill_bf16(w, (size_t)N2 * K, 31, 0.05f);
	tsrv_fill_bf16(x, (size_t)M2 * K, 32, 1.0f);
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, N2, K, w), tx = fos_tensor_2d(FOS_DTYPE_BF16, M2, K, x);
	fos_tensor ty = fos_tensor_2d(FOS_DTYPE_BF16, M2, N2, y);
	ty.size = n * 2;
	ASSERT_OK(fos_put_weight(c, "w2", 1, &tw, NULL, NULL, &st), st);
	ASSERT_OK(fos_forward(c, "w2", &tx, NULL, NULL, &ty, NULL, &st), st);
	memcpy(e, y, n * 2);
	e[bnd - 1] = (uint16_t)(y[bnd - 1] + 1);
	e[bnd] = (uint16_t)(y[bnd] + 4);
	e[n - 1] = 0x7FC0;
	fos_tensor te = fos_tensor_2d(FOS_DTYPE_BF16, M2, N2, e);
	fos_check_criterion u = {1, 4, 0, 0};
	fos_check_result res, rs;
	ASSERT_OK(fos_forward_check(c, "w2", &tx, NULL, NULL, &te, &u, &res, &st), st);
	assert_int_equal(res.elements, n);
	assert_int_equal(res.differ, 3);
	assert_int_equal(res.nonfinite, 1);
	assert_int_equal(res.max_ulps, 4);
	expect_point(&res.first_differ, (int64_t)((bnd - 1) / N2), (int64_t)((bnd - 1) % N2), e[bnd - 1], y[bnd - 1],
		     "first_differ");
	expect_point(&res.max_ulps_at, (int64_t)(bnd / N2), (int64_t)(bnd % N2), e[bnd], y[bnd], "max_ulps_at");
	expect_point(&res.first_nonfinite, M2 - 1, N2 - 1, 0x7FC0, y[n - 1], "first_nonfinite");
	assert_int_equal(res.consistent, 0);
	fos_cmp r;
	fos_compare(FOS_CMP_BF16, e, y, n, &r);
	assert_true(res.sqnr_db == fos_cmp_sqnr_db(&r));
	/* the same through a region */
	fos_region *rg;
	ASSERT_OK(fos_region_create(c, NULL, n * 2 + 64, FOS_REGION_MEMFD, &rg, &st), st);
	memcpy((uint8_t *)fos_region_data(rg) + 1, e, n * 2);
	fos_tensor se = fos_tensor_shm(rg, 1, FOS_DTYPE_BF16, M2, N2);
	ASSERT_OK(fos_forward_check(c, "w2", &tx, NULL, NULL, &se, &u, &rs, &st), st);
	assert_memory_equal(&res, &rs, sizeof res);
	ASSERT_OK(fos_region_destroy(rg, &st), st);
	ASSERT_OK(fos_drop_weight(c, "w2", &st), st);
	free(w);
	free(x);
	free(y);
	free(e);
	fos_close(c);
}

/* ---- the CLI -------------------------------------------------------------------------------- */

/* stdout without its first line (which names the files or the weight) */
static const char *after_first_line(const char *s)
{
	const char *nl = strchr(s, '\n');
	return nl ? nl + 1 : s;
}

/* A member that must be there. */
static const cli_jv *jget(const cli_jv *obj, const char *key)
{
	const cli_jv *v = cli_json_get(obj, key);
	if (!v)
		fail_msg("--json has no '%s'", key);
	return v;
}

static void expect_status(const th_result *r, int code)
{
	if (r->status != code || r->err[0])
		fail_msg("fos exited %d (want %d), stderr: %s\nstdout:\n%s", r->status, code, r->err, r->out);
}

/* `fos check --remote w x.npy FILE [opts]` against `fos check FILE y.npy [opts]`: the same exit
 * status, and the same report but for its first line; in --json the same fields. */
static void remote_vs_local(const char *file, int want_status, const char *o1, const char *o2)
{
	th_result rem, loc;
	const char *ra[] = {"check", "--remote", "w", th_p("x.npy"), th_p(file), o1, o2, NULL};
	const char *la[] = {"check", th_p(file), th_p("y.npy"), o1, o2, NULL};
	th_runv(&rem, ra);
	th_runv(&loc, la);
	expect_status(&rem, want_status);
	expect_status(&loc, want_status);
	assert_non_null(strstr(rem.out, "with fosd's Y of weight 'w'"));
	assert_string_equal(after_first_line(rem.out), after_first_line(loc.out));
	/* --json (a criterion in o1/o2 is kept) */
	const char *rj[] = {"check", "--remote", "w", th_p("x.npy"), th_p(file), "--json", o1, o2, NULL};
	const char *lj[] = {"check", th_p(file), th_p("y.npy"), "--json", o1, o2, NULL};
	th_runv(&rem, rj);
	th_runv(&loc, lj);
	expect_status(&rem, want_status);
	cli_jv a, b;
	fos_err e = {0, ""};
	if (cli_json_parse(rem.out, strlen(rem.out), &a, &e) || cli_json_parse(loc.out, strlen(loc.out), &b, &e))
		fail_msg("--json does not parse: %s", e.msg);
	static const char *const num[] = {"elements", "differ", "nonfinite_mismatches", "max_ulps"};
	for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
		if (jget(&a, num[i])->num != jget(&b, num[i])->num)
			fail_msg("--json %s: remote %g, local %g", num[i], jget(&a, num[i])->num,
				 jget(&b, num[i])->num);
	static const char *const strs[] = {"first_differ_at", "max_ulps_at", "criterion", "reason", "dtype"};
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
		const cli_jv *x = jget(&a, strs[i]), *y = jget(&b, strs[i]);
		assert_int_equal(x->type, y->type);
		if (x->type == CLI_JSTR)
			assert_string_equal(x->str, y->str);
	}
	const cli_jv *sa = jget(&a, "sqnr_db"), *sb = jget(&b, "sqnr_db");
	assert_int_equal(sa->type, sb->type);
	if (sa->type == CLI_JNUM)
		assert_true(sa->num == sb->num);
	assert_int_equal(jget(&a, "consistent")->b, jget(&b, "consistent")->b);
	assert_string_equal(jget(&a, "weight")->str, "w");
	cli_json_free(&a);
	cli_json_free(&b);
}

static void test_cli_remote(void **state)
{
	(void)state;
	static uint16_t e[M * N];
	memcpy(e, g_y, sizeof e);
	e[5 * N + 7] = (uint16_t)(g_y[5 * N + 7] + 1);
	th_save(th_p("y1.npy"), NPY_U2, 2, M, N, e);
	e[3] = 0x7FC0;
	th_save(th_p("ynan.npy"), NPY_U2, 2, M, N, e);
	th_save(th_p("ybad.npy"), NPY_U2, 2, M, N / 2, g_y);
	float f[16] = {0};
	th_save(th_p("yf32.npy"), NPY_F4, 2, 4, 4, f);

	remote_vs_local("y.npy", 0, NULL, NULL);
	remote_vs_local("y.npy", 0, "--max-ulps", "0");
	remote_vs_local("y1.npy", 1, NULL, NULL);
	remote_vs_local("y1.npy", 1, "--bitwise", NULL);
	remote_vs_local("y1.npy", 0, "--max-ulps", "1");
	remote_vs_local("y1.npy", 1, "--max-ulps", "0");
	remote_vs_local("y1.npy", 0, "--min-sqnr", "20");
	remote_vs_local("y1.npy", 1, "--min-sqnr", "200");
	remote_vs_local("ynan.npy", 1, NULL, NULL);
	remote_vs_local("ynan.npy", 1, "--max-ulps", "100");
	remote_vs_local("ynan.npy", 1, "--min-sqnr=0", NULL);

	th_result r;
	th_run(&r, "check", "--remote", "w", th_p("x.npy"), th_p("y1.npy"), NULL);
	assert_non_null(strstr(r.out, "first:       [5, 7]: "));
	assert_non_null(strstr(r.out, "max ulps:    1 bf16 at [5, 7]"));
	assert_non_null(strstr(r.out, "NOT consistent: 1 of 32768 elements differ (--bitwise)"));
	/* through a shared-memory region: the same report */
	th_result s;
	th_run(&s, "check", "--remote", "w", th_p("x.npy"), th_p("y1.npy"), "--shm", NULL);
	expect_status(&s, 1);
	assert_string_equal(s.out, r.out);
	/* the bias goes with the forward */
	th_save(th_p("b.npy"), NPY_U2, 1, N, 0, g_b);
	th_save(th_p("yb.npy"), NPY_U2, 2, M, N, g_yb);
	th_run(&r, "check", "--remote", "w", th_p("x.npy"), th_p("yb.npy"), "--bias", th_p("b.npy"), NULL);
	expect_status(&r, 0);
	/* comparisons that cannot be made: exit 2, one "fos: " line */
	th_run(&r, "check", "--remote", "w", th_p("x.npy"), th_p("ybad.npy"), NULL);
	th_expect_fail(&r, 2, "INVALID_ARGUMENT: expect is (128, 128) but Y is (128, 256)");
	th_run(&r, "check", "--remote", "w", th_p("x.npy"), th_p("yf32.npy"), NULL);
	th_expect_fail(&r, 2, "fosd's Y is bf16");
	th_run(&r, "check", "--remote", "nope", th_p("x.npy"), th_p("y.npy"), NULL);
	th_expect_fail(&r, 2, "NOT_FOUND");
	th_run(&r, "check", th_p("y.npy"), th_p("y.npy"), "--shm", NULL);
	th_expect_fail(&r, 2, "--shm needs --remote");
}

static void test_cli_load(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "load", "--op", "check", "--m", "128", "--n", "256", "--k", "128", "--requests", "30", "--warmup", "0",
	       "--concurrency", "2", "--json", NULL);
	expect_status(&r, 0);
	cli_jv v;
	fos_err e = {0, ""};
	if (cli_json_parse(r.out, strlen(r.out), &v, &e))
		fail_msg("--json does not parse: %s", e.msg);
	assert_string_equal(jget(&v, "op")->str, "check");
	const cli_jv *rq = jget(&v, "requests");
	assert_true(jget(rq, "ok")->num == 30);
	assert_true(jget(rq, "failed")->num == 0);
	cli_json_free(&v);
	th_run(&r, "load", "--op", "check", "--m", "128", "--n", "256", "--k", "128", "--requests", "10", "--warmup", "0",
	       "--shm", NULL);
	expect_status(&r, 0);
	assert_non_null(strstr(r.out, "10 ok, 0 failed"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identical),    cmocka_unit_test(test_one_ulp),    cmocka_unit_test(test_nonfinite),
		cmocka_unit_test(test_bad_requests), cmocka_unit_test(test_shm),        cmocka_unit_test(test_large),
		cmocka_unit_test(test_cli_remote),   cmocka_unit_test(test_cli_load),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
