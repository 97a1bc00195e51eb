// SPDX-License-Identifier: MIT
/* fullio.h - pread and pwrite of a whole range: retried on EINTR and on
 * short transfers. */
#ifndef WSRV_FULLIO_H
#define WSRV_FULLIO_H

#include <stddef.h>
#include <stdint.h>

/* len bytes of fd at off into dst: 0, -errno, or -ENODATA when the file
 * ends first. */
int pread_full(int fd, void *dst, size_t len, uint64_t off);
/* len bytes of src into fd at off: 0, -errno, or -ENOSPC when a write
 * makes no progress. */
int pwrite_full(int fd, const void *src, size_t len, uint64_t off);

#endif
