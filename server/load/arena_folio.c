// SPDX-License-Identifier: MIT
/* arena_folio.c - 2 MiB folios by MADV_COLLAPSE (arena_folio.h). */
#include "arena_folio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "arena.h"
#include "arena_struct.h"
#include "hugemap.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define SHMEM_ENABLED "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

bool arena_folio_possible(char *why, size_t len)
{
	char line[128] = "";
	FILE *f = fopen(SHMEM_ENABLED, "re");
	bool ok = f && fgets(line, sizeof(line), f);

	if (f)
		fclose(f);
	if (!ok)
		snprintf(why, len, "this kernel has no transparent huge pages (%s)", SHMEM_ENABLED);
	else if (strstr(line, "[deny]"))
		snprintf(why, len, "shmem_enabled is deny");
	return ok && !strstr(line, "[deny]");
}

int arena_folio_init(struct arena *a)
{
	for (uint32_t i = 0; i < a->nseg; i++) {
		struct arena_seg *s = &a->seg[i];
		s->nchunks = s->size / HUGEMAP_ALIGN;
		if (s->nchunks && !(s->folio_tried = calloc(s->nchunks, 1)))
			return -ENOMEM;
	}
	if (a->folios == FOLIOS_NONE)
		a->folios = FOLIOS_AT_WRITE;
	return 0;
}

int arena_folio_collapse(int fd, const uint8_t *map, uint64_t off)
{
	/* A sealed segment's fd is a read-only description (EBADF): its
	 * pages were written already, and the collapse fills any hole. */
	if (fallocate(fd, 0, (off_t)off, 4096) < 0 && errno != EBADF)
		return -errno;
	/* EAGAIN is the kernel's "try again" (a page briefly locked, say by
	 * a write into the chunk from another thread): once more. */
	for (int tries = 0; madvise((void *)(map + off), HUGEMAP_ALIGN, MADV_COLLAPSE) < 0; tries++)
		if (errno != EAGAIN || tries == 1)
			return -errno;
	return 0;
}

void arena_folio_prepare(struct arena *a, uint32_t seg, uint64_t off, uint64_t len)
{
	struct arena_seg *s = &a->seg[seg];
	uint64_t c = off / HUGEMAP_ALIGN, end = (off + len + HUGEMAP_ALIGN - 1) / HUGEMAP_ALIGN;

	if (end > s->nchunks)
		end = s->nchunks;
	for (; c < end && arena_folios_now(a) != FOLIOS_NONE; c++) {
		int r;
		if (__atomic_exchange_n(&s->folio_tried[c], 1, __ATOMIC_ACQ_REL))
			continue;
		r = arena_folio_collapse(s->fd, s->ro, c * HUGEMAP_ALIGN);
		if (r == 0) {
			__atomic_fetch_add(&a->folios_made, 1, __ATOMIC_RELAXED);
			continue;
		}
		__atomic_fetch_add(&a->folios_failed, 1, __ATOMIC_RELAXED);
		/* Refused outright (an old kernel, shmem_enabled deny, an
		 * unaligned mapping): no other chunk will do better. */
		if (r == -EINVAL || r == -EPERM || r == -EOPNOTSUPP)
			__atomic_store_n(&a->folios, FOLIOS_NONE, __ATOMIC_RELAXED);
	}
}

void arena_folio_warm_range(const struct arena_seg *s, uint64_t off, uint64_t len)
{
	const volatile uint8_t *p = s->ro;
	uint64_t end = off + len < s->nchunks * HUGEMAP_ALIGN ? off + len : s->nchunks * HUGEMAP_ALIGN;
	uint8_t sum = 0;

	if (!s->folio_tried || !p)
		return;
	for (; off < end; off += 4096)
		sum += p[off];
	(void)sum;
}

void arena_folio_warm(const struct arena_seg *s)
{
	arena_folio_warm_range(s, 0, s->nchunks * HUGEMAP_ALIGN);
}

bool arena_folio_note_into(struct arena *a, char *buf, size_t len, const char *when)
{
	uint64_t made = __atomic_load_n(&a->folios_made, __ATOMIC_RELAXED);
	uint64_t failed = __atomic_load_n(&a->folios_failed, __ATOMIC_RELAXED);
	uint64_t chunks = 0;

	if (!a->seg || (!made && !failed))
		return false;
	for (uint32_t i = 0; i < a->nseg; i++)
		chunks += a->seg[i].nchunks;
	if (chunks < made + failed)
		chunks = made + failed;
	snprintf(buf, len,
		 "2 MiB folios by MADV_COLLAPSE%s: %" PRIu64 " of %" PRIu64 " chunks%s%s (no huge-page pool; "
		 "with one, hugetlb pages are used: docs/operations.md, Huge pages)",
		 when, made, chunks, made < chunks ? ", the rest in 4 KiB pages" : "",
		 arena_folios_now(a) != FOLIOS_NONE ? "" : " (the kernel refused the collapse)");
	return true;
}

void arena_folio_note(struct arena *a)
{
	arena_folio_note_into(a, a->hugepage_note, sizeof(a->hugepage_note), "");
}

bool arena_folios_complete(const struct arena *a)
{
	uint64_t chunks = 0;

	/* Made after the load: complete once the sweep has said so (its
	 * note), so that the page size and the note a client reads together
	 * agree; the last folio came a moment before the note did, and a
	 * client read 2 MiB pages beside "to be made now". */
	if (arena_folios_now(a) == FOLIOS_AFTER && !__atomic_load_n(&a->pages_note, __ATOMIC_ACQUIRE))
		return false;
	for (uint32_t i = 0; i < a->nseg; i++)
		chunks += a->seg[i].nchunks;
	return chunks && __atomic_load_n(&a->folios_made, __ATOMIC_RELAXED) == chunks;
}

void arena_folio_free(struct arena *a)
{
	for (uint32_t i = 0; i < a->nseg; i++) {
		free(a->seg[i].folio_tried);
		a->seg[i].folio_tried = NULL;
	}
}
