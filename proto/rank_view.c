// SPDX-License-Identifier: MIT
/* rank_view.c - what a rank sees of each tensor: stages, then tensor
 * parallelism. */
#include "rank_view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "tensor_glob.h"

enum strategy { S_REPLICATE, S_COLWISE, S_ROWWISE, S_EXPERTS, S_KV_HEADS };

static const struct { const char *name; enum strategy s; } names[] = {
	{ "replicate", S_REPLICATE }, { "colwise", S_COLWISE }, { "rowwise", S_ROWWISE },
	{ "experts", S_EXPERTS }, { "kv_heads", S_KV_HEADS },
	/* Hugging Face's names for the same splits of the weights. */
	{ "local_colwise", S_COLWISE }, { "local_rowwise", S_ROWWISE },
	{ "colwise_rep", S_COLWISE }, { "rowwise_rep", S_ROWWISE },
	{ "local_packed_rowwise", S_ROWWISE }, { "local", S_REPLICATE },
	{ "gather", S_REPLICATE }, { "sequence_parallel", S_REPLICATE },
	{ "isolated", S_REPLICATE }, { "ep_router", S_REPLICATE },
	{ "grouped_gemm", S_EXPERTS }, { "local_experts", S_EXPERTS },
};

/* One resolution: the model, the rules, this rank's place. */
struct ctx {
	const struct rv_model *m;
	const json_t *tp;
	int rank, world;            /* tensor-parallel, within the stage */
	int32_t layer0, layer_end;  /* this stage's layers */
	long experts;
	uint64_t blk[2];
	struct errinfo *e;
};

static int strategy(const char *s, enum strategy *out)
{
	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0) {
			*out = names[i].s;
			return 0;
		}
	return -EINVAL;
}

static const json_t *rule_for(const json_t *tp, const char *name)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)tp, k, v) {
		if (tensor_pattern_match(k, name))
			return v;
	}
	return NULL;
}

