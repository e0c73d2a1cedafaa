/* test_msg_pool.c: server/transport/msg_pool.c, the pool of nng's large message bodies, through nng's own
 * message API (the test links the same --wrap flags as fosd): large bodies are reused, small ones
 * are not the pool's, the free bytes kept follow the setting, a pin hook pins each buffer once and
 * every pinned buffer is unpinned exactly once, a failing pin leaves a usable buffer, and messages
 * keep their bytes across an nng round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "msg_pool.h"

static int g_pins, g_unpins, g_fail;
static void *g_last_pinned;

static int fake_pin(void *p, size_t n, char *msg, size_t msgsz)
{
	(void)n;
	if (g_fail) {
		snprintf(msg, msgsz, "refused");
		return -1;
	}
	g_pins++;
	g_last_pinned = p;
	return 0;
}

static void fake_unpin(void *p)
{
	(void)p;
	g_unpins++;
}

static const fosd_pin_hook g_hook = {"fake", fake_pin, fake_unpin};

static fosd_msgpool_stats st(void)
{
	fosd_msgpool_stats s;
	fosd_msgpool_get_stats(&s);
	return s;
}

static void reset(void)
{
	fosd_msgpool_unpin_all(); /* drops every free buffer */
	fosd_msgpool_set_keep(FOSD_MSGPOOL_KEEP);
	g_pins = g_unpins = g_fail = 0;
}

static void test_reuse(void **state)
{
	(void)state;
	reset();
	fosd_msgpool_stats a = st();
	nng_msg *m;
	assert_int_equal(nng_msg_alloc(&m, (size_t)4 << 20), 0);
	void *body = nng_msg_body(m);
	memset(body, 0xA5, (size_t)4 << 20);
	fosd_msgpool_stats b = st();
	assert_int_equal(b.taken, a.taken + 1);
	assert_true(b.bytes_used >= a.bytes_used + ((uint64_t)4 << 20));
	nng_msg_free(m);
	fosd_msgpool_stats c = st();
	assert_int_equal(c.bytes_used, a.bytes_used);
	assert_true(c.bytes_free >= (uint64_t)4 << 20);
	/* the same size again, and a slightly smaller one: the same buffer, not a new mapping */
	assert_int_equal(nng_msg_alloc(&m, ((size_t)4 << 20) - 1000), 0);
	fosd_msgpool_stats d = st();
	assert_int_equal(d.reused, c.reused + 1);
	assert_int_equal(d.mapped_new, c.mapped_new);
	assert_int_equal(nng_msg_len(m), ((size_t)4 << 20) - 1000);
	nng_msg_free(m);
	/* a buffer more than twice the size asked is not handed out: a new one is mapped */
	assert_int_equal(nng_msg_alloc(&m, (size_t)3 << 19), 0); /* 1.5 MiB against 4 MiB free */
	fosd_msgpool_stats e = st();
	assert_int_equal(e.mapped_new, d.mapped_new + 1);
	nng_msg_free(m);
}

static void test_small_not_pooled(void **state)
{
	(void)state;
	reset();
	fosd_msgpool_stats a = st();
	nng_msg *m;
	assert_int_equal(nng_msg_alloc(&m, FOSD_MSGPOOL_MIN / 2), 0);
	nng_msg_free(m);
	assert_int_equal(st().taken, a.taken);
}

static void test_keep_limit(void **state)
{
	(void)state;
	reset();
	fosd_msgpool_set_keep((uint64_t)6 << 20);
	nng_msg *m[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(nng_msg_alloc(&m[i], (size_t)4 << 20), 0);
	for (int i = 0; i < 3; i++)
		nng_msg_free(m[i]);
	fosd_msgpool_stats s = st();
	assert_true(s.bytes_free <= (uint64_t)6 << 20);
	assert_true(s.bytes_free >= (uint64_t)4 << 20); /* the most recently freed stays */
	fosd_msgpool_set_keep(0);
	assert_int_equal(nng_msg_alloc(&m[0], (size_t)4 << 20), 0);
	nng_msg_free(m[0]);
	assert_int_equal(st().bytes_free, 0);
}

static void test_pin_hook(void **state)
{
	(void)state;
	reset();
	nng_msg *kept;
	assert_int_equal(nng_msg_alloc(&kept, (size_t)2 << 20), 0); /* unpinned: taken before the hook */
	fosd_msgpool_set_pin(&g_hook);
	nng_msg *m;
	assert_int_equal(nng_msg_alloc(&m, (size_t)8 << 20), 0);
	assert_int_equal(g_pins, 1);
	assert_ptr_equal(g_last_pinned, nng_msg_body(m));
	nng_msg_free(m);
	assert_int_equal(nng_msg_alloc(&m, (size_t)8 << 20), 0); /* reused: not pinned twice */
	assert_int_equal(g_pins, 1);
	assert_true(st().bytes_pinned >= (uint64_t)8 << 20);
	nng_msg_free(kept); /* freed while a hook is set: pinned when reused */
	assert_int_equal(nng_msg_alloc(&kept, (size_t)2 << 20), 0);
	assert_int_equal(g_pins, 2);
	nng_msg_free(kept);
	/* the hook goes: every free buffer is unpinned now, the one in use when it is freed */
	fosd_msgpool_unpin_all();
	assert_int_equal(g_unpins, 1);
	nng_msg_free(m);
	assert_int_equal(g_unpins, 2);
	fosd_msgpool_stats s = st();
	assert_int_equal(s.bytes_pinned, 0);
	assert_int_equal(s.bytes_free, 0);
	/* a refused pin: the buffer is still handed out and works */
	fosd_msgpool_set_pin(&g_hook);
	g_fail = 1;
	uint64_t failures = st().pin_failures;
	assert_int_equal(nng_msg_alloc(&m, (size_t)2 << 20), 0);
	assert_int_equal(st().pin_failures, failures + 1);
	memset(nng_msg_body(m), 1, (size_t)2 << 20);
	nng_msg_free(m);
	reset();
}

/* A 5 MiB body through nng (pair over inproc): the same bytes arrive, the receiver's body comes
 * from the pool too, and both buffers go back to it. */
static void test_round_trip(void **state)
{
	(void)state;
	reset();
	nng_socket a, b;
	assert_int_equal(nng_pair1_open(&a), 0);
	assert_int_equal(nng_pair1_open(&b), 0);
	assert_int_equal(nng_listen(a, "inproc://msgpool", NULL, 0), 0);
	assert_int_equal(nng_dial(b, "inproc://msgpool", NULL, 0), 0);
	size_t n = (size_t)5 << 20;
	nng_msg *m;
	assert_int_equal(nng_msg_alloc(&m, n), 0);
	uint8_t *p = nng_msg_body(m);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131u + (i >> 12));
	assert_int_equal(nng_sendmsg(b, m, 0), 0);
	nng_msg *r;
	assert_int_equal(nng_recvmsg(a, &r, 0), 0);
	assert_int_equal(nng_msg_len(r), n);
	const uint8_t *q = nng_msg_body(r);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += q[i] != (uint8_t)(i * 131u + (i >> 12));
	assert_int_equal(bad, 0);
	nng_msg_free(r);
	nng_close(a);
	nng_close(b);
	assert_int_equal(st().bytes_used, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse),	   cmocka_unit_test(test_small_not_pooled),
		cmocka_unit_test(test_keep_limit), cmocka_unit_test(test_pin_hook),
		cmocka_unit_test(test_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
