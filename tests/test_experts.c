// SPDX-License-Identifier: MIT
/* test_experts.c - experts on demand: an acquired expert's device bytes
 * equal the shared mapping's (FP8 scales included); hits, misses, LRU
 * eviction, held and pinned slots, prefetch, batched copies of experts
 * adjacent in the arena, tensor-parallel ownership, and the errors. With
 * WSRV_TEST_DEVICE=cuda the same cases run on the cuda backend over the
 * test driver (tests/cuda-driver/). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_bytes.h"
#include "fixture.h"
#include "wsrv.h"

static int experts_aliases(void);
/* deepseek-v3-mini: layer 0 dense, layers 1 and 2 with 16 experts each. */
static struct fixture F = { .tag = "experts", .serve = "m", .device = true,
			    .case_setup = experts_aliases, .models = {
	{ "deepseek-v3-mini", 32 << 20, .layers = 3, .shards = 2, .seed = 5 } } };

static struct wsrv_model *m;
static struct wsrv_device *dev;

#define RULE "\"residency\": {\"layers.*.mlp.experts.*.*\": \"experts_on_demand\"}"

static struct wsrv_stream *open_plan(const char *json, int rank, int world)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .rank = rank, .world = world };
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s;

	if (wsrv_plan_parse(json, strlen(json), &p) < 0)
		fail_msg("plan: %s", wsrv_last_error());
	if (wsrv_stream_open(m, dev, p, &o, &s) < 0)
		fail_msg("open: %s", wsrv_last_error());
	wsrv_plan_free(p);
	return s;
}

static struct wsrv_stream *open_slots(unsigned slots)
{
	char json[256];

	snprintf(json, sizeof(json), "{" RULE ", \"expert_cache\": {\"slots\": %u}}", slots);
	return open_plan(json, 0, 1);
}

/* Does tensor name belong to expert id of layer? */
static bool experts_of_expert(const char *name, int32_t layer, uint32_t id)
{
	char want[64];

	snprintf(want, sizeof(want), "layers.%d.mlp.experts.%u.", layer, id);
	return strstr(name, want) != NULL;
}

/* Every tensor of the experts (all 6: three weights, three scales) has the
 * shared mapping's bytes at its device address; returns how many. */
static int experts_check_experts(struct wsrv_stream *s, int32_t layer, const uint32_t *ids, size_t n)
{
	int seen = 0;

	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		void *d;
		wsrv_model_tensor(m, i, &t);
		for (size_t k = 0; k < n; k++) {
			if (!experts_of_expert(t.name, layer, ids[k]))
				continue;
			assert_int_equal(wsrv_stream_residency(s, i), WSRV_EXPERTS_ON_DEMAND);
			if (wsrv_stream_tensor_at(s, i, &d) < 0)
				fail_msg("%s: %s", t.name, wsrv_last_error());
			if (dev_cmp_host(d, t.data, t.size) != 0)
				fail_msg("%s: device bytes differ from the shared mapping", t.name);
			seen++;
		}
	}
	return seen;
}

/* The bytes of expert id's tensors. */
static uint64_t expert_bytes(int32_t layer, uint32_t id)
{
	uint64_t b = 0;

	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		if (experts_of_expert(t.name, layer, id))
			b += t.size;
	}
	return b;
}

static void xstats(struct wsrv_stream *s, int32_t layer, struct wsrv_expert_stats *x)
{
	if (wsrv_stream_expert_stats(s, layer, x) < 0)
		fail_msg("stats: %s", wsrv_last_error());
}

