/* support_assert.h: the assertions the daemon tests share: a libfos call must return FOS_CODE_OK
 * (ASSERT_OK) or a given code (ASSERT_CODE), else the test fails with the call, the status names
 * and fosd's message. Include after cmocka.h and fos.h. */
#ifndef FOS_SUPPORT_ASSERT_H
#define FOS_SUPPORT_ASSERT_H

#define ASSERT_OK(expr, st)                                                                                     \
	do {                                                                                                     \
		int rc_ = (expr);                                                                                \
		if (rc_ != FOS_CODE_OK)                                                                          \
			fail_msg("%s -> %s: %s", #expr, fos_code_name(rc_), (st).message);                       \
	} while (0)

#define ASSERT_CODE(expr, code, st)                                                                             \
	do {                                                                                                     \
		int rc_ = (expr);                                                                                \
		if (rc_ != (code))                                                                               \
			fail_msg("%s -> %s (%s), expected %s", #expr, fos_code_name(rc_), (st).message,         \
				 fos_code_name(code));                                                            \
	} while (0)

#endif
