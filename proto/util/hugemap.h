// SPDX-License-Identifier: MIT
/* hugemap.h - mappings placed where 2 MiB folios can be mapped whole.
 *
 * A shared-memory file whose page cache holds 2 MiB folios (the arena's,
 * made by MADV_COLLAPSE) is mapped by one page-table entry per folio (a
 * PMD) only where the virtual address and the file offset agree modulo
 * 2 MiB. mmap(NULL, ...) of a memfd gives no such promise, so every
 * mapping of an arena segment (the server's and each client's) goes
 * through here: one fault per 2 MiB instead of one per 64 KiB, and no
 * page table at all for the range. */
#ifndef WSRV_HUGEMAP_H
#define WSRV_HUGEMAP_H

#include <stddef.h>

#define HUGEMAP_ALIGN ((size_t)2 << 20)

/* An address range of len bytes, 2 MiB aligned when len is 2 MiB or
 * more, reserved PROT_NONE (MAP_NORESERVE): map over it with MAP_FIXED.
 * MAP_FAILED with errno on failure; munmap(p, len) frees it. */
void *hugemap_reserve(size_t len);

/* mmap(NULL, len, prot, MAP_SHARED, fd, 0) at a hugemap_reserve'd
 * address. MAP_FAILED with errno on failure. */
void *hugemap_shared(int fd, size_t len, int prot);

#endif
