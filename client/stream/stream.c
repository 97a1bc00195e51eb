// SPDX-License-Identifier: MIT
/* stream.c - a worker's pipeline of device slots over a model's layers.
 *
 * Layers are walked in arena order (the global group first), pass after
 * pass. Acquiring a layer puts its streamed tensors in a slot (starting the
 * copy if it was not prefetched), starts the copies of the next layers into
 * the free slots, and waits for its own copy only. Releasing frees the slot
 * and starts the next prefetch at once, so the copy of layer i+D-1 runs while
 * layer i computes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sorted.h"
#include "stream_internal.h"

static int layer_cmp(const void *key, const void *elem)
{
	return sorted_cmp_i32(*(const int32_t *)key, ((const struct st_layer *)elem)->index);
}

static int find_pos(const struct wsrv_stream *s, int32_t index)
{
	return (int)sorted_index(&index, s->layers, s->nlayers, sizeof(*s->layers), layer_cmp);
}

static int seq_of(const struct wsrv_stream *s, int pos)
{
	for (uint32_t k = 0; k < s->nseq; k++)
		if (s->seq[k] == (uint32_t)pos)
			return (int)k;
	return -1;
}

/* The seq position just before the first streamed layer after pos, so
 * that prefetch() starts there. */
static int seq_before(const struct wsrv_stream *s, int pos)
{
	for (uint32_t k = 0; k < s->nseq; k++)
		if (s->seq[k] > (uint32_t)pos)
			return (int)((k + s->nseq - 1) % s->nseq);
	return s->nseq ? (int)s->nseq - 1 : -1;
}

static void take_copy(struct wsrv_stream *s, const struct copy_rec *c)
{
	double end = c->single ? c->t_first[1] : c->t_last[1];

	if (isnan(c->t_first[0]) || isnan(end))
		return; /* the backend could not time it */
	s->st.copy_seconds += end - c->t_first[0];
	stream_trace_add(s, c->layer, c->peer ? 'p' : 'c', c->t_first[0], end);
}

/* Records in order of their fences, which complete in order. */
static void harvest_copies(struct wsrv_stream *s, bool all)
{
	while (s->rec_tail != s->rec_head) {
		struct copy_rec *c = &s->recs[s->rec_tail % STREAM_RECS];
		if (!s->d->ops->done(s->d, c->fence)) {
			if (!all)
				return;
			if (s->d->ops->wait(s->d, c->fence) < 0) {
				s->rec_tail++; /* failed: no time to take */
				continue;
			}
		}
		take_copy(s, c);
		s->rec_tail++;
	}
}

static void harvest_gates(struct wsrv_stream *s, bool all)
{
	while (s->gate_tail != s->gate_head) {
		struct gate_rec *g = &s->gates[s->gate_tail % STREAM_RECS];
		double span[2];
		int r = s->d->ops->gap(s->d, g->ticket, all, span);
		if (r == -EAGAIN)
			return;
		if (r == 0) {
			s->st.wait_seconds += span[1] - span[0];
			stream_trace_add(s, g->layer, 'w', span[0], span[1]);
		}
		s->gate_tail++;
	}
}

void stream_harvest(struct wsrv_stream *s, bool all)
{
	if (!s->d)
		return;
	harvest_copies(s, all);
	harvest_gates(s, all);
}

/* A record for a layer's copies; the oldest is waited for when all are
 * taken (it is long done: STREAM_RECS copies ago). */
static struct copy_rec *new_rec(struct wsrv_stream *s, int32_t layer)
{
	struct copy_rec *c;

	if (s->rec_head - s->rec_tail == STREAM_RECS) {
		c = &s->recs[s->rec_tail % STREAM_RECS];
		if (s->d->ops->wait(s->d, c->fence) == 0)
			take_copy(s, c);
		s->rec_tail++;
	}
	c = &s->recs[s->rec_head % STREAM_RECS];
	*c = (struct copy_rec){ .layer = layer, .t_first = { NAN, NAN }, .t_last = { NAN, NAN } };
	return c;
}

