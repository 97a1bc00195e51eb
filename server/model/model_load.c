// SPDX-License-Identifier: MIT
/* model_load.c - files to sealed shared memory. */
#include "model_load.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "load_door.h"
#include "tier_door.h"
#include "log.h"
#include "manifest.h"
#include "format_door.h"
#include "packet.h"
#include "progress.h"
#include "ready_track.h"
#include "units.h"
#include <unistd.h>

struct populate_job {
	struct arena *a;
	const struct model *m;
	struct errinfo e;
	int r;
};

/* A partial load allocates only the held parts (runs of them, merged);
 * the rest of the arena stays holes in the memfds. */
static int populate_held(const struct model *m, struct arena *a, struct errinfo *e)
{
	uint64_t off = 0, end = 0;
	uint32_t seg = 0;
	int r = 0;

	for (size_t i = 0; r == 0 && i <= m->ntensors; i++) {
		const struct model_tensor *t = i < m->ntensors ? &m->tensors[i] : NULL;
		if (t && t->part_len == 0)
			continue;
		if (t && end > off && t->segment == seg && t->offset + t->part_off <= end + arena_page_size(a)) {
			end = t->offset + t->part_off + t->part_len;
			continue;
		}
		if (end > off)
			r = arena_populate_range(a, seg, off, end - off, e);
		if (t) {
			seg = t->segment;
			off = t->offset + t->part_off;
			end = off + t->part_len;
		}
	}
	return r;
}

static void *populate_main(void *arg)
{
	struct populate_job *j = arg;

	j->r = j->m->held ? populate_held(j->m, j->a, &j->e) : arena_populate(j->a, &j->e);
	return NULL;
}

/* Filling by mapping (huge pages), populates the arena on a second thread
 * while the loader reads: allocating and locking pages costs CPU time of the
 * order of the disk time, and the reads themselves need little CPU. */
static int fill_arena(struct loaded_model *lm, const struct load_opts *o,
		      struct errinfo *e)
{
	struct populate_job job = { .a = lm->arena, .m = lm->model };
	pthread_t th;
	bool threaded = false;
	int r;

	if (o->fill)
		return o->fill(o->fill_arg, lm, o, e);
	/* Filled by write, the arena needs no populating at all; serving
	 * while loading, it was populated before. */
	if ((!arena_fills_by_write(lm->arena) || arena_folios_now(lm->arena) == FOLIOS_AT_WRITE) && lm->ready.fd < 0)
		threaded = pthread_create(&th, NULL, populate_main, &job) == 0;
	if (!threaded && !arena_fills_by_write(lm->arena))
		populate_main(&job);
	r = loader_run(lm->model, lm->arena, &o->loader, &lm->stats, e);
	if (r < 0)
		arena_stop_populate(lm->arena);
	if (threaded)
		pthread_join(th, NULL);
	lm->disk_bytes = lm->stats.tensor_bytes;
	if (r == 0 && job.r < 0) {
		*e = job.e;
		r = job.r;
	}
	return r;
}

/* What a client could never attach, refused before any byte is read, the
 * same for --load-only as for serving: a rank over the manifest's limit,
 * more segments than one Attach reply carries. */
static int check_servable(const struct model *m, struct errinfo *e)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (m->tensors[i].rank > MF_MAX_RANK)
			return err_set(e, -E2BIG, "tensor %s has rank %u; a manifest takes at most %u",
				       m->tensors[i].name, m->tensors[i].rank, MF_MAX_RANK);
	if (m->nsegments + 1 > WSRV_MAX_FDS)
		return err_set(e, -E2BIG, "the arena needs %u segments; an Attach reply carries at most %u (raise --max-segment)",
			       m->nsegments, WSRV_MAX_FDS - 1);
	return 0;
}

/* The manifest of lm's model as its arena holds it. */
static int write_manifest(struct loaded_model *lm, struct errinfo *e)
{
	uint64_t *sizes = calloc(arena_nseg(lm->arena) + 1, sizeof(*sizes));
	int r;

	if (!sizes)
		return err_set(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < arena_nseg(lm->arena); i++)
		sizes[i] = arena_seg_size(lm->arena, i);
	r = manifest_create(lm->model, sizes, arena_page_size(lm->arena), &lm->manifest_fd,
			    &lm->manifest_size, e);
	free(sizes);
	if (r == 0) {
		void *p = mmap(NULL, lm->manifest_size, PROT_READ, MAP_SHARED, lm->manifest_fd, 0);
		if (p == MAP_FAILED)
			return err_set(e, -errno, "cannot map the manifest: %s", strerror(errno));
		lm->manifest_hash = XXH3_64bits(p, lm->manifest_size);
		munmap(p, lm->manifest_size);
		tier_count_resident(lm->tier, lm->manifest_size);
	}
	return r;
}

