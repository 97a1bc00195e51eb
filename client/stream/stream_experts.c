// SPDX-License-Identifier: MIT
/* stream_experts.c - the expert cache's index and pool: which tensors make
 * each expert, where they sit in a slot, the slots on the device, the LRU
 * choice of a victim and the batched copies. The calls that use it are in
 * stream_experts_api.c. */
#include "stream_experts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stream_internal.h"

#define ALIGN 256ULL

struct member {
	int32_t layer;
	uint32_t id, tensor;
};

static int by_layer_id(const void *a, const void *b)
{
	const struct member *x = a, *y = b;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

/* N of ".experts.N." in name, or -1. */
static long expert_id(const char *name)
{
	const char *p = strstr(name, ".experts.");
	char *end;
	long id;

	if (!p || p[9] < '0' || p[9] > '9')
		return -1;
	id = strtol(p + 9, &end, 10);
	return *end == '.' && id <= (long)UINT32_MAX ? id : -1;
}

/* The tensors placed WHERE_EXPERT, sorted by layer, expert and arena
 * order; *out is the caller's to free. */
static long collect_members(struct wsrv_stream *s, struct member **out)
{
	size_t n = cl_ntensors(s->m), k = 0;
	struct member *m = calloc(n + 1, sizeof(*m));

	if (!m)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t;
		long id;
		if (s->where[i] != WHERE_EXPERT)
			continue;
		cl_tensor_nowait(s->m, (uint32_t)i, &t);
		if ((id = expert_id(t.name)) < 0 || t.layer < 0) {
			free(m);
			return cl_err(-EINVAL, "plan: tensor %s is experts_on_demand but names no expert of a numbered layer (layers.L....experts.N....)",
				      t.name);
		}
		m[k++] = (struct member){ t.layer, (uint32_t)id, (uint32_t)i };
	}
	qsort(m, k, sizeof(*m), by_layer_id);
	*out = m;
	return (long)k;
}

/* Where expert e's tensors go in its slot: as they lie in the arena when
 * they are one run of whole tensors (one copy), else packed 256-aligned. */
static void lay_out(struct wsrv_stream *s, struct xp_cache *x, struct xp_expert *e)
{
	const uint32_t *ti = &x->tidx[e->first];
	struct wsrv_tensor a, b, t;
	uint64_t off = 0;

	e->contiguous = ti[e->nt - 1] - ti[0] + 1 == e->nt;
	for (uint32_t k = 0; k < e->nt && e->contiguous; k++) {
		cl_tensor_nowait(s->m, ti[k], &t);
		e->contiguous = tp_view_whole(s->views, ti[k], t.size);
	}
	cl_tensor_nowait(s->m, ti[0], &a);
	cl_tensor_nowait(s->m, ti[e->nt - 1], &b);
	if (e->contiguous && a.segment == b.segment) {
		for (uint32_t k = 0; k < e->nt; k++) {
			cl_tensor_nowait(s->m, ti[k], &t);
			x->toff[e->first + k] = t.offset - a.offset;
		}
		e->bytes = b.offset + b.size - a.offset;
		return;
	}
	e->contiguous = false;
	for (uint32_t k = 0; k < e->nt; k++) {
		off = (off + ALIGN - 1) & ~(ALIGN - 1);
		x->toff[e->first + k] = off;
		off += tp_view_bytes(s->m, s->views, ti[k]);
	}
	e->bytes = off;
}

/* Groups members into experts and layers. */
static int index_experts(struct wsrv_stream *s, struct xp_cache *x, const struct member *m, size_t k)
{
	x->ex = calloc(k + 1, sizeof(*x->ex));
	x->layers = calloc(k + 1, sizeof(*x->layers));
	x->tidx = calloc(k + 1, sizeof(*x->tidx));
	x->toff = calloc(k + 1, sizeof(*x->toff));
	if (!x->ex || !x->layers || !x->tidx || !x->toff)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < k; i++) {
		bool new_layer = i == 0 || m[i].layer != m[i - 1].layer;
		bool new_expert = new_layer || m[i].id != m[i - 1].id;
		x->tidx[i] = m[i].tensor;
		x->of_tensor[m[i].tensor] = new_expert ? x->nex : x->nex - 1;
		if (new_layer)
			x->layers[x->nlayers++] = (struct xp_layer){ .index = m[i].layer, .first = x->nex };
		if (new_expert) {
			x->ex[x->nex++] = (struct xp_expert){ .id = m[i].id, .layer = x->nlayers - 1,
							      .first = (uint32_t)i, .slot = -1 };
			x->layers[x->nlayers - 1].n++;
		}
		x->ex[x->nex - 1].nt++;
	}
	for (uint32_t e = 0; e < x->nex; e++) {
		lay_out(s, x, &x->ex[e]);
		if (x->ex[e].bytes > x->slot_size)
			x->slot_size = x->ex[e].bytes;
	}
	x->slot_size = (x->slot_size + ALIGN - 1) & ~(ALIGN - 1);
	return 0;
}

