// SPDX-License-Identifier: MIT
/* model_hold.c - a partial load: the bytes of each tensor that ranks
 * [first, last] of a world see under a plan (proto/rank_view.h, the rules
 * libwsrv's views follow), as one run per tensor.
 *
 * A contiguous view (colwise rows, kv heads, a whole tensor) is held as
 * its byte run; the runs of several ranks merge into the smallest run that
 * covers them all. A strided view (rowwise columns) is held whole: its
 * columns are spread over every row, so reading them alone would be one
 * small read per row. */
#include "model.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rank_view.h"

static long hold_find(const void *ctx, const char *name)
{
	const struct model *m = ctx;
	const struct model_tensor *t = model_find(m, name);

	return t ? (long)(t - m->tensors) : -1;
}

/* The bytes view v reads of a tensor of size bytes: [*lo, *hi). */
static void extent(const struct tp_view *v, uint64_t size, uint64_t *lo, uint64_t *hi)
{
	if (v->height > 1 && v->pitch != v->width) {
		*lo = 0;
		*hi = size;
		return;
	}
	*lo = v->src_off;
	*hi = v->src_off + v->width * (v->height ? v->height : 1);
}

/* Merges rank r's views into the parts (lo = UINT64_MAX: none yet). */
static void merge(struct model *m, const struct tp_view *views, uint64_t *lo, uint64_t *hi)
{
	for (size_t i = 0; i < m->ntensors; i++) {
		uint64_t a, b;
		if (!views[i].present)
			continue;
		extent(&views[i], m->tensors[i].size, &a, &b);
		if (a < lo[i])
			lo[i] = a;
		if (b > hi[i])
			hi[i] = b;
	}
}

int model_hold_check(const struct model_opts *o, struct errinfo *e)
{
	if (o->world == 0)
		return o->plan ? err_set(e, -EINVAL, "--plan needs --ranks and --world") : 0;
	if (o->rank_first > o->rank_last || o->rank_last >= o->world)
		return err_set(e, -EINVAL, "--ranks %u-%u: not ranks of a world of %u", o->rank_first,
			       o->rank_last, o->world);
	return 0;
}

json_t *model_held_json(const struct model_held *h)
{
	return json_pack("{s:[i,i], s:i, s:i, s:I}", "ranks", (int)h->first, (int)h->last, "world",
			 (int)h->world, "stages", (int)h->stages, "bytes", (json_int_t)h->bytes);
}

static int check_opts(const struct model_opts *o, struct rv_rules *rules, struct errinfo *e)
{
	int r = model_hold_check(o, e);

	if (r < 0 || o->world == 0)
		return r;
	if (!o->plan) {
		memset(rules, 0, sizeof(*rules));
		return 0;
	}
	return rv_rules_from_plan(o->plan, rules, e);
}

static int resolve_all(struct model *m, const struct model_opts *o, const struct rv_rules *rules,
		       uint64_t *lo, uint64_t *hi, struct errinfo *e)
{
	struct rv_tensor *t = calloc(m->ntensors + 1, sizeof(*t));
	struct tp_view *views = calloc(m->ntensors + 1, sizeof(*views));
	struct rv_model rm = { t, m->ntensors, m->config, hold_find, m };
	int r = t && views ? 0 : err_set(e, -ENOMEM, "out of memory");

	for (size_t i = 0; r == 0 && i < m->ntensors; i++) {
		const struct model_tensor *x = &m->tensors[i];
		t[i] = (struct rv_tensor){ x->name, x->dtype, x->rank, x->shape, x->size, x->layer };
		lo[i] = UINT64_MAX;
		hi[i] = 0;
	}
	/* Every rank of the world sees every byte: the plan checked once (rank
	 * 0), and each tensor held whole, instead of W resolutions. */
	bool all = o->rank_first == 0 && o->rank_last + 1 == o->world;
	for (uint32_t k = o->rank_first; r == 0 && k <= (all ? 0 : o->rank_last); k++)
		if ((r = rv_resolve(&rm, rules, (int)k, (int)o->world, views, e)) == 0)
			merge(m, views, lo, hi);
	for (size_t i = 0; r == 0 && all && i < m->ntensors; i++) {
		lo[i] = 0;
		hi[i] = m->tensors[i].size;
	}
	free(t);
	free(views);
	return r;
}

int model_hold(struct model *m, const struct model_opts *o, struct errinfo *e)
{
	struct rv_rules rules;
	uint64_t *lo, *hi;
	int r = check_opts(o, &rules, e);

	if (r < 0 || o->world == 0)
		return r;
	lo = calloc(m->ntensors + 1, sizeof(*lo));
	hi = calloc(m->ntensors + 1, sizeof(*hi));
	m->held = calloc(1, sizeof(*m->held));
	if (!lo || !hi || !m->held)
		r = err_set(e, -ENOMEM, "out of memory");
	if (r == 0 && (r = resolve_all(m, o, &rules, lo, hi, e)) == 0) {
		*m->held = (struct model_held){ o->rank_first, o->rank_last, o->world,
						rules.stages > 1 ? rules.stages : 1, 0 };
		for (size_t i = 0; i < m->ntensors; i++) {
			struct model_tensor *t = &m->tensors[i];
			t->part_off = lo[i] < hi[i] ? lo[i] : 0;
			t->part_len = lo[i] < hi[i] ? hi[i] - lo[i] : 0;
			m->held->bytes += t->part_len;
		}
	}
	free(lo);
	free(hi);
	return r;
}
