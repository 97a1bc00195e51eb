// SPDX-License-Identifier: MIT
/* arena_struct.h - an arena's state: its options, its segments and their
 * pieces, shared by its parts (arena.c, arena_folio.c, arena_sweep.c).
 * The calls that change it are arena.h's. */
#ifndef WSRV_ARENA_STRUCT_H
#define WSRV_ARENA_STRUCT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
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

struct arena_seg {
	int fd;                        /* memfd, owned */
	const struct arena_split *split; /* filled by write: writes go to these
	                                * (nsplit of them) instead; the caller's */
	uint32_t nsplit;
	size_t size;                   /* rounded up to the page size (2 MiB with folios) */
	uint8_t *rw;                   /* writable mapping until sealed */
	const uint8_t *ro;             /* read-only mapping once sealed */
	uint8_t *fill;                 /* arena_fill_map's writable mapping, until sealed */
	bool sealed;                   /* arena_seal_segment (or arena_seal) done */
	/* A disk tier's piece: sealed without F_SEAL_SHRINK, so that its
	 * eviction cuts it (memfd_cut) even where a client still maps it. */
	bool cuttable;
	/* Ranges of the segment its memfd does not hold (a disk tier's routed
	 * experts, each a memfd of its own: arena_compact), in order: the
	 * memfd holds the rest, each run moved down by the holes before it,
	 * and is file_size bytes (0: size, no holes). Owned. */
	struct arena_hole *holes;
	uint32_t nholes;
	size_t file_size;
	uint8_t *folio_tried;          /* per whole 2 MiB chunk (arena_folio.h), owned */
	uint64_t nchunks;
};

/* How 2 MiB folios come to an arena of 4 KiB pages filled by write
 * (arena_folio.h): none (a huge-page pool, a kernel that cannot, a disk
 * tier, or a collapse the kernel refused), each chunk made one as its
 * bytes are placed, or all of them by the sweep after the load
 * (arena_sweep.h). Atomic: a refused collapse turns them off from any
 * thread. */
enum arena_folios { FOLIOS_NONE, FOLIOS_AT_WRITE, FOLIOS_AFTER };

/* The sweep's thread: none, running (sweep_th), or asked to stop at its
 * next chunk. Atomic. */
enum arena_sweep { SWEEP_NONE, SWEEP_RUNNING, SWEEP_STOPPING };

struct arena {
	uint32_t nseg;
	struct arena_seg *seg;
	size_t page_size;              /* 4096, or the huge page size of a huge-page
	                                * pool (arena_hugetlb) */
	int folios;                    /* enum arena_folios */
	uint64_t folios_made;          /* atomic: chunks collapsed */
	uint64_t folios_failed;        /* atomic: chunks left in 4 KiB pages */
	bool locked;                   /* its pages are mlocked (lock_note says why) */
	bool sealed;
	bool stop_populate;            /* set (atomically) to stop arena_populate early */
	int sweep;                     /* enum arena_sweep */
	pthread_t sweep_th;            /* the sweep, while it runs */
	const char *pages_note;        /* atomic: hugepage_note or sweep_note (arena_pages_note) */
	char sweep_note[320];          /* written by the sweep once, then published */
	struct numa_choice numa;
	char hugepage_note[320];       /* why this page size was chosen, and how
	                                * to get 2 MiB pages when they were not */
	char lock_note[96];            /* whether locked, and why */
};

/* Whether its pages are a huge-page pool's (hugetlb: filled by mapping,
 * since such memfds have no write()). */
static inline bool arena_hugetlb(const struct arena *a)
{
	return a->page_size > 4096;
}

/* Whether it is filled by write() into 4 KiB pages (arena.h), not by
 * mapping (hugetlb). */
static inline bool arena_fills_by_write(const struct arena *a)
{
	return !arena_hugetlb(a);
}

/* The folio policy now (enum arena_folios), from any thread. */
static inline int arena_folios_now(const struct arena *a)
{
	return __atomic_load_n(&a->folios, __ATOMIC_RELAXED);
}

#endif
