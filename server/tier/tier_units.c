// SPDX-License-Identifier: MIT
/* tier_units.c - a disk tier's units (tier_units.h). */
#include "tier_units.h"

#include "format_door.h"

static uint64_t page_up(uint64_t v)
{
	return (v + UNIT_PAGE - 1) & ~(uint64_t)(UNIT_PAGE - 1);
}

/* Whether tensor i starts a unit: a routed expert's first tensor in its
 * layer (the layout keeps an expert's tensors together: one name prefix). */
static bool starts_unit(const struct model *m, size_t i, int32_t *x)
{
	const struct model_tensor *t = &m->tensors[i];

	*x = t->layer >= 0 ? expert_from_name(t->name) : -1;
	return *x >= 0 && (i == 0 || m->tensors[i - 1].layer != t->layer ||
			   expert_from_name(m->tensors[i - 1].name) != *x);
}

/* Walks the units, filling units when not NULL; their count. */
static uint32_t walk(const struct model *m, struct rd_unit *units)
{
	uint32_t n = 0;
	int32_t x;

	for (size_t i = 0; i < m->ntensors; i++) {
		if (!starts_unit(m, i, &x))
			continue;
		size_t j = i;
		while (j + 1 < m->ntensors && m->tensors[j + 1].layer == m->tensors[i].layer &&
		       expert_from_name(m->tensors[j + 1].name) == x)
			j++;
		if (units)
			units[n] = (struct rd_unit){
				.segment = m->tensors[i].segment, .layer = m->tensors[i].layer, .expert = (uint32_t)x,
				.offset = m->tensors[i].offset,
				.length = page_up(m->tensors[j].offset + m->tensors[j].size) - m->tensors[i].offset };
		n++;
	}
	return n;
}

uint32_t tier_units_count(const struct model *m, const struct arena *a, uint64_t budget)
{
	uint64_t all = 0;

	for (uint32_t g = 0; g < arena_nseg(a); g++)
		all += arena_seg_size(a, g);
	if (!budget || all <= budget || arena_hugetlb(a) || arena_page_size(a) != UNIT_PAGE)
		return 0;
	return walk(m, NULL);
}

uint32_t tier_units_of(const struct model *m, struct rd_unit *units)
{
	return walk(m, units);
}

void tier_units_find(const struct model *m, struct rd_unit *units, uint32_t n)
{
	if (n && walk(m, NULL) == n)
		walk(m, units);
}
