// SPDX-License-Identifier: MIT
/* arena.h - the server's shared memory for one model: memfd segments with a
 * NUMA policy and a page size, prefaulted, locked, and sealed once loaded.
 *
 * Life: arena_create (writable, placed, prefaulted, locked) -> the loader
 * writes through arena_wptr -> arena_seal (read-only mapping kept, writable
 * mapping gone, seals added) -> arena_free.
 */
#ifndef WSRV_ARENA_H
#define WSRV_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errinfo.h"
#include "numa_place.h"

enum hugepages_mode { HUGEPAGES_AUTO = 0, HUGEPAGES_ON, HUGEPAGES_OFF };

struct arena_opts {
	enum numa_mode numa;
	int numa_node;                 /* for NUMA_NODE */
	enum hugepages_mode hugepages;
	bool no_lock;                  /* skip mlock (unprivileged use) */
};

struct arena_seg {
	int fd;                        /* memfd, owned */
	size_t size;                   /* rounded up to the page size */
	uint8_t *rw;                   /* writable mapping until sealed */
	const uint8_t *ro;             /* read-only mapping once sealed */
};

struct arena {
	uint32_t nseg;
	struct arena_seg *seg;
	size_t page_size;              /* 4096 or the huge page size */
	bool hugetlb;
	bool locked;
	bool sealed;
	bool stop_populate;            /* set (atomically) to stop arena_populate early */
	struct numa_choice numa;
	char hugepage_note[160];       /* why this page size was chosen */
};

/* Creates nseg segments of sizes[i] bytes each, named "wsrv:<name>:<i>".
 * On success *out is owned by the caller (arena_free). */
int arena_create(const char *name, uint32_t nseg, const uint64_t *sizes,
		 const struct arena_opts *o, struct arena **out,
		 struct errinfo *e);

/* Allocates, maps and locks every page, after the NUMA policy is set and
 * before sealing. Safe to run on another thread while the loader writes into
 * the arena (a page either thread touches first is simply faulted in by it).
 * Returns -ECANCELED if stop_populate was set, or an error naming
 * RLIMIT_MEMLOCK when pages cannot be locked. */
int arena_populate(struct arena *a, struct errinfo *e);

/* Writable address of (seg, off); only before arena_seal. */
static inline uint8_t *arena_wptr(struct arena *a, uint32_t seg, uint64_t off)
{
	return a->seg[seg].rw + off;
}

/* Seals every segment: its mapping becomes read-only (and stays locked),
 * then F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL: no
 * one can map it writable, write() to it, or change its size or seals. */
int arena_seal(struct arena *a, struct errinfo *e);

/* Read-only address of (seg, off); only after arena_seal. */
static inline const uint8_t *arena_ptr(const struct arena *a, uint32_t seg, uint64_t off)
{
	return a->seg[seg].ro + off;
}

/* Pages per NUMA node (counts[NUMA_MAX_NODES]) over a sample of every
 * segment's pages, read back with move_pages. Returns pages sampled or a
 * negative errno. */
int arena_placement(const struct arena *a, uint64_t *counts);

/* Free 2 MiB huge pages on this machine, -1 when unknown. */
long arena_free_huge_pages(void);

/* Total bytes of all segments. */
uint64_t arena_bytes(const struct arena *a);

/* Unmaps and closes everything; NULL is fine. */
void arena_free(struct arena *a);

#endif
