// SPDX-License-Identifier: MIT
/* tier_evict.c - the disk tier's eviction (tier.h): which cached segment
 * or unit goes, and the room a read makes; the reads are tier_fetch.c's. */
#include "tier_evict.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hugemap.h"
#include "load_door.h"
#include "log.h"
#include "memfd_util.h"
#include "units.h"

void tier_drop_locked(struct tier *t, uint32_t g, bool cut)
{
	struct tier_seg *ts = &t->s[g];
	const uint8_t *ro = ts->ro;
	int fd = ts->fd, r;

	if (g < t->nseg)
		arena_piece_take(t->own.arena, g, &fd, &ro);
	ts->fd = -1;
	ts->ro = NULL;
	if (ro)
		munmap((void *)ro, g < t->nseg ? arena_seg_size(t->own.arena, g) : ts->len);
	if (cut && fd >= 0 && (r = memfd_cut(fd)) < 0 && !(t->said & SAID_CUT)) {
		t->said |= SAID_CUT;
		log_warn("model %s: cannot cut an evicted piece of the disk tier (%s): a worker that still maps one keeps its memory",
			 t->own.model->name, strerror(-r));
	}
	if (fd >= 0)
		close(fd);
	if (ts->state == TS_CACHED) {
		t->cached -= unit_size(t, g);
		if (g >= t->nseg)
			tier_unit_fds_put(1);
	}
	ts_to(ts, TS_ON_DISK);
}

/* Units' memfds open in this process, and the most there may be
 * (tier.h): atomics, shared by every model's tier. */
static uint32_t unit_fds, unit_fd_max = UINT32_MAX;

void tier_unit_fds_limit(uint32_t max)
{
	__atomic_store_n(&unit_fd_max, max, __ATOMIC_RELAXED);
}

bool tier_unit_fds_take(uint32_t n)
{
	uint32_t max = __atomic_load_n(&unit_fd_max, __ATOMIC_RELAXED);
	uint32_t now = __atomic_load_n(&unit_fds, __ATOMIC_RELAXED);

	do {
		if (now > max || n > max - now)
			return false;
	} while (!__atomic_compare_exchange_n(&unit_fds, &now, now + n, false, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return true;
}

void tier_unit_fds_put(uint32_t n)
{
	__atomic_fetch_sub(&unit_fds, n, __ATOMIC_RELAXED);
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
 *    next use (Belady's choice, with the workers' places, tier_state.h):
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

/* The cached segment or unit nobody holds that goes first, of class at
 * most worst (with all_took: only one no worker still comes for; with
 * unit: only a unit, whose memfd is what is short), or UINT32_MAX. */
static uint32_t victim(const struct tier *t, int worst, bool all_took, bool unit)
{
	uint32_t best = UINT32_MAX, bn = 0;
	int bc = 3;

	for (uint32_t g = unit ? t->nseg : 0; g < t->n; g++) {
		const struct tier_seg *s = &t->s[g];
		int c;
		if (s->state != TS_CACHED || s->holds || (c = victim_class(s)) > worst)
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

/* Whether size bytes and nfds units' memfds fit, the fds taken if so;
 * else the victim of class at most worst that makes the room short, in
 * *v (UINT32_MAX: none). */
static bool room_or_victim(struct tier *t, uint64_t size, uint32_t nfds, int worst, bool all_took, uint32_t *v)
{
	bool bytes = fits(t, size);

	if (bytes && tier_unit_fds_take(nfds))
		return true;
	*v = victim(t, worst, all_took, bytes);
	return false;
}

/* Room for a read-ahead of size bytes, and beside it for the largest
 * segment (a request must never find the budget all taken by reads ahead
 * and evict a hot segment, or wait): what is free, and what a pass left
 * (class 0, no worker still coming for it); never a hot segment, nor one
 * a worker has yet to take. Whether it fits. */
bool tier_room_ahead_locked(struct tier *t, uint64_t size, uint32_t nfds)
{
	uint32_t v;

	while (!room_or_victim(t, size + t->largest, nfds, 0, true, &v)) {
		if (v == UINT32_MAX)
			return false;
		tier_drop_locked(t, v, true);
		t->st.evictions++;
	}
	return true;
}

/* The segment cached last that nobody has taken or holds, or
 * UINT32_MAX: what the first load keeps is the earliest layers, which a
 * worker's first pass takes first. */
static uint32_t newest_untaken(const struct tier *t)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t g = 0; g < t->nseg; g++) {
		const struct tier_seg *s = &t->s[g];
		if (s->state == TS_CACHED && !s->holds && !s->ntakers && (best == UINT32_MAX || s->used > t->s[best].used))
			best = g;
	}
	return best;
}

bool tier_evict_over_locked(struct tier *t)
{
	uint32_t v;

	while (!fits(t, 0)) {
		if ((v = newest_untaken(t)) == UINT32_MAX && (v = victim(t, 2, false, false)) == UINT32_MAX)
			return false;
		tier_drop_locked(t, v, true);
		t->st.evictions++;
	}
	return true;
}

/* Makes room for size bytes and nfds units' memfds: evicts, then waits
 * for releases a while. */
int tier_make_room_locked(struct tier *t, uint64_t size, uint32_t nfds)
{
	struct timespec until;
	bool late = false;
	uint32_t v;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ROOM_WAIT_S;
	/* Woken by a release, or by another reader's read ending (its bytes
	 * no longer reading, its pieces cached and nobody's yet); the last
	 * look, at the deadline, may evict as every other does. */
	while (!t->stop && !room_or_victim(t, size, nfds, 2, false, &v)) {
		if (v != UINT32_MAX) {
			tier_drop_locked(t, v, true);
			t->st.evictions++;
			continue;
		}
		if (late)
			return fits(t, size) ? -EMFILE : -ENOMEM;
		late = pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT;
	}
	return t->stop ? -ECANCELED : 0;
}
