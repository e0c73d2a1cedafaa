/* support_stats.h: one named counter of fosd's Stats (fos_stats_take, a fresh snapshot per read)
 * for the daemon tests. A failed Stats request fails the test (cmocka); include after cmocka.h. */
#ifndef FOS_SUPPORT_STATS_H
#define FOS_SUPPORT_STATS_H

#include <stdint.h>

#include "fos.h"

/* The counter name; the test fails when Stats has no counter of that name. */
uint64_t tstat(fos_client *c, const char *name);
/* The counter name, 0 when Stats has none of that name (one a fosd lists only once it moved). */
uint64_t tstat_or0(fos_client *c, const char *name);

#endif
