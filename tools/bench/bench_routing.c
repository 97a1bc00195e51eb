// SPDX-License-Identifier: MIT
/* bench_routing.c - seeded routing traces: each token draws top-k distinct
 * experts, uniformly or with P(rank r) proportional to 1 / r^s. */
#include "bench_routing.h"
#include "sorted.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s) /* splitmix64 */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
	return (double)(next(s) >> 11) / (double)(1ULL << 53);
}

int routing_init(struct routing *r, size_t layers, uint32_t experts, uint32_t topk, double zipf_s,
		 uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	if (experts == 0 || experts > 4096 || topk == 0)
		return -EINVAL;
	r->experts = experts;
	r->topk = topk < experts ? topk : experts;
	r->layers = layers;
	r->rng = seed;
	if (!(r->perm = calloc(layers * experts + 1, sizeof(*r->perm))))
		return -ENOMEM;
	for (size_t l = 0; l < layers; l++) {
		uint32_t *p = &r->perm[l * experts];
		for (uint32_t i = 0; i < experts; i++)
			p[i] = i;
		for (uint32_t i = experts - 1; i > 0; i--) { /* Fisher-Yates */
			uint32_t j = (uint32_t)(next(&r->rng) % (i + 1)), t = p[i];
			p[i] = p[j];
			p[j] = t;
		}
	}
	if (zipf_s <= 0)
		return 0;
	if (!(r->cdf = calloc(experts, sizeof(*r->cdf)))) {
		routing_free(r);
		return -ENOMEM;
	}
	double sum = 0;
	for (uint32_t i = 0; i < experts; i++)
		r->cdf[i] = (sum += 1.0 / pow(i + 1, zipf_s));
	for (uint32_t i = 0; i < experts; i++)
		r->cdf[i] /= sum;
	return 0;
}

static bool cdf_below(const void *key, const void *elem)
{
	return *(const double *)elem < *(const double *)key;
}

static uint32_t draw(struct routing *r)
{
	double u = unit(&r->rng);

	if (!r->cdf)
		return (uint32_t)(next(&r->rng) % r->experts);
	/* the first expert whose cdf reaches u (the last one otherwise) */
	return (uint32_t)sorted_first(&u, r->cdf, r->experts - 1, sizeof(*r->cdf), cdf_below);
}

size_t routing_step(struct routing *r, size_t l, unsigned batch, uint32_t *ids)
{
	bool used[4096] = { false };
	size_t n = 0;

	for (unsigned b = 0; b < batch; b++) {
		bool mine[4096] = { false };
		for (uint32_t k = 0; k < r->topk;) {
			uint32_t rank = draw(r);
			if (mine[rank])
				continue;
			mine[rank] = true;
			used[r->perm[l * r->experts + rank]] = true;
			k++;
		}
	}
	for (uint32_t e = 0; e < r->experts; e++)
		if (used[e])
			ids[n++] = e;
	return n;
}

void routing_free(struct routing *r)
{
	free(r->cdf);
	free(r->perm);
	r->cdf = NULL;
	r->perm = NULL;
}
