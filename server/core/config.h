/* config.h: fosd's configuration: defaults, the config file (key = value lines) and the command
 * line flags (which win over the file), all from one table of keys (fosd_config_keys, below).
 * deploy/fosd.conf.example documents every key. */
#ifndef FOSD_CONFIG_H
#define FOSD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "fos_duration.h"

#define FOSD_MAX_LISTEN 16
/* The most devices one fosd serves (--devices). */
#define FOSD_MAX_DEVICES 16
#define FOSD_DEFAULT_URL "ipc:///tmp/fosd.sock"
/* metrics_listen's default: on, loopback only, on the Prometheus exporters' customary port 9464. */
#define FOSD_DEFAULT_METRICS_URL "http://127.0.0.1:9464"

typedef struct fosd_config {
	char *listen[FOSD_MAX_LISTEN]; /* URLs; empty means FOSD_DEFAULT_URL */
	int n_listen;
	char backend[16];               /* auto, cpu, cuda */
	int threads;                    /* cpu backend threads; 0 = one per CPU */
	int device;                     /* cuda device index */
	char *devices;                  /* --devices: "all" or ordinals "0,1" (NULL: the one device) */
	int workers;                    /* executor threads */
	int streams;                    /* executor lanes: backend instances (cuda: streams) that run
					 * requests at once; 0 = auto (8 on cuda, 1 on cpu); fosd runs at least
					 * one worker per lane */
	int concurrency;                /* nng contexts = requests in progress at once */
	uint64_t cache_bytes;           /* weight cache budget (FOSD_SIZE_AUTO: sized at start) */
	uint64_t context_bytes;         /* saved-context budget */
	uint64_t context_ttl_ms;        /* a saved context lives this long after its forward */
	uint64_t max_message_bytes;     /* NNG_OPT_RECVMAXSZ, and the largest reply */
	uint64_t message_pool_bytes;    /* freed message bodies kept mapped (msg_pool.c) */
	int channel_spin_us;            /* request channels poll this long before sleeping (chan.c) */
	uint64_t drain_timeout_ms;      /* SIGTERM: wait this long for in-flight requests */
	uint64_t sweep_interval_ms;     /* context expiry sweep */
	uint64_t dedup_window_ms;       /* remember executed request ids this long */
	uint64_t dedup_bytes;           /* memory of the table of those ids (dedup.h) */
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
	char *weights_dir;              /* weight repository loaded at start (weights_repo.c); NULL: none */
	/* trust (trust_config.c): tenants, TLS, per-tenant quota defaults */
	char *tokens_path;              /* tokens file; NULL: one anonymous tenant, ipc only */
	int allow_insecure_tcp;         /* tcp/tls+tcp listeners without a tokens file */
	char *tls_cert, *tls_key;       /* PEM certificate (chain) and key of tls+tcp listeners */
	char *tls_key_password;         /* of an encrypted key, or NULL */
	uint64_t tenant_cache_bytes;    /* default per-tenant quotas (0: none) */
	uint64_t tenant_context_bytes;
	int tenant_inflight;
	unsigned auto_sized;            /* FOSD_AUTO_* of the sizes fosd_config_finish chose itself */
	int check_config;               /* --check-config: parse everything, open nothing (config_report.c) */
	char *notes;                    /* "\n"-ended lines: where a flag replaced the file's value
					 * (config_report.c); NULL: none */
} fosd_config;

/* Parses a devices value: 1 for "all", else 0 with the ordinals in ids[0..*n) (at most
 * FOSD_MAX_DEVICES, no repeats); -1 with msg when it is neither. */
int fosd_config_devices(const char *v, int *ids, int *n, char *msg, size_t msgsz);

/* A size key left at "auto" (cache_bytes, context_bytes, message_pool_bytes): fosd_config_finish
 * sizes it from the host's memory, fosd_main.c again from the GPU's once the cuda backend is open
 * (fosd_config_size_auto). A value set in the file or a flag always wins. */