/* Whether some streamed tensor of layer l comes from a peer now; what of
 * a peer-sourced series comes from host memory this time is counted. */
static bool from_peer(struct wsrv_stream *s, const struct st_layer *l)
{
	bool any = false;

	for (uint32_t i = 0; s->peer.k && i < l->nstreamed; i++) {
		if (stream_peer_src(s, l->streamed[i]))
			any = true;
		else if (s->peer.owner[l->streamed[i]] >= 0)
			s->st.peer_host_bytes += tp_view_bytes(s->m, s->views, l->streamed[i]);
	}
	return any;
}

/* Queues streamed tensor k of layer l into slot memory mem: from its
 * owner's device (a layer shard with a peer source) or host memory. */
static int64_t copy_tensor(struct wsrv_stream *s, const struct st_layer *l, uint32_t k, void *mem, double *timing)
{
	struct tp_view tmp;
	const struct tp_view *v = tp_view_at(s->m, s->views, l->streamed[k], &tmp);
	const void *peer = stream_peer_src(s, l->streamed[k]);
	uint8_t *dst = (uint8_t *)mem + l->slot_off[k];
	struct wsrv_tensor t;

	cl_tensor_nowait(s->m, l->streamed[k], &t);
	if (peer) {
		s->st.peer_bytes += v->width;
		return s->d->ops->copy_peer(s->d, dst, peer, v->width, timing);
	}
	return s->d->ops->copy2d(s->d, dst, (const uint8_t *)t.data + v->src_off, v->width, v->height, v->pitch,
				 timing);
}

/* Queues the copies of layer pos into slot k. The first copy records its
 * start, the last its end (one copy records both). On failure nothing of
 * the layer is in the slot, which stays free; copies queued before the
 * failure land in it harmlessly, and are still waited for. A layer whose
 * streamed tensors are one run goes in one copy, unless some come from a
 * peer. */
static int stream_load_layer(struct wsrv_stream *s, int pos, int k)
{
	struct st_layer *l = &s->layers[pos];
	struct slot *sl = &s->slots[k];
	bool one = l->contiguous && !from_peer(s, l);
	uint32_t n = one ? 1 : l->nstreamed;
	struct copy_rec *c = new_rec(s, l->index);
	int64_t f = 0, last = 0;

	c->single = n == 1;
	c->peer = !one && s->peer.k;
	for (uint32_t i = 0; i < n && f >= 0; i++) {
		double *timing = i == 0 ? c->t_first : i + 1 == n ? c->t_last : NULL;
		struct wsrv_tensor t;
		if (one) {
			cl_tensor_nowait(s->m, l->streamed[i], &t);
			f = s->d->ops->copy(s->d, sl->mem, t.data, l->slot_bytes, timing);
		} else {
			f = copy_tensor(s, l, i, sl->mem, timing);
		}
		if (f > 0)
			last = f;
	}
	if (last > 0) {
		c->fence = last;
		c->single = c->single || f < 0;
		s->rec_head++;
		sl->fence = last; /* a free slot's last copy, waited for at close */
	}
	if (f < 0)
		return (int)f;
	sl->layer = pos;
	l->slot = k;
	s->st.bytes_copied += l->slot_bytes;
	s->st.copies++;
	return 0;
}

static int free_slot(const struct wsrv_stream *s)
{
	for (unsigned k = 0; k < s->nslots; k++)
		if (s->slots[k].layer < 0)
			return (int)k;
	return -1;
}

/* Frees the prefetched (not acquired) slot whose layer comes last in the
 * walk from pos; waits for its copy, which cannot be taken back. */
