/* test_server_optable.c: the op table (server/requests/optable.h) against the protocol's list of operations
 * (proto/fos.proto's Request oneof, PROTOCOL.md): every op has one row with its name (the names
 * Stats and /metrics report), the Request case it answers, a handler, and the flags and size rules
 * PROTOCOL.md and the executor's head comment give it (which ops are answered at once, which run
 * beside others, which are answered while draining or without a token, which small ones run on the
 * receiving thread). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "optable.h"
#include "validate.h"
#include "fos.pb-c.h"

/* The protocol's operations in the order of the per-op metrics, with the Request case each
 * answers and its flags, written out from PROTOCOL.md. */
static const struct {
	int op;
	const char *name;
	int request_case;
	unsigned flags;
} want[] = {
	{FOSD_OP_HEALTH, "health", FOS__REQUEST__OP_HEALTH, FOSD_OPF_INLINE | FOSD_OPF_DRAINING | FOSD_OPF_NO_TOKEN},
	{FOSD_OP_STATS, "stats", FOS__REQUEST__OP_STATS, FOSD_OPF_INLINE | FOSD_OPF_DRAINING},
	{FOSD_OP_PUT_WEIGHT, "put_weight", FOS__REQUEST__OP_PUT_WEIGHT, 0},
	{FOSD_OP_DROP_WEIGHT, "drop_weight", FOS__REQUEST__OP_DROP_WEIGHT, 0},
	{FOSD_OP_LIST_WEIGHTS, "list_weights", FOS__REQUEST__OP_LIST_WEIGHTS, FOSD_OPF_INLINE},
	{FOSD_OP_FORWARD, "forward", FOS__REQUEST__OP_FORWARD, FOSD_OPF_BESIDE},
	{FOSD_OP_BACKWARD, "backward", FOS__REQUEST__OP_BACKWARD, 0},
	{FOSD_OP_RELEASE_CONTEXT, "release_context", FOS__REQUEST__OP_RELEASE_CONTEXT, 0},
	{FOSD_OP_QUANTIZE, "quantize", FOS__REQUEST__OP_QUANTIZE, FOSD_OPF_BESIDE},
	{FOSD_OP_DEQUANTIZE, "dequantize", FOS__REQUEST__OP_DEQUANTIZE, FOSD_OPF_BESIDE},
	{FOSD_OP_LINEAR, "linear", FOS__REQUEST__OP_LINEAR, FOSD_OPF_BESIDE},
	{FOSD_OP_REGISTER_REGION, "register_region", FOS__REQUEST__OP_REGISTER_REGION, 0},
	{FOSD_OP_UNREGISTER_REGION, "unregister_region", FOS__REQUEST__OP_UNREGISTER_REGION, 0},
	{FOSD_OP_LIST_REGIONS, "list_regions", FOS__REQUEST__OP_LIST_REGIONS, 0},
	{FOSD_OP_CLOSE_DEVICE_MEMORY, "close_device_memory", FOS__REQUEST__OP_CLOSE_DEVICE_MEMORY, 0},
};

static void test_rows(void **state)
{
	(void)state;
	assert_int_equal(sizeof want / sizeof want[0], FOSD_OP_INVALID);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const fosd_op_def *d = fosd_op_def_of(want[i].op);
		assert_int_equal(want[i].op, (int)i);
		assert_string_equal(d->name, want[i].name);
		assert_string_equal(fosd_op_name(want[i].op), want[i].name);
		assert_int_equal(d->request_case, want[i].request_case);
		assert_int_equal(fosd_op_of_case(want[i].request_case), want[i].op);
		assert_int_equal(d->flags, want[i].flags);
		assert_int_equal(fosd_op_flags(want[i].op), want[i].flags);
		assert_non_null(d->run);
		/* only requests with fields have a validator: Health, Stats, ListWeights have none to check
		 * here (ListWeights' page token is its handler's) */
		if (want[i].op == FOSD_OP_HEALTH || want[i].op == FOSD_OP_STATS || want[i].op == FOSD_OP_LIST_WEIGHTS)
			assert_null(d->validate);
		else
			assert_non_null(d->validate);
		/* an inline op never needs a lane: no side-by-side or small rules */
		if (d->flags & FOSD_OPF_INLINE)
			assert_true(!d->beside && !d->small && !(d->flags & FOSD_OPF_BESIDE));
	}
	/* no case, an unknown case, out-of-range ops */
	assert_int_equal(fosd_op_of_case(0), FOSD_OP_INVALID);
	assert_int_equal(fosd_op_of_case(12345), FOSD_OP_INVALID);
	assert_string_equal(fosd_op_name(FOSD_OP_INVALID), "invalid");
	assert_string_equal(fosd_op_name(-1), "?");
	assert_string_equal(fosd_op_name(FOSD_NUM_OPS), "?");
	assert_ptr_equal(fosd_op_def_of(999), fosd_op_def_of(FOSD_OP_INVALID));
	assert_null(fosd_op_def_of(FOSD_OP_INVALID)->run);
	assert_int_equal(fosd_op_flags(FOSD_OP_INVALID), 0);
}

