// SPDX-License-Identifier: MIT
/* ready_verify.c - a resumed attachment (ready_resume.c) takes each piece
 * from the new server only when its bytes are the ones it attached to:
 * every tensor of the piece whose checksum both the new server's page and
 * an older one know must have the same checksum on both. The layout alone
 * cannot tell: a file rewritten in place with other bytes of the same
 * size and header lays out the same. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "ready_verify.h"

#include "attached.h"

/* The tensors of each piece, grouped (counting sort), for g. */
static int group_by_piece(const struct wsrv_model *m, struct ready_gen *g)
{
	uint32_t np = cl_npieces(m), nt = m->v.h->ntensors;
	uint32_t *first = calloc((size_t)np + 2, sizeof(*first)), *ids = malloc(((size_t)nt + 1) * sizeof(*ids));

	if (!first || !ids || !(g->checked = calloc((size_t)np + 1, 1))) {
		free(first);
		free(ids);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nt; i++)
		first[cl_piece(m, i) + 2]++;
	for (uint32_t p = 0; p < np; p++)
		first[p + 2] += first[p + 1];
	for (uint32_t i = 0; i < nt; i++)
		ids[first[cl_piece(m, i) + 1]++] = i;
	g->piece_first = first; /* piece p: ids[first[p] .. first[p + 1]) */
	g->piece_tensors = ids;
	return 0;
}

/* The checksum of tensor i an older page knows (the newest of them that
 * does), or 0. */
static uint64_t attached_sum(const struct ready_gen *g, uint32_t i)
{
	for (const struct ready_gen *o = g->older; o; o = o->older) {
		uint64_t v = __atomic_load_n(&o->rv.xxh3[i], __ATOMIC_ACQUIRE);
		if (v)
			return v;
	}
	return 0;
}

int cl_resume_check(struct wsrv_model *m, uint32_t p)
{
	struct ready_gen *g = __atomic_load_n(&m->ready, __ATOMIC_ACQUIRE);
	int r;

	if (!g || !g->older || p >= cl_npieces(m) || (g->checked && g->checked[p]))
		return 0;
	if (!g->piece_first && (r = group_by_piece(m, g)) < 0)
		return cl_err(r, "out of memory");
	for (uint32_t k = g->piece_first[p]; k < g->piece_first[p + 1]; k++) {
		uint32_t i = g->piece_tensors[k];
		uint64_t now = __atomic_load_n(&g->rv.xxh3[i], __ATOMIC_ACQUIRE), then = attached_sum(g, i);
		if (now && then && now != then)
			return cl_err(-ESTALE, "model %s changed on disk across the server's restart: tensor %s has "
				      "other bytes now (xxh3 %016" PRIx64 ", attached with %016" PRIx64 "); attach again",
				      m->name, m->v.strings + m->v.tensors[i].name_off, now, then);
	}
	g->checked[p] = true;
	return 0;
}
