/* cli_common.c: how fos reports errors (one "fos: ..." line on stderr), its success summaries (one
 * line, or with --json one object naming the files written; nothing with --quiet), and the
 * parsers of numeric option values (whole numbers, numbers, durations). */
#include "cli.h"
#include "fos_duration.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
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

int cli_err_prefix(fos_err *err, const char *prefix)
{
	char tmp[sizeof err->msg];
	memcpy(tmp, err->msg, sizeof tmp);
	tmp[sizeof tmp - 1] = 0;
	int rc = err->rc ? err->rc : FOS_EINVAL;
	return fos_seterr(err, rc, "%s: %s", prefix, tmp);
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

void cli_summary(const cli_global *g, const char *fmt, ...)
{
	if (g->quiet || g->json)
		return;
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

const char *cli_where(const cli_global *g, int local, const char *backend, char *buf, size_t cap)
{
	if (local)
		snprintf(buf, cap, "here (--local, backend %s)", backend ? backend : "auto");
	else
		snprintf(buf, cap, "fosd at %s", g->server);
	return buf;
}

void cli_json_begin(cli_jw *w, const cli_global *g, const char *command, int local, const char *backend)
{
	cli_jw_init(w, stdout, 1);
	cli_jw_obj(w, NULL);
	cli_jw_str(w, "command", command);
	cli_jw_str(w, "where", local ? "local" : "fosd");
	if (local)
		cli_jw_str(w, "backend", backend ? backend : "auto");
	else
		cli_jw_str(w, "server", g->server);
}

void cli_jw_shape(cli_jw *w, const char *key, int ndim, const int64_t *shape)
{
	cli_jw_arr(w, key);
	for (int i = 0; i < ndim; i++)
		cli_jw_i64(w, NULL, shape[i]);
	cli_jw_end(w, ']');
}

void cli_json_outputs_begin(cli_jw *w)
{
	cli_jw_obj(w, "outputs");
}

void cli_json_output(cli_jw *w, const char *name, const char *dir, const char *file, const char *dtype, int ndim,
		     const int64_t *shape)
{
	cli_jw_obj(w, name);
	if (dir) {
		size_t n = strlen(dir) + strlen(file) + 2;
		char *path = malloc(n);
		if (path)
			snprintf(path, n, "%s/%s", dir, file);
		cli_jw_str(w, "path", path ? path : file);
		free(path);
	} else {
		cli_jw_str(w, "path", file);
	}
	cli_jw_str(w, "dtype", dtype);
	cli_jw_shape(w, "shape", ndim, shape);
	cli_jw_end(w, '}');
}

void cli_json_outputs_end(cli_jw *w)
{
	cli_jw_end(w, '}');
	cli_jw_end(w, '}');
}

int cli_flush_stdout(const char *cmd)
{
	return fflush(stdout) || ferror(stdout) ? cli_fail(CLI_EXIT_FAIL, "%s: cannot write to stdout", cmd)
					       : CLI_EXIT_OK;
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

int cli_parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, fos_err *err)
{
	if (!s || !*s)
		return cli_errf(err, "%s needs a number", flag);
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return cli_errf(err, "bad value '%s' for %s (expected a whole number from %llu to %llu)", s, flag,
					(unsigned long long)lo, (unsigned long long)hi);
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return cli_errf(err, "bad value '%s' for %s (too large; at most %llu)", s, flag,
					(unsigned long long)hi);
		v = v * 10 + d;
	}
	if (v < lo || v > hi)
		return cli_errf(err, "bad value '%s' for %s (expected a whole number from %llu to %llu)", s, flag,
				(unsigned long long)lo, (unsigned long long)hi);
	*out = v;
	return FOS_OK;
}

int cli_parse_double(const char *flag, const char *s, double *out, fos_err *err)
{
	char *end;
	errno = 0;
	double v = s && *s ? strtod(s, &end) : 0;
	if (!s || !*s || *end || errno || !isfinite(v))
		return cli_errf(err, "bad value '%s' for %s (expected a number)", s ? s : "", flag);
	*out = v;
	return FOS_OK;
}

int cli_parse_duration(const char *flag, const char *s, uint64_t *ns, fos_err *err)
{
	const char *why = "zero"; /* proto/fos_duration.c: fosd's config reads durations the same way */
	if (fos_parse_duration(s, 1, ns, &why) || !*ns)
		return cli_errf(err, "bad value '%s' for %s: %s (expected a positive duration like 10s, 500ms, 2m)",
				s ? s : "", flag, why);
	return FOS_OK;
}

char *cli_human_bytes(uint64_t b, char *buf, size_t cap)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	int u = 0;
	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%llu B", (unsigned long long)b);
	else
		snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}
