/* config_size.c: the sizes of the keys left at "auto" (cache_bytes, context_bytes,
 * message_pool_bytes) from the memory fosd works in: the host's (physical memory or the cgroup's
 * limit, the lower) and the GPU's. Invariant: a value set in the file or by a flag is never
 * changed here. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A whole number from the first line of path; 0 when it cannot be read or is no number ("max"). */
static uint64_t read_u64_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	unsigned long long v = 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

uint64_t fosd_host_memory_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	/* a container's limit: cgroup v2, else v1 (which reports "no limit" as a huge number) */
	uint64_t lim = read_u64_file("/sys/fs/cgroup/memory.max");
	if (!lim)
		lim = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
	if (lim && (!phys || lim < phys))
		return lim;
	return phys ? phys : (uint64_t)8 << 30;
}

static void size_line(char *msg, size_t msgsz, size_t *used, const char *key, uint64_t v, const char *from)
{
	if (*used >= msgsz)
		return;
	int w = v >= (1ull << 30) ? snprintf(msg + *used, msgsz - *used, "%s%s %.1f GiB (%s)", *used ? ", " : "", key,
					     (double)v / (double)(1ull << 30), from)
				  : snprintf(msg + *used, msgsz - *used, "%s%s %llu MiB (%s)", *used ? ", " : "", key,
					     (unsigned long long)(v >> 20), from);
	if (w > 0)
		*used += (size_t)w;
}

void fosd_config_size_auto(fosd_config *c, uint64_t dev_bytes, uint64_t host_bytes, char *msg, size_t msgsz)
{
	if (c->cache_bytes == FOSD_SIZE_AUTO)
		c->auto_sized |= FOSD_AUTO_CACHE;
	if (c->context_bytes == FOSD_SIZE_AUTO)
		c->auto_sized |= FOSD_AUTO_CONTEXTS;
	if (c->message_pool_bytes == FOSD_SIZE_AUTO)
		c->auto_sized |= FOSD_AUTO_POOL;
	const char *mem = dev_bytes ? "GPU memory" : "host memory";
	uint64_t base = dev_bytes ? dev_bytes : host_bytes;
	char from[64];
	size_t used = 0;
	if (msgsz)
		msg[0] = 0;
	if (c->auto_sized & FOSD_AUTO_CACHE) {
		c->cache_bytes = dev_bytes ? base / 10 * 4 : base / 4;
		snprintf(from, sizeof from, "auto: %s of %.1f GiB %s", dev_bytes ? "40%" : "25%",
			 (double)base / (double)(1ull << 30), mem);
		size_line(msg, msgsz, &used, "cache", c->cache_bytes, from);
	} else {
		size_line(msg, msgsz, &used, "cache", c->cache_bytes, "set");
	}
	if (c->auto_sized & FOSD_AUTO_CONTEXTS) {
		c->context_bytes = dev_bytes ? base / 5 : base / 8;
		snprintf(from, sizeof from, "auto: %s of %s", dev_bytes ? "20%" : "12.5%", mem);
		size_line(msg, msgsz, &used, "contexts", c->context_bytes, from);
	} else {
		size_line(msg, msgsz, &used, "contexts", c->context_bytes, "set");
	}
	if (c->auto_sized & FOSD_AUTO_POOL) {
		uint64_t p = host_bytes / 16, lo = (uint64_t)64 << 20, hi = (uint64_t)4 << 30;
		c->message_pool_bytes = p < lo ? lo : p > hi ? hi : p;
		size_line(msg, msgsz, &used, "message pool", c->message_pool_bytes, "auto: 1/16 of host memory, 64M to 4G");
	} else {
		size_line(msg, msgsz, &used, "message pool", c->message_pool_bytes, "set");
	}
}
