// SPDX-License-Identifier: MIT
/* tp_view.c - a worker's views, through the shared rules. */
#include "tp_view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static long tp_find(const void *ctx, const char *name)
{
	return cl_find_index(ctx, name);
}

/* The manifest's tensors as the rules read them, and its config. Owned by
 * the caller: *t (free) and *cfg (json_decref). */
static int rules_model(const struct wsrv_model *m, struct rv_model *rm, struct rv_tensor **t, json_t **cfg)
{
	size_t n = m->v.h->ntensors, len;
	const char *c = wsrv_model_config(m, &len);

	*cfg = c ? json_loadb(c, len, 0, NULL) : NULL;
	*t = calloc(n + 1, sizeof(**t));
	if (!*t)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct mf_tensor *x = &m->v.tensors[i];
		(*t)[i] = (struct rv_tensor){ m->v.strings + x->name_off, x->dtype, x->rank,
					     m->v.dims + x->dims_index, x->size, x->layer };
	}
	*rm = (struct rv_model){ *t, n, *cfg, tp_find, m };
	return 0;
}

/* A partial load: every byte this rank's views read must be held. */
static int check_held(const struct wsrv_model *m, const struct tp_view *views, int rank, int world)
{
	const struct mf_header *h = m->v.h;

	if (!m->v.parts)
		return 0;
	for (size_t i = 0; i < h->ntensors; i++) {
		const struct tp_view *v = &views[i];
		const struct mf_part *p = &m->v.parts[i];
		uint64_t end = v->height ? v->src_off + (v->height - 1) * v->pitch + v->width : v->src_off;
		if (!v->present || v->bytes == 0 || (v->src_off >= p->offset && end <= p->offset + p->length))
			continue;
		return cl_err(-ERANGE, "model %s: rank %d of %d is not held here: this server loaded ranks %u-%u of %u (tensor '%s' bytes %llu-%llu of it are not loaded)",
			      m->name, rank, world, h->held_first, h->held_last, h->held_world,
			      m->v.strings + m->v.tensors[i].name_off, (unsigned long long)v->src_off,
			      (unsigned long long)end);
	}
	return 0;
}

/* One rank of one, no tensor-parallel plan, no stages: every tensor
 * whole, as rv_resolve's replicate gives it, without building the rules'
 * copy of the tensor table and parsing the config first (the bulk of a
 * stream's open at 140,000 tensors). views: calloc'd. */
static void all_whole(const struct wsrv_model *m, struct tp_view *views)
{
	for (size_t i = 0; i < m->v.h->ntensors; i++) {
		const struct mf_tensor *t = &m->v.tensors[i];
		struct tp_view *v = &views[i];
		v->present = true;
		v->rank = t->rank;
		memcpy(v->shape, m->v.dims + t->dims_index, t->rank * sizeof(uint64_t));
		v->width = v->bytes = v->pitch = t->size;
		v->height = 1;
	}
}

int tp_resolve(const struct wsrv_model *m, const struct wsrv_plan *p, int rank, int world,
	       struct tp_view *views)
{
	if (world <= 1 && (!p || (!p->tp_plan && p->stages <= 1))) {
		all_whole(m, views);
		return check_held(m, views, rank, world);
	}

	struct rv_rules rules = { p ? p->tp_plan : NULL, p ? p->stages : 1 };
	struct rv_tensor *t = NULL;
	struct rv_model rm;
	struct errinfo e;
	json_t *cfg = NULL;
	int r = rules_model(m, &rm, &t, &cfg);

	if (r == 0 && (r = rv_resolve(&rm, &rules, rank, world < 1 ? 1 : world, views, &e)) < 0)
		r = cl_err(r, "%s", e.msg);
	if (r == 0)
		r = check_held(m, views, rank, world);
	free(t);
	json_decref(cfg);
	return r;
}
