/* support_server.h: test helpers for the daemon tests: start a real fosd (from the build dir) on a
 * private ipc socket in a temporary directory, stop it with a signal and collect its exit status,
 * deterministic bf16 test data, and the same linear layer computed in-process (the reference the
 * daemon's results must equal bit for bit). */
#ifndef FOS_SUPPORT_SERVER_H
#define FOS_SUPPORT_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <sys/types.h>

#include "backend.h"

typedef struct tsrv {
	pid_t pid;
	char dir[256];  /* temporary directory */
	char url[320];  /* ipc://DIR/fosd.sock */
	char log[320];  /* DIR/fosd.log: the daemon's stderr */
} tsrv;

/* The build directory: $FOS_BUILD, else two levels above this test binary (BUILD/tests/test_x). */
const char *tsrv_build_dir(void);

/* Starts BUILD/fosd --backend B --threads 2 --listen URL [extra args...] (NULL-terminated list) and waits
 * until it answers Health (up to 15 s). Returns 0, or -1 (the log is printed to stderr). */
int tsrv_start(tsrv *s, const char *const *extra_args);
/* The command line tsrv_start runs: bin (binsz bytes) gets BUILD/fosd, argv (64 entries) the
 * arguments, NULL-terminated. */
void tsrv_fosd_argv(const tsrv *s, const char *const *extra, char *bin, size_t binsz, const char **argv);
/* Sends sig and waits up to timeout_ms for the exit; returns the exit status (0..255), 128+signal
 * if it was killed by a signal, or -1 on timeout (it is then SIGKILLed). */
int tsrv_stop(tsrv *s, int sig, int timeout_ms);
/* Stops the daemon if still running (SIGKILL) and removes the temporary directory (kept, with
 * the daemon's log, when $FOS_TEST_KEEP is set). */
void tsrv_cleanup(tsrv *s);
/* Prints the daemon's log to stderr (for failing tests). */
void tsrv_dump_log(const tsrv *s);
/* 1 when the log contains needle. */
int tsrv_log_contains(const tsrv *s, const char *needle);

/* Deterministic pseudo-random bf16 values, roughly normal with standard deviation scale. */
void tsrv_fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale);

/* The backend the tests use: $FOS_TEST_BACKEND (cpu, cuda or auto), cpu by default; the daemon
 * and the in-process reference use the same one, so their results must agree bit for bit. */
const char *tsrv_backend_name(void);
/* The in-process reference backend (cpu: 2 threads), shared by a test's threads behind a lock. */
fos_backend *tsrv_ref_backend(void);

/* Reference forward (+ backward when dy != NULL) of one linear layer, exactly as fosd computes it
 * for Linear (one-shot) and for Forward/Backward on a cached weight. Host buffers; dx/dw/db may be
 * NULL when dy is NULL, db NULL without bias. Returns FOS_OK or the error. */
int tsrv_ref_linear(const uint16_t *x, const uint16_t *w, const uint16_t *bias, const uint16_t *dy, int64_t m,
		    int64_t n, int64_t k, const fos_linear_opts *o, uint16_t *y, uint16_t *dx, uint16_t *dw,
		    uint16_t *db);

/* Reference quantize of x (rows, cols) of dtype (FOS_BF16 / FOS_F32) into host buffers. */
int tsrv_ref_quantize(const void *x, int dtype, int64_t rows, int64_t cols, const fos_qcfg *cfg,
		      const float *amax_in, uint8_t *codes, uint8_t *scales, float *amax);
/* Reference dequantize into out (rows * cols of out_dtype). */
int tsrv_ref_dequantize(const uint8_t *codes, const uint8_t *scales, const float *amax, int64_t rows, int64_t cols,
			int bound, int row_scaled, int out_dtype, void *out);

/* Connects to s's fosd, puts the bf16 weight name (version 1, n rows by k columns) from w and
 * closes the connection. Returns 0, or -1 with the status printed to stderr. */
int tsrv_put_weight_bf16(const tsrv *s, const char *name, int64_t n, int64_t k, const uint16_t *w);

/* Milliseconds since an arbitrary start (CLOCK_MONOTONIC). */
uint64_t tsrv_now_ms(void);

/* A TCP connection to 127.0.0.1:port with send and receive timeouts of timeout_s seconds (the
 * HTTP endpoint tests). Returns the descriptor or -1. */
int tsrv_tcp_connect(int port, int timeout_s);

#endif
