// SPDX-License-Identifier: MIT
/* stream_layout.c - how each layer's streamed tensors sit in a slot: one
 * run copied as it lies in the arena when the streamed tensors are whole
 * and contiguous there (one copy per layer), else each tensor's view
 * packed 256-aligned. */
#include <errno.h>
#include <stdlib.h>

#include "stream_internal.h"

static void layout_one(struct wsrv_stream *s, struct st_layer *sl, const struct wsrv_layer *l)
{
	uint64_t off = 0;

	sl->nstreamed = 0;
	for (uint32_t k = l->first; k < l->first + l->count; k++)
		if (s->where[k] == WHERE_STREAMED)
			sl->streamed[sl->nstreamed++] = k;
	/* Contiguous: the streamed ones are one unbroken run of the layer,
	 * each seen whole (no tensor-parallel slice). */
	sl->contiguous = sl->nstreamed > 0 &&
			 sl->streamed[sl->nstreamed - 1] - sl->streamed[0] + 1 == sl->nstreamed;
	for (uint32_t i = 0; sl->contiguous && i < sl->nstreamed; i++) {
		struct wsrv_tensor t;
		cl_tensor_nowait(s->m, sl->streamed[i], &t);
		/* One piece: a copy never spans a disk tier's units. */
		sl->contiguous = tp_view_whole(s->views, sl->streamed[i], t.size) &&
				 cl_piece(s->m, sl->streamed[i]) == cl_piece(s->m, sl->streamed[0]);
	}
	sl->slot_bytes = 0;
	if (sl->nstreamed == 0)
		return;
	if (sl->contiguous) {
		struct wsrv_tensor a, b;
		cl_tensor_nowait(s->m, sl->streamed[0], &a);
		cl_tensor_nowait(s->m, sl->streamed[sl->nstreamed - 1], &b);
		sl->seg = a.segment;
		sl->span_off = a.offset;
		sl->slot_bytes = b.offset + b.size - a.offset;
		for (uint32_t i = 0; i < sl->nstreamed; i++) {
			struct wsrv_tensor t;
			cl_tensor_nowait(s->m, sl->streamed[i], &t);
			sl->slot_off[i] = t.offset - a.offset;
		}
		return;
	}
	for (uint32_t i = 0; i < sl->nstreamed; i++) {
		off = (off + 255) & ~255ULL;
		sl->slot_off[i] = off;
		off += tp_view_bytes(s->m, s->views, sl->streamed[i]);
	}
	sl->slot_bytes = off;
}

uint64_t stream_layout(struct wsrv_stream *s)
{
	uint64_t max = 0;

	for (uint32_t i = 0; i < s->nlayers; i++) {
		struct wsrv_layer l;
		cl_layer_at_nowait(s->m, i, &l);
		layout_one(s, &s->layers[i], &l);
		if (s->layers[i].slot_bytes > max)
			max = s->layers[i].slot_bytes;
	}
	return (max + 4095) & ~4095ULL;
}
