/* support_assert.h: the assertion the daemon tests share: a libfos call must return FOS_CODE_OK,
 * else the test fails with the call, the status name and fosd's message. Include after cmocka.h
 * and fos.h. */
#ifndef FOS_SUPPORT_ASSERT_H
#define FOS_SUPPORT_ASSERT_H

#define ASSERT_OK(expr, st)                                                                                     \
	do {                                                                                                     \
		int rc_ = (expr);                                                                                \
		if (rc_ != FOS_CODE_OK)                                                                          \
			fail_msg("%s -> %s: %s", #expr, fos_code_name(rc_), (st).message);                       \
	} while (0)

#endif