/* 1: misses then hits, bytes exact, the rest of the layer as before. */
static void hits_and_misses(void **st)
{
	struct wsrv_stream *s = open_slots(8);
	static const uint32_t ids[] = { 3, 0, 7, 3 };
	struct wsrv_expert_stats x;
	struct wsrv_stream_stats ss;
	void *slot[4];

	assert_int_equal(wsrv_stream_acquire(s, 1), 0);
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, ids, 4, slot), 0);
	assert_ptr_equal(slot[0], slot[3]);
	assert_int_equal(experts_check_experts(s, 1, ids, 3), 18);
	xstats(s, 1, &x);
	assert_int_equal(x.acquires, 3);
	assert_int_equal(x.misses, 3);
	assert_int_equal(x.hits, 0);
	assert_int_equal(x.slots_used, 3);
	assert_int_equal(x.experts, 16);
	assert_int_equal(wsrv_stream_release_experts(s, 1), 0);
	assert_int_equal(wsrv_stream_release(s, 1), 0);
	/* Released, they stay cached but not addressable. */
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		void *d;
		wsrv_model_tensor(m, i, &t);
		if (experts_of_expert(t.name, 1, 3))
			assert_int_equal(wsrv_stream_tensor_at(s, i, &d), -EAGAIN);
	}
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, ids, 3, NULL), 0);
	assert_int_equal(experts_check_experts(s, 1, ids, 3), 18);
	xstats(s, WSRV_LAYER_ALL, &x);
	assert_int_equal(x.hits, 3);
	assert_int_equal(x.misses, 3);
	/* Whole experts, once each: their tensors, and at most a slot each. */
	assert_true(x.bytes_copied >= 3 * expert_bytes(1, 3) && x.bytes_copied <= 3 * x.slot_bytes);
	assert_int_equal(x.passes, 2);
	/* The layer's slot holds only what is not an expert. */
	assert_int_equal(wsrv_stream_stats(s, &ss), 0);
	assert_true(ss.slot_bytes < 16 * x.slot_bytes);
	assert_int_equal(wsrv_stream_release_experts(s, 1), 0);
	wsrv_stream_close(s);
}

static size_t resident(struct wsrv_stream *s, int32_t layer, uint32_t *ids)
{
	size_t n;

	assert_int_equal(wsrv_stream_experts_resident(s, layer, ids, 16, &n), 0);
	return n;
}

static void experts_take(struct wsrv_stream *s, int32_t layer, const uint32_t *ids, size_t n)
{
	if (wsrv_stream_acquire_experts(s, layer, ids, n, NULL) < 0)
		fail_msg("acquire experts of layer %d: %s", layer, wsrv_last_error());
	assert_int_equal(experts_check_experts(s, layer, ids, n), 6 * (int)n);
	assert_int_equal(wsrv_stream_release_experts(s, layer), 0);
}

/* 2: the least recently used goes first; a pinned one never. */
static void lru_and_pins(void **st)
{
	struct wsrv_stream *s = open_slots(4);
	uint32_t a[] = { 0, 1 }, b[] = { 2, 3 }, c[] = { 0 }, d[] = { 4 }, got[16];
	struct wsrv_expert_stats x;

	experts_take(s, 1, a, 2);
	experts_take(s, 1, b, 2);
	experts_take(s, 1, c, 1);
	experts_take(s, 1, d, 1); /* 1 was the oldest */
	assert_int_equal(resident(s, 1, got), 4);
	assert_int_equal(got[0], 0);
	assert_int_equal(got[1], 2);
	assert_int_equal(got[2], 3);
	assert_int_equal(got[3], 4);
	xstats(s, WSRV_LAYER_ALL, &x);
	assert_int_equal(x.evictions, 1);
	/* Pinned: expert 2 stays through every other expert of both layers. */
	uint32_t pin[] = { 2 };
	assert_int_equal(wsrv_stream_pin_experts(s, 1, pin, 1, 1), 0);
	for (uint32_t e = 5; e < 16; e++) {
		experts_take(s, 1, &e, 1);
		experts_take(s, 2, &e, 1);
	}
	assert_true(resident(s, 1, got) >= 1 && got[0] == 2);
	xstats(s, WSRV_LAYER_ALL, &x);
	assert_int_equal(x.slots_pinned, 1);
	/* Pinning all that is left would leave nothing to stream through. */
	uint32_t more[] = { 7, 8, 9 };
	assert_int_equal(wsrv_stream_pin_experts(s, 1, more, 3, 1), -ENOSPC);
	assert_int_equal(wsrv_stream_pin_experts(s, 1, pin, 1, 0), 0);
	xstats(s, WSRV_LAYER_ALL, &x);
	assert_int_equal(x.slots_pinned, 0);
	wsrv_stream_close(s);
}