/* The pool's slots: the plan's, else two layers' worth; at least one, at
 * most one per expert. */
static uint32_t pool_slots(const struct xp_cache *x, const struct wsrv_plan *p)
{
	uint64_t n = 0, widest = 0;

	for (uint32_t l = 0; l < x->nlayers; l++)
		if (x->layers[l].n > widest)
			widest = x->layers[l].n;
	if (p && p->expert_slots)
		n = p->expert_slots;
	else if (p && p->expert_bytes)
		n = p->expert_bytes / x->slot_size;
	else if (p && p->expert_fraction > 0)
		n = (uint64_t)ceil(p->expert_fraction * x->nex);
	else
		n = 2 * widest;
	return (uint32_t)(n < 1 ? 1 : n > x->nex ? x->nex : n);
}

int xp_build(struct wsrv_stream *s, const struct wsrv_plan *p)
{
	size_t n = cl_ntensors(s->m);
	struct xp_cache *x;
	struct member *m = NULL;
	long k = collect_members(s, &m);
	int r;

	if (k <= 0) {
		free(m);
		return (int)k;
	}
	if (!(x = calloc(1, sizeof(*x))) || !(x->of_tensor = malloc((n + 1) * sizeof(uint32_t)))) {
		free(x);
		free(m);
		return cl_err(-ENOMEM, "out of memory");
	}
	s->xp = x;
	memset(x->of_tensor, 0xff, (n + 1) * sizeof(uint32_t));
	x->last_layer = -1;
	r = index_experts(s, x, m, (size_t)k);
	free(m);
	if (r < 0)
		return r;
	x->nslots = pool_slots(x, p);
	return 0;
}

uint64_t xp_device_bytes(const struct wsrv_stream *s)
{
	return s->xp ? (uint64_t)s->xp->nslots * s->xp->slot_size : 0;
}

int xp_alloc(struct wsrv_stream *s)
{
	struct xp_cache *x = s->xp;
	int r;

	if (!x)
		return 0;
	if (!(x->slots = calloc(x->nslots, sizeof(*x->slots))) ||
	    !(x->seg_fence = calloc(cl_npieces(s->m) + 1, sizeof(*x->seg_fence))))
		return cl_err(-ENOMEM, "out of memory");
	for (uint32_t k = 0; k < x->nslots; k++)
		x->slots[k].expert = -1;
	x->st.slots = x->nslots;
	x->st.slot_bytes = x->slot_size;
	x->st.experts = x->nex;
	s->st.device_bytes += xp_device_bytes(s);
	s->st.private_bytes += xp_device_bytes(s);
	if (!s->d)
		return 0;
	if ((r = s->d->ops->alloc(s->d, xp_device_bytes(s), &x->pool)) < 0)
		return cl_wrap(r, "the expert cache (%u slots of %llu bytes)", x->nslots,
			       (unsigned long long)x->slot_size);
	for (uint32_t k = 0; k < x->nslots; k++)
		x->slots[k].mem = (uint8_t *)x->pool + (uint64_t)k * x->slot_size;
	return 0;
}

int xp_tensor_addr(struct wsrv_stream *s, uint32_t i, void **dev)
{
	const struct xp_cache *x = s->xp;
	uint32_t e = x ? x->of_tensor[i] : UINT32_MAX;
	const struct xp_expert *ex;

	if (e == UINT32_MAX)
		return cl_err(-ENOENT, "tensor %u is not an expert on demand", i);
	ex = &x->ex[e];
	if (ex->slot < 0 || !x->slots[ex->slot].held)
		return cl_err(-EAGAIN, "tensor %s: expert %u of layer %d is not acquired",
			      cl_tensor_name(s->m, i), ex->id, x->layers[ex->layer].index);
	for (uint32_t k = 0; k < ex->nt; k++)
		if (x->tidx[ex->first + k] == i) {
			*dev = (uint8_t *)x->slots[ex->slot].mem + x->toff[ex->first + k];
			return 0;
		}
	return cl_err(-EIO, "tensor %u: not in its expert", i);
}

