// SPDX-License-Identifier: MIT
/* piece_read.c - segments' parts read into memfds of their own, and put in
 * a segment's place (piece_read.h). */
#include "piece_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "arena.h"
#include "arena_folio.h"
#include "arena_struct.h"

int piece_read(struct model *m, const struct arena *a, uint32_t g, struct piece *p, uint32_t n,
	       const struct loader_opts *lo, struct loader_stats *st, struct errinfo *e)
{
	struct arena tmp = *a;
	struct arena_split *split = calloc(n + 1, sizeof(*split));
	struct arena_seg *segs = calloc(a->nseg, sizeof(*segs));
	int r = split && segs ? 0 : err_set(e, -ENOMEM, "out of memory");

	for (uint32_t i = 0; r == 0 && i < a->nseg; i++)
		segs[i].fd = -1;
	for (uint32_t i = 0; r == 0 && i < n; i++)
		split[i] = (struct arena_split){ p[i].off, p[i].len, p[i].fd };
	if (r == 0) {
		segs[g] = (struct arena_seg){ .fd = p[0].fd, .size = a->seg[g].size, .split = split, .nsplit = n };
		tmp.seg = segs;
		tmp.folios = FOLIOS_NONE;
		tmp.sweep = SWEEP_NONE;
		tmp.sealed = false;
		tmp.page_size = 4096; /* filled by write */
		r = loader_run(m, &tmp, lo, st, e);
	}
	for (uint32_t i = 0; r == 0 && i < n; i++) {
		segs[g] = (struct arena_seg){ .fd = p[i].fd, .size = p[i].size, .ro = p[i].ro, .cuttable = true };
		r = arena_seal_segment(&tmp, g, e);
		p[i].fd = segs[g].fd; /* sealing gave it a read-only description */
	}
	free(split);
	free(segs);
	return r;
}

void arena_piece_cuttable(struct arena *a, uint32_t g)
{
	a->seg[g].cuttable = true;
}

void arena_piece_put(struct arena *a, uint32_t g, int fd, const uint8_t *ro)
{
	a->seg[g].fd = fd;
	a->seg[g].ro = ro;
}

void arena_piece_take(struct arena *a, uint32_t g, int *fd, const uint8_t **ro)
{
	*fd = a->seg[g].fd;
	*ro = a->seg[g].ro;
	a->seg[g].fd = -1;
	a->seg[g].ro = NULL;
}

void arena_folios_off(struct arena *a, const char *why)
{
	__atomic_store_n(&a->folios, FOLIOS_NONE, __ATOMIC_RELAXED);
	arena_folio_free(a);
	if (!arena_hugetlb(a))
		snprintf(a->hugepage_note, sizeof(a->hugepage_note), "%s", why);
}
