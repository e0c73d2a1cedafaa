/* cli.h: the pieces of the `fos` command line tool shared between its files: the flag parser, error
 * reporting, .npy loading / checking / writing helpers, the daemon connection, JSON output, the
 * latency histogram, and each subcommand's job description and main.
 *
 * quantize, dequantize and linear are split the same way:
 *   cli_X_main      parse flags -> check options -> load and check the .npy inputs -> run -> write
 *   cli_X_local     the computation in this process, on a backend from kernels/backend.h
 *   cli_X_remote    the same computation through fosd (libfos); same job, same outputs, bit for bit
 * Both take a cli_X_job (inputs in host memory, already checked) and fill caller-allocated host
 * buffers. The other subcommands only talk to fosd (or, `check`, only read files).
 * Helpers return fos_err messages; the subcommand mains print (results on stdout, one "fos: ..."
 * line on stderr for an error). */
#ifndef FOS_CLI_H
#define FOS_CLI_H

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "fos.h"
#include "npy.h"

/* Exit statuses. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Global options: before the command, or after it (cli_parse takes any it does not know as a
 * command flag through cli_global_arg). */
typedef struct cli_global {
	const char *server; /* --server, $FOS_SERVER, or CLI_DEFAULT_SERVER */
	const char *token;  /* --token, $FOS_TOKEN, or NULL */
	int server_given;   /* 1 when --server or $FOS_SERVER chose the server */
	int timeout_ms;     /* --timeout, $FOS_TIMEOUT, or CLI_DEFAULT_TIMEOUT_MS: bounds each request */
	const char *tls_ca;          /* --tls-ca, $FOS_TLS_CA, or NULL (the system's CAs) */
	const char *tls_server_name; /* --tls-server-name, or NULL (the URL's host) */
	int quiet; /* --quiet: nothing on stdout on success (errors still on stderr, the exit status) */
	int json;  /* --json: what the command reports as one JSON object on stdout */
} cli_global;

/* Fills g from the environment ($FOS_SERVER, $FOS_TOKEN, $FOS_TIMEOUT, $FOS_TLS_CA) and the
 * defaults; FOS_EINVAL with a message for a bad $FOS_TIMEOUT. */
int cli_global_init(cli_global *g, fos_err *err);
/* The global option at argv[*i] (--server URL, --token T, --timeout DUR, --tls-ca FILE,
 * --tls-server-name NAME, --quiet, --json; VALUE or =VALUE): returns 1 with it stored in g and *i
 * past its value; 0 when argv[*i] is no global option; -1 with a message in err (missing or bad
 * value). */
int cli_global_arg(cli_global *g, int argc, char **argv, int *i, fos_err *err);
/* The cli_global that cli_parse stores global options given after the command into (main binds its
 * own; NULL: cli_parse knows only the command's flags). A command flag named --json or --quiet,
 * when given, also sets g->json / g->quiet, so commands test only g. */
void cli_global_bind(cli_global *g);
/* The help line listing the global options a command also takes. */
#define CLI_GLOBAL_FLAGS_HELP \
	"Global options (--server, --token, --timeout, --tls-ca, --tls-server-name, --quiet, --json)\n" \
	"may come before or after the command (see 'fos --help')."
/* The one-line success summary (printf-style, a newline added) on stdout, unless g->quiet or
 * g->json (then the command prints its JSON object instead). */
