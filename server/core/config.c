/* config.c: fosd's configuration: the key table (fosd_config_keys) and what comes from it: the
 * defaults, one key's value from a string, the key = value config file, the reload list and the
 * record of the keys a reload cannot change (the command line and `fosd --help`: config_args.c;
 * the auto sizes: config_size.c). Every key of the file is also a flag
 * (--cache-bytes for cache_bytes); flags win. Invariants: a value that does not parse leaves the
 * configuration unchanged; a duration is at most FOSD_DURATION_MAX_MS, so every `ms * 1000000` of
 * fosd fits in 64 bits with room for any monotonic clock value added to it. */
#include "config.h"
#include "log.h"
#include "regfile.h"
#include "trust_config.h"

#include <nng/nng.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- the key table ----------------------------------------------------------------------------
 * One row per setting, in the order of `fosd --help`. Adding a setting: a field in fosd_config
 * (config.h), one row here, and a `#key = default` line in deploy/fosd.conf.example. */

#define F(f) offsetof(fosd_config, f), sizeof(((fosd_config *)0)->f)

static int listen_check(const char *v, char *msg, size_t msgsz);
static int devices_check(const char *v, char *msg, size_t msgsz);
static void log_level_reloaded(const fosd_config *cur, const fosd_config *nc);

static const char *const backends[] = {"auto", "cpu", "cuda", NULL};
static const char *const levels[] = {"error", "warn", "info", "debug", NULL}; /* enum fosd_log_level */

