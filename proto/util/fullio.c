// SPDX-License-Identifier: MIT
/* fullio.c - pread and pwrite of a whole range. */
#include "fullio.h"

#include <errno.h>
#include <unistd.h>

int pread_full(int fd, void *dst, size_t len, uint64_t off)
{
	uint8_t *p = dst;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

int pwrite_full(int fd, const void *src, size_t len, uint64_t off)
{
	const uint8_t *p = src;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENOSPC;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}
