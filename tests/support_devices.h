/* support_devices.h: what the tests of a fosd over several devices share (test_e2e_devices.c on
 * cpu stand-ins, gpu_devices.c on GPUs), over a raw REQ socket (support_raw.h): PutWeight with a
 * placement, Stats, and which device ran a request (the per-device request counts of Stats). Every
 * failure fails the test (cmocka); include after cmocka.h. */
#ifndef FOS_SUPPORT_DEVICES_H
#define FOS_SUPPORT_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "fos_wire.h"

/* PutWeight of the bf16 (n, k) w as name/version with the placement given (devices: nd of them;
 * replicas; pin). The reply, unpacked (fos__response__free_unpacked it). */
Fos__Response *tdev_put(nng_socket s, const char *name, uint64_t version, const uint16_t *w, int64_t n, int64_t k,
			const uint32_t *devices, size_t nd, uint32_t replicas, int pin);
/* A Stats reply, checked to list ndev devices. */
Fos__Response *tdev_stats(nng_socket s, int ndev);
/* Each device's requests run so far (out: ndev of them), in device order. */
void tdev_requests(nng_socket s, int ndev, uint64_t *out);
/* The one device that ran one request since before (tdev_requests); fails unless exactly one
 * device's count grew, by one. */
int tdev_ran_on(nng_socket s, int ndev, const uint64_t *before);
/* The devices of a WeightInfo as a bit set. */
unsigned tdev_set(const Fos__WeightInfo *wi);

#endif
