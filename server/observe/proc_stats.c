/* proc_stats.c: the process's CPU time (getrusage), memory and threads (/proc/self/statm and
 * /proc/self/stat), descriptors (/proc/self/fd and RLIMIT_NOFILE) and start time (the clock now,
 * less the time since the start tick of /proc/self/stat by /proc/uptime). A number that cannot be read is 0. */
#include "proc_stats.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Field n (1-based, as proc(5) numbers them) of /proc/self/stat; the command name (field 2) may
 * hold spaces and parentheses, so the count starts after its last ')'. */
static int stat_field(const char *stat, int n, unsigned long long *v)
{
	const char *p = strrchr(stat, ')');
	if (!p || n < 3)
		return -1;
	p++;
	for (int f = 3; f <= n; f++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return -1;
		if (f == n) {
			char *end;
			*v = strtoull(p, &end, 10);
			return end == p ? -1 : 0;
		}
		while (*p && *p != ' ')
			p++;
	}
	return -1;
}

static size_t read_small(const char *path, char *buf, size_t sz)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sz - 1, f);
	fclose(f);
	buf[n] = 0;
	return n;
}

void fosd_proc_stats_get(fosd_proc_stats *out)
{
	memset(out, 0, sizeof *out);
	struct rusage ru;
	if (!getrusage(RUSAGE_SELF, &ru)) {
		out->ok = 1;
		out->cpu_us = (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
			      (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
	}
	long page = sysconf(_SC_PAGESIZE), hz = sysconf(_SC_CLK_TCK);
	char buf[4096], sbuf[128];
	unsigned long long vm = 0, rss = 0;
	if (read_small("/proc/self/statm", buf, sizeof buf) && sscanf(buf, "%llu %llu", &vm, &rss) == 2 && page > 0) {
		out->ok = 1;
		out->vm_bytes = vm * (uint64_t)page;
		out->rss_bytes = rss * (uint64_t)page;
	}
	unsigned long long v;
	if (read_small("/proc/self/stat", buf, sizeof buf)) {
		if (!stat_field(buf, 20, &v))
			out->threads = v;
		unsigned long long start_ticks;
		double up;
		struct timespec now;
		if (!stat_field(buf, 22, &start_ticks) && hz > 0 && read_small("/proc/uptime", sbuf, sizeof sbuf) &&
		    sscanf(sbuf, "%lf", &up) == 1 && !clock_gettime(CLOCK_REALTIME, &now)) {
			/* now - (seconds since boot - the start's seconds since boot) */
			double age = up - (double)start_ticks / (double)hz;
			double start = (double)now.tv_sec + (double)now.tv_nsec / 1e9 - (age > 0 ? age : 0);
			out->start_time_us = start > 0 ? (uint64_t)(start * 1e6) : 0;
		}
	}
	DIR *d = opendir("/proc/self/fd");
	if (d) {
		uint64_t n = 0;
		struct dirent *e;
		while ((e = readdir(d)))
			n += e->d_name[0] != '.';
		closedir(d);
		out->open_fds = n > 0 ? n - 1 : 0; /* less the directory's own descriptor */
	}
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		out->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}
