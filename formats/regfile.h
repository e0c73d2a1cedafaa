/* regfile.h: opening the files fosd and fos read (fosd's config, tokens, TLS and weight repository
 * files; fos's .npy, .safetensors and context files) so that a FIFO, a device such as /dev/zero, a
 * directory or an oversized file is refused at once with a message naming it, never read: the open
 * does not block (O_NONBLOCK: a FIFO without a writer returns at once), the opened descriptor's
 * fstat decides (regular file, at most max bytes), and only then is anything read. Symbolic links
 * are followed on purpose (Kubernetes secret mounts and Hugging Face caches are links): what counts
 * is the file they lead to. It lives with the CLI's readers because both programs link them (fosd
 * links libfoscli for its weight repository; fos links only libfos, libfosproto and libfosnum
 * besides). */
#ifndef FOS_REGFILE_H
#define FOS_REGFILE_H

#include <stddef.h>
#include <stdint.h>

struct stat;

/* Opens path read-only and keeps it only if it is a regular file of at most max bytes
 * (FOS_REGFILE_ANY: no limit, for files read piece by piece); *sb gets its fstat. Returns the
 * descriptor (O_CLOEXEC), or -1 with msg "PATH: not a regular file (a FIFO)", "PATH: larger than
 * N KiB (B bytes)" or "PATH: cannot open: <strerror>" (ELOOP: "a loop of symbolic links"; a
 * dangling link: "No such file or directory"). */
#define FOS_REGFILE_ANY UINT64_MAX
int fos_open_regular(const char *path, uint64_t max, struct stat *sb, char *msg, size_t msgsz);

/* The whole of a regular file of at most max bytes (opened by fos_open_regular), malloc'd and
 * NUL-terminated (*len bytes before the NUL); a file that grew past max while read is refused.
 * *sb (if not NULL) gets its fstat. NULL with msg on failure. What it frees it wipes first (the
 * file may hold secrets); the caller wipes the result it frees as it needs. */
char *fos_read_regular(const char *path, size_t max, size_t *len, struct stat *sb, char *msg, size_t msgsz);

#endif