const fosd_config_key fosd_config_keys[] = {
	{"config", FOSD_CT_STRING, F(config_path), NULL, .flags = FOSD_CK_FLAG_ONLY, .arg = "FILE",
	 .help = "read settings from FILE (key = value; flags win)"},
	{"check_config", FOSD_CT_BOOL, F(check_config), "false", .flags = FOSD_CK_FLAG_ONLY,
	 .help = "parse the configuration (file, flags, tokens file, TLS files), open\n"
		 "nothing, print the first error or the warnings; exit 0 or 1"},
	{"listen", FOSD_CT_LIST, F(listen), FOSD_DEFAULT_URL, .hi = FOSD_MAX_LISTEN, .check = listen_check,
	 .help = "listen on URL (repeatable; default {def})"},
	{"backend", FOSD_CT_ENUM, F(backend), "auto", .choices = backends,
	 .help = "numerics backend (default {def}: cuda if a GPU is usable)"},
	{"threads", FOSD_CT_INT, F(threads), "0", 0, 4096, .help = "cpu backend threads (default {def} = one per CPU)"},
	{"device", FOSD_CT_INT, F(device), "0", 0, 64, .help = "cuda device (default {def})"},
	{"devices", FOSD_CT_STRING, F(devices), NULL, .arg = "LIST", .check = devices_check,
	 .help = "serve several devices: all, or ordinals like 0,1 (default: the one\n"
		 "--device); on the cpu backend, that many cpu stand-ins"},
	{"workers", FOSD_CT_INT, F(workers), "2", 1, 256, .help = "executor threads (default {def})"},
	{"streams", FOSD_CT_INT, F(streams), "0", 0, 64,
	 .help = "backend instances running requests at once, one stream each\n"
		 "on cuda (default {def} = auto: 8 on cuda, 1 on cpu; a worker each)"},
	{"concurrency", FOSD_CT_INT, F(concurrency), "64", 1, 65536,
	 .help = "requests in progress at once (nng contexts, default {def})"},
	{"cache_bytes", FOSD_CT_SIZE, F(cache_bytes), "auto",
	 .help = "weight cache budget (default {def}: 40% of the GPU's memory,\n"
		 "25% of the host's on cpu)"},
	{"context_bytes", FOSD_CT_SIZE, F(context_bytes), "auto",
	 .help = "saved-context budget (default {def}: 20% of the GPU's\n"
		 "memory, 12.5% of the host's on cpu)"},
	{"context_ttl", FOSD_CT_DURATION, F(context_ttl_ms), "60s", .help = "saved-context lifetime (default {def})"},
	{"max_message_bytes", FOSD_CT_SIZE, F(max_message_bytes), "1G",
	 .help = "largest request or reply (default {def})"},
	{"message_pool_bytes", FOSD_CT_SIZE, F(message_pool_bytes), "auto",
	 .help = "freed message memory kept for reuse (default {def}: 1/16 of\n"
		 "the host's memory, 64M to 4G)"},
	{"channel_spin_us", FOSD_CT_INT, F(channel_spin_us), "50", 0, 1000000,
	 .help = "a request channel polls this long for the next request before\n"
		 "it sleeps; the most a client may ask (default {def}; 0: never)"},
	{"drain_timeout", FOSD_CT_DURATION, F(drain_timeout_ms), "30s",
	 .help = "SIGTERM/SIGINT: wait for in-flight requests (default {def})"},
	{"sweep_interval", FOSD_CT_DURATION, F(sweep_interval_ms), "1s",
	 .help = "context expiry sweep period (default {def})"},
	{"dedup_window", FOSD_CT_DURATION, F(dedup_window_ms), "10m",
	 .help = "remember executed request ids (default {def})"},
	{"dedup_bytes", FOSD_CT_SIZE, F(dedup_bytes), "4M",
	 .help = "memory of the executed request ids: at most this / 64 ids,\n"
		 "the oldest forgotten first (default {def}: 65536 ids; at least 64K)"},
	{"send_timeout", FOSD_CT_DURATION, F(send_timeout_ms), "10s",
	 .help = "a reply the client does not read for this long drops its\nconnection (default {def})"},
	{"connection_requests", FOSD_CT_INT, F(connection_requests), "0", 0, 65536,
	 .help = "most requests in progress from one connection; more get\n"
		 "RESOURCE_EXHAUSTED (default {def} = a quarter of --concurrency)"},
	{"max_connections", FOSD_CT_INT, F(max_connections), "0", 0, 1 << 20,
	 .help = "most client connections (default {def} = from the descriptor limit)"},
	{"metrics_max_connections", FOSD_CT_INT, F(metrics_max_connections), "64", 1, 1 << 20,
	 .help = "most open HTTP endpoint connections (default {def})"},
	{"metrics_idle_timeout", FOSD_CT_DURATION, F(metrics_idle_timeout_ms), "10s",
	 .help = "close an idle HTTP endpoint connection (default {def})"},
	{"ipc_mode", FOSD_CT_OCTAL, F(ipc_mode), "0600", 0, 0777, .help = "ipc socket permissions (default {def})"},
	{"log_level", FOSD_CT_ENUM, F(log_level), "info", .flags = FOSD_CK_RELOAD, .choices = levels,
	 .arg = "LEVEL", .on_reload = log_level_reloaded, .help = "error, warn, info (default) or debug"},
	{"metrics_listen", FOSD_CT_URL, F(metrics_listen), FOSD_DEFAULT_METRICS_URL,
	 .check = fosd_http_metrics_check_url,
	 .help = "serve GET /metrics (Prometheus), /livez, /readyz and /healthz on\n"
		 "http://HOST:PORT (default {def}; port 0: any free one;\n"
		 "off: none; not loopback: a warning)"},
	{"weights", FOSD_CT_STRING, F(weights_dir), NULL, .arg = "DIR",
	 .help = "load every *.safetensors and *.npy weight of DIR into the cache\n"
		 "before serving, with DIR/weights.conf's per-file options (README)"},
	/* trust: tenants, TLS, per-tenant quota defaults (trust_config.c checks the listeners) */
	{"tokens", FOSD_CT_STRING, F(tokens_path), NULL, .arg = "FILE",
	 .help = "tenants: one 'NAME SECRET [cache=SIZE] [contexts=SIZE] [inflight=N]'\n"
		 "a line; requests must carry a tenant's secret as auth_token\n"
		 "(default: none, one anonymous tenant, ipc listeners only);\n"
		 "SIGHUP rereads it"},
	{"allow_insecure_tcp", FOSD_CT_BOOL, F(allow_insecure_tcp), "false",
	 .help = "allow tcp:// and tls+tcp:// listeners without a tokens file"},
	{"tls_cert", FOSD_CT_STRING, F(tls_cert), NULL, .arg = "FILE",
	 .help = "PEM certificate (chain) of tls+tcp:// listeners"},
	{"tls_key", FOSD_CT_STRING, F(tls_key), NULL, .arg = "FILE", .help = "PEM private key of tls+tcp:// listeners"},
	{"tls_key_password", FOSD_CT_STRING, F(tls_key_password), NULL,
	 .flags = FOSD_CK_SECRET | FOSD_CK_EMPTY_UNSETS, .arg = "PW", .help = "password of an encrypted key"},
	{"tenant_cache_bytes", FOSD_CT_SIZE, F(tenant_cache_bytes), "0", .flags = FOSD_CK_RELOAD,
	 .what = "a size (e.g. 512M, 8G; 0 for no quota)", .help = "default weight-cache quota of a tenant (0: none)"},
	{"tenant_context_bytes", FOSD_CT_SIZE, F(tenant_context_bytes), "0", .flags = FOSD_CK_RELOAD,
	 .what = "a size (e.g. 512M, 8G; 0 for no quota)",
	 .help = "default saved-context quota of a tenant (0: none)"},
	{"tenant_inflight", FOSD_CT_INT, F(tenant_inflight), "0", 0, 1000000, .flags = FOSD_CK_RELOAD,
	 .what = "a count in [0, 1000000] (0: no limit)",
	 .help = "default limit of a tenant's requests in flight (0: none)"},
};
const size_t fosd_config_nkeys = sizeof fosd_config_keys / sizeof fosd_config_keys[0];
_Static_assert(sizeof fosd_config_keys / sizeof fosd_config_keys[0] <= FOSD_CONFIG_KEYS_MAX,
	       "config_args.c marks the rows a flag set in an array of FOSD_CONFIG_KEYS_MAX");