void cli_summary(const cli_global *g, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;
/* Where a computation ran, for a summary: "fosd at URL", or "here (--local, backend B)"; returns buf. */
const char *cli_where(const cli_global *g, int local, const char *backend, char *buf, size_t cap);
/* fflush(stdout): CLI_EXIT_OK, or CLI_EXIT_FAIL with "fos: CMD: cannot write to stdout". */
int cli_flush_stdout(const char *cmd);

#define CLI_DEFAULT_SERVER "ipc:///tmp/fosd.sock"
#define CLI_DEFAULT_TIMEOUT_MS 60000

/* ---- the flag parser (cli_args.c) ------------------------------------------------------------ */

typedef struct cli_flag {
	const char *name;    /* "--out" */
	const char *metavar; /* "DIR"; NULL for a switch that takes no value */
	const char *help;    /* lines separated by '\n' */
	int given;           /* set by cli_parse */
	const char *value;   /* set by cli_parse (NULL for a switch) */
} cli_flag;

#define CLI_MAX_POS 4

typedef struct cli_cmd {
	const char *name;     /* "quantize" */
	const char *synopsis; /* the usage line after "fos NAME " */
	const char *summary;  /* one line, for `fos --help` */
	const char *about;    /* a paragraph at the top of `fos NAME --help` (may be NULL) */
	const char *const *pos_names; /* positional argument names */
	const char *const *pos_help;
	int npos;
	cli_flag *flags;
	int nflags;
	const char *footer; /* text at the end of the help (outputs, notes), may be NULL */
	const char *pos[CLI_MAX_POS]; /* set by cli_parse */
} cli_cmd;

/* cli_parse's return when --help / -h was given (help already written to stdout). */
#define CLI_HELP_SHOWN (-1)

/* Parses argv[1..argc-1] (argv[0] is the command name) against c. Returns FOS_OK, CLI_HELP_SHOWN,
 * or FOS_EINVAL with a message (unknown flag, missing value, flag repeated, wrong positionals). */
int cli_parse(cli_cmd *c, int argc, char **argv, fos_err *err);
void cli_print_help(const cli_cmd *c, FILE *f);
/* Designated initializers of a cli_cmd's positionals and flags, the counts taken from the arrays. */
#define CLI_CMD_POS(names, help) .pos_names = (names), .pos_help = (help), .npos = (int)(sizeof(names) / sizeof((names)[0]))
#define CLI_CMD_FLAGS(flagv) .flags = (flagv), .nflags = (int)(sizeof(flagv) / sizeof((flagv)[0]))
#define CLI_CMD_ARGS(names, help, flagv) CLI_CMD_POS(names, help), CLI_CMD_FLAGS(flagv)
/* cli_parse for a subcommand's main: -1 when the command goes on; else the status to exit with
 * (help shown: CLI_EXIT_OK; bad command line: CLI_EXIT_USAGE, its message printed). */
int cli_parse_main(cli_cmd *c, int argc, char **argv, fos_err *err);
/* Maps f->value through names[i] -> values[i]; when the flag was not given *out is left alone. */
int cli_choice(const cli_flag *f, int n, const char *const *names, const int *values, int *out, fos_err *err);

/* Shared option parsers: --backend (cpu|cuda|auto), --err, --bound, block modes, --override. */
int cli_opt_backend(const cli_flag *f, const char **out, fos_err *err);
int cli_opt_err_mode(const cli_flag *f, int *out, fos_err *err);
int cli_opt_bound(const cli_flag *f, int *out, fos_err *err);
int cli_opt_block(const cli_flag *f, int *out, fos_err *err);
/* --four-over-six all|weights|activations|none: enum fos_scope (NUMERICS.md section 11). */
int cli_opt_scope(const cli_flag *f, int *out, fos_err *err);
int cli_opt_override(const cli_flag *f, int *out, fos_err *err);

/* ---- errors (cli_common.c) ------------------------------------------------------------------- */

/* Prints "fos: MSG" as one line on stderr (newlines in MSG become spaces); returns code. */
int cli_report(const fos_err *err, int code);
/* Prints "fos: " + the printf-style message as one line on stderr; returns code. */
int cli_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;
/* printf-style message into err; returns FOS_EINVAL. */
int cli_errf(fos_err *err, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;
/* Prepends "prefix: " to err->msg; returns err->rc. */
int cli_err_prefix(fos_err *err, const char *prefix);
/* Parses a duration: "250ms", "1.5s", "2m", or a plain number of seconds; > 0. Returns FOS_OK with
 * *ns filled, or FOS_EINVAL with a message naming flag. */
int cli_parse_duration(const char *flag, const char *s, uint64_t *ns, fos_err *err);
/* Parses a whole unsigned decimal number in [lo, hi] (message names flag). */
int cli_parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, fos_err *err);
/* "512 B", "1.5 KiB", "3.2 GiB" into buf; returns buf. */
char *cli_human_bytes(uint64_t b, char *buf, size_t cap);
/* Parses a finite double (message names flag). */
int cli_parse_double(const char *flag, const char *s, double *out, fos_err *err);

/* ---- .npy inputs and outputs (cli_io.c) ------------------------------------------------------ */

/* Reads path (messages start with the path). */
int cli_load(const char *path, npy_array *a, fos_err *err);
/* dtype must be one of the (up to 3) listed npy dtypes (n of them); message names file and both. */
int cli_check_dtype(const npy_array *a, const char *path, int n, const int *dtypes, fos_err *err);
/* rank must be ndim; what describes the expected shape, e.g. "(R, C)". */
int cli_check_rank(const npy_array *a, const char *path, int ndim, const char *what, fos_err *err);
/* A bf16 or f32 array of rank ndim. */
int cli_check_float(const npy_array *a, const char *path, int ndim, const char *what, fos_err *err);
/* Converts an NPY_F4 array to NPY_U2 (bf16, round to nearest even) in place; no-op for NPY_U2. */
int cli_to_bf16(npy_array *a, fos_err *err);
/* cli_load + cli_check_float: a bf16 or f32 input of rank ndim (what: its shape, e.g. "(M, K)"). */
int cli_load_float(const char *path, int ndim, const char *what, npy_array *a, fos_err *err);
/* cli_load_float + cli_to_bf16: the input as bf16. */
int cli_load_bf16(const char *path, int ndim, const char *what, npy_array *a, fos_err *err);
/* FOS_OK when a holds at least one element, else "PATH: shape S is empty". */
int cli_check_nonempty(const npy_array *a, const char *path, fos_err *err);
/* The optional --bias: FOS_OK with a untouched when path is NULL; else a nonempty bf16 (N,) array. */
int cli_load_bias(const char *path, npy_array *a, fos_err *err);
/* A fos_tensor over a bf16 array of rank 1 or 2 (not copied). */
fos_tensor cli_tensor_bf16(const npy_array *a);
/* Checks every value of a float32 amax array: finite or +inf, not NaN, not negative. */
int cli_check_amax_values(const npy_array *a, const char *path, fos_err *err);
/* mkdir -p dir. */
int cli_mkdirs(const char *dir, fos_err *err);
/* mkdir -p of the directory part of a file path. */
int cli_mkparent(const char *file, fos_err *err);
/* Writes DIR/NAME. */
int cli_write(const char *dir, const char *name, int dtype, int ndim, const int64_t *shape, const void *data,
	      fos_err *err);

/* ---- local computation helpers (cli_local.c) ------------------------------------------------- */

/* fos_backend_open with a message naming the backend. */
fos_backend *cli_backend_open(const char *name, fos_err *err);
/* be->alloc + be->h2d; NULL on failure (err set). n may be 0 (one byte is allocated). */
void *cli_upload(fos_backend *be, const void *host, size_t n, fos_err *err);
/* be->alloc; NULL on failure (err set). */
void *cli_dev_alloc(fos_backend *be, size_t n, fos_err *err);
/* be->free on a possibly NULL pointer. */
void cli_dev_free(fos_backend *be, void *p);

/* ---- the daemon (cli_remote.c) -------------------------------------------------------------- */

/* fos_connect to g->server with g->token and g->timeout_ms; message names the URL. */
int cli_connect(const cli_global *g, fos_client **out, fos_err *err);
/* A libfos failure as a fos_err: "CODE_NAME: message" (prefixed with what when not NULL). */
int cli_status_err(const fos_status *st, const char *what, fos_err *err);
/* fos.h's FOS_BLOCKS_* / FOS_ERRMODE_* / FOS_OVERRIDE_* value names, for printing */
const char *cli_block_name(int wire_block, int is_weight);
const char *cli_errmode_name(int wire_err);
const char *cli_override_name(int wire_override);
/* "--backend" given without "--local": a usage error (fosd picks its own backend). */
int cli_check_backend_local(const cli_flag *backend, const cli_flag *local, fos_err *err);

/* ---- JSON output and input (cli_json.c) ---------------------------------------------------- */

/* A writer on jansson: objects and arrays nest as they are opened; the document is printed to f
 * when the outermost one closes (every cli_jw_obj / cli_jw_arr needs its cli_jw_end). */
typedef struct cli_jw {
	FILE *f;
	int depth;
	int pretty;
	json_t *stack[16]; /* the open containers, innermost last */
	json_t *root;      /* the document until printed */
} cli_jw;

void cli_jw_init(cli_jw *w, FILE *f, int pretty);
void cli_jw_obj(cli_jw *w, const char *key);   /* key NULL inside an array / at the top */
void cli_jw_arr(cli_jw *w, const char *key);
void cli_jw_end(cli_jw *w, char closer);       /* '}' or ']' */
void cli_jw_str(cli_jw *w, const char *key, const char *v);
void cli_jw_u64(cli_jw *w, const char *key, uint64_t v);
void cli_jw_i64(cli_jw *w, const char *key, int64_t v);
void cli_jw_dbl(cli_jw *w, const char *key, double v); /* non-finite -> null */
void cli_jw_bool(cli_jw *w, const char *key, int v);
void cli_jw_null(cli_jw *w, const char *key);
/* The --json summary of a command that writes files (cli_common.c): cli_json_begin opens the object
 * with "command", "where" ("fosd" or "local") and "server" or "backend"; the command adds its own
 * members; cli_json_outputs_begin opens "outputs", each cli_json_output adds
 * NAME: {"path", "dtype", "shape"}; cli_json_outputs_end closes "outputs" and the object. */
void cli_json_begin(cli_jw *w, const cli_global *g, const char *command, int local, const char *backend);
void cli_jw_shape(cli_jw *w, const char *key, int ndim, const int64_t *shape);
void cli_json_outputs_begin(cli_jw *w);
void cli_json_output(cli_jw *w, const char *name, const char *dir, const char *file, const char *dtype, int ndim,
		     const int64_t *shape); /* path: DIR/FILE, or FILE when dir is NULL */
void cli_json_outputs_end(cli_jw *w);
/* Writes s as a JSON string literal (quotes included). */
void cli_json_quote(FILE *f, const char *s);

/* Parses text (len bytes; strict RFC 8259, no duplicate member names, depth <= 64) into a jansson
 * document (json_decref it), or NULL with err "line L column C: why". Integers beyond 2^63 - 1
 * make every number of the document a real. */
json_t *cli_json_load(const char *text, size_t len, fos_err *err);

/* ---- the latency histogram (cli_hist.c) ---------------------------------------------------- */

/* A log-linear (HDR-style) histogram of non-negative 64-bit integers (nanoseconds here): exact below
 * 256, then 128 sub-buckets per power of two, so every value is known to within 1/128 (< 0.8 %)
 * of itself. Fixed size (CLI_HIST_BUCKETS counters), no allocation after init, O(1) record. */
#define CLI_HIST_SUB_BITS 7
#define CLI_HIST_SUB (1u << CLI_HIST_SUB_BITS)
#define CLI_HIST_BUCKETS ((64 - CLI_HIST_SUB_BITS + 1) * CLI_HIST_SUB)

typedef struct cli_hist {
	uint64_t count;
	uint64_t min, max; /* exact; min = UINT64_MAX when empty */
	double sum;
	uint64_t *buckets; /* CLI_HIST_BUCKETS */
} cli_hist;

int cli_hist_init(cli_hist *h);       /* FOS_OK or FOS_ENOMEM */
void cli_hist_free(cli_hist *h);
void cli_hist_reset(cli_hist *h);
void cli_hist_record(cli_hist *h, uint64_t v);
void cli_hist_merge(cli_hist *dst, const cli_hist *src);
/* Bucket index of v, and the inclusive value range [lo, hi] a bucket covers. */
size_t cli_hist_index(uint64_t v);
void cli_hist_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi);
/* The value at percentile p (0..100): the highest value equivalent to the bucket that holds the
 * ceil(p/100 * count)-th smallest recorded value, clamped to [min, max]; 0 when empty. */
