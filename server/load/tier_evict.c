// SPDX-License-Identifier: MIT
/* tier_evict.c - the disk tier's eviction (tier.h): which cached segment
 * or unit goes, and the room a read makes; the reads are tier_fetch.c's. */
#include "tier_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hugemap.h"
#include "loader.h"
#include "loader_pool.h"
#include "log.h"
#include "memfd_util.h"
#include "units.h"

/* The fd and mapping of segment or unit g go; pages a client still maps
 * stay its. */
void tier_drop_locked(struct tier *t, uint32_t g)
{
	struct tier_seg *ts = &t->s[g];
	struct arena_seg *as = &t->lm->arena->seg[ts->seg];
	const uint8_t **ro = g < t->nseg ? &as->ro : &ts->ro;
	int *fd = g < t->nseg ? &as->fd : &ts->fd;

	if (*ro)
		munmap((void *)*ro, as->size);
	if (*fd >= 0)
		close(*fd);
	*ro = NULL;
	*fd = -1;
	if (ts->cached)
		t->cached -= unit_size(t, g);
	ts->cached = false;
}

/* Whether worker w took s since it was read. */
static bool took(const struct tier_seg *s, uint64_t w)
{
	if (s->ntakers > TAKERS)
		return true;
	for (unsigned k = 0; k < s->ntakers; k++)
		if (s->takers[k] == w)
			return true;
	return false;
}

/* How soon segment g is taken next, in segments: the least distance
 * forward from a worker's place (its last take or request; workers go in
 * layer order, and wrap) to g, of the workers that have yet to take it;
 * UINT32_MAX when none has (a pass left it). */
static uint32_t next_use(const struct tier *t, uint32_t g)
{
	uint32_t best = UINT32_MAX;

	for (size_t i = 0; i < t->nplaces; i++) {
		uint32_t d = (g + t->n - t->places[i].seg) % t->n;
		if (d < best && !took(&t->s[g], t->places[i].worker))
			best = d;
	}
	return best;
}

/* Which goes first: the lower class, then the later next use, then the
 * least recently used.
 * 0: taken since it was read, none again. One no worker still comes for
 *    (a pass left it) goes first of all; then the one furthest from its
 *    next use (Belady's choice, with the workers' places, tier_read.h):
 *    workers close together keep what the ones behind take next, and
 *    workers far apart lose the least.
 * 1: hot, a worker took it again since it was read: a scan of the model
 *    must not flush it.
 * 2: not taken yet: read for a worker that is about to take it, or ahead
 *    of one (evicting it first would read it again, and again). */
static int victim_class(const struct tier_seg *s)
{
	return s->hot ? 1 : !s->ntakers ? 2 : 0;
}

/* The cached segment nobody holds that goes first, of class at most
 * worst (with all_took: only one no worker still comes for), or
 * UINT32_MAX. */
static uint32_t victim(const struct tier *t, int worst, bool all_took)
{
	uint32_t best = UINT32_MAX, bn = 0;
	int bc = 3;

	for (uint32_t g = 0; g < t->n; g++) {
		const struct tier_seg *s = &t->s[g];
		int c;
		if (!s->cached || s->holds || (c = victim_class(s)) > worst)
			continue;
		uint32_t n = c == 0 ? next_use(t, g) : 0;
		if (all_took && n != UINT32_MAX)
			continue;
		if (best == UINT32_MAX || c < bc || (c == bc && (n > bn || (n == bn && s->used < t->s[best].used)))) {
			best = g;
			bc = c;
			bn = n;
		}
	}
	return best;
}

/* Room for a read-ahead of size bytes, and beside it for the largest
 * segment (a request must never find the budget all taken by reads ahead
 * and evict a hot segment, or wait): what is free, and what a pass left
 * (class 0, no worker still coming for it); never a hot segment, nor one
 * a worker has yet to take. Whether it fits. */
bool tier_room_ahead_locked(struct tier *t, uint64_t size)
{
	while (!fits(t, size + t->largest)) {
		uint32_t v = victim(t, 0, true);
		if (v == UINT32_MAX)
			return false;
		tier_drop_locked(t, v);
		t->st.evictions++;
	}
	return true;
}

/* Makes room for size bytes: evicts, then waits for releases a while. */
int tier_make_room_locked(struct tier *t, uint64_t size)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ROOM_WAIT_S;
	while (!fits(t, size) && !t->stop) {
		uint32_t v = victim(t, 2, false);
		if (v != UINT32_MAX) {
			tier_drop_locked(t, v);
			t->st.evictions++;
			continue;
		}
		if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
			return fits(t, size) ? 0 : -ENOMEM;
	}
	return t->stop ? -ECANCELED : 0;
}
