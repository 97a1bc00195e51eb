// SPDX-License-Identifier: MIT
/* mkmodel.h - deterministic synthetic Hugging Face model directories, with
 * the real architectures' tensor names, shapes, dtypes and config keys. */
#ifndef WSRV_MKMODEL_H
#define WSRV_MKMODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "errinfo.h"

enum mk_fill { MK_WEIGHT, MK_NORM, MK_SCALE, MK_BIAS };

struct mk_tensor {
	char name[128];
	enum dtype dtype;
	uint32_t rank;
	uint64_t shape[4];
	enum mk_fill fill;
};

struct mk_spec {
	struct mk_tensor *t;
	size_t n, cap;
	json_t *config;         /* config.json, owned */
	uint64_t bytes;
};

/* Builds the tensor list and config of preset ("tiny", "llama-mini",
 * "deepseek-v3-mini") scaled to at most about `size` bytes; layers = 0 takes
 * the preset's default. On success *spec is filled (mk_spec_free). */
int mk_preset(const char *preset, uint64_t size, unsigned layers,
	      struct mk_spec *spec, struct errinfo *e);
/* The same with a mixture of experts' shape (deepseek-v3-mini only):
 * routed experts per MoE layer and the experts each token uses; 0 takes
 * the preset's (16 and 4). */
struct mk_moe {
	unsigned experts, topk;
};
int mk_preset_moe(const char *preset, uint64_t size, unsigned layers, const struct mk_moe *moe,
		  struct mk_spec *spec, struct errinfo *e);
void mk_spec_free(struct mk_spec *spec);

/* Writes spec into dir (created if missing) as `shards` shard files (one:
 * model.safetensors; more: model-0000K-of-0000N.safetensors plus
 * model.safetensors.index.json) and config.json. Tensor bytes depend only on
 * (seed, tensor name), never on the sharding. */
int mk_write(const struct mk_spec *spec, const char *dir, unsigned shards,
	     uint64_t seed, struct errinfo *e);

/* Sets config.json's rope_scaling from arg: a JSON object, taken as it is,
 * or TYPE:FACTOR (linear, dynamic, llama3; llama3 as Llama 3.1 has it, low
 * and high frequency factors 1 and 4, the preset's max_position_embeddings
 * as the original and that times FACTOR as the new one). 0 or -EINVAL. */
int mk_config_rope(struct mk_spec *spec, const char *arg, struct errinfo *e);

/* Sets config.json's hidden_act to name. 0 or -ENOMEM. */
int mk_config_act(struct mk_spec *spec, const char *name, struct errinfo *e);

/* Bytes of one tensor. */
uint64_t mk_tensor_bytes(const struct mk_tensor *t);

#endif
