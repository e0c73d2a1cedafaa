/* test_trust_quota.c: per-tenant quotas on a real fosd. Over its cache quota a tenant's put evicts
 * only its own least recently used weights, and with only pinned ones left it gets
 * RESOURCE_EXHAUSTED (another tenant loses nothing); the global budget evicts the putting
 * tenant's own weights first. Over its context quota a tenant's oldest contexts are evicted, not
 * another's; a context larger than the quota is RESOURCE_EXHAUSTED. Over its requests-in-flight
 * quota a tenant's request is RESOURCE_EXHAUSTED while another tenant is served. Every surviving
 * weight gives bit-identical results afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

#define ALICE "alice-secret-0123456789abcdef"
#define BOB "bob-secret-fedcba9876543210-xyz"

enum { WN = 256, WK = 128, XM = 128 };

/* The bytes a (WN, WK) weight put for every use (the default) occupies in the cache. */
static uint64_t weight_bytes(void)
{
	return fos_qweight_bytes_for(WN, WK, FOS_USES_ALL, NULL);
}

static void start(tsrv *s, char *dir, const char *tokens_text, const char *const *extra)
{
	char tokens[320];
	assert_int_equal(tt_tmpdir(dir), 0);
	snprintf(tokens, sizeof tokens, "%s/tokens", dir);
	assert_int_equal(tt_write_file(tokens, tokens_text, 0600), 0);
	const char *args[24];
	int n = 0;
	args[n++] = "--tokens";
	args[n++] = tokens;
	for (int i = 0; extra && extra[i] && n < 22; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	assert_int_equal(tsrv_start(s, args), 0);
}

static void stop(tsrv *s, char *dir)
{
	int rc = tsrv_stop(s, SIGTERM, 15000);
	if (rc)
		tsrv_dump_log(s);
	assert_int_equal(rc, 0);
	tsrv_cleanup(s);
	tt_tmpdir_remove(dir);
}

static void test_cache_quota(void **state)
{
	(void)state;
	uint64_t b = weight_bytes();
	char text[512], budget[32], dir[256];
	snprintf(text, sizeof text, "alice " ALICE " cache=%llu\nbob " BOB "\n", (unsigned long long)(b * 5 / 2));
	snprintf(budget, sizeof budget, "%llu", (unsigned long long)(b * 11 / 2));
	const char *extra[] = {"--cache-bytes", budget, NULL};
	tsrv s;
	start(&s, dir, text, extra);
	fos_client *a = tt_connect(s.url, ALICE), *bo = tt_connect(s.url, BOB);
	tt_weight aw[4], bw[4];
	for (int i = 0; i < 4; i++) {
		char name[16];
		snprintf(name, sizeof name, "a%d", i + 1);
		assert_int_equal(tt_weight_make(&aw[i], name, WN, WK, XM, 100 + (uint64_t)i), 0);
		snprintf(name, sizeof name, "b%d", i + 1);
		assert_int_equal(tt_weight_make(&bw[i], name, WN, WK, XM, 200 + (uint64_t)i), 0);
	}
	fos_status st;
	fos_weight_info info;
	fos_tensor tw = fos_tensor_2d(FOS_DTYPE_BF16, WN, WK, bw[0].w);
	ASSERT_OK(fos_put_weight(bo, "b1", 1, &tw, NULL, &info, &st), st);
	assert_int_equal(info.bytes, b); /* the quota arithmetic below relies on it */
	ASSERT_OK(tt_weight_put(bo, &bw[1], 0, &st), st);
	/* alice: a1 unpinned, a2 pinned; a3 (pinned) is over her quota: her a1 goes, not bob's */
	ASSERT_OK(tt_weight_put(a, &aw[0], 0, &st), st);
	ASSERT_OK(tt_weight_put(a, &aw[1], 1, &st), st);
	ASSERT_OK(tt_weight_put(a, &aw[2], 1, &st), st);
	assert_int_equal(tt_weight_listed(a, "a1"), 0);
	assert_int_equal(tt_weight_listed(bo, "b1"), 1);
	assert_int_equal(tt_weight_listed(bo, "b2"), 1);
	/* only pinned weights of hers are left: RESOURCE_EXHAUSTED, and nobody loses anything */
	ASSERT_CODE(tt_weight_put(a, &aw[3], 0, &st), FOS_CODE_RESOURCE_EXHAUSTED, st);
	assert_non_null(strstr(st.message, "quota of tenant 'alice'"));
	fos_stats_info si;
	ASSERT_OK(fos_stats(a, &si, &st), st);
	assert_int_equal(si.cache_evictions, 1);
	assert_int_equal(si.cache_entries, 4);
	/* bob has no quota; the global budget (5.5 weights) makes his put evict his own oldest */
	ASSERT_OK(tt_weight_put(bo, &bw[2], 0, &st), st);
	ASSERT_OK(tt_weight_put(bo, &bw[3], 0, &st), st);
	assert_int_equal(tt_weight_listed(bo, "b1"), 0);
	assert_int_equal(tt_weight_listed(a, "a2"), 1);
	assert_int_equal(tt_weight_listed(a, "a3"), 1);
	/* everything left is bit-identical */
	ASSERT_OK(tt_weight_check(a, &aw[1], &st), st);
	ASSERT_OK(tt_weight_check(a, &aw[2], &st), st);
	for (int i = 1; i < 4; i++)
		ASSERT_OK(tt_weight_check(bo, &bw[i], &st), st);
	fos_close(a);
	fos_close(bo);
	for (int i = 0; i < 4; i++) {
		tt_weight_free(&aw[i]);
		tt_weight_free(&bw[i]);
	}
	stop(&s, dir);
}

/* Saves a context of alice's or bob's: forward of tw->x with save_context. */
static int run_bwd(fos_client *c, fos_context *ctx, const tt_weight *tw, fos_status *st)
{
	uint16_t *dy = malloc((size_t)(tw->m * tw->n) * 2);
	tsrv_fill_bf16(dy, (size_t)(tw->m * tw->n), 9, 0.5f);
	fos_tensor tdy = fos_tensor_2d(FOS_DTYPE_BF16, tw->m, tw->n, dy), dx = fos_tensor_out(), dw = fos_tensor_out();
	int rc = fos_backward(c, ctx, &tdy, NULL, &dx, &dw, NULL, st);
	free(dx.data), free(dw.data), free(dy);
	return rc;
}

static void test_context_quota(void **state)
{
	(void)state;
	char dir[256], text[512];
	tsrv s;
	tt_weight w, big;
	assert_int_equal(tt_weight_make(&w, "w", WN, WK, XM, 300), 0);
	assert_int_equal(tt_weight_make(&big, "w", WN, WK, 4 * XM, 300), 0);
	fos_status st;
	fos_context c1, c2, cb;
	/* the size of one context, measured */
	start(&s, dir, "alice " ALICE "\n", NULL);
	fos_client *a = tt_connect(s.url, ALICE);
	ASSERT_OK(tt_weight_put(a, &w, 0, &st), st);
	ASSERT_OK(tt_weight_save_context(a, &w, &c1, &st), st);
	fos_stats_info si;
	ASSERT_OK(fos_stats(a, &si, &st), st);
	uint64_t one = si.context_bytes;
	assert_true(one > 0);
	fos_close(a);
	stop(&s, dir);

	snprintf(text, sizeof text, "alice " ALICE " contexts=%llu\nbob " BOB "\n", (unsigned long long)(one * 3 / 2));
	start(&s, dir, text, NULL);
	a = tt_connect(s.url, ALICE);
	fos_client *b = tt_connect(s.url, BOB);
	ASSERT_OK(tt_weight_put(a, &w, 0, &st), st);
	ASSERT_OK(tt_weight_put(b, &w, 0, &st), st);
	ASSERT_OK(tt_weight_save_context(b, &w, &cb, &st), st); /* bob's is the oldest of all */
	ASSERT_OK(tt_weight_save_context(a, &w, &c1, &st), st);
	ASSERT_OK(tt_weight_save_context(a, &w, &c2, &st), st); /* over alice's quota: her c1 goes, not bob's */
	ASSERT_CODE(run_bwd(a, &c1, &w, &st), FOS_CODE_NOT_FOUND, st);
	assert_non_null(strstr(st.message, "evicted"));
	fos_context huge;
	ASSERT_CODE(tt_weight_save_context(a, &big, &huge, &st), FOS_CODE_RESOURCE_EXHAUSTED, st);
	assert_non_null(strstr(st.message, "context quota of tenant 'alice'"));
	ASSERT_OK(run_bwd(b, &cb, &w, &st), st);
	ASSERT_OK(run_bwd(a, &c2, &w, &st), st);
	ASSERT_OK(tt_weight_check(a, &w, &st), st);
	ASSERT_OK(tt_weight_check(b, &w, &st), st);
	fos_close(a);
	fos_close(b);
	tt_weight_free(&w);
	tt_weight_free(&big);
	stop(&s, dir);
}

typedef struct burst {
	const char *url, *token;
	pthread_barrier_t *bar;
	int ok, exhausted, other;
	char msg[600];
} burst;

enum { SLOW = 512 };
static uint16_t g_sx[SLOW * SLOW], g_sw[SLOW * SLOW], g_sdy[SLOW * SLOW];

static void *burst_main(void *p)
{
	burst *b = p;
	fos_client *c;
	fos_status st;
	if (fos_connect(b->url, b->token, 60000, &c, &st)) {
		b->other++;
		snprintf(b->msg, sizeof b->msg, "%s", st.message);
		pthread_barrier_wait(b->bar);
		return NULL;
	}
	pthread_barrier_wait(b->bar);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, SLOW, SLOW, g_sx), w = fos_tensor_2d(FOS_DTYPE_BF16, SLOW, SLOW, g_sw);
	fos_tensor dy = fos_tensor_2d(FOS_DTYPE_BF16, SLOW, SLOW, g_sdy);
	for (int i = 0; i < 3; i++) {
		fos_tensor y = fos_tensor_out(), dx = fos_tensor_out(), dw = fos_tensor_out();
		int rc = fos_linear(c, &x, &w, NULL, &dy, NULL, &y, &dx, &dw, NULL, &st);
		free(y.data), free(dx.data), free(dw.data);
		if (rc == FOS_CODE_OK)
			b->ok++;
		else if (rc == FOS_CODE_RESOURCE_EXHAUSTED && strstr(st.message, "requests in flight"))
			b->exhausted++;
		else {
			b->other++;
			snprintf(b->msg, sizeof b->msg, "%s: %s", fos_code_name(rc), st.message);
		}
	}
	fos_close(c);
	return NULL;
}

