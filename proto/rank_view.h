// SPDX-License-Identifier: MIT
/* rank_view.h - what rank r of a world of W sees of each tensor under a
 * plan's "tp_plan" and "stages": one rule set, shared by libwsrv (a
 * worker's views, streams) and wsrvd (what a partial load holds), so the
 * two can never disagree.
 *
 * Pipeline stages: "stages": S cuts the numbered layers into S contiguous
 * runs (stage s holds layers [s*L/S, (s+1)*L/S) of L), and the world into
 * S groups of T = W/S consecutive ranks; rank r is in stage r / T, where it
 * is tensor-parallel rank r % T of T. The global group (embeddings, final
 * norm, head) is in every stage. Without "stages", T = W.
 *
 * Tensor parallelism, in the vocabulary of Hugging Face tp_plans and
 * mistral.rs's parallel layers: colwise splits dim 0 of the [out, in]
 * weight (and of its bias); rowwise splits dim 1 (a bias is kept whole);
 * replicate; experts: expert E of N belongs to rank E / (N / T), other ranks
 * do not see it; kv_heads: the K/V projection split by heads, and when T
 * exceeds the KV heads rank r gets head r / (T / n_kv), heads replicated
 * (mistral.rs compute_kv_shard). FP8 block scales (weight_scale_inv) are
 * split with their weight, in the blocks config.json states
 * (quantization_config.weight_block_size, else 128x128). */
#ifndef WSRV_RANK_VIEW_H
#define WSRV_RANK_VIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errinfo.h"
#include "manifest.h"

#define RV_MAX_STAGES 1024u

/* A tensor as the rules read it. Pointers are the caller's. */
struct rv_tensor {
	const char *name;
	uint32_t dtype, rank;
	const uint64_t *shape;
	uint64_t size;
	int32_t layer;              /* -1: the global group */
};

struct rv_model {
	const struct rv_tensor *tensors;
	size_t n;
	const json_t *config;       /* config.json, or NULL */
	long (*find)(const void *ctx, const char *name); /* index, or -1 */
	const void *ctx;
};

struct rv_rules {
	const json_t *tp_plan;      /* pattern -> strategy; NULL: every tensor whole */
	unsigned stages;            /* 0 or 1: one stage */
};

/* What a rank sees of one tensor: one 2-D copy (height rows of width bytes,
 * pitch apart) from the tensor's bytes. */
struct tp_view {
	bool present;               /* false: another rank's expert or stage */
	uint32_t rank;
	uint64_t shape[MF_MAX_RANK];
	uint64_t src_off;           /* first byte, from the tensor's start */
	uint64_t width, height, pitch;
	uint64_t bytes;             /* width * height, packed on the device */
};

/* The plan's "tp_plan" and "stages" (root: the plan's JSON object; the
 * rules point into it). -EINVAL with a sentence when either is malformed. */
int rv_rules_from_plan(const json_t *root, struct rv_rules *out, struct errinfo *e);

/* Resolves every tensor of m for rank of world under r into views
 * (m->n entries). Returns 0, or -EINVAL naming the tensor, dimension and
 * world when a shape does not divide, a strategy is unknown, or the world
 * does not cut into the stages. */
int rv_resolve(const struct rv_model *m, const struct rv_rules *r, int rank, int world,
	       struct tp_view *views, struct errinfo *e);

/* The FP8 block size config.json states (128x128 when it says nothing). */
int rv_fp8_block(const json_t *config, uint64_t blk[2], struct errinfo *e);
/* Is sc the F32 [ceil(rows/b0), ceil(cols/b1)] block scale of w? */
int rv_fp8_scale_check(const struct rv_tensor *w, const struct rv_tensor *sc, const uint64_t blk[2],
		       struct errinfo *e);

#endif