uint64_t cli_hist_percentile(const cli_hist *h, double p);
double cli_hist_mean(const cli_hist *h);

/* ---- quantize (cli_quantize.c) --------------------------------------------------------------- */

/* A quantized tensor in host memory: codes (rows, cols/2), scales (rows, cols/16), amax (1 or rows). */
typedef struct cli_qhost {
	int64_t rows, cols;
	int row_scaled;
	uint8_t *codes;
	uint8_t *scales;
	float *amax;
} cli_qhost;

typedef struct cli_quantize_job {
	const cli_global *g;  /* remote: the server */
	const char *backend;  /* local: cpu | cuda | auto */
	const void *x;        /* (rows, cols) of x_dtype, host memory */
	int x_dtype;          /* FOS_BF16 or FOS_F32 */
	int64_t rows, cols;
	fos_qcfg cfg;
	const float *amax;    /* NULL, or the --amax override: 1 float, or rows when cfg.row_scaled */
} cli_quantize_job;

/* Fills out->codes / scales / amax (caller-allocated to the sizes above). */
int cli_quantize_local(const cli_quantize_job *job, cli_qhost *out, fos_err *err);
int cli_quantize_remote(const cli_quantize_job *job, cli_qhost *out, fos_err *err);
int cli_quantize_main(const cli_global *g, int argc, char **argv);

