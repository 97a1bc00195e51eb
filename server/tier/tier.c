// SPDX-License-Identifier: MIT
/* tier.c - a host memory budget and a disk tier (tier.h): takes, holds,
 * read-ahead, counters and the end; what stays is tier_start.c's,
 * eviction tier_evict.c's, the reads tier_fetch.c's. */
#include "tier.h"
#include "tier_evict.h"
#include "tier_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "units.h"

bool tier_on_disk(const struct tier *t, uint32_t g)
{
	return t && g < t->n && ts_tiered(&t->s[g]);
}

/* Records holder's hold of g (once per holder and segment), counted
 * against who's shares. */
static int hold_locked(struct tier *t, uint64_t holder, const struct tier_who *who, uint32_t g)
{
	for (size_t i = 0; i < t->nh; i++)
		if (t->h[i].holder == holder && t->h[i].seg == g)
			return 0;
	if (t->nh == t->caph) {
		size_t cap = t->caph ? 2 * t->caph : 64;
		struct hold *h = realloc(t->h, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		t->h = h;
		t->caph = cap;
	}
	t->h[t->nh++] = (struct hold){ .holder = holder, .account = who->account, .uid = who->uid, .seg = g };
	t->s[g].holds++;
	return 0;
}

/* Segment or unit g joins the read queue, asked for or read ahead. */
static void queue_locked(struct tier *t, uint32_t g, enum tier_queue why)
{
	t->q[t->qn++] = g;
	t->s[g].queue = why;
	t->st.queued = t->qn;
}

/* Segment or unit k is queued to be read ahead, unless it is in memory,
 * on its way, failed, or not passed by the first load yet (its checksums
 * would be those of nothing yet, and the read would fail). */
static void queue_ahead_locked(struct tier *t, uint32_t k)
{
	struct tier_seg *ks = &t->s[k];

	if (ks->state != TS_ON_DISK || ks->queue != TQ_NONE || ks->err || t->retired)
		return;
	queue_locked(t, k, TQ_AHEAD);
}

/* Segment k, or its units, read ahead: whether it has any on the tier. */
static bool ahead_one_locked(struct tier *t, uint32_t k)
{
	if (ts_tiered(&t->s[k])) {
		queue_ahead_locked(t, k);
		return true;
	}
	for (uint32_t u = t->nseg; t->s[k].units && u < t->n; u++)
		if (t->s[u].seg == k)
			queue_ahead_locked(t, u);
	return t->s[k].units > 0;
}

/* After a miss on a layer's segment (or one of its units, when the whole
 * layer is asked for), or the first take of one read ahead, by the only
 * worker reading the model, the next tiered segments (the layers that
 * follow, then the first ones again, as a worker's next pass starts
 * there) are queued too, so the disk stays busy while the worker copies
 * and computes and the window slides with it. Whether each is read is
 * the reader's call (tier_fetch.c: a read-ahead only takes room that is
 * free or left by a pass). */
static void read_ahead_locked(struct tier *t, uint32_t g)
{
	uint32_t seg = t->s[g].seg;

	/* One worker only: several keep the readers busy with their own
	 * streams' prefetches, and reads ahead of the leader crowd the
	 * cache the ones behind share (docs/benchmarks.md, wsrv-bench tier). */
	if (t->nplaces > 1)
		return;
	/* Past the last layer, the first: a worker's next pass starts there. */
	for (uint32_t j = 1, n = 0; j < t->nseg && n < READ_AHEAD; j++)
		n += ahead_one_locked(t, (seg + j) % t->nseg);
}

/* holder's worker took ts: hot when it had taken it before. */
static void took_locked(struct tier_seg *ts, uint64_t holder)
{
	uint64_t w = holder_worker(holder);

	for (unsigned i = 0; i < ts->ntakers && i < TAKERS; i++)
		if (ts->takers[i] == w) {
			ts->hot = true;
			return;
		}
	if (ts->ntakers < TAKERS)
		ts->takers[ts->ntakers] = w;
	if (ts->ntakers <= TAKERS)
		ts->ntakers++;
}

/* holder's worker is at g now (a place is best effort: none is kept
 * when memory runs out). */
static void place_locked(struct tier *t, uint64_t holder, uint32_t g)
{
	uint64_t w = holder_worker(holder);

	for (size_t i = 0; i < t->nplaces; i++)
		if (t->places[i].worker == w) {
			t->places[i].seg = g;
			return;
		}
	if (t->nplaces == t->capplaces) {
		size_t cap = t->capplaces ? 2 * t->capplaces : 16;
		struct place *p = realloc(t->places, cap * sizeof(*p));
		if (!p)
			return;
		t->places = p;
		t->capplaces = cap;
	}
	t->places[t->nplaces++] = (struct place){ w, g };
}

static void unhold_locked(struct tier *t, size_t i)
{
	uint32_t g = t->h[i].seg;

	t->s[g].holds--;
	t->h[i] = t->h[--t->nh];
	/* A retired generation's piece goes with its last holder. */
	if (t->retired && t->s[g].holds == 0 && t->s[g].state == TS_CACHED)
		tier_drop_locked(t, g, true);
	pthread_cond_broadcast(&t->cv);
}

/* What who's process and who's user hold now: a piece two of the
 * process's connections hold counts for each (a take of a piece the
 * process holds already is never refused); the user's pieces count once
 * however many of its processes hold them (workers of one user take the
 * same layers). *has_g: the process holds g; *user_g: the user does. */
static void held_locked(struct tier *t, const struct tier_who *who, uint32_t g, uint64_t *proc, uint64_t *user,
			bool *has_g, bool *user_g)
{
	uint32_t mark = ++t->epoch;

	*proc = *user = 0;
	*has_g = *user_g = false;
	for (size_t i = 0; i < t->nh; i++) {
		const struct hold *h = &t->h[i];
		if (h->uid == who->uid && t->s[h->seg].mark != mark) {
			t->s[h->seg].mark = mark;
			*user += t->s[h->seg].len;
			*user_g |= h->seg == g;
		}
		if (h->account != who->account)
			continue;
		*has_g |= h->seg == g;
		*proc += t->s[h->seg].len;
	}
}

/* A user's part of the cache (tier.h): the cache over the users
 * attached, never less than one piece; a user alone has no part but the
 * budget (its takes wait for room as ever). */
static uint64_t user_part(const struct tier *t, uint32_t users)
{
	uint64_t part = t->cache / (users ? users : 1);

	return part > t->piece ? part : t->piece;
}

/* Whether who, taking g for holder (unless holder holds it already),
 * goes past its process's share or its user's part of the cache
 * (tier.h): -EDQUOT with a sentence, or 0. */
static int past_share_locked(struct tier *t, uint64_t holder, const struct tier_who *who, uint32_t g, char *msg,
			     size_t mlen)
{
	uint64_t proc, user, part = user_part(t, who->users);
	bool has_g, user_g;
	char a[32], b[32], ask[32];

	for (size_t i = 0; i < t->nh; i++)
		if (t->h[i].holder == holder && t->h[i].seg == g)
			return 0;
	held_locked(t, who, g, &proc, &user, &has_g, &user_g);
	if (has_g)
		return 0;
	fmt_bytes(t->s[g].len, ask, sizeof(ask));
	if (proc + t->s[g].len > t->share) {
		snprintf(msg, mlen, "this worker's process holds %s of model %s's disk tier cache and asks for %s more, and one "
			 "process may hold %s (--memory-budget-share): let some go first (release, or detach what "
			 "wsrv_model_wait mapped)",
			 fmt_bytes(proc, a, sizeof(a)), t->own.model->name, ask, fmt_bytes(t->share, b, sizeof(b)));
		return -EDQUOT;
	}
	if (who->users > 1 && !user_g && user + t->s[g].len > part) {
		snprintf(msg, mlen, "uid %u's processes hold %s of model %s's disk tier cache and ask for %s more, and with "
			 "%u users attached one user may hold %s: let some go first (release, or detach what "
			 "wsrv_model_wait mapped)",
			 who->uid, fmt_bytes(user, a, sizeof(a)), t->own.model->name, ask, who->users,
			 fmt_bytes(part, b, sizeof(b)));
		return -EDQUOT;
	}
	return 0;
}

void tier_reaccount(struct tier *t, uint64_t was, uint64_t now)
{
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->nh; i++)
		if (t->h[i].account == was)
			t->h[i].account = now;
	pthread_mutex_unlock(&t->mu);
}

