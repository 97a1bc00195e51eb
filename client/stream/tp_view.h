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
 * "tp_plan" and "stages" into *views (ntensors entries, calloc'd: the
 * caller frees it, on failure too). p NULL, or world 1 without a plan or
 * stages: every tensor whole, and *views NULL (stream_view reads the
 * manifest). Returns 0; -EINVAL naming the tensor, dimension and world
 * when a shape does not divide; -ERANGE naming the ranks the server holds
 * when it did not load all of this rank's; -ENOMEM. */
int tp_resolve(const struct wsrv_model *m, const struct wsrv_plan *p, int rank, int world,
	       struct tp_view **views);

#endif
