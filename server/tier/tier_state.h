// SPDX-License-Identifier: MIT
/* tier_state.h - the disk tier's state, shared by its parts: tier_start.c
 * (what stays, the first load's pass), tier.c (takes, holds, counters,
 * read-ahead), tier_evict.c (eviction, room) and tier_fetch.c (the reader
 * threads and their reads). Everything here
 * is under tier.mu. */
#ifndef WSRV_TIER_STATE_H
#define WSRV_TIER_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "load_door.h"
#include "tier_types.h"

#define ROOM_WAIT_S 10      /* how long a read waits for a hold to go */
#define READERS 2           /* reads at once: one's copy and checksum beside the other's I/O */
/* Reads in flight for one segment: the loader's buffers are fresh memory
 * each read, and a segment (tens of MB) needs no more to keep the disk
 * busy (docs/benchmarks.md, wsrv-bench tier, against the default 64). */
#define READ_QD 8
#define READ_AHEAD 2        /* tiered segments queued after a miss, or a hit on one read
                             * ahead, in layer order */
#define TAKERS 8            /* workers a segment remembers having taken it */
#define BATCH_UNITS 16      /* queued units of one segment read together */
#define BATCH_BYTES (16u << 20)


/* Where a piece's bytes are. Its transitions are written in one place,
 * ts_to (tier_state.c), which checks them (lifecycle.h):
 *
 *   TS_STAYS    not on the tier: in memory for good (the arena's), every
 *               piece's first state      -> LOADING (tier_start marks the
 *               tiered ones); else final
 *   TS_LOADING  on the tier, the first load not past it yet (its
 *               checksums unknown: nothing reads it)   -> FILLING, CACHED, ON_DISK
 *   TS_FILLING  the first load fills it, its pages counted
 *               (tier_fill_begin)                      -> CACHED, ON_DISK
 *   TS_ON_DISK  on disk alone                          -> READING, ON_DISK
 *   TS_READING  a reader reads it into fresh memfds    -> CACHED, ON_DISK
 *   TS_CACHED   in memory, its fd and mapping set      -> ON_DISK
 *
 * The first load's pass takes a LOADING or FILLING piece to CACHED (kept
 * within the budget) or ON_DISK; a read takes it from ON_DISK through
 * READING to CACHED (or back, failed); eviction from CACHED to ON_DISK. */
enum tier_state { TS_STAYS, TS_LOADING, TS_FILLING, TS_ON_DISK, TS_READING, TS_CACHED, TIER_STATE_MAX };

/* Whether, and why, a piece is in the read queue (t->q). */
enum tier_queue { TQ_NONE, TQ_ASKED, TQ_AHEAD };

/* A cached piece since it was read: taken since (or kept from the first
 * load), or not yet, read for a request or ahead of one: its next take
 * misses, and one read ahead reads further ahead. */
enum tier_fresh { FRESH_NO, FRESH_READ, FRESH_AHEAD };

/* A segment of the arena, or a unit of one (tier_units.h): t->s[g] for
 * segment g, t->s[nseg + k] for unit k. */
struct tier_seg {
	uint32_t seg;           /* its segment */
	uint64_t len;           /* its bytes: the segment's, or the unit's pages */
	uint64_t off;           /* a unit's first byte in its segment; 0 */
	uint32_t units;         /* a segment's units */
	int fd;                 /* a unit's memfd while cached, else -1 (a segment's
	                         * fd and mapping are the arena's) */
	const uint8_t *ro;      /* that memfd mapped, the segment's size */
	enum tier_state state;
	enum tier_queue queue;
	enum tier_fresh fresh;
	bool logged;            /* its failure was logged */
	bool single;            /* a read with others failed: read alone next, so
	                         * that a failure names its own tensor */
	int err;                /* the last read's failure, told once */
	char msg[1400];
	uint32_t holds;
	/* The workers (sessions) that took it since it was last read in: a
	 * pass's, or hot when one of them took it again. */
	uint64_t takers[TAKERS];
	uint8_t ntakers;        /* TAKERS + 1: more than TAKERS took it */
	bool hot;
	uint64_t used;          /* when last taken (a tick) */
	uint32_t mark;          /* counted in this pass over the holds (tier.epoch) */
};

struct hold {
	uint64_t holder;
	uint64_t account;       /* whose share it counts against: the worker's
	                         * process, over all its connections (tier.h) */
	uint32_t uid;           /* and its user's */
	uint32_t seg;
};

