// SPDX-License-Identifier: MIT
/* stream_experts_api.c - experts on demand: acquire (hits free, misses
 * copied), release, prefetch, pin, and the counters. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stream_experts.h"
#include "sorted.h"
#include "stream_internal.h"

#define MAX_ASK (1u << 20)          /* ids in one call */

enum mode { HOLD, PIN, PREFETCH };

static int layer_cmp(const void *key, const void *elem)
{
	return sorted_cmp_i32(*(const int32_t *)key, ((const struct xp_layer *)elem)->index);
}

static int expert_cmp(const void *key, const void *elem)
{
	return sorted_cmp_u64(*(const uint32_t *)key, ((const struct xp_expert *)elem)->id);
}

static struct xp_layer *find_layer(struct xp_cache *x, int32_t index)
{
	long i = sorted_index(&index, x->layers, x->nlayers, sizeof(*x->layers), layer_cmp);

	return i < 0 ? NULL : &x->layers[i];
}

/* The expert of layer L with id, or -1. */
static long find_expert(const struct xp_cache *x, const struct xp_layer *L, uint32_t id)
{
	long i = sorted_index(&id, x->ex + L->first, L->n, sizeof(*x->ex), expert_cmp);

	return i < 0 ? -1 : (long)L->first + i;
}

static int layer_of(struct wsrv_stream *s, int32_t layer, struct xp_layer **out)
{
	if (!s->xp)
		return cl_err(-ENOENT, "this stream's plan has no experts_on_demand rule");
	if (!(*out = find_layer(s->xp, layer)))
		return cl_err(-ENOENT, "layer %d has no experts on demand", layer);
	return 0;
}

/* ids as the layer's experts, duplicates dropped, into want (n entries
 * room); the count, or a negative errno. */
static long resolve(struct wsrv_stream *s, const struct xp_layer *L, const uint32_t *ids, size_t n,
		    uint32_t *want)
{
	struct xp_cache *x = s->xp;
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		long e = find_expert(x, L, ids[i]);
		bool dup = false;
		if (e < 0)
			return cl_err(-ENOENT, "layer %d has no expert %u%s", L->index, ids[i],
				      s->world > 1 ? " on this rank (another rank's, or none)" : "");
		for (size_t j = 0; j < k && !dup; j++)
			dup = want[j] == (uint32_t)e;
		if (!dup)
			want[k++] = (uint32_t)e;
	}
	return (long)k;
}

/* One call's experts: the layer, the ids resolved (want[0..n)), and
 * scratch for the misses and the slots not to evict. */
struct ask {
	struct xp_layer *L;
	uint32_t *want, *miss;
	bool *skip;
	size_t n;
};

static void ask_free(struct ask *a)
{
	free(a->want);
	free(a->miss);
	free(a->skip);
}

/* Checks a call's arguments and resolves its ids into a (ask_free after,
 * whatever it returns). */
static int ask_begin(struct wsrv_stream *s, int32_t layer, const uint32_t *ids, size_t n, struct ask *a)
{
	long k;
	int r;

	memset(a, 0, sizeof(*a));
	if (n)
		CL_NEED(ids);
	if ((r = layer_of(s, layer, &a->L)) < 0)
		return r;
	if (!s->d)
		return cl_err(-ENODEV, "this stream was opened without a device (a report)");
	if (n > MAX_ASK)
		return cl_err(-E2BIG, "at most %u experts in one call", MAX_ASK);
	a->want = calloc(n + 1, sizeof(*a->want));
	a->miss = calloc(n + 1, sizeof(*a->miss));
	a->skip = calloc(s->xp->nslots, sizeof(*a->skip));
	if (!a->want || !a->miss || !a->skip)
		return cl_err(-ENOMEM, "out of memory");
	if ((k = resolve(s, a->L, ids, n, a->want)) < 0)
		return (int)k;
	a->n = (size_t)k;
	return 0;
}

static int by_arena(const void *a, const void *b, void *arg)
{
	const struct wsrv_stream *s = arg;
	const struct xp_expert *x = &s->xp->ex[*(const uint32_t *)a], *y = &s->xp->ex[*(const uint32_t *)b];
	uint32_t ta = s->xp->tidx[x->first], tb = s->xp->tidx[y->first];

	return ta < tb ? -1 : ta > tb;
}

