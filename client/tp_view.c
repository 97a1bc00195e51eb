// SPDX-License-Identifier: MIT
/* tp_view.c - tensor-parallel views, in the vocabulary of Hugging Face
 * tp_plans and mistral.rs's parallel layers.
 *
 * colwise: split dim 0 of the [out, in] weight (and of its bias); rowwise:
 * split dim 1 (a bias is kept whole); replicate; experts: expert E of N
 * belongs to rank E / (N / W), other ranks do not see it; kv_heads: split
 * the K/V projection by heads, and when W exceeds the KV heads rank r gets
 * head r / (W / n_kv), heads replicated (mistral.rs compute_kv_shard). FP8
 * block scales (weight_scale_inv) are split with their weight, in the
 * blocks config.json states (quantization_config.weight_block_size, else
 * 128x128). */
#include "tp_view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "plan.h"

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
	char mod[512];
	const char *k;
	json_t *v;

	plan_module_path(name, mod, sizeof(mod));
	json_object_foreach((json_t *)tp, k, v) {
		if (plan_glob(k, mod) || (strncmp(mod, "model.", 6) == 0 && plan_glob(k, mod + 6)))
			return v;
	}
	return NULL;
}

static long config_int(const struct wsrv_model *m, const char *key)
{
	size_t len;
	const char *cfg = wsrv_model_config(m, &len);
	json_t *j = cfg ? json_loadb(cfg, len, 0, NULL) : NULL;
	long v = j && json_is_integer(json_object_get(j, key)) ? (long)json_integer_value(json_object_get(j, key)) : -1;

	json_decref(j);
	return v;
}

static void whole(const struct wsrv_tensor *t, struct tp_view *v)
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

static int no_divide(const struct wsrv_tensor *t, int dim, uint64_t n, int world, const char *why)
{
	return cl_err(-EINVAL, "tensor '%s': dimension %d (%llu%s) does not divide by world %d",
		      t->name, dim, (unsigned long long)n, why, world);
}

/* Rows [r0, r0 + n) of dim 0: one contiguous run. */
static void rows(const struct wsrv_tensor *t, uint64_t r0, uint64_t n, struct tp_view *v)
{
	uint64_t row = t->shape[0] ? t->size / t->shape[0] : 0;

	whole(t, v);
	v->shape[0] = n;
	v->src_off = r0 * row;
	v->width = v->pitch = v->bytes = n * row;
}

/* Columns [c0, c0 + n) of dim 1 of a 2-D tensor: a strided copy. */
static void cols(const struct wsrv_tensor *t, uint64_t c0, uint64_t n, struct tp_view *v)
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

static int split(const struct wsrv_tensor *t, int dim, int rank, int world, struct tp_view *v)
{
	uint64_t n = t->shape[dim];

	if (t->rank <= (uint32_t)dim) /* a 1-D bias under rowwise stays whole */
		return whole(t, v), 0;
	if (dtype_bits((enum dtype)t->dtype) % 8)
		return cl_err(-EINVAL, "tensor '%s': %s elements are not whole bytes and cannot be split",
			      t->name, dtype_name((enum dtype)t->dtype));
	if (n % (uint64_t)world)
		return no_divide(t, dim, n, world, is_scale(t->name) ? " scale blocks" : "");
	if (dim == 0)
		rows(t, n / (uint64_t)world * (uint64_t)rank, n / (uint64_t)world, v);
	else if (t->rank == 2)
		cols(t, n / (uint64_t)world * (uint64_t)rank, n / (uint64_t)world, v);
	else
		return cl_err(-EINVAL, "tensor '%s': rowwise needs a 2-D tensor, not rank %u", t->name, t->rank);
	return 0;
}

/* A scale must fit its weight, and the weight split in whole blocks. */
static int check_blocks(const struct wsrv_model *m, const struct wsrv_tensor *t, int dim, int world,
			const uint64_t blk[2])
{
	char w[600], why[96];
	struct wsrv_tensor wt;
	size_t n = strlen(t->name);
	int r;

	if (!is_scale(t->name))
		return 0;
	snprintf(w, sizeof(w), "%.*s.weight", (int)(n - 17), t->name);
	if (wsrv_model_find(m, w, &wt) < 0)
		return 0;
	if ((r = cl_fp8_scale_check(&wt, t, blk)) < 0)
		return r;
	snprintf(why, sizeof(why), ": its %llux%llu scale blocks would be cut",
		 (unsigned long long)blk[0], (unsigned long long)blk[1]);
	if (wt.shape[dim] % ((uint64_t)world * blk[dim]))
		return no_divide(&wt, dim, wt.shape[dim], world, why);
	return 0;
}

