// SPDX-License-Identifier: MIT
/* tier_evict.h - the disk tier's eviction (tier_evict.c): which cached
 * segment or unit goes, the room a read makes, and the count of units'
 * memfds. Under tier.mu (tier_state.h). */
#ifndef WSRV_TIER_EVICT_H
#define WSRV_TIER_EVICT_H

#include <stdbool.h>
#include <stdint.h>

#include "tier_state.h"

/* Segment or unit g's fd and mapping go With cut (an
 * eviction), its memfd is cut to nothing first (memfd_cut): a worker
 * that kept a mapping or an fd of it after letting it go, or a process
 * forked from one, keeps no memory past the budget (a read there faults);
 * without (the tier's end: a restart's clients keep what they map), the
 * pages stay while a client maps them. */
void tier_drop_locked(struct tier *t, uint32_t g, bool cut);

/* Units' memfds, counted for every tier of the process against a limit
 * (tier_unit_fd_limit, which sets it with tier_unit_fds_limit): n more
 * taken if they fit (whether they did), or n given back. A segment's fd is the arena's, counted in
 * the server's own. */
bool tier_unit_fds_take(uint32_t n);
void tier_unit_fds_put(uint32_t n);
void tier_unit_fds_limit(uint32_t max);

/* Room for a read-ahead of size bytes and nfds units' memfds, and beside
 * it for the largest segment, from what is free and what a pass left
 * whether it fits; when it does, the nfds are taken
 * (tier_unit_fds_take). */
bool tier_room_ahead_locked(struct tier *t, uint64_t size, uint32_t nfds);

/* Evicts what nobody holds while the counts are past the budget (the
 * first load's fills, tier_fill_begin): whether they fit now. */
bool tier_evict_over_locked(struct tier *t);
/* Room for size bytes and nfds units' memfds: evicts, then waits for
 * releases a while: 0 (the nfds taken), -ENOMEM (bytes), -EMFILE (fds),
 * or -ECANCELED (stopping). The lock is let go while it waits. */
int tier_make_room_locked(struct tier *t, uint64_t size, uint32_t nfds);

#endif