/* Whether expert e's bytes are here: 1, 0 (not yet, !wait) or <0. */
static int need_expert(struct wsrv_stream *s, uint32_t e, bool wait)
{
	const struct xp_expert *ex = &s->xp->ex[e];
	int r = 1;

	for (uint32_t k = 0; k < ex->nt && r == 1; k++)
		r = stream_need_tensor(s, s->xp->tidx[ex->first + k], wait);
	return r;
}

/* The tensors of experts e[0..n) taken together (stream_need_pieces). */
static int need_experts(struct wsrv_stream *s, const uint32_t *e, size_t n)
{
	size_t k = 0, all = 0;
	uint32_t *idx;
	int r;

	for (size_t i = 0; i < n; i++)
		all += s->xp->ex[e[i]].nt;
	if (!all)
		return 0;
	if (!(idx = calloc(all, sizeof(*idx))))
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		for (uint32_t t = 0; t < s->xp->ex[e[i]].nt; t++)
			idx[k++] = s->xp->tidx[s->xp->ex[e[i]].first + t];
	r = stream_need_pieces(s, idx, k, true);
	free(idx);
	return r;
}

static void xp_count(struct wsrv_stream *s, struct xp_layer *L, size_t off, uint64_t v)
{
	*(uint64_t *)((uint8_t *)&s->xp->st + off) += v;
	*(uint64_t *)((uint8_t *)&L->st + off) += v;
}
#define COUNT(s, L, field, v) xp_count((s), (L), offsetof(struct wsrv_expert_stats, field), (v))

/* The piece expert e's bytes lie in (attached.h: its segment, or a disk
 * tier's unit, which is the expert; an expert never spans two segments:
 * a layer never does). */
static uint32_t seg_of(const struct wsrv_stream *s, uint32_t e)
{
	return cl_piece(s->m, s->xp->tidx[s->xp->ex[e].first]);
}

/* Records f as the last copy of experts miss[0..n) (their segments'). */
static void xp_seg_copied(struct wsrv_stream *s, const uint32_t *miss, size_t n, int64_t f)
{
	for (size_t i = 0; i < n && f > 0; i++)
		s->xp->seg_fence[seg_of(s, miss[i])] = f;
}

/* A disk tier's segments layer L's experts come from, let go when no
 * slotted layer streams from them (their copies landed first). */
static int xp_drop_layer(struct wsrv_stream *s, const struct xp_layer *L)
{
	uint32_t *p = calloc(L->n + 1, sizeof(*p)), last = UINT32_MAX;
	size_t k = 0;
	int r;

	if (!p)
		return cl_err(-ENOMEM, "out of memory");
	for (uint32_t e = L->first; e < L->first + L->n; e++)
		if (seg_of(s, e) != last && stream_piece_unused(s, last = seg_of(s, e)))
			p[k++] = last;
	r = stream_drop_pieces(s, p, k, 0);
	free(p);
	return r;
}

/* Puts the experts of miss[0..n) (sorted in the arena) in slots and queues
 * their copies. On failure they are out of the pool again. */
static int fill(struct wsrv_stream *s, struct xp_layer *L, uint32_t *miss, size_t n, bool *skip,
		bool prefetch)
{
	struct xp_cache *x = s->xp;
	uint64_t copies = 0, bytes = 0;
	int64_t f;

	for (size_t i = 0; i < n; i++) {
		int k = xp_victim(x, skip);
		struct xp_slot *sl = &x->slots[k];
		if (sl->expert >= 0) {
			x->ex[sl->expert].slot = -1;
			COUNT(s, L, evictions, 1);
		}
		*sl = (struct xp_slot){ .mem = sl->mem, .expert = (int32_t)miss[i], .fence = sl->fence,
					.used = ++x->tick, .prefetched = prefetch };
		x->ex[miss[i]].slot = k;
		skip[k] = true;
		bytes += x->ex[miss[i]].bytes;
	}
	f = xp_copy(s, miss, n, &copies);
	xp_seg_copied(s, miss, n, f);
	COUNT(s, L, copies, copies);
	if (f < 0) {
		for (size_t i = 0; i < n; i++) {
			x->slots[x->ex[miss[i]].slot].expert = -1;
			x->ex[miss[i]].slot = -1;
		}
		return cl_wrap((int)f, "layer %d: the experts' copies could not be queued", L->index);
	}
	COUNT(s, L, bytes_copied, bytes);
	return 0;
}

/* Slots neither held, pinned nor in skip. */
static uint32_t free_to_take(const struct xp_cache *x, const bool *skip)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < x->nslots; k++)
		n += !x->slots[k].held && !x->slots[k].pinned && !skip[k];
	return n;
}