/* tier_take under the lock; the readers are to be woken (*kick) when a
 * read was queued. layer: g is a segment, or a unit asked for with the
 * rest of its layer (experts one by one are asked for in no order, and
 * read nothing ahead). */
static int take_locked(struct tier *t, uint64_t holder, const struct tier_who *who, uint32_t g, int *fd, char *msg,
		       size_t len, bool layer, bool *kick)
{
	struct tier_seg *ts = &t->s[g];
	int r = 0;

	if (ts_tiered(ts) && (r = past_share_locked(t, holder, who, g, msg, len)) < 0)
		return r;
	if (ts_tiered(ts))
		place_locked(t, holder, g);
	if (!ts_tiered(ts)) {
		*fd = arena_seg_fd(t->own.arena, g);
	} else if (ts->err) {
		r = ts->err;
		snprintf(msg, len, "%s", ts->msg);
		ts->err = 0; /* told once; the next request reads again */
	} else if (ts->state == TS_CACHED && (r = hold_locked(t, holder, who, g)) == 0) {
		enum tier_fresh was = ts->fresh;
		ts->used = ++t->tick;
		took_locked(ts, holder);
		/* A take the disk was read for (now, or ahead) misses. */
		if (was != FRESH_NO)
			t->st.misses++;
		else
			t->st.hits++;
		ts->fresh = FRESH_NO;
		*fd = tier_piece_fd(t, g);
		if (was == FRESH_AHEAD) {
			if (layer)
				read_ahead_locked(t, g);
			*kick = true;
		}
	} else if (r == 0) {
		if (ts->queue == TQ_NONE && ts->state != TS_READING) {
			queue_locked(t, g, TQ_ASKED);
			if (layer)
				read_ahead_locked(t, g);
			*kick = true;
		}
		if (ts->queue == TQ_AHEAD)
			ts->queue = TQ_ASKED; /* asked for now: it may wait for room */
		r = -EAGAIN;
	}
	return r;
}

