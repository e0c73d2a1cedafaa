/* cli_shm.h: --shm of the remote subcommands (fos forward, linear, backward): one shared-memory
 * region per command, registered with fosd on the command's connection, that holds the inputs
 * (each copied in once) and the room for the outputs (fosd writes them in place; the command saves
 * them to their .npy files from there). Results are bit-identical to the inline path. */
#ifndef FOS_CLI_SHM_H
#define FOS_CLI_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "fos.h"

typedef struct cli_shm {
	fos_region *r;
	size_t size, used;
} cli_shm;

/* The bytes a tensor of bytes takes in the region (64-byte aligned slots). */
size_t cli_shm_slot(size_t bytes);
/* Creates and registers a region of size bytes on c (an ipc:// connection). */
int cli_shm_open(fos_client *c, size_t size, cli_shm *s, fos_err *err);
/* An input in the region: copies t's bytes into the next slot; the result names the region. */
fos_tensor cli_shm_in(cli_shm *s, const fos_tensor *t);
/* An output in the region: the next slot, room for a (d0, d1) tensor of dtype (d1 <= 0: 1-D). */
fos_tensor cli_shm_out(cli_shm *s, int dtype, int64_t d0, int64_t d1);
/* Unregisters and unmaps the region (NULL region: nothing). */
void cli_shm_close(cli_shm *s);

#endif
