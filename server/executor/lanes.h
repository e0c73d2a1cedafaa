/* lanes.h: what executor.c keeps per lane of a device beside its backend instance (lanes.c): the
 * connection whose asynchronous requests the lane runs, its pending list (pending.c), and its
 * tickets: requests begun and requests whose device work has completed, in the lane's order. The
 * device's retired frees (retire.h of the caches) wait on those tickets. */
#ifndef FOSD_LANES_H
#define FOSD_LANES_H

#include <stdatomic.h>
#include <stdint.h>

#include "executor.h"

typedef struct fosd_lane {
	struct fosd_pending *pend; /* its asynchronous requests' held resources (pending.c) */
	uint64_t owner;            /* the connection whose asynchronous requests it runs while its
				    * pending list is not empty (0: none); under lane_mu */
	uint64_t taken;            /* when an asynchronous request last took it (ns); under lane_mu */
	atomic_uint_fast64_t begun, ended; /* requests that took it; those whose work completed */
} fosd_lane;

/* Opens d's lanes (cfg->streams backend instances like d->be, lane 0 being d->be; at most 64),
 * their state below and the free instance. 0, or -1 with msg. */
int fosd_lanes_open(fosd_exec *srv, fosd_device *d, char *msg, size_t msgsz);
/* Settles and closes them (lane 0, d->be, stays). */
void fosd_lanes_close(fosd_device *d);
/* For fosd_lanes_open: d's lane states (one per d->lanes), its retire list and free instance (free_be:
 * the instance the caches free through, any thread); hooks the caches to the retire list. 0, or
 * -1 with msg. */
int fosd_lanes_state_open(fosd_device *d, fos_backend *free_be, char *msg, size_t msgsz);
/* Settles every lane, runs every retired free, unhooks the caches. free_be is the caller's. */
void fosd_lanes_state_close(fosd_device *d);
/* Tickets: a request took lane (before its op runs); its work completed (sync, settle or mark).
 * Ending one runs the retired frees whose every lane has ended what had begun. */
void fosd_lane_begun(fosd_device *d, int lane);
void fosd_lane_ended(fosd_device *d, int lane);
/* An asynchronous request's held resources on lane's pending list: released (and its ticket
 * ended) once a mark after its work completes. 0, or -1 with e (then released and ended here,
 * after the lane was synchronized). */
int fosd_lane_hold(fosd_device *d, int lane, fosd_job *s, fos_err *e);
/* With lane not running anything: synchronizes it when it holds pending work and releases that
 * work (ending its tickets). 0, or -1 with e (the device is broken: the items are released all
 * the same). */
int fosd_lane_settle_pending(fosd_device *d, int lane, fos_err *e);
/* Pending items on every lane; the reaper's poll of every lane (returns items with marks left). */
size_t fosd_lanes_pending(fosd_device *d);
size_t fosd_lanes_poll(fosd_device *d);
/* Under lane_mu: the lane for an asynchronous request of connection key: its own (-1 while that
 * runs with pending work), else a free one nobody holds, else the least recently taken free one
 * whose owner's pending work is done; -1: none now. */
int fosd_lane_pick_async(fosd_device *d, uint64_t key);

#endif
