// SPDX-License-Identifier: MIT
/* tier_state.c - a tier piece's moves from state to state, and the checks
 * of what holds between the tier's calls (tier_state.h). */
#include "tier_state.h"

#include <assert.h>

#include "lifecycle.h"

static const char *const names[TIER_STATE_MAX] = {
	[TS_STAYS] = "stays", [TS_LOADING] = "loading", [TS_FILLING] = "filling",
	[TS_ON_DISK] = "on disk", [TS_READING] = "reading", [TS_CACHED] = "cached",
};

static const unsigned moves[TIER_STATE_MAX] = {
	[TS_STAYS] = LIFE_BIT(TS_LOADING),
	[TS_LOADING] = LIFE_BIT(TS_FILLING) | LIFE_BIT(TS_CACHED) | LIFE_BIT(TS_ON_DISK),
	[TS_FILLING] = LIFE_BIT(TS_CACHED) | LIFE_BIT(TS_ON_DISK),
	[TS_ON_DISK] = LIFE_BIT(TS_READING) | LIFE_BIT(TS_ON_DISK),
	[TS_READING] = LIFE_BIT(TS_CACHED) | LIFE_BIT(TS_ON_DISK),
	[TS_CACHED] = LIFE_BIT(TS_ON_DISK),
};

static const struct lifecycle piece_life = { "disk tier piece of segment", TIER_STATE_MAX, names, moves };

void ts_to(struct tier_seg *ts, enum tier_state to)
{
	if (life_check(&piece_life, ts->seg, ts->state, to) < 0)
		return;
	ts->state = to;
	if (to != TS_CACHED)
		ts->fresh = FRESH_NO;
}

#ifndef NDEBUG
void tier_check_locked(const struct tier *t)
{
	uint64_t cached = 0;
	uint32_t queued = 0;

	for (uint32_t g = 0; g < t->n; g++) {
		const struct tier_seg *ts = &t->s[g];
		/* In memory exactly when cached, for a tiered piece (a
		 * segment the first load fills has the arena's fd). */
		if (ts->state == TS_CACHED)
			cached += ts->len;
		assert(ts->state != TS_CACHED || tier_piece_fd(t, g) >= 0);
		assert(ts->state != TS_ON_DISK || tier_piece_fd(t, g) < 0);
		assert(ts->state != TS_READING || tier_piece_fd(t, g) < 0);
		assert(!ts->holds || ts->state == TS_CACHED || ts->state == TS_STAYS);
		assert(ts->fresh == FRESH_NO || ts->state == TS_CACHED);
		assert(ts->queue == TQ_NONE || ts_tiered(ts));
		assert(g >= t->nseg ? ts->state != TS_STAYS : true);
		queued += ts->queue != TQ_NONE;
	}
	assert(cached == t->cached);
	assert(queued == t->qn);
}
#endif