/* How many of want[0..n) are not pinned yet. */
static size_t pins_new(const struct xp_cache *x, const uint32_t *want, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += x->ex[want[i]].slot < 0 || !x->slots[x->ex[want[i]].slot].pinned;
	return k;
}

/* Makes want[0..n) resident (HOLD, PIN) and waits for them; the rest of
 * acquire. miss and skip are scratch. */
static int make_resident(struct wsrv_stream *s, struct xp_layer *L, const uint32_t *want, size_t n,
			 uint32_t *miss, bool *skip, enum mode mode)
{
	struct xp_cache *x = s->xp;
	size_t nm = 0;
	int64_t fence = 0;
	double t0 = mono_now();
	int r;

	for (size_t i = 0; i < n; i++)
		if (x->ex[want[i]].slot >= 0)
			skip[x->ex[want[i]].slot] = true;
		else
			miss[nm++] = want[i];
	if (nm > free_to_take(x, skip))
		return cl_err(-ENOSPC, "layer %d: %zu experts to copy, but only %u of the cache's %u slots are neither held nor pinned",
			      L->index, nm, free_to_take(x, skip), x->nslots);
	if (mode == PIN && x->st.slots_pinned + pins_new(x, want, n) >= x->nslots)
		return cl_err(-ENOSPC, "pinning %zu more experts would leave none of the cache's %u slots to stream through",
			      pins_new(x, want, n), x->nslots);
	/* A disk tier's experts in one request, read side by side. */
	if ((r = need_experts(s, miss, nm)) < 0)
		return cl_wrap(r, "layer %d: its experts", L->index);
	for (size_t i = 0; i < nm; i++)
		if ((r = need_expert(s, miss[i], true)) < 0)
			return cl_wrap(r, "layer %d, expert %u", L->index, x->ex[miss[i]].id);
	qsort_r(miss, nm, sizeof(*miss), by_arena, s);
	if (nm && (r = fill(s, L, miss, nm, skip, false)) < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		if (x->slots[x->ex[want[i]].slot].fence > fence)
			fence = x->slots[x->ex[want[i]].slot].fence;
	if (fence > 0 && !s->d->ops->done(s->d, fence) && (r = stream_wait_fence(s, fence, L->index)) < 0) {
		for (size_t i = 0; i < nm; i++) { /* what they hold is not to be trusted */
			x->slots[x->ex[miss[i]].slot].expert = -1;
			x->ex[miss[i]].slot = -1;
		}
		return cl_wrap(r, "layer %d: the experts' copies failed", L->index);
	}
	COUNT(s, L, misses, nm);
	COUNT(s, L, hits, n - nm);
	for (size_t i = 0; i < n; i++) {
		struct xp_slot *sl = &x->slots[x->ex[want[i]].slot];
		if (sl->prefetched)
			COUNT(s, L, prefetch_hits, 1);
		sl->prefetched = false;
		sl->used = ++x->tick;
		if (mode == HOLD)
			sl->held = true;
		else if (!sl->pinned) {
			sl->pinned = true;
			x->st.slots_pinned++;
		}
	}
	x->st.wait_seconds += mono_now() - t0;
	L->st.wait_seconds += mono_now() - t0;
	return 0;
}

/* The common path of acquire and pin. */
static int acquire(struct wsrv_stream *s, int32_t layer, const uint32_t *ids, size_t n, void **dev,
		   enum mode mode)
{
	struct ask a;
	int r;

	CL_NEED(s);
	if ((r = ask_begin(s, layer, ids, n, &a)) == 0 &&
	    (r = make_resident(s, a.L, a.want, a.n, a.miss, a.skip, mode)) == 0 && mode == HOLD) {
		COUNT(s, a.L, acquires, (uint64_t)a.n);
		if (s->xp->last_layer < 0 || layer <= s->xp->last_layer)
			s->xp->st.passes++;
		s->xp->last_layer = layer;
		for (size_t i = 0; dev && i < n; i++)
			dev[i] = s->xp->slots[s->xp->ex[find_expert(s->xp, a.L, ids[i])].slot].mem;
	}
	ask_free(&a);
	return r;
}

WSRV_EXPORT int wsrv_stream_acquire_experts(struct wsrv_stream *s, int32_t layer, const uint32_t *ids,
					    size_t n, void **dev)
{
	return acquire(s, layer, ids, n, dev, HOLD);
}

WSRV_EXPORT int wsrv_stream_release_experts(struct wsrv_stream *s, int32_t layer)
{
	struct xp_layer *L;
	int r;

	CL_NEED(s);
	if ((r = layer_of(s, layer, &L)) < 0)
		return r;
	for (uint32_t e = L->first; e < L->first + L->n; e++)
		if (s->xp->ex[e].slot >= 0)
			s->xp->slots[s->xp->ex[e].slot].held = false;
	if (s->d && s->d->ops->consumed)
		s->d->ops->consumed(s->d);
	/* A disk tier's segment the experts came from goes, unless a
	 * slotted layer streams from it. */
	return xp_drop_layer(s, L);
}

WSRV_EXPORT int wsrv_stream_prefetch_experts(struct wsrv_stream *s, int32_t layer, const uint32_t *ids,
					     size_t n)
{
	struct xp_cache *x;
	struct ask a;
	size_t nm = 0;
	int r;

	CL_NEED(s);
	if ((r = ask_begin(s, layer, ids, n, &a)) < 0) {
		ask_free(&a);
		return r;
	}
	x = s->xp;
	for (size_t i = 0; i < a.n; i++)
		if (x->ex[a.want[i]].slot >= 0)
			a.skip[x->ex[a.want[i]].slot] = true;
	/* As many as there are slots to take and bytes loaded, in order. */
	for (size_t i = 0; i < a.n; i++) {
		if (x->ex[a.want[i]].slot >= 0)
			continue;
		if (nm >= free_to_take(x, a.skip) || need_expert(s, a.want[i], false) != 1)
			break;
		a.miss[nm++] = a.want[i];
	}
	qsort_r(a.miss, nm, sizeof(*a.miss), by_arena, s);
	if (nm && (r = fill(s, a.L, a.miss, nm, a.skip, true)) == 0)
		COUNT(s, a.L, prefetches, nm);
	ask_free(&a);
	return r;
}

WSRV_EXPORT int wsrv_stream_pin_experts(struct wsrv_stream *s, int32_t layer, const uint32_t *ids,
					size_t n, int pin)
{
	struct xp_layer *L;
	int r;

	if (pin)
		return acquire(s, layer, ids, n, NULL, PIN);
	CL_NEED(s);
	if ((r = layer_of(s, layer, &L)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		long e = find_expert(s->xp, L, ids[i]);
		struct xp_slot *sl;
		if (e < 0 || s->xp->ex[e].slot < 0)
			continue;
		sl = &s->xp->slots[s->xp->ex[e].slot];
		if (sl->pinned)
			s->xp->st.slots_pinned--;
		sl->pinned = false;
	}
	return 0;
}

WSRV_EXPORT int wsrv_stream_expert_stats(struct wsrv_stream *s, int32_t layer, struct wsrv_expert_stats *out)
{
	struct xp_layer *L = NULL;
	int r;

	CL_NEED(s);
	CL_NEED(out);
	if (layer != WSRV_LAYER_ALL && (r = layer_of(s, layer, &L)) < 0)
		return r;
	if (!s->xp)
		return cl_err(-ENOENT, "this stream's plan has no experts_on_demand rule");
	*out = L ? L->st : s->xp->st;
	out->struct_size = sizeof(*out);
	out->slots = s->xp->nslots;
	out->slot_bytes = s->xp->slot_size;
	out->slots_pinned = s->xp->st.slots_pinned;
	out->experts = L ? L->n : s->xp->nex;
	out->slots_used = 0;
	for (uint32_t k = 0; k < s->xp->nslots; k++)
		out->slots_used += s->xp->slots[k].expert >= 0 &&
				   (!L || s->xp->ex[s->xp->slots[k].expert].layer == (uint32_t)(L - s->xp->layers));
	if (L)
		out->passes = s->xp->st.passes;
	return 0;
}

WSRV_EXPORT int wsrv_stream_experts_resident(const struct wsrv_stream *s, int32_t layer, uint32_t *ids,
					     size_t cap, size_t *n)
{
	struct xp_layer *L;
	size_t k = 0;
	int r;

	CL_NEED(s);
	CL_NEED(n);
	if (cap)
		CL_NEED(ids);
	if ((r = layer_of((struct wsrv_stream *)s, layer, &L)) < 0)
		return r;
	for (uint32_t e = L->first; e < L->first + L->n; e++)
		if (s->xp->ex[e].slot >= 0) {
			if (k < cap)
				ids[k] = s->xp->ex[e].id;
			k++;
		}
	*n = k;
	return 0;
}
