/* log.h: fosd's leveled logging to stderr (one line per event, with a UTC timestamp). */
#ifndef FOSD_LOG_H
#define FOSD_LOG_H

enum fosd_log_level { FOSD_LOG_ERROR = 0, FOSD_LOG_WARN = 1, FOSD_LOG_INFO = 2, FOSD_LOG_DEBUG = 3 };

void fosd_log_set_level(int level);
int fosd_log_get_level(void);
/* "error", "warn", "info", "debug" -> level, or -1. */
int fosd_log_parse_level(const char *s);

void fosd_log(int level, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;

#define fosd_error(...) fosd_log(FOSD_LOG_ERROR, __VA_ARGS__)
#define fosd_warn(...) fosd_log(FOSD_LOG_WARN, __VA_ARGS__)
#define fosd_info(...) fosd_log(FOSD_LOG_INFO, __VA_ARGS__)
#define fosd_debug(...)                                                                                \
	do {                                                                                           \
		if (fosd_log_get_level() >= FOSD_LOG_DEBUG)                                            \
			fosd_log(FOSD_LOG_DEBUG, __VA_ARGS__);                                         \
	} while (0)

#endif
