// SPDX-License-Identifier: MIT
/* test_tp.c - tensor-parallel views, byte-exact against slicing done here,
 * independently, element by element: colwise, rowwise, replicate, experts,
 * kv_heads (W up to 8 over 2 KV heads: replicated heads), Hugging Face's
 * aliases, FP8 weights with their 128x128 scales; resident and streamed;
 * shapes that do not divide and unknown strategies are errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "wsrv.h"

/* The two models' server (two_models); each case a client and a host
 * device. */
static struct fixture F = { .tag = "tp", .two_models = 2 };

static const char LLAMA_TP[] =
	"\"tp_plan\": {\"layers.*.self_attn.q_proj\": \"colwise\", \"layers.*.self_attn.k_proj\": \"kv_heads\","
	" \"layers.*.self_attn.v_proj\": \"kv_heads\", \"layers.*.self_attn.o_proj\": \"rowwise\","
	" \"layers.*.mlp.gate_proj\": \"local_colwise\", \"layers.*.mlp.up_proj\": \"colwise_rep\","
	" \"layers.*.mlp.down_proj\": \"local_rowwise\", \"embed_tokens\": \"replicate\", \"lm_head\": \"colwise_rep\"}";
static const char DS_TP[] =
	"\"tp_plan\": {\"layers.*.self_attn.q_b_proj\": \"colwise\", \"layers.*.self_attn.o_proj\": \"rowwise\","
	" \"layers.*.mlp.experts.*.*\": \"experts\", \"lm_head\": \"colwise\"}";

/* What the test expects rank r of w to hold of t: the same rules, written
 * as plainly as possible. Returns bytes (and the data), or -1 when the
 * tensor is not in this rank's view. */
static long tp_expect(const struct wsrv_tensor *t, const char *strategy, int w, int r, int nkv,
		   int experts, uint8_t *out)
{
	const uint8_t *src = t->data;
	uint64_t rows = t->rank ? t->shape[0] : 1, cols = t->rank == 2 ? t->shape[1] : 1;
	uint64_t elem = t->rank ? t->size / (rows * cols) : t->size, n = 0;
	uint64_t r0 = 0, r1 = rows, c0 = 0, c1 = cols;

	if (!strategy || w == 1 || !strcmp(strategy, "replicate")) {
	} else if (!strcmp(strategy, "colwise") || !strcmp(strategy, "local_colwise") ||
		   !strcmp(strategy, "colwise_rep")) {
		r0 = rows / (uint64_t)w * (uint64_t)r;
		r1 = r0 + rows / (uint64_t)w;
	} else if ((!strcmp(strategy, "rowwise") || !strcmp(strategy, "local_rowwise")) && t->rank == 2) {
		c0 = cols / (uint64_t)w * (uint64_t)r;
		c1 = c0 + cols / (uint64_t)w;
	} else if (!strcmp(strategy, "kv_heads")) {
		uint64_t hd = rows / (uint64_t)nkv;
		int h0 = w <= nkv ? r * (nkv / w) : r / (w / nkv), nh = w <= nkv ? nkv / w : 1;
		r0 = (uint64_t)h0 * hd;
		r1 = r0 + (uint64_t)nh * hd;
	} else if (!strcmp(strategy, "experts")) {
		const char *p = strstr(t->name, ".experts.");
		if (p && atoi(p + 9) / (experts / w) != r)
			return -1;
	}
	for (uint64_t i = r0; i < r1; i++)
		for (uint64_t j = c0; j < c1; j++)
			for (uint64_t b = 0; b < elem; b++)
				out[n++] = src[(i * cols + j) * elem + b];
	return (long)n;
}

