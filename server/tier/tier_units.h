// SPDX-License-Identifier: MIT
/* tier_units.h - a disk tier's units: each routed expert of each layer,
 * read, cached and mapped alone, so that a MoE token reads the
 * experts it routes to and not the whole layer. The layout starts each
 * expert's tensors on a page and the tensor after them too
 * (model_opts.expert_pages), so a unit is whole pages of its segment. */
#ifndef WSRV_TIER_UNITS_H
#define WSRV_TIER_UNITS_H

#include <stdint.h>

#include "load_door.h"
#include "format_door.h"
#include "ready.h"

#define UNIT_PAGE 4096u

/* How many units model m has under budget bytes: none when the whole
 * arena fits (nothing is tiered then but what the budget's room for reads
 * asks), when the arena's pages are huge (a unit is whole 4 KiB pages,
 * left out of its segment's memfd), or when no tensor names a routed expert. */
uint32_t tier_units_count(const struct model *m, const struct arena *a, uint64_t budget);

/* Fills units[0..n) (n from tier_units_count) in tensor order: layer,
 * then expert. */
void tier_units_find(const struct model *m, struct rd_unit *units, uint32_t n);

/* The units of m as laid out (model_opts.expert_pages), whatever the
 * arena: their count, and with units set, them (for a plan made offline,
 * tier_plan.h). */
uint32_t tier_units_of(const struct model *m, struct rd_unit *units);

#endif