/* Says once per process how loads get their 2 MiB folios, and why. */
static void log_once_folios(bool direct, const char *why)
{
	static bool said;

	if (__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		return;
	log_info("2 MiB folios %s: %s", direct ? "written straight into" : "made from 4 KiB pages once each load is done", why);
}

/* Opens, checks and lays out the model, and creates its arena; with
 * loading_segments, as serving while loading wants it. */
static int begin_steps(struct loaded_model *lm, const char *name, const char *path,
		       const struct load_opts *o, struct errinfo *e)
{
	struct load_phases *ph = &lm->phases;
	struct model_opts mo = o->model;
	double t = mono_now();
	int r;

	if (o->loading_segments)
		mo.layer_segments = o->loading_segments;
	mo.expert_pages = o->memory_budget != 0; /* experts tiered one by one */
	r = model_open(name, path, &mo, &lm->model, e);
	if (r == 0)
		r = check_servable(lm->model, e);
	ph->open_s = mono_now() - t;
	t = mono_now();
	/* A disk tier reads into 4 KiB pages: no folio rounding, so that
	 * the segments are the sizes wsrvctl inspect --memory-budget plans
	 * with (tier_plan.h). */
	struct arena_opts ao = o->arena;
	ao.no_folios = r == 0 && tier_wanted(lm->model, o->memory_budget);
	if (r == 0)
		r = arena_create(name, lm->model->nsegments, lm->model->seg_size, &ao, &lm->arena, e);
	/* Straight into 2 MiB folios where a fresh one is cheap; else 4 KiB
	 * pages, made folios once loaded (folio_probe.h, arena_sweep.h). */
	if (r == 0 && arena_folios_now(lm->arena) == FOLIOS_AT_WRITE) {
		char why[256];
		if (!folio_probe_direct((enum folio_mode)o->arena.folio_mode, why, sizeof(why)))
			arena_folios_after_load(lm->arena);
		log_once_folios(arena_folios_now(lm->arena) == FOLIOS_AT_WRITE, why);
	}
	ph->arena_s = mono_now() - t;
	return r;
}

/* The load is done: 2 MiB folios from now on (arena_sweep.h). */
static void start_sweep(struct loaded_model *lm)
{
	if (arena_folios_now(lm->arena) == FOLIOS_AFTER && arena_sweep_start(lm->arena, lm->model->name) < 0)
		log_warn("model %s: no thread to make 2 MiB folios; it keeps 4 KiB pages", lm->model->name);
}

/* Reads (tracking readiness when there is a page), seals, writes the
 * manifest. */
static int finish_steps(struct loaded_model *lm, const struct load_opts *o, struct errinfo *e)
{
	struct load_phases *ph = &lm->phases;
	double t = mono_now();
	int r;

	r = fill_arena(lm, o, e);
	ph->read_s = mono_now() - t;
	t = mono_now();
	if (r == 0)
		r = arena_seal(lm->arena, e);
	if (r == 0)
		r = write_manifest(lm, e);
	ph->seal_s = mono_now() - t;
	lm->total_seconds = ph->open_s + ph->arena_s + ph->read_s + ph->seal_s;
	return r;
}

struct loaded_model *loaded_model_new(void)
{
	struct loaded_model *lm = calloc(1, sizeof(*lm));

	if (lm) {
		lm->manifest_fd = lm->layout_fd = -1;
		lm->ready.fd = -1;
	}
	return lm;
}

int model_load(const char *name, const char *path, const struct load_opts *o,
	       struct loaded_model **out, struct errinfo *e)
{
	struct loaded_model *lm = loaded_model_new();
	int r;

	if (!lm)
		return err_set(e, -ENOMEM, "out of memory");
	r = begin_steps(lm, name, path, o, e);
	if (r == 0)
		r = finish_steps(lm, o, e);
	if (r < 0) {
		loaded_model_free(lm);
		return r;
	}
	lm->pages_sampled = arena_placement(lm->arena, lm->node_pages);
	start_sweep(lm);
	*out = lm;
	return 0;
}

int model_load_begin(const char *name, const char *path, const struct load_opts *o,
		     struct loaded_model **out, struct errinfo *e)
{
	struct loaded_model *lm = loaded_model_new();
	uint64_t *sizes = NULL, budget = o->memory_budget;
	int r;

	if (!lm)
		return err_set(e, -ENOMEM, "out of memory");
	r = o->fill ? err_set(e, -EINVAL, "serving while loading reads from the files only") : 0;
	if (r == 0)
		r = begin_steps(lm, name, path, o, e);
	/* A budget that holds the whole model changes nothing: no tier (whose
	 * reads would give up 2 MiB folios for nothing). */
	if (r == 0 && budget && !tier_wanted(lm->model, budget)) {
		char b[2][32];
		log_info("model %s: --memory-budget %s holds all of it (%s): no disk tier", name,
			 fmt_bytes(budget, b[0], 32), fmt_bytes(arena_bytes(lm->arena), b[1], 32));
		budget = 0;
	}
	if (r == 0 && !(sizes = calloc(arena_nseg(lm->arena) + 1, sizeof(*sizes))))
		r = err_set(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; r == 0 && i < arena_nseg(lm->arena); i++)
		sizes[i] = arena_seg_size(lm->arena, i);
	if (r == 0) /* every checksum still 0 */
		r = manifest_create(lm->model, sizes, arena_page_size(lm->arena), &lm->layout_fd,
				    &lm->layout_size, e);
	uint32_t nunits = r == 0 ? tier_units_count(lm->model, lm->arena, budget) : 0;
	if (r == 0)
		r = ready_page_create(name, arena_nseg(lm->arena), (uint32_t)lm->model->ntensors,
				      lm->model->data_bytes, budget != 0, nunits, &lm->ready, e);
	if (r == 0 && nunits)
		tier_units_find(lm->model, lm->ready.units, nunits);
	if (r == 0 && budget)
		r = tier_create(&(struct tier_model){ lm->model, lm->arena, &lm->ready, lm->layout_size }, budget,
				o->memory_share, &o->loader, &lm->tier, e);
	free(sizes);
	if (r < 0) {
		loaded_model_free(lm);
		return r;
	}
	*out = lm;
	return 0;
}

int model_load_finish(struct loaded_model *lm, const struct load_opts *o, struct errinfo *e)
{
	struct load_opts lo = *o;
	struct ready_track t;
	int r;

	lo.loader.layer_order = true;
	lo.loader.on_tensor = ready_track_tensor;
	lo.loader.on_tensor_start = ready_track_tensor_start;
	lo.loader.on_tensor_arg = &t;
	/* Hugetlb: populated first, not beside the reads (a segment sealed
	 * early must not be populated after). */
	if (!arena_fills_by_write(lm->arena) && (r = lm->model->held ? populate_held(lm->model, lm->arena, e)
							    : arena_populate(lm->arena, e)) < 0) {
		ready_page_fail(&lm->ready, r, UINT32_MAX, e->msg);
		return r;
	}
	r = ready_track_init(&t, lm->model, lm->arena, &lm->ready, o->loader.want, e);
	t.tier = lm->tier;
	if (r == 0)
		r = finish_steps(lm, &lo, e);
	if (r == 0 && t.err)
		*e = t.e, r = t.err;
	/* Stopped (a signal): not a failure of the model. The page stays
	 * LOADING, so that a waiting worker goes on waiting on the server
	 * started next, as when this one is killed. */
	if (r < 0 && r != -ECANCELED)
		ready_page_fail(&lm->ready, r, ready_track_first_missing(&t), e->msg);
	else if (r == 0 && !lm->tier) /* a tier's reader swaps segments meanwhile */
		lm->pages_sampled = arena_placement(lm->arena, lm->node_pages);
	if (r == 0)
		ready_page_done(&lm->ready, lm->manifest_hash);
	if (r == 0)
		start_sweep(lm);
	ready_track_free(&t);
	return r;
}

void loaded_model_free(struct loaded_model *lm)
{
	if (!lm)
		return;
	if (lm->manifest_fd >= 0)
		close(lm->manifest_fd);
	if (lm->layout_fd >= 0)
		close(lm->layout_fd);
	tier_free(lm->tier); /* its reader writes into the arena */
	ready_page_free(&lm->ready);
	arena_free(lm->arena);
	model_free(lm->model);
	free(lm);
}

void loaded_model_placement(const struct loaded_model *lm, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	if (lm->pages_sampled <= 0) {
		snprintf(buf, len, "unknown (move_pages: %s)",
			 lm->pages_sampled < 0 ? strerror(-lm->pages_sampled) : "no pages");
		return;
	}
	for (int i = 0; i < NUMA_MAX_NODES && n < len; i++) {
		if (!lm->node_pages[i])
			continue;
		n += (size_t)snprintf(buf + n, len - n, "%snode %d: %.0f%%", n ? ", " : "", i,
				      100.0 * (double)lm->node_pages[i] / lm->pages_sampled);
	}
}

uint64_t loaded_model_placed(const struct loaded_model *lm)
{
	return lm->ready.h ? __atomic_load_n(&lm->ready.h->placed_bytes, __ATOMIC_RELAXED) : lm->model->data_bytes;
}

uint64_t loaded_model_memory(const struct loaded_model *lm)
{
	struct tier_stats st;

	if (!lm->tier)
		return arena_bytes(lm->arena);
	tier_stats(lm->tier, &st);
	return st.resident_bytes + st.cached_bytes;
}
