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

#include "loader.h"
#include "loader_pool.h"
#include "tier_types.h"

#define ROOM_WAIT_S 10      /* how long a read waits for a hold to go */
#define READERS 2           /* reads at once: one's copy and checksum beside the other's I/O */
/* Reads in flight for one segment: the loader's buffers are fresh memory
 * each read, and a segment (tens of MB) needs no more to keep the disk
 * busy; 8 against the default 64: a pass 0.37-0.49 s against 0.49-0.58 s
 * (docs/benchmarks.md, wsrv-bench tier). */
#define READ_QD 8
#define READ_AHEAD 2        /* tiered segments queued after a miss, or a hit on one read
                             * ahead, in layer order */
#define TAKERS 8            /* workers a segment remembers having taken it */
#define BATCH_UNITS 16      /* queued units of one segment read together */
#define BATCH_BYTES (16u << 20)


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
	bool disk;              /* lives on the disk tier */
	bool passed;            /* the first load passed it: its checksums are known */
	bool filling;           /* the first load fills it (tier_fill_begin), not passed yet */
	bool cached;            /* its fd and mapping are in the arena */
	bool queued, reading;
	bool ahead;             /* queued by read-ahead, not by a request */
	bool prefetched;        /* read in by read-ahead, not taken since */
	bool fresh;             /* read from disk, not taken since: its next take misses */
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
};

struct hold {
	uint64_t holder;
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
	struct tier_model own;   /* the owner's model, arena and page */
	struct loader_opts lo;
	/* What stays; what is cached; what reads and the first load fill
	 * (tier_fill_begin); their most at once. */
	uint64_t budget, resident, cached, reading_bytes, peak, tick;
	uint64_t largest;           /* the largest tiered segment */
	uint64_t share;             /* the most one worker may hold (tier.h, TIER_SHARE_PCT) */
	struct tier_seg *s;
	uint32_t nseg;              /* the arena's segments */
	uint32_t n;                 /* of s: the segments, then the units */
	uint32_t *q, qn;        /* queued reads, first in first out */
	struct hold *h;
	size_t nh, caph;
	struct place *places;
	size_t nplaces, capplaces;
	struct tier_stats st;
	bool miscounted;            /* tier_stats found the count wrong (logged once) */
	bool said_over;             /* a peak past the budget was logged */
	bool said_cut;              /* a failed memfd_cut was logged */
};

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

	ts->cached = true;
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
