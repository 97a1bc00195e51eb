// SPDX-License-Identifier: MIT
/* arena.h - the server's shared memory for one model: memfd segments with a
 * NUMA policy and a page size, filled, locked where that matters, and sealed
 * once loaded.
 *
 * Two ways to fill it, chosen by arena_create:
 * - by write (4 KiB pages): the memfd is mapped read-only from the start and
 *   the loader write()s into it (arena_write). shmem's write path allocates
 *   each page and copies into it without zeroing it first, and without a
 *   page fault: one touch per page. arena_seal maps the pages in (and so
 *   locks them: the mapping is mlock2(MLOCK_ONFAULT)ed at creation, which
 *   checks RLIMIT_MEMLOCK before any byte is read).
 *   Without a huge-page pool, each 2 MiB chunk is made one folio first
 *   where the kernel allows (arena_folio.h), so that readers map it whole.
 * - by mapping (hugetlb, which has no write()): arena_populate allocates,
 *   maps and locks every page, on another thread while the loader copies
 *   into the mapping (arena_write is memcpy); arena_seal makes the mapping
 *   read-only.
 *
 * Life: arena_create -> (arena_populate) -> arena_write -> arena_seal (seals
 * added) -> arena_free.
 */
#ifndef WSRV_ARENA_H
#define WSRV_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "arena_types.h"
#include "errinfo.h"

/* The arena's state is its room's alone (arena_struct.h, server/load):
 * other rooms see it through these calls. */
struct arena;

/* Creates nseg segments of sizes[i] bytes each, named "wsrv:<name>:<i>".
 * On success *out is owned by the caller (arena_free). */
int arena_create(const char *name, uint32_t nseg, const uint64_t *sizes,
		 const struct arena_opts *o, struct arena **out,
		 struct errinfo *e);

/* An earlier wsrvd's sealed segments, adopted: fds[i] (taken on success,
 * left to the caller on failure) must be memfds sealed against resizing and
 * writes, of sizes[i] bytes at least, their pages page_size. They are
 * mapped read-only; nothing is read (the pages are there). lock decides
 * as for a new arena (auto: where the machine has swap); a locked arena's
 * pages are mapped and locked here, which takes about as long as mapping
 * them (an error names RLIMIT_MEMLOCK when they cannot be). */
int arena_adopt(uint32_t nseg, const int *fds, const uint64_t *sizes, uint64_t page_size,
		enum lock_mode lock, struct arena **out, struct errinfo *e);

/* Filling by mapping: allocates, maps and locks every page, after the NUMA
 * policy is set and before sealing. Safe to run on another thread while the
 * loader writes into the arena (a page either thread touches first is simply
 * faulted in by it). Returns -ECANCELED if stop_populate was set, or an error
 * naming RLIMIT_MEMLOCK when pages cannot be locked. Filling by write: does
 * nothing (pages are allocated as they are written). */
int arena_populate(struct arena *a, struct errinfo *e);
/* The same for [off, off + len) of segment seg only (widened to pages). */
int arena_populate_range(struct arena *a, uint32_t seg, uint64_t off, uint64_t len, struct errinfo *e);

/* Copies len bytes from src to (seg, off); only before arena_seal. Fails
 * with a sentence (out of memory, a memory cgroup's limit) and -errno. */
/* Segment seg's memfd leaves out holes[0..n) (in order, apart, whole
 * pages): it is cut to the rest, mapped again, and writes into a hole are
 * dropped (their bytes still go through the loader's checksums). Before
 * any byte is written; filling by write only. 0 or -errno with e. */
int arena_compact(struct arena *a, uint32_t seg, const struct arena_hole *holes, uint32_t n, struct errinfo *e);

int arena_write(struct arena *a, uint32_t seg, uint64_t off, const void *src,
		size_t len, struct errinfo *e);

/* Copies len bytes at (seg, off) into dst; only before arena_seal. Filling
 * by write, with pread: no page of the arena is mapped into this process
 * (each first touch of a mapping is a fault). -errno with a sentence. */
int arena_read(struct arena *a, uint32_t seg, uint64_t off, void *dst, size_t len,
	       struct errinfo *e);

