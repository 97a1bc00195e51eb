// SPDX-License-Identifier: MIT
/* arena_types.h - what other rooms say to an arena: its options (NUMA,
 * huge pages, locking), a disk tier's holes and splits, and how 2 MiB
 * folios come to it. The arena itself is arena_struct.h's, private to
 * server/load. */
#ifndef WSRV_ARENA_TYPES_H
#define WSRV_ARENA_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "numa_place.h"

enum hugepages_mode { HUGEPAGES_AUTO = 0, HUGEPAGES_ON, HUGEPAGES_OFF };

/* Whether the arena's pages are mlocked. Auto: when the machine has swap,
 * the only place shared memory can be paged out to (huge pages never are);
 * with none, a lock would cost CPU time and RLIMIT_MEMLOCK for nothing. */
enum lock_mode { LOCK_AUTO = 0, LOCK_ON, LOCK_OFF };

struct arena_opts {
	enum numa_mode numa;
	int numa_node;                 /* for NUMA_NODE */
	enum hugepages_mode hugepages;
	enum lock_mode lock;
	bool no_folios;                /* 4 KiB pages even where 2 MiB folios could be made */
	int folio_mode;                /* enum folio_mode (folio_probe.h): how a load makes them */
};

/* Part of a segment written to a memfd of its own (a disk tier's units
 * read together, tier_fetch.c): [off, off + len) goes to fd, its byte
 * off at the fd's offset 0 (the memfd holds the part alone). */
struct arena_split {
	uint64_t off, len;
	int fd;                        /* the caller's */
};

struct arena_hole {
	uint64_t off, len;
	uint64_t before;               /* the bytes of the holes before this one */
};

/* How 2 MiB folios come to an arena of 4 KiB pages filled by write
 * (arena_folio.h): none (a huge-page pool, a kernel that cannot, a disk
 * tier, or a collapse the kernel refused), each chunk made one as its
 * bytes are placed, or all of them by the sweep after the load
 * (arena_sweep.h). Atomic: a refused collapse turns them off from any
 * thread. */
enum arena_folios { FOLIOS_NONE, FOLIOS_AT_WRITE, FOLIOS_AFTER };

#endif
