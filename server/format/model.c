// SPDX-License-Identifier: MIT
/* model.c - a model's tensors, gathered from its files, with their layers. */
#include "model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "layer_name.h"

#include <xxhash.h>

static int collect_tensors(struct model *m, const struct model_opts *o,
			   struct errinfo *e)
{
	size_t n = 0, k = 0;

	for (size_t f = 0; f < m->nfiles; f++)
		n += m->files[f]->ntensors;
	if (n > UINT32_MAX)
		return err_set(e, -E2BIG, "%s: %zu tensors is more than wsrv handles", m->path, n);
	m->tensors = calloc(n + 1, sizeof(*m->tensors));
	if (!m->tensors)
		return err_set(e, -ENOMEM, "out of memory");
	for (size_t f = 0; f < m->nfiles; f++) {
		const struct st_file *sf = m->files[f];
		for (size_t i = 0; i < sf->ntensors; i++) {
			const struct st_tensor *st = &sf->tensors[i];
			struct model_tensor *t = &m->tensors[k++];

			t->name = st->name;
			t->dtype = st->dtype;
			t->rank = st->rank;
			t->shape = st->shape;
			t->layer = layer_from_name(st->name, o->layer_patterns,
						   o->n_layer_patterns);
			t->file = (uint32_t)f;
			t->file_off = sf->data_start + st->begin;
			t->size = st_tensor_size(st);
			t->part_len = t->size;
			m->data_bytes += t->size;
		}
	}
	m->ntensors = n;
	return 0;
}

static int open_files(struct model *m, const char *path, struct errinfo *e)
{
	struct stat st;
	int r;

	if (stat(path, &st) < 0)
		return err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return model_dir_files(path, m, e);
	m->files = calloc(1, sizeof(*m->files));
	if (!m->files)
		return err_set(e, -ENOMEM, "out of memory");
	r = st_file_open(path, &m->files[0], e);
	if (r < 0)
		return r;
	m->nfiles = 1;
	return 0;
}

/* m's content_id and source_id from its files (model.h). */
static void model_ids(struct model *m)
{
	uint64_t c = 0x77737276636f6e74ull, s; /* "wsrvcont" */

	for (size_t i = 0; i < m->nfiles; i++) {
		const struct st_file *f = m->files[i];
		uint64_t rec[2] = { f->header_xxh3, f->file_size };
		c = XXH3_64bits_withSeed(rec, sizeof(rec), c);
	}
	s = c;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct st_file *f = m->files[i];
		uint64_t rec[6] = { (uint64_t)f->dev, (uint64_t)f->ino, (uint64_t)f->mtime.tv_sec,
				    (uint64_t)f->mtime.tv_nsec, (uint64_t)f->ctime.tv_sec, (uint64_t)f->ctime.tv_nsec };
		s = XXH3_64bits_withSeed(rec, sizeof(rec), s);
	}
	m->content_id = c;
	m->source_id = s;
}

int model_open(const char *name, const char *path, const struct model_opts *o,
	       struct model **out, struct errinfo *e)
{
	static const struct model_opts defaults = { 0 };
	struct model *m = calloc(1, sizeof(*m));
	int r;

	if (!o)
		o = &defaults;
	if (!m || !(m->name = strdup(name)) || !(m->path = strdup(path))) {
		model_free(m);
		return err_set(e, -ENOMEM, "out of memory");
	}
	r = open_files(m, path, e);
	if (r == 0) {
		model_ids(m);
		r = collect_tensors(m, o, e);
	}
	if (r == 0)
		r = model_layout(m, o, e);
	/* After the layout: it reorders the tensors the index points at. */
	if (r == 0)
		r = model_name_index(m, e);
	if (r == 0)
		r = model_hold(m, o, e);
	if (r < 0) {
		model_free(m);
		return r;
	}
	*out = m;
	return 0;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfiles; i++)
		st_file_free(m->files[i]);
	free(m->files);
	free(m->tensors);
	free(m->layers);
	free(m->seg_size);
	free(m->by_name);
	free(m->held);
	json_decref(m->config);
	free(m->name);
	free(m->path);
	free(m);
}
