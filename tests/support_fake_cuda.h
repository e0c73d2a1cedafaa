/* support_fake_cuda.h: the fake CUDA driver of the libfos device-tensor tests
 * (support_fake_cuda.c): a table of allocations, counters of the calls, the driver table to hand
 * fosc_cuda_override. */
#ifndef FOS_SUPPORT_FAKE_CUDA_H
#define FOS_SUPPORT_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "libfos_internal.h"

typedef struct fake_alloc {
	uint64_t base, size, id;
	int ordinal;
	unsigned ipc_ok, managed;
	int live;
} fake_alloc;

#define FAKE_BASE 0x7e0000000000ull /* never host memory here: libfos must not touch it */
/* With g_many, every MiB of [MANY_BASE, MANY_BASE + 2 GiB) is an allocation of its own too. */
#define MANY_BASE 0x7d0000000000ull

#define FAKE_SLOTS 16 /* allocations in the table; cuMemAlloc's host memory takes the last four */
#define FAKE_HOST_SLOTS 4
extern fake_alloc g_fa[FAKE_SLOTS];
extern int g_many;
/* calls counted: handles exported, events recorded / made / destroyed, fosd's done events opened
 * and waited for (the last wait's stream and event), primary-context retains minus releases,
 * frees, copies, context synchronizes */
extern int g_exports, g_records, g_events_made, g_destroyed, g_opened, g_waits;
extern void *g_wait_stream, *g_wait_event;
extern int g_retained, g_freed, g_copies, g_syncs;
/* the driver: every call but cuIpcOpenEventHandle and cuStreamWaitEvent (f_open_event and
 * f_wait_event, for a test to add) */
extern const fosc_cuda_api g_fake;

/* The live allocation holding p, or NULL. */
fake_alloc *fake_find(uint64_t p);
/* A live allocation in slot i (0..FAKE_SLOTS - 1); returns base as a pointer. */
void *fake_alloc_at(int i, uint64_t base, uint64_t size, uint64_t id);
/* The GPU UUID of ordinal dev: 0xA0 + i + dev in byte i. */
int f_uuid(uint8_t u[16], int dev);
/* fosd's done events: opened by handle (the event is 0xD000 + the handle's first byte), waited on
 * (flags must be 0). */
int f_open_event(void **ev, fosc_cu_ipc_event_handle h);
int f_wait_event(void *stream, void *ev, unsigned flags);
/* FOS_CUDA_ORDER_ASYNC: the waits on done words queued (address, value, stream), the writes of
 * words libfos made itself; g_alloc_host: cuMemAlloc gives host memory (the last FAKE_HOST_SLOTS slots in turn: a client
 * handle's word buffer each). */
#define FAKE_WAITS_MAX 4096
extern uint64_t g_wv_addr[FAKE_WAITS_MAX];
extern uint32_t g_wv_val[FAKE_WAITS_MAX];
extern void *g_wv_stream[FAKE_WAITS_MAX];
extern int g_wv_n, g_self_writes, g_alloc_host;
/* No allocations, counters 0, the driver installed. */
void fake_reset(void);

#endif