#undef F

/* a LIST's count is the int right after its array */
_Static_assert(offsetof(fosd_config, n_listen) == offsetof(fosd_config, listen) + sizeof(((fosd_config *)0)->listen),
	       "n_listen must follow listen");

static int listen_check(const char *v, char *msg, size_t msgsz)
{
	if (!strstr(v, "://")) {
		snprintf(msg, msgsz, "listen: '%s' is not a URL (ipc:///path or tcp://host:port)", v);
		return -1;
	}
	return 0;
}

int fosd_http_metrics_check_url(const char *url, char *msg, size_t msgsz)
{
	if (!strncmp(url, "https://", 8)) {
		snprintf(msg, msgsz, "metrics_listen: '%s': the metrics endpoint serves plain http:// only", url);
		return -1;
	}
	if (strncmp(url, "http://", 7)) {
		snprintf(msg, msgsz, "metrics_listen: '%s' is not an http://HOST:PORT URL (e.g. http://127.0.0.1:9464)",
			 url);
		return -1;
	}
	nng_url *u = NULL;
	int rv = nng_url_parse(&u, url);
	if (rv) {
		snprintf(msg, msgsz, "metrics_listen: '%s' is not a valid URL: %s", url, nng_strerror(rv));
		return -1;
	}
	int bad = 0;
	char *end = NULL;
	/* nng fills in port 80 when none is given: insist on an explicit one */
	const char *after_host = strrchr(url + 7, ']');
	after_host = after_host ? after_host : url + 7;
	const char *colon = strchr(after_host, ':');
	if (!colon || !u->u_port || !*u->u_port) {
		snprintf(msg, msgsz, "metrics_listen: '%s' needs a port (e.g. http://127.0.0.1:9464; 0: any free port)",
			 url);
		bad = 1;
	} else {
		unsigned long port = strtoul(u->u_port, &end, 10);
		if (!*u->u_port || *end || port > 65535) {
			snprintf(msg, msgsz, "metrics_listen: '%s': bad port '%s'", url, u->u_port);
			bad = 1;
		}
	}
	if (!bad && u->u_path && *u->u_path && strcmp(u->u_path, "/")) {
		snprintf(msg, msgsz, "metrics_listen: '%s': give no path (fosd serves /metrics, /livez, /readyz, /healthz)",
			 url);
		bad = 1;
	}
	if (!bad && ((u->u_query && *u->u_query) || (u->u_fragment && *u->u_fragment) ||
		     (u->u_userinfo && *u->u_userinfo))) {
		snprintf(msg, msgsz, "metrics_listen: '%s': give only http://HOST:PORT", url);
		bad = 1;
	}
	nng_url_free(u);
	return bad ? -1 : 0;
}

