// SPDX-License-Identifier: MIT
/* ready_track.c - segments sealed and marked ready as they fill. */
#include "ready_track.h"

#include "tier_door.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ready_track_init(struct ready_track *t, const struct model *m, struct arena *a,
		     struct ready_page *page, const uint8_t *want, struct errinfo *e)
{
	*t = (struct ready_track){ .m = m, .a = a, .page = page };
	t->left = calloc(arena_nseg(a) + 1, sizeof(*t->left));
	t->placed = calloc(m->ntensors + 1, 1);
	if (!t->left || !t->placed)
		return err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct model_tensor *mt = &m->tensors[i];
		if ((want && !want[i]) || mt->part_len == 0)
			t->placed[i] = 1;
		else
			t->left[mt->segment]++;
	}
	for (uint32_t s = 0; s < arena_nseg(a); s++) {
		if (t->left[s])
			continue;
		int r = arena_seal_segment(a, s, e);
		if (r < 0)
			return r;
		ready_page_segment(page, s);
	}
	return 0;
}

void ready_track_tensor(void *arg, uint32_t idx)
{
	struct ready_track *t = arg;
	const struct model_tensor *mt = &t->m->tensors[idx];
	uint32_t s = mt->segment;

	if (t->placed[idx])
		return;
	t->placed[idx] = 1;
	ready_page_tensor(t->page, idx, mt->xxh3, mt->part_len);
	if (--t->left[s] || t->err)
		return;
	t->err = arena_seal_segment(t->a, s, &t->e);
	if (t->err == 0)
		ready_page_segment(t->page, s);
	if (t->err == 0)
		tier_first_pass(t->tier, s);
}

void ready_track_tensor_start(void *arg, uint32_t idx)
{
	struct ready_track *t = arg;

	if (t->tier)
		tier_fill_begin(t->tier, t->m->tensors[idx].segment);
}

uint32_t ready_track_first_missing(const struct ready_track *t)
{
	uint32_t best = UINT32_MAX;

	for (size_t i = 0; t->placed && i < t->m->ntensors; i++) {
		if (t->placed[i])
			continue;
		if (best == UINT32_MAX || loader_order_key(t->m->tensors[i].layer) < loader_order_key(t->m->tensors[best].layer) ||
		    (loader_order_key(t->m->tensors[i].layer) == loader_order_key(t->m->tensors[best].layer) &&
		     t->m->tensors[i].file_off < t->m->tensors[best].file_off))
			best = (uint32_t)i;
	}
	return best;
}

void ready_track_free(struct ready_track *t)
{
	free(t->left);
	free(t->placed);
	t->left = NULL;
	t->placed = NULL;
}
