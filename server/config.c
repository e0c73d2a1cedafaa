/* config.c: fosd's configuration: defaults, the key = value config file and the command line
 * flags. Every key of the file is also a flag (--cache-bytes for cache_bytes); flags win. A
 * duration is at most FOSD_DURATION_MAX_MS, so every `ms * 1000000` of fosd fits in 64 bits with
 * room for any monotonic clock value added to it. */
#include "config.h"
#include "http_metrics.h"
#include "log.h"
#include "trust_config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FOSD_VERSION
#define FOSD_VERSION "0.1.0"
#endif

void fosd_config_defaults(fosd_config *c)
{
	memset(c, 0, sizeof *c);
	snprintf(c->backend, sizeof c->backend, "auto");
	c->threads = 0;
	c->device = 0;
	c->workers = 2;
	c->concurrency = 64;
	c->cache_bytes = (uint64_t)8 << 30;
	c->context_bytes = (uint64_t)4 << 30;
	c->context_ttl_ms = 60 * 1000;
	c->max_message_bytes = (uint64_t)1 << 30;
	c->message_pool_bytes = (uint64_t)1 << 30;
	c->channel_spin_us = 50;
	c->drain_timeout_ms = 30 * 1000;
	c->sweep_interval_ms = 1000;
	c->dedup_window_ms = 10 * 60 * 1000;
	c->send_timeout_ms = 10 * 1000;
	c->connection_requests = 0;
	c->max_connections = 0;
	c->metrics_max_connections = 64;
	c->metrics_idle_timeout_ms = 10 * 1000;
	c->ipc_mode = 0600;
	c->log_level = FOSD_LOG_INFO;
}

static void config_clear_listen(fosd_config *c)
{
	for (int i = 0; i < c->n_listen; i++)
		free(c->listen[i]);
	c->n_listen = 0;
}

void fosd_config_free(fosd_config *c)
{
	config_clear_listen(c);
	free(c->config_path);
	c->config_path = NULL;
	free(c->metrics_listen);
	c->metrics_listen = NULL;
	if (c->fixed) /* it holds a hash of tls_key_password */
		explicit_bzero(c->fixed, strlen(c->fixed));
	free(c->fixed);
	c->fixed = NULL;
	fosd_trust_config_free(c);
}

int fosd_parse_size(const char *s, uint64_t *out)
{
	static const struct {
		const char *unit;
		int shift;
	} units[] = {
		{"", 0},   {"b", 0},   {"k", 10},  {"kb", 10}, {"kib", 10}, {"m", 20}, {"mb", 20}, {"mib", 20},
		{"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40}, {"tb", 40}, {"tib", 40},
	};
	char *end;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (!strcasecmp(end, units[i].unit)) {
			if (v > (UINT64_MAX >> units[i].shift))
				return -1;
			*out = (uint64_t)v << units[i].shift;
			return 0;
		}
	return -1;
}

int fosd_parse_duration_why(const char *s, uint64_t *out, const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	const char *p = s;
	if (*p == '-') {
		*why = "negative";
		return -1;
	}
	if (!isdigit((unsigned char)*p)) {
		*why = "not a decimal number";
		return -1;
	}
	/* the integer part, saturating above the maximum; the fraction to at most 9 digits */
	uint64_t ip = 0, frac = 0, fden = 1;
	for (; isdigit((unsigned char)*p); p++)
		if (ip <= FOSD_DURATION_MAX_MS)
			ip = ip * 10 + (uint64_t)(*p - '0');
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p)) {
			*why = "not a decimal number";
			return -1;
		}
		for (; isdigit((unsigned char)*p); p++)
			if (fden < 1000000000ull) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				fden *= 10;
			}
	}
	uint64_t mul;
	if (!*p || !strcmp(p, "s")) /* bare numbers are seconds */
		mul = 1000;
	else if (!strcmp(p, "ms"))
		mul = 1;
	else if (!strcmp(p, "m") || !strcmp(p, "min"))
		mul = 60000;
	else if (!strcmp(p, "h"))
		mul = 3600000;
	else {
		int word = 1;
		for (const char *q = p; *q; q++)
			word &= isalpha((unsigned char)*q) != 0;
		*why = word ? "its unit is not ms, s, m or h" : "not a decimal number";
		return -1;
	}
	/* frac * mul < 1e9 * 3.6e6: no overflow; rounded to the nearest millisecond */
	uint64_t fms = (frac * mul + fden / 2) / fden;
	if (ip > FOSD_DURATION_MAX_MS / mul || ip * mul + fms > FOSD_DURATION_MAX_MS) {
		*why = "longer than 24 days";
		return -1;
	}
	*out = ip * mul + fms;
	return 0;
}

