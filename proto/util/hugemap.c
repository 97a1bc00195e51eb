// SPDX-License-Identifier: MIT
/* hugemap.c - 2 MiB-aligned mappings (hugemap.h). */
#include "hugemap.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

void *hugemap_reserve(size_t len)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	size_t extra = len >= HUGEMAP_ALIGN ? HUGEMAP_ALIGN : 0;
	uint8_t *p, *a;

	if (len == 0 || len > SIZE_MAX - extra) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	p = mmap(NULL, len + extra, PROT_NONE, flags, -1, 0);
	if (p == MAP_FAILED || !extra)
		return p;
	a = (uint8_t *)(((uintptr_t)p + HUGEMAP_ALIGN - 1) & ~(uintptr_t)(HUGEMAP_ALIGN - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (a + len < p + len + extra)
		munmap(a + len, (size_t)(p + len + extra - (a + len)));
	return a;
}

void *hugemap_shared(int fd, size_t len, int prot)
{
	void *r = hugemap_reserve(len), *p;
	int err;

	if (r == MAP_FAILED)
		return r;
	p = mmap(r, len, prot, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		err = errno;
		munmap(r, len);
		errno = err;
	}
	return p;
}
