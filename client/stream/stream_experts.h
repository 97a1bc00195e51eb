// SPDX-License-Identifier: MIT
/* stream_experts.h - a stream's expert cache: the routed experts a plan
 * marks "experts_on_demand", each one expert of one layer, copied into a
 * pool of device slots when acquired and evicted least recently used. */
#ifndef WSRV_STREAM_EXPERTS_H
#define WSRV_STREAM_EXPERTS_H

#include <stdbool.h>
#include <stdint.h>

#include "wsrv.h"

struct wsrv_stream;

/* One expert of one layer. Its tensors are xp_cache.tidx[first, first+nt)
 * (ascending, arena order), at toff[] in its slot. */
struct xp_expert {
	uint32_t id;                /* N of ".experts.N." */
	uint32_t layer;             /* index into xp_cache.layers */
	uint32_t first, nt;
	uint64_t bytes;             /* what a copy of it moves */
	bool contiguous;            /* one run in the arena: one copy */
	int32_t slot;               /* -1: not in the pool */
};

struct xp_layer {
	int32_t index;              /* the model's layer number */
	uint32_t first, n;          /* its experts: ex[first, first+n), by id */
	struct wsrv_expert_stats st;
};

struct xp_slot {
	void *mem;                  /* pool + k * slot_size */
	int32_t expert;             /* index into ex; -1: free */
	int64_t fence;              /* the copy that filled it */
	uint64_t used;              /* LRU tick of its last acquire (or prefetch) */
	bool held, pinned;
	bool prefetched;            /* filled by a prefetch, not acquired since */
};

struct xp_cache {
	struct xp_expert *ex;
	uint32_t nex;
	uint32_t *tidx;             /* every expert's tensors */
	uint64_t *toff;             /* each one's offset in the slot */
	uint32_t *of_tensor;        /* per tensor: its expert, or UINT32_MAX */
	struct xp_layer *layers;
	uint32_t nlayers;
	struct xp_slot *slots;
	uint32_t nslots;
	uint64_t slot_size;
	void *pool;                 /* nslots * slot_size device bytes */
	uint64_t tick;
	int64_t *seg_fence;         /* per segment: the last copy queued from it */
	int32_t last_layer;         /* the last acquired, for passes */
	struct wsrv_expert_stats st;
};

/* Builds the experts of the tensors placed WHERE_EXPERT (each must name
 * ".experts.N." in a numbered layer) and sizes the pool from the plan.
 * s->xp stays NULL when there are none. */
int xp_build(struct wsrv_stream *s, const struct wsrv_plan *p);
/* The pool's device bytes (0 without experts), for placement budgets. */
uint64_t xp_device_bytes(const struct wsrv_stream *s);
/* Allocates the pool on the stream's device. */
int xp_alloc(struct wsrv_stream *s);
/* Tensor i's device address while its expert is held. */
int xp_tensor_addr(struct wsrv_stream *s, uint32_t i, void **dev);
/* The last copy queued into the expert cache (0: none): wait for it
 * before the host memory any copy reads from goes. */
int64_t xp_last_fence(const struct wsrv_stream *s);
/* The last expert copy queued from segment g (0: none): wait for it before
 * g's host memory goes. */
int64_t xp_seg_fence(const struct wsrv_stream *s, uint32_t g);


/* Frees the pool (after the stream's copies are done) and the index. */
void xp_free(struct wsrv_stream *s);

/* Picks a slot for expert e: a free one, else the least recently used
 * that is neither held, pinned nor marked in skip (by slot); -1 if none. */
int xp_victim(struct xp_cache *x, const bool *skip);
/* Queues copies of experts list[0..n) (ascending in the arena) into their
 * slots, one copy per run adjacent in both the arena and the pool. The
 * last fence, or <0 when nothing could be queued. */
int64_t xp_copy(struct wsrv_stream *s, const uint32_t *list, size_t n, uint64_t *copies);

#endif
