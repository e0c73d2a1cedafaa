/* cli_common.c: how fos reports errors (one "fos: ..." line on stderr) and the placeholder for the
 * daemon path, which a later change replaces with libfos calls. */
#include "cli.h"

#include <stdarg.h>
#include <string.h>

int cli_errf(fos_err *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
		err->rc = FOS_EINVAL;
	}
	return FOS_EINVAL;
}

static int cli_errf_rc(fos_err *err, int rc, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

static int cli_errf_rc(fos_err *err, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	err->rc = rc;
	return rc;
}

int cli_err_prefix(fos_err *err, const char *prefix)
{
	char tmp[sizeof err->msg];
	memcpy(tmp, err->msg, sizeof tmp);
	tmp[sizeof tmp - 1] = 0;
	int rc = err->rc ? err->rc : FOS_EINVAL;
	return cli_errf_rc(err, rc, "%s: %s", prefix, tmp);
}

int cli_report(const fos_err *err, int code)
{
	char line[sizeof err->msg];
	memcpy(line, err->msg, sizeof line);
	line[sizeof line - 1] = 0;
	if (!line[0])
		snprintf(line, sizeof line, "failed (error %d)", err->rc);
	for (char *p = line; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	fprintf(stderr, "fos: %s\n", line);
	return code;
}

int cli_fail(int code, const char *fmt, ...)
{
	fos_err e = {FOS_EINVAL, ""};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof e.msg, fmt, ap);
	va_end(ap);
	return cli_report(&e, code);
}

int cli_remote_unavailable(const cli_global *g, const char *cmd, fos_err *err)
{
	cli_errf(err, "%s: the daemon path (%s) is not available in this build yet; add --local to compute in "
		      "this process",
		 cmd, g && g->server ? g->server : CLI_DEFAULT_SERVER);
	return CLI_EXIT_USAGE;
}
