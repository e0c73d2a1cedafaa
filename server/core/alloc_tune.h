/* alloc_tune.h: the heap's settings for fosd's messages (alloc_tune.c): large freed blocks kept in
 * the heap while fosd is busy, given back when it is idle. */
#ifndef FOSD_ALLOC_TUNE_H
#define FOSD_ALLOC_TUNE_H

#include <stdint.h>

/* alloc_tune.c: keeps large freed blocks in the heap (no mmap/munmap and page faults per large
 * message); FOSD_MALLOC_DEFAULT=1 in the environment keeps glibc's defaults. */
void fosd_tune_malloc(void);
/* Gives the heap's free pages back to the system (malloc_trim): the control loop calls it once
 * fosd has been idle for a while (control.c), so a warm heap is kept only while it is used.
 * Returns the resident bytes it gave back (0 when unknown). */
uint64_t fosd_alloc_idle_trim(void);

#endif
