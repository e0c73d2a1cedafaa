/* support_wcache.h: the layer-level pieces the weight-cache-uses suites share on any backend
 * (tests/test_wcache_uses.c on the CPU backend, tests/gpu_wcache.c on CUDA): device buffers from
 * and to host memory, the use/override tables, the operands the old cache kept (the `decoded`
 * outputs of W's quantizes), the old forward path, one layer's forward and backward for an
 * override on a weight made for given uses, and the check that every override gives the same
 * results on a weight made for just its use as on one made for every use and is refused naming the
 * use without it. Every failure fails the test (cmocka); include after cmocka.h. */
#ifndef FOS_SUPPORT_WCACHE_H
#define FOS_SUPPORT_WCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* n bytes of host memory h copied into a new buffer of be. */
void *twc_put(fos_backend *be, const void *h, size_t n);
/* n bytes of be's buffer d copied into new host memory (free it). */
void *twc_get(fos_backend *be, const void *d, size_t n);

/* The three uses beyond forward, the override that needs each, and each use's name. */
extern const int twc_one_use[3];
extern const int twc_overrides[3];
extern const char *const twc_use_names[3];

/* The old cache's operands of the (n, k) weight w on be: the `decoded` output of the rowwise
 * quantize (*rowdec), of the columnwise quantize of W^T with W's amax (*coldec), and the rowwise
 * codes (*qrow). All three are be's; free them. */
void twc_old_operands(fos_backend *be, const uint16_t *w, int64_t n, int64_t k, const fos_linear_opts *o,
		      uint16_t **rowdec, uint16_t **coldec, fos_qtensor *qrow);
/* Y (host memory; free it) of the old path on be: X (xd, be's, m rows) quantized with its decoded
 * output, then the GEMM against rowdec with qrow's amax and bias. */
uint16_t *twc_old_forward(fos_backend *be, const void *xd, int64_t m, int64_t n, int64_t k,
			  const fos_linear_opts *o, const fos_qtensor *qrow, const uint16_t *rowdec, const uint16_t *bias);

/* The forward of an (n, k) layer (random W, X and bias) on a weight made for each of the nu use
 * sets uses[], at each of the nm row counts ms[] (ascending), with and without row-scaled X,
 * equals twc_old_forward bit for bit, each way (a buffer per call, the scratch *ws, the old
 * decoded copy) reps times over (a CUDA backend records the small forwards, then replays them). */
void twc_check_forward_old_path(fos_backend *be, int64_t n, int64_t k, const int64_t *ms, int nm, const int *uses,
				int nu, int reps, fos_wscratch *ws);

/* One layer's results, host memory. */
typedef struct twc_lres {
	uint16_t *y, *dx, *dw, *db;
} twc_lres;
void twc_lres_free(twc_lres *r);

/* Forward (saving) and backward on be of override ovr (row-scaled X when rs) on a weight made for
 * uses, with a reused scratch when with_ws; the rc of the first failing step (0: r filled), e its
 * message. */
int twc_run_layer(fos_backend *be, const uint16_t *w, const uint16_t *x, const uint16_t *dy, const uint16_t *b,
		  int64_t m, int64_t n, int64_t k, int ovr, int rs, int uses, int with_ws, twc_lres *r, fos_err *e);

/* Weight case c (0..5) of the decode tests: w (n, k) filled with one of three value kinds
 * (randn, heavy-tailed, negative zeros) and *o with one of the two weight blocks and the kind's
 * error mode and bound. */
void twc_decode_case(int c, int64_t n, int64_t k, uint16_t *w, fos_linear_opts *o);

/* For each override at m rows (row-scaled X for high_precision when hp_row_scaled): Y, dX, dW and
 * db on a weight made for just its use, with and without a scratch, equal those on a weight made
 * for every use; made for every use but that one, the layer is refused FOS_EINVAL naming the use. */
void twc_check_overrides(fos_backend *be, const uint16_t *w, const uint16_t *x, const uint16_t *dy,
			 const uint16_t *b, int64_t m, int64_t n, int64_t k, int hp_row_scaled);

/* twc_check_overrides at ms[0] and ms[1] rows (row-scaled X for high_precision at ms[1]) of an
 * (n, k) layer with random W, X, dY and bias (X and dY with ms[1] rows). */
void twc_check_overrides_at(fos_backend *be, int64_t n, int64_t k, const int64_t ms[2]);

#endif