int fosd_config_devices(const char *v, int *ids, int *n, char *msg, size_t msgsz)
{
	*n = 0;
	if (!strcmp(v, "all"))
		return 1;
	const char *p = v;
	while (*p) {
		char *end;
		errno = 0;
		long d = strtol(p, &end, 10);
		int digits = end > p && (*end == ',' || !*end) && *p != '-' && *p != '+';
		if (digits && (errno == ERANGE || d > 64)) { /* an ordinal, but past any device fosd serves */
			snprintf(msg, msgsz,
				 "devices: ordinal %.*s in '%s' is too large: device ordinals go from 0 to 64, at most %d "
				 "devices at once",
				 (int)(end - p > 24 ? 24 : end - p), p, v, FOSD_MAX_DEVICES);
			return -1;
		}
		if (errno || end == p || d < 0 || d > 64 || (*end && *end != ',') || (*end == ',' && !end[1])) {
			snprintf(msg, msgsz, "devices: '%s' is not all or a list of device ordinals like 0,1", v);
			return -1;
		}
		for (int i = 0; i < *n; i++)
			if (ids[i] == (int)d) {
				snprintf(msg, msgsz, "devices: '%s' names device %ld twice", v, d);
				return -1;
			}
		if (*n == FOSD_MAX_DEVICES) {
			snprintf(msg, msgsz, "devices: '%s' names more than %d devices", v, FOSD_MAX_DEVICES);
			return -1;
		}
		ids[(*n)++] = (int)d;
		p = *end ? end + 1 : end;
	}
	return 0;
}

static int devices_check(const char *v, char *msg, size_t msgsz)
{
	int ids[FOSD_MAX_DEVICES], n;
	return fosd_config_devices(v, ids, &n, msg, msgsz) < 0 ? -1 : 0;
}

static const char *level_name(int l)
{
	return l >= 0 && l < 4 ? levels[l] : "?";
}

static void log_level_reloaded(const fosd_config *cur, const fosd_config *nc)
{
	fosd_info("reload: log_level %s (was %s)", level_name(nc->log_level), level_name(cur->log_level));
	fosd_log_set_level(nc->log_level);
}

const fosd_config_key *fosd_config_key_find(const char *key)
{
	for (size_t i = 0; i < fosd_config_nkeys; i++)
		if (!strcmp(key, fosd_config_keys[i].key))
			return &fosd_config_keys[i];
	return NULL;
}

static void *key_field(fosd_config *c, const fosd_config_key *k)
{
	return (char *)c + k->off;
}

static const void *key_cfield(const fosd_config *c, const fosd_config_key *k)
{
	return (const char *)c + k->off;
}

/* a LIST's entries and count */
static char **list_items(fosd_config *c, const fosd_config_key *k)
{
	return (char **)key_field(c, k);
}

static int *list_count(fosd_config *c, const fosd_config_key *k)
{
	return (int *)((char *)c + k->off + k->size);
}

