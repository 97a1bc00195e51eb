// SPDX-License-Identifier: MIT
/* lookup.c - reading an attached model: no system calls, no server. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "client_internal.h"

static uint64_t name_hash(const char *s, size_t n)
{
	return XXH3_64bits(s, n);
}

static const char *tname(const struct wsrv_model *m, uint32_t i)
{
	return m->v.strings + m->v.tensors[i].name_off;
}

int cl_build_hash(struct wsrv_model *m)
{
	uint32_t n = m->v.h->ntensors;
	size_t cap = 16;

	while (cap < (size_t)n * 2)
		cap *= 2;
	m->hash = calloc(cap, sizeof(*m->hash));
	if (!m->hash)
		return cl_err(-ENOMEM, "out of memory");
	m->hash_mask = cap - 1;
	for (uint32_t i = 0; i < n; i++) {
		const char *name = tname(m, i);
		size_t k = name_hash(name, m->v.tensors[i].name_len) & m->hash_mask;
		while (m->hash[k]) {
			if (strcmp(tname(m, m->hash[k] - 1), name) == 0)
				return cl_err(-EBADMSG, "the manifest lists tensor '%s' twice", name);
			k = (k + 1) & m->hash_mask;
		}
		m->hash[k] = i + 1;
	}
	return 0;
}

static void fill_tensor(const struct wsrv_model *m, uint32_t i, struct wsrv_tensor *o)
{
	const struct mf_tensor *t = &m->v.tensors[i];

	CL_RESULT(o);
	o->name = tname(m, i);
	o->dtype = (int)t->dtype;
	o->rank = t->rank;
	o->shape = m->v.dims + t->dims_index;
	o->layer = t->layer;
	o->segment = t->segment;
	o->offset = t->offset;
	o->size = t->size;
	/* Attached while loading, the manifest has 0: the page has it. */
	o->xxh3 = m->ready ? __atomic_load_n(&cl_rv(m)->xxh3[i], __ATOMIC_RELAXED) : t->xxh3;
	o->data = m->seg[t->segment] + t->offset;
	o->held_offset = m->v.parts ? m->v.parts[i].offset : 0;
	o->held_size = m->v.parts ? m->v.parts[i].length : t->size;
}

WSRV_EXPORT int wsrv_model_held(const struct wsrv_model *m, struct wsrv_held *out)
{
	const struct mf_header *h;

	CL_NEED(m);
	CL_NEED(out);
	CL_RESULT(out);
	h = m->v.h;
	out->bytes = h->tensor_bytes;
	if (!m->v.parts)
		return 0;
	out->first = h->held_first;
	out->last = h->held_last;
	out->world = h->held_world;
	out->stages = h->held_stages;
	out->bytes = 0;
	for (uint32_t i = 0; i < h->ntensors; i++)
		out->bytes += m->v.parts[i].length;
	return 0;
}

static void fill_layer(const struct wsrv_model *m, uint32_t i, struct wsrv_layer *o)
{
	const struct mf_layer *l = &m->v.layers[i];

	CL_RESULT(o);
	o->index = l->index;
	o->segment = l->segment;
	o->offset = l->offset;
	o->length = l->length;
	o->bytes = l->bytes;
	o->first = l->first;
	o->count = l->count;
	o->data = m->seg[l->segment] + l->offset;
}

WSRV_EXPORT const char *wsrv_model_name(const struct wsrv_model *m)
{
	return m ? m->name : NULL;
}

WSRV_EXPORT size_t wsrv_model_tensor_count(const struct wsrv_model *m)
{
	return m ? m->v.h->ntensors : 0;
}

/* Attached while the server loads it, each of these waits for the
 * segment it points into (cl_need_segment): a lookup's bytes are always
 * the loaded ones. The model is const to the caller; its mappings are
 * libwsrv's. */
