/* support_safetensors.c: the tests' .safetensors writer (see support_safetensors.h). */
#include "support_safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tst_write(const char *path, const tst_in *t, int n, uint64_t extra_data, const char *header_override)
{
	size_t cap = 4096 + (size_t)n * 256, h = 0;
	char *hdr = malloc(cap);
	if (!hdr)
		return -1;
	uint64_t off = 0;
	h += (size_t)snprintf(hdr + h, cap - h, "{\"__metadata__\": {\"format\": \"pt\"}");
	for (int i = 0; i < n; i++) {
		uint64_t end = off + t[i].bytes + (i == n - 1 ? extra_data : 0);
		char shape[64];
		if (t[i].ndim == 2)
			snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t[i].d0, (long long)t[i].d1);
		else
			snprintf(shape, sizeof shape, "[%lld]", (long long)t[i].d0);
		h += (size_t)snprintf(hdr + h, cap - h, ", \"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%llu, %llu]}",
				      t[i].name, t[i].dtype, shape, (unsigned long long)off, (unsigned long long)end);
		off += t[i].bytes;
	}
	h += (size_t)snprintf(hdr + h, cap - h, "}");
	if (header_override)
		h = (size_t)snprintf(hdr, cap, "%s", header_override);
	while (h % 8 && h < cap)
		hdr[h++] = ' ';
	FILE *f = fopen(path, "wb");
	int bad = !f;
	unsigned char lenb[8];
	for (int i = 0; i < 8; i++)
		lenb[i] = (unsigned char)((uint64_t)h >> (8 * i));
	if (f) {
		bad |= fwrite(lenb, 1, 8, f) != 8 || fwrite(hdr, 1, h, f) != h;
		for (int i = 0; i < n && !bad; i++)
			bad |= fwrite(t[i].data, 1, t[i].bytes, f) != t[i].bytes;
		bad |= fclose(f) != 0;
	}
	free(hdr);
	return bad ? -1 : 0;
}
