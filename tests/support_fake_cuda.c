/* support_fake_cuda.c: a stand-in for the CUDA driver that libfos loads (fosc_cuda_override),
 * shared by the tests of libfos's device tensors (see support_fake_cuda.h). Its allocations are a
 * table (g_fa) of ranges that are never dereferenced here: a test points them at addresses that
 * are not memory (FAKE_BASE), or at host memory when an in-process fosd is to read them. Handles
 * name an allocation by (base, buffer id); events are numbers; every call counts. */
#include "support_fake_cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

fake_alloc g_fa[FAKE_SLOTS];
int g_exports, g_records, g_events_made;


int g_many;
static fake_alloc g_many_alloc;

fake_alloc *fake_find(uint64_t p)
{
	for (int i = 0; i < FAKE_SLOTS; i++)
		if (g_fa[i].live && p >= g_fa[i].base && p < g_fa[i].base + g_fa[i].size)
			return &g_fa[i];
	if (g_many && p >= MANY_BASE && p < MANY_BASE + (2048ull << 20)) {
		uint64_t i = (p - MANY_BASE) >> 20;
		g_many_alloc = (fake_alloc){MANY_BASE + (i << 20), 1 << 20, 1000 + i, 0, 1, 0, 1};
		return &g_many_alloc;
	}
	return NULL;
}

/* A live fake allocation in slot i. */
void *fake_alloc_at(int i, uint64_t base, uint64_t size, uint64_t id)
{
	g_fa[i] = (fake_alloc){base, size, id, 0, 1, 0, 1};
	return (void *)(uintptr_t)base;
}

static int f_init(unsigned flags)
{
	(void)flags;
	return 0;
}

static int f_device_get(int *dev, int ordinal)
{
	*dev = ordinal;
	return 0;
}

int f_uuid(uint8_t u[16], int dev)
{
	for (int i = 0; i < 16; i++)
		u[i] = (uint8_t)(0xA0 + i + dev);
	return 0;
}

static int f_attrs(unsigned n, int *attrs, void **data, uint64_t p)
{
	fake_alloc *a = fake_find(p);
	for (unsigned i = 0; i < n; i++)
		switch (attrs[i]) {
		case 1:
			*(void **)data[i] = a ? (void *)(uintptr_t)0xC0 : NULL;
			break;
		case 2:
			*(unsigned *)data[i] = a ? 2 : 0;
			break;
		case 7:
			*(uint64_t *)data[i] = a ? a->id : 0;
			break;
		case 8:
			*(unsigned *)data[i] = a ? a->managed : 0;
			break;
		case 9:
			*(int *)data[i] = a ? a->ordinal : -1;
			break;
		case 10:
			*(unsigned *)data[i] = a ? a->ipc_ok : 0;
			break;
		case 11:
			*(uint64_t *)data[i] = a ? a->base : 0;
			break;
		case 12:
			*(size_t *)data[i] = a ? (size_t)a->size : 0;
			break;
		default:
			return 1; /* CUDA_ERROR_INVALID_VALUE */
		}
	return 0;
}

static int f_range(uint64_t *base, size_t *size, uint64_t p)
{
	fake_alloc *a = fake_find(p);
	if (!a)
		return 1;
	*base = a->base;
	*size = a->size;
	return 0;
}

/* The handle names (base, buffer id): what a real driver's handle identifies. */
static int f_ipc(uint8_t h[64], uint64_t base)
{
	fake_alloc *a = fake_find(base);
	if (!a || a->base != base)
		return 1;
	memset(h, 0x11, 64);
	memcpy(h, &a->base, 8);
	memcpy(h + 8, &a->id, 8);
	g_exports++;
	return 0;
}

static int f_push(void *ctx)
{
	(void)ctx;
	return 0;
}

static int f_pop(void **ctx)
{
	*ctx = NULL;
	return 0;
}

static int f_stream_ctx(void *stream, void **ctx)
{
	(void)stream;
	*ctx = (void *)(uintptr_t)0xC0;
	return 0;
}

static int f_event_create(void **ev, unsigned flags)
{
	if (flags != 6) /* CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING */
		return 1;
	*ev = (void *)(uintptr_t)(0xE000 + ++g_events_made);
	return 0;
}

static int f_event_record(void *ev, void *stream)
{
	(void)ev;
	(void)stream;
	g_records++;
	return 0;
}

int g_destroyed;
static int f_event_destroy(void *ev)
{
	(void)ev;
	g_destroyed++;
	return 0;
}

/* fosd's done events: opened by handle (the event is 0xD000 + the handle's first byte), waited on */
int g_opened, g_waits;
void *g_wait_stream, *g_wait_event;
int f_open_event(void **ev, fosc_cu_ipc_event_handle h)
{
	g_opened++;
	*ev = (void *)(uintptr_t)(0xD000 + h.reserved[0]);
	return 0;
}

int f_wait_event(void *stream, void *ev, unsigned flags)
{
	if (flags)
		return 1;
	g_waits++;
	g_wait_stream = stream;
	g_wait_event = ev;
	return 0;
}

/* An event's handle: 0xEE bytes with the event's own number in bytes 1..8, so that fosd sees as
 * many handles as the client made events. */
static int f_event_handle(uint8_t h[64], void *ev)
{
	uint64_t id = (uint64_t)(uintptr_t)ev;
	memset(h, 0xEE, 64);
	memcpy(h + 1, &id, sizeof id);
	return 0;
}