int fosd_parse_duration_ms(const char *s, uint64_t *out)
{
	return fosd_parse_duration_why(s, out, NULL);
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

int fosd_config_set(fosd_config *c, const char *key, const char *v, char *msg, size_t msgsz)
{
	uint64_t u;
	if (!strcmp(key, "listen")) {
		if (c->n_listen >= FOSD_MAX_LISTEN) {
			snprintf(msg, msgsz, "at most %d listen URLs", FOSD_MAX_LISTEN);
			return -1;
		}
		if (!strstr(v, "://")) {
			snprintf(msg, msgsz, "listen: '%s' is not a URL (ipc:///path or tcp://host:port)", v);
			return -1;
		}
		char *d = strdup(v);
		if (!d) {
			snprintf(msg, msgsz, "out of memory");
			return -1;
		}
		c->listen[c->n_listen++] = d;
		return 0;
	}
	if (!strcmp(key, "backend")) {
		if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
			snprintf(msg, msgsz, "backend: '%s' is not auto, cpu or cuda", v);
			return -1;
		}
		snprintf(c->backend, sizeof c->backend, "%s", v);
		return 0;
	}
	struct {
		const char *key;
		int *dst;
		int lo, hi;
	} ints[] = {
		{"threads", &c->threads, 0, 4096},
		{"device", &c->device, 0, 64},
		{"workers", &c->workers, 1, 256},
		{"streams", &c->streams, 0, 64},
		{"concurrency", &c->concurrency, 1, 65536},
		{"channel_spin_us", &c->channel_spin_us, 0, 1000000},
		{"connection_requests", &c->connection_requests, 0, 65536},
		{"max_connections", &c->max_connections, 0, 1 << 20},
		{"metrics_max_connections", &c->metrics_max_connections, 1, 1 << 20},
	};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if (!strcmp(key, ints[i].key)) {
			if (parse_int(v, ints[i].lo, ints[i].hi, ints[i].dst)) {
				snprintf(msg, msgsz, "%s: '%s' is not an integer in [%d, %d]", key, v, ints[i].lo,
					 ints[i].hi);
				return -1;
			}
			return 0;
		}
	struct {
		const char *key;
		uint64_t *dst;
		int is_size;
	} nums[] = {
		{"cache_bytes", &c->cache_bytes, 1},	    {"context_bytes", &c->context_bytes, 1},
		{"max_message_bytes", &c->max_message_bytes, 1}, {"context_ttl", &c->context_ttl_ms, 0},
		{"message_pool_bytes", &c->message_pool_bytes, 1},
		{"drain_timeout", &c->drain_timeout_ms, 0},   {"sweep_interval", &c->sweep_interval_ms, 0},
		{"dedup_window", &c->dedup_window_ms, 0},
		{"send_timeout", &c->send_timeout_ms, 0},
		{"metrics_idle_timeout", &c->metrics_idle_timeout_ms, 0},
	};
	for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
		if (!strcmp(key, nums[i].key)) {
			const char *why;
			if (nums[i].is_size ? fosd_parse_size(v, &u) : fosd_parse_duration_why(v, &u, &why)) {
				if (nums[i].is_size)
					snprintf(msg, msgsz, "%s: '%.100s' is not a size (e.g. 512M, 8G)", key, v);
				else
					snprintf(msg, msgsz,
						 "%s: '%.100s' is not a duration: %s (e.g. 250ms, 30s, 5m, 1h; 0 to 24 days)",
						 key, v, why);
				return -1;
			}
			*nums[i].dst = u;
			return 0;
		}
	if (!strcmp(key, "ipc_mode")) {
		char *end;
		errno = 0;
		long m = strtol(v, &end, 8);
		if (errno || end == v || *end || m < 0 || m > 0777) {
			snprintf(msg, msgsz, "ipc_mode: '%s' is not an octal mode like 0600", v);
			return -1;
		}
		c->ipc_mode = (int)m;
		return 0;
	}
	if (!strcmp(key, "metrics_listen")) {
		char *d = NULL;
		/* "off" or empty: no endpoint (a flag can so turn off the file's setting) */
		if (*v && strcmp(v, "off")) {
			if (fosd_http_metrics_check_url(v, msg, msgsz))
				return -1;
			if (!(d = strdup(v))) {
				snprintf(msg, msgsz, "out of memory");
				return -1;
			}
		}
		free(c->metrics_listen);
		c->metrics_listen = d;
		return 0;
	}
	if (!strcmp(key, "log_level")) {
		int l = fosd_log_parse_level(v);
		if (l < 0) {
			snprintf(msg, msgsz, "log_level: '%s' is not error, warn, info or debug", v);
			return -1;
		}
		c->log_level = l;
		return 0;
	}
	int trust = fosd_trust_config_set(c, key, v, msg, msgsz);
	if (trust <= 0)
		return trust;
	snprintf(msg, msgsz, "unknown setting '%s'", key);
	return -1;
}