/* Which requests run beside others, and which are small enough to run on the receiving thread:
 * inputs up to 2 MiB (a Dequantize's codes up to 512 KiB: its output is 4x), never a Forward that
 * saves a context, never a Linear (it quantizes its weight on every call). */
static void test_beside_and_small(void **state)
{
	(void)state;
	const size_t mib2 = (size_t)2 << 20;
	fosd_args a;
	memset(&a, 0, sizeof a);
	const fosd_op_def *fwd = fosd_op_def_of(FOSD_OP_FORWARD);
	a.u.fwd.x.len = mib2;
	assert_true(fosd_def_beside(fwd, &a));
	assert_true(fosd_def_small(fwd, &a));
	a.u.fwd.x.len = mib2 + 1;
	assert_true(fosd_def_beside(fwd, &a));
	assert_false(fosd_def_small(fwd, &a));
	a.u.fwd.x.len = 64;
	a.u.fwd.expect.len = mib2 + 1; /* a check's expected Y is compared on the CPU */
	assert_false(fosd_def_small(fwd, &a));
	a.u.fwd.expect.len = 0;
	a.u.fwd.save = 1;
	assert_false(fosd_def_beside(fwd, &a));
	assert_false(fosd_def_small(fwd, &a));

	memset(&a, 0, sizeof a);
	const fosd_op_def *q = fosd_op_def_of(FOSD_OP_QUANTIZE);
	a.u.quant.x.len = mib2;
	assert_true(fosd_def_beside(q, &a) && fosd_def_small(q, &a));
	a.u.quant.x.len = mib2 + 1;
	assert_true(fosd_def_beside(q, &a) && !fosd_def_small(q, &a));

	memset(&a, 0, sizeof a);
	const fosd_op_def *dq = fosd_op_def_of(FOSD_OP_DEQUANTIZE);
	a.u.deq.codes.len = mib2 / 4;
	assert_true(fosd_def_beside(dq, &a) && fosd_def_small(dq, &a));
	a.u.deq.codes.len = mib2 / 4 + 1;
	assert_false(fosd_def_small(dq, &a));

	memset(&a, 0, sizeof a);
	const fosd_op_def *lin = fosd_op_def_of(FOSD_OP_LINEAR);
	assert_true(fosd_def_beside(lin, &a));
	assert_false(fosd_def_small(lin, &a));

	/* everything else runs alone, and never at once */
	const int alone[] = {FOSD_OP_PUT_WEIGHT, FOSD_OP_DROP_WEIGHT, FOSD_OP_BACKWARD, FOSD_OP_RELEASE_CONTEXT,
			     FOSD_OP_REGISTER_REGION, FOSD_OP_UNREGISTER_REGION, FOSD_OP_LIST_REGIONS,
			     FOSD_OP_CLOSE_DEVICE_MEMORY};
	memset(&a, 0, sizeof a);
	for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++) {
		assert_false(fosd_def_beside(fosd_op_def_of(alone[i]), &a));
		assert_false(fosd_def_small(fosd_op_def_of(alone[i]), &a));
	}
}

/* The validator is reached through the row: a request with no operation, and one whose op fails
 * its row's validator, get the messages PROTOCOL.md's error table gives. */
static void test_validate_through_rows(void **state)
{
	(void)state;
	char msg[256];
	fosd_args a;
	Fos__Request rq = FOS__REQUEST__INIT;
	assert_int_equal(fosd_validate(&rq, NULL, 0, 1 << 20, &a, msg, sizeof msg), FOS__CODE__INVALID_ARGUMENT);
	assert_string_equal(msg, "the request names no operation (or one this fosd does not know)");
	assert_int_equal(a.op, FOSD_OP_INVALID);

	Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_HEALTH;
	rq.health = &h;
	assert_int_equal(fosd_validate(&rq, NULL, 0, 1 << 20, &a, msg, sizeof msg), 0);
	assert_int_equal(a.op, FOSD_OP_HEALTH);

	Fos__DropWeightRequest dw = FOS__DROP_WEIGHT_REQUEST__INIT;
	dw.name = (char *)"bad name";
	rq.op_case = FOS__REQUEST__OP_DROP_WEIGHT;
	rq.drop_weight = &dw;
	assert_int_equal(fosd_validate(&rq, NULL, 0, 1 << 20, &a, msg, sizeof msg), FOS__CODE__INVALID_ARGUMENT);
	assert_string_equal(msg, "weight name has a byte 0x20 at 3 outside [A-Za-z0-9._:/-]");
	dw.name = (char *)"w.0";
	assert_int_equal(fosd_validate(&rq, NULL, 0, 1 << 20, &a, msg, sizeof msg), 0);
	assert_int_equal(a.op, FOSD_OP_DROP_WEIGHT);
	assert_string_equal(a.u.drop_name, "w.0");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_beside_and_small),
		cmocka_unit_test(test_validate_through_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
