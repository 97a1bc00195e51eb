// SPDX-License-Identifier: MIT
/* arena_sweep.c - 2 MiB folios after the load, on an idle thread
 * (arena_sweep.h). */
#include "arena_sweep.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena_struct.h"
#include "arena_folio.h"
#include "hugemap.h"
#include "log.h"
#include "clock.h"

struct sweep {
	struct arena *a;
	char label[128];
};

/* Low priority: the sweep takes only what no worker and no load wants. */
static void sweep_idle(void)
{
	struct sched_param sp = { 0 };

	if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
		log_debug("the folio sweep runs at normal priority (SCHED_IDLE refused)");
}

/* Every chunk of segment seg, one by one, until told to stop: made one
 * folio, then read once through the server's mapping (arena_folio_warm). */
static void sweep_seg(struct arena *a, uint32_t seg)
{
	struct arena_seg *s = &a->seg[seg];

	for (uint64_t c = 0; c < s->nchunks; c++) {
		if (__atomic_load_n(&a->sweep, __ATOMIC_RELAXED) == SWEEP_STOPPING ||
		    arena_folios_now(a) == FOLIOS_NONE)
			return;
		arena_folio_prepare(a, seg, c * HUGEMAP_ALIGN, HUGEMAP_ALIGN);
		arena_folio_warm_range(s, c * HUGEMAP_ALIGN, HUGEMAP_ALIGN);
	}
}

static void *sweep_main(void *arg)
{
	struct sweep *w = arg;
	struct arena *a = w->a;
	double t0 = mono_now();

	sweep_idle();
	for (uint32_t i = 0; i < a->nseg; i++)
		sweep_seg(a, i);
	if (arena_folio_note_into(a, a->sweep_note, sizeof(a->sweep_note), " after the load")) {
		__atomic_store_n(&a->pages_note, a->sweep_note, __ATOMIC_RELEASE);
		log_info("model %s: %s, in %.3f s%s", w->label, a->sweep_note, mono_now() - t0,
			 __atomic_load_n(&a->sweep, __ATOMIC_RELAXED) == SWEEP_STOPPING ? " (stopped early)" : "");
	}
	free(w);
	return NULL;
}

int arena_sweep_start(struct arena *a, const char *label)
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
	snprintf(w->label, sizeof(w->label), "%s", label);
	if ((r = pthread_create(&th, NULL, sweep_main, w)) != 0) {
		free(w);
		return -r;
	}
	a->sweep_th = th;
	a->sweep = SWEEP_RUNNING;
	return 0;
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