int g_retained, g_freed;

static int f_retain(void **ctx, int dev)
{
	(void)dev;
	*ctx = (void *)(uintptr_t)0xC0;
	g_retained++;
	return 0;
}

static int f_release(int dev)
{
	(void)dev;
	g_retained--;
	return 0;
}

/* cuMemAlloc: a fake allocation in slot 5 (out of memory past 1 GiB); with g_alloc_host, host
 * memory in the last FAKE_HOST_SLOTS slots in turn (an in-process fosd reads and writes it) */
static void *g_host_alloc[FAKE_HOST_SLOTS];
static int g_host_next;
static int f_alloc(uint64_t *p, size_t n)
{
	if (n > (1u << 30))
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	if (g_alloc_host) {
		int i = g_host_next++ % FAKE_HOST_SLOTS;
		free(g_host_alloc[i]);
		if (posix_memalign(&g_host_alloc[i], 4096, n))
			return 2;
		*p = (uint64_t)(uintptr_t)fake_alloc_at(FAKE_SLOTS - FAKE_HOST_SLOTS + i,
							(uint64_t)(uintptr_t)g_host_alloc[i], n, 78 + (uint64_t)i);
		return 0;
	}
	*p = (uint64_t)(uintptr_t)fake_alloc_at(5, FAKE_BASE + (4ull << 30), n, 77);
	return 0;
}

static int f_free(uint64_t p)
{
	fake_alloc *a = fake_find(p);
	if (!a || a->base != p)
		return 1;
	a->live = 0;
	g_freed++;
	return 0;
}

int g_copies, g_syncs;
static int f_sync(void)
{
	g_syncs++;
	return 0;
}

static int f_memcpy(uint64_t dst, uint64_t src, size_t n)
{
	(void)dst, (void)src, (void)n;
	g_copies++;
	return 0;
}

/* FOS_CUDA_ORDER_ASYNC's calls: waits on a word are logged (not blocking: the test checks the word
 * got its value), writes store into the word (host memory here), streams are numbers */
uint64_t g_wv_addr[FAKE_WAITS_MAX];
uint32_t g_wv_val[FAKE_WAITS_MAX];
void *g_wv_stream[FAKE_WAITS_MAX];
int g_wv_n, g_self_writes, g_alloc_host;
static int f_wait_value(void *stream, uint64_t addr, uint32_t value, unsigned flags)
{
	if (flags != 0 || g_wv_n >= FAKE_WAITS_MAX) /* CU_STREAM_WAIT_VALUE_GEQ */
		return 1;
	g_wv_addr[g_wv_n] = addr;
	g_wv_val[g_wv_n] = value;
	g_wv_stream[g_wv_n] = stream;
	g_wv_n++;
	return 0;
}

static int f_write_value(void *stream, uint64_t addr, uint32_t value, unsigned flags)
{
	(void)stream;
	if (flags || !fake_find(addr))
		return 1;
	__atomic_store_n((uint32_t *)(uintptr_t)addr, value, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&g_self_writes, 1, __ATOMIC_SEQ_CST);
	return 0;
}

static int f_stream_create(void **s, unsigned flags)
{
	if (flags != 1) /* CU_STREAM_NON_BLOCKING */
		return 1;
	*s = (void *)(uintptr_t)0x5700;
	return 0;
}

static int f_stream_destroy(void *s)
{
	(void)s;
	return 0;
}

static int f_memset32(uint64_t dst, uint32_t v, size_t n)
{
	fake_alloc *a = fake_find(dst);
	if (!a || dst + 4 * n > a->base + a->size)
		return 1;
	if (g_alloc_host)
		for (size_t i = 0; i < n; i++)
			__atomic_store_n((uint32_t *)(uintptr_t)dst + i, v, __ATOMIC_SEQ_CST);
	return 0;
}

const fosc_cuda_api g_fake = {
	.StreamWaitValue32 = f_wait_value,
	.StreamWriteValue32 = f_write_value,
	.StreamCreate = f_stream_create,
	.StreamDestroy = f_stream_destroy,
	.MemsetD32 = f_memset32,
	.DevicePrimaryCtxRetain = f_retain,
	.DevicePrimaryCtxRelease = f_release,
	.MemAlloc = f_alloc,
	.MemFree = f_free,
	.Memcpy = f_memcpy,
	.Init = f_init,
	.DeviceGet = f_device_get,
	.DeviceGetUuid = f_uuid,
	.PointerGetAttributes = f_attrs,
	.MemGetAddressRange = f_range,
	.IpcGetMemHandle = f_ipc,
	.CtxPushCurrent = f_push,
	.CtxPopCurrent = f_pop,
	.CtxSynchronize = f_sync,
	.StreamGetCtx = f_stream_ctx,
	.EventCreate = f_event_create,
	.EventRecord = f_event_record,
	.EventDestroy = f_event_destroy,
	.IpcGetEventHandle = f_event_handle,
};

void fake_reset(void)
{
	memset(g_fa, 0, sizeof g_fa);
	g_host_next = 0;
	g_exports = g_records = g_events_made = g_many = g_retained = g_freed = g_copies = g_syncs = 0;
	g_destroyed = g_opened = g_waits = 0;
	g_wv_n = g_self_writes = g_alloc_host = 0;
	g_wait_stream = g_wait_event = NULL;
	fosc_cuda_override(&g_fake);
}

