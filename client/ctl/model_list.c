// SPDX-License-Identifier: MIT
/* model_list.c - the served models, as an object with counted accessors.
 * The object owns the server's decoded reply; the strings point into it. */
#include <errno.h>
#include <stdlib.h>

#include "wire.h"

struct wsrv_model_list {
	Wsrv__Response *r;           /* owned; r->models is not NULL */
};

WSRV_EXPORT int wsrv_list_models(struct wsrv_client *c, struct wsrv_model_list **out)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__ListModels lm = WSRV__LIST_MODELS__INIT;
	struct wsrv_model_list *l;
	Wsrv__Response *r;
	int ret;

	CL_NEED(c);
	CL_NEED(out);
	q.body_case = WSRV__REQUEST__BODY_LIST_MODELS;
	q.list_models = &lm;
	ret = cl_query(c, &q, WSRV__RESPONSE__BODY_MODELS, &r, "ListModels");
	if (ret < 0)
		return ret;
	if (!r->models || !(l = malloc(sizeof(*l)))) {
		ret = r->models ? cl_err(-ENOMEM, "out of memory")
			: cl_err(-EBADMSG, "the server sent an empty reply to ListModels");
		wsrv__response__free_unpacked(r, NULL);
		return ret;
	}
	l->r = r;
	*out = l;
	return 0;
}

WSRV_EXPORT size_t wsrv_model_list_count(const struct wsrv_model_list *l)
{
	return l ? l->r->models->n_models : 0;
}

/* Entry i of the list, or NULL with -ERANGE recorded. */
static const Wsrv__ModelInfo *entry(const struct wsrv_model_list *l, size_t i)
{
	if (i < l->r->models->n_models)
		return l->r->models->models[i];
	cl_err(-ERANGE, "model %zu: the list has %zu", i, l->r->models->n_models);
	return NULL;
}

WSRV_EXPORT int wsrv_model_list_at(const struct wsrv_model_list *l, size_t i,
				   struct wsrv_model_info *out)
{
	const Wsrv__ModelInfo *m;

	CL_GET(l, out, (m = entry(l, i)));
	out->name = cl_str(m->name);
	out->path = cl_str(m->path);
	out->numa = cl_str(m->numa);
	out->pages = cl_str(m->pages);
	out->tensor_bytes = m->tensor_bytes;
	out->arena_bytes = m->arena_bytes;
	out->page_size = m->page_size;
	out->tensors = m->tensors;
	out->layers = m->layers;
	out->segments = m->segments;
	out->attached = m->attached;
	out->load_seconds = m->load_seconds;
	out->held_first = m->held_first;
	out->held_last = m->held_last;
	out->held_world = m->held_world;
	out->loading = m->loading;
	out->held_bytes = m->held_world ? m->held_bytes : m->tensor_bytes;
	return 0;
}

WSRV_EXPORT int wsrv_model_list_generation(const struct wsrv_model_list *l, size_t i,
					   struct wsrv_generation *out)
{
	const Wsrv__ModelInfo *m;

	CL_GET(l, out, (m = entry(l, i)));
	out->generation = m->generation;
	out->retired = m->retired;
	out->nholders = (uint32_t)m->n_holder_pids;
	out->holder_pids = m->holder_pids;
	out->reload = cl_str(m->reload);
	out->failed = m->failed;
	/* An older server sends placed_bytes only while loading. */
	out->placed_bytes = m->loading ? m->placed_bytes : m->held_world ? m->held_bytes : m->tensor_bytes;
	return 0;
}

WSRV_EXPORT int wsrv_model_list_tier(const struct wsrv_model_list *l, size_t i, struct wsrv_tier_info *out)
{
	const Wsrv__ModelInfo *m;

	CL_GET(l, out, (m = entry(l, i)));
	out->budget = m->tier_budget;
	out->resident_bytes = m->tier_resident_bytes;
	out->cached_bytes = m->tier_cached_bytes;
	out->peak_bytes = m->tier_peak_bytes;
	out->held_bytes = m->tier_held_bytes;
	out->disk_bytes = m->tier_disk_bytes;
	out->hits = m->tier_hits;
	out->misses = m->tier_misses;
	out->read_bytes = m->tier_read_bytes;
	out->evictions = m->tier_evictions;
	out->failures = m->tier_failures;
	out->reads_in_flight = m->tier_reads_in_flight;
	return 0;
}

WSRV_EXPORT void wsrv_model_list_free(struct wsrv_model_list *l)
{
	if (!l)
		return;
	wsrv__response__free_unpacked(l->r, NULL);
	free(l);
}
