// SPDX-License-Identifier: MIT
/* stream_place.c - which tensors are resident and which streamed: explicit
 * rules first (layer_shard resolved by the worker's rank), then, under a
 * device budget, everything else resident until it does not fit, streaming
 * the largest per-layer series first. */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream_internal.h"

static int where_for(const struct plan_rule *r, int32_t layer, int rank)
{
	if (r->residency == WSRV_RESIDENT)
		return WHERE_RESIDENT;
	if (r->residency == WSRV_STREAMED)
		return WHERE_STREAMED;
	if (r->residency == WSRV_EXPERTS_ON_DEMAND)
		return WHERE_EXPERT;
	/* layer_shard: this rank keeps the layers it owns, fetches the rest;
	 * with a peer source it keeps them in a region the others read
	 * (stream_peer.c). */
	if (layer < 0)
		return WHERE_RESIDENT;
	if ((unsigned)layer % r->k == (unsigned)rank)
		return r->residency == WSRV_LAYER_SHARD_PEER ? WHERE_SHARD : WHERE_RESIDENT;
	return WHERE_STREAMED;
}

/* The per-layer series a tensor belongs to: its name with ".<layer>." as
 * ".*." (for the global group, the name itself). */
static void series_of(const struct wsrv_tensor *t, char *buf, size_t cap)
{
	char mark[24];
	const char *p;

	snprintf(buf, cap, "%s", t->name);
	if (t->layer < 0)
		return;
	snprintf(mark, sizeof(mark), ".%d.", t->layer);
	p = strstr(t->name, mark);
	if (p)
		snprintf(buf + (p - t->name), cap - (size_t)(p - t->name), ".*.%s", p + strlen(mark));
}

struct series {
	char key[256];
	uint64_t bytes;
	bool global;                /* a tensor of the global group */
};

/* Device bytes of the current choice: resident tensors plus the slots
 * and the expert cache. */
static uint64_t device_bytes(struct wsrv_stream *s, unsigned slots)
{
	uint64_t res = 0;
	size_t n = cl_ntensors(s->m);

	for (size_t i = 0; i < n; i++)
		if (s->where[i] == WHERE_RESIDENT)
			res += (tp_view_bytes(s->m, s->views, i) + 255) & ~255ULL;
	return res + slots * stream_layout(s) + xp_device_bytes(s);
}

/* Every automatic tensor of series k gets `where`. */
static void set_series(struct wsrv_stream *s, const uint32_t *sid, uint32_t k, uint8_t where)
{
	for (size_t i = 0; i < cl_ntensors(s->m); i++)
		if (sid[i] == k)
			s->where[i] = where;
}

/* Groups the automatic tensors into series: sid[i] is tensor i's series
 * (UINT32_MAX for tensors a rule placed), each series' key and bytes in
 * ser. The keys are indexed by a hash, so this is linear in the tensors.
 * Returns the number of series or a negative errno. */
static long group_series(struct wsrv_stream *s, const uint8_t *automatic, uint32_t *sid,
			 struct series *ser)
{
	json_t *index = json_object();
	char key[256];
	long ns = 0;

	if (!index)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < cl_ntensors(s->m); i++) {
		struct wsrv_tensor t;
		json_t *k;
		sid[i] = UINT32_MAX;
		if (!automatic[i])
			continue;
		cl_tensor_nowait(s->m, (uint32_t)i, &t);
		series_of(&t, key, sizeof(key));
		k = json_object_get(index, key);
		if (!k) {
			snprintf(ser[ns].key, sizeof(ser[0].key), "%s", key);
			ser[ns].global = t.layer < 0;
			k = json_integer(ns++);
			json_object_set_new(index, key, k);
		}
		sid[i] = (uint32_t)json_integer_value(k);
		ser[sid[i]].bytes += tp_view_bytes(s->m, s->views, i);
	}
	json_decref(index);
	return ns;
}

static int cmp_by_bytes(const void *a, const void *b)
{
	const struct series *x = *(const struct series *const *)a, *y = *(const struct series *const *)b;

	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int fit_budget(struct wsrv_stream *s, const uint8_t *automatic, uint64_t budget, unsigned slots)
{
	size_t n = cl_ntensors(s->m);
	struct series *ser = calloc(n + 1, sizeof(*ser)), **order = calloc(n + 1, sizeof(*order));
	uint32_t *sid = calloc(n + 1, sizeof(*sid));
	long ns = ser && order && sid ? group_series(s, automatic, sid, ser) : -ENOMEM;
	uint64_t cur = device_bytes(s, slots);
	int r = 0;

	if (ns < 0) {
		r = ns == -ENOMEM ? cl_err(-ENOMEM, "out of memory") : (int)ns;
		goto out;
	}
	for (long k = 0; k < ns; k++)
		order[k] = &ser[k];
	qsort(order, (size_t)ns, sizeof(*order), cmp_by_bytes);
	for (long k = 0; k < ns && cur > budget; k++) {
		uint32_t id = (uint32_t)(order[k] - ser);
		uint64_t after;
		set_series(s, sid, id, WHERE_STREAMED);
		after = device_bytes(s, slots);
		/* A series of the global group is one tensor in one "layer":
		 * streaming it through D slots can cost more than keeping it, so
		 * it streams only when that helps. Series across numbered layers
		 * stream in size order: each may not pay alone (its layers share
		 * the slots), but together they do. */
		if (ser[id].global && after >= cur)
			set_series(s, sid, id, WHERE_RESIDENT);
		else
			cur = after;
	}
	if (cur > budget)
		r = cl_err(-ENOSPC, "plan: a device budget of %llu bytes is too small: the least this model can stream with needs %llu",
			   (unsigned long long)budget, (unsigned long long)cur);
out:
	free(ser);
	free(order);
	free(sid);
	return r;
}

int stream_place(struct wsrv_stream *s, const struct wsrv_plan *p, int rank, unsigned slots)
{
	size_t n = cl_ntensors(s->m);
	uint8_t *automatic = calloc(n + 1, 1);
	int r = 0;

	if (!automatic)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		int32_t layer = cl_tensor_entry(s->m, i)->layer;
		const struct plan_rule *rule = p ? plan_match(p, cl_tensor_name(s->m, (uint32_t)i)) : NULL;
		if (s->views && !s->views[i].present) {
			s->where[i] = WHERE_ABSENT; /* another rank's expert */
		} else if (rule) {
			s->where[i] = (uint8_t)where_for(rule, layer, rank);
		} else if (p && p->budget) {
			automatic[i] = 1;
			s->where[i] = WHERE_RESIDENT;
		} else {
			/* No rule: layers stream, the global group stays. */
			s->where[i] = layer < 0 ? WHERE_RESIDENT : WHERE_STREAMED;
		}
	}
	if ((r = xp_build(s, p)) == 0 && p && p->budget)
		r = fit_budget(s, automatic, p->budget, slots);
	free(automatic);
	return r;
}
