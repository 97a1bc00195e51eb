// SPDX-License-Identifier: MIT
/* stream_sources.c - the host memory a stream copies from: each resident
 * or streamed tensor's part in this rank's view, as page-aligned ranges,
 * merged where they touch within a segment.
 *
 * Page-locking (a device that registers host memory) is lazy and in
 * chunks: a chunk of SRC_LOCK_CHUNK bytes of a range is locked when the
 * first copy from it is queued, so locking overlaps the copies queued
 * before it and the compute they run beside, and an open locks nothing
 * (locking the whole mapping again at every open would cost a later
 * worker most of what the first paid). A device that does not register has
 * a segment's ranges faulted in when the segment arrives instead: at open
 * for a loaded model, and while the server still loads it, when the first
 * copy that needs the segment is due. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stream_experts.h"
#include "stream_internal.h"
#include "sorted.h"
#include "piece_door.h"

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

/* Tensor i's bytes in this rank's view, page-aligned: [*a, *b) of its
 * piece *seg (its segment, or a disk tier's unit: attached.h). false when the stream never copies it (absent, or a
 * reader's resident tensor: a reader of a shared region never copies
 * those). */
static bool src_of(const struct wsrv_stream *s, uint32_t i, uint32_t *seg, uintptr_t *a, uintptr_t *b)
{
	struct tp_view tmp;
	const struct tp_view *v = tp_view_at(s->m, s->views, i, &tmp);
	const struct mf_tensor *t = cl_tensor_entry(s->m, i);
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), p;

	if (s->where[i] == WHERE_ABSENT || !v->bytes ||
	    (s->where[i] == WHERE_RESIDENT && s->sh.role == WSRV_SHARE_READER))
		return false;
	p = (uintptr_t)(cl_segment_base(s->m, t->segment) + t->offset) + v->src_off;
	*seg = cl_piece(s->m, i);
	*a = p & ~(pg - 1);
	*b = (p + (v->height - 1) * v->pitch + v->width + pg - 1) & ~(pg - 1);
	return true;
}

/* Appends [a, b) of piece seg to s->srcs (*cap entries), into its last
 * range where it starts within it. false when out of memory. */
static bool src_add(struct wsrv_stream *s, size_t *cap, uint32_t seg, uintptr_t a, uintptr_t b)
{
	struct src_range *last = s->nsrcs ? &s->srcs[s->nsrcs - 1] : NULL;

	if (last && last->seg == seg && a >= last->a && a <= last->b) {
		if (b > last->b)
			last->b = b;
		return true;
	}
	if (s->nsrcs == *cap) {
		size_t n = *cap ? 2 * *cap : 64;
		struct src_range *g = realloc(s->srcs, n * sizeof(*g));
		if (!g)
			return false;
		s->srcs = g;
		*cap = n;
	}
	s->srcs[s->nsrcs++] = (struct src_range){ .a = a, .b = b, .seg = seg };
	return true;
}

/* Every copied tensor's source range, sorted and merged into s->srcs.
 * Tensors in the arena's order (the manifest's, as a rule) merge as they
 * come; any other order is sorted and merged again after. */
static int collect(struct wsrv_stream *s)
{
	size_t n = cl_ntensors(s->m), cap = 0;
	bool sorted = true;

	for (size_t i = 0; i < n; i++) {
		struct src_range r;
		if (!src_of(s, (uint32_t)i, &r.seg, &r.a, &r.b))
			continue;
		sorted = sorted && (!s->nsrcs || by_seg_start(&s->srcs[s->nsrcs - 1], &r) <= 0);
		if (!src_add(s, &cap, r.seg, r.a, r.b))
			return cl_err(-ENOMEM, "out of memory");
	}
	if (!sorted) {
		size_t k = s->nsrcs;
		qsort(s->srcs, k, sizeof(*s->srcs), by_seg_start);
		s->nsrcs = 0;
		for (size_t i = 0; i < k; i++)
			src_add(s, &cap, s->srcs[i].seg, s->srcs[i].a, s->srcs[i].b); /* never grows */
	}
	for (size_t i = 0; i < s->nsrcs; i++) {
		struct src_range *g = &s->srcs[i];
		g->nchunks = (uint32_t)((g->b - g->a + SRC_LOCK_CHUNK - 1) / SRC_LOCK_CHUNK);
		if (!(g->chunks = calloc(g->nchunks, 1)))
			return cl_err(-ENOMEM, "out of memory");
	}
	return 0;
}

