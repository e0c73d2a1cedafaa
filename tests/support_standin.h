/* support_standin.h: an in-process cpu fosd standing in for a GPU fosd (support_standin.c), for the
 * tests of the stream-ordered paths (test_e2e_early, test_e2e_async): its backend is the cpu one
 * with the device hooks a test installs, its GPU the fake driver's (support_fake_cuda.c), and its
 * "device memory" host buffers registered as the fake driver's allocations, so fosd reads and
 * writes them in place. */
#ifndef FOS_SUPPORT_STANDIN_H
#define FOS_SUPPORT_STANDIN_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "server.h"

/* Starts srv (one lane, two workers) listening on a private ipc socket named after tag, written into
 * url. The cpu backend be gets interprocess events that are complete tokens and reads from
 * "device" memory as host memory, then hooks(be) installs the test's stand-ins (over those, if it
 * likes); *cpu gets be's own functions first. 0, or -1 after printing why. */
int standin_start(fosd_server *srv, fosd_config *cfg, const char *tag, char *url, size_t urlsz, fos_backend *cpu,
		  void (*hooks)(fos_backend *be));
/* Stops srv, frees cfg and removes the fake driver from libfos. */
void standin_stop(fosd_server *srv, fosd_config *cfg);
/* The same with lanes executor lanes (--streams lanes, a worker each): lanes 1.. and the instance
 * the caches free through are cpu backends with the same hooks as be. */
int standin_start_lanes(fosd_server *srv, fosd_config *cfg, const char *tag, char *url, size_t urlsz,
			fos_backend *cpu, void (*hooks)(fos_backend *be), int lanes);
/* n bytes of page-aligned host memory (a copy of init, or zeros) as the fake driver's allocation in
 * slot (buffer id 100 + slot). */
void *standin_dev_buf(int slot, size_t n, const void *init);

#endif
