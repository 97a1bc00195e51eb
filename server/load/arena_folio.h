// SPDX-License-Identifier: MIT
/* arena_folio.h - 2 MiB folios for an arena filled by write, without a
 * huge-page pool and without changing any system setting.
 *
 * shmem allocates 4 KiB pages unless shmem_enabled allows more, and it is
 * `never` on a stock kernel. MADV_COLLAPSE is the exception the kernel
 * makes (only `deny` refuses it): before the loader writes into a 2 MiB
 * chunk of a segment, one page of it is allocated (fallocate, which never
 * overwrites data) and the chunk collapsed into one zeroed 2 MiB folio;
 * the loader's write() then copies into that folio. Each byte is zeroed
 * once and copied once, as with 4 KiB pages, and every reader maps the
 * chunk with one fault and no page table (hugemap.h). A chunk the kernel
 * cannot collapse (no free 2 MiB block) keeps 4 KiB pages; the bytes are
 * the same either way. */
#ifndef WSRV_ARENA_FOLIO_H
#define WSRV_ARENA_FOLIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct arena;
struct arena_seg;

/* Whether this kernel lets MADV_COLLAPSE make shmem folios; if not, why
 * (a sentence into why). */
bool arena_folio_possible(char *why, size_t len);

/* Makes the 2 MiB chunk at off (2 MiB aligned) of memfd fd, mapped at
 * map (2 MiB aligned, the whole file), one folio: a page in it, then the
 * collapse (EAGAIN tried once more). 0 or -errno. */
int arena_folio_collapse(int fd, const uint8_t *map, uint64_t off);

/* Claims every chunk's slot: 0 or -ENOMEM. Only for an arena filled by
 * write whose segments are mapped 2 MiB aligned. */
int arena_folio_init(struct arena *a);

/* Makes a 2 MiB folio of each whole chunk that [off, off + len) of
 * segment seg touches and no one has tried yet. Safe from several
 * threads (each chunk is tried once). Never fails: a chunk that cannot be
 * collapsed is counted and keeps small pages; a kernel that refuses the
 * call outright turns folios off for the arena. */
void arena_folio_prepare(struct arena *a, uint32_t seg, uint64_t off, uint64_t len);

/* Reads one byte of every 4 KiB of the segment's whole chunks through
 * the server's own (PMD) mapping, once, as it is sealed. On a VM whose
 * hypervisor shadows the guest's page tables, the first process to touch
 * a 2 MiB mapping builds the host's entries for it, 4 KiB at a time, and
 * every later one reuses them: this makes that first process the server,
 * not the first worker (measured in docs/benchmarks.md). On bare metal it
 * is a read of one cache line per page. */
void arena_folio_warm(const struct arena_seg *s);
/* The same for [off, off + len) of the segment only. */
void arena_folio_warm_range(const struct arena_seg *s, uint64_t off, uint64_t len);

/* Writes the outcome (chunks made, failed) into a->hugepage_note. */
void arena_folio_note(struct arena *a);
/* The same into buf, with when ("" or, say, " after the load") after
 * "MADV_COLLAPSE"; false (buf untouched) when no chunk was tried. */
bool arena_folio_note_into(struct arena *a, char *buf, size_t len, const char *when);

/* Whether every chunk of every segment is one folio: readers map 2 MiB
 * pages only. Folios made after the load count once the sweep's note is
 * out, so that the page size and the pages note agree. Safe while a
 * sweep runs. */
bool arena_folios_complete(const struct arena *a);

void arena_folio_free(struct arena *a);

#endif
