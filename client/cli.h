/* cli.h: the pieces of the `fos` command line tool shared between its files: the flag parser, error
 * reporting, .npy loading / checking / writing helpers, and each subcommand's job description.
 *
 * Every subcommand is split the same way so that a daemon path can be added beside the local one
 * without touching the rest:
 *   cli_X_main      parse flags -> check options -> load and check the .npy inputs -> run -> write
 *   cli_X_local     the computation in this process, on a backend from kernels/backend.h; it takes
 *                   a cli_X_job (inputs in host memory, already checked) and fills caller-allocated
 *                   host buffers. A cli_X_remote with the same signature (through libfos) is the
 *                   only thing the daemon path needs to add.
 * Only cli_main.c prints; the helpers return fos_err messages. */
#ifndef FOS_CLI_H
#define FOS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "npy.h"

/* Exit statuses. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Global options (before the command). */
typedef struct cli_global {
	const char *server; /* --server, $FOS_SERVER, or CLI_DEFAULT_SERVER */
	const char *token;  /* --token, $FOS_TOKEN, or NULL */
} cli_global;

#define CLI_DEFAULT_SERVER "ipc:///tmp/fosd.sock"

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
/* The flag named name (which must exist in c). */
cli_flag *cli_flag_of(cli_cmd *c, const char *name);
/* Maps f->value through names[i] -> values[i]; when the flag was not given *out is left alone. */
int cli_choice(const cli_flag *f, int n, const char *const *names, const int *values, int *out, fos_err *err);

/* Shared option parsers: --backend (cpu|cuda|auto), --err, --bound, block modes, --override. */
int cli_opt_backend(const cli_flag *f, const char **out, fos_err *err);
int cli_opt_err_mode(const cli_flag *f, int *out, fos_err *err);
int cli_opt_bound(const cli_flag *f, int *out, fos_err *err);
int cli_opt_block(const cli_flag *f, int *out, fos_err *err);
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
/* The daemon path: not available in this build yet. Fills err; returns CLI_EXIT_USAGE. */
int cli_remote_unavailable(const cli_global *g, const char *cmd, fos_err *err);

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
	const char *backend;  /* local: cpu | cuda | auto */
	const void *x;        /* (rows, cols) of x_dtype, host memory */
	int x_dtype;          /* FOS_BF16 or FOS_F32 */
	int64_t rows, cols;
	fos_qcfg cfg;
	const float *amax;    /* NULL, or the --amax override: 1 float, or rows when cfg.row_scaled */
} cli_quantize_job;

/* Fills out->codes / scales / amax (caller-allocated to the sizes above). */
int cli_quantize_local(const cli_quantize_job *job, cli_qhost *out, fos_err *err);
int cli_quantize_main(const cli_global *g, int argc, char **argv);

/* ---- dequantize (cli_dequantize.c) ----------------------------------------------------------- */

typedef struct cli_dequantize_job {
	const char *backend;
	cli_qhost q; /* inputs (not owned) */
	int bound;   /* 256 or 448 */
	int out_dtype; /* FOS_BF16 or FOS_F32 */
} cli_dequantize_job;

/* Fills out (rows * cols elements of out_dtype, caller-allocated). */
int cli_dequantize_local(const cli_dequantize_job *job, void *out, fos_err *err);
int cli_dequantize_main(const cli_global *g, int argc, char **argv);

/* ---- linear (cli_linear.c) ------------------------------------------------------------------- */

typedef struct cli_linear_job {
	const char *backend;
	int64_t m, n, k;
	const uint16_t *x;    /* (M, K) bf16 */
	const uint16_t *w;    /* (N, K) bf16 */
	const uint16_t *bias; /* (N) bf16 or NULL */
	const uint16_t *dy;   /* (M, N) bf16 or NULL: forward only */
	fos_linear_opts opts;
} cli_linear_job;

/* Caller-allocated host outputs: y (M, N); with dy: dx (M, K), dw (N, K), and db (N) with bias. */
typedef struct cli_linear_out {
	uint16_t *y, *dx, *dw, *db;
} cli_linear_out;

int cli_linear_local(const cli_linear_job *job, cli_linear_out *out, fos_err *err);
int cli_linear_main(const cli_global *g, int argc, char **argv);

#endif
