// SPDX-License-Identifier: MIT
/* test_mkmodel.c - the synthetic models: deterministic, independent of the
 * sharding, with the real architectures' names, shapes, dtypes and config. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "mkmodel.h"
#include "model.h"

static struct fixture F = { .tag = "mkmodel" };

static uint8_t *tensor_bytes(const struct model *m, const char *name, uint64_t *size)
{
	const struct model_tensor *t = model_find(m, name);
	uint8_t *b;
	int fd;

	assert_non_null(t);
	b = malloc(t->size + 1);
	fd = open(m->files[t->file]->path, O_RDONLY | O_CLOEXEC);
	assert_int_equal(pread(fd, b, t->size, (off_t)t->file_off), (ssize_t)t->size);
	close(fd);
	*size = t->size;
	return b;
}

static void deterministic_and_shard_independent(void **s)
{
	char *a = test_tmpdir("mk-a"), *b = test_tmpdir("mk-b"), *c = test_tmpdir("mk-c");
	struct model *ma, *mb, *mc;
	struct errinfo e;
	size_t la, lb;

	assert_int_equal(make_model(a, "llama-mini", 8 << 20, 2, 1, 5), 0);
	assert_int_equal(make_model(b, "llama-mini", 8 << 20, 2, 1, 5), 0);
	assert_int_equal(make_model(c, "llama-mini", 8 << 20, 2, 4, 5), 0);
	uint8_t *fa = read_file(pjoin(a, "model.safetensors"), &la);
	uint8_t *fb = read_file(pjoin(b, "model.safetensors"), &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(fa, fb, la);
	free(fa);
	free(fb);
	assert_int_equal(model_open("a", a, NULL, &ma, &e), 0);
	assert_int_equal(model_open("c", c, NULL, &mc, &e), 0);
	assert_int_equal(mc->nfiles, 4);
	assert_int_equal(ma->ntensors, mc->ntensors);
	for (size_t i = 0; i < ma->ntensors; i++) {
		uint64_t sa, sc;
		uint8_t *x = tensor_bytes(ma, ma->tensors[i].name, &sa);
		uint8_t *y = tensor_bytes(mc, ma->tensors[i].name, &sc);
		assert_int_equal(sa, sc);
		assert_memory_equal(x, y, sa);
		free(x);
		free(y);
	}
	/* Another seed gives other bytes. */
	assert_int_equal(make_model(b, "llama-mini", 8 << 20, 2, 1, 6), 0);
	assert_int_equal(model_open("b", b, NULL, &mb, &e), 0);
	uint64_t s1, s2;
	uint8_t *x = tensor_bytes(ma, "model.layers.0.mlp.up_proj.weight", &s1);
	uint8_t *y = tensor_bytes(mb, "model.layers.0.mlp.up_proj.weight", &s2);
	assert_true(memcmp(x, y, s1) != 0);
	free(x);
	free(y);
	model_free(ma);
	model_free(mb);
	model_free(mc);
	rm_rf(a); rm_rf(b); rm_rf(c);
	free(a); free(b); free(c);
}

static json_int_t cfg(const struct model *m, const char *key)
{
	json_t *v = json_object_get(m->config, key);

	if (!json_is_integer(v))
		fail_msg("config.json has no integer %s", key);
	return json_integer_value(v);
}

/* transformers' get_text_config takes a config key named decoder,
 * generator, text_config or text_encoder as a sub-config: a plain string
 * there made LlamaForCausalLM(config) fail on the GPU machine's
 * transformers 5 ('str' object has no attribute 'to_dict'). */
static void no_subconfig_keys(const struct model *m)
{
	static const char *const keys[] = { "decoder", "generator", "text_config", "text_encoder" };

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (json_object_get(m->config, keys[i]))
			fail_msg("config.json has \"%s\", which transformers reads as a sub-config", keys[i]);
}