/* Locks chunk k of g (once), counting what it added and the time. */
static int lock_chunk(struct wsrv_stream *s, struct src_range *g, uint32_t k)
{
	uintptr_t a = g->a + (uintptr_t)k * SRC_LOCK_CHUNK, b = a + SRC_LOCK_CHUNK < g->b ? a + SRC_LOCK_CHUNK : g->b;
	double t0 = mono_now();
	uint64_t added = 0;
	int r;

	if (g->chunks[k])
		return 0;
	r = s->d->ops->register_host(s->d, (const void *)a, b - a, &added);
	s->st.register_seconds += mono_now() - t0;
	if (r < 0)
		return cl_wrap(r, "page-locking the model's memory for the device failed");
	g->chunks[k] = 1;
	s->st.register_bytes += added;
	return 0;
}

/* The merged range of piece seg that holds address a, or NULL: a binary
 * search of s->srcs, sorted by (piece, start) and disjoint. */
static bool starts_by(const void *key, const void *elem)
{
	const struct src_range *k = key, *g = elem;

	return g->seg < k->seg || (g->seg == k->seg && g->a <= k->a);
}

static struct src_range *src_find(struct wsrv_stream *s, uint32_t seg, uintptr_t a)
{
	struct src_range k = { .seg = seg, .a = a };
	/* the first range past (seg, a) */
	size_t lo = sorted_first(&k, s->srcs, s->nsrcs, sizeof(*s->srcs), starts_by);

	if (!lo)
		return NULL;
	struct src_range *g = &s->srcs[lo - 1];
	return g->seg == seg && a >= g->a && a < g->b ? g : NULL;
}

/* Tensor i's copies are due: the chunks its bytes lie in are locked. */
static int lock_tensor(struct wsrv_stream *s, uint32_t i)
{
	uintptr_t a, b;
	uint32_t seg;
	int r = 0;

	if (s->src_locked[i] || !src_of(s, i, &seg, &a, &b))
		return 0;
	struct src_range *g = src_find(s, seg, a);
	for (uint32_t c = g ? (uint32_t)((a - g->a) / SRC_LOCK_CHUNK) : 0;
	     g && r == 0 && c <= (uint32_t)((b - 1 - g->a) / SRC_LOCK_CHUNK) && c < g->nchunks; c++)
		r = lock_chunk(s, g, c);
	s->src_locked[i] = r == 0;
	return r;
}

/* Piece seg is mapped, kept or lent (got). A device that registers locks
 * chunks as copies come (lock_tensor); for one that does not, a kept
 * piece's ranges are faulted in now rather than in the first pass's
 * copies (best effort). Once per piece. */
static void arrived(struct wsrv_stream *s, uint32_t seg, enum cl_piece_got got)
{
	if (s->have[seg] != PIECE_NOT_YET || got == PIECE_NOT_YET)
		return;
	/* Not a lent one: it comes for a pass and goes, and the copy
	 * engine's faults overlap the compute where these would not. */
	for (size_t i = 0; i < s->nsrcs && !s->d->ops->register_host && got == PIECE_KEPT; i++)
		if (s->srcs[i].seg == seg)
			madvise((void *)s->srcs[i].a, s->srcs[i].b - s->srcs[i].a, MADV_POPULATE_READ);
	s->have[seg] = (uint8_t)got;
}