static long config_int(const json_t *cfg, const char *key)
{
	const json_t *v = json_object_get(cfg, key);

	return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static void whole(const struct rv_tensor *t, struct tp_view *v)
{
	memcpy(v->shape, t->shape, t->rank * sizeof(uint64_t));
	v->present = true;
	v->src_off = 0;
	v->width = v->bytes = t->size;
	v->height = 1;
	v->pitch = t->size;
}

static bool is_scale(const char *name)
{
	size_t n = strlen(name);
	return n > 17 && strcmp(name + n - 17, ".weight_scale_inv") == 0;
}

static int no_divide(struct ctx *c, const struct rv_tensor *t, int dim, uint64_t n, const char *why)
{
	return err_set(c->e, -EINVAL, "tensor '%s': dimension %d (%llu%s) does not divide by world %d",
		       t->name, dim, (unsigned long long)n, why, c->world);
}

/* Rows [r0, r0 + n) of dim 0: one contiguous run. */
static void rows(const struct rv_tensor *t, uint64_t r0, uint64_t n, struct tp_view *v)
{
	uint64_t row = t->shape[0] ? t->size / t->shape[0] : 0;

	whole(t, v);
	v->shape[0] = n;
	v->src_off = r0 * row;
	v->width = v->pitch = v->bytes = n * row;
}

/* Columns [c0, c0 + n) of dim 1 of a 2-D tensor: a strided copy. */
static void cols(const struct rv_tensor *t, uint64_t c0, uint64_t n, struct tp_view *v)
{
	uint64_t elem = dtype_bits((enum dtype)t->dtype) / 8;

	whole(t, v);
	v->shape[1] = n;
	v->src_off = c0 * elem;
	v->width = n * elem;
	v->height = t->shape[0];
	v->pitch = t->shape[1] * elem;
	v->bytes = v->width * v->height;
}

static int split(struct ctx *c, const struct rv_tensor *t, int dim, struct tp_view *v)
{
	uint64_t n = t->shape[dim], w = (uint64_t)c->world, r = (uint64_t)c->rank;

	if (t->rank <= (uint32_t)dim) /* a 1-D bias under rowwise stays whole */
		return whole(t, v), 0;
	if (dtype_bits((enum dtype)t->dtype) % 8)
		return err_set(c->e, -EINVAL, "tensor '%s': %s elements are not whole bytes and cannot be split",
			       t->name, dtype_name((enum dtype)t->dtype));
	if (n % w)
		return no_divide(c, t, dim, n, is_scale(t->name) ? " scale blocks" : "");
	if (dim == 0)
		rows(t, n / w * r, n / w, v);
	else if (t->rank == 2)
		cols(t, n / w * r, n / w, v);
	else
		return err_set(c->e, -EINVAL, "tensor '%s': rowwise needs a 2-D tensor, not rank %u", t->name,
			       t->rank);
	return 0;
}

int rv_fp8_scale_check(const struct rv_tensor *w, const struct rv_tensor *sc, const uint64_t blk[2],
		       struct errinfo *e)
{
	if (w->rank != 2 || sc->rank != 2 || sc->dtype != DT_F32 ||
	    sc->shape[0] != (w->shape[0] + blk[0] - 1) / blk[0] ||
	    sc->shape[1] != (w->shape[1] + blk[1] - 1) / blk[1])
		return err_set(e, -EINVAL, "tensor '%s' (%s, rank %u) is not the F32 [ceil(rows/%llu), ceil(cols/%llu)] block scale of '%s' (rank %u)",
			       sc->name, dtype_name((enum dtype)sc->dtype), sc->rank,
			       (unsigned long long)blk[0], (unsigned long long)blk[1], w->name, w->rank);
	return 0;
}

/* A scale must fit its weight, and the weight split in whole blocks. */
static int check_blocks(struct ctx *c, const struct rv_tensor *t, int dim)
{
	char w[600], why[96];
	size_t n = strlen(t->name);
	const struct rv_tensor *wt;
	long i;
	int r;

	if (!is_scale(t->name))
		return 0;
	snprintf(w, sizeof(w), "%.*s.weight", (int)(n - 17), t->name);
	if ((i = c->m->find(c->m->ctx, w)) < 0)
		return 0;
	wt = &c->m->tensors[i];
	if ((r = rv_fp8_scale_check(wt, t, c->blk, c->e)) < 0)
		return r;
	snprintf(why, sizeof(why), ": its %llux%llu scale blocks would be cut",
		 (unsigned long long)c->blk[0], (unsigned long long)c->blk[1]);
	if (wt->shape[dim] % ((uint64_t)c->world * c->blk[dim]))
		return no_divide(c, wt, dim, wt->shape[dim], why);
	return 0;
}

static int expert_of(const char *name)
{
	const char *p = strstr(name, ".experts.");
	return p ? atoi(p + 9) : -1;
}

static int kv_heads(struct ctx *c, const struct rv_tensor *t, struct tp_view *v)
{
	long nkv = config_int(c->m->config, "num_key_value_heads");
	uint64_t hd, h0, nh;

	if (nkv <= 0 || t->rank < 1 || t->shape[0] % (uint64_t)nkv)
		return err_set(c->e, -EINVAL, "tensor '%s': kv_heads needs num_key_value_heads in config.json dividing dimension 0 (%llu)",
			       t->name, t->rank ? (unsigned long long)t->shape[0] : 0ull);
	hd = t->shape[0] / (uint64_t)nkv;
	if (c->world <= nkv) {
		if (nkv % c->world)
			return no_divide(c, t, 0, (uint64_t)nkv, " KV heads");
		nh = (uint64_t)(nkv / c->world);
		h0 = (uint64_t)c->rank * nh;
	} else {
		if (c->world % nkv)
			return err_set(c->e, -EINVAL, "tensor '%s': world %d is not a multiple of its %ld KV heads",
				       t->name, c->world, nkv);
		nh = 1;
		h0 = (uint64_t)(c->rank / (c->world / nkv));
	}
	rows(t, h0 * hd, nh * hd, v);
	return 0;
}

static int experts(struct ctx *c, const struct rv_tensor *t, struct tp_view *v)
{
	int e = expert_of(t->name);

	whole(t, v);
	if (e < 0) /* a router or shared expert: everyone's */
		return 0;
	if (c->experts <= 0 || c->experts % c->world)
		return err_set(c->e, -EINVAL, "tensor '%s': %ld experts do not divide by world %d", t->name,
			       c->experts, c->world);
	v->present = e / (c->experts / c->world) == c->rank;
	return 0;
}

static int one(struct ctx *c, const struct rv_tensor *t, enum strategy st, struct tp_view *v)
{
	int r;

	switch (st) {
	case S_REPLICATE: whole(t, v); return 0;
	case S_COLWISE:
		if ((r = check_blocks(c, t, 0)) < 0)
			return r;
		return split(c, t, 0, v);
	case S_ROWWISE:
		if ((r = check_blocks(c, t, 1)) < 0)
			return r;
		return split(c, t, 1, v);
	case S_EXPERTS: return experts(c, t, v);
	case S_KV_HEADS: return kv_heads(c, t, v);
	}
	return -EINVAL;
}

/* Rank r's stage and its layers; the tensor-parallel rank and world in it. */
static int rv_place(struct ctx *c, const struct rv_rules *r, int rank, int world)
{
	unsigned S = r->stages > 1 ? r->stages : 1, s;
	int32_t L = 0;

	if (world > 1 && (rank < 0 || rank >= world))
		return err_set(c->e, -EINVAL, "tensor parallelism: rank %d is not in a world of %d", rank, world);
	c->rank = rank;
	c->world = world;
	c->layer0 = 0;
	c->layer_end = INT32_MAX;
	if (S == 1)
		return 0;
	if (world < 1 || world % (int)S)
		return err_set(c->e, -EINVAL, "plan: a world of %d does not cut into %u stages", world, S);
	for (size_t i = 0; i < c->m->n; i++)
		if (c->m->tensors[i].layer >= L)
			L = c->m->tensors[i].layer + 1;
	if ((unsigned)L < S)
		return err_set(c->e, -EINVAL, "plan: %d numbered layers do not cut into %u stages", L, S);
	c->world = world / (int)S;
	s = (unsigned)rank / (unsigned)c->world;
	c->rank = rank % c->world;
	c->layer0 = (int32_t)((uint64_t)s * (uint64_t)L / S);
	c->layer_end = (int32_t)((uint64_t)(s + 1) * (uint64_t)L / S);
	return 0;
}

/* Whether pat names tensor name's module or a module above it (Hugging
 * Face's tp_plans name modules too: "layers.*.mlp": "gather"). */
static bool names_a_module(const char *pat, const char *name)
{
	char buf[512];
	size_t n = strlen(name);
	char *dot;

	if (tensor_pattern_match(pat, name))
		return true;
	if (n >= sizeof(buf))
		return false;
	memcpy(buf, name, n + 1);
	while ((dot = strrchr(buf, '.'))) {
		*dot = 0;
		if (tensor_pattern_match(pat, buf))
			return true;
	}
	return false;
}

/* A tp_plan pattern that names no module of m, neither a tensor's nor
 * one above tensors, is a mistake (a typo in a module path gave
 * unsharded shapes with no word): refused, named. Each pattern is tried
 * on the tensors until one matches. */
static int every_pattern_matches(const json_t *tp, const struct rv_model *m, struct errinfo *e)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)tp, k, v) {
		size_t i = 0;
		while (i < m->n && !names_a_module(k, m->tensors[i].name))
			i++;
		if (i == m->n)
			return err_set(e, -EINVAL, "plan: tp_plan pattern \"%.128s\" matches no tensor or module of the "
				       "model (a pattern is a module path such as model.layers.*.self_attn.q_proj, \"*\" "
				       "one component)", k);
	}
	return 0;
}

