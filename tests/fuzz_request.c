/* fuzz_request.c: libFuzzer entry point for everything fosd does with a received message before
 * the backend (framing, protobuf, op, auth, shared-memory references, validation). Built and run
 * by `make fuzz` (clang -fsanitize=fuzzer,address,undefined); the body is tests/support_fuzz.c,
 * whose committed corpus (tests/fuzz_corpus/) `make test` replays. */
#include <stddef.h>
#include <stdint.h>

#include "support_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tf_request_one(data, size);
	return 0;
}