static void llama_structure(void **s)
{
	char *d = test_tmpdir("mk-llama");
	struct model *m;
	struct errinfo e;

	assert_int_equal(make_model(d, "llama-mini", 64 << 20, 0, 2, 1), 0);
	assert_int_equal(model_open("m", d, NULL, &m, &e), 0);
	json_int_t h = cfg(m, "hidden_size"), heads = cfg(m, "num_attention_heads");
	json_int_t kv = cfg(m, "num_key_value_heads"), hd = cfg(m, "head_dim");
	assert_true(kv < heads);
	assert_int_equal(heads * hd, h);
	assert_int_equal(h % 128, 0);
	assert_int_equal(heads % 8, 0);
	assert_int_equal(cfg(m, "intermediate_size") % 128, 0);
	assert_int_equal(cfg(m, "vocab_size") % 128, 0);
	const struct model_tensor *k = model_find(m, "model.layers.0.self_attn.k_proj.weight");
	assert_non_null(k);
	assert_int_equal(k->shape[0], kv * hd);
	assert_int_equal(k->dtype, DT_BF16);
	assert_non_null(model_find(m, "model.embed_tokens.weight"));
	assert_non_null(model_find(m, "lm_head.weight"));
	assert_non_null(model_find(m, "model.norm.weight"));
	assert_int_equal(cfg(m, "num_hidden_layers"), (json_int_t)m->nlayers - 1);
	assert_true(m->data_bytes <= (64 << 20));
	assert_true(m->data_bytes > (16 << 20));
	no_subconfig_keys(m);
	model_free(m);
	rm_rf(d);
	free(d);
}