int rv_resolve(const struct rv_model *m, const struct rv_rules *r, int rank, int world,
	       struct tp_view *views, struct errinfo *e)
{
	struct ctx c = { .m = m, .e = e, .blk = { 128, 128 } };
	int k;

	if ((k = rv_place(&c, r, rank, world)) < 0)
		return k;
	c.tp = r->tp_plan && c.world > 1 ? r->tp_plan : NULL;
	if (c.tp && !json_is_object(c.tp))
		return err_set(e, -EINVAL, "plan: \"tp_plan\" must map patterns to strategies");
	if (c.tp && (k = rv_fp8_block(m->config, c.blk, e)) < 0)
		return k;
	c.experts = config_int(m->config, "n_routed_experts");
	if (c.experts <= 0)
		c.experts = config_int(m->config, "num_local_experts");
	if (c.tp && (k = every_pattern_matches(c.tp, m, e)) < 0)
		return k;
	for (size_t i = 0; i < m->n; i++) {
		const struct rv_tensor *t = &m->tensors[i];
		const json_t *rule = c.tp ? rule_for(c.tp, t->name) : NULL;
		enum strategy st = S_REPLICATE;

		memset(&views[i], 0, sizeof(views[i]));
		views[i].rank = t->rank;
		if (rule && strategy(json_string_value(rule), &st) < 0)
			return err_set(e, -EINVAL, "plan: tensor '%s': unknown tensor-parallel strategy '%s'", t->name,
				       json_string_value(rule) ? json_string_value(rule) : "(not a string)");
		if ((k = one(&c, t, st, &views[i])) < 0)
			return k;
		if (t->layer >= 0 && (t->layer < c.layer0 || t->layer >= c.layer_end))
			views[i].present = false; /* another stage's layer */
	}
	return 0;
}

