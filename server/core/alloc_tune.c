/* alloc_tune.c: the allocator settings of the data path. nng allocates a fresh message for every
 * request it receives and takes ownership of every reply it sends, so messages cannot be kept per
 * slot; what costs is glibc returning every large block to the kernel (mmap/munmap above 128 KiB
 * to 32 MiB) and faulting fresh zeroed pages in for the next message: 64 MiB requests moved at
 * 1.2 GB/s that way against 3.2 GB/s with a warm heap (H200 host, nng 1.5.2). fosd keeps large
 * blocks in the heap instead: the pages of one message are reused by the next. Once fosd is idle
 * (control.c), fosd_alloc_idle_trim gives the free pages back, so that a burst's peak does not
 * stay resident for good. */
#include "alloc_tune.h"
#include "log.h"
#include "proc_stats.h"

#include <malloc.h>
#include <stdlib.h>

void fosd_tune_malloc(void)
{
	const char *env = getenv("FOSD_MALLOC_DEFAULT");
	if (env && *env && *env != '0') {
		fosd_info("allocator: glibc defaults (FOSD_MALLOC_DEFAULT)");
		return;
	}
	/* no mmap'd chunks: large blocks come from the heap and go back to it */
	int ok = mallopt(M_MMAP_MAX, 0);
	/* keep up to 1 GiB of free heap top instead of trimming it after every large free */
	ok = ok && mallopt(M_TRIM_THRESHOLD, 1 << 30);
	ok = ok && mallopt(M_TOP_PAD, 64 << 20);
	if (!ok)
		fosd_warn("allocator: mallopt failed; using glibc defaults");
}

uint64_t fosd_alloc_idle_trim(void)
{
	fosd_proc_stats before, after;
	fosd_proc_stats_get(&before);
	malloc_trim(0); /* every arena: the top above the pad and the free pages inside */
	fosd_proc_stats_get(&after);
	return before.ok && after.ok && before.rss_bytes > after.rss_bytes ? before.rss_bytes - after.rss_bytes : 0;
}
