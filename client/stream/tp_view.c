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
	const struct mf_view *mv = cl_model_view(m);
	size_t n = mv->h->ntensors, len;
	const char *c = wsrv_model_config(m, &len);

	*cfg = c ? json_loadb(c, len, 0, NULL) : NULL;
	*t = calloc(n + 1, sizeof(**t));
	if (!*t)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct mf_tensor *x = &mv->tensors[i];
		(*t)[i] = (struct rv_tensor){ mv->strings + x->name_off, x->dtype, x->rank,
					     mv->dims + x->dims_index, x->size, x->layer };
	}
	*rm = (struct rv_model){ *t, n, *cfg, tp_find, m };
	return 0;
}

/* A partial load: every byte this rank's views read must be held.
 * views NULL: every tensor whole. */
static int check_held(const struct wsrv_model *m, const struct tp_view *views, int rank, int world)
{
	const struct mf_view *mv = cl_model_view(m);
	const struct mf_header *h = mv->h;

	if (!mv->parts)
		return 0;
	for (size_t i = 0; i < h->ntensors; i++) {
		const struct tp_view *v = views ? &views[i] : NULL;
		const struct mf_part *p = &mv->parts[i];
		uint64_t bytes = v ? v->bytes : mv->tensors[i].size, off = v ? v->src_off : 0;
		uint64_t end = !v ? bytes : v->height ? off + (v->height - 1) * v->pitch + v->width : off;
		if ((v && !v->present) || bytes == 0 || (off >= p->offset && end <= p->offset + p->length))
			continue;
		return cl_err(-ERANGE, "model %s: rank %d of %d is not held here: this server loaded ranks %u-%u of %u (tensor '%s' bytes %llu-%llu of it are not loaded)",
			      wsrv_model_name(m), rank, world, h->held_first, h->held_last, h->held_world,
			      cl_tensor_name(m, (uint32_t)i), (unsigned long long)off,
			      (unsigned long long)end);
	}
	return 0;
}

int tp_resolve(const struct wsrv_model *m, const struct wsrv_plan *p, int rank, int world,
	       struct tp_view **views)
{
	*views = NULL;
	/* One rank of one, no tensor-parallel plan, no stages: every tensor
	 * whole, as its manifest entry says (tp_view_at), with no table of
	 * views to fill (at 140,000 tensors, the bulk of an open). */
	if (world <= 1 && (!p || (!p->tp_plan && p->stages <= 1)))
		return check_held(m, NULL, rank, world);

	struct rv_rules rules = { p ? p->tp_plan : NULL, p ? p->stages : 1 };
	struct rv_tensor *t = NULL;
	struct rv_model rm;
	struct errinfo e;
	json_t *cfg = NULL;
	int r;

	if (!(*views = calloc(cl_ntensors(m) + 1, sizeof(**views))))
		return cl_err(-ENOMEM, "out of memory");
	r = rules_model(m, &rm, &t, &cfg);
	if (r == 0 && (r = rv_resolve(&rm, &rules, rank, world < 1 ? 1 : world, *views, &e)) < 0)
		r = cl_err(r, "%s", e.msg);
	if (r == 0)
		r = check_held(m, *views, rank, world);
	free(t);
	json_decref(cfg);
	return r;
}
