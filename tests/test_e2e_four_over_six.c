/* test_e2e_four_over_six.c: four_over_six per operand through a real fosd (NUMERICS.md section 11,
 * PROTOCOL.md "Four-over-six per operand"), every result bit for bit against the same layer
 * computed in-process (tsrv_ref_linear, which test_four_over_six checks against the reference):
 *  - Linear under each scope, with its backward;
 *  - PutWeight for each scope: a Forward naming no scope uses the weight's, with and without a
 *    saved context, and its Backward;
 *  - a Forward whose scope needs the other form of W: made from the master and kept with the entry
 *    (its bytes added to the weight's, made once), with its saved context's Backward; refused with
 *    FAILED_PRECONDITION naming both scopes and the way out when the weight keeps no master; a scope
 *    with the same form of W (all / weights, activations / none) served as is;
 *  - unknown scope values refused (INVALID_ARGUMENT) in PutWeight, Forward and Linear. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fos.h"
#include "support_assert.h"
#include "support_server.h"
#include "support_trust.h"

#define M 40
#define N 48
#define K 64

static const int k_wire[4] = {FOS_FOUR_OVER_SIX_ALL, FOS_FOUR_OVER_SIX_WEIGHTS, FOS_FOUR_OVER_SIX_ACTIVATIONS,
			      FOS_FOUR_OVER_SIX_NONE};

static uint16_t g_x[M * K], g_w[N * K], g_dy[M * N];

static void same(const void *a, const void *b, size_t n, const char *what, int scope)
{
	if (memcmp(a, b, n * 2))
		fail_msg("%s under '%s' differs from the in-process layer", what, fos_scope_name(scope));
}

/* The in-process layer under scope and override (wire numbers are fos_override's). */
static void ref(int scope, int ovr, uint16_t *y, uint16_t *dx, uint16_t *dw)
{
	fos_linear_opts o = fos_linear_opts_default();
	o.four_over_six = scope;
	o.override = ovr;
	assert_int_equal(tsrv_ref_linear(g_x, g_w, NULL, dx ? g_dy : NULL, M, N, K, &o, y, dx, dw, NULL), FOS_OK);
}

static const fos_weight_info *find(const fos_weight_info *l, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			return &l[i];
	fail_msg("weight %s not listed", name);
	return NULL;
}

