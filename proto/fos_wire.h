/* fos_wire.h: the message framing shared by libfos and fosd (internal, not installed).
 *
 * One nng message body is
 *   [u32 LE header length H][H bytes packed protobuf][zero pad to a multiple of 64][data section]
 * The data section starts at fosw_data_start(H) = round_up(4 + H, 64). Each Tensor header names
 * its bytes by (offset, length) relative to the data section; offsets are multiples of 64. */
#ifndef FOS_WIRE_H
#define FOS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "fos.pb-c.h"

#define FOSW_ALIGN 64u
#define FOSW_MAX_HEADER (1u << 20) /* protobuf headers larger than 1 MiB are refused */
#define FOSW_MAX_DIMS 2

static inline uint64_t fosw_align(uint64_t x)
{
	return (x + FOSW_ALIGN - 1) & ~(uint64_t)(FOSW_ALIGN - 1);
}

static inline uint64_t fosw_data_start(size_t hlen)
{
	return fosw_align(4 + (uint64_t)hlen);
}

/* Bytes per element of a wire dtype (Fos__DType); 0 for an unknown dtype. DTYPE_U8 counts bytes. */
size_t fosw_dtype_size(int dtype);
const char *fosw_dtype_name(int dtype);
/* Name of a gRPC status code ("NOT_FOUND"), "UNKNOWN_CODE" when out of range. */
const char *fosw_code_name(int code);

/* Splits a received body into header and data section. Returns 0, or -1 with msg filled (the
 * reason, for an INVALID_ARGUMENT status). */
int fosw_split(const void *body, size_t len, const uint8_t **hdr, size_t *hlen, const uint8_t **data,
	       size_t *dlen, char *msg, size_t msgsz);

/* A checked view of one tensor of a received message. */
typedef struct fosw_tensor {
	int dtype;               /* Fos__DType */
	int ndim;
	int64_t shape[FOSW_MAX_DIMS];
	const uint8_t *ptr;      /* in the received message (only 4-byte aligned), or a shm region */
	size_t len;
	void *shm;               /* fosd: the shared-memory region ptr lies in (NULL: inline) */
	void *cuda;              /* fosd: the client GPU allocation ptr lies in (ptr a device address) */
} fosw_tensor;

/* Resolves t against a data section of dlen bytes: dtype known, 1..FOSW_MAX_DIMS dims each >= 1,
 * product(shape) * size == length without overflow, offset a multiple of 64, offset + length
 * inside the data section, no shared-memory reference. *max_end is raised to offset + length.
 * what names the field in messages ("x", "dy", ...). Returns 0 or -1 with msg filled, and
 * *code the status code (INVALID_ARGUMENT, or UNIMPLEMENTED for shm). */
int fosw_tensor_get(const Fos__Tensor *t, const uint8_t *data, size_t dlen, const char *what, fosw_tensor *out,
		    uint64_t *max_end, int *code, char *msg, size_t msgsz);

/* Checks that the data section has no unreferenced bytes beyond the last tensor (pad allowed). */
int fosw_check_trailing(uint64_t max_end, size_t dlen, char *msg, size_t msgsz);

/* Building an outgoing message: describe each tensor with fosw_tensor_init (offsets placed by a
 * cursor), then fosw_msg_build packs the header and allocates a message with room for the data
 * section; the caller writes each tensor at data + offset. */
#define FOSW_MAX_TENSORS 8
typedef struct fosw_placer {
	uint64_t cursor;
	int n;
	uint64_t gap_at[FOSW_MAX_TENSORS], gap_len[FOSW_MAX_TENSORS]; /* padding after each tensor */
} fosw_placer;

/* Fills t (dtype, shape copied into shape_store, offset placed, length) and returns the offset. */
uint64_t fosw_tensor_init(Fos__Tensor *t, int64_t *shape_store, fosw_placer *pl, int dtype, int ndim,
			  const int64_t *shape);
/* Length of the tensor in bytes (product of shape times dtype size). */
uint64_t fosw_shape_bytes(int dtype, int ndim, const int64_t *shape);

/* Packs hdr and allocates msg = [len][hdr][pad][pl->cursor bytes]; *data points at the data
 * section, whose padding between tensors is zeroed (the tensors' bytes are the caller's to write).
 * pl may be NULL for a message without tensors. Returns 0 or an nng error code. */
int fosw_msg_build(const ProtobufCMessage *hdr, const fosw_placer *pl, nng_msg **out, uint8_t **data);

#endif
