/* stream_place.c - which tensors are resident and which streamed: explicit
 * rules first (layer_shard resolved by the worker's rank), then, under a
 * device budget, everything else resident until it does not fit, streaming
 * the largest per-layer series first. */
#include <errno.h>
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
	/* layer_shard: this rank keeps the layers it owns, fetches the rest. */
	if (layer < 0 || (unsigned)layer % r->k == (unsigned)rank)
		return WHERE_RESIDENT;
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

static int cmp_series(const void *a, const void *b)
{
	const struct series *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Device bytes of the current choice: resident tensors plus the slots. */
static uint64_t device_bytes(struct wsrv_stream *s, unsigned slots)
{
	uint64_t res = 0;
	size_t n = wsrv_model_tensor_count(s->m);

	for (size_t i = 0; i < n; i++)
		if (s->where[i] == WHERE_RESIDENT)
			res += (s->views[i].bytes + 255) & ~255ULL;
	return res + slots * stream_layout(s);
}

static void set_series(struct wsrv_stream *s, const uint8_t *automatic, const char *key, uint8_t where)
{
	size_t n = wsrv_model_tensor_count(s->m);
	char k2[256];

	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t;
		if (!automatic[i])
			continue;
		wsrv_model_tensor(s->m, i, &t);
		series_of(&t, k2, sizeof(k2));
		if (strcmp(k2, key) == 0)
			s->where[i] = where;
	}
}

static int fit_budget(struct wsrv_stream *s, const uint8_t *automatic, uint64_t budget, unsigned slots)
{
	size_t n = wsrv_model_tensor_count(s->m), ns = 0;
	struct series *ser = calloc(n + 1, sizeof(*ser));
	char key[256];

	if (!ser)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t;
		size_t k;
		if (!automatic[i])
			continue;
		wsrv_model_tensor(s->m, i, &t);
		series_of(&t, key, sizeof(key));
		for (k = 0; k < ns && strcmp(ser[k].key, key); k++)
			;
		if (k == ns)
			snprintf(ser[ns++].key, sizeof(ser[0].key), "%s", key);
		ser[k].bytes += s->views[i].bytes;
		ser[k].global = t.layer < 0;
	}
	qsort(ser, ns, sizeof(*ser), cmp_series);
	for (size_t k = 0; k < ns && device_bytes(s, slots) > budget; k++) {
		uint64_t before = device_bytes(s, slots);
		set_series(s, automatic, ser[k].key, WHERE_STREAMED);
		/* A series of the global group is one tensor in one "layer":
		 * streaming it through D slots can cost more than keeping it, so
		 * it streams only when that helps. Series across numbered layers
		 * stream in size order: each may not pay alone (its layers share
		 * the slots), but together they do. */
		if (ser[k].global && device_bytes(s, slots) >= before)
			set_series(s, automatic, ser[k].key, WHERE_RESIDENT);
	}
	free(ser);
	if (device_bytes(s, slots) > budget)
		return cl_err(-ENOSPC, "plan: a device budget of %llu bytes is too small: the least this model can stream with needs %llu",
			      (unsigned long long)budget, (unsigned long long)device_bytes(s, slots));
	return 0;
}

int stream_place(struct wsrv_stream *s, const struct wsrv_plan *p, int rank, unsigned slots)
{
	size_t n = wsrv_model_tensor_count(s->m);
	uint8_t *automatic = calloc(n + 1, 1);
	int r = 0;

	if (!automatic)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t;
		const struct plan_rule *rule;
		wsrv_model_tensor(s->m, i, &t);
		rule = plan_match(p, t.name);
		if (!s->views[i].present) {
			s->where[i] = WHERE_ABSENT; /* another rank's expert */
		} else if (rule) {
			s->where[i] = (uint8_t)where_for(rule, t.layer, rank);
		} else if (p && p->budget) {
			automatic[i] = 1;
			s->where[i] = WHERE_RESIDENT;
		} else {
			/* No rule: layers stream, the global group stays. */
			s->where[i] = t.layer < 0 ? WHERE_RESIDENT : WHERE_STREAMED;
		}
	}
	if (p && p->budget)
		r = fit_budget(s, automatic, p->budget, slots);
	free(automatic);
	return r;
}
