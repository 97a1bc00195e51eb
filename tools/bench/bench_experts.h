// SPDX-License-Identifier: MIT
/* bench_experts.h - a MoE worker's steps over a routing trace, shared by
 * `wsrv-bench experts` (bench_experts.c) and `wsrv-bench tier --moe`
 * (bench_tier_moe.c). */
#ifndef WSRV_BENCH_EXPERTS_H
#define WSRV_BENCH_EXPERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#include "wsrv.h"

enum xp_mode { ON_DEMAND, LAYERS, RESIDENT };

struct xp_cfg {
	double bandwidth, cache;
	unsigned topk, steps, warm;
	bool prefetch;              /* the next layer's, with the last step's routing */
	void (*mark)(void *arg);    /* when set, called as the timed steps begin */
	void *mark_arg;
};

/* The model's MoE layers and their experts' tensors. */
struct moe {
	struct wsrv_model *m;
	size_t nl;                  /* MoE layers */
	int32_t *layer;             /* their indexes */
	uint32_t experts;           /* per layer */
	uint32_t **tens;            /* [l * experts + e]: tensor indexes */
	uint32_t *ntens;
};

/* A run's figures. */
struct xp_result {
	double seconds;             /* the timed steps */
	uint64_t bytes;             /* every byte the stream copied in them */
	uint64_t hits, misses, prefetches, prefetch_hits;
	XXH64_hash_t logits;
};

/* The MoE layers of m and their experts' tensors into x: 0, -EINVAL (no
 * routed experts) or -ENOMEM; moe_free either way. */
int moe_index(struct wsrv_model *m, struct moe *x);
void moe_free(struct moe *x);

/* c->warm steps, then c->steps timed ones, of batch tokens routed by a
 * Zipf trace of exponent zipf (0: uniform; seeded, the same every run), on
 * a stream in mode md over a host device: the timed steps' figures and
 * "logits" into out. 0 or -1 (said on stderr). */
int experts_run(const struct moe *x, const struct xp_cfg *c, enum xp_mode md, double zipf, unsigned batch,
		struct xp_result *out);

#endif
