// SPDX-License-Identifier: MIT
/* mkmodel_presets.c - the architectures: Llama (tiny, llama-mini) and
 * DeepSeek-V3 (MLA attention, dense first layers, MoE layers with routed and
 * shared experts, FP8 E4M3 weights with 128x128 block scales): at widths
 * that fit a size (deepseek-v3-mini), or as the checkpoint is laid out
 * (deepseek-v3-shape: its counts at a small width). */
#include "mkmodel.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t r128(uint64_t v) { return (v + 127) / 128 * 128; }
static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint64_t mk_tensor_bytes(const struct mk_tensor *t)
{
	uint64_t n = 1;

	for (uint32_t i = 0; i < t->rank; i++)
		n *= t->shape[i];
	return n * dtype_bits(t->dtype) / 8;
}

static int add(struct mk_spec *s, enum dtype dt, enum mk_fill fill, uint64_t d0,
	       uint64_t d1, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Adds a tensor of shape [d0] (d1 == 0) or [d0, d1]. */
static int add(struct mk_spec *s, enum dtype dt, enum mk_fill fill, uint64_t d0,
	       uint64_t d1, const char *fmt, ...)
{
	struct mk_tensor *t;
	va_list ap;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		t = realloc(s->t, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		s->t = t;
		s->cap = cap;
	}
	t = &s->t[s->n++];
	memset(t, 0, sizeof(*t));
	va_start(ap, fmt);
	vsnprintf(t->name, sizeof(t->name), fmt, ap);
	va_end(ap);
	t->dtype = dt;
	t->fill = fill;
	t->rank = d1 ? 2 : 1;
	t->shape[0] = d0;
	t->shape[1] = d1;
	s->bytes += mk_tensor_bytes(t);
	return 0;
}

/* An FP8 linear weight [out, in] and its block scales, as DeepSeek-V3 has. */
static int add_fp8(struct mk_spec *s, uint64_t out, uint64_t in, const char *name)
{
	int r = add(s, DT_F8_E4M3, MK_WEIGHT, out, in, "%s.weight", name);
	if (r == 0)
		r = add(s, DT_F32, MK_SCALE, cdiv(out, 128), cdiv(in, 128),
			"%s.weight_scale_inv", name);
	return r;
}

struct llama_dims {
	uint64_t h, heads, kv, hd, inter, vocab, layers;
};

static void llama_dims(uint64_t h, uint64_t layers, uint64_t vocab, struct llama_dims *d)
{
	d->h = h;
	d->hd = h >= 1024 ? 128 : h / 8;
	d->heads = h / d->hd;
	d->kv = 2;
	while (d->kv * 2 <= d->heads / 4 && d->heads % (d->kv * 2) == 0)
		d->kv *= 2;
	d->inter = r128(h * 11 / 4);
	d->vocab = vocab ? vocab : (8 * h > 4096 ? 8 * h : 4096);
	d->layers = layers;
}

static int llama_tensors(struct mk_spec *s, const struct llama_dims *d)
{
	uint64_t h = d->h, q = d->heads * d->hd, kv = d->kv * d->hd;
	int r = add(s, DT_BF16, MK_WEIGHT, d->vocab, h, "model.embed_tokens.weight");

	for (uint64_t l = 0; r == 0 && l < d->layers; l++) {
		const char *p = "model.layers";
		r |= add(s, DT_BF16, MK_NORM, h, 0, "%s.%lu.input_layernorm.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, q, h, "%s.%lu.self_attn.q_proj.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, kv, h, "%s.%lu.self_attn.k_proj.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, kv, h, "%s.%lu.self_attn.v_proj.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, h, q, "%s.%lu.self_attn.o_proj.weight", p, l);
		r |= add(s, DT_BF16, MK_NORM, h, 0, "%s.%lu.post_attention_layernorm.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, d->inter, h, "%s.%lu.mlp.gate_proj.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, d->inter, h, "%s.%lu.mlp.up_proj.weight", p, l);
		r |= add(s, DT_BF16, MK_WEIGHT, h, d->inter, "%s.%lu.mlp.down_proj.weight", p, l);
	}
	r |= add(s, DT_BF16, MK_NORM, h, 0, "model.norm.weight");
	r |= add(s, DT_BF16, MK_WEIGHT, d->vocab, h, "lm_head.weight");
	return r ? -ENOMEM : 0;
}

static json_t *llama_config(const struct llama_dims *d)
{
	return json_pack("{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:s, s:b, s:s, s:s}",
		"architectures", "LlamaForCausalLM", "model_type", "llama",
		"hidden_size", (json_int_t)d->h, "intermediate_size", (json_int_t)d->inter,
		"num_attention_heads", (json_int_t)d->heads,
		"num_key_value_heads", (json_int_t)d->kv, "head_dim", (json_int_t)d->hd,
		"num_hidden_layers", (json_int_t)d->layers, "vocab_size", (json_int_t)d->vocab,
		"max_position_embeddings", (json_int_t)4096, "rms_norm_eps", 1e-5,
		"rope_theta", 500000.0, "hidden_act", "silu", "tie_word_embeddings", 0,
		"torch_dtype", "bfloat16", "wsrv_generated_by", "wsrv-mkmodel");
}

struct dsv3_dims {
	uint64_t h, heads, q_lora, kv_lora, nope, rope, vh, inter, moe_inter;
	uint64_t routed, shared, topk, vocab, layers;
	uint64_t dense, mtp;         /* first_k_dense_replace, num_nextn_predict_layers */
};

static void dsv3_dims(uint64_t h, uint64_t layers, const struct mk_moe *moe, struct dsv3_dims *d)
{
	d->h = h;
	d->heads = h >= 2048 ? h / 128 / 8 * 8 : 8;
	d->q_lora = r128(h * 3 / 14);
	d->kv_lora = r128(h / 14);
	d->nope = 128;
	d->rope = 64;
	d->vh = 128;
	d->inter = r128(h * 18 / 7);
	d->moe_inter = r128(h * 2 / 7);
	d->routed = moe->experts ? moe->experts : 16;
	d->shared = 1;
	d->topk = moe->topk ? moe->topk : 4;
	d->vocab = 8 * h;
	d->layers = layers;
	d->dense = 1;
	d->mtp = 0;
}

/* DeepSeek-V3's checkpoint as laid out: 61 layers, the first 3 dense, 256
 * routed experts of which 8 a token, and layer 61 for multi-token
 * prediction (91,991 tensors), at a width that splits at world 8 as the
 * real one does under Hugging Face's tp_plan: the experts' intermediate
 * size (1024, 2048 in the real one) and the dense layers' (9216; 18432)
 * in whole 128x128 scale blocks a rank, 16 heads (2 a rank). */
static void dsv3_shape_dims(uint64_t layers, const struct mk_moe *moe, struct dsv3_dims *d)
{
	*d = (struct dsv3_dims){ .h = 128, .heads = 16, .q_lora = 384, .kv_lora = 128, .nope = 128,
				 .rope = 64, .vh = 128, .inter = 9216, .moe_inter = 1024,
				 .routed = moe->experts ? moe->experts : 256, .shared = 1,
				 .topk = moe->topk ? moe->topk : 8, .vocab = 1024,
				 .layers = layers ? layers : 61, .dense = 3, .mtp = 1 };
}

static int dsv3_attn(struct mk_spec *s, const struct dsv3_dims *d, uint64_t l)
{
	char p[64];
	int r = 0;

	snprintf(p, sizeof(p), "model.layers.%lu", l);
	r |= add(s, DT_BF16, MK_NORM, d->h, 0, "%s.input_layernorm.weight", p);
	r |= add(s, DT_BF16, MK_NORM, d->h, 0, "%s.post_attention_layernorm.weight", p);
	snprintf(p, sizeof(p), "model.layers.%lu.self_attn", l);
	char n[96];
	snprintf(n, sizeof(n), "%s.q_a_proj", p);
	r |= add_fp8(s, d->q_lora, d->h, n);
	r |= add(s, DT_BF16, MK_NORM, d->q_lora, 0, "%s.q_a_layernorm.weight", p);
	snprintf(n, sizeof(n), "%s.q_b_proj", p);
	r |= add_fp8(s, d->heads * (d->nope + d->rope), d->q_lora, n);
	snprintf(n, sizeof(n), "%s.kv_a_proj_with_mqa", p);
	r |= add_fp8(s, d->kv_lora + d->rope, d->h, n);
	r |= add(s, DT_BF16, MK_NORM, d->kv_lora, 0, "%s.kv_a_layernorm.weight", p);
	snprintf(n, sizeof(n), "%s.kv_b_proj", p);
	r |= add_fp8(s, d->heads * (d->nope + d->vh), d->kv_lora, n);
	snprintf(n, sizeof(n), "%s.o_proj", p);
	r |= add_fp8(s, d->h, d->heads * d->vh, n);
	return r;
}

static int dsv3_ffn(struct mk_spec *s, const char *p, uint64_t h, uint64_t inter)
{
	char n[128];
	int r = 0;

	snprintf(n, sizeof(n), "%s.gate_proj", p);
	r |= add_fp8(s, inter, h, n);
	snprintf(n, sizeof(n), "%s.up_proj", p);
	r |= add_fp8(s, inter, h, n);
	snprintf(n, sizeof(n), "%s.down_proj", p);
	r |= add_fp8(s, h, inter, n);
	return r;
}

static int dsv3_mlp(struct mk_spec *s, const struct dsv3_dims *d, uint64_t l)
{
	char p[96];
	int r = 0;

	if (l < d->dense) {
		snprintf(p, sizeof(p), "model.layers.%lu.mlp", l);
		return dsv3_ffn(s, p, d->h, d->inter);
	}
	r |= add(s, DT_BF16, MK_WEIGHT, d->routed, d->h, "model.layers.%lu.mlp.gate.weight", l);
	r |= add(s, DT_F32, MK_BIAS, d->routed, 0, "model.layers.%lu.mlp.gate.e_score_correction_bias", l);
	for (uint64_t x = 0; x < d->routed; x++) {
		snprintf(p, sizeof(p), "model.layers.%lu.mlp.experts.%lu", l, x);
		r |= dsv3_ffn(s, p, d->h, d->moe_inter);
	}
	snprintf(p, sizeof(p), "model.layers.%lu.mlp.shared_experts", l);
	r |= dsv3_ffn(s, p, d->h, d->moe_inter * d->shared);
	return r;
}

/* A multi-token prediction layer's own tensors, besides a decoder layer's
 * (the checkpoint numbers it after the last layer). */
static int dsv3_mtp(struct mk_spec *s, const struct dsv3_dims *d, uint64_t l)
{
	int r = add(s, DT_BF16, MK_WEIGHT, d->vocab, d->h, "model.layers.%lu.embed_tokens.weight", l);

	r |= add(s, DT_BF16, MK_NORM, d->h, 0, "model.layers.%lu.enorm.weight", l);
	r |= add(s, DT_BF16, MK_NORM, d->h, 0, "model.layers.%lu.hnorm.weight", l);
	r |= add(s, DT_BF16, MK_WEIGHT, d->h, 2 * d->h, "model.layers.%lu.eh_proj.weight", l);
	r |= add(s, DT_BF16, MK_NORM, d->h, 0, "model.layers.%lu.shared_head.norm.weight", l);
	r |= add(s, DT_BF16, MK_WEIGHT, d->vocab, d->h, "model.layers.%lu.shared_head.head.weight", l);
	return r;
}

static int dsv3_tensors(struct mk_spec *s, const struct dsv3_dims *d)
{
	int r = add(s, DT_BF16, MK_WEIGHT, d->vocab, d->h, "model.embed_tokens.weight");

	for (uint64_t l = 0; r == 0 && l < d->layers + d->mtp; l++)
		r = dsv3_attn(s, d, l) | dsv3_mlp(s, d, l) | (l >= d->layers ? dsv3_mtp(s, d, l) : 0);
	r |= add(s, DT_BF16, MK_NORM, d->h, 0, "model.norm.weight");
	r |= add(s, DT_BF16, MK_WEIGHT, d->vocab, d->h, "lm_head.weight");
	return r ? -ENOMEM : 0;
}

static json_t *dsv3_config(const struct dsv3_dims *d)
{
	json_t *c = json_pack("{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
		"architectures", "DeepseekV3ForCausalLM", "model_type", "deepseek_v3",
		"hidden_size", (json_int_t)d->h, "intermediate_size", (json_int_t)d->inter,
		"moe_intermediate_size", (json_int_t)d->moe_inter,
		"num_attention_heads", (json_int_t)d->heads,
		"num_key_value_heads", (json_int_t)d->heads,
		"q_lora_rank", (json_int_t)d->q_lora, "kv_lora_rank", (json_int_t)d->kv_lora,
		"qk_nope_head_dim", (json_int_t)d->nope, "qk_rope_head_dim", (json_int_t)d->rope,
		"v_head_dim", (json_int_t)d->vh,
		"num_hidden_layers", (json_int_t)d->layers);
	json_t *more = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:s, s:s, s:o, s:s}",
		"n_routed_experts", (json_int_t)d->routed, "n_shared_experts", (json_int_t)d->shared,
		"num_experts_per_tok", (json_int_t)d->topk, "first_k_dense_replace", (json_int_t)d->dense,
		"moe_layer_freq", (json_int_t)1, "num_nextn_predict_layers", (json_int_t)d->mtp,
		"vocab_size", (json_int_t)d->vocab,
		"n_group", (json_int_t)1, "routed_scaling_factor", 2.5,
		"scoring_func", "sigmoid", "torch_dtype", "bfloat16",
		"quantization_config", json_pack("{s:s, s:s, s:s, s:[i,i]}", "quant_method", "fp8",
			"fmt", "e4m3", "activation_scheme", "dynamic", "weight_block_size", 128, 128),
		"wsrv_generated_by", "wsrv-mkmodel");

	if (!c || !more || json_object_update(c, more) < 0) {
		json_decref(c);
		c = NULL;
	}
	json_decref(more);
	return c;
}