void fosd_config_list_clear(fosd_config *c, const fosd_config_key *k)
{
	char **v = list_items(c, k);
	int *n = list_count(c, k);
	for (int i = 0; i < *n; i++) {
		free(v[i]);
		v[i] = NULL;
	}
	*n = 0;
}

/* frees a string field (wiped first when secret) */
static void string_clear(fosd_config *c, const fosd_config_key *k)
{
	char **p = key_field(c, k);
	if (*p && (k->flags & FOSD_CK_SECRET))
		explicit_bzero(*p, strlen(*p));
	free(*p);
	*p = NULL;
}

static int key_set(fosd_config *c, const fosd_config_key *k, const char *v, char *msg, size_t msgsz);

void fosd_config_defaults(fosd_config *c)
{
	char msg[256];
	memset(c, 0, sizeof *c);
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		/* a LIST's default applies when nothing was given (fosd_config_finish) */
		if (k->def && k->type != FOSD_CT_LIST && key_set(c, k, k->def, msg, sizeof msg)) {
			fprintf(stderr, "fosd: the default of %s does not parse: %s\n", k->key, msg);
			abort(); /* a wrong row: the table test catches it */
		}
	}
}

void fosd_config_free(fosd_config *c)
{
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		if (k->type == FOSD_CT_LIST)
			fosd_config_list_clear(c, k);
		else if (k->type == FOSD_CT_STRING || k->type == FOSD_CT_URL)
			string_clear(c, k);
	}
	if (c->fixed) /* it holds a hash of tls_key_password */
		explicit_bzero(c->fixed, strlen(c->fixed));
	free(c->fixed);
	c->fixed = NULL;
	free(c->notes);
	c->notes = NULL;
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
	return fos_parse_duration(s, 1000000, out, why); /* proto/fos_duration.c, shared with fos */
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

static int parse_bool(const char *v, int *out)
{
	if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1") || !strcasecmp(v, "on")) {
		*out = 1;
		return 0;
	}
	if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0") || !strcasecmp(v, "off")) {
		*out = 0;
		return 0;
	}
	return -1;
}