static int expert_of(const char *name)
{
	const char *p = strstr(name, ".experts.");
	return p ? atoi(p + 9) : -1;
}

static int kv_heads(const struct wsrv_model *m, const struct wsrv_tensor *t, int rank, int world,
		    struct tp_view *v)
{
	long nkv = config_int(m, "num_key_value_heads");
	uint64_t hd, h0, nh;

	if (nkv <= 0 || t->shape[0] % (uint64_t)nkv)
		return cl_err(-EINVAL, "tensor '%s': kv_heads needs num_key_value_heads in config.json dividing dimension 0 (%llu)",
			      t->name, (unsigned long long)t->shape[0]);
	hd = t->shape[0] / (uint64_t)nkv;
	if (world <= nkv) {
		if (nkv % world)
			return no_divide(t, 0, (uint64_t)nkv, world, " KV heads");
		nh = (uint64_t)(nkv / world);
		h0 = (uint64_t)rank * nh;
	} else {
		if (world % nkv)
			return cl_err(-EINVAL, "tensor '%s': world %d is not a multiple of its %ld KV heads",
				      t->name, world, nkv);
		nh = 1;
		h0 = (uint64_t)(rank / (world / nkv));
	}
	rows(t, h0 * hd, nh * hd, v);
	return 0;
}

static int one(const struct wsrv_model *m, const struct wsrv_tensor *t, enum strategy st, int rank,
	       int world, long experts, const uint64_t blk[2], struct tp_view *v)
{
	int r;

	switch (st) {
	case S_REPLICATE: whole(t, v); return 0;
	case S_COLWISE:
		if ((r = check_blocks(m, t, 0, world, blk)) < 0)
			return r;
		return split(t, 0, rank, world, v);
	case S_ROWWISE:
		if ((r = check_blocks(m, t, 1, world, blk)) < 0)
			return r;
		return split(t, 1, rank, world, v);
	case S_EXPERTS: {
		int e = expert_of(t->name);
		if (e < 0) {
			whole(t, v); /* a router or shared expert: everyone's */
			return 0;
		}
		if (experts <= 0 || experts % world)
			return cl_err(-EINVAL, "tensor '%s': %ld experts do not divide by world %d", t->name,
				      experts, world);
		whole(t, v);
		v->present = e / (experts / world) == rank;
		return 0;
	}
	case S_KV_HEADS: return kv_heads(m, t, rank, world, v);
	}
	return -EINVAL;
}

int tp_resolve(const struct wsrv_model *m, const json_t *tp, int rank, int world, struct tp_view *views)
{
	long experts = config_int(m, "n_routed_experts");
	uint64_t blk[2] = { 128, 128 };
	int r;

	/* Without tensor parallelism the rank only serves layer_shard. */
	if (world > 1 && (rank < 0 || rank >= world))
		return cl_err(-EINVAL, "tensor parallelism: rank %d is not in a world of %d", rank, world);
	if (tp && world > 1 && (r = wsrv_model_fp8_block(m, blk)) < 0)
		return r;
	if (tp && !json_is_object(tp))
		return cl_err(-EINVAL, "plan: \"tp_plan\" must map patterns to strategies");
	if (experts <= 0)
		experts = config_int(m, "num_local_experts");
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		const json_t *rule;
		enum strategy st = S_REPLICATE;

		wsrv_model_tensor(m, i, &t);
		memset(&views[i], 0, sizeof(views[i]));
		views[i].rank = t.rank;
		rule = tp && world > 1 ? rule_for(tp, t.name) : NULL;
		if (rule && strategy(json_string_value(rule), &st) < 0)
			return cl_err(-EINVAL, "plan: tensor '%s': unknown tensor-parallel strategy '%s'", t.name,
				      json_string_value(rule) ? json_string_value(rule) : "(not a string)");
		if ((r = one(m, &t, st, rank, world, experts, blk, &views[i])) < 0)
			return r;
	}
	return 0;
}