int stream_register(struct wsrv_stream *s)
{
	uint32_t nseg = cl_nsegments(s->m);
	int r;

	if (!s->d)
		return 0;
	if ((r = collect(s)) < 0)
		return r;
	if (!(s->have = calloc(cl_npieces(s->m) + 1, sizeof(*s->have))) ||
	    !(s->src_locked = calloc(cl_ntensors(s->m) + 1, sizeof(*s->src_locked))))
		return cl_err(-ENOMEM, "out of memory");
	/* Those here for good now; a lent one is taken as its layers come. */
	for (uint32_t g = 0; g < nseg; g++) {
		if ((r = cl_piece_kept_now(s->m, g)) < 0)
			return r;
		if (r == 1)
			arrived(s, g, PIECE_KEPT);
	}
	return 0;
}

int stream_need_tensor(struct wsrv_stream *s, uint32_t i, bool wait)
{
	uint32_t seg = cl_piece(s->m, i);
	bool lock = s->d && s->d->ops->register_host && !s->no_lock;
	enum cl_piece_got got;
	int r;

	if (!s->d || (s->have[seg] && (!lock || s->src_locked[i])))
		return 1;
	if (!s->have[seg]) {
		r = cl_pieces_need(s->m, &seg, 1, wait, &got);
		arrived(s, seg, got); /* even after an error: let go with the layer */
		if (r < 0 || got == PIECE_NOT_YET)
			return r;
	}
	return lock && (r = lock_tensor(s, i)) < 0 ? r : 1;
}

/* Adds g to p[0..*n) when it is not there yet. */
static void add_piece(uint32_t *p, size_t *n, uint32_t g)
{
	for (size_t i = *n; i-- > 0;)
		if (p[i] == g)
			return;
	p[(*n)++] = g;
}

int stream_need_pieces(struct wsrv_stream *s, const uint32_t *idx, size_t n, bool wait)
{
	enum cl_piece_got *got;
	uint32_t *p;
	size_t k = 0;
	int r;

	if (!s->d || !n)
		return 0;
	p = calloc(n, sizeof(*p));
	got = calloc(n, sizeof(*got));
	r = p && got ? 0 : cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; r == 0 && i < n; i++) {
		uint32_t g = cl_piece(s->m, idx[i]);
		if (!s->have[g])
			add_piece(p, &k, g);
	}
	if (r == 0 && k)
		r = cl_pieces_need(s->m, p, k, wait, got);
	/* What came is here (and let go with the layer) even when another
	 * failed: held, it would stay held until detach. */
	for (size_t i = 0; i < k; i++)
		arrived(s, p[i], got[i]);
	free(p);
	free(got);
	return r;
}

int stream_need_layer(struct wsrv_stream *s, int pos, bool wait)
{
	const struct st_layer *l = &s->layers[pos];
	int r = 1;

	/* A disk tier's pieces together: their reads side by side. */
	if ((r = stream_need_pieces(s, l->streamed, l->nstreamed, wait)) < 0)
		return r;
	r = 1;
	for (uint32_t k = 0; k < l->nstreamed && r == 1; k++)
		r = stream_need_tensor(s, l->streamed[k], wait);
	return r;
}

/* Whether a layer in a slot other than pos's streams from piece g. */
static bool seg_in_use(const struct wsrv_stream *s, int pos, uint32_t g)
{
	for (int p = 0; p < (int)s->nlayers; p++) {
		const struct st_layer *l = &s->layers[p];
		if (p == pos || l->slot < 0)
			continue;
		for (uint32_t k = 0; k < l->nstreamed; k++)
			if (cl_piece(s->m, l->streamed[k]) == g)
				return true;
	}
	return false;
}

/* Unlocks chunk k of g, if locked. */
static void unlock_chunk(struct wsrv_stream *s, struct src_range *g, uint32_t k)
{
	uintptr_t a = g->a + (uintptr_t)k * SRC_LOCK_CHUNK;

	if (!g->chunks[k])
		return;
	s->d->ops->unregister_host(s->d, (const void *)a, (a + SRC_LOCK_CHUNK < g->b ? a + SRC_LOCK_CHUNK : g->b) - a);
	g->chunks[k] = 0;
}

/* Piece seg's chunks are unlocked (the copies from them have landed),
 * its tensors to be locked again when it comes back. */
