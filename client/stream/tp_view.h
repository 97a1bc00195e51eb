// SPDX-License-Identifier: MIT
/* tp_view.h - a worker's views of an attached model: the rules of
 * proto/rank_view.h applied to what the manifest says, and checked
 * against what the server holds when it loaded only some ranks. */
#ifndef WSRV_TP_VIEW_H
#define WSRV_TP_VIEW_H

#include "attached.h"
#include "plan.h"
#include "rank_view.h"

/* Resolves every tensor of m for rank of world under the plan's
 * "tp_plan" and "stages" (p NULL, or world 1 without stages: every tensor
 * whole) into views (ntensors entries). Returns 0; -EINVAL naming the
 * tensor, dimension and world when a shape does not divide; -ERANGE naming
 * the ranks the server holds when it did not load all of this rank's. */
int tp_resolve(const struct wsrv_model *m, const struct wsrv_plan *p, int rank, int world,
	       struct tp_view *views);

#endif