/* *dst = a copy of v (NULL for NULL), the old value freed (wiped when secret) */
static int string_put(fosd_config *c, const fosd_config_key *k, const char *v, char *msg, size_t msgsz)
{
	char *d = NULL;
	if (v && !(d = strdup(v))) {
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	string_clear(c, k);
	*(char **)key_field(c, k) = d;
	return 0;
}

/* Parses v as k's type into c; on an error c is unchanged and msg names the key. */
static int key_set(fosd_config *c, const fosd_config_key *k, const char *v, char *msg, size_t msgsz)
{
	void *f = key_field(c, k);
	switch (k->type) {
	case FOSD_CT_INT: {
		int x;
		if (parse_int(v, (int)k->lo, (int)k->hi, &x)) {
			if (k->what)
				snprintf(msg, msgsz, "%s: '%s' is not %s", k->key, v, k->what);
			else
				snprintf(msg, msgsz, "%s: '%s' is not an integer in [%lld, %lld]", k->key, v, k->lo, k->hi);
			return -1;
		}
		*(int *)f = x;
		return 0;
	}
	case FOSD_CT_SIZE: {
		uint64_t u;
		if (k->def && !strcmp(k->def, "auto") && !strcasecmp(v, "auto")) {
			*(uint64_t *)f = FOSD_SIZE_AUTO;
			return 0;
		}
		if (fosd_parse_size(v, &u)) {
			if (k->what)
				snprintf(msg, msgsz, "%s: '%s' is not %s", k->key, v, k->what);
			else
				snprintf(msg, msgsz, "%s: '%.100s' is not a size (e.g. 512M, 8G%s)", k->key, v,
					 k->def && !strcmp(k->def, "auto") ? ", or auto" : "");
			return -1;
		}
		*(uint64_t *)f = u;
		return 0;
	}
	case FOSD_CT_DURATION: {
		uint64_t u;
		const char *why;
		if (fosd_parse_duration_why(v, &u, &why)) {
			snprintf(msg, msgsz, "%s: '%.100s' is not a duration: %s (e.g. 250ms, 30s, 5m, 1h; 0 to 24 days)",
				 k->key, v, why);
			return -1;
		}
		*(uint64_t *)f = u;
		return 0;
	}
	case FOSD_CT_STRING:
		if (!*v) {
			if (k->flags & FOSD_CK_EMPTY_UNSETS)
				return string_put(c, k, NULL, msg, msgsz);
			snprintf(msg, msgsz, "%s: empty value", k->key);
			return -1;
		}
		if (k->check && k->check(v, msg, msgsz))
			return -1;
		return string_put(c, k, v, msg, msgsz);
	case FOSD_CT_BOOL:
		if (parse_bool(v, (int *)f)) {
			snprintf(msg, msgsz, "%s: '%s' is not true or false", k->key, v);
			return -1;
		}
		return 0;
	case FOSD_CT_ENUM: {
		int n = 0, hit = -1;
		for (; k->choices[n]; n++)
			if (!strcmp(v, k->choices[n]))
				hit = n;
		if (hit < 0) {
			/* "'x' is not a, b or c" */
			int used = snprintf(msg, msgsz, "%s: '%s' is not ", k->key, v);
			for (int i = 0; i < n && used >= 0 && (size_t)used < msgsz; i++)
				used += snprintf(msg + used, msgsz - (size_t)used, "%s%s", i ? (i == n - 1 ? " or " : ", ") : "",
						 k->choices[i]);
			return -1;
		}
		if (k->size == sizeof(int))
			*(int *)f = hit;
		else
			snprintf(f, k->size, "%s", k->choices[hit]);
		return 0;
	}
	case FOSD_CT_URL:
		/* "off" or empty: none (a flag can so turn off the file's setting) */
		if (!*v || !strcmp(v, "off"))
			return string_put(c, k, NULL, msg, msgsz);
		if (k->check && k->check(v, msg, msgsz))
			return -1;
		return string_put(c, k, v, msg, msgsz);
	case FOSD_CT_OCTAL: {
		char *end;
		errno = 0;
		long m = strtol(v, &end, 8);
		if (errno || end == v || *end || m < k->lo || m > k->hi) {
			snprintf(msg, msgsz, "%s: '%s' is not an octal mode like 0600", k->key, v);
			return -1;
		}
		*(int *)f = (int)m;
		return 0;
	}
	case FOSD_CT_LIST: {
		int *n = list_count(c, k);
		if (*n >= k->hi) {
			snprintf(msg, msgsz, "at most %lld %s URLs", k->hi, k->key);
			return -1;
		}
		if (k->check && k->check(v, msg, msgsz))
			return -1;
		char *d = strdup(v);
		if (!d) {
			snprintf(msg, msgsz, "out of memory");
			return -1;
		}
		list_items(c, k)[(*n)++] = d;
		return 0;
	}
	}
	snprintf(msg, msgsz, "%s: no parser for its type", k->key);
	return -1;
}

int fosd_config_set(fosd_config *c, const char *key, const char *v, char *msg, size_t msgsz)
{
	const fosd_config_key *k = fosd_config_key_find(key);
	if (!k || (k->flags & FOSD_CK_FLAG_ONLY)) {
		snprintf(msg, msgsz, "unknown setting '%s'", key);
		return -1;
	}
	return key_set(c, k, v, msg, msgsz);
}

void fosd_config_reloadable(char *out, size_t outsz)
{
	size_t used = 0;
	out[0] = 0;
	for (size_t i = 0; i < fosd_config_nkeys; i++)
		if (fosd_config_keys[i].flags & FOSD_CK_RELOAD) {
			int n = snprintf(out + used, outsz - used, "%s%s", used ? ", " : "", fosd_config_keys[i].key);
			if (n < 0 || (size_t)n >= outsz - used)
				return;
			used += (size_t)n;
		}
}

void fosd_config_apply_reloadable(fosd_config *cur, const fosd_config *nc)
{
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		if (!(k->flags & FOSD_CK_RELOAD))
			continue;
		/* scalars only (the table test checks): a plain copy of the field */
		void *dst = key_field(cur, k);
		const void *src = key_cfield(nc, k);
		if (memcmp(dst, src, k->size) && k->on_reload)
			k->on_reload(cur, nc);
		memcpy(dst, src, k->size);
	}
}

