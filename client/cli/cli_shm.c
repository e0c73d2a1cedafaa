/* cli_shm.c: --shm of the remote subcommands (see cli_shm.h). */
#include "cli_shm.h"
#include "cli.h"

#include <string.h>

size_t cli_shm_slot(size_t bytes)
{
	return (bytes + 63) / 64 * 64;
}

int cli_shm_open(fos_client *c, size_t size, cli_shm *s, fos_err *err)
{
	memset(s, 0, sizeof *s);
	fos_status st;
	if (fos_region_create(c, NULL, size ? size : 64, FOS_REGION_MEMFD, &s->r, &st)) {
		s->r = NULL;
		cli_status_err(&st, "--shm: creating a shared-memory region (it needs an ipc:// server on this host)",
			       err);
		return err->rc ? err->rc : FOS_EINVAL;
	}
	s->size = size;
	return FOS_OK;
}

static fos_tensor cli_shm_take(cli_shm *s, int dtype, int ndim, const int64_t *shape)
{
	fos_tensor t = fos_tensor_shm(s->r, s->used, dtype, shape[0], ndim == 2 ? shape[1] : 0);
	s->used += cli_shm_slot(t.size);
	return t;
}

fos_tensor cli_shm_in(cli_shm *s, const fos_tensor *in)
{
	fos_tensor t = cli_shm_take(s, in->dtype, in->ndim, in->shape);
	if (t.data) /* NULL when it does not fit: the call then fails INVALID_ARGUMENT */
		memcpy(t.data, in->data, fos_tensor_bytes(in));
	return t;
}

fos_tensor cli_shm_out(cli_shm *s, int dtype, int64_t d0, int64_t d1)
{
	int64_t shape[2] = {d0, d1};
	return cli_shm_take(s, dtype, d1 > 0 ? 2 : 1, shape);
}

void cli_shm_close(cli_shm *s)
{
	if (s->r) {
		fos_status st;
		fos_region_destroy(s->r, &st); /* a server that is gone is not an error */
	}
	memset(s, 0, sizeof *s);
}