/* Builds the spec for hidden size h; returns its bytes or 0 on failure. */
static uint64_t build(const char *preset, uint64_t h, unsigned layers, const struct mk_moe *moe,
		      struct mk_spec *s)
{
	memset(s, 0, sizeof(*s));
	if (strncmp(preset, "deepseek-v3-", 12) == 0) {
		struct dsv3_dims d;
		if (strcmp(preset, "deepseek-v3-shape") == 0)
			dsv3_shape_dims(layers, moe, &d);
		else
			dsv3_dims(h, layers ? layers : 4, moe, &d);
		if (dsv3_tensors(s, &d) == 0)
			s->config = dsv3_config(&d);
	} else {
		struct llama_dims d;
		bool tiny = strcmp(preset, "tiny") == 0;
		llama_dims(h, layers ? layers : (tiny ? 4 : 8), tiny ? 1024 : 0, &d);
		if (llama_tensors(s, &d) == 0)
			s->config = llama_config(&d);
	}
	if (!s->config) {
		mk_spec_free(s);
		return 0;
	}
	return s->bytes;
}

/* Hidden sizes tried, smallest first: every one gives head counts that
 * divide by 8 and dimensions that divide by 128. */
static uint64_t ladder(const char *preset, unsigned i)
{
	if (strcmp(preset, "deepseek-v3-mini") == 0)
		return 512 * (uint64_t)(i + 1);
	if (i < 3)
		return 128ULL << i;
	return 1024 * (uint64_t)(i - 2);
}