/* ---- dequantize (cli_dequantize.c) ----------------------------------------------------------- */

typedef struct cli_dequantize_job {
	const cli_global *g;
	const char *backend;
	cli_qhost q; /* inputs (not owned) */
	int bound;   /* 256 or 448 */
	int out_dtype; /* FOS_BF16 or FOS_F32 */
} cli_dequantize_job;

/* Fills out (rows * cols elements of out_dtype, caller-allocated). */
int cli_dequantize_local(const cli_dequantize_job *job, void *out, fos_err *err);
int cli_dequantize_remote(const cli_dequantize_job *job, void *out, fos_err *err);
int cli_dequantize_main(const cli_global *g, int argc, char **argv);

/* ---- linear (cli_linear.c) ------------------------------------------------------------------- */

typedef struct cli_linear_job {
	const cli_global *g;
	const char *backend;
	int64_t m, n, k;
	const uint16_t *x;    /* (M, K) bf16 */
	const uint16_t *w;    /* (N, K) bf16 */
	const uint16_t *bias; /* (N) bf16 or NULL */
	const uint16_t *dy;   /* (M, N) bf16 or NULL: forward only */
	fos_linear_opts opts;
	int shm;              /* remote: tensors through a shared-memory region (cli_shm.h) */
} cli_linear_job;