static void test_inflight_quota(void **state)
{
	(void)state;
	char dir[256];
	tsrv s;
	start(&s, dir, "alice " ALICE " inflight=1\nbob " BOB "\n", NULL);
	tsrv_fill_bf16(g_sx, SLOW * SLOW, 1, 1.0f);
	tsrv_fill_bf16(g_sw, SLOW * SLOW, 2, 0.05f);
	tsrv_fill_bf16(g_sdy, SLOW * SLOW, 3, 0.5f);
	enum { NA = 4, NB = 2 };
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, NA + NB);
	burst bs[NA + NB];
	pthread_t th[NA + NB];
	for (int i = 0; i < NA + NB; i++) {
		memset(&bs[i], 0, sizeof bs[i]);
		bs[i].url = s.url;
		bs[i].token = i < NA ? ALICE : BOB;
		bs[i].bar = &bar;
		assert_int_equal(pthread_create(&th[i], NULL, burst_main, &bs[i]), 0);
	}
	int a_ok = 0, a_ex = 0, b_ok = 0;
	for (int i = 0; i < NA + NB; i++) {
		pthread_join(th[i], NULL);
		if (bs[i].other)
			fail_msg("thread %d: unexpected: %s", i, bs[i].msg);
		if (i < NA)
			a_ok += bs[i].ok, a_ex += bs[i].exhausted;
		else
			b_ok += bs[i].ok, assert_int_equal(bs[i].exhausted, 0);
	}
	pthread_barrier_destroy(&bar);
	assert_true(a_ok >= 1);
	assert_true(a_ex >= 1);
	assert_int_equal(b_ok, NB * 3);
	/* the count goes back to zero: alice is served again */
	fos_client *a = tt_connect(s.url, ALICE);
	fos_stats_info si;
	fos_status st;
	ASSERT_OK(fos_stats(a, &si, &st), st);
	fos_close(a);
	stop(&s, dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cache_quota),
		cmocka_unit_test(test_context_quota),
		cmocka_unit_test(test_inflight_quota),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
