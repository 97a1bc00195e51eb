// SPDX-License-Identifier: MIT
/* tier.h - a host memory budget and a disk tier for one model.
 *
 * With --memory-budget, the model's global group (embeddings, norms, the
 * head) and as many whole layer segments as fit, in layer order, stay in
 * memory; every other segment lives on disk. The first load still reads
 * every byte once (each tensor's xxh3 goes into the manifest), keeping a
 * tiered segment cached when the budget has room and dropping it when not.
 *
 * A client asks for a tiered segment with AttachSegments. Cached: it gets
 * the fd, and the segment is held for it until it lets it go
 * (AttachSegments with release) or leaves. Not cached: the reply is
 * EAGAIN, the segment is queued, and the reader thread reads it with the
 * loader (io_uring, O_DIRECT) into a fresh
 * memfd, checks every tensor's xxh3 against the manifest, seals it and
 * only then caches it and raises the segment's word on the readiness page
 * (the client waits on it). A failed read or checksum answers the next
 * request with EIO naming the tensor, then is tried again on the one
 * after. One read serves every client that asks while it runs.
 *
 * The budget counts the resident segments and every cached one; a held
 * segment is never evicted, a cached one nobody holds is, least recently
 * used first. A fresh sealed memfd per read, never a rewritten one:
 * nothing a client maps can change under it. An evicted piece is cut to
 * nothing (memfd_cut), so that one a client kept after letting it go
 * holds no memory past the budget; a held piece is never evicted.
 *
 * A MoE model's routed experts are units of the tier (tier_units.h):
 * the segment with a layer stays but for them, and each expert is read,
 * cached, held and evicted alone, as a tiered segment is. A unit's id is
 * nsegments + its index on the readiness page, in AttachSegments as on
 * the page's words.
 *
 * Threads: the reader thread reads; the loop takes, releases and asks;
 * one mutex covers the state and the arena's tiered segments. */
#ifndef WSRV_TIER_H
#define WSRV_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "errinfo.h"
#include "load_door.h"
#include "tier_types.h"

struct tier;

/* Chooses what stays in memory within budget bytes: the global group's
 * segment, then whole segments in layer order. Refuses (-ENOMEM, with a
 * sentence that says how much is needed) a budget below the global group
 * plus the two largest tiered segments (one in use and one being read).
 * Marks the page's tiered segments, turns the arena's folios off (reads
 * fill 4 KiB pages) and starts the reader thread, which reads a segment
 * only once the first load has passed it. On success *out is the
 * caller's (tier_free, before the arena's); tm's parts must outlive it. */
int tier_create(const struct tier_model *tm, uint64_t budget, uint32_t share_pct, const struct loader_opts *lo,
		struct tier **out, struct errinfo *e);

/* One worker's process (an account: over all its connections) holds at
 * most share_pct (TIER_SHARE_PCT by default) of what the budget leaves
 * for the cache, and never less than the largest piece (a tiered
 * segment, or one routed expert: what one take needs). A take past it is
 * -EDQUOT at once, with a sentence, so that a worker that holds and sits
 * idle cannot starve the others, whatever the model's shape: a layer's
 * pieces on a MoE model can be more than the whole cache, so the floor is
 * one piece, and the share counts per process, over its connections.
 * Beside other users attached to the model, a user's processes together
 * hold at most the cache divided by the users attached now (never less
 * than one piece): beside one other, half; so that however many processes
 * or connections a user makes, no user keeps another from being served.
 * A user alone is bounded by the budget only, as before: a host whose
 * workers all run as one user loses nothing.
 * Holds are never taken back: what a user took while alone stays until
 * it lets go, and from then on it takes nothing past its part. */
#define TIER_SHARE_PCT 50

/* Whose share a take counts against. */
struct tier_who {
	uint64_t account;           /* the worker's process (srv_account) */
	uint32_t uid;               /* its user */
	uint32_t users;             /* users attached to the model now, at least 1 */
};

/* The first load is about to fill segment seg's first pages: a tiered
 * one's bytes (or a segment's units', whose pages go before its seal) are
 * counted from now until tier_first_pass, and cached segments nobody
 * holds are evicted to make their room. Loader thread. */
void tier_fill_begin(struct tier *t, uint32_t seg);

/* Bytes the model holds beside its segments (its manifest, once
 * written) count as staying from now on; cached segments nobody holds
 * make the room. Loader thread. */
void tier_count_resident(struct tier *t, uint64_t bytes);

/* The first load sealed segment seg (its bytes checked): a tiered one is
 * kept while the budget has room, else dropped; its units may be read
 * from now on. Loader thread. */
void tier_first_pass(struct tier *t, uint32_t seg);

/* The tier's segments and units: ids below this are valid. */
uint32_t tier_count(const struct tier *t);
/* The segment of segment or unit g (below tier_count). */
uint32_t tier_segment_of(const struct tier *t, uint32_t g);

/* Whether segment or unit seg lives on the disk tier. */
bool tier_on_disk(const struct tier *t, uint32_t seg);

/* The fd of segment or unit seg for holder (a session's attachment),
 * held for it and counted against who's shares: 0; or
 * -EAGAIN (a read is queued; its tier word rises when done); or -EIO or
 * -ENOMEM with a sentence in msg (a failed read; a budget every byte of
 * which is held). The fd stays open while the hold lasts. Loop thread. */
int tier_take(struct tier *t, uint64_t holder, const struct tier_who *who, uint32_t seg, int *fd, char *msg, size_t len);

/* tier_take of g[0..n) at once, for AttachSegments.partial: those in
 * memory are held and their fds (max at most) go to fds, their ids to
 * given[0..*ngiven); the others are queued to be read, together (the
 * readers wake once all are queued). 0, or a failure of one (-EIO with
 * msg...), and then none is held. */
int tier_take_some(struct tier *t, uint64_t holder, const struct tier_who *who, const uint32_t *g, size_t n, size_t max,
		   int *fds, uint32_t *given, size_t *ngiven, char *msg, size_t len);

/* Every hold counted against account `was` counts against `now` from
 * here on (its process is gone: srv_identity.h). Loop thread. */
void tier_reaccount(struct tier *t, uint64_t was, uint64_t now);

/* holder lets segment seg go: 0, or -ENOENT when it held none. */
int tier_release(struct tier *t, uint64_t holder, uint32_t seg);

/* Every hold of holder goes (a session that left). */
void tier_release_all(struct tier *t, uint64_t holder);

void tier_stats(struct tier *t, struct tier_stats *st);

/* The most units' memfds (routed experts read from disk, each its own
 * memfd) every tier of this process may hold open at once, cached or
 * being read: what RLIMIT_NOFILE leaves after the server's own fds, its
 * clients and a reserve (wsrvd's fd_limits). Past it, the least useful
 * unit nobody holds is evicted as for bytes. Unlimited until set. */
void tier_unit_fd_limit(uint32_t max);

/* The tier's generation was replaced (a reload): every cached piece
 * nobody holds is evicted now, and each still held goes as its last
 * holder lets it go; nothing more is read ahead. Its clients keep what
 * they hold, and a retired generation keeps no cache beside the new
 * one's budget. Loop thread. NULL is fine. */
void tier_retire(struct tier *t);

/* Stops the reader, closes every cached fd. NULL is fine. */
void tier_free(struct tier *t);

#endif