/* 3: more experts than slots free: -ENOSPC, nothing held or lost. */
static void too_many_held(void **st)
{
	struct wsrv_stream *s = open_slots(4);
	uint32_t five[] = { 0, 1, 2, 3, 4 }, three[] = { 5, 6, 7 }, two[] = { 8, 9 }, got[16];

	assert_int_equal(wsrv_stream_acquire_experts(s, 1, five, 5, NULL), -ENOSPC);
	assert_non_null(strstr(wsrv_last_error(), "slots"));
	assert_int_equal(resident(s, 1, got), 0);
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, three, 3, NULL), 0);
	assert_int_equal(wsrv_stream_acquire_experts(s, 2, two, 2, NULL), -ENOSPC);
	assert_int_equal(wsrv_stream_acquire_experts(s, 2, two, 1, NULL), 0);
	assert_int_equal(experts_check_experts(s, 1, three, 3), 18);
	assert_int_equal(experts_check_experts(s, 2, two, 1), 6);
	assert_int_equal(wsrv_stream_release_experts(s, 1), 0);
	assert_int_equal(wsrv_stream_release_experts(s, 2), 0);
	experts_take(s, 2, five, 4);
	wsrv_stream_close(s);
}

/* 4: a prefetch's copies count as prefetch hits at acquire. */
static void prefetch_then_acquire(void **st)
{
	struct wsrv_stream *s = open_slots(8);
	uint32_t guess[] = { 1, 2 }, real[] = { 1, 2, 3 };
	struct wsrv_expert_stats x;

	assert_int_equal(wsrv_stream_prefetch_experts(s, 2, guess, 2), 0);
	xstats(s, 2, &x);
	assert_int_equal(x.prefetches, 2);
	experts_take(s, 2, real, 3);
	xstats(s, 2, &x);
	assert_int_equal(x.prefetch_hits, 2);
	assert_int_equal(x.hits, 2);
	assert_int_equal(x.misses, 1);
	/* A prefetch bigger than the pool takes what fits and says nothing. */
	uint32_t all[16];
	for (uint32_t e = 0; e < 16; e++)
		all[e] = e;
	assert_int_equal(wsrv_stream_prefetch_experts(s, 1, all, 16), 0);
	xstats(s, WSRV_LAYER_ALL, &x);
	assert_int_equal(x.slots_used, 8);
	wsrv_stream_close(s);
}

/* 5: experts next to each other in the arena (experts.10 to .13 by name)
 * land in adjacent slots of a fresh pool: one copy. */
static void adjacent_in_one_copy(void **st)
{
	struct wsrv_stream *s = open_slots(16);
	uint32_t ids[] = { 13, 11, 10, 12 };
	struct wsrv_expert_stats x;

	experts_take(s, 1, ids, 4);
	xstats(s, 1, &x);
	assert_int_equal(x.misses, 4);
	assert_int_equal(x.copies, 1);
	wsrv_stream_close(s);
}

/* 6: rank 1 of 2 under tp_plan "experts" owns experts 8 to 15. */
static void rank_owns_its_experts(void **st)
{
	struct wsrv_stream *s = open_plan("{" RULE ", \"tp_plan\": {\"layers.*.mlp.experts.*.*\": \"experts\"}}",
					  1, 2);
	uint32_t mine[] = { 8, 15 }, theirs[] = { 3 };
	struct wsrv_expert_stats x;

	experts_take(s, 1, mine, 2);
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, theirs, 1, NULL), -ENOENT);
	assert_non_null(strstr(wsrv_last_error(), "on this rank"));
	xstats(s, 1, &x);
	assert_int_equal(x.experts, 8);
	wsrv_stream_close(s);
}

