/* config.h: fosd's configuration: defaults, the config file (key = value lines) and the command
 * line flags (which win over the file). deploy/fosd.conf.example documents every key. */
#ifndef FOSD_CONFIG_H
#define FOSD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define FOSD_MAX_LISTEN 16
#define FOSD_DEFAULT_URL "ipc:///tmp/fosd.sock"

typedef struct fosd_config {
	char *listen[FOSD_MAX_LISTEN]; /* URLs; empty means FOSD_DEFAULT_URL */
	int n_listen;
	char backend[16];               /* auto, cpu, cuda */
	int threads;                    /* cpu backend threads; 0 = one per CPU */
	int device;                     /* cuda device index */
	int workers;                    /* executor threads */
	int streams;                    /* executor lanes: backend instances (cuda: streams) that run
					 * requests at once; 0 = auto (8 on cuda, 1 on cpu); fosd runs at least
					 * one worker per lane */
	int concurrency;                /* nng contexts = requests in progress at once */
	uint64_t cache_bytes;           /* weight cache budget */
	uint64_t context_bytes;         /* saved-context budget */
	uint64_t context_ttl_ms;        /* a saved context lives this long after its forward */
	uint64_t max_message_bytes;     /* NNG_OPT_RECVMAXSZ, and the largest reply */
	uint64_t message_pool_bytes;    /* freed message bodies kept mapped (msg_pool.c) */
	int channel_spin_us;            /* request channels poll this long before sleeping (chan.c) */
	uint64_t drain_timeout_ms;      /* SIGTERM: wait this long for in-flight requests */
	uint64_t sweep_interval_ms;     /* context expiry sweep */
	uint64_t dedup_window_ms;       /* remember executed request ids this long */
	uint64_t send_timeout_ms;       /* a reply the client does not take this long drops its connection */
	int connection_requests;        /* most requests in progress from one connection; 0 = auto
					 * (a quarter of concurrency, at least 1) */
	int max_connections;            /* most client connections at once; 0 = auto (from the
					 * descriptor limit, fdlimit.c) */
	int metrics_max_connections;    /* most open connections to the HTTP endpoint */
	uint64_t metrics_idle_timeout_ms; /* an HTTP endpoint connection idle this long is closed */
	int ipc_mode;                   /* permissions of ipc sockets (octal in files and flags) */
	int log_level;                  /* enum fosd_log_level */
	char *config_path;              /* the file that was read, or NULL */
	int argc;                       /* the command line fosd_config_parse_args read (a reload */
	char **argv;                    /* reads it again: flags still win over the file) */
	char *fixed;                    /* "key=value" lines of the keys a reload cannot change, as
					 * fosd_config_finish saw them (fosd_config_fixed_diff) */
	char *metrics_listen;           /* http://HOST:PORT of /metrics and /healthz (http_metrics.c);
					 * NULL: none */
	/* trust (trust_config.c): tenants, TLS, per-tenant quota defaults */
	char *tokens_path;              /* tokens file; NULL: one anonymous tenant, ipc only */
	int allow_insecure_tcp;         /* tcp/tls+tcp listeners without a tokens file */
	char *tls_cert, *tls_key;       /* PEM certificate (chain) and key of tls+tcp listeners */
	char *tls_key_password;         /* of an encrypted key, or NULL */
	uint64_t tenant_cache_bytes;    /* default per-tenant quotas (0: none) */
	uint64_t tenant_context_bytes;
	int tenant_inflight;
} fosd_config;

void fosd_config_defaults(fosd_config *c);
void fosd_config_free(fosd_config *c);

/* Reads "key = value" lines of any length (# starts a comment that runs to the end of its line;
 * blank lines; a repeated `listen` adds a URL). Only a regular file of at most
 * FOSD_CONFIG_FILE_MAX bytes, opened without blocking. Returns 0, or -1 with msg naming the file,
 * line and problem. */
#define FOSD_CONFIG_FILE_MAX ((size_t)1 << 20)
int fosd_config_load_file(fosd_config *c, const char *path, char *msg, size_t msgsz);

/* Opens path for reading without ever blocking (O_NONBLOCK: a FIFO or device returns at once) and
 * keeps it only if it is a regular file of at most max bytes; *sb gets its fstat. Returns the
 * descriptor, or -1 with msg naming the path and what it is ("not a regular file (a FIFO)"). For
 * the config and tokens files. */
struct stat;
int fosd_open_regular(const char *path, size_t max, struct stat *sb, char *msg, size_t msgsz);
/* Sets one key from a string (the same keys as the file). Returns 0 or -1 with msg. */
int fosd_config_set(fosd_config *c, const char *key, const char *value, char *msg, size_t msgsz);

/* Parses argv. Returns 0 to run, 1 when --help or --version was printed (exit 0), -1 on error
 * with msg. A --config file is read first, then the other flags override it. */
int fosd_config_parse_args(fosd_config *c, int argc, char **argv, char *msg, size_t msgsz);
/* Cross-field checks and defaults that depend on other fields; records c->fixed. */
int fosd_config_finish(fosd_config *c, char *msg, size_t msgsz);

/* The keys a reload (SIGHUP, reload.c) applies while fosd runs; every other key keeps its value
 * until a restart. */
#define FOSD_CONFIG_RELOADABLE "log_level, tenant_cache_bytes, tenant_context_bytes, tenant_inflight"
/* The names of the keys outside FOSD_CONFIG_RELOADABLE whose values differ between the finished
 * configurations a and b, comma-separated in out ("" when none). */
void fosd_config_fixed_diff(const fosd_config *a, const fosd_config *b, char *out, size_t outsz);

/* "64M", "1GiB", "1073741824" -> bytes. Returns 0 or -1. */
int fosd_parse_size(const char *s, uint64_t *out);
/* "250ms", "30s", "1.5s", "5m", "1h", "30" (seconds) -> milliseconds: a decimal number (digits,
 * optionally a fraction) and a unit, from 0 to FOSD_DURATION_MAX_MS. nan, inf, exponents, signs
 * and spaces are refused. Returns 0, or -1 with *why (if not NULL) saying what is wrong. */
#define FOSD_DURATION_MAX_MS (24ull * 24 * 3600 * 1000) /* 24 days: fits nng's int32 ms timeouts,
							   * and in ns far below 2^64 */
int fosd_parse_duration_ms(const char *s, uint64_t *out);
int fosd_parse_duration_why(const char *s, uint64_t *out, const char **why);

void fosd_config_usage(void *stream);

#endif
