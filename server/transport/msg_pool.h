/* msg_pool.h: the pool that nng's large message bodies come from (msg_pool.c). */
#ifndef FOSD_MSG_POOL_H
#define FOSD_MSG_POOL_H

#include "shm.h"

#include <stddef.h>
#include <stdint.h>

#define FOSD_MSGPOOL_MIN ((size_t)1 << 20)          /* bodies of 1 MiB and more come from the pool */
#define FOSD_MSGPOOL_KEEP ((uint64_t)1 << 30)        /* default: free bytes kept mapped for reuse */
#define FOSD_MSGPOOL_MAX_PINNED ((uint64_t)16 << 30) /* bytes pinned in all; beyond, unpinned */

typedef struct fosd_msgpool_stats {
	uint64_t taken, reused, mapped_new; /* buffers handed out; of them reused; freshly mapped */
	uint64_t bytes_free, bytes_used;    /* mapped now: kept for reuse, holding a message */
	uint64_t bytes_pinned;              /* of both, registered with the device */
	uint64_t pin_failures;
	int active;                         /* 0 where the wraps are not linked in */
} fosd_msgpool_stats;

/* How many free bytes stay mapped for the next message (default FOSD_MSGPOOL_KEEP). */
void fosd_msgpool_set_keep(uint64_t bytes);
/* Pins every buffer (the ones held now when they are next reused) with hook, which must stay
 * valid until fosd_msgpool_unpin_all; NULL pins nothing. */
void fosd_msgpool_set_pin(const fosd_pin_hook *hook);
/* Unpins and unmaps every free buffer and stops pinning: before the backend goes away. */
void fosd_msgpool_unpin_all(void);
void fosd_msgpool_get_stats(fosd_msgpool_stats *out);

#endif
