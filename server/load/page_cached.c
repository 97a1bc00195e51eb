// SPDX-License-Identifier: MIT
/* page_cached.c - how much of a file the page cache holds: cachestat(2)
 * where the kernel has it, mincore(2) over a read-only mapping where not.
 * Neither reads the file nor changes what is cached. */
#include "page_cached.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same number on every architecture */
#endif

/* The kernel's struct cachestat_range and struct cachestat (uapi
 * linux/mman.h of 6.5; Debian 12's headers predate them). */
struct cs_range {
	uint64_t off, len;
};

struct cs_stat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* Pages of [0, size) cached, by cachestat; -errno where it fails. */
static int64_t by_cachestat(int fd, uint64_t size)
{
	struct cs_range r = { 0, size };
	struct cs_stat st = { 0 };

	if (syscall(__NR_cachestat, fd, &r, &st, 0) < 0)
		return -errno;
	return (int64_t)st.nr_cache;
}

/* Pages of [0, size) cached, by mincore over a mapping; -errno. */
static int64_t by_mincore(int fd, uint64_t size, uint64_t pg)
{
	size_t n = (size_t)((size + pg - 1) / pg);
	unsigned char *vec = malloc(n);
	void *p = vec ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
	int64_t got = -ENOMEM;

	if (p != MAP_FAILED) {
		got = mincore(p, size, vec) == 0 ? 0 : -errno;
		for (size_t i = 0; got >= 0 && i < n; i++)
			got += vec[i] & 1;
		munmap(p, size);
	}
	free(vec);
	return got;
}

/* pages cached of size bytes, as a share from 0 to 1. */
static double share_of(int64_t pages, uint64_t pg, uint64_t size)
{
	double share = pages > 0 && size ? (double)pages * (double)pg / (double)size : 0;

	return share < 1 ? share : 1;
}

double page_cached_share(int fd, uint64_t size)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	int64_t pages = size ? by_cachestat(fd, size) : 0;

	/* Any failure, not only ENOSYS: a seccomp filter that does not know
	 * cachestat answers EPERM (systemd's SystemCallErrorNumber=, the
	 * shipped unit), and some file systems EOPNOTSUPP. */
	if (pages < 0)
		pages = by_mincore(fd, size, pg);
	return share_of(pages, pg, size);
}

double page_cached_share_mincore(int fd, uint64_t size)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);

	return share_of(size ? by_mincore(fd, size, pg) : 0, pg, size);
}
