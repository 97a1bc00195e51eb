// SPDX-License-Identifier: MIT
/* model_index.c - an attached model's tensors by name (its name index,
 * built at the first lookup) and its layer groups by layer index, read
 * from its manifest: no waiting, no server. (By tensor index: attached.h.)
 * lookup.c puts the waits for a model still loading in front of these. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attached.h"
#include "ready_read.h"
#include "ready_wait.h"
#include "sorted.h"

static int build_hash(struct wsrv_model *m)
{
	uint32_t dup = 0;
	int r = name_index_build(&m->names, &m->v, &dup);

	if (r == -EEXIST)
		return cl_err(-EBADMSG, "the manifest lists tensor '%s' twice", cl_tensor_name(m, dup));
	return r < 0 ? cl_err(r, "out of memory") : 0;
}

int cl_find_index(const struct wsrv_model *cm, const char *name)
{
	struct wsrv_model *m = (struct wsrv_model *)cm; /* the index is libwsrv's, built once */

	if (!__atomic_load_n(&m->hash_built, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&m->hash_lock);
		if (!m->hash_built) {
			m->hash_err = build_hash(m);
			__atomic_store_n(&m->hash_built, true, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&m->hash_lock);
	}
	if (m->hash_err < 0)
		return cl_err(m->hash_err, "model %s: %s", m->name, m->hash_err == -EBADMSG
			      ? "the manifest lists a tensor name twice" : "no memory for the name index");
	return name_index_find(&m->names, &m->v, name);
}

static int layer_cmp(const void *key, const void *elem)
{
	return sorted_cmp_i32(*(const int32_t *)key, ((const struct mf_layer *)elem)->index);
}

int cl_layer_nowait(const struct wsrv_model *m, int32_t index, struct wsrv_layer *out)
{
	long i = sorted_index(&index, m->v.layers, m->v.h->nlayers, sizeof(*m->v.layers), layer_cmp);

	if (i < 0)
		return cl_err(-ENOENT, "model %s has no layer %d", m->name, index);
	cl_layer_at_nowait(m, (uint32_t)i, out);
	return 0;
}

void cl_tensor_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_tensor *o)
{
	const struct mf_tensor *t = &m->v.tensors[i];

	CL_RESULT(o);
	o->name = cl_tensor_name(m, i);
	o->dtype = (int)t->dtype;
	o->rank = t->rank;
	o->shape = m->v.dims + t->dims_index;
	o->layer = t->layer;
	o->segment = t->segment;
	o->offset = t->offset;
	o->size = t->size;
	/* Attached while loading, the manifest has 0: the page has it. */
	o->xxh3 = m->ready ? cl_page_xxh3(m, i) : t->xxh3;
	o->data = m->seg[t->segment] + t->offset;
	o->held_offset = m->v.parts ? m->v.parts[i].offset : 0;
	o->held_size = m->v.parts ? m->v.parts[i].length : t->size;
}

void cl_layer_at_nowait(const struct wsrv_model *m, uint32_t i, struct wsrv_layer *o)
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
