/* pending.h: the requests of one device lane that were answered before their GPU work ended and whose
 * held resources wait for it (pending.c; executor.c's asynchronous requests, PROTOCOL.md
 * "Asynchronous requests"). */
#ifndef FOSD_PENDING_H
#define FOSD_PENDING_H

#include <stddef.h>

#include "backend.h"

#define FOSD_PENDING_MAX 64 /* requests held at once per lane; the 65th settles the lane first */

typedef struct fosd_pending fosd_pending;
/* Frees what an item holds (an executor's fosd_held). */
typedef void (*fosd_pending_release_fn)(void *item);

/* The list of one lane (be: its backend instance). */
fosd_pending *fosd_pending_new(fos_backend *be, fosd_pending_release_fn release);
/* Settles (fosd_pending_settle) and frees the list. NULL is fine. */
void fosd_pending_free(fosd_pending *p);
/* By the lane's running asynchronous request, after it queued its work: records a
 * mark after that work and keeps item until the mark completes (or the next settle). A full list
 * is settled first. Returns 0, or -1 with e when the mark could not be recorded (item is then not
 * kept: the caller settles and releases it). */
int fosd_pending_add(fosd_pending *p, void *item, fos_err *e);
/* With the lane idle (or by its running request): when anything is pending, synchronizes it and
 * releases every item. 0, or -1 with e when the sync failed (the items are released all the
 * same: no work of theirs can run any more). */
int fosd_pending_settle(fosd_pending *p, fos_err *e);
/* Any thread: releases the items whose marks completed, oldest first. Returns how many items
 * with a mark remain (for the poller: 0 means nothing to look at again). */
size_t fosd_pending_poll(fosd_pending *p);
/* Items pending now (0 for NULL). */
size_t fosd_pending_count(fosd_pending *p);

#endif
