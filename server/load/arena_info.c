// SPDX-License-Identifier: MIT
/* arena_info.c - what other rooms may read of an arena, and the two
 * things they may ask of it besides arena.h's work (stop populating,
 * folios after the load): its struct is server/load's alone
 * (arena_struct.h). The lowest file of the arena: arena.c,
 * arena_folio.c and arena_sweep.c read through it too. */
#include "arena.h"
#include "arena_struct.h"

const char *arena_pages_note(const struct arena *a)
{
	const char *n = __atomic_load_n(&a->pages_note, __ATOMIC_ACQUIRE);

	return n ? n : a->hugepage_note;
}

const uint8_t *arena_ptr(const struct arena *a, uint32_t seg, uint64_t off)
{
	return a->seg[seg].ro + off;
}

uint32_t arena_nseg(const struct arena *a)
{
	return a->nseg;
}

size_t arena_seg_size(const struct arena *a, uint32_t seg)
{
	return a->seg[seg].size;
}

int arena_seg_fd(const struct arena *a, uint32_t seg)
{
	return a->seg[seg].fd;
}

void arena_disown_fds(struct arena *a)
{
	for (uint32_t i = 0; i < a->nseg; i++)
		a->seg[i].fd = -1;
}

size_t arena_page_size(const struct arena *a)
{
	return a->page_size;
}

bool arena_hugetlb(const struct arena *a)
{
	return a->page_size > 4096;
}

bool arena_fills_by_write(const struct arena *a)
{
	return !arena_hugetlb(a);
}

int arena_folios_now(const struct arena *a)
{
	return __atomic_load_n(&a->folios, __ATOMIC_RELAXED);
}

void arena_folios_after_load(struct arena *a)
{
	if (arena_folios_now(a) == FOLIOS_AT_WRITE)
		__atomic_store_n(&a->folios, FOLIOS_AFTER, __ATOMIC_RELAXED);
}

uint64_t arena_folios_made(const struct arena *a)
{
	return __atomic_load_n(&a->folios_made, __ATOMIC_RELAXED);
}

void arena_stop_populate(struct arena *a)
{
	__atomic_store_n(&a->stop_populate, true, __ATOMIC_RELAXED);
}

const char *arena_numa_desc(const struct arena *a)
{
	return a->numa.desc;
}

const char *arena_lock_note(const struct arena *a)
{
	return a->lock_note;
}

bool arena_locked(const struct arena *a)
{
	return a->locked;
}

uint64_t arena_folios_failed(const struct arena *a)
{
	return __atomic_load_n(&a->folios_failed, __ATOMIC_RELAXED);
}

bool arena_sealed(const struct arena *a)
{
	return a->sealed;
}