/* Grows *best (of the smallest width that fits, or the smallest there is)
 * to the most layers of its width, at most 4096, that fit size. Bytes grow
 * with layers, so a binary search: a dozen builds, not one per layer (a
 * preset of 2^50 bytes built all 4096 one after another, 26x slower still
 * under ASan). 0, or -ENOMEM with *best freed. */
static int fill_layers(const char *preset, uint64_t size, const struct mk_moe *moe,
		       struct mk_spec *best)
{
	unsigned lo = (unsigned)json_integer_value(json_object_get(best->config, "num_hidden_layers"));
	uint64_t h = (uint64_t)json_integer_value(json_object_get(best->config, "hidden_size"));
	unsigned hi = 4096;
	struct mk_spec cur;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo + 1) / 2;
		uint64_t b = build(preset, h, mid, moe, &cur);

		if (!b) {
			mk_spec_free(best);
			return -ENOMEM;
		}
		if (b > size) {
			mk_spec_free(&cur);
			hi = mid - 1;
			continue;
		}
		mk_spec_free(best);
		*best = cur;
		lo = mid;
	}
	return 0;
}

int mk_preset(const char *preset, uint64_t size, unsigned layers,
	      struct mk_spec *spec, struct errinfo *e)
{
	static const struct mk_moe none = { 0 };