static int evict(struct wsrv_stream *s, int pos)
{
	int best = -1, best_d = -1, from = seq_of(s, pos), r;

	for (unsigned k = 0; k < s->nslots; k++) {
		const struct slot *sl = &s->slots[k];
		int d;
		if (sl->acquired || sl->layer < 0)
			continue;
		d = (seq_of(s, sl->layer) - from + (int)s->nseq) % (int)s->nseq;
		if (d > best_d) {
			best_d = d;
			best = (int)k;
		}
	}
	if (best < 0)
		return cl_err(-EBUSY, "all %u slots hold acquired layers; release one first", s->nslots);
	if ((r = s->d->ops->wait(s->d, s->slots[best].fence)) < 0)
		return cl_wrap(r, "layer %d: its copy failed", s->layers[s->slots[best].layer].index);
	int gone = s->slots[best].layer;
	s->layers[gone].slot = -1;
	s->slots[best].layer = -1;
	if ((r = stream_drop_layer(s, gone, 0)) < 0) /* its disk tier's segments (its fence waited) */
		return r;
	return best;
}

/* Starts the copies of the layers after seq position `from` into free slots. */
void stream_prefetch(struct wsrv_stream *s, int from)
{
	for (uint32_t k = 1; k <= s->nseq && from >= 0; k++) {
		int pos = (int)s->seq[((uint32_t)from + k) % s->nseq], f;
		if (s->layers[pos].slot >= 0)
			continue;
		/* A layer not loaded yet stops the prefetch (the server loads in
		 * layer order): its acquire waits for it. */
		if ((f = free_slot(s)) < 0 || stream_need_layer(s, pos, false) != 1 ||
		    stream_load_layer(s, pos, f) < 0)
			break;
	}
}

int stream_wait_fence(struct wsrv_stream *s, int64_t fence, int32_t index)
{
	double t0 = mono_now();
	int64_t ticket = 0;
	int r;

	if (s->d->ops->done(s->d, fence))
		return 0;
	if (s->d->ops->gate)
		r = s->d->ops->gate(s->d, fence, &ticket);
	else
		r = s->d->ops->wait(s->d, fence);
	if (r == 0 && ticket > 0) {
		if (s->gate_head - s->gate_tail == STREAM_RECS)
			harvest_gates(s, true); /* the compute stream is far behind */
		s->gates[s->gate_head++ % STREAM_RECS] = (struct gate_rec){ ticket, index };
	} else if (r == 0) {
		s->st.wait_seconds += mono_now() - t0;
		stream_trace_add(s, index, 'w', t0, mono_now());
	}
	return r;
}

WSRV_EXPORT int wsrv_stream_acquire(struct wsrv_stream *s, int32_t index)
{
	int pos, k, from, r = 0;
	struct st_layer *l;
	struct slot *sl;

	CL_NEED(s);
	pos = find_pos(s, index);
	if (!s->d)
		return cl_err(-ENODEV, "this stream was opened without a device (a report)");
	if (pos < 0)
		return cl_err(-ENOENT, "model %s has no layer %d", wsrv_model_name(s->m), index);
	l = &s->layers[pos];
	s->st.acquires++;
	if (l->nstreamed == 0) {
		/* Nothing to copy for this one; keep the next ones coming. */
		stream_prefetch(s, seq_before(s, pos));
		s->acquire_t0 = mono_now();
		return 0;
	}
	if (l->slot >= 0 && s->slots[l->slot].acquired)
		return cl_err(-EBUSY, "layer %d is already acquired", index);
	if (l->slot < 0) {
		/* The slot first: an evicted layer lets its disk tier's
		 * segments go before this one waits for room. */
		k = free_slot(s);
		if (k < 0 && (k = evict(s, pos)) < 0)
			return k;
		if ((r = stream_need_layer(s, pos, true)) < 0)
			return cl_wrap(r, "layer %d: its bytes", index);
		if ((r = stream_load_layer(s, pos, k)) < 0)
			return cl_wrap(r, "layer %d: the copy could not be queued", index);
	}
	from = seq_of(s, pos);
	if (s->last < 0 || from <= s->last)
		s->st.passes++; /* a pass begins: the first, or the walk wrapped */
	stream_prefetch(s, from);
	sl = &s->slots[l->slot];
	if ((r = stream_wait_fence(s, sl->fence, index)) < 0)
		return cl_wrap(r, "layer %d: its copy failed", index); /* it stays in its slot */
	sl->acquired = true;
	s->last = from;
	s->acquire_t0 = mono_now();
	stream_harvest(s, false);
	return 0;
}