/* Caller-allocated host outputs: y (M, N); with dy: dx (M, K), dw (N, K), and db (N) with bias. */
typedef struct cli_linear_out {
	uint16_t *y, *dx, *dw, *db;
} cli_linear_out;

int cli_linear_local(const cli_linear_job *job, cli_linear_out *out, fos_err *err);
int cli_linear_remote(const cli_linear_job *job, cli_linear_out *out, fos_err *err);
int cli_linear_main(const cli_global *g, int argc, char **argv);

/* ---- the daemon-only subcommands ------------------------------------------------------------ */

/* The start of a daemon-only subcommand: parses argv against cmd, then connects to fosd. Returns 1
 * with *c open; or 0 with *exit_status the status to exit with (help shown: CLI_EXIT_OK; bad command
 * line: CLI_EXIT_USAGE; no connection: CLI_EXIT_FAIL), its message already printed (cli_info.c). */
int cli_parse_connect(const cli_global *g, cli_cmd *cmd, int argc, char **argv, fos_client **c, int *exit_status);
int cli_health_main(const cli_global *g, int argc, char **argv);       /* cli_info.c */
int cli_stats_main(const cli_global *g, int argc, char **argv);        /* cli_info.c */
int cli_put_weight_main(const cli_global *g, int argc, char **argv);   /* cli_weights.c */
int cli_drop_weight_main(const cli_global *g, int argc, char **argv);  /* cli_weights.c */
int cli_list_weights_main(const cli_global *g, int argc, char **argv); /* cli_weights.c */
int cli_forward_main(const cli_global *g, int argc, char **argv);      /* cli_forward.c */
int cli_backward_main(const cli_global *g, int argc, char **argv);     /* cli_backward.c */
int cli_check_main(const cli_global *g, int argc, char **argv);        /* cli_check.c */
int cli_load_main(const cli_global *g, int argc, char **argv);         /* cli_load.c */