/* A writable address of (seg, 0) for filling in place (from peers), only
 * before arena_seal: the populated mapping when filling by mapping, else a
 * second, writable mapping of the memfd made on the first call and removed
 * by arena_seal. Pages are allocated as they are first written. */
int arena_fill_map(struct arena *a, uint32_t seg, uint8_t **out, struct errinfo *e);

/* Seals every segment: its mapping becomes read-only (and, when locked, its
 * pages are mapped and locked), then F_SEAL_SHRINK | F_SEAL_GROW |
 * F_SEAL_FUTURE_WRITE | F_SEAL_SEAL: no one can map it writable, write() to
 * it, or change its size or seals. */
int arena_seal(struct arena *a, struct errinfo *e);

/* Seals one segment as arena_seal does, once every byte of it is in
 * place (serving while loading: its fd may leave the server then); the
 * others stay open to the loader, and arena_seal skips it later. */
int arena_seal_segment(struct arena *a, uint32_t seg, struct errinfo *e);

/* What pages the arena has, a sentence (hugepage_note, or the sweep's
 * outcome once it has finished); safe from any thread. */
const char *arena_pages_note(const struct arena *a);

/* Read-only address of (seg, off); only after arena_seal (or a
 * segment's arena_seal_segment). */
const uint8_t *arena_ptr(const struct arena *a, uint32_t seg, uint64_t off);

/* Its segments: how many, each one's size (rounded up to the page size)
 * and memfd (the arena's: a caller that hands it on dups it or sends it
 * while the arena lives). */
uint32_t arena_nseg(const struct arena *a);
size_t arena_seg_size(const struct arena *a, uint32_t seg);
int arena_seg_fd(const struct arena *a, uint32_t seg);
/* Adopted segments' fds given back, on a failed adoption: the arena no
 * longer closes them (arena_free), and they are the caller's again. */
void arena_disown_fds(struct arena *a);

/* Its page size: 4096, or a huge-page pool's (arena_hugetlb). */
size_t arena_page_size(const struct arena *a);
/* Whether its pages are a huge-page pool's (hugetlb: filled by mapping,
 * since such memfds have no write()). */
bool arena_hugetlb(const struct arena *a);
/* Whether it is filled by write() into 4 KiB pages, not by mapping. */
bool arena_fills_by_write(const struct arena *a);
/* The folio policy now (enum arena_folios), from any thread; and the
 * move from making folios at write to making them after the load (the
 * sweep, arena_sweep.h), before the load begins. */
int arena_folios_now(const struct arena *a);
void arena_folios_after_load(struct arena *a);
/* Chunks made 2 MiB folios so far, and those left in 4 KiB pages. */
uint64_t arena_folios_made(const struct arena *a);
uint64_t arena_folios_failed(const struct arena *a);
/* Stops arena_populate early (from any thread). */
void arena_stop_populate(struct arena *a);
/* Words for people: the NUMA policy (or where an adopted arena's pages
 * are), and whether it is locked and why. Whether it is locked. */
const char *arena_numa_desc(const struct arena *a);
const char *arena_lock_note(const struct arena *a);
bool arena_locked(const struct arena *a);
/* Whether every segment is sealed (arena_seal). */
bool arena_sealed(const struct arena *a);

/* Pages per NUMA node (counts[NUMA_MAX_NODES]) over a sample of every
 * segment's pages, read back with move_pages. Returns pages sampled or a
 * negative errno. */
int arena_placement(const struct arena *a, uint64_t *counts);

/* 2 MiB huge pages an arena can have on this machine now: the pool's free
 * pages that no mapping has reserved, and the surplus pages that
 * nr_overcommit_hugepages still allows; -1 when unknown. */
long arena_free_huge_pages(void);
/* The same from the sysfs figures (free_hugepages, resv_hugepages,
 * nr_overcommit_hugepages, surplus_hugepages). */
long arena_huge_usable(long free_pages, long resv, long overcommit, long surplus);

/* Total bytes of all segments. */
uint64_t arena_bytes(const struct arena *a);

/* Unmaps and closes everything; NULL is fine. */
void arena_free(struct arena *a);

#endif