WSRV_EXPORT int wsrv_stream_release(struct wsrv_stream *s, int32_t index)
{
	struct st_layer *l;
	int pos;

	CL_NEED(s);
	if ((pos = find_pos(s, index)) < 0)
		return cl_err(-ENOENT, "model %s has no layer %d", wsrv_model_name(s->m), index);
	l = &s->layers[pos];
	stream_trace_add(s, index, 'x', s->acquire_t0, mono_now());
	if (l->nstreamed == 0)
		return 0;
	if (l->slot < 0 || !s->slots[l->slot].acquired)
		return cl_err(-EINVAL, "layer %d is not acquired", index);
	int64_t fence = s->slots[l->slot].fence;
	s->slots[l->slot].acquired = false;
	s->slots[l->slot].layer = -1;
	l->slot = -1;
	if (s->d->ops->consumed)
		s->d->ops->consumed(s->d);
	int r = stream_drop_layer(s, pos, fence);
	stream_prefetch(s, s->last);
	return r;
}

static int dev_addr(struct wsrv_stream *s, uint32_t i, void **dev)
{
	struct wsrv_tensor t;
	const struct st_layer *l;
	int pos;

	if (s->where[i] == WHERE_RESIDENT) {
		*dev = (uint8_t *)s->resident + s->res_off[i];
		return 0;
	}
	if (s->where[i] == WHERE_SHARD) {
		*dev = stream_peer_addr(s, i);
		return 0;
	}
	cl_tensor_nowait(s->m, (uint32_t)i, &t);
	if (s->where[i] == WHERE_ABSENT)
		return cl_err(-ENOENT, "tensor %s is not in rank %d's view", t.name, s->rank);
	if (s->where[i] == WHERE_EXPERT)
		return xp_tensor_addr(s, i, dev);
	pos = find_pos(s, t.layer);
	l = &s->layers[pos];
	if (l->slot < 0 || !s->slots[l->slot].acquired)
		return cl_err(-EAGAIN, "tensor %s is streamed and layer %d is not acquired", t.name, t.layer);
	for (uint32_t k = 0; k < l->nstreamed; k++)
		if (l->streamed[k] == i) {
			*dev = (uint8_t *)s->slots[l->slot].mem + l->slot_off[k];
			return 0;
		}
	return cl_err(-EIO, "tensor %s: not in its layer's slot", t.name);
}

WSRV_EXPORT int wsrv_stream_tensor(struct wsrv_stream *s, const char *name, void **dev)
{
	int i;

	CL_NEED(s);
	CL_NEED(name);
	CL_NEED(dev);
	if ((i = cl_find_index(s->m, name)) == -ENOENT)
		return cl_err(-ENOENT, "model %s has no tensor '%s'", wsrv_model_name(s->m), name);
	if (i < 0)
		return i;
	if (!s->d)
		return cl_err(-ENODEV, "this stream was opened without a device (a report)");
	return dev_addr(s, (uint32_t)i, dev);
}

WSRV_EXPORT int wsrv_stream_tensor_at(struct wsrv_stream *s, size_t i, void **dev)
{
	CL_NEED(s);
	CL_NEED(dev);
	if (i >= cl_ntensors(s->m))
		return cl_err(-ERANGE, "tensor %zu out of range", i);
	if (!s->d)
		return cl_err(-ENODEV, "this stream was opened without a device (a report)");
	return dev_addr(s, (uint32_t)i, dev);
}

WSRV_EXPORT int wsrv_stream_residency(const struct wsrv_stream *s, size_t i)
{
	CL_NEED(s);
	if (i >= cl_ntensors(s->m))
		return cl_err(-ERANGE, "tensor %zu out of range", i);
	return s->where[i] == WHERE_RESIDENT || s->where[i] == WHERE_SHARD ? WSRV_RESIDENT
	     : s->where[i] == WHERE_STREAMED ? WSRV_STREAMED
	     : s->where[i] == WHERE_EXPERT ? WSRV_EXPERTS_ON_DEMAND : WSRV_NOT_IN_VIEW;
}

