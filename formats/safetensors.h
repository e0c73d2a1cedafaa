/* safetensors.h: reading .safetensors checkpoints (the format of Hugging Face's safetensors: an
 * 8-byte little-endian header length H, H bytes of JSON naming each tensor's dtype, shape and byte
 * range, then the tensors' bytes), for `fos put-weight --safetensors` and fosd's weight repository.
 *
 * safet_open reads and checks the header only (jansson parses the JSON): every entry but
 * "__metadata__" is a tensor with a dtype string, a shape of at most SAFET_MAX_DIMS non-negative
 * integers and data_offsets [begin, end] inside the file whose length is the shape's element count
 * times the dtype's size (when fos knows the dtype's size), and no two tensors overlap. The tensors'
 * bytes are read one tensor at a time by safet_read_bf16. Every malformed file is an error with a
 * message starting with the path, never a crash; the functions never print. */
#ifndef FOS_SAFETENSORS_H
#define FOS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h" /* fos_err, FOS_* return codes */

#define SAFET_MAX_DIMS 8
/* A header longer than this is refused (the safetensors library's own limit is 100 MB). */
#define SAFET_MAX_HEADER (100u << 20)

enum safet_dtype { SAFET_OTHER = 0, SAFET_BF16, SAFET_F32 };

typedef struct safet_tensor {
	char *name;          /* the header's key (owned) */
	char dtype_name[16]; /* as written, e.g. "BF16", "F16" (cut at 15 bytes) */
	int dtype;           /* enum safet_dtype */
	int ndim;
	int64_t shape[SAFET_MAX_DIMS];
	uint64_t count;      /* elements: product of shape (1 for 0-d) */
	uint64_t begin, end; /* byte range, relative to the data after the header */
} safet_tensor;

typedef struct safet_file {
	int fd;
	char *path;          /* owned copy, for messages */
	uint64_t data_start; /* 8 + H */
	uint64_t data_len;   /* file size - data_start */
	size_t n;
	safet_tensor *t;     /* n tensors, in byte order of their names */
} safet_file;

/* Opens path and checks its header; *f is zeroed (fd -1) on failure. */
int safet_open(const char *path, safet_file *f, fos_err *err);

/* Reads tensor t (dtype BF16 or F32) as bf16 bit patterns into a malloc'd 64-byte aligned buffer of
 * t->count values (free with free()): F32 values are rounded to bf16 to nearest even, as the CLI
 * rounds a float32 .npy (fos_f32_to_bf16). */
int safet_read_bf16(const safet_file *f, const safet_tensor *t, uint16_t **out, fos_err *err);

/* Closes the file and frees everything; safe on a zeroed or failed file. */
void safet_close(safet_file *f);

/* "(3, 4)" of t's shape into buf (always NUL-terminated); returns buf. */
char *safet_shape_str(const safet_tensor *t, char *buf, size_t cap);

#endif