/* FNV-1a of a secret setting: fixed shows whether it changed, never the value */
static unsigned long long config_hash(const char *s)
{
	unsigned long long h = 0xcbf29ce484222325ull;
	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return s ? h : 0;
}

/* Writes a row's value of c to out (for the fixed-key record): a LIST space-separated, an unset
 * string empty, a SECRET as a hash. */
static void key_show(const fosd_config *c, const fosd_config_key *k, FILE *out);
void fosd_config_key_show(const fosd_config *c, const fosd_config_key *k, void *out)
{
	key_show(c, k, (FILE *)out);
}

static void key_show(const fosd_config *c, const fosd_config_key *k, FILE *out)
{
	const void *f = key_cfield(c, k);
	switch (k->type) {
	case FOSD_CT_INT:
	case FOSD_CT_BOOL:
	case FOSD_CT_OCTAL:
		fprintf(out, "%d", *(const int *)f);
		break;
	case FOSD_CT_SIZE:
	case FOSD_CT_DURATION:
		if (k->type == FOSD_CT_SIZE && *(const uint64_t *)f == FOSD_SIZE_AUTO)
			fputs("auto", out);
		else
			fprintf(out, "%llu", (unsigned long long)*(const uint64_t *)f);
		break;
	case FOSD_CT_ENUM:
		if (k->size == sizeof(int))
			fprintf(out, "%d", *(const int *)f);
		else
			fprintf(out, "%.*s", (int)k->size, (const char *)f);
		break;
	case FOSD_CT_STRING:
	case FOSD_CT_URL: {
		const char *s = *(const char *const *)f;
		if (k->flags & FOSD_CK_SECRET)
			fprintf(out, "%llx", config_hash(s));
		else
			fputs(s ? s : "", out);
		break;
	}
	case FOSD_CT_LIST: {
		const char *const *v = f;
		int n = *(const int *)((const char *)c + k->off + k->size);
		for (int i = 0; i < n; i++)
			fprintf(out, "%s%s", i ? " " : "", v[i]);
		break;
	}
	}
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
	struct stat sb;
	int fd = fos_open_regular(path, FOSD_CONFIG_FILE_MAX, &sb, msg, msgsz);
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

/* c->fixed: one "key=value" line for each file key a reload cannot change, in table order
 * (malloc'd; NULL when out of memory). */
static char *config_render_fixed(const fosd_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		if (k->flags & (FOSD_CK_RELOAD | FOSD_CK_FLAG_ONLY))
			continue;
		fprintf(f, "%s=", k->key);
		key_show(c, k, f);
		fputc('\n', f);
	}
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

int fosd_config_finish(fosd_config *c, char *msg, size_t msgsz)
{
	for (size_t i = 0; i < fosd_config_nkeys; i++) {
		const fosd_config_key *k = &fosd_config_keys[i];
		if (k->type == FOSD_CT_LIST && k->def && !*list_count(c, k) && key_set(c, k, k->def, msg, msgsz))
			return -1;
	}
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
	if (!(c->fixed = config_render_fixed(c))) { /* before the sizing: a reload compares "auto" */
		snprintf(msg, msgsz, "out of memory");
		return -1;
	}
	char line[512];
	fosd_config_size_auto(c, 0, fosd_host_memory_bytes(), line, sizeof line);
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
