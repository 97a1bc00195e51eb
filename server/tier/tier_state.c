// SPDX-License-Identifier: MIT
/* tier_state.c - a tier piece's moves from state to state, and the checks
 * of what holds between the tier's calls (tier_state.h). */
#include "tier_state.h"

#include <assert.h>

/* The moves ts_to allows: allowed[from] has bit to set. */
static const unsigned allowed[] __attribute__((unused)) = {
	[TS_STAYS] = 0,
	[TS_LOADING] = 1u << TS_FILLING | 1u << TS_CACHED | 1u << TS_ON_DISK,
	[TS_FILLING] = 1u << TS_CACHED | 1u << TS_ON_DISK,
	[TS_ON_DISK] = 1u << TS_READING | 1u << TS_ON_DISK,
	[TS_READING] = 1u << TS_CACHED | 1u << TS_ON_DISK,
	[TS_CACHED] = 1u << TS_ON_DISK,
};

void ts_to(struct tier_seg *ts, enum tier_state to)
{
	assert(allowed[ts->state] & 1u << to);
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
