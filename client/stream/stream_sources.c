// SPDX-License-Identifier: MIT
/* stream_sources.c - the host memory a stream copies from: each resident
 * or streamed tensor's part in this rank's view, as page-aligned ranges,
 * merged where they touch within a segment. A segment's ranges are
 * page-locked through the device (or, without that, faulted in) when the
 * segment arrives: at open for a loaded model, and while the server still
 * loads it, when the first copy that needs the segment is due. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stream_internal.h"
#include "ready_wait.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static int by_seg_start(const void *x, const void *y)
{
	const struct src_range *a = x, *b = y;

	if (a->seg != b->seg)
		return a->seg < b->seg ? -1 : 1;
	return a->a < b->a ? -1 : a->a > b->a;
}

/* Every copied tensor's source range, sorted and merged into s->srcs. */
static int collect(struct wsrv_stream *s)
{
	size_t n = wsrv_model_tensor_count(s->m), k = 0;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

	if (!(s->srcs = calloc(n + 1, sizeof(*s->srcs))))
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct tp_view *v = &s->views[i];
		struct wsrv_tensor t;
		uintptr_t a;
		/* A reader of a shared region never copies its resident tensors. */
		if (s->where[i] == WHERE_ABSENT || !v->bytes ||
		    (s->where[i] == WHERE_RESIDENT && s->sh.role == WSRV_SHARE_READER))
			continue;
		cl_tensor_nowait(s->m, (uint32_t)i, &t);
		a = (uintptr_t)t.data + v->src_off;
		s->srcs[k].seg = t.segment;
		s->srcs[k].a = a & ~(pg - 1);
		s->srcs[k].b = (a + (v->height - 1) * v->pitch + v->width + pg - 1) & ~(pg - 1);
		k++;
	}
	qsort(s->srcs, k, sizeof(*s->srcs), by_seg_start);
	s->nsrcs = 0;
	for (size_t i = 0; i < k; i++) {
		struct src_range *last = s->nsrcs ? &s->srcs[s->nsrcs - 1] : NULL;
		if (last && last->seg == s->srcs[i].seg && s->srcs[i].a <= last->b) {
			if (s->srcs[i].b > last->b)
				last->b = s->srcs[i].b;
		} else {
			s->srcs[s->nsrcs++] = s->srcs[i];
		}
	}
	return 0;
}

/* Segment seg is mapped: page-locks its ranges through the device, or,
 * where the device does not, faults them in now rather than in the first
 * pass's copies (best effort). Once per segment. */
static int arrived(struct wsrv_stream *s, uint32_t seg)
{
	bool lock = s->d && s->d->ops->register_host;
	double t0 = mono_now();
	int r = 0;

	if (s->seg_here[seg])
		return 0;
	for (size_t i = 0; i < s->nsrcs && r == 0; i++) {
		struct src_range *g = &s->srcs[i];
		uint64_t added = 0;
		if (g->seg != seg)
			continue;
		if (!lock) {
			madvise((void *)g->a, g->b - g->a, MADV_POPULATE_READ);
			continue;
		}
		if ((r = s->d->ops->register_host(s->d, (const void *)g->a, g->b - g->a, &added)) == 0) {
			g->locked = true;
			s->st.register_bytes += added;
		}
	}
	s->st.register_seconds += mono_now() - t0;
	if (r < 0)
		return cl_wrap(r, "page-locking the model's memory for the device failed");
	s->seg_here[seg] = true;
	return 0;
}

int stream_register(struct wsrv_stream *s)
{
	uint32_t nseg = s->m->nseg;
	int r;

	if (!s->d)
		return 0;
	if ((r = collect(s)) < 0)
		return r;
	if (!(s->seg_here = calloc(nseg + 1, sizeof(*s->seg_here))))
		return cl_err(-ENOMEM, "out of memory");
	for (uint32_t g = 0; g < nseg; g++) {
		if ((r = cl_segment_ready(s->m, g)) < 0)
			return r;
		if (r == 1 && (r = arrived(s, g)) < 0)
			return r;
	}
	return 0;
}

int stream_need_tensor(struct wsrv_stream *s, uint32_t i, bool wait)
{
	uint32_t seg = s->m->v.tensors[i].segment;
	int r;

	if (!s->d || s->seg_here[seg])
		return 1;
	if (wait) {
		if ((r = cl_need_segment(s->m, seg)) < 0)
			return r;
	} else if ((r = cl_segment_ready(s->m, seg)) <= 0) {
		return r;
	}
	return (r = arrived(s, seg)) < 0 ? r : 1;
}

int stream_need_layer(struct wsrv_stream *s, int pos, bool wait)
{
	const struct st_layer *l = &s->layers[pos];
	int r = 1;

	for (uint32_t k = 0; k < l->nstreamed && r == 1; k++)
		r = stream_need_tensor(s, l->streamed[k], wait);
	return r;
}

void stream_unregister(struct wsrv_stream *s)
{
	for (size_t i = 0; i < s->nsrcs; i++)
		if (s->srcs[i].locked)
			s->d->ops->unregister_host(s->d, (const void *)s->srcs[i].a,
						   s->srcs[i].b - s->srcs[i].a);
	free(s->srcs);
	free(s->seg_here);
	s->srcs = NULL;
	s->seg_here = NULL;
	s->nsrcs = 0;
}