/* Tensor i's view (made in *tmp where every view is whole), or NULL with
 * -ERANGE recorded. */
static const struct tp_view *view_at(const struct wsrv_stream *s, size_t i, struct tp_view *tmp)
{
	if (i < cl_ntensors(s->m))
		return tp_view_at(s->m, s->views, i, tmp);
	cl_err(-ERANGE, "tensor %zu out of range", i);
	return NULL;
}

WSRV_EXPORT int wsrv_stream_view(const struct wsrv_stream *s, size_t i, struct wsrv_view *out)
{
	struct tp_view tmp;
	const struct tp_view *v;

	CL_GET(s, out, (v = view_at(s, i, &tmp)));
	out->present = v->present;
	out->rank = v->rank;
	out->shape = tp_view_shape(s->m, s->views, i);
	out->bytes = v->bytes;
	return 0;
}

WSRV_EXPORT int wsrv_stream_layout(const struct wsrv_stream *s, size_t i, struct wsrv_layout *out)
{
	struct tp_view tmp;
	const struct tp_view *v;

	CL_GET(s, out, (v = view_at(s, i, &tmp)));
	out->offset = v->src_off;
	out->row_bytes = v->width;
	out->rows = v->height;
	out->row_pitch = v->pitch;
	return 0;
}

/* Row k of wsrv_stream_views: tensor i. */
static int view_row(const struct wsrv_stream *s, size_t i, struct wsrv_view_row *r)
{
	struct tp_view tmp;
	const struct tp_view *v = tp_view_at(s->m, s->views, i, &tmp);
	struct wsrv_tensor t = { .struct_size = sizeof(t) };
	int rc;

	if ((rc = wsrv_model_tensor(s->m, i, &t)) < 0 && rc != -EAGAIN)
		return rc;
	memset(r, 0, sizeof(*r));
	r->data = rc < 0 ? NULL : t.data;
	r->offset = t.offset;
	r->size = t.size;
	r->bytes = v->bytes;
	r->part_offset = v->src_off;
	r->row_bytes = v->width;
	r->rows = v->height;
	r->row_pitch = v->pitch;
	r->rank = v->rank < WSRV_VIEW_MAX_RANK ? v->rank : WSRV_VIEW_MAX_RANK;
	memcpy(r->shape, tp_view_shape(s->m, s->views, i), r->rank * sizeof(*r->shape));
	r->dtype = t.dtype;
	r->layer = t.layer;
	r->segment = t.segment;
	r->present = v->present;
	return 0;
}

WSRV_EXPORT int wsrv_stream_views(const struct wsrv_stream *s, size_t first, size_t n, struct wsrv_view_row *rows,
				  size_t row_size)
{
	size_t count;
	int rc;

	CL_NEED(s);
	CL_NEED(rows);
	count = cl_ntensors(s->m);
	if (row_size < offsetof(struct wsrv_view_row, reserved))
		return cl_err(-EINVAL, "wsrv_stream_views: rows of %zu bytes, at least %zu", row_size,
			      offsetof(struct wsrv_view_row, reserved));
	if (first > count || n > count - first)
		return cl_err(-ERANGE, "tensors %zu to %zu: the model has %zu", first, first + n, count);
	for (size_t k = 0; k < n; k++) {
		struct wsrv_view_row r;
		if ((rc = view_row(s, first + k, &r)) < 0)
			return rc;
		memcpy((char *)rows + k * row_size, &r, row_size < sizeof(r) ? row_size : sizeof(r));
	}
	return 0;
}

