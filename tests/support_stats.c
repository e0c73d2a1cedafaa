/* support_stats.c: named Stats counters for the daemon tests (support_stats.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "support_assert.h"
#include "support_stats.h"

static uint64_t stat_read(fos_client *c, const char *name, int need)
{
	fos_stats_snapshot *s;
	fos_status st;
	ASSERT_OK(fos_stats_take(c, &s, &st), st);
	uint64_t v = 0;
	int rc = fos_stats_get(s, name, &v);
	fos_stats_free(s);
	if (rc && need)
		fail_msg("Stats has no %s", name);
	return rc ? 0 : v;
}

uint64_t tstat(fos_client *c, const char *name)
{
	return stat_read(c, name, 1);
}

uint64_t tstat_or0(fos_client *c, const char *name)
{
	return stat_read(c, name, 0);
}
