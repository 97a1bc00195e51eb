// SPDX-License-Identifier: MIT
/* model_adopt.c - a model served again from an earlier wsrvd's memfds
 * instead of its files' bytes: the headers are parsed and laid out again
 * (milliseconds), the adopted manifest must describe exactly that layout,
 * and the segments must be the sealed memfds it names. */
#include "model_adopt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "load_door.h"
#include "checksum_pass.h"
#include "clock.h"
#include "log.h"
#include "manifest.h"
#include "tier_door.h"

uint64_t model_files_identity(const struct model *m)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct st_file *f = m->files[i];
		uint64_t id[8] = { f->file_size, (uint64_t)f->dev, (uint64_t)f->ino,
				   (uint64_t)f->mtime.tv_sec, (uint64_t)f->mtime.tv_nsec,
				   (uint64_t)f->ctime.tv_sec, (uint64_t)f->ctime.tv_nsec, i };
		XXH3_64bits_update(&st, f->path, strlen(f->path));
		XXH3_64bits_update(&st, id, sizeof(id));
	}
	return XXH3_64bits_digest(&st);
}

/* The adopted manifest, mapped and checked against the segments. */
static int map_manifest(const struct adopt_fds *f, const uint64_t *seg_sizes, struct mf_view *v,
			void **map, size_t *len, struct errinfo *e)
{
	struct stat st;
	char err[256];

	if (fstat(f->manifest, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
		return err_set(e, -EBADF, "the adopted manifest is not a memfd");
	*len = (size_t)st.st_size;
	*map = mmap(NULL, *len, PROT_READ, MAP_SHARED, f->manifest, 0);
	if (*map == MAP_FAILED)
		return err_set(e, -errno, "cannot map the adopted manifest: %s", strerror(errno));
	if (manifest_check(*map, *len, seg_sizes, f->nseg, v, err, sizeof(err)) < 0)
		return err_set(e, -EBADMSG, "the adopted manifest is invalid: %s", err);
	return 0;
}

/* Does tensor i of the manifest describe m's tensor i, where it lies? */
static bool same_tensor(const struct mf_view *v, uint32_t i, const struct model_tensor *t)
{
	const struct mf_tensor *x = &v->tensors[i];
	struct mf_part held = v->parts ? v->parts[i] : (struct mf_part){ 0, x->size };

	/* A partial load adopts only the same parts: other --ranks read again. */
	return held.offset == t->part_off && held.length == t->part_len &&
	       x->dtype == (uint32_t)t->dtype && x->rank == t->rank && x->layer == t->layer &&
	       x->segment == t->segment && x->offset == t->offset && x->size == t->size &&
	       x->name_len == strlen(t->name) && memcmp(v->strings + x->name_off, t->name, x->name_len) == 0 &&
	       memcmp(v->dims + x->dims_index, t->shape, t->rank * sizeof(uint64_t)) == 0;
}

/* The manifest must be this model's layout; its checksums become m's. */
static int match(struct model *m, const struct mf_view *v, struct errinfo *e)
{
	if (!v->parts != !m->held)
		return err_set(e, -ESTALE, "the adopted arena holds %s, this load %s", v->parts ? "some ranks" : "every rank",
			       m->held ? "some ranks" : "every rank");
	if (v->h->ntensors != m->ntensors || v->h->nsegments != m->nsegments)
		return err_set(e, -ESTALE, "the files now hold %zu tensors in %u segments, the adopted arena %u in %u",
			       m->ntensors, m->nsegments, v->h->ntensors, v->h->nsegments);
	for (uint32_t i = 0; i < m->ntensors; i++) {
		if (!same_tensor(v, i, &m->tensors[i]))
			return err_set(e, -ESTALE, "tensor %s is not where the adopted arena has it",
				       m->tensors[i].name);
		m->tensors[i].xxh3 = v->tensors[i].xxh3;
	}
	/* What the bytes are is the manifest's to say: a published generation
	 * adopted is its checksums' digest, not its files' (peers would
	 * otherwise offer it to hosts filling from those files). */
	if (v->h->source_id && v->h->source_id != m->source_id)
		m->content_id = m->source_id = v->h->source_id;
	return 0;
}

static int verify(const struct loaded_model *lm, struct errinfo *e)
{
	const struct model *m = lm->model;
	uint64_t *sums = calloc(m->ntensors + 1, sizeof(*sums));
	int r = 0;

	if (!sums)
		return err_set(e, -ENOMEM, "out of memory");
	checksum_pass(lm->arena, m, sums);
	for (size_t i = 0; r == 0 && i < m->ntensors; i++)
		if (sums[i] != m->tensors[i].xxh3)
			r = err_set(e, -EBADMSG, "tensor %s: its adopted bytes do not match its checksum",
				    m->tensors[i].name);
	free(sums);
	return r;
}

static int segment_sizes(const struct adopt_fds *f, uint64_t *sizes, struct errinfo *e)
{
	for (uint32_t i = 0; i < f->nseg; i++) {
		struct stat st;
		if (fstat(f->seg[i], &st) < 0 || !S_ISREG(st.st_mode))
			return err_set(e, -EBADF, "adopted segment %u is not a memfd", i);
		sizes[i] = (uint64_t)st.st_size;
	}
	return 0;
}

int model_open_like(const char *name, const char *path, const struct model_opts *mo, uint32_t nseg,
		    struct model **out, struct errinfo *e)
{
	struct model_opts other = *mo;
	struct model *m;
	int r = model_open(name, path, mo, &m, e);

	if (r < 0 || m->nsegments == nseg)
		goto done;
	other.layer_segments = mo->layer_segments ? 0 : LOAD_EARLY_SEGMENTS;
	if (model_open(name, path, &other, out, e) == 0) {
		if ((*out)->nsegments == nseg) {
			model_free(m);
			return 0;
		}
		model_free(*out);
	}
	/* Neither: the first, which the manifest check then refuses. */
done:
	*out = r == 0 ? m : NULL;
	return r;
}

int model_match_manifest(struct model *m, int manifest_fd, uint32_t nseg, const uint64_t *seg_sizes,
			 struct errinfo *e)
{
	struct adopt_fds f = { .manifest = manifest_fd, .nseg = nseg };
	struct mf_view v;
	void *map = MAP_FAILED;
	size_t len = 0;
	int r = map_manifest(&f, seg_sizes, &v, &map, &len, e);

	if (r == 0)
		r = match(m, &v, e);
	if (map != MAP_FAILED)
		munmap(map, len);
	return r;
}

static int adopt_steps(struct loaded_model *lm, const char *name, const char *path,
		       const struct load_opts *o, const struct adopt_fds *f, bool check_bytes,
		       struct errinfo *e)
{
	uint64_t sizes[MF_MAX_SEGMENTS];
	struct mf_view v;
	void *map = MAP_FAILED;
	size_t len = 0;
	int r;

	if (f->nseg == 0 || f->nseg > MF_MAX_SEGMENTS)
		return err_set(e, -EINVAL, "%u adopted segments", f->nseg);
	r = model_open_like(name, path, &o->model, f->nseg, &lm->model, e);
	if (r == 0 && model_files_identity(lm->model) != f->files)
		r = err_set(e, -ESTALE, "its files changed since they were loaded");
	if (r == 0)
		r = segment_sizes(f, sizes, e);
	if (r == 0)
		r = map_manifest(f, sizes, &v, &map, &len, e);
	if (r == 0)
		r = match(lm->model, &v, e);
	if (r == 0)
		r = arena_adopt(f->nseg, f->seg, lm->model->seg_size, v.segments[0].page_size,
				o->arena.lock, &lm->arena, e);
	if (r == 0 && check_bytes)
		r = verify(lm, e);
	if (r == 0)
		lm->manifest_hash = XXH3_64bits(map, len);
	if (map != MAP_FAILED)
		munmap(map, len);
	lm->manifest_size = len;
	return r;
}

void model_adopted_folios(struct loaded_model *lm, const struct load_opts *o, const char *when)
{
	if (o->arena.hugepages == HUGEPAGES_OFF || tier_wanted(lm->model, o->memory_budget))
		return;
	if (arena_sweep_adopted(lm->arena, lm->model->name, when) < 0)
		log_warn("model %s: no thread to make 2 MiB folios; it keeps 4 KiB pages", lm->model->name);
}

int model_adopt(const char *name, const char *path, const struct load_opts *o,
		const struct adopt_fds *f, bool check_bytes, struct loaded_model **out,
		struct errinfo *e)
{
	struct loaded_model *lm = loaded_model_new();
	double t0 = mono_now();
	int r;

	if (!lm)
		return err_set(e, -ENOMEM, "out of memory");
	r = adopt_steps(lm, name, path, o, f, check_bytes, e);
	if (r < 0) {
		if (lm->arena) /* the segment fds go back to the caller */
			arena_disown_fds(lm->arena);
		loaded_model_free(lm);
		return r;
	}
	model_adopted_folios(lm, o, " on adoption");
	lm->manifest_fd = f->manifest;
	lm->adopted = true;
	lm->total_seconds = mono_now() - t0;
	lm->phases.open_s = lm->total_seconds;
	*out = lm;
	return 0;
}
