/* nng_stdio.c: linked into libfos.so only (the Makefile's LIBFOS_SO_C), never into the programs.
 *
 * Debian's static libnng.a is position-independent code except for one object (posix_debug.c:
 * nng's panic and debug printing), which reads the C library's stdout and stderr directly, as a
 * program may but a shared object cannot. The Makefile links libfos.so against a copy of
 * libnng.a ($(BUILD)/libnng-so.a, made with objcopy --redefine-sym) in which those two references
 * name fos_nng_stdout and fos_nng_stderr instead; this file defines them, hidden (local to
 * libfos.so, as the version script keeps everything but fos.h's API), and points them at the C
 * library's streams when libfos.so is loaded, before any nng code can run. */
#include <stdio.h>

__attribute__((visibility("hidden"))) FILE *fos_nng_stdout;
__attribute__((visibility("hidden"))) FILE *fos_nng_stderr;

__attribute__((constructor)) static void fos_nng_stdio_init(void)
{
	fos_nng_stdout = stdout;
	fos_nng_stderr = stderr;
}
