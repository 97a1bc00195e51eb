// SPDX-License-Identifier: MIT
/* bench_routing.h - routing traces for `wsrv-bench experts`: which
 * experts each token of a batch uses in each MoE layer, uniform or
 * Zipf-skewed (each layer with its own order of popularity), seeded. */
#ifndef WSRV_BENCH_ROUTING_H
#define WSRV_BENCH_ROUTING_H

#include <stddef.h>
#include <stdint.h>

struct routing {
	uint32_t experts, topk;
	double *cdf;                /* over popularity ranks; NULL: uniform */
	uint32_t *perm;             /* per layer: rank -> expert id */
	size_t layers;
	uint64_t rng;
};

/* zipf_s 0: uniform. 1 to 4096 experts. 0, -EINVAL or -ENOMEM. */
int routing_init(struct routing *r, size_t layers, uint32_t experts, uint32_t topk, double zipf_s,
		 uint64_t seed);
/* The union of the experts batch tokens use in layer l (its position among
 * the MoE layers), ascending, into ids (room for experts); their count. */
size_t routing_step(struct routing *r, size_t l, unsigned batch, uint32_t *ids);
void routing_free(struct routing *r);

#endif
