/* npy.h: reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0), for the dtypes fos
 * uses: '<u2' (bf16 bit patterns), '<f4' (float32) and '|u1' / '<u1' (uint8 codes and scales), in C
 * order (fortran_order False), any rank up to NPY_MAX_DIMS (0-d included).
 *
 * Every malformed file is an error with a message (in err->msg), never a crash or an abort; the
 * functions never print. Data is loaded whole into one 64-byte aligned buffer. Little-endian hosts
 * only (checked at compile time). */
#ifndef FOS_NPY_H
#define FOS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h" /* fos_err, FOS_* return codes */

#ifdef __cplusplus
extern "C" {
#endif

enum npy_dtype { NPY_U1 = 0, NPY_U2 = 1, NPY_F4 = 2 };

#define NPY_MAX_DIMS 8
/* A header longer than this is refused (numpy's own default limit is 10000 bytes). */
#define NPY_MAX_HEADER (1u << 20)

typedef struct npy_array {
	int dtype;                      /* enum npy_dtype */
	int ndim;                       /* 0 .. NPY_MAX_DIMS */
	int64_t shape[NPY_MAX_DIMS];    /* shape[0 .. ndim-1]; unused entries 0 */
	size_t count;                   /* number of elements (1 for 0-d) */
	size_t nbytes;                  /* count * element size */
	void *data;                     /* owned; free with npy_free (NULL after parse_header) */
} npy_array;

/* Element size in bytes (1, 2 or 4) and the descr fos writes ("|u1", "<u2", "<f4"). */
size_t npy_dtype_size(int dtype);
const char *npy_dtype_descr(int dtype);
/* Human name: "uint8 ('|u1')", "bf16 ('<u2')", "float32 ('<f4')". */
const char *npy_dtype_human(int dtype);

/* Parses the preamble and header at the start of buf (len bytes available; the data need not be
 * there). Fills everything in *a but data, and *data_offset with where the data starts. */
int npy_parse_header(const void *buf, size_t len, npy_array *a, size_t *data_offset, fos_err *err);

/* Reads a whole .npy held in memory: exactly header + data, nothing missing, nothing after. */
int npy_read_mem(const void *buf, size_t len, npy_array *a, fos_err *err);

/* Reads path, a regular file only (regfile.h: a FIFO or device is refused before any read);
 * messages start with the path ("X.npy: ..."). *a is zeroed on failure. */
int npy_read(const char *path, npy_array *a, fos_err *err);
/* The same, refusing an array of more than max_count elements from its header, before its data
 * is read or allocated (what: the limit's name in the message, e.g. "max_message_bytes 1 GiB as
 * bf16"). */
int npy_read_max(const char *path, uint64_t max_count, const char *what, npy_array *a, fos_err *err);

/* Builds the version 1.0 (2.0 when needed) preamble + header for (dtype, ndim, shape) into buf, as
 * numpy writes it (padded with spaces and a newline to a multiple of 64 bytes). Returns its length,
 * or 0 when cap is too small or the arguments are invalid. */
size_t npy_header_build(char *buf, size_t cap, int dtype, int ndim, const int64_t *shape);

/* Writes an array to path (through a temporary file in the same directory, renamed into place, so a
 * failed write leaves no partial file). data holds prod(shape) elements. */
int npy_write(const char *path, int dtype, int ndim, const int64_t *shape, const void *data, fos_err *err);

/* "(3, 4)", "(5,)", "()" into buf (always NUL-terminated); returns buf. */
char *npy_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* Frees a->data and zeroes *a. Safe on a zeroed array. */
void npy_free(npy_array *a);

#ifdef __cplusplus
}
#endif
#endif
