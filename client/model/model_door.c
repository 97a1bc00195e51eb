// SPDX-License-Identifier: MIT
/* model_door.c - what the stream room reads of a model (model_door.h):
 * reads of its manifest and of its mapping's addresses, nothing more: it
 * calls nothing (the model room's own files stand on it too). The reads
 * that take a loading model's page in are model_index.c's. */
#include "model_door.h"

#include "attached.h"

uint32_t cl_ntensors(const struct wsrv_model *m)
{
	return m->v.h->ntensors;
}

uint32_t cl_nlayers(const struct wsrv_model *m)
{
	return m->v.h->nlayers;
}

const char *cl_tensor_name(const struct wsrv_model *m, uint32_t i)
{
	return m->v.strings + m->v.tensors[i].name_off;
}

const struct mf_tensor *cl_tensor_entry(const struct wsrv_model *m, uint32_t i)
{
	return &m->v.tensors[i];
}

const struct mf_view *cl_model_view(const struct wsrv_model *m)
{
	return &m->v;
}

size_t cl_segment_len(const struct wsrv_model *m, uint32_t g)
{
	return m->seg_len[g];
}

uint32_t cl_nsegments(const struct wsrv_model *m)
{
	return m->nseg;
}

uint32_t cl_npieces(const struct wsrv_model *m)
{
	return m->nseg + m->nunits;
}

uint32_t cl_piece(const struct wsrv_model *m, uint32_t i)
{
	return m->piece ? m->piece[i] : m->v.tensors[i].segment;
}

const uint8_t *cl_segment_base(const struct wsrv_model *m, uint32_t g)
{
	return m->seg[g];
}

struct wsrv_client *cl_model_client(const struct wsrv_model *m)
{
	return m->c;
}

uint64_t cl_model_generation(const struct wsrv_model *m)
{
	return m->generation;
}

uint64_t cl_model_identity(const struct wsrv_model *m)
{
	uint64_t id = __atomic_load_n(&m->identity, __ATOMIC_RELAXED);

	/* Made from the manifest mapped at the attach, which never changes:
	 * two threads asking at once make the same value. 0 stays 0 (no
	 * source: asked again each time, and matches nothing). */
	if (!id && (id = manifest_identity(&m->v)))
		__atomic_store_n(&((struct wsrv_model *)m)->identity, id, __ATOMIC_RELAXED);
	return id;
}

bool cl_model_tiered(const struct wsrv_model *m)
{
	const struct ready_gen *g = __atomic_load_n(&m->ready, __ATOMIC_ACQUIRE);

	return g && g->rv.tier;
}
