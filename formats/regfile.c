/* regfile.c: the one way fosd and fos open a file they read (see regfile.h). */
#include "regfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "directory";
	if (S_ISFIFO(m))
		return "FIFO";
	if (S_ISCHR(m))
		return "character device";
	if (S_ISBLK(m))
		return "block device";
	if (S_ISSOCK(m))
		return "socket";
	return "special file";
}

int fos_open_regular(const char *path, uint64_t max, struct stat *sb, char *msg, size_t msgsz)
{
	/* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer; it changes nothing for
	 * the regular file that is kept. O_NOCTTY: a terminal never becomes ours. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			snprintf(msg, msgsz, "%s: cannot open: a loop of symbolic links", path);
		else
			snprintf(msg, msgsz, "%s: cannot open: %s", path, strerror(e));
		return -1;
	}
	if (fstat(fd, sb)) {
		snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(sb->st_mode)) {
		snprintf(msg, msgsz, "%s: not a regular file (a %s)", path, file_kind(sb->st_mode));
		close(fd);
		return -1;
	}
	if ((uint64_t)sb->st_size > max) {
		snprintf(msg, msgsz, "%s: larger than %llu KiB (%lld bytes)", path, (unsigned long long)(max >> 10),
			 (long long)sb->st_size);
		close(fd);
		return -1;
	}
	return fd;
}

char *fos_read_regular(const char *path, size_t max, size_t *len, struct stat *sbp, char *msg, size_t msgsz)
{
	struct stat sb;
	int fd = fos_open_regular(path, max, &sb, msg, msgsz);
	if (fd < 0)
		return NULL;
	if (sbp)
		*sbp = sb;
	/* room for what fstat said and one byte more, to notice a file that grows */
	size_t cap = (size_t)sb.st_size + 1, got = 0;
	char *buf = malloc(cap + 1);
	if (!buf) {
		snprintf(msg, msgsz, "%s: out of memory for %zu bytes", path, cap);
		close(fd);
		return NULL;
	}
	for (;;) {
		if (got == cap) {
			if (cap > max) {
				snprintf(msg, msgsz, "%s: larger than %zu KiB (it grew while read)", path, max >> 10);
				break;
			}
			size_t nc = cap * 2 > max + 1 ? max + 1 : cap * 2;
			char *nb = malloc(nc + 1);
			if (!nb) {
				snprintf(msg, msgsz, "%s: out of memory for %zu bytes", path, nc);
				break;
			}
			memcpy(nb, buf, got);
			explicit_bzero(buf, got); /* the file may hold secrets (tokens, a TLS key) */
			free(buf);
			buf = nb;
			cap = nc;
		}
		ssize_t r = read(fd, buf + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(msg, msgsz, "%s: %s", path, strerror(errno));
			break;
		}
		if (r == 0) {
			close(fd);
			buf[got] = 0;
			*len = got;
			return buf;
		}
		got += (size_t)r;
	}
	close(fd);
	explicit_bzero(buf, got);
	free(buf);
	return NULL;
}
