// SPDX-License-Identifier: MIT
/* arena_sweep.c - 2 MiB folios made once the load is done
 * (arena_sweep.h). */
#include "arena_sweep.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "arena_struct.h"
#include "arena_folio.h"
#include "hugemap.h"
#include "log.h"
#include "clock.h"

struct sweep {
	struct arena *a;
	char label[128];
	const char *when;          /* in the note: " after the load" */
};

static bool stopping(const struct arena *a)
{
	return __atomic_load_n(&a->sweep, __ATOMIC_RELAXED) == SWEEP_STOPPING ||
	       arena_folios_now(a) == FOLIOS_NONE;
}

/* Whether a chunk was never tried (the sweep stopped before it). */
static bool untried(const struct arena *a)
{
	for (uint32_t i = 0; i < a->nseg; i++)
		for (uint64_t c = 0; c < a->seg[i].nchunks; c++)
			if (!__atomic_load_n(&a->seg[i].folio_tried[c], __ATOMIC_ACQUIRE))
				return true;
	return false;
}

/* Every chunk of segment seg, one by one, until told to stop: made one
 * folio, then read once through the server's mapping (arena_folio_warm). */
static void sweep_seg(struct arena *a, uint32_t seg)
{
	struct arena_seg *s = &a->seg[seg];

	for (uint64_t c = 0; c < s->nchunks && !stopping(a); c++) {
		arena_folio_prepare(a, seg, c * HUGEMAP_ALIGN, HUGEMAP_ALIGN);
		arena_folio_warm_range(s, c * HUGEMAP_ALIGN, HUGEMAP_ALIGN);
	}
}

/* At normal priority, from the moment the model is loaded: no model stays
 * on 4 KiB pages longer than the collapse of its bytes takes (at
 * SCHED_IDLE, on a busy host, that could be never). Not during the load:
 * even an idle-priority collapse beside it slows it on a small host
 * (docs/benchmarks.md). */
static void *sweep_main(void *arg)
{
	struct sweep *w = arg;
	struct arena *a = w->a;
	double t0 = mono_now();

	for (uint32_t i = 0; i < a->nseg && !stopping(a); i++)
		sweep_seg(a, i);
	if (arena_folio_note_into(a, a->sweep_note, sizeof(a->sweep_note), w->when)) {
		__atomic_store_n(&a->pages_note, a->sweep_note, __ATOMIC_RELEASE);
		/* Stopped early only when a chunk was left untried (a stop that
		 * came after the last one stopped nothing). */
		log_info("model %s: %s, in %.3f s%s", w->label, a->sweep_note, mono_now() - t0,
			 untried(a) ? " (stopped early)" : "");
	}
	free(w);
	return NULL;
}

static int sweep_start(struct arena *a, const char *label, const char *when)
{
	struct sweep *w;
	pthread_t th;
	int r;

	if (a->sweep != SWEEP_NONE)
		return -EALREADY;
	if (arena_folios_now(a) != FOLIOS_AFTER)
		return -EINVAL;
	if (!(w = calloc(1, sizeof(*w))))
		return -ENOMEM;
	w->a = a;
	w->when = when;
	snprintf(w->label, sizeof(w->label), "%s", label);
	if ((r = pthread_create(&th, NULL, sweep_main, w)) != 0) {
		free(w);
		return -r;
	}
	a->sweep_th = th;
	a->sweep = SWEEP_RUNNING;
	return 0;
}

int arena_sweep_start(struct arena *a, const char *label)
{
	return sweep_start(a, label, " after the load");
}

int arena_sweep_adopted(struct arena *a, const char *label, const char *when)
{
	char why[160];
	int r;

	if (a->page_size != 4096 || !arena_folio_possible(why, sizeof(why)))
		return 0; /* huge pages already, or none to be had: as it was */
	if ((r = arena_folio_init(a)) < 0)
		return r;
	__atomic_store_n(&a->folios, FOLIOS_AFTER, __ATOMIC_RELAXED);
	snprintf(a->hugepage_note, sizeof(a->hugepage_note),
		 "2 MiB folios to come: each whole 2 MiB chunk made one (or kept one) by MADV_COLLAPSE%s; "
		 "4 KiB pages until then", when);
	return sweep_start(a, label, when);
}

void arena_sweep_wait(struct arena *a)
{
	if (a->sweep == SWEEP_NONE)
		return;
	pthread_join(a->sweep_th, NULL);
	a->sweep = SWEEP_NONE;
}

void arena_sweep_stop(struct arena *a)
{
	if (a->sweep == SWEEP_RUNNING)
		__atomic_store_n(&a->sweep, SWEEP_STOPPING, __ATOMIC_RELAXED);
	arena_sweep_wait(a);
}
