// SPDX-License-Identifier: MIT
/* arena_struct.h - an arena's state: its segments and their pieces,
 * shared by its parts (arena.c, arena_folio.c, arena_sweep.c,
 * piece_read.c) and by no file outside server/load (tools/call-graph
 * holds it): other rooms see an arena through arena.h's calls. */
#ifndef WSRV_ARENA_STRUCT_H
#define WSRV_ARENA_STRUCT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena_types.h"
#include "numa_place.h"

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

/* Bytes of segment s's memfd, and of its mapping: size, or less with
 * holes (arena_compact). */
static inline size_t arena_seg_file_size(const struct arena_seg *s)
{
	return s->file_size ? s->file_size : s->size;
}

#endif
