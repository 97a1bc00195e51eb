// SPDX-License-Identifier: MIT
/* manifest_write.c - serializing a model's catalog (proto/manifest.h). */
#include "manifest_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "memfd_util.h"

static uint64_t al8(uint64_t v) { return (v + 7) & ~7ULL; }

/* Offsets of every table, from the counts. */
static void plan(const struct model *m, size_t cfg_len, struct mf_header *h)
{
	uint64_t strings = strlen(m->name) + 1, dims = 0, off;

	for (size_t i = 0; i < m->ntensors; i++) {
		strings += strlen(m->tensors[i].name) + 1;
		dims += m->tensors[i].rank;
	}
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, MF_MAGIC, 8);
	h->version = MF_VERSION;
	h->header_size = sizeof(*h);
	h->ntensors = (uint32_t)m->ntensors;
	h->nlayers = (uint32_t)m->nlayers;
	h->nsegments = m->nsegments;
	off = sizeof(*h);
	h->tensors_off = off;
	off = al8(off + m->ntensors * sizeof(struct mf_tensor));
	h->layers_off = off;
	off = al8(off + m->nlayers * sizeof(struct mf_layer));
	h->segments_off = off;
	off = al8(off + m->nsegments * sizeof(struct mf_segment));
	h->dims_off = off;
	h->ndims = dims;
	off = al8(off + dims * 8);
	h->strings_off = off;
	h->strings_size = strings;
	off = al8(off + strings);
	h->config_off = off;
	h->config_size = cfg_len;
	off += cfg_len;
	if (m->held) { /* a partial load: version 2, with the parts */
		h->version = MF_VERSION_PARTIAL;
		h->parts_off = off = al8(off);
		off += m->ntensors * sizeof(struct mf_part);
		h->held_first = m->held->first;
		h->held_last = m->held->last;
		h->held_world = m->held->world;
		h->held_stages = m->held->stages;
	}
	h->total_size = off;
	h->tensor_bytes = m->data_bytes;
	h->source_id = m->source_id;
}

static void manifest_fill(const struct model *m, const uint64_t *seg_sizes, uint64_t page_size,
		 const char *cfg,
		 uint8_t *b, const struct mf_header *h)
{
	struct mf_tensor *ts = (void *)(b + h->tensors_off);
	struct mf_layer *ls = (void *)(b + h->layers_off);
	struct mf_segment *ss = (void *)(b + h->segments_off);
	uint64_t *dims = (void *)(b + h->dims_off);
	char *str = (char *)(b + h->strings_off);
	uint64_t so = 0, di = 0;

	memcpy(b, h, sizeof(*h));
	memcpy(str, m->name, strlen(m->name) + 1);
	so = strlen(m->name) + 1;
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		size_t n = strlen(t->name);
		ts[i] = (struct mf_tensor){ .name_off = so, .name_len = (uint32_t)n,
			.dtype = t->dtype, .rank = t->rank, .layer = t->layer,
			.segment = t->segment, .dims_index = di, .offset = t->offset,
			.size = t->size, .xxh3 = t->xxh3 };
		memcpy(str + so, t->name, n + 1);
		so += n + 1;
		memcpy(dims + di, t->shape, t->rank * sizeof(uint64_t));
		di += t->rank;
	}
	for (size_t i = 0; i < m->nlayers; i++) {
		const struct model_layer *l = &m->layers[i];
		ls[i] = (struct mf_layer){ l->index, l->segment, l->offset, l->length,
					   l->first, l->count, l->bytes };
	}
	for (uint32_t i = 0; i < m->nsegments; i++)
		ss[i] = (struct mf_segment){ seg_sizes[i], page_size };
	if (h->config_size)
		memcpy(b + h->config_off, cfg, h->config_size);
	for (size_t i = 0; h->parts_off && i < m->ntensors; i++)
		((struct mf_part *)(void *)(b + h->parts_off))[i] =
			(struct mf_part){ m->tensors[i].part_off, m->tensors[i].part_len };
}

struct fill_args {
	const struct model *m;
	const uint64_t *seg_sizes;
	uint64_t page_size;
	const char *cfg;
	const struct mf_header *h;
};

static void fill_cb(void *map, void *arg)
{
	const struct fill_args *f = arg;

	manifest_fill(f->m, f->seg_sizes, f->page_size, f->cfg, map, f->h);
}

int manifest_create(const struct model *m, const uint64_t *seg_sizes, uint64_t page_size,
		    int *fd, uint64_t *size, struct errinfo *e)
{
	char *cfg = m->config ? json_dumps(m->config, JSON_COMPACT) : NULL;
	struct fill_args fa = { m, seg_sizes, page_size, cfg, NULL };
	char label[200];
	struct mf_header h;
	int f;

	plan(m, cfg ? strlen(cfg) : 0, &h);
	fa.h = &h;
	snprintf(label, sizeof(label), "wsrv:%s:manifest", m->name);
	f = memfd_new_sealed(label, h.total_size, fill_cb, &fa);
	free(cfg);
	if (f < 0)
		return err_set(e, f, "%s: %s", label, strerror(-f));
	*fd = f;
	*size = h.total_size;
	return 0;
}
