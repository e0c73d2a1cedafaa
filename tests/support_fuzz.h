/* support_fuzz.h: the fuzz target body, shared by the libFuzzer entry point (tests/fuzz_request.c,
 * `make fuzz`) and the corpus replay of `make test` (tests/test_fuzz_replay.c). */
#ifndef FOS_SUPPORT_FUZZ_H
#define FOS_SUPPORT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Feeds one received message body through everything fosd does before a backend call: framing,
 * protobuf decoding, the op, authentication (against two fixed tenants), shared-memory reference
 * resolution (no region registered) and validation, then checks what validation accepted (every
 * inline tensor inside the data section, the tenant matched only by its exact secret). Aborts on a
 * violated check; crashes are the sanitizers'. Returns the status code fosd would answer (0 when
 * the request would reach the backend). */
int tf_request_one(const uint8_t *data, size_t size);

/* The tokens tf_request_one knows. */
#define TF_ALICE "alice-secret-0123456789abcdef"
#define TF_BOB "bob-secret-fedcba9876543210-xyz"

#endif
