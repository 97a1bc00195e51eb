// SPDX-License-Identifier: MIT
/* tp_view.h - a worker's views of an attached model: the rules of
 * proto/rank_view.h applied to what the manifest says, and checked
 * against what the server holds when it loaded only some ranks. */
#ifndef WSRV_TP_VIEW_H
#define WSRV_TP_VIEW_H

#include "model_door.h"
#include "plan.h"
#include "rank_view.h"

/* Resolves every tensor of m for rank of world under the plan's
 * "tp_plan" and "stages" into *views (ntensors entries, calloc'd: the
 * caller frees it, on failure too). p NULL, or world 1 without a plan or
 * stages: every tensor whole, and *views NULL (tp_view_at reads the
 * manifest). Returns 0; -EINVAL naming the tensor, dimension and world
 * when a shape does not divide; -ERANGE naming the ranks the server holds
 * when it did not load all of this rank's; -ENOMEM. */
int tp_resolve(const struct wsrv_model *m, const struct wsrv_plan *p, int rank, int world,
	       struct tp_view **views);

/* View i of views (tp_resolve's), or where views is NULL (every tensor
 * whole) m's tensor as its manifest entry has it, made in *tmp, whose
 * shape is left unset: tp_view_shape has it. */
static inline const struct tp_view *tp_view_at(const struct wsrv_model *m, const struct tp_view *views, size_t i,
					       struct tp_view *tmp)
{
	if (views)
		return &views[i];
	const struct mf_tensor *t = cl_tensor_entry(m, i);
	tmp->present = true;
	tmp->rank = t->rank;
	tmp->src_off = 0;
	tmp->width = tmp->pitch = tmp->bytes = t->size;
	tmp->height = 1;
	return tmp;
}

/* The bytes of view i. */
static inline uint64_t tp_view_bytes(const struct wsrv_model *m, const struct tp_view *views, size_t i)
{
	return views ? views[i].bytes : cl_tensor_entry(m, i)->size;
}

/* Whether view i is its whole tensor (of size bytes) in one run. */
static inline bool tp_view_whole(const struct tp_view *views, size_t i, uint64_t size)
{
	return !views || (views[i].bytes == size && views[i].height == 1);
}

/* The shape of view i (its rank's entries), as long as m is attached. */
static inline const uint64_t *tp_view_shape(const struct wsrv_model *m, const struct tp_view *views, size_t i)
{
	return views ? views[i].shape : cl_model_view(m)->dims + cl_tensor_entry(m, i)->dims_index;
}

#endif