#define FOSD_SIZE_AUTO UINT64_MAX
enum { FOSD_AUTO_CACHE = 1, FOSD_AUTO_CONTEXTS = 2, FOSD_AUTO_POOL = 4 };
/* The host's memory: physical memory, or the cgroup's memory limit when that is lower. */
uint64_t fosd_host_memory_bytes(void);
/* Sizes the auto keys: cache 40 % and contexts 20 % of the device's memory when dev_bytes > 0
 * (the cuda backend), else 25 % and 12.5 % of the host's (host_bytes); the message pool (host
 * memory in both cases) 1/16 of the host's, from 64 MiB to 4 GiB. Writes one line describing
 * every size and where it came from to msg (for the start-up log). */
void fosd_config_size_auto(fosd_config *c, uint64_t dev_bytes, uint64_t host_bytes, char *msg, size_t msgsz);

void fosd_config_defaults(fosd_config *c);
void fosd_config_free(fosd_config *c);

/* Reads "key = value" lines of any length (# starts a comment that runs to the end of its line;
 * blank lines; a repeated `listen` adds a URL). Only a regular file of at most
 * FOSD_CONFIG_FILE_MAX bytes, opened without blocking. Returns 0, or -1 with msg naming the file,
 * line and problem. */
#define FOSD_CONFIG_FILE_MAX ((size_t)1 << 20)
int fosd_config_load_file(fosd_config *c, const char *path, char *msg, size_t msgsz);

/* Sets one key from a string (the same keys as the file). Returns 0 or -1 with msg. */
int fosd_config_set(fosd_config *c, const char *key, const char *value, char *msg, size_t msgsz);
/* Empties a LIST key of c (a flag's list replaces the file's). */
struct fosd_config_key;
void fosd_config_list_clear(fosd_config *c, const struct fosd_config_key *k);
/* Checks a metrics_listen value: http://HOST:PORT with an explicit port (0: any free port) and no
 * path. Returns 0, or -1 with msg. */
int fosd_http_metrics_check_url(const char *url, char *msg, size_t msgsz);

/* Parses argv. Returns 0 to run, 1 when --help or --version was printed (exit 0), -1 on error
 * with msg. A --config file is read first, then the other flags override it. */
int fosd_config_parse_args(fosd_config *c, int argc, char **argv, char *msg, size_t msgsz);
/* Cross-field checks and defaults that depend on other fields; records c->fixed. */
int fosd_config_finish(fosd_config *c, char *msg, size_t msgsz);

/* The keys a reload (SIGHUP, reload.c) applies while fosd runs (the rows of fosd_config_keys with
 * FOSD_CK_RELOAD), ", "-separated in out: "log_level, tenant_cache_bytes, ...". Every other key
 * keeps its value until a restart. */
void fosd_config_reloadable(char *out, size_t outsz);
/* Copies the reloadable keys of the finished configuration nc into cur (a row's on_reload runs
 * first when its value changed). */
void fosd_config_apply_reloadable(fosd_config *cur, const fosd_config *nc);
/* The names of the keys outside the reloadable ones whose values differ between the finished
 * configurations a and b, comma-separated in out ("" when none). */
void fosd_config_fixed_diff(const fosd_config *a, const fosd_config *b, char *out, size_t outsz);

/* ---- the key table ------------------------------------------------------------------------------
 * Every setting is one row of fosd_config_keys (config.c): its file key (and flag, --key-name),
 * type, field, default, bounds, whether SIGHUP applies it and its --help text. The defaults, the
 * file and flag parsers, the known-key check, `fosd --help`, the reload list and the fixed-key
 * record all read the table; deploy/fosd.conf.example documents every row (a test checks it).
 * Adding a setting: its field in fosd_config, one row, one `#key = default` line in the example. */