int tier_take(struct tier *t, uint64_t holder, const struct tier_who *who, uint32_t g, int *fd, char *msg, size_t len)
{
	bool kick = false;
	int r;

	pthread_mutex_lock(&t->mu);
	r = take_locked(t, holder, who, g, fd, msg, len, g < t->nseg, &kick);
	if (kick)
		pthread_cond_broadcast(&t->cv);
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
	return r;
}

/* Whether g[0..n) holds more than half the units of the first one's
 * segment: a stream of whole layers asking for one (a request holds 62
 * at most; a token's experts are a few of their layer's). */
static bool whole_layer_locked(const struct tier *t, const uint32_t *g, size_t n)
{
	uint32_t seg, k = 0;

	if (!n || g[0] < t->nseg || g[0] >= t->n)
		return false;
	seg = t->s[g[0]].seg;
	for (size_t i = 0; i < n; i++)
		k += g[i] >= t->nseg && g[i] < t->n && t->s[g[i]].seg == seg;
	return 2 * k > t->s[seg].units;
}

int tier_take_some(struct tier *t, uint64_t holder, const struct tier_who *who, const uint32_t *g, size_t n, size_t max,
		   int *fds, uint32_t *given, size_t *ngiven, char *msg, size_t len)
{
	bool kick = false;
	int r = 0;

	*ngiven = 0;
	pthread_mutex_lock(&t->mu);
	bool layer = whole_layer_locked(t, g, n);
	for (size_t i = 0; i < n && *ngiven < max && r >= 0; i++)
		if ((r = take_locked(t, holder, who, g[i], &fds[*ngiven], msg, len, layer || g[i] < t->nseg,
				     &kick)) == 0)
			given[(*ngiven)++] = g[i];
		else if (r == -EAGAIN)
			r = 0;
	for (size_t i = 0; r < 0 && i < *ngiven; i++) /* all or none, on a failure */
		for (size_t k = 0; k < t->nh; k++)
			if (t->h[k].holder == holder && t->h[k].seg == given[i]) {
				unhold_locked(t, k);
				break;
			}
	if (r < 0)
		*ngiven = 0;
	/* The readers woken once every read is queued: units of one
	 * segment are read together then (tier_fetch.c). */
	if (kick)
		pthread_cond_broadcast(&t->cv);
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
	return r;
}


