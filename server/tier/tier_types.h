// SPDX-License-Identifier: MIT
/* tier_types.h - what a disk tier is given and what it reports (tier.h),
 * apart so that the tier's own state (tier_state.h) can hold them. */
#ifndef WSRV_TIER_TYPES_H
#define WSRV_TIER_TYPES_H

#include <stdint.h>

#include "load_door.h"
#include "format_door.h"

/* What a tier works on, its owner's (a loaded model's): the model, the
 * arena its segments are in, its readiness page (the tier marks its
 * segments and units there), and the bytes of its laid-out manifest,
 * which stay in memory. The tier writes none of their fields but through
 * their own calls. */
struct tier_model {
	struct model *model;
	struct arena *arena;
	struct ready_page *ready;
	uint64_t layout_size;
};

struct tier_stats {
	uint64_t budget, resident_bytes, cached_bytes, disk_bytes, held_bytes;
	/* The most the tier counted at once (what stays, what is cached, what
	 * reads and the first load fill): the peak the budget bounds. */
	uint64_t peak_bytes;
	uint64_t hits, misses, read_bytes, evictions, failures;
	uint32_t reads_in_flight, queued;
};

#endif