static int config_known_key(const char *key)
{
	static const char *const keys[] = {
		"listen",	 "backend",	   "threads",	     "device",	       "workers",
		"concurrency",	 "cache_bytes",	   "context_bytes",  "max_message_bytes", "context_ttl",
		"drain_timeout", "sweep_interval", "dedup_window",   "ipc_mode",	  "log_level",
		"tokens",	 "config",	   "streams",	     "message_pool_bytes", "metrics_listen",
		"channel_spin_us", "send_timeout", "connection_requests", "max_connections",
		"metrics_max_connections", "metrics_idle_timeout",
	};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!strcmp(key, keys[i]))
			return 1;
	return fosd_trust_config_known(key);
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	return s;
}

static const char *file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "directory";
	if (S_ISFIFO(m))
		return "FIFO";
	if (S_ISCHR(m))
		return "character device";
	if (S_ISBLK(m))
		return "block device";
	if (S_ISSOCK(m))
		return "socket";
	return "special file";
}

int fosd_open_regular(const char *path, size_t max, struct stat *sb, char *msg, size_t msgsz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, sb)) {
		snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(sb->st_mode)) {
		snprintf(msg, msgsz, "%s: not a regular file (a %s)", path, file_kind(sb->st_mode));
		close(fd);
		return -1;
	}
	if ((uint64_t)sb->st_size > (uint64_t)max) {
		snprintf(msg, msgsz, "%s: larger than %zu KiB (%lld bytes)", path, max >> 10, (long long)sb->st_size);
		close(fd);
		return -1;
	}
	return fd;
}

int fosd_config_load_file(fosd_config *c, const char *path, char *msg, size_t msgsz)
{
	struct stat sb;
	int fd = fosd_open_regular(path, FOSD_CONFIG_FILE_MAX, &sb, msg, msgsz);
	if (fd < 0)
		return -1;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	char *line = NULL, err[512];
	size_t cap = 0, total = 0;
	ssize_t len;
	int lineno = 0, rc = 0;
	/* whole lines, however long: a comment ends only at its newline */
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		total += (size_t)len;
		if (total > FOSD_CONFIG_FILE_MAX) { /* it grew since the fstat */
			snprintf(msg, msgsz, "%s: larger than %zu KiB", path, FOSD_CONFIG_FILE_MAX >> 10);
			rc = -1;
			break;
		}
		if (memchr(line, 0, (size_t)len)) {
			snprintf(msg, msgsz, "%s:%d: a NUL byte (the file is text)", path, lineno);
			rc = -1;
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(msg, msgsz, "%s:%d: expected 'key = value'", path, lineno);
			rc = -1;
			break;
		}
		*eq = 0;
		char *key = trim(s), *val = trim(eq + 1);
		for (char *p = key; *p; p++)
			if (*p == '-')
				*p = '_';
		if (fosd_config_set(c, key, val, err, sizeof err)) {
			snprintf(msg, msgsz, "%s:%d: %s", path, lineno, err);
			rc = -1;
			break;
		}
	}
	if (!rc && ferror(f)) {
		snprintf(msg, msgsz, "%s: read error: %s", path, strerror(errno));
		rc = -1;
	}
	if (line) /* it may have held tls_key_password */
		explicit_bzero(line, cap);
	free(line);
	fclose(f);
	return rc;
}