typedef enum fosd_config_type {
	FOSD_CT_INT,      /* int in [lo, hi] (strtol: decimal) */
	FOSD_CT_SIZE,     /* uint64_t bytes: 512M, 8GiB (fosd_parse_size) */
	FOSD_CT_DURATION, /* uint64_t milliseconds: 250ms, 1.5s (fosd_parse_duration_why) */
	FOSD_CT_STRING,   /* char * (malloc'd); empty is refused unless FOSD_CK_EMPTY_UNSETS */
	FOSD_CT_BOOL,     /* int 0 or 1: true/false, yes/no, on/off, 1/0; as a flag it takes no value */
	FOSD_CT_ENUM,     /* one of choices: its index in an int field, or its name in a char array */
	FOSD_CT_URL,      /* char *; "" or "off": NULL; otherwise the row's check must accept it */
	FOSD_CT_OCTAL,    /* int in [lo, hi], written in octal (0600) */
	FOSD_CT_LIST,     /* repeatable: char *[hi] at the field, its count the int right after it;
			   * the row's check accepts each; flags replace the file's; def when none */
} fosd_config_type;

#define FOSD_CK_RELOAD 1u       /* SIGHUP applies it (scalar types only) */
#define FOSD_CK_SECRET 2u       /* the fixed-key record keeps a hash; wiped before it is freed */
#define FOSD_CK_EMPTY_UNSETS 4u /* STRING: an empty value means none (NULL) */
#define FOSD_CK_FLAG_ONLY 8u    /* a command line flag, not a file key (--config) */

typedef struct fosd_config_key {
	const char *key;            /* file key; the flag is --key with '-' for '_' */
	fosd_config_type type;
	size_t off, size;           /* the field in fosd_config */
	const char *def;            /* default, as a file writes it (parsed by the row's type); NULL:
				     * none (unset) */
	long long lo, hi;           /* INT and OCTAL bounds; LIST: most entries */
	unsigned flags;             /* FOSD_CK_* */
	const char *const *choices; /* ENUM: the names, NULL-terminated */
	const char *arg;            /* --help's name of the value; NULL: from the type (N, SIZE, DUR...) */
	const char *help;           /* --help text: "{def}" stands for def, '\n' starts a continued line */
	const char *what;           /* the message's "'value' is not <what>" instead of the type's
				     * (the whole value quoted; a size's or duration's own message
				     * quotes at most 100 bytes of it) */
	int (*check)(const char *v, char *msg, size_t msgsz); /* URL, LIST: the value's own check */
	void (*on_reload)(const fosd_config *cur, const fosd_config *nc); /* RELOAD: a change applied */
} fosd_config_key;

/* the table has at most this many rows (config.c checks it at compile time) */
#define FOSD_CONFIG_KEYS_MAX 256
extern const fosd_config_key fosd_config_keys[];
extern const size_t fosd_config_nkeys;
/* The row of key (with '_'), or NULL. */
const fosd_config_key *fosd_config_key_find(const char *key);

/* "64M", "1GiB", "1073741824" -> bytes. Returns 0 or -1. */
int fosd_parse_size(const char *s, uint64_t *out);
/* "250ms", "30s", "1.5s", "5m", "1h", "30" (seconds) -> milliseconds: a decimal number (digits,
 * optionally a fraction) and a unit, from 0 to FOSD_DURATION_MAX_MS. nan, inf, exponents, signs
 * and spaces are refused. Returns 0, or -1 with *why (if not NULL) saying what is wrong. */
#define FOSD_DURATION_MAX_MS FOS_DURATION_MAX_MS /* 24 days (proto/fos_duration.h) */
int fosd_parse_duration_ms(const char *s, uint64_t *out);
int fosd_parse_duration_why(const char *s, uint64_t *out, const char **why);

void fosd_config_usage(void *stream);

/* Writes a row's value of c to out (FILE *): a LIST space-separated, an unset string empty, a
 * SECRET as a hash. */
void fosd_config_key_show(const fosd_config *c, const fosd_config_key *k, void *out);

#endif
