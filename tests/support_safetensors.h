/* support_safetensors.h: a small .safetensors writer for the tests, written from the format's
 * description (8-byte little-endian header length, JSON header, data) and independent of the
 * reader under test (formats/safetensors.c). */
#ifndef FOS_SUPPORT_SAFETENSORS_H
#define FOS_SUPPORT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tst_in {
	const char *name, *dtype; /* e.g. "BF16", "F32", "F16" */
	int ndim;                 /* 1 or 2 */
	int64_t d0, d1;
	const void *data;
	size_t bytes;
} tst_in;

/* Writes the n tensors to path, their data back to back in order, the header padded with spaces
 * to a multiple of 8 bytes. extra_data: bytes the last tensor's data_offsets claim beyond what is
 * written (a truncated file). header_override (not NULL): written as the header instead. Returns
 * 0 or -1. */
int tst_write(const char *path, const tst_in *t, int n, uint64_t extra_data, const char *header_override);

#endif