static void test_fosd_scopes(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	fos_client *c = tt_connect(s.url, NULL);
	fos_status st;
	tsrv_fill_bf16(g_x, M * K, 61, 1.0f);
	tsrv_fill_bf16(g_w, N * K, 62, 0.1f);
	tsrv_fill_bf16(g_dy, M * N, 63, 0.5f);
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, M, K, g_x), tw = fos_tensor_2d(FOS_DTYPE_BF16, N, K, g_w);
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, M, N, g_dy);
	static uint16_t ry[M * N], rdx[M * K], rdw[N * K], y0[M * N];

	for (int sc = 0; sc < 4; sc++) {
		/* Linear, forward and quantized backward */
		fos_linear_config lc = {FOS_OVERRIDE_QUANTIZED, 0, 0, 0, 0, k_wire[sc]};
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
		ASSERT_OK(fos_linear(c, &tx, &tw, NULL, &tdy, &lc, &y, &dx, &dw, NULL, &st), st);
		ref(sc, FOS_OVR_QUANTIZED, ry, rdx, rdw);
		same(y.data, ry, M * N, "Linear y", sc);
		same(dx.data, rdx, M * K, "Linear dx", sc);
		same(dw.data, rdw, N * K, "Linear dw", sc);
		if (sc == 0)
			memcpy(y0, y.data, sizeof y0);
		else if (!memcmp(y0, y.data, sizeof y0))
			fail_msg("scope '%s' gives the bits of 'all'", fos_scope_name(sc));
		free(y.data), free(dx.data), free(dw.data);

		/* PutWeight for the scope; Forwards naming none use it */
		char name[32];
		snprintf(name, sizeof name, "w_%s", fos_scope_name(sc));
		fos_weight_config wc = {0, 0, 0, 0, 0, 0, 0, k_wire[sc]};
		ASSERT_OK(fos_put_weight(c, name, 1, &tw, &wc, NULL, &st), st);
		y = fos_tensor_out();
		ASSERT_OK(fos_forward(c, name, &tx, NULL, NULL, &y, NULL, &st), st);
		ref(sc, FOS_OVR_DEFAULT, ry, NULL, NULL);
		same(y.data, ry, M * N, "Forward y", sc);
		free(y.data);
		static const int ovrs[3] = {FOS_OVERRIDE_QUANTIZED, FOS_OVERRIDE_HIGH_PRECISION, FOS_OVERRIDE_DEQUANTIZED};
		for (int i = 0; i < 3; i++) {
			fos_forward_opts fo = {0, ovrs[i], 0, 1, 0};
			fos_context ctx;
			y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
			ASSERT_OK(fos_forward(c, name, &tx, NULL, &fo, &y, &ctx, &st), st);
			ASSERT_OK(fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
			ref(sc, ovrs[i], ry, rdx, rdw);
			same(y.data, ry, M * N, "Forward (saving) y", sc);
			same(dx.data, rdx, M * K, "Backward dx", sc);
			same(dw.data, rdw, N * K, "Backward dw", sc);
			free(y.data), free(dx.data), free(dw.data);
		}
	}

	/* the other form of W, from the master: 'all' weight, 'none' and 'activations' forwards */
	fos_weight_info *l = NULL;
	size_t nl = 0;
	ASSERT_OK(fos_list_weights(c, &l, &nl, &st), st);
	uint64_t before = find(l, nl, "w_all")->bytes;
	free(l);
	for (int rep = 0; rep < 2; rep++)
		for (int sc = 2; sc < 4; sc++) {
			fos_forward_opts fo = {0, 0, 0, 0, k_wire[sc]};
			fos_tensor y = fos_tensor_out();
			ASSERT_OK(fos_forward(c, "w_all", &tx, NULL, &fo, &y, NULL, &st), st);
			ref(sc, FOS_OVR_DEFAULT, ry, NULL, NULL);
			same(y.data, ry, M * N, "Forward y (W made for another scope)", sc);
			free(y.data);
		}
	ASSERT_OK(fos_list_weights(c, &l, &nl, &st), st);
	const fos_weight_info *wi = find(l, nl, "w_all");
	/* the plain form: rowwise and columnwise codes, scales and amax, once */
	uint64_t form = 2 * (uint64_t)(N * K / 2 + N * K / 16 + 4);
	assert_int_equal(wi->bytes, before + form);
	assert_int_equal(wi->codes_bytes + wi->columnwise_bytes + wi->master_bytes, wi->bytes);
	free(l);
	{ /* a saved context on that form, and its backward */
		fos_forward_opts fo = {0, FOS_OVERRIDE_QUANTIZED, 0, 1, FOS_FOUR_OVER_SIX_NONE};
		fos_context ctx;
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
		ASSERT_OK(fos_forward(c, "w_all", &tx, NULL, &fo, &y, &ctx, &st), st);
		ASSERT_OK(fos_backward(c, &ctx, &tdy, NULL, &dx, &dw, NULL, &st), st);
		ref(3, FOS_OVR_QUANTIZED, ry, rdx, rdw);
		same(y.data, ry, M * N, "y (other form, saving)", 3);
		same(dx.data, rdx, M * K, "dx (other form)", 3);
		same(dw.data, rdw, N * K, "dw (other form)", 3);
		free(y.data), free(dx.data), free(dw.data);
	}

	/* without the master: refused naming both scopes and the way out; the same form served */
	fos_weight_config dm = {0, 0, 0, 0, 1, 0, 0, FOS_FOUR_OVER_SIX_ALL};
	ASSERT_OK(fos_put_weight(c, "w_dm", 1, &tw, &dm, NULL, &st), st);
	fos_forward_opts fa = {0, 0, 0, 0, FOS_FOUR_OVER_SIX_ACTIVATIONS};
	fos_tensor y = fos_tensor_out();
	ASSERT_CODE(fos_forward(c, "w_dm", &tx, NULL, &fa, &y, NULL, &st), FOS_CODE_FAILED_PRECONDITION, st);
	if (!strstr(st.message, "'activations'") || !strstr(st.message, "'all'") || !strstr(st.message, "put it again"))
		fail_msg("refusal does not name both scopes and the way out: %s", st.message);
	fos_forward_opts fwt = {0, 0, 0, 0, FOS_FOUR_OVER_SIX_WEIGHTS};
	ASSERT_OK(fos_forward(c, "w_dm", &tx, NULL, &fwt, &y, NULL, &st), st);
	ref(1, FOS_OVR_DEFAULT, ry, NULL, NULL);
	same(y.data, ry, M * N, "Forward y ('weights' on an 'all' weight)", 1);
	free(y.data);

	/* unknown scope values */
	fos_forward_opts fb = {0, 0, 0, 0, 9};
	y = fos_tensor_out();
	ASSERT_CODE(fos_forward(c, "w_all", &tx, NULL, &fb, &y, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "four_over_six"));
	fos_weight_config wb = {0, 0, 0, 0, 0, 0, 0, 5};
	ASSERT_CODE(fos_put_weight(c, "w_bad", 1, &tw, &wb, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "four_over_six"));
	fos_linear_config lb = {0, 0, 0, 0, 0, -1};
	ASSERT_CODE(fos_linear(c, &tx, &tw, NULL, NULL, &lb, &y, NULL, NULL, NULL, &st), FOS_CODE_INVALID_ARGUMENT, st);
	assert_non_null(strstr(st.message, "four_over_six"));

	fos_close(c);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fosd_scopes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
