// SPDX-License-Identifier: MIT
/* layout.c - the layer-major arena layout.
 *
 * The global group comes first, then each layer in ascending order; a layer's
 * tensors are one contiguous extent that starts page-aligned, each tensor at
 * the model's alignment, so a device copy of a layer is one large copy. A
 * layer never spans two segments.
 */
#include "model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "layer_name.h"

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static int cmp_layout(const void *a, const void *b)
{
	const struct model_tensor *x = a, *y = b;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Where tensor i of a layer starting at tensors[first] goes, from off
 * (the end of the tensor before): at the model's alignment, and with
 * expert_pages on a page where a routed expert starts or ends. */
static uint64_t tensor_start(const struct model *m, bool expert_pages, size_t first, size_t i, uint64_t off)
{
	if (expert_pages && i > first) {
		int32_t x = expert_from_name(m->tensors[i].name), before = expert_from_name(m->tensors[i - 1].name);
		if (x != before && (x >= 0 || before >= 0))
			off = align_up(off, MODEL_LAYER_ALIGN);
	}
	return align_up(off, m->tensor_align);
}

/* Bytes the layer at tensors[first..first+count) takes when laid out. */
static uint64_t layer_span(const struct model *m, bool expert_pages, size_t first, size_t count)
{
	uint64_t off = 0;

	for (size_t i = first; i < first + count; i++)
		off = tensor_start(m, expert_pages, first, i, off) + m->tensors[i].size;
	return off;
}

static int add_segment(struct model *m, struct errinfo *e)
{
	uint64_t *v = realloc(m->seg_size, (m->nsegments + 1) * sizeof(*v));

	if (!v)
		return err_set(e, -ENOMEM, "out of memory");
	m->seg_size = v;
	m->seg_size[m->nsegments++] = 0;
	return 0;
}

/* Places one layer at the end of the current segment, or in a new one when
 * max_segment would be exceeded. */
static int place_layer(struct model *m, struct model_layer *l, const struct model_opts *o,
		       bool fresh, struct errinfo *e)
{
	uint64_t max_seg = o->max_segment, span = layer_span(m, o->expert_pages, l->first, l->count);
	uint64_t start = align_up(m->seg_size[m->nsegments - 1], MODEL_LAYER_ALIGN);
	uint64_t off;

	if (start > 0 && (fresh || (max_seg && start + span > max_seg))) {
		int r = add_segment(m, e);
		if (r < 0)
			return r;
		start = 0;
	}
	l->segment = m->nsegments - 1;
	l->offset = start;
	l->length = span;
	off = start;
	for (size_t i = l->first; i < l->first + l->count; i++) {
		struct model_tensor *t = &m->tensors[i];
		off = tensor_start(m, o->expert_pages, l->first, i, off);
		t->segment = l->segment;
		t->offset = off;
		off += t->size;
		l->bytes += t->size;
	}
	m->seg_size[l->segment] = off;
	return 0;
}

static int count_layers(struct model *m, struct errinfo *e)
{
	size_t n = 0;

	for (size_t i = 0; i < m->ntensors; i++)
		if (i == 0 || m->tensors[i].layer != m->tensors[i - 1].layer)
			n++;
	m->layers = calloc(n + 1, sizeof(*m->layers));
	if (!m->layers)
		return err_set(e, -ENOMEM, "out of memory");
	n = 0;
	for (size_t i = 0; i < m->ntensors; i++) {
		if (i == 0 || m->tensors[i].layer != m->tensors[i - 1].layer) {
			m->layers[n].index = m->tensors[i].layer;
			m->layers[n].first = (uint32_t)i;
			n++;
		}
		m->layers[n - 1].count++;
	}
	m->nlayers = n;
	return 0;
}

/* With o->layer_segments, whether layer i starts a segment: the first
 * numbered layer after the global group does, then every per-th. */
static bool starts_segment(const struct model *m, const struct model_opts *o, size_t i)
{
	size_t g = m->nlayers && m->layers[0].index < 0 ? 1 : 0;
	size_t numbered = m->nlayers - g, room, per;

	if (o->layer_segments < 2 || i < g || i == 0)
		return false;
	room = o->layer_segments - g;
	per = (numbered + room - 1) / room;
	return (i - g) % (per ? per : 1) == 0;
}

int model_layout(struct model *m, const struct model_opts *o, struct errinfo *e)
{
	uint64_t align = o->tensor_align ? o->tensor_align : MODEL_MIN_ALIGN;
	int r;

	if (align < MODEL_MIN_ALIGN || (align & (align - 1)) || align > (1u << 30))
		return err_set(e, -EINVAL,
			       "tensor alignment %" PRIu64 " is not a power of two from 256 to 1 GiB",
			       align);
	m->tensor_align = align;
	qsort(m->tensors, m->ntensors, sizeof(*m->tensors), cmp_layout);
	r = count_layers(m, e);
	if (r == 0)
		r = add_segment(m, e);
	for (size_t i = 0; r == 0 && i < m->nlayers; i++)
		r = place_layer(m, &m->layers[i], o, starts_segment(m, o, i), e);
	return r;
}
