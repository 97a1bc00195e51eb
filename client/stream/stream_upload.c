// SPDX-License-Identifier: MIT
/* stream_upload.c - a stream's resident tensors copied to the device once,
 * each waiting for its bytes when the model is still loading: into private
 * device memory (stream_open.c) or a shared region its writer fills
 * (stream_share.c). */
#include "stream_internal.h"

int stream_upload_into(struct wsrv_stream *s, uint8_t *base)
{
	size_t n = wsrv_model_tensor_count(s->m);
	int64_t f = 0, last = 0;
	uint32_t seg = UINT32_MAX;
	int r = 0;

	for (size_t i = 0; i < n && f >= 0 && r == 0; i++) {
		const struct tp_view *v = &s->views[i];
		struct wsrv_tensor t;
		cl_tensor_nowait(s->m, (uint32_t)i, &t);
		if (s->where[i] != WHERE_RESIDENT || !v->bytes)
			continue;
		/* A disk tier's segment goes once its resident tensors are
		 * copied (tensors come in segment order): an open never holds
		 * more than one, whatever the budget. */
		if (seg != UINT32_MAX && seg != cl_piece(s->m, (uint32_t)i) && (r = stream_drop_segment(s, seg, last)) < 0)
			break;
		seg = cl_piece(s->m, (uint32_t)i);
		/* Still loading: each waits for its bytes, in arena order. */
		if ((r = stream_need_tensor(s, (uint32_t)i, true)) < 0)
			break;
		r = 0;
		f = s->d->ops->copy2d(s->d, base + s->res_off[i], (const uint8_t *)t.data + v->src_off,
				      v->width, v->height, v->pitch, NULL);
		if (f > 0)
			last = f;
	}
	/* Waited for even after a failure: the memory is freed next. */
	if (last > 0) {
		int w = s->d->ops->wait(s->d, last);
		if (w < 0 && r == 0)
			r = cl_wrap(w, "the upload of the resident tensors failed");
	}
	if (f < 0)
		r = cl_wrap((int)f, "the upload of the resident tensors could not be queued");
	if (r == 0 && seg != UINT32_MAX)
		r = stream_drop_segment(s, seg, last);
	return r;
}