/* ---- the load tester (cli_load.c runs it, cli_load_report.c reports it) --------------------- */

enum { CLI_LOAD_FORWARD, CLI_LOAD_BACKWARD, CLI_LOAD_LINEAR, CLI_LOAD_QUANTIZE, CLI_LOAD_CHECK };

typedef struct cli_load_cfg {
	int op;               /* CLI_LOAD_* */
	int64_t m, n, k;
	int override;         /* FOS_OVERRIDE_* (forward, backward, linear) */
	int concurrency;      /* closed loop: requests in flight; open loop: most in flight */
	double rate;          /* open loop: requests per second; 0: closed loop */
	uint64_t duration_ns; /* measured time (0 with requests) */
	uint64_t requests;    /* measured requests (0 with duration_ns) */
	uint64_t warmup_ns;
	int connections;      /* client handles the workers share */
	int json, progress;
	const char *server;
	int shm;              /* inputs and outputs in shared-memory regions (--shm) */
	int channel;          /* each connection opens a request channel (--channel) */
	int device;           /* inputs and outputs in GPU memory, as device tensors (--device) */
} cli_load_cfg;

typedef struct cli_load_result {
	uint64_t measured;     /* requests in the measured window (sent at or after the warmup) */
	uint64_t ok;           /* of those, answered OK */
	uint64_t failed;       /* every failed request, warmup included */
	uint64_t warmup;       /* requests made during the warmup */
	uint64_t due;          /* open loop: requests due in the measured window */
	uint64_t unsent;       /* open loop: of those, never sent (the client fell too far behind) */
	uint64_t by_code[FOS_STATS_CODES]; /* failures by status code, warmup included */
	char first_error[600]; /* the first failure's message */
	uint64_t elapsed_ns;   /* measured window: warmup end to the last measured reply */
	uint64_t bytes_per_request; /* request + reply tensor bytes */
	uint64_t max_send_lag_ns;   /* open loop: the latest a request went out after its intended time */
	int interrupted;
	int unavailable;       /* stopped because fosd stayed unavailable (draining or gone) */
	uint64_t unavailable_ns;    /* for this long */
	char unavailable_why[300];  /* the last failure then */
	cli_hist latency;      /* OK measured requests: closed loop from send, open loop from the
				* intended send time (coordinated omission corrected) */
	cli_hist service;      /* OK measured requests, from the actual send */
	char weight[64];       /* the weight it registered ("" for linear / quantize) */
} cli_load_result;

const char *cli_load_op_name(int op);
/* fos load's command line into cfg (cli_load_args.c): -1 to run, else the exit status to return
 * (help printed, or a bad flag reported). */
int cli_load_args(const cli_global *g, int argc, char **argv, cli_load_cfg *cfg, fos_err *err);
/* Writes the final report (text, or JSON with cfg->json) to f. */
void cli_load_report(const cli_load_cfg *cfg, const cli_load_result *r, FILE *f);

/* ---- the context file (cli_context.c) ------------------------------------------------------- */

/* What `fos forward --context-out` writes and `fos backward` reads: the fos_context fields, the
 * server that holds the context, and the forward's X and bias files (for a recompute). */
typedef struct cli_ctxfile {
	fos_context ctx;
	char server[512];
	char x_path[PATH_MAX];    /* absolute path of the forward's X.npy, or "" */
	char bias_path[PATH_MAX]; /* absolute path of the forward's bias, or "" */
} cli_ctxfile;

int cli_ctxfile_write(const char *path, const cli_ctxfile *cf, fos_err *err);
int cli_ctxfile_read(const char *path, cli_ctxfile *cf, fos_err *err);

#endif
