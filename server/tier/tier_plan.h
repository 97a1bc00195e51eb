// SPDX-License-Identifier: MIT
/* tier_plan.h - what a memory budget keeps in memory and what goes on
 * the disk tier, computed from the layout alone: wsrvd's tier
 * (tier_start.c) applies it, and `wsrvctl inspect --memory-budget` prints
 * it before any server runs, so the two cannot disagree. */
#ifndef WSRV_TIER_PLAN_H
#define WSRV_TIER_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "format_door.h"
#include "ready.h"

/* A segment's fate under a budget. */
enum tier_seg_state {
	TIER_STAYS = 0,     /* in memory whole */
	TIER_PARTS,         /* in memory but for its units (routed experts) */
	TIER_DISK,          /* on the disk tier, read as workers need it */
};

/* The cache keeps room for this many of the largest pieces at least: a
 * worker's in use and prefetched, another's, and one being read. */
#define TIER_CACHE_ROOM 4

struct tier_choice {
	uint64_t resident;  /* bytes that always stay (overhead included) */
	uint64_t largest;   /* the largest piece on disk: a segment or a unit */
	uint64_t need;      /* the smallest budget that starts: the global group, the
	                     * MoE layers' parts, the overhead, and two of the largest */
	uint64_t cache;     /* what the budget leaves for the cache */
	uint64_t disk_bytes;/* pieces on the disk tier */
	uint32_t disk_segments, units;
};

/* Bytes of segment g as a budget's arena has it: whole 4 KiB pages (a
 * tiered arena makes no 2 MiB folios). */
uint64_t tier_seg_bytes(const struct model *m, uint32_t g);

/* Whether budget tiers model m at all: below its arena's bytes. */
bool tier_wanted(const struct model *m, uint64_t budget);

/* The plan for budget over segments of seg_size[0..m->nsegments) with
 * units[0..nunits) (tier_units_find) and overhead bytes that stay beside
 * them (the manifest, the readiness page): state[g] for each segment and
 * the sums in *out. 0; or -ENOMEM when budget is below out->need (the
 * sums are filled all the same). */
int tier_choose(const struct model *m, const uint64_t *seg_size, const struct rd_unit *units, uint32_t nunits,
		uint64_t overhead, uint64_t budget, uint8_t *state, struct tier_choice *out);

#endif