int64_t xp_last_fence(const struct wsrv_stream *s)
{
	const struct xp_cache *x = s->xp;
	int64_t last = 0;

	for (uint32_t k = 0; x && x->slots && k < x->nslots; k++)
		if (x->slots[k].fence > last)
			last = x->slots[k].fence;
	return last;
}

int64_t xp_seg_fence(const struct wsrv_stream *s, uint32_t g)
{
	return s->xp && s->xp->seg_fence ? s->xp->seg_fence[g] : 0;
}

void xp_free(struct wsrv_stream *s)
{
	struct xp_cache *x = s->xp;
	int64_t last = xp_last_fence(s);

	if (!x)
		return;
	if (s->d && x->pool) {
		if (last > 0)
			s->d->ops->wait(s->d, last); /* copies land before the memory goes */
		s->d->ops->free(s->d, x->pool, xp_device_bytes(s));
	}
	free(x->ex);
	free(x->layers);
	free(x->tidx);
	free(x->toff);
	free(x->of_tensor);
	free(x->slots);
	free(x->seg_fence);
	free(x);
	s->xp = NULL;
}

int xp_victim(struct xp_cache *x, const bool *skip)
{
	int best = -1;

	for (uint32_t k = 0; k < x->nslots; k++) {
		const struct xp_slot *sl = &x->slots[k];
		if (sl->held || sl->pinned || skip[k])
			continue;
		if (sl->expert < 0)
			return (int)k;
		if (best < 0 || sl->used < x->slots[best].used)
			best = (int)k;
	}
	return best;
}

/* Expert b follows a in both the arena and the pool: one copy takes both. */
static bool adjacent(struct wsrv_stream *s, const struct xp_expert *a, const struct xp_expert *b)
{
	const struct xp_cache *x = s->xp;
	struct wsrv_tensor ta, tb;

	if (!a->contiguous || !b->contiguous || b->slot != a->slot + 1)
		return false;
	cl_tensor_nowait(s->m, x->tidx[a->first], &ta);
	cl_tensor_nowait(s->m, x->tidx[b->first], &tb);
	/* One piece: a copy never spans two of a disk tier's units. */
	return cl_piece(s->m, x->tidx[a->first]) == cl_piece(s->m, x->tidx[b->first]) &&
	       ta.segment == tb.segment && tb.offset == ta.offset + x->slot_size;
}

/* One expert's tensors, each its own (strided) copy. */
static int64_t copy_packed(struct wsrv_stream *s, const struct xp_expert *e, uint8_t *dst)
{
	const struct xp_cache *x = s->xp;
	int64_t f = 0;

	for (uint32_t k = 0; k < e->nt && f >= 0; k++) {
		uint32_t i = x->tidx[e->first + k];
		struct tp_view tmp;
		const struct tp_view *v = tp_view_at(s->m, s->views, i, &tmp);
		struct wsrv_tensor t;
		cl_tensor_nowait(s->m, i, &t);
		f = s->d->ops->copy2d(s->d, dst + x->toff[e->first + k], (const uint8_t *)t.data + v->src_off,
				      v->width, v->height, v->pitch, NULL);
	}
	return f;
}

int64_t xp_copy(struct wsrv_stream *s, const uint32_t *list, size_t n, uint64_t *copies)
{
	struct xp_cache *x = s->xp;
	int64_t f = 0;
	size_t i = 0;

	while (i < n && f >= 0) {
		const struct xp_expert *e = &x->ex[list[i]];
		size_t j = i + 1;
		struct wsrv_tensor t;
		while (j < n && adjacent(s, &x->ex[list[j - 1]], &x->ex[list[j]]))
			j++;
		if (e->contiguous) {
			uint64_t len = (j - i - 1) * x->slot_size + x->ex[list[j - 1]].bytes;
			cl_tensor_nowait(s->m, x->tidx[e->first], &t);
			f = s->d->ops->copy(s->d, x->slots[e->slot].mem, t.data, len, NULL);
			*copies += 1;
		} else {
			f = copy_packed(s, e, x->slots[e->slot].mem);
			*copies += e->nt;
		}
		for (size_t k = i; k < j && f > 0; k++)
			x->slots[x->ex[list[k]].slot].fence = f;
		i = j;
	}
	return f;
}