static void unlock_segment(struct wsrv_stream *s, uint32_t seg)
{
	size_t n = cl_ntensors(s->m);

	for (size_t i = 0; i < s->nsrcs; i++)
		for (uint32_t k = 0; s->srcs[i].seg == seg && k < s->srcs[i].nchunks; k++)
			unlock_chunk(s, &s->srcs[i], k);
	for (size_t i = 0; i < n; i++)
		if (cl_piece(s->m, (uint32_t)i) == seg)
			s->src_locked[i] = false;
}

/* Piece g (here, a disk tier's) is let go here: its copies, and an
 * expert's, land first (a device that gates its compute stream may have
 * returned the acquire before they did), then a device that page-locked
 * its chunks lets them go before the pages do. */
static int let_go(struct wsrv_stream *s, uint32_t g, int64_t fence)
{
	int64_t f = xp_seg_fence(s, g);
	int r;

	if ((fence > 0 && (r = s->d->ops->wait(s->d, fence)) < 0) || (f > 0 && (r = s->d->ops->wait(s->d, f)) < 0))
		return r;
	if (s->d->ops->register_host)
		unlock_segment(s, g);
	s->have[g] = PIECE_NOT_YET;
	return 0;
}

int stream_drop_pieces(struct wsrv_stream *s, const uint32_t *p, size_t n, int64_t fence)
{
	uint32_t *gone;
	size_t k = 0;
	int r;

	if (!s->d || !n)
		return 0;
	if (!(gone = calloc(n, sizeof(*gone))))
		return cl_err(-ENOMEM, "out of memory");
	r = 0;
	for (size_t i = 0; r == 0 && i < n; i++)
		if (s->have[p[i]] == PIECE_LENT && (r = let_go(s, p[i], fence)) == 0)
			gone[k++] = p[i];
	if (k) { /* what was let go here goes at the server, even after a failure */
		int d = cl_pieces_done(s->m, gone, k);
		r = r < 0 ? r : d;
	}
	free(gone);
	return r;
}

int stream_drop_segment(struct wsrv_stream *s, uint32_t g, int64_t fence)
{
	return stream_drop_pieces(s, &g, 1, fence);
}

bool stream_piece_unused(const struct wsrv_stream *s, uint32_t g)
{
	return s->have && s->have[g] && !seg_in_use(s, -1, g);
}

int stream_drop_layer(struct wsrv_stream *s, int pos, int64_t fence)
{
	const struct st_layer *l = &s->layers[pos];
	uint32_t *p;
	size_t k = 0;
	int r;

	if (!s->d || !l->nstreamed)
		return 0;
	if (!(p = calloc(l->nstreamed, sizeof(*p))))
		return cl_err(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < l->nstreamed; i++) {
		uint32_t g = cl_piece(s->m, l->streamed[i]);
		if (s->have[g] && !seg_in_use(s, pos, g))
			add_piece(p, &k, g);
	}
	r = stream_drop_pieces(s, p, k, fence);
	free(p);
	return r;
}

/* Every piece the stream has lent is given back, in one call (one by
 * one when there is no memory for the list). */
static void give_back_lent(struct wsrv_stream *s)
{
	uint32_t n = s->have ? cl_npieces(s->m) : 0, *p = n ? calloc(n, sizeof(*p)) : NULL;
	size_t k = 0;

	for (uint32_t g = 0; g < n; g++)
		if (s->have[g] == PIECE_LENT) {
			if (p)
				p[k++] = g;
			else
				cl_pieces_done(s->m, &g, 1);
		}
	cl_pieces_done(s->m, p, k);
	free(p);
}

void stream_unregister(struct wsrv_stream *s)
{
	for (size_t i = 0; i < s->nsrcs; i++) {
		struct src_range *g = &s->srcs[i];
		for (uint32_t k = 0; g->chunks && k < g->nchunks; k++)
			unlock_chunk(s, g, k);
		free(g->chunks);
	}
	give_back_lent(s);
	free(s->srcs);
	free(s->have);
	free(s->src_locked);
	s->srcs = NULL;
	s->have = NULL;
	s->src_locked = NULL;
	s->nsrcs = 0;
}
