// SPDX-License-Identifier: MIT
/* tier_start.c - a disk tier's start (tier.h): what stays in memory (the
 * global group, a MoE layer but its routed experts, whole layers while
 * they fit), the readers started, and what the first load's pass of each
 * segment leaves cached; the units left out of their segments' memfds. */
#include "tier.h"
#include "tier_evict.h"
#include "tier_fetch.h"
#include "tier_state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_door.h"
#include "log.h"
#include "tier_plan.h"
#include "units.h"

static uint64_t page_up(uint64_t b)
{
	return (b + 4095) & ~(uint64_t)4095;
}

/* What stays (tier_plan.h, the same plan wsrvctl inspect prints): the
 * segments with global tensors (embeddings, norms, the head), those with
 * units but for the units, then whole segments in layer order while they
 * fit beside the cache's room; the others are marked on disk. -ENOMEM
 * (with what is needed) when the budget holds less than what stays and
 * two of the largest on disk. */
static int choose(struct tier *t, struct errinfo *e)
{
	const struct model *m = t->own.model;
	const struct ready_page *p = t->own.ready;
	uint64_t *size = calloc(t->nseg + 1, sizeof(*size));
	uint8_t *state = calloc(t->nseg + 1, 1);
	struct tier_choice c;
	char b[4][32];
	int r;

	for (uint32_t g = 0; size && g < t->nseg; g++)
		size[g] = unit_size(t, g);
	r = size && state ? tier_choose(m, size, p->units, t->n - t->nseg, t->resident, t->budget, state, &c) : -ENOMEM;
	free(size);
	if (r < 0 && !state) {
		return err_set(e, -ENOMEM, "out of memory");
	} else if (r < 0) {
		free(state);
		return err_set(e, -ENOMEM,
			       "--memory-budget %s is too small for model %s: what always stays (embeddings, norms, head%s) takes %s and a %s up to %s, so it needs at least %s (what stays and two of those: one in use, one being read; wsrvctl inspect --memory-budget shows the plan)",
			       fmt_bytes(t->budget, b[0], 32), m->name, t->n > t->nseg ? ", each layer but its routed experts" : "",
			       fmt_bytes(c.resident, b[1], 32), t->n > t->nseg ? "routed expert" : "layer segment",
			       fmt_bytes(c.largest, b[2], 32), fmt_bytes(c.need, b[3], 32));
	}
	t->resident = c.resident;
	t->largest = c.largest;
	for (uint32_t u = t->nseg; u < t->n; u++)
		ts_to(&t->s[u], TS_LOADING);
	for (uint32_t g = 0; g < t->nseg; g++) {
		if (state[g] == TIER_PARTS)
			ready_page_tier_parts(t->own.ready, g);
		if (state[g] != TIER_DISK)
			continue;
		ts_to(&t->s[g], TS_LOADING);
		arena_piece_cuttable(t->own.arena, g);
		ready_page_tier_on_disk(t->own.ready, g);
	}
	free(state);
	return 0;
}

/* The tier's segments, then its units (from the readiness page, where
 * model_load_begin put them). */
static int describe(struct tier *t)
{
	const struct ready_page *p = t->own.ready;
	uint32_t nunits = p->units ? p->h->nunits : 0;

	t->nseg = arena_nseg(t->own.arena);
	t->n = t->nseg + nunits;
	t->s = calloc(t->n, sizeof(*t->s));
	t->q = calloc(t->n, sizeof(*t->q));
	if (!t->s || !t->q)
		return -ENOMEM;
	for (uint32_t g = 0; g < t->n; g++) {
		struct tier_seg *ts = &t->s[g];
		ts->fd = -1;
		ts->seg = g < t->nseg ? g : p->units[g - t->nseg].segment;
		ts->off = g < t->nseg ? 0 : p->units[g - t->nseg].offset;
		ts->len = g < t->nseg ? arena_seg_size(t->own.arena, g) : p->units[g - t->nseg].length;
		if (g >= t->nseg)
			t->s[ts->seg].units++;
	}
	return 0;
}

/* Each segment with units leaves them out of its memfd (arena_compact):
 * a unit is a memfd of its own, and a hole in the segment's would be
 * pages any client that maps it and reads there (or a lock's populate)
 * brings in, past the budget. */
static int leave_units_out(struct tier *t, struct errinfo *e)
{
	struct arena_hole *h = calloc(t->n - t->nseg + 1, sizeof(*h));
	int r = h ? 0 : err_set(e, -ENOMEM, "out of memory");

	for (uint32_t g = 0; r == 0 && g < t->nseg; g++) {
		uint32_t n = 0;
		for (uint32_t u = t->nseg; t->s[g].units && u < t->n; u++)
			if (t->s[u].seg == g)
				h[n++] = (struct arena_hole){ t->s[u].off, t->s[u].len, 0 };
		if (n)
			r = arena_compact(t->own.arena, g, h, n, e);
	}
	free(h);
	return r;
}

/* The most one worker's process may hold (tier.h): share_pct (0:
 * TIER_SHARE_PCT) of what the budget leaves for the cache, never less
 * than the largest piece on the tier (one take's need). */
