// SPDX-License-Identifier: MIT
/* page_cached.h - how much of a file the page cache holds. */
#ifndef WSRV_PAGE_CACHED_H
#define WSRV_PAGE_CACHED_H

#include <stdint.h>

/* The share of fd's first size bytes in the page cache, 0 to 1: the
 * kernel's count (cachestat, Linux 6.5), else mincore over a mapping of
 * the file; 0 where neither answers. Costs no read of the file. */
double page_cached_share(int fd, uint64_t size);
/* The same by mincore alone (the fallback; for the tests). */
double page_cached_share_mincore(int fd, uint64_t size);

#endif