/* A worker's place in the model: the segment it last took or asked for.
 * Kept from its first take to its attachment's end, so that a worker
 * that holds nothing while it waits for a read still counts (eviction
 * keeps what it takes next). */
struct place {
	uint64_t worker;
	uint32_t seg;
};

struct tier {
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* a queued read, a release, stop */
	pthread_t th[READERS];
	int running;             /* reader threads started */
	bool stop;
	bool retired;            /* its generation was replaced: nothing is read
	                          * ahead, and a piece nobody holds goes (tier_retire) */
	struct tier_model own;   /* the owner's model, arena and page */
	struct loader_opts lo;
	/* What stays; what is cached; what reads and the first load fill
	 * (tier_fill_begin); their most at once. */
	uint64_t budget, resident, cached, reading_bytes, peak, tick;
	uint64_t largest;           /* the largest tiered segment */
	uint64_t share;             /* the most one worker may hold (tier.h, TIER_SHARE_PCT) */
	uint64_t cache;             /* what the budget leaves for the cache */
	uint64_t piece;             /* the largest piece (the least a share is) */
	uint32_t epoch;             /* the last pass over the holds (tier_seg.mark) */
	struct tier_seg *s;
	uint32_t nseg;              /* the arena's segments */
	uint32_t n;                 /* of s: the segments, then the units */
	uint32_t *q, qn;        /* queued reads, first in first out */
	struct hold *h;
	size_t nh, caph;
	struct place *places;
	size_t nplaces, capplaces;
	struct tier_stats st;
	unsigned said;              /* what was logged once (enum tier_said) */
};

/* The tier's log-once messages. */
enum tier_said {
	SAID_MISCOUNT = 1 << 0,     /* tier_stats found the count wrong */
	SAID_OVER = 1 << 1,         /* a peak past the budget */
	SAID_CUT = 1 << 2,          /* a failed memfd_cut */
};

/* Piece ts goes to state to: the one place a piece's state changes; a
 * move its table refuses is logged, asserted and not made, and each move
 * is logged at debug level (lifecycle.h). */
void ts_to(struct tier_seg *ts, enum tier_state to);

/* Whether piece ts lives on the disk tier (it may be cached now). */
static inline bool ts_tiered(const struct tier_seg *ts)
{
	return ts->state != TS_STAYS;
}

/* Whether the first load has passed it: its checksums are known, and a
 * read can check what it reads. */
static inline bool ts_passed(const struct tier_seg *ts)
{
	return ts->state == TS_ON_DISK || ts->state == TS_READING || ts->state == TS_CACHED;
}

/* Checks, in debug and sanitizer builds, what holds between the tier's
 * calls: each piece's state against its fd, holds and queue, and the
 * counts against the pieces. Under the lock. */
#ifdef NDEBUG
static inline void tier_check_locked(const struct tier *t)
{
	(void)t;
}
#else
void tier_check_locked(const struct tier *t);
#endif

/* Piece g's memfd: the arena's for a segment, its own for a unit (-1:
 * not in memory). */
static inline int tier_piece_fd(const struct tier *t, uint32_t g)
{
	return g < t->nseg ? arena_seg_fd(t->own.arena, g) : t->s[g].fd;
}

/* Bytes of segment or unit g. */
static inline uint64_t unit_size(const struct tier *t, uint32_t g)
{
	return t->s[g].len;
}

static inline bool fits(const struct tier *t, uint64_t more)
{
	return t->resident + t->cached + t->reading_bytes + more <= t->budget;
}

/* After a count grew: the peak. */
static inline void count_peak(struct tier *t)
{
	uint64_t now = t->resident + t->cached + t->reading_bytes;

	if (now > t->peak)
		t->peak = now;
}

/* The worker (session) of a holder: srv_tier_holder's session part. */
static inline uint64_t holder_worker(uint64_t holder)
{
	return holder >> 16;
}

/* Segment or unit g is cached from now on, taken by nobody yet, its
 * bytes counted (its fd and mapping set by the caller). */
static inline void cache_locked(struct tier *t, uint32_t g)
{
	struct tier_seg *ts = &t->s[g];

	ts_to(ts, TS_CACHED);
	ts->ntakers = 0;
	ts->hot = false;
	ts->used = ++t->tick;
	t->cached += ts->len;
	count_peak(t);
}

/* Of j's n pieces g[0..n), the units (each one memfd). */
static inline uint32_t units_in(const struct tier *t, const uint32_t *g, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		k += g[i] >= t->nseg;
	return k;
}

#endif
