/* log.c: fosd's leveled logging to stderr. A line is written with one write(2) so lines of
 * concurrent threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int fosd_log_level_v = FOSD_LOG_INFO;

void fosd_log_set_level(int level)
{
	atomic_store(&fosd_log_level_v, level);
}

int fosd_log_get_level(void)
{
	return atomic_load(&fosd_log_level_v);
}

int fosd_log_parse_level(const char *s)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

void fosd_log(int level, const char *fmt, ...)
{
	static const char *const tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
	if (level > atomic_load(&fosd_log_level_v))
		return;
	if (level < 0)
		level = 0;
	if (level > 3)
		level = 3;
	char line[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ fosd[%d] %s ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
			 (int)getpid(), tags[level]);
	if (n < 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof line - 2)
		len = sizeof line - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
