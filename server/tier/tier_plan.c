// SPDX-License-Identifier: MIT
/* tier_plan.c - what a memory budget keeps (tier_plan.h). */
#include "tier_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_PAGE 4096u

uint64_t tier_seg_bytes(const struct model *m, uint32_t g)
{
	uint64_t b = m->seg_size[g] ? m->seg_size[g] : 1;

	return (b + PLAN_PAGE - 1) & ~(uint64_t)(PLAN_PAGE - 1);
}

bool tier_wanted(const struct model *m, uint64_t budget)
{
	uint64_t all = 0;

	for (uint32_t g = 0; g < m->nsegments; g++)
		all += tier_seg_bytes(m, g);
	return budget && all > budget;
}

/* What always stays: the global group's segments whole, a MoE layer's but
 * for its units (those go on disk). */
static void always(const struct model *m, const uint64_t *seg_size, const struct rd_unit *units, uint32_t nunits,
		   uint8_t *state, bool *fixed, struct tier_choice *out)
{
	for (size_t i = 0; i < m->ntensors; i++) {
		uint32_t g = m->tensors[i].segment;
		if (m->tensors[i].layer < 0 && !fixed[g]) {
			fixed[g] = true;
			out->resident += seg_size[g];
		}
	}
	for (uint32_t k = 0; k < nunits; k++) {
		uint32_t g = units[k].segment;
		if (!fixed[g]) {
			fixed[g] = true;
			state[g] = TIER_PARTS;
			out->resident += seg_size[g];
		}
		out->resident -= units[k].length;
		out->disk_bytes += units[k].length;
		out->largest = units[k].length > out->largest ? units[k].length : out->largest;
	}
	out->units = nunits;
}

int tier_choose(const struct model *m, const uint64_t *seg_size, const struct rd_unit *units, uint32_t nunits,
		uint64_t overhead, uint64_t budget, uint8_t *state, struct tier_choice *out)
{
	bool *fixed = calloc(m->nsegments + 1, sizeof(*fixed));
	uint64_t room;

	if (!fixed)
		return -ENOMEM;
	memset(state, TIER_STAYS, m->nsegments);
	*out = (struct tier_choice){ .resident = overhead };
	always(m, seg_size, units, nunits, state, fixed, out);
	for (uint32_t g = 0; g < m->nsegments; g++)
		if (!fixed[g] && seg_size[g] > out->largest)
			out->largest = seg_size[g];
	out->need = out->resident + 2 * out->largest;
	if (budget < out->need) {
		free(fixed);
		return -ENOMEM;
	}
	/* The cache is shared by every worker, which drift apart: it keeps
	 * half of what the fixed part leaves, and room for TIER_CACHE_ROOM
	 * pieces at least; whole layers stay, in order, while they fit
	 * beside it. */
	room = (budget - out->resident) / 2;
	room = room < TIER_CACHE_ROOM * out->largest ? TIER_CACHE_ROOM * out->largest : room;
	for (size_t l = 0; l < m->nlayers; l++) {
		uint32_t g = m->layers[l].segment;
		if (fixed[g])
			continue;
		fixed[g] = true;
		if (out->resident + seg_size[g] + room <= budget) {
			out->resident += seg_size[g];
		} else {
			state[g] = TIER_DISK;
			out->disk_bytes += seg_size[g];
			out->disk_segments++;
		}
	}
	out->cache = budget - out->resident;
	free(fixed);
	return 0;
}