static void dsv3_structure(void **s)
{
	static const char *const attn[] = {
		"q_a_proj.weight", "q_a_proj.weight_scale_inv", "q_a_layernorm.weight",
		"q_b_proj.weight", "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight",
		"kv_b_proj.weight", "o_proj.weight", "o_proj.weight_scale_inv",
	};
	char *d = test_tmpdir("mk-dsv3");
	struct model *m;
	struct errinfo e;
	char n[160];

	assert_int_equal(make_model(d, "deepseek-v3-mini", 128 << 20, 3, 3, 1), 0);
	assert_int_equal(model_open("m", d, NULL, &m, &e), 0);
	json_int_t experts = cfg(m, "n_routed_experts");
	assert_int_equal(experts % 8, 0);
	assert_int_equal(cfg(m, "first_k_dense_replace"), 1);
	assert_int_equal(cfg(m, "hidden_size") % 128, 0);
	assert_int_equal(cfg(m, "num_attention_heads") % 8, 0);
	assert_non_null(json_object_get(m->config, "quantization_config"));
	for (int l = 0; l < 3; l++)
		for (size_t i = 0; i < sizeof(attn) / sizeof(attn[0]); i++) {
			snprintf(n, sizeof(n), "model.layers.%d.self_attn.%s", l, attn[i]);
			assert_non_null(model_find(m, n));
		}
	/* Layer 0 is dense; the others are MoE with a gate and shared experts. */
	assert_non_null(model_find(m, "model.layers.0.mlp.gate_proj.weight"));
	assert_null(model_find(m, "model.layers.0.mlp.experts.0.up_proj.weight"));
	assert_non_null(model_find(m, "model.layers.1.mlp.gate.weight"));
	assert_non_null(model_find(m, "model.layers.1.mlp.gate.e_score_correction_bias"));
	assert_non_null(model_find(m, "model.layers.2.mlp.shared_experts.down_proj.weight"));
	snprintf(n, sizeof(n), "model.layers.2.mlp.experts.%lld.down_proj.weight", (long long)experts - 1);
	const struct model_tensor *w = model_find(m, n);
	assert_non_null(w);
	assert_int_equal(w->dtype, DT_F8_E4M3);
	strcat(n, "_scale_inv");
	const struct model_tensor *sc = model_find(m, n);
	assert_non_null(sc);
	assert_int_equal(sc->dtype, DT_F32);
	assert_int_equal(sc->shape[0], (w->shape[0] + 127) / 128);
	assert_int_equal(sc->shape[1], (w->shape[1] + 127) / 128);
	/* The real checkpoint's kv_a_proj_with_mqa: kv_lora_rank + rope dims. */
	const struct model_tensor *kva = model_find(m, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
	assert_int_equal(kva->shape[0], cfg(m, "kv_lora_rank") + cfg(m, "qk_rope_head_dim"));
	assert_non_null(model_find(m, "lm_head.weight"));
	assert_true(m->data_bytes <= (128 << 20));
	no_subconfig_keys(m);
	model_free(m);
	rm_rf(d);
	free(d);
}

/* deepseek-v3-shape: the checkpoint's counts (91,991 tensors; layer 61
 * for multi-token prediction), the first 3 layers dense, and widths that
 * split at world 8 in whole 128-row scale blocks. The spec alone: no
 * 5.69 GiB written. */
static void dsv3_checkpoint_shape(void **s)
{
	struct mk_moe moe = { 0 };
	struct mk_spec sp;
	struct errinfo e;
	bool dense2 = false, moe3 = false, mtp = false;

	assert_int_equal(mk_preset_moe("deepseek-v3-shape", 1, 0, &moe, &sp, &e), 0);
	assert_int_equal(sp.n, 91991);
	assert_int_equal(json_integer_value(json_object_get(sp.config, "first_k_dense_replace")), 3);
	assert_int_equal(json_integer_value(json_object_get(sp.config, "num_nextn_predict_layers")), 1);
	assert_int_equal(json_integer_value(json_object_get(sp.config, "num_hidden_layers")), 61);
	assert_int_equal(json_integer_value(json_object_get(sp.config, "n_routed_experts")), 256);
	assert_int_equal(json_integer_value(json_object_get(sp.config, "moe_intermediate_size")) / 8 % 128, 0);
	assert_int_equal(json_integer_value(json_object_get(sp.config, "intermediate_size")) / 8 % 128, 0);
	for (size_t i = 0; i < sp.n; i++) {
		dense2 |= !strcmp(sp.t[i].name, "model.layers.2.mlp.gate_proj.weight");
		moe3 |= !strcmp(sp.t[i].name, "model.layers.3.mlp.experts.255.down_proj.weight_scale_inv");
		mtp |= !strcmp(sp.t[i].name, "model.layers.61.shared_head.head.weight");
	}
	assert_true(dense2 && moe3 && mtp);
	mk_spec_free(&sp);
}

static void scales_with_size(void **s)
{
	struct mk_spec a, b;
	struct errinfo e;

	assert_int_equal(mk_preset("llama-mini", 64 << 20, 0, &a, &e), 0);
	assert_int_equal(mk_preset("llama-mini", 1ULL << 30, 0, &b, &e), 0);
	assert_true(a.bytes <= (64 << 20));
	assert_true(b.bytes <= (1ULL << 30) && b.bytes > (256ULL << 20));
	mk_spec_free(&a);
	mk_spec_free(&b);
	assert_int_equal(mk_preset("gpt-9", 1 << 20, 0, &a, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "unknown preset"));
}

/* Issue 13, item 13: a rerun into an existing directory left the old index
 * beside the new files; a model that cannot fit left a truncated file. */
static void rerun_replaces_and_no_space_refused(void **s)
{
	char *dir = test_tmpdir("mk-rerun"), out[4096];
	struct mk_spec spec;
	struct model *m;
	struct errinfo e;
	struct stat st;

	snprintf(out, sizeof(out), "%s/model", dir);
	assert_int_equal(mk_preset("tiny", 2 << 20, 2, &spec, &e), 0);
	assert_int_equal(mk_write(&spec, out, 3, 1, &e), 0);
	assert_int_equal(stat(pjoin(out, "model.safetensors.index.json"), &st), 0);
	assert_int_equal(mk_write(&spec, out, 1, 1, &e), 0);
	assert_int_equal(stat(pjoin(out, "model.safetensors.index.json"), &st), -1);
	assert_int_equal(model_open("m", out, NULL, &m, &e), 0);
	assert_int_equal(m->nfiles, 1);
	model_free(m);
	mk_spec_free(&spec);
	assert_int_equal(mk_preset("tiny", 1ULL << 50, 0, &spec, &e), 0);
	assert_int_equal(mk_write(&spec, out, 1, 1, &e), -ENOSPC);
	assert_non_null(strstr(e.msg, "MiB free"));
	assert_int_equal(model_open("m", out, NULL, &m, &e), 0); /* untouched */
	model_free(m);
	mk_spec_free(&spec);
	/* Issue 48 item 14: a file it did not write is never deleted; the
	 * directory is refused, saying which file. */
	assert_int_equal(mk_preset("tiny", 2 << 20, 2, &spec, &e), 0);
	assert_int_equal(st_write(pjoin(out, "notes.txt"), "{}", 0, NULL) < 0, 0);
	assert_int_equal(mk_write(&spec, out, 1, 1, &e), -ENOTEMPTY);
	assert_non_null(strstr(e.msg, "notes.txt"));
	assert_int_equal(stat(pjoin(out, "notes.txt"), &st), 0);
	mk_spec_free(&spec);
	rm_rf(dir);
	free(dir);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(deterministic_and_shard_independent),
	cmocka_unit_test(llama_structure),
	cmocka_unit_test(dsv3_structure),
	cmocka_unit_test(dsv3_checkpoint_shape),
	cmocka_unit_test(scales_with_size),
	cmocka_unit_test(rerun_replaces_and_no_space_refused),
)
