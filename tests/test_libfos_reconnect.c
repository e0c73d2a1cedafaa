/* test_libfos_reconnect.c: libfos when fosd goes away (fos.h "losing fosd"). A handle with a request
 * channel open gets through a fosd killed (SIGKILL: the channel is never closed by it) and started
 * again on the same socket: the next forward answers within its timeout, the weight put again by
 * the handle's copies, Y bit-identical to the in-process reference. A context saved before such a
 * restart is recomputed by fos_backward from X with the weight put again by the re-put hook (its
 * version the context's), dX and dW the bits of a backward on the first fosd. A fosd stopped for
 * good gives UNAVAILABLE within the call's timeout, and cleanup calls do not wait. After fork, the
 * child's inherited handle refuses calls with FAILED_PRECONDITION (no abort), its fos_close and
 * exit are clean, and the parent's handle, channel and regions keep working. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fos.h"
#include "support_server.h"
#include "support_trust.h"
#include "support_assert.h"

static fos_client *connect_reput(const char *url, int timeout_ms, int reput)
{
	fos_connect_opts o;
	memset(&o, 0, sizeof o);
	o.timeout_ms = timeout_ms;
	o.reput_weights = reput;
	fos_client *c;
	fos_status st;
	ASSERT_OK(fos_connect_with(url, &o, &c, &st), st);
	return c;
}

static void test_channel_survives_kill(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "rc.chan", 128, 128, 128, 5), 0);
	fos_client *c = connect_reput(s.url, 10000, 1);
	fos_status st;
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	ASSERT_OK(tt_weight_put(c, &w, 0, &st), st);
	ASSERT_OK(tt_weight_check(c, &w, &st), st);
	assert_int_equal(tt_restart(&s, SIGKILL, NULL), 0);
	uint64_t t0 = tsrv_now_ms();
	ASSERT_OK(tt_weight_check(c, &w, &st), st); /* not 10 s waiting on a channel no one serves */
	assert_true(tsrv_now_ms() - t0 < 5000);
	assert_int_equal(fos_reput_count(c), 1);
	/* the channel is opened again on the new connection */
	for (int i = 0; i < 20 && !fos_channel_bytes(c); i++) {
		usleep(100 * 1000);
		ASSERT_OK(tt_weight_check(c, &w, &st), st);
	}
	assert_true(fos_channel_bytes(c) > 0);
	fos_close(c);
	tt_weight_free(&w);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

typedef struct hook_state {
	const tt_weight *w;
	uint64_t version;
	int calls;
	uint64_t asked;
} hook_state;

/* The caller's re-put: the weight it holds, as the version it put. */
static int reput_hook(fos_client *c, const char *name, uint64_t version, void *user)
{
	hook_state *h = user;
	h->calls++;
	h->asked = version;
	if (strcmp(name, h->w->name) || (version && version != h->version))
		return FOS_CODE_NOT_FOUND;
	fos_tensor t = fos_tensor_2d(FOS_DTYPE_BF16, h->w->n, h->w->k, h->w->w);
	fos_status st;
	return fos_put_weight(c, name, h->version, &t, NULL, NULL, &st);
}

static void test_recompute_with_hook(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "rc.hook", 128, 128, 128, 6), 0);
	uint16_t *dyv = malloc((size_t)w.m * (size_t)w.n * 2);
	assert_non_null(dyv);
	tsrv_fill_bf16(dyv, (size_t)(w.m * w.n), 77, 1.0f);
	fos_client *c = connect_reput(s.url, 10000, 0);
	hook_state h = {&w, 7, 0, 0};
	fos_set_reput_hook(c, reput_hook, &h);
	fos_status st;
	fos_tensor wt = fos_tensor_2d(FOS_DTYPE_BF16, w.n, w.k, w.w);
	ASSERT_OK(fos_put_weight(c, w.name, 7, &wt, NULL, NULL, &st), st);
	fos_tensor x = fos_tensor_2d(FOS_DTYPE_BF16, w.m, w.k, w.x), dy = fos_tensor_2d(FOS_DTYPE_BF16, w.m, w.n, dyv);
	/* the reference: a backward on the first fosd */
	fos_context ctx;
	ASSERT_OK(tt_weight_save_context(c, &w, &ctx, &st), st);
	fos_tensor dx0 = fos_tensor_out(), dw0 = fos_tensor_out();
	ASSERT_OK(fos_backward(c, &ctx, &dy, NULL, &dx0, &dw0, NULL, &st), st);
	ASSERT_OK(tt_weight_save_context(c, &w, &ctx, &st), st);
	assert_int_equal(tt_restart(&s, SIGKILL, NULL), 0);
	/* the context and the weight died with fosd: recomputed from X, the weight put by the hook */
	fos_backward_opts bo = {0, &x, NULL};
	fos_tensor dx1 = fos_tensor_out(), dw1 = fos_tensor_out();
	ASSERT_OK(fos_backward(c, &ctx, &dy, &bo, &dx1, &dw1, NULL, &st), st);
	assert_int_equal(ctx.recomputed, 1);
	assert_int_equal(h.calls, 1);
	assert_int_equal(h.asked, 7); /* the context's version */
	assert_int_equal(fos_reput_count(c), 1);
	assert_int_equal(dx1.size, dx0.size);
	assert_int_equal(dw1.size, dw0.size);
	assert_memory_equal(dx1.data, dx0.data, dx0.size);
	assert_memory_equal(dw1.data, dw0.data, dw0.size);
	/* a hook that cannot put it leaves the NOT_FOUND */
	ASSERT_OK(fos_drop_weight(c, w.name, &st), st);
	h.version = 8;
	ASSERT_OK(tt_weight_save_context(c, &w, &ctx, &st), st); /* put by the hook as version 8 */
	assert_int_equal(h.calls, 2);
	assert_int_equal(tt_restart(&s, SIGKILL, NULL), 0);
	h.version = 9; /* the caller no longer holds version 8 */
	ASSERT_CODE(fos_backward(c, &ctx, &dy, &bo, &dx1, &dw1, NULL, &st), FOS_CODE_NOT_FOUND, st);
	assert_non_null(strstr(st.message, "cannot recompute"));
	free(dx0.data);
	free(dw0.data);
	free(dx1.data);
	free(dw1.data);
	free(dyv);
	fos_close(c);
	tt_weight_free(&w);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