int rv_fp8_block(const json_t *config, uint64_t blk[2], struct errinfo *e)
{
	const json_t *b = json_object_get(json_object_get(config, "quantization_config"), "weight_block_size");
	json_int_t b0, b1;

	blk[0] = blk[1] = 128; /* DeepSeek-V3's, when the config says nothing */
	if (!b)
		return 0;
	if (!json_is_array(b) || json_array_size(b) != 2 || !json_is_integer(json_array_get(b, 0)) ||
	    !json_is_integer(json_array_get(b, 1)))
		goto bad;
	b0 = json_integer_value(json_array_get(b, 0));
	b1 = json_integer_value(json_array_get(b, 1));
	if (b0 < 1 || b1 < 1 || b0 > (1 << 20) || b1 > (1 << 20))
		goto bad;
	blk[0] = (uint64_t)b0;
	blk[1] = (uint64_t)b1;
	return 0;
bad:
	return err_set(e, -EINVAL, "config.json: quantization_config.weight_block_size must be two whole numbers from 1 to 2^20");
}

/* The keys a plan may have (plan.c reads the others): a key with a typo
 * is refused, not taken as no rule, which would shard nothing. */
static const char *const plan_keys[] = { "residency", "budget", "tp_plan", "stages", "share_resident",
					 "expert_cache" };

/* Letters that differ between a and b, when they are about as long: a
 * typo's distance (substitutions, one letter more or less). */
static size_t near(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), d = 0, i = 0, j = 0;

	while (i < la && j < lb && d < 3) {
		if (a[i] == b[j]) {
			i++, j++;
		} else {
			d++;
			if (la > lb) i++;
			else if (lb > la) j++;
			else i++, j++;
		}
	}
	return d + (la - i) + (lb - j);
}

static int known_keys(const json_t *root, struct errinfo *e)
{
	const char *k, *best;
	json_t *v;

	json_object_foreach((json_t *)root, k, v) {
		size_t i, bd = 99;
		for (i = 0; i < sizeof(plan_keys) / sizeof(plan_keys[0]) && strcmp(k, plan_keys[i]) != 0; i++)
			;
		if (i < sizeof(plan_keys) / sizeof(plan_keys[0]))
			continue;
		best = NULL;
		for (i = 0; i < sizeof(plan_keys) / sizeof(plan_keys[0]); i++)
			if (near(k, plan_keys[i]) < bd)
				bd = near(k, plan_keys[i]), best = plan_keys[i];
		return err_set(e, -EINVAL, "plan: unknown key \"%.64s\"%s%s%s (a plan has residency, budget, tp_plan, "
			       "stages, share_resident, expert_cache)", k, bd <= 2 ? "; did you mean \"" : "",
			       bd <= 2 ? best : "", bd <= 2 ? "\"?" : "");
	}
	return 0;
}

int rv_rules_from_plan(const json_t *root, struct rv_rules *out, struct errinfo *e)
{
	const json_t *tp = json_object_get(root, "tp_plan"), *st = json_object_get(root, "stages");
	int r;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(root))
		return err_set(e, -EINVAL, "plan: not a JSON object");
	if ((r = known_keys(root, e)) < 0)
		return r;
	if (tp && !json_is_object(tp))
		return err_set(e, -EINVAL, "plan: \"tp_plan\" must map patterns to strategies");
	if (st && (!json_is_integer(st) || json_integer_value(st) < 1 ||
		   json_integer_value(st) > RV_MAX_STAGES))
		return err_set(e, -EINVAL, "plan: \"stages\" is a whole number from 1 to %u", RV_MAX_STAGES);
	out->tp_plan = tp;
	out->stages = st ? (unsigned)json_integer_value(st) : 1;
	return 0;
}