	return mk_preset_moe(preset, size, layers, &none, spec, e);
}

int mk_preset_moe(const char *preset, uint64_t size, unsigned layers, const struct mk_moe *moe,
		  struct mk_spec *spec, struct errinfo *e)
{
	struct mk_spec best = { 0 }, cur;

	if (strcmp(preset, "tiny") && strcmp(preset, "llama-mini") &&
	    strcmp(preset, "deepseek-v3-mini") && strcmp(preset, "deepseek-v3-shape"))
		return err_set(e, -EINVAL, "unknown preset '%s' (tiny, llama-mini, deepseek-v3-mini, "
			       "deepseek-v3-shape)", preset);
	if (layers > 4096)
		return err_set(e, -EINVAL, "at most 4096 layers");
	if (moe->experts > 1024 || moe->topk > 64 || (moe->experts && moe->topk > moe->experts) ||
	    (!moe->experts && moe->topk > 16))
		return err_set(e, -EINVAL, "experts: 1 to 1024 routed experts, top-k at most 64 and at most the experts");
	if ((moe->experts || moe->topk) && strncmp(preset, "deepseek-v3-", 12))
		return err_set(e, -EINVAL, "--experts and --topk are for the deepseek-v3 presets");
	if (strcmp(preset, "deepseek-v3-shape") == 0) /* one width: size does not choose */
		return build(preset, 0, layers, moe, spec) ? 0 : err_set(e, -ENOMEM, "out of memory");
	for (unsigned i = 0; i < 64; i++) {
		uint64_t b = build(preset, ladder(preset, i), layers, moe, &cur);
		if (!b) {
			mk_spec_free(&best);
			return err_set(e, -ENOMEM, "out of memory");
		}
		/* The smallest configuration is kept even when it exceeds size. */
		if (i > 0 && b > size) {
			mk_spec_free(&cur);
			break;
		}
		mk_spec_free(&best);
		best = cur;
	}
	/* Without --layers, more layers of that width fill the rest of size. */
	if (layers == 0 && fill_layers(preset, size, moe, &best) < 0)
		return err_set(e, -ENOMEM, "out of memory");
	*spec = best;
	return 0;
}

void mk_spec_free(struct mk_spec *spec)
{
	free(spec->t);
	json_decref(spec->config);
	memset(spec, 0, sizeof(*spec));
}