WSRV_EXPORT int wsrv_model_tensor(const struct wsrv_model *m, size_t i, struct wsrv_tensor *out)
{
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if (i >= m->v.h->ntensors)
		return cl_err(-ERANGE, "tensor %zu: the model has %u", i, m->v.h->ntensors);
	if ((r = cl_need_segment((struct wsrv_model *)m, m->v.tensors[i].segment)) < 0)
		return r;
	fill_tensor(m, (uint32_t)i, out);
	return 0;
}

WSRV_EXPORT const char *wsrv_model_tensor_name(const struct wsrv_model *m, size_t i)
{
	if (!m || i >= m->v.h->ntensors) {
		cl_err(-ERANGE, "wsrv_model_tensor_name: no tensor %zu", i);
		return NULL;
	}
	return tname(m, (uint32_t)i);
}

int cl_find_index(const struct wsrv_model *m, const char *name)
{
	size_t k = name_hash(name, strlen(name)) & m->hash_mask;

	while (m->hash[k]) {
		uint32_t i = m->hash[k] - 1;
		if (strcmp(tname(m, i), name) == 0)
			return (int)i;
		k = (k + 1) & m->hash_mask;
	}
	return -ENOENT;
}

WSRV_EXPORT int wsrv_model_find(const struct wsrv_model *m, const char *name,
				struct wsrv_tensor *out)
{
	int i, r;

	CL_NEED(m);
	CL_NEED(name);
	CL_NEED(out);
	if ((i = cl_find_index(m, name)) < 0)
		return cl_err(-ENOENT, "model %s has no tensor '%s'", m->name, name);
	if ((r = cl_need_segment((struct wsrv_model *)m, m->v.tensors[i].segment)) < 0)
		return r;
	fill_tensor(m, (uint32_t)i, out);
	return 0;
}

WSRV_EXPORT size_t wsrv_model_layer_count(const struct wsrv_model *m)
{
	return m ? m->v.h->nlayers : 0;
}

WSRV_EXPORT int wsrv_model_layer_at(const struct wsrv_model *m, size_t i, struct wsrv_layer *out)
{
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if (i >= m->v.h->nlayers)
		return cl_err(-ERANGE, "layer group %zu: the model has %u", i, m->v.h->nlayers);
	if ((r = cl_need_segment((struct wsrv_model *)m, m->v.layers[i].segment)) < 0)
		return r;
	fill_layer(m, (uint32_t)i, out);
	return 0;
}

int cl_layer_nowait(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out)
{
	uint32_t lo = 0, hi = m->v.h->nlayers;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		int32_t x = m->v.layers[mid].index;
		if (x == index) {
			fill_layer(m, mid, out);
			return 0;
		}
		if (x < index)
			lo = mid + 1;
		else
			hi = mid;
	}
	return cl_err(-ENOENT, "model %s has no layer %d", m->name, index);
}

WSRV_EXPORT int wsrv_model_layer_info(const struct wsrv_model *m, size_t i, struct wsrv_layer *out)
{
	CL_NEED(m);
	CL_NEED(out);
	if (i >= m->v.h->nlayers)
		return cl_err(-ERANGE, "layer group %zu: the model has %u", i, m->v.h->nlayers);
	fill_layer(m, (uint32_t)i, out);
	if (!cl_segment_mapped((struct wsrv_model *)m, m->v.layers[i].segment))
		out->data = NULL;
	return 0;
}

void cl_tensor_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_tensor *out)
{
	fill_tensor(m, i, out);
}

void cl_layer_at_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_layer *out)
{
	fill_layer(m, i, out);
}

WSRV_EXPORT int wsrv_model_layer(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out)
{
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if ((r = cl_layer_nowait(m, index, out)) < 0)
		return r;
	return cl_need_segment((struct wsrv_model *)m, out->segment);
}

WSRV_EXPORT const char *wsrv_model_config(const struct wsrv_model *m, size_t *len)
{
	if (!m || !len) {
		cl_err(-EINVAL, "wsrv_model_config: %s is NULL", m ? "len" : "m");
		return NULL;
	}
	*len = m->v.h->config_size;
	return m->v.h->config_size ? m->v.config : NULL;
}
