/* config.c: fosd's configuration: defaults, the key = value config file and the command line
 * flags. Every key of the file is also a flag (--cache-bytes for cache_bytes); flags win. */
#include "config.h"
#include "http_metrics.h"
#include "log.h"
#include "trust_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

int fosd_parse_duration_ms(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return -1;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	double mul = 1000.0; /* bare numbers are seconds */
	if (!strcmp(end, "ms"))
		mul = 1.0;
	else if (!strcmp(end, "s") || !*end)
		mul = 1000.0;
	else if (!strcmp(end, "m") || !strcmp(end, "min"))
		mul = 60000.0;
	else if (!strcmp(end, "h"))
		mul = 3600000.0;
	else
		return -1;
	double ms = v * mul;
	if (ms > 1e15)
		return -1;
	*out = (uint64_t)(ms + 0.5);
	return 0;
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
			int bad = nums[i].is_size ? fosd_parse_size(v, &u) : fosd_parse_duration_ms(v, &u);
			if (bad) {
				snprintf(msg, msgsz, "%s: '%s' is not a %s", key, v,
					 nums[i].is_size ? "size (e.g. 512M, 8G)" : "duration (e.g. 250ms, 30s, 5m)");
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

int fosd_config_load_file(fosd_config *c, const char *path, char *msg, size_t msgsz)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
		return -1;
	}
	char line[4096], err[512];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
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
		snprintf(msg, msgsz, "%s: read error", path);
		rc = -1;
	}
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
	fprintf((FILE *)stream, "  --help, --version\n");
}

int fosd_config_parse_args(fosd_config *c, int argc, char **argv, char *msg, size_t msgsz)
{
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
	return fosd_trust_config_check(c, msg, msgsz);
}
