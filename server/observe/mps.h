/* mps.h: whether fosd's GPU work runs under NVIDIA's Multi-Process Service (Health's mps,
 * /metrics' fosd_mps, the log at start), decided once at start: a process is an MPS client or not
 * for its whole life. States are fos_wire_enums.h's FOS_MPS_* (the wire's HealthResult.Mps). */
#ifndef FOSD_MPS_H
#define FOSD_MPS_H

#include <stddef.h>

#include "backend.h"
#include "fos_wire_enums.h"
#include "nvml.h"

/* One device's state: be its backend, ordinal its CUDA ordinal. The cpu backend is not
 * applicable; a cuda one asks the CUDA driver (cudaDevAttrMpsEnabled), then, where the driver does
 * not know that attribute, NVML (fosd_nvml_mps for this process's pid, *nvml opened on first use
 * and left open for the caller to close); else unknown. how gets the evidence in words. */
int fosd_mps_device(const fos_backend *be, int ordinal, fosd_nvml **nvml, char *how, size_t howsz);
/* The process's state from its n devices' (n >= 1): not applicable when all are, on when every
 * GPU is on, off when any GPU is off, else unknown. */
int fosd_mps_combine(const int *states, int n);
/* "on", "off", "not applicable", "unknown" (what `fos health` prints). */
const char *fosd_mps_name(int state);

#endif