void fosd_config_usage(void *stream)
{
	fprintf((FILE *)stream,
		"usage: fosd [options]\n"
		"  --config FILE            read settings from FILE (key = value; flags win)\n"
		"  --listen URL             listen on URL (repeatable; default " FOSD_DEFAULT_URL ")\n"
		"  --backend auto|cpu|cuda  numerics backend (default auto: cuda if a GPU is usable)\n"
		"  --threads N              cpu backend threads (default 0 = one per CPU)\n"
		"  --device N               cuda device (default 0)\n"
		"  --workers N              executor threads (default 2)\n"
		"  --streams N              backend instances running requests at once, one stream each\n"
		"                           on cuda (default 0 = auto: 8 on cuda, 1 on cpu; a worker each)\n"
		"  --concurrency N          requests in progress at once (nng contexts, default 64)\n"
		"  --cache-bytes SIZE       weight cache budget (default 8G)\n"
		"  --context-bytes SIZE     saved-context budget (default 4G)\n"
		"  --context-ttl DUR        saved-context lifetime (default 60s)\n"
		"  --max-message-bytes SIZE largest request or reply (default 1G)\n"
		"  --message-pool-bytes SIZE freed message memory kept for reuse (default 1G)\n"
		"  --channel-spin-us N      a request channel polls this long for the next request before\n"
		"                           it sleeps; the most a client may ask (default 50; 0: never)\n"
		"  --drain-timeout DUR      SIGTERM/SIGINT: wait for in-flight requests (default 30s)\n"
		"  --sweep-interval DUR     context expiry sweep period (default 1s)\n"
		"  --dedup-window DUR       remember executed request ids (default 10m)\n"
		"  --send-timeout DUR       a reply the client does not read for this long drops its\n"
		"                           connection (default 10s)\n"
		"  --connection-requests N  most requests in progress from one connection; more get\n"
		"                           RESOURCE_EXHAUSTED (default 0 = a quarter of --concurrency)\n"
		"  --max-connections N      most client connections (default 0 = from the descriptor limit)\n"
		"  --metrics-max-connections N  most open HTTP endpoint connections (default 64)\n"
		"  --metrics-idle-timeout DUR   close an idle HTTP endpoint connection (default 10s)\n"
		"  --ipc-mode OCTAL         ipc socket permissions (default 0600)\n"
		"  --log-level LEVEL        error, warn, info (default) or debug\n"
		"  --metrics-listen URL     serve GET /metrics (Prometheus) and /healthz on http://HOST:PORT\n"
		"                           (port 0: any free one; default off; not loopback: a warning)\n");
	fosd_trust_config_usage(stream);
	fprintf((FILE *)stream,
		"  --help, --version\n"
		"DUR: a decimal number with ms, s, m or h (250ms, 1.5s, 5m; bare: seconds), 0 to 24 days.\n"
		"SIGHUP reloads: reads --config and the flags again, applies log_level and the tenant_* keys,\n"
		"rereads the tokens file (a removed tenant is refused from its next request on) and keeps\n"
		"cached weights and contexts; other keys wait for a restart; a bad file changes nothing.\n");
}

int fosd_config_parse_args(fosd_config *c, int argc, char **argv, char *msg, size_t msgsz)
{
	c->argc = argc;
	c->argv = argv;
	/* pass 1: --help, --version, --config */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fosd_config_usage(stdout);
			return 1;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("fosd %s\n", FOSD_VERSION);
			return 1;
		}
		const char *path = NULL;
		if (!strcmp(argv[i], "--config")) {
			if (i + 1 >= argc) {
				snprintf(msg, msgsz, "--config needs a file");
				return -1;
			}
			path = argv[i + 1];
		} else if (!strncmp(argv[i], "--config=", 9)) {
			path = argv[i] + 9;
		}
		if (path) {
			free(c->config_path);
			c->config_path = strdup(path);
			if (!c->config_path || fosd_config_load_file(c, path, msg, msgsz))
				return -1;
		}
	}
	/* pass 2: the other flags */
	int listen_from_flags = 0;
	char err[512];
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--", 2)) {
			snprintf(msg, msgsz, "unexpected argument '%s' (see --help)", a);
			return -1;
		}
		char key[64];
		const char *val;
		const char *eq = strchr(a, '=');
		size_t klen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (klen == 0 || klen >= sizeof key) {
			snprintf(msg, msgsz, "bad option '%s'", a);
			return -1;
		}
		memcpy(key, a + 2, klen);
		key[klen] = 0;
		for (char *p = key; *p; p++)
			if (*p == '-')
				*p = '_';
		if (!config_known_key(key)) {
			snprintf(msg, msgsz, "unknown option '%s' (see --help)", a);
			return -1;
		}
		if (eq) {
			val = eq + 1;
		} else if (fosd_trust_config_is_flag(key)) {
			val = "true"; /* a boolean flag takes no separate value */
		} else {
			if (i + 1 >= argc) {
				snprintf(msg, msgsz, "option '%s' needs a value", a);
				return -1;
			}
			val = argv[++i];
		}
		if (!strcmp(key, "config"))
			continue;
		if (!strcmp(key, "listen") && !listen_from_flags) {
			config_clear_listen(c);
			listen_from_flags = 1;
		}
		if (fosd_config_set(c, key, val, err, sizeof err)) {
			snprintf(msg, msgsz, "--%s: %s", a + 2, err);
			return -1;
		}
	}
	return 0;
}