int tier_release(struct tier *t, uint64_t holder, uint32_t g)
{
	int r = -ENOENT;

	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->nh; i++)
		if (t->h[i].holder == holder && t->h[i].seg == g) {
			unhold_locked(t, i);
			r = 0;
			break;
		}
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
	return r;
}

void tier_release_all(struct tier *t, uint64_t holder)
{
	pthread_mutex_lock(&t->mu);
	for (size_t i = t->nh; i-- > 0;)
		if (t->h[i].holder == holder)
			unhold_locked(t, i);
	for (size_t i = 0; i < t->nplaces; i++) /* the worker is gone from here */
		if (t->places[i].worker == holder_worker(holder)) {
			t->places[i] = t->places[--t->nplaces];
			break;
		}
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
}

void tier_retire(struct tier *t)
{
	size_t k = 0;

	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->retired = true;
	for (size_t i = 0; i < t->qn; i++) /* reads ahead: for nobody now */
		if (t->s[t->q[i]].queue == TQ_AHEAD)
			t->s[t->q[i]].queue = TQ_NONE;
		else
			t->q[k++] = t->q[i];
	t->qn = (uint32_t)k;
	t->st.queued = t->qn;
	for (uint32_t g = 0; g < t->n; g++)
		if (t->s[g].state == TS_CACHED && t->s[g].holds == 0)
			tier_drop_locked(t, g, true);
	tier_check_locked(t);
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

void tier_stats(struct tier *t, struct tier_stats *st)
{
	pthread_mutex_lock(&t->mu);
	*st = t->st;
	st->budget = t->budget;
	st->resident_bytes = t->resident;
	st->cached_bytes = t->cached;
	st->peak_bytes = t->peak;
	st->disk_bytes = st->held_bytes = 0;
	uint64_t cached = 0;
	for (uint32_t g = 0; g < t->n; g++) {
		if (ts_tiered(&t->s[g]) && t->s[g].state != TS_CACHED)
			st->disk_bytes += unit_size(t, g);
		if (t->s[g].holds)
			st->held_bytes += unit_size(t, g);
		if (t->s[g].state == TS_CACHED)
			cached += unit_size(t, g);
	}
	/* A self-check: the budget's count is the segments' (a segment read
	 * twice at once once leaked a memfd and shrank the budget for good). */
	if (cached != t->cached && !(t->said & SAID_MISCOUNT)) {
		log_err("model %s: disk tier accounting: %llu bytes counted cached, the segments hold %llu",
			t->own.model->name, (unsigned long long)t->cached, (unsigned long long)cached);
		t->said |= SAID_MISCOUNT;
	}
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
}

void tier_free(struct tier *t)
{
	if (!t)
		return;
	if (t->running) {
		pthread_mutex_lock(&t->mu);
		t->stop = true;
		pthread_cond_broadcast(&t->cv);
		tier_check_locked(t);
		pthread_mutex_unlock(&t->mu);
		for (int i = 0; i < t->running; i++)
			pthread_join(t->th[i], NULL);
	}
	for (uint32_t g = t->nseg; t->s && g < t->n; g++)
		if (ts_tiered(&t->s[g])) /* a tier that failed to start has none */
			tier_drop_locked(t, g, false); /* clients keep what they map */
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	free(t->s);
	free(t->q);
	free(t->h);
	free(t->places);
	free(t);
}

void tier_unit_fd_limit(uint32_t max)
{
	tier_unit_fds_limit(max);
}