void stream_stats_fill(struct wsrv_stream *s, struct wsrv_stream_stats *out)
{
	stream_harvest(s, false);
	*out = s->st;
	out->struct_size = sizeof(*out);
	out->hidden_fraction = s->st.copy_seconds > 0 ? 1.0 - s->st.wait_seconds / s->st.copy_seconds : 1.0;
	if (out->hidden_fraction < 0)
		out->hidden_fraction = 0;
	memset(out->reserved, 0, sizeof(out->reserved));
}

/* wsrv_stream_stats had no room left to grow, so LIBWSRV_0.8 gave it
 * reserved[] (the documented way: results grow out of it). A caller linked
 * against an older libwsrv has the shorter struct, and its calls bind to
 * wsrv_stream_stats@LIBWSRV_0.2, which fills only that much: up to the
 * first field that came out of reserved[]. */
#define STREAM_STATS_0_2 offsetof(struct wsrv_stream_stats, resident_copies)

WSRV_EXPORT int wsrv_stream_stats_0_8(struct wsrv_stream *s, struct wsrv_stream_stats *out);
WSRV_EXPORT int wsrv_stream_stats_0_2(struct wsrv_stream *s, struct wsrv_stream_stats *out);
__asm__(".symver wsrv_stream_stats_0_8, wsrv_stream_stats@@LIBWSRV_0.8");
__asm__(".symver wsrv_stream_stats_0_2, wsrv_stream_stats@LIBWSRV_0.2");

WSRV_EXPORT int wsrv_stream_stats_0_8(struct wsrv_stream *s, struct wsrv_stream_stats *out)
{
	CL_NEED(s);
	CL_NEED(out);
	stream_stats_fill(s, out);
	return 0;
}

WSRV_EXPORT int wsrv_stream_stats_0_2(struct wsrv_stream *s, struct wsrv_stream_stats *out)
{
	struct wsrv_stream_stats st;

	CL_NEED(s);
	CL_NEED(out);
	stream_stats_fill(s, &st);
	st.struct_size = STREAM_STATS_0_2;
	memcpy(out, &st, STREAM_STATS_0_2);
	return 0;
}

int stream_send_report(struct wsrv_stream *s, bool closed)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__StreamReport rp = WSRV__STREAM_REPORT__INIT;
	struct wsrv_stream_stats st;
	Wsrv__Response *r;
	int fds[1], n, ret;

	stream_stats_fill(s, &st);
	rp.model = (char *)wsrv_model_name(s->m); /* protobuf-c: not written */
	rp.stream_id = s->id;
	rp.bytes_copied = st.bytes_copied;
	rp.copy_seconds = st.copy_seconds;
	rp.wait_seconds = st.wait_seconds;
	rp.hidden_fraction = st.hidden_fraction;
	rp.acquires = st.acquires;
	rp.passes = st.passes;
	rp.slots = st.slots;
	rp.device_bytes = st.device_bytes;
	rp.shared_bytes = st.shared_bytes;
	rp.service_bytes = st.service_bytes;
	rp.register_bytes = st.register_bytes;
	rp.service_fallbacks = st.service_fallbacks;
	rp.share_role = s->sh.role == WSRV_SHARE_WRITER ? WSRV__REGION_ROLE__REGION_WRITER
		      : s->sh.role == WSRV_SHARE_READER ? WSRV__REGION_ROLE__REGION_READER
		      : WSRV__REGION_ROLE__REGION_ROLE_NONE;
	if (s->xp) {
		rp.expert_slots = s->xp->nslots;
		rp.expert_hits = s->xp->st.hits;
		rp.expert_misses = s->xp->st.misses;
		rp.bytes_copied += s->xp->st.bytes_copied;
	}
	rp.closed = closed;
	q.body_case = WSRV__REQUEST__BODY_REPORT_STREAM;
	q.report_stream = &rp;
	ret = cl_call(cl_model_client(s->m), &q, &r, fds, 0, &n);
	if (ret < 0) {
		cl_debug("stream %u: its report was not taken: %s", s->id, wsrv_last_error());
		return ret;
	}
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

WSRV_EXPORT int wsrv_stream_report(struct wsrv_stream *s)
{
	CL_NEED(s);
	return stream_send_report(s, false);
}