static void test_gone_for_good(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "rc.gone", 128, 128, 128, 8), 0);
	enum { TIMEOUT = 2000 };
	fos_client *c = connect_reput(s.url, TIMEOUT, 1);
	fos_status st;
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	fos_region *r;
	ASSERT_OK(fos_region_create(c, NULL, 1 << 16, FOS_REGION_MEMFD, &r, &st), st);
	ASSERT_OK(tt_weight_put(c, &w, 0, &st), st);
	fos_context ctx;
	ASSERT_OK(tt_weight_save_context(c, &w, &ctx, &st), st);
	assert_int_equal(tsrv_stop(&s, SIGKILL, 15000), 128 + SIGKILL);
	uint64_t t0 = tsrv_now_ms();
	ASSERT_CODE(tt_weight_check(c, &w, &st), FOS_CODE_UNAVAILABLE, st);
	uint64_t took = tsrv_now_ms() - t0;
	assert_true(took >= TIMEOUT - 100 && took < TIMEOUT + 1500); /* its own timeout, not 2-3x */
	/* releasing what fosd held for the connection does not wait for one */
	t0 = tsrv_now_ms();
	ASSERT_OK(fos_region_destroy(r, &st), st);
	ASSERT_CODE(fos_release(c, &ctx, &st), FOS_CODE_UNAVAILABLE, st);
	fos_close(c);
	assert_true(tsrv_now_ms() - t0 < 1000);
	tt_weight_free(&w);
	tsrv_cleanup(&s);
}

static void test_fork(void **state)
{
	(void)state;
	tsrv s;
	assert_int_equal(tsrv_start(&s, NULL), 0);
	tt_weight w;
	assert_int_equal(tt_weight_make(&w, "rc.fork", 128, 128, 128, 9), 0);
	fos_client *c = connect_reput(s.url, 10000, 0);
	fos_status st;
	ASSERT_OK(fos_channel_open(c, 0, 0, &st), st);
	fos_region *r;
	ASSERT_OK(fos_region_create(c, NULL, 1 << 20, FOS_REGION_MEMFD, &r, &st), st);
	ASSERT_OK(tt_weight_put(c, &w, 0, &st), st);
	assert_int_equal(fos_after_fork(), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* cmocka's asserts would longjmp into the parent's frames: exit codes */
		fos_status cs;
		fos_health_info hi;
		fos_client *c2 = NULL;
		int bad = 0;
		bad |= fos_after_fork() != 1;
		bad |= (fos_health(c, &hi, &cs) != FOS_CODE_FAILED_PRECONDITION || !strstr(cs.message, "forked")) << 1;
		bad |= (tt_weight_check(c, &w, &cs) != FOS_CODE_FAILED_PRECONDITION) << 2;
		bad |= (fos_connect(s.url, NULL, 1000, &c2, &cs) != FOS_CODE_FAILED_PRECONDITION || c2) << 3;
		bad |= (fos_region_destroy(r, &cs) != FOS_CODE_OK) << 4; /* the child's mapping only */
		fos_close(c);
		_exit(bad ? 10 + bad : 0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* the parent's channel and region are untouched */
	assert_true(fos_channel_bytes(c) > 0);
	ASSERT_OK(tt_weight_check(c, &w, &st), st);
	size_t bytes = (size_t)(w.m * w.k) * 2;
	memcpy(fos_region_data(r), w.x, bytes);
	fos_tensor x = fos_tensor_shm(r, 0, FOS_DTYPE_BF16, w.m, w.k), y = fos_tensor_out();
	ASSERT_OK(fos_forward(c, w.name, &x, NULL, NULL, &y, NULL, &st), st);
	assert_memory_equal(y.data, w.y, y.size);
	free(y.data);
	ASSERT_OK(fos_region_destroy(r, &st), st);
	fos_close(c);
	tt_weight_free(&w);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 15000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_channel_survives_kill),
		cmocka_unit_test(test_recompute_with_hook),
		cmocka_unit_test(test_gone_for_good),
		cmocka_unit_test(test_fork),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