/* 7: what is not an expert on demand, or not a plan. */
static void refused_clearly(void **st)
{
	static const struct { const char *json, *needle; } bad[] = {
		{ "{\"expert_cache\": {\"slots\": 0}}", "1 to" },
		{ "{\"expert_cache\": {\"slots\": 2, \"bytes\": 9}}", "expert_cache" },
		{ "{\"expert_cache\": {\"fraction\": 1.5}}", "fraction" },
		{ "{\"expert_cache\": 4}", "expert_cache" },
	};
	struct wsrv_stream_opts o = { .struct_size = sizeof(o) };
	struct wsrv_stream *s;
	struct wsrv_plan *p;
	uint32_t id = 99, zero = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(wsrv_plan_parse(bad[i].json, strlen(bad[i].json), &p), -EINVAL);
		if (!strstr(wsrv_last_error(), bad[i].needle))
			fail_msg("'%s': %s", bad[i].json, wsrv_last_error());
	}
	/* A rule over tensors that name no expert. */
	const char *router = "{\"residency\": {\"layers.*.mlp.gate\": \"experts_on_demand\"}}";
	assert_int_equal(wsrv_plan_parse(router, strlen(router), &p), 0);
	assert_int_equal(wsrv_stream_open(m, dev, p, &o, &s), -EINVAL);
	assert_non_null(strstr(wsrv_last_error(), "names no expert"));
	wsrv_plan_free(p);
	s = open_slots(4);
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, &id, 1, NULL), -ENOENT);
	assert_int_equal(wsrv_stream_acquire_experts(s, 0, &zero, 1, NULL), -ENOENT); /* dense */
	assert_int_equal(wsrv_stream_release_experts(s, 7), -ENOENT);
	wsrv_stream_close(s);
	/* A stream without the rule has no expert cache. */
	assert_int_equal(wsrv_stream_open(m, dev, NULL, &o, &s), 0);
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, &zero, 1, NULL), -ENOENT);
	assert_non_null(strstr(wsrv_last_error(), "experts_on_demand"));
	wsrv_stream_close(s);
}

/* 8: a budget counts the pool; the default pool is two layers' worth. */
static void pool_sizes(void **st)
{
	struct wsrv_stream *s = open_plan("{" RULE "}", 0, 1);
	struct wsrv_stream *f = open_plan("{" RULE ", \"expert_cache\": {\"fraction\": 0.25}}", 0, 1);
	struct wsrv_expert_stats x, y;
	struct wsrv_stream_stats ss;

	xstats(s, WSRV_LAYER_ALL, &x);
	xstats(f, WSRV_LAYER_ALL, &y);
	assert_int_equal(x.slots, 32);
	assert_int_equal(x.experts, 32);
	assert_int_equal(y.slots, 8);
	assert_int_equal(wsrv_stream_stats(f, &ss), 0);
	assert_true(ss.device_bytes >= 8 * y.slot_bytes);
	wsrv_stream_close(s);
	wsrv_stream_close(f);
}

/* 9: the server shows the cache's counters (wsrvctl stats), and the
 * experts' bytes in the stream's bytes copied. */
static void reported_to_server(void **st)
{
	struct wsrv_stream *s = open_slots(8);
	uint32_t ids[] = { 1, 2 };
	struct wsrv_stream_record r;
	struct wsrv_expert_stats x;
	struct wsrv_stats *sts;
	bool found = false;

	experts_take(s, 1, ids, 2);
	experts_take(s, 1, ids, 1);
	xstats(s, WSRV_LAYER_ALL, &x);
	assert_int_equal(wsrv_stream_report(s), 0);
	assert_int_equal(wsrv_stats(F.srv.cl, &sts), 0);
	for (size_t i = 0; wsrv_stats_stream(sts, i, &r) == 0; i++)
		if (r.expert_slots) {
			found = true;
			assert_int_equal(r.expert_slots, 8);
			assert_int_equal(r.expert_hits, 1);
			assert_int_equal(r.expert_misses, 2);
			assert_true(r.bytes_copied >= x.bytes_copied);
		}
	assert_true(found);
	wsrv_stats_free(sts);
	wsrv_stream_close(s);
}

static int experts_aliases(void)
{
	m = F.srv.m;
	dev = F.dev;
	return 0;
}

FIXTURE_MAIN(F,
	cmocka_unit_test(hits_and_misses),
	cmocka_unit_test(lru_and_pins),
	cmocka_unit_test(too_many_held),
	cmocka_unit_test(prefetch_then_acquire),
	cmocka_unit_test(adjacent_in_one_copy),
	cmocka_unit_test(rank_owns_its_experts),
	cmocka_unit_test(refused_clearly),
	cmocka_unit_test(pool_sizes),
	cmocka_unit_test(reported_to_server),
)
