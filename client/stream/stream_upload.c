// SPDX-License-Identifier: MIT
/* stream_upload.c - a stream's resident tensors copied to the device once,
 * each waiting for its bytes when the model is still loading: into private
 * device memory (stream_open.c) or a shared region its writer fills
 * (stream_share.c). */
#include "stream_internal.h"

/* The most one copy of the upload takes: a model still loading has its
 * first bytes on the device before its last arrive. */
#define UPLOAD_RUN_MAX ((uint64_t)64 << 20)

/* The copies of the upload. Resident memory gives each tensor the next
 * 256-byte boundary (layout_resident), so tensors packed in their piece at
 * 256-byte multiples lie there as they do here: such a run goes in one
 * copy, and a model of many small tensors is uploaded in a few large
 * copies, not one per tensor. The bytes between two of them (under 256)
 * are theirs' padding, in the same mapping. */
struct up {
	struct wsrv_stream *s;
	uint8_t *base;
	const uint64_t *offs;       /* each tensor's offset from base */
	const uint8_t *src;         /* the pending run: its bytes, */
	uint64_t dst, len;          /* where they go, how many */
	int64_t last;               /* the last copy's fence */
};

/* Queues one copy of the upload (rows of width bytes, pitch apart in
 * the source, packed at dst): 0, or a negative errno. */
static int up_copy(struct up *u, uint64_t dst, const uint8_t *src, uint64_t width, uint64_t height, uint64_t pitch)
{
	int64_t f = u->s->d->ops->copy2d(u->s->d, u->base + dst, src, width, height, pitch, NULL);

	if (f < 0)
		return cl_wrap((int)f, "the upload of the resident tensors could not be queued");
	if (f > 0)
		u->last = f;
	u->s->st.resident_copies++;
	return 0;
}

/* Queues the pending run: 0, or a negative errno. */
static int up_flush(struct up *u)
{
	uint64_t len = u->len;

	u->len = 0;
	return len ? up_copy(u, u->dst, u->src, len, 1, len) : 0;
}

/* Tensor i's bytes at src: added to the pending run when they follow it
 * as they do in resident memory, else queued on their own (rows) or as
 * the start of the next run. */
static int up_tensor(struct up *u, size_t i, const uint8_t *src)
{
	struct tp_view tmp;
	const struct tp_view *v = tp_view_at(u->s->m, u->s->views, i, &tmp);
	uint64_t dst = u->offs[i];
	int r;

	if (u->len && v->height == 1 && dst >= u->dst + u->len && src - u->src == (ptrdiff_t)(dst - u->dst) &&
	    dst + v->width - u->dst <= UPLOAD_RUN_MAX) {
		u->len = dst + v->width - u->dst;
		return 0;
	}
	if ((r = up_flush(u)) < 0)
		return r;
	if (v->height > 1)
		return up_copy(u, dst, src, v->width, v->height, v->pitch);
	u->src = src;
	u->dst = dst;
	u->len = v->width;
	return 0;
}

int stream_upload_into(struct wsrv_stream *s, uint8_t *base)
{
	return stream_upload_set(s, base, WHERE_RESIDENT, s->res_off);
}

int stream_upload_set(struct wsrv_stream *s, uint8_t *base, int where, const uint64_t *offs)
{
	size_t n = cl_ntensors(s->m);
	struct up u = { .s = s, .base = base, .offs = offs };
	uint32_t seg = UINT32_MAX;
	int r = 0;

	for (size_t i = 0; i < n && r == 0; i++) {
		struct tp_view tmp;
		const struct tp_view *v = tp_view_at(s->m, s->views, i, &tmp);
		struct wsrv_tensor t;
		if (s->where[i] != where || !v->bytes)
			continue;
		cl_tensor_nowait(s->m, (uint32_t)i, &t);
		/* A disk tier's segment goes once its resident tensors are
		 * copied (tensors come in segment order): an open never holds
		 * more than one, whatever the budget. */
		if (seg != UINT32_MAX && seg != cl_piece(s->m, (uint32_t)i) &&
		    ((r = up_flush(&u)) < 0 || (r = stream_drop_segment(s, seg, u.last)) < 0))
			break;
		seg = cl_piece(s->m, (uint32_t)i);
		/* Still loading: each waits for its bytes, in arena order. */
		if ((r = stream_need_tensor(s, (uint32_t)i, true)) < 0)
			break;
		r = up_tensor(&u, i, (const uint8_t *)t.data + v->src_off);
	}
	if (r == 0)
		r = up_flush(&u);
	/* Waited for even after a failure: the memory is freed next. */
	if (u.last > 0) {
		int w = s->d->ops->wait(s->d, u.last);
		if (w < 0 && r == 0)
			r = cl_wrap(w, "the upload of the resident tensors failed");
	}
	if (r == 0 && seg != UINT32_MAX)
		r = stream_drop_segment(s, seg, u.last);
	return r;
}