static int set_share(struct tier *t, uint32_t share_pct)
{
	uint64_t cache = t->budget > t->resident ? t->budget - t->resident : 0, piece = 0;

	for (uint32_t g = 0; g < t->n; g++)
		if (g >= t->nseg || ts_tiered(&t->s[g]))
			piece = t->s[g].len > piece ? t->s[g].len : piece;
	t->share = cache / 100 * (share_pct ? share_pct : TIER_SHARE_PCT);
	t->share = t->share > piece ? t->share : piece;
	t->cache = cache;
	t->piece = piece;
	return 0;
}

int tier_create(const struct tier_model *tm, uint64_t budget, uint32_t share_pct, const struct loader_opts *lo,
		struct tier **out, struct errinfo *e)
{
	tier_test_seam();
	struct tier *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return err_set(e, -ENOMEM, "out of memory");
	t->own = *tm;
	t->lo = *lo;
	t->budget = budget;
	/* The model's own memfds stay too: its laid-out manifest and its
	 * readiness page (the manifest written at the end: tier_count_resident). */
	t->resident = page_up(tm->layout_size) + page_up(tm->ready->size);
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	r = describe(t) == 0 ? choose(t, e) : err_set(e, -ENOMEM, "out of memory");
	if (r == 0)
		r = leave_units_out(t, e);
	if (r == 0 && set_share(t, share_pct) < 0)
		r = err_set(e, -ENOMEM, "out of memory");
	for (int i = 0; r == 0 && i < READERS; i++)
		if ((r = -pthread_create(&t->th[i], NULL, tier_reader_main, t)) < 0)
			err_set(e, r, "cannot start the disk tier's readers: %s", strerror(-r));
		else
			t->running++;
	if (r < 0) {
		tier_free(t);
		return r;
	}
	if (t->n > t->nseg)
		log_info("model %s: %u routed experts on the disk tier, each read alone; the rest of their layers stays (%s)",
			 tm->model->name, t->n - t->nseg, fmt_bytes(t->resident, (char[32]){ 0 }, 32));
	/* Reads fill 4 KiB pages; a sweep would walk segments being dropped. */
	arena_folios_off(tm->arena, "4 KiB pages (a disk tier: segments read again fill 4 KiB pages)");
	*out = t;
	return 0;
}

/* The first load passed segment or unit g: a tiered one is kept while
 * the budget has room for it and, beside it, the largest tiered segment
 * (the next fill, then a worker's first miss, as a read-ahead leaves;
 * tier_evict.c); a unit (never written by the first load): never. */
static void passed_locked(struct tier *t, uint32_t g)
{
	struct tier_seg *ts = &t->s[g];

	if (ts->state != TS_LOADING && ts->state != TS_FILLING)
		return;
	if (g >= t->nseg) /* a unit: never written by the first load */
		ts_to(ts, TS_ON_DISK);
	else if (fits(t, unit_size(t, g) + t->largest))
		cache_locked(t, g);
	else
		tier_drop_locked(t, g, true);
}

/* The pages the first load fills in segment g that are not counted as
 * staying: a tiered segment's (its units' are never written: their
 * segment's memfd leaves them out). */
static uint64_t fill_bytes(const struct tier *t, uint32_t g)
{
	return ts_tiered(&t->s[g]) ? unit_size(t, g) : 0;
}

/* The counts grew: what nobody holds makes room, and a peak past the
 * budget (workers hold the rest) is said once. */
static void over_locked(struct tier *t, const char *what)
{
	char b[2][32];
	bool fit = tier_evict_over_locked(t);

	/* After the room is made: the fill's pages come after this. */
	count_peak(t);
	if (fit || (t->said & SAID_OVER))
		return;
	t->said |= SAID_OVER;
	log_warn("model %s: %s goes past --memory-budget %s (%s counted): workers hold what could make room",
		 t->own.model->name, what, fmt_bytes(t->budget, b[0], 32),
		 fmt_bytes(t->resident + t->cached + t->reading_bytes, b[1], 32));
}

void tier_fill_begin(struct tier *t, uint32_t g)
{
	uint64_t b;

	if (!t || g >= t->nseg)
		return;
	pthread_mutex_lock(&t->mu);
	if (t->s[g].state == TS_LOADING && (b = fill_bytes(t, g))) {
		ts_to(&t->s[g], TS_FILLING);
		t->reading_bytes += b;
		over_locked(t, "the first load");
	}
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
}

void tier_count_resident(struct tier *t, uint64_t bytes)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->resident += page_up(bytes);
	over_locked(t, "the model's manifest");
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
}

void tier_first_pass(struct tier *t, uint32_t g)
{
	if (!t || g >= t->nseg)
		return;
	pthread_mutex_lock(&t->mu);
	if (t->s[g].state == TS_FILLING)
		t->reading_bytes -= fill_bytes(t, g);
	passed_locked(t, g);
	for (uint32_t u = t->nseg; u < t->n; u++)
		if (t->s[u].seg == g)
			passed_locked(t, u);
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
}

uint32_t tier_count(const struct tier *t)
{
	return t ? t->n : 0;
}

uint32_t tier_segment_of(const struct tier *t, uint32_t g)
{
	return t->s[g].seg;
}