/* The strategy the test's own reading of the tp_plan gives t. */
static const char *strategy_of(const char *name, bool ds)
{
	static const char *const llama[][2] = {
		{ "self_attn.q_proj", "colwise" }, { "self_attn.k_proj", "kv_heads" },
		{ "self_attn.v_proj", "kv_heads" }, { "self_attn.o_proj", "rowwise" },
		{ "mlp.gate_proj", "local_colwise" }, { "mlp.up_proj", "colwise_rep" },
		{ "mlp.down_proj", "local_rowwise" }, { "lm_head", "colwise_rep" },
	};
	static const char *const dsv3[][2] = {
		{ "self_attn.q_b_proj", "colwise" }, { "self_attn.o_proj", "rowwise" },
		{ "mlp.experts.", "experts" }, { "lm_head", "colwise" },
	};
	size_t n = ds ? sizeof(dsv3) / sizeof(dsv3[0]) : sizeof(llama) / sizeof(llama[0]);

	for (size_t i = 0; i < n; i++)
		if (strstr(name, ds ? dsv3[i][0] : llama[i][0]))
			return ds ? dsv3[i][1] : llama[i][1];
	return NULL;
}

/* The layout says where the rank's bytes are in the shared mapping: its
 * rows, gathered, are the expected slice. */
static void tp_check_layout(struct wsrv_stream *s, size_t i, const struct wsrv_tensor *t,
			 const uint8_t *want, size_t n)
{
	struct wsrv_layout l;
	const uint8_t *src = t->data;

	assert_int_equal(wsrv_stream_layout(s, i, &l), 0);
	assert_int_equal(l.rows * l.row_bytes, n);
	assert_true(l.rows == 1 || l.row_pitch >= l.row_bytes);
	assert_true(l.offset + (l.rows - 1) * l.row_pitch + l.row_bytes <= t->size);
	for (uint64_t r = 0; r < l.rows; r++)
		if (memcmp(src + l.offset + r * l.row_pitch, want + r * l.row_bytes, l.row_bytes) != 0)
			fail_msg("%s: row %llu of its layout is not the rank's slice", t->name,
				 (unsigned long long)r);
}

static void check_rank(struct wsrv_model *m, bool ds, int w, int r, bool streamed)
{
	char json[1024];
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2, .rank = r, .world = w };
	struct wsrv_plan *p;
	struct wsrv_stream *s;
	uint8_t *want = malloc(64 << 20);
	int nkv = ds ? 0 : 2, experts = ds ? 16 : 0;

	snprintf(json, sizeof(json), "{%s%s}", ds ? DS_TP : LLAMA_TP, streamed ? "" : ", \"budget\": \"1T\"");
	assert_int_equal(wsrv_plan_parse(json, strlen(json), &p), 0);
	if (wsrv_stream_open(m, F.two.dev, p, &o, &s) < 0)
		fail_msg("W=%d r=%d: %s", w, r, wsrv_last_error());
	for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, li, &l);
		assert_int_equal(wsrv_stream_acquire(s, l.index), 0);
		for (uint32_t i = l.first; i < l.first + l.count; i++) {
			struct wsrv_tensor t;
			struct wsrv_view v;
			char scale_of[600];
			const char *strat;
			void *d;
			wsrv_model_tensor(m, i, &t);
			/* A scale splits with its weight: the weight's strategy. */
			snprintf(scale_of, sizeof(scale_of), "%s", t.name);
			strat = strategy_of(scale_of, ds);
			long n = tp_expect(&t, strat, w, r, nkv, experts, want);
			assert_int_equal(wsrv_stream_view(s, i, &v), 0);
			if (n < 0) {
				assert_false(v.present);
				assert_int_equal(wsrv_stream_tensor_at(s, i, &d), -ENOENT);
				continue;
			}
			if (wsrv_stream_tensor_at(s, i, &d) < 0)
				fail_msg("%s: %s", t.name, wsrv_last_error());
			if ((long)v.bytes != n || memcmp(d, want, (size_t)n) != 0)
				fail_msg("W=%d r=%d %s (%s): device bytes differ from the expected slice (%llu vs %ld bytes)",
					 w, r, t.name, strat ? strat : "whole", (unsigned long long)v.bytes, n);
			tp_check_layout(s, i, &t, want, (size_t)n);
		}
		assert_int_equal(wsrv_stream_release(s, l.index), 0);
	}
	wsrv_stream_close(s);
	wsrv_plan_free(p);
	free(want);
}

