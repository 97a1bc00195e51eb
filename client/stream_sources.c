// SPDX-License-Identifier: MIT
/* stream_sources.c - the host memory a stream copies from: each resident
 * or streamed tensor's part in this rank's view, as page-aligned ranges,
 * merged where they touch, and page-locked through the device for as long
 * as the stream is open. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "stream_internal.h"

static int by_start(const void *x, const void *y)
{
	const struct src_range *a = x, *b = y;

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
		wsrv_model_tensor(s->m, i, &t);
		a = (uintptr_t)t.data + v->src_off;
		s->srcs[k].a = a & ~(pg - 1);
		s->srcs[k].b = (a + (v->height - 1) * v->pitch + v->width + pg - 1) & ~(pg - 1);
		k++;
	}
	qsort(s->srcs, k, sizeof(*s->srcs), by_start);
	s->nsrcs = 0;
	for (size_t i = 0; i < k; i++) {
		struct src_range *last = s->nsrcs ? &s->srcs[s->nsrcs - 1] : NULL;
		if (last && s->srcs[i].a <= last->b) {
			if (s->srcs[i].b > last->b)
				last->b = s->srcs[i].b;
		} else {
			s->srcs[s->nsrcs++] = s->srcs[i];
		}
	}
	return 0;
}

int stream_register(struct wsrv_stream *s)
{
	double t0 = mono_now();
	size_t done = 0;
	int r;

	if (!s->d || !s->d->ops->register_host)
		return 0;
	if ((r = collect(s)) < 0)
		return r;
	for (; done < s->nsrcs; done++) {
		const struct src_range *g = &s->srcs[done];
		uint64_t added = 0;
		if ((r = s->d->ops->register_host(s->d, (const void *)g->a, g->b - g->a, &added)) < 0)
			break;
		s->st.register_bytes += added;
	}
	s->nsrcs = done; /* what close must undo */
	s->st.register_seconds = mono_now() - t0;
	return r < 0 ? cl_wrap(r, "page-locking the model's memory for the device failed") : 0;
}

void stream_unregister(struct wsrv_stream *s)
{
	for (size_t i = 0; s->d && s->d->ops->unregister_host && i < s->nsrcs; i++)
		s->d->ops->unregister_host(s->d, (const void *)s->srcs[i].a, s->srcs[i].b - s->srcs[i].a);
	free(s->srcs);
	s->srcs = NULL;
	s->nsrcs = 0;
}