/* FNV-1a of a secret setting: fixed shows whether it changed, never the value */
static unsigned long long config_hash(const char *s)
{
	unsigned long long h = 0xcbf29ce484222325ull;
	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return s ? h : 0;
}

/* c->fixed: one "key=value" line for each key a reload cannot change (malloc'd; NULL when out of
 * memory). */
static char *config_render_fixed(const fosd_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fputs("listen=", f);
	for (int i = 0; i < c->n_listen; i++)
		fprintf(f, "%s%s", i ? " " : "", c->listen[i]);
	fprintf(f, "\nbackend=%s\n", c->backend);
	const struct {
		const char *key;
		long long v;
	} ints[] = {
		{"threads", c->threads},
		{"device", c->device},
		{"workers", c->workers},
		{"streams", c->streams},
		{"concurrency", c->concurrency},
		{"cache_bytes", (long long)c->cache_bytes},
		{"context_bytes", (long long)c->context_bytes},
		{"context_ttl", (long long)c->context_ttl_ms},
		{"max_message_bytes", (long long)c->max_message_bytes},
		{"message_pool_bytes", (long long)c->message_pool_bytes},
		{"channel_spin_us", c->channel_spin_us},
		{"drain_timeout", (long long)c->drain_timeout_ms},
		{"sweep_interval", (long long)c->sweep_interval_ms},
		{"dedup_window", (long long)c->dedup_window_ms},
		{"send_timeout", (long long)c->send_timeout_ms},
		{"connection_requests", c->connection_requests},
		{"max_connections", c->max_connections},
		{"metrics_max_connections", c->metrics_max_connections},
		{"metrics_idle_timeout", (long long)c->metrics_idle_timeout_ms},
		{"ipc_mode", c->ipc_mode},
		{"allow_insecure_tcp", c->allow_insecure_tcp},
	};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		fprintf(f, "%s=%lld\n", ints[i].key, ints[i].v);
	const struct {
		const char *key, *v;
	} strs[] = {
		{"metrics_listen", c->metrics_listen},
		{"tokens", c->tokens_path},
		{"tls_cert", c->tls_cert},
		{"tls_key", c->tls_key},
	};
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
		fprintf(f, "%s=%s\n", strs[i].key, strs[i].v ? strs[i].v : "");
	fprintf(f, "tls_key_password=%llx\n", config_hash(c->tls_key_password));
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

int fosd_config_finish(fosd_config *c, char *msg, size_t msgsz)
{
	if (c->n_listen == 0 && fosd_config_set(c, "listen", FOSD_DEFAULT_URL, msg, msgsz))
		return -1;
	if (c->max_message_bytes < 4096) {
		snprintf(msg, msgsz, "max_message_bytes %llu is below the minimum of 4096",
			 (unsigned long long)c->max_message_bytes);
		return -1;
	}
	if (c->sweep_interval_ms == 0)
		c->sweep_interval_ms = 1000;
	if (fosd_trust_config_check(c, msg, msgsz))
		return -1;
	free(c->fixed);
	if (!(c->fixed = config_render_fixed(c))) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	return 0;
}

void fosd_config_fixed_diff(const fosd_config *a, const fosd_config *b, char *out, size_t outsz)
{
	size_t used = 0;
	out[0] = 0;
	const char *pa = a->fixed ? a->fixed : "", *pb = b->fixed ? b->fixed : "";
	/* both list the same keys in the same order, one line each */
	while (*pa && *pb) {
		const char *ea = strchr(pa, '\n'), *eb = strchr(pb, '\n');
		if (!ea || !eb)
			break;
		if (ea - pa != eb - pb || memcmp(pa, pb, (size_t)(ea - pa))) {
			const char *k = pa, *ke = memchr(pa, '=', (size_t)(ea - pa));
			int n = snprintf(out + used, outsz - used, "%s%.*s", used ? ", " : "", (int)(ke ? ke - k : ea - k), k);
			if (n < 0 || (size_t)n >= outsz - used)
				break;
			used += (size_t)n;
		}
		pa = ea + 1;
		pb = eb + 1;
	}
}