static void llama_views(void **st)
{
	struct wsrv_model *m;

	assert_int_equal(wsrv_attach(F.two.cl, "llama", &m), 0);
	for (int w = 1; w <= 8; w *= 2)
		for (int r = 0; r < w; r++)
			check_rank(m, false, w, r, r % 2 == 1);
	wsrv_detach(m);
}

static void deepseek_views(void **st)
{
	struct wsrv_model *m;

	assert_int_equal(wsrv_attach(F.two.cl, "ds", &m), 0);
	for (int w = 1; w <= 4; w *= 2)
		for (int r = 0; r < w; r++)
			check_rank(m, true, w, r, r % 2 == 0);
	wsrv_detach(m);
}

static void errors(void **st)
{
	static const struct { const char *model, *json; int w; const char *needle; } bad[] = {
		/* q_b_proj: 192 rows a head; over 16 ranks its 128-row scale blocks
		 * would be cut, whatever the head count. */
		{ "ds", "{\"tp_plan\": {\"layers.*.self_attn.q_b_proj\": \"colwise\"}}", 16, "128x128 scale blocks" },
		/* The shared expert's down_proj: 256 columns, 2 blocks, not 4 ranks' worth. */
		{ "ds", "{\"tp_plan\": {\"layers.*.mlp.shared_experts.down_proj\": \"rowwise\"}}", 4, "does not divide by world 4" },
		{ "llama", "{\"tp_plan\": {\"layers.*.mlp.up_proj\": \"colwise\"}}", 7, "does not divide by world 7" },
		{ "llama", "{\"tp_plan\": {\"layers.*.mlp.up_proj\": \"diagonal\"}}", 2, "unknown tensor-parallel strategy 'diagonal'" },
		{ "llama", "{\"tp_plan\": {\"layers.*.self_attn.k_proj\": \"kv_heads\"}}", 3, "not a multiple of its 2 KV heads" },
		{ "llama", "{\"tp_plan\": [1]}", 2, "must map patterns" },
		{ "llama", "{\"stages\": 0}", 2, "\"stages\" is a whole number" },
		{ "llama", "{\"stages\": 2}", 3, "a world of 3 does not cut into 2 stages" },
		{ "llama", "{\"stages\": 64}", 64, "do not cut into 64 stages" },
		/* Issue 79 item 5: a typo'd key, and a pattern that matches
		 * nothing, gave unsharded shapes with no word. */
		{ "llama", "{\"tp_plann\": {\"layers.*.mlp.up_proj\": \"colwise\"}}", 2,
		  "unknown key \"tp_plann\"; did you mean \"tp_plan\"?" },
		{ "llama", "{\"tp_plan\": {\"layers.*.self_atn.q_proj\": \"colwise\"}}", 2,
		  "tp_plan pattern \"layers.*.self_atn.q_proj\" matches no tensor" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct wsrv_stream_opts o = { .struct_size = sizeof(o), .rank = 0, .world = bad[i].w };
		struct wsrv_model *m;
		struct wsrv_plan *p;
		struct wsrv_stream *s;
		assert_int_equal(wsrv_attach(F.two.cl, bad[i].model, &m), 0);
		/* A malformed plan is refused when parsed; a plan the model or
		 * world cannot follow, when the stream opens. */
		if (wsrv_plan_parse(bad[i].json, strlen(bad[i].json), &p) == -EINVAL) {
			if (!strstr(wsrv_last_error(), bad[i].needle))
				fail_msg("case %zu: %s", i, wsrv_last_error());
			wsrv_detach(m);
			continue;
		}
		if (wsrv_stream_open(m, F.two.dev, p, &o, &s) != -EINVAL)
			fail_msg("case %zu (%s, W=%d) was accepted", i, bad[i].json, bad[i].w);
		if (!strstr(wsrv_last_error(), bad[i].needle))
			fail_msg("case %zu: %s", i, wsrv_last_error());
		wsrv_plan_free(p);
		wsrv_detach(m);
	}
}

FIXTURE_MAIN(F,
	cmocka_unit_test(llama_views),
	cmocka_unit_test(deepseek_views),
	cmocka_unit_test(errors),
)
