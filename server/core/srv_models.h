// SPDX-License-Identifier: MIT
/* srv_models.h - the server's model generations: which one serves new
 * attaches, adding a newer one, and freeing a replaced one once nobody
 * holds it. Below dispatch, reload and publish, which all call down here. */
#ifndef WSRV_SRV_MODELS_H
#define WSRV_SRV_MODELS_H

#include <stdint.h>

#include "srv.h"

/* The entry of model name's current generation, or -1. */
int srv_find_current(const struct server *srv, const char *name);
/* The models that serve or will (current, loading or loaded, not failed). */
size_t srv_models_serving(const struct server *srv);

/* Adds lm (owned from then on) as the newest generation after entry old,
 * which is retired: new attaches get lm. Moves srv->models. The new
 * entry's index, or -ENOMEM (lm is still the caller's). */
int srv_models_add(struct server *srv, uint32_t old, struct loaded_model *lm);

/* The first entry of model name (its first generation, which keeps the
 * model's running totals), or -1. */
int srv_model_first(const struct server *srv, const char *name);
/* A stream that closed, or whose worker went: its last report x added to
 * its model's totals (a name served here; else the server's "other"). */
void srv_stream_fold(struct server *srv, const struct stream_report *x);

/* Frees a replaced generation nobody is attached to any more. */
void srv_retired_check(struct server *srv, struct srv_model *sm);

/* The first current model with a disk tier (--memory-budget), or NULL:
 * its arena is partly on disk, so neither a take-over nor systemd's fd
 * store can carry it. */
const char *srv_tiered_model(const struct server *srv);

#endif
