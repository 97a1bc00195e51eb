// SPDX-License-Identifier: MIT
/* file_open.c - opening model files safely. */
#include "file_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *kind(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

int file_open_regular(const char *path, int flags, struct stat *out, struct errinfo *e)
{
	struct stat st;
	int fd, r;

	/* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
	fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return err_set(e, -errno, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		r = err_set(e, -errno, "%s: cannot stat: %s", path, strerror(errno));
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(e, -EINVAL, "%s: not a regular file (%s)", path, kind(st.st_mode));
	}
	/* Regular files ignore O_NONBLOCK for reads, but io_uring does not:
	 * it would answer -EAGAIN instead of waiting for the page cache. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		r = err_set(e, -errno, "%s: fcntl: %s", path, strerror(errno));
		close(fd);
		return r;
	}
	if (out)
		*out = st;
	return fd;
}

int file_read_all(const char *path, size_t max, char **out, size_t *len, struct errinfo *e)
{
	struct stat st;
	size_t got = 0;
	char *buf;
	int fd = file_open_regular(path, O_RDONLY, &st, e), r = 0;

	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return err_set(e, -EFBIG, "%s: %lld bytes, more than the %zu allowed", path,
			       (long long)st.st_size, max);
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return err_set(e, -ENOMEM, "%s: out of memory", path);
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) { /* 0: the file shrank under us */
			r = err_set(e, n < 0 ? -errno : -EIO, "%s: cannot read: %s", path,
				    n < 0 ? strerror(errno) : "it shrank while read");
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[got] = 0;
	*out = buf;
	*len = got;
	return 0;
}
