/* pipeset.h: the connections (nng pipe ids) open now, for the tables that keep state per
 * connection (shm regions, device mappings): state is added only for a connection in the set, so
 * none outlives a connection's close. Not locked: the owning table's mutex guards every call.
 * Zero-initialized is empty. */
#ifndef FOSD_PIPESET_H
#define FOSD_PIPESET_H

#include <stddef.h>
#include <stdint.h>

typedef struct fosd_pipeset {
	uint32_t *ids;
	size_t n, cap;
} fosd_pipeset;

/* Adds pipe; 0, or -1 when out of memory (the set is unchanged). */
int fosd_pipeset_add(fosd_pipeset *s, uint32_t pipe);
/* Removes pipe (once; nothing when absent). */
void fosd_pipeset_remove(fosd_pipeset *s, uint32_t pipe);
/* 1 when pipe is in the set. */
int fosd_pipeset_has(const fosd_pipeset *s, uint32_t pipe);
/* Frees the set, leaving it empty. */
void fosd_pipeset_free(fosd_pipeset *s);

#endif
