// SPDX-License-Identifier: MIT
/* peer_fill_sum.c - a fetched tensor's xxh3 as its pieces land. */
#include "peer_fill_sum.h"

#include <errno.h>
#include <stdlib.h>

#define SUM_BUF (1u << 20)

int fill_sums_init(struct fill_sums *s, size_t ntensors, struct arena *a, struct errinfo *e)
{
	s->arena = a;
	s->t = calloc(ntensors + 1, sizeof(*s->t));
	s->buf = malloc(SUM_BUF);
	if (!s->t || !s->buf)
		return err_set(e, -ENOMEM, "out of memory");
	s->ntensors = ntensors;
	return 0;
}

void fill_sums_fini(struct fill_sums *s)
{
	for (size_t i = 0; s->t && i < s->ntensors; i++)
		xxh3_stream_free(s->t[i].st);
	free(s->t);
	free(s->buf);
	s->t = NULL;
	s->buf = NULL;
}

int fill_sums_start(struct fill_sums *s, uint32_t i)
{
	struct fill_sum *f = &s->t[i];

	if (!f->st && !(f->st = xxh3_stream_new()))
		return -ENOMEM;
	xxh3_stream_reset(f->st);
	f->done = 0;
	return 0;
}

void fill_sums_piece(struct fill_sums *s, uint32_t i, uint64_t off, const void *p, size_t len)
{
	struct fill_sum *f = &s->t[i];

	if (f->st && off == f->done) {
		xxh3_stream_update(f->st, p, len);
		f->done += len;
	}
}

int fill_sums_end(struct fill_sums *s, uint32_t i, uint32_t seg, uint64_t seg_off, uint64_t len,
		  uint64_t *out, struct errinfo *e)
{
	struct fill_sum *f = &s->t[i];
	int r = 0;

	if (!f->st)
		return err_set(e, -EINVAL, "tensor %u was not being fetched", i);
	while (f->done < len) {
		size_t n = len - f->done < SUM_BUF ? (size_t)(len - f->done) : SUM_BUF;
		if ((r = arena_read(s->arena, seg, seg_off + f->done, s->buf, n, e)) < 0)
			break;
		xxh3_stream_update(f->st, s->buf, n);
		f->done += n;
	}
	if (r == 0)
		*out = xxh3_stream_digest(f->st);
	xxh3_stream_free(f->st);
	f->st = NULL;
	return r;
}
