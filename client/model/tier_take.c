// SPDX-License-Identifier: MIT
/* tier_take.c - a disk tier's pieces (attached.h: its segments, and its
 * units, each routed expert of a layer) taken and let go: asked for
 * (pieces.h), one at a time or many in one request, mapped over their
 * reserved ranges, counted per use, and made unreadable and given back
 * once nothing uses them. Everything under m->map_lock. */
#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "attached.h"
#include "packet.h"
#include "pieces.h"
#include "ready_read.h"
#include "ready_wait.h"
#include "tier_take.h"

/* Pieces asked for in one request: every fd of a reply fits. */
#define ASK_MAX (WSRV_MAX_FDS - 2)



/* Maps the pieces a reply sent (got[0..n), fds), closing each fd. */
static int map_got(struct wsrv_model *m, const uint32_t *got, const int *fds, size_t n)
{
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		if (r == 0 && !cl_piece_here(&m->pst[got[i]]))
			r = cl_map_over(m, got[i], fds[i]);
		close(fds[i]);
	}
	return r;
}

/* Waits (the lock let go) for word w to leave seen, a slice at most. */
static void wait_read(struct wsrv_model *m, const uint32_t *w, uint32_t seen)
{
	struct timespec ts = { 0, WAIT_SLICE_MS * 1000000L };

	pthread_mutex_unlock(&m->map_lock);
	if (cl_load_word(w) == seen)
		syscall(SYS_futex, w, FUTEX_WAIT, seen, &ts, NULL, 0);
	pthread_mutex_lock(&m->map_lock);
}

/* One piece of a disk tier mapped (pinned: for a lookup, kept until
 * detach): 1; 0 (not yet, without wait: its read is queued); or <0.
 * Waits on the piece's tier word while the server reads it. */
static int tier_need(struct wsrv_model *m, uint32_t seg, bool pin, bool wait)
{
	uint32_t got[1];
	size_t ngot;
	int r = 0, fd[1];

	pthread_mutex_lock(&m->map_lock);
	while (!cl_piece_here(&m->pst[seg])) {
		/* The newest server's word: after a restart, its page's (the
		 * call below connects again when the server went away). */
		const uint32_t *w = cl_tier_word(m, seg);
		uint32_t seen = w ? cl_load_word(w) : 0;
		if ((r = cl_pieces_ask(m, &seg, 1, PIECES_ALL, got, fd, &ngot)) == 0) {
			r = map_got(m, got, fd, ngot);
			break;
		}
		if (r != -EAGAIN || !wait || !w)
			break;
		wait_read(m, w, seen);
	}
	if (r == 0 && pin && m->pst[seg].st == PS_MAPPED)
		cl_piece_to(m, seg, PS_PINNED);
	pthread_mutex_unlock(&m->map_lock);
	return r == -EAGAIN && !wait ? 0 : r < 0 ? r : 1;
}

/* Whether piece g's segment has passed the first load: 1, 0 (not yet,
 * or, with wait, once it has), or the load's failure. */
static int loaded(struct wsrv_model *m, uint32_t g, bool wait)
{
	uint32_t seg = cl_piece_seg(m, g);
	int r;

	if (wait)
		return (r = cl_wait_word(m, seg, -1)) < 0 ? r : 1;
	if (cl_word_now(m, seg) == RD_FAILED)
		return cl_load_failed(m);
	return cl_word_now(m, seg) == RD_READY;
}

/* Rounds of cl_tier_use_many while they bring pieces: asks for the
 * pieces of p[0..n) that are ok and not mapped (ASK_MAX at most) and maps
 * what comes. 1: every one is mapped; 0: the rest are still read, *w the
 * word of one of them and *seen its value before the request; <0. */
static int ask_round(struct wsrv_model *m, const uint32_t *p, const bool *ok, size_t n, const uint32_t **w,
		     uint32_t *seen)
{
	uint32_t ask[ASK_MAX], got[ASK_MAX], was[ASK_MAX];
	int fds[ASK_MAX], r;
	size_t k = 0, ngot;

	for (size_t i = 0; i < n && k < ASK_MAX; i++)
		if (ok[i] && !cl_piece_here(&m->pst[p[i]])) {
			const uint32_t *wi = cl_tier_word(m, p[i]);
			was[k] = wi ? cl_load_word(wi) : 0;
			ask[k++] = p[i];
		}
	if (k == 0)
		return 1;
	/* EAGAIN for the whole request (fds of this client unread, or a
	 * server started since that has not loaded the segment): nothing
	 * came, and the words say when to ask again. */
	if ((r = cl_pieces_ask(m, ask, k, PIECES_SOME, got, fds, &ngot)) < 0 && r != -EAGAIN)
		return r;
	if (r == -EAGAIN)
		ngot = 0;
	if ((r = map_got(m, got, fds, ngot)) < 0)
		return r;
	/* Some came (a reply carries no more than the server lets this
	 * client have unread): the others are asked for again at once. */
	if (ngot)
		return ask_round(m, p, ok, n, w, seen);
	for (size_t i = 0; i < k; i++) /* one still read: its word rises when it is */
		if (!cl_piece_here(&m->pst[ask[i]])) {
			*w = cl_tier_word(m, ask[i]);
			*seen = was[i];
			if (!*w)
				return cl_err(-EAGAIN, "model %s: the server reads segment %u again, and its page has no word to wait on",
					      m->name, ask[i]);
			break;
		}
	return 0;
}

int cl_tier_use_many(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, bool *got)
{
	bool *ok = calloc(n + 1, sizeof(*ok));
	const uint32_t *w = NULL;
	uint32_t seen = 0;
	int r = 0;

	if (!ok)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n && r >= 0; i++)
		if ((r = loaded(m, p[i], wait)) >= 0)
			ok[i] = r == 1;
	pthread_mutex_lock(&m->map_lock);
	while (r >= 0 && (r = ask_round(m, p, ok, n, &w, &seen)) == 0 && wait)
		wait_read(m, w, seen);
	/* Even after a failure: what came is the caller's to let go. */
	for (size_t i = 0; i < n; i++)
		if ((got[i] = ok[i] && cl_piece_here(&m->pst[p[i]])))
			m->pst[p[i]].use++;
	pthread_mutex_unlock(&m->map_lock);
	free(ok);
	if (r == -EDQUOT && !wait) /* a prefetch past the share: later */
		r = 0;
	return r < 0 ? r : 0;
}

/* Lets go of ids[0..n) at the server. A server started since does not
 * hold them for us: nothing to let go (ENOENT); nor does one that is
 * gone (ENOTCONN). */
static int give_back(struct wsrv_model *m, const uint32_t *ids, size_t n)
{
	int r = n ? cl_pieces_ask(m, ids, n, PIECES_RELEASE, NULL, NULL, &(size_t){ 0 }) : 0;

	return r == -ENOENT || r == -ENOTCONN ? 0 : r;
}

int cl_tier_drop_many(struct wsrv_model *m, const uint32_t *p, size_t n)
{
	uint32_t rel[ASK_MAX];
	size_t k = 0;
	int r = 0;

	pthread_mutex_lock(&m->map_lock);
	for (size_t i = 0; i < n && r == 0; i++) {
		uint32_t g = p[i];
		uint8_t *at;
		size_t len;
		uint64_t off;
		if (!m->pst[g].use || --m->pst[g].use || m->pst[g].st != PS_MAPPED)
			continue;
		/* The range stays reserved: a read of it faults, never reads
		 * bytes a later mapping put elsewhere. */
		cl_piece_range(m, g, &at, &len, &off);
		if (mmap(at, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
			r = cl_err(-errno, "cannot unmap segment %u: %s", g, strerror(errno));
			break;
		}
		cl_piece_to(m, g, PS_RESERVED);
		rel[k++] = g;
		if (k == ASK_MAX) {
			r = give_back(m, rel, k);
			k = 0;
		}
	}
	if (r == 0)
		r = give_back(m, rel, k);
	pthread_mutex_unlock(&m->map_lock);
	return r;
}

/* A layer on a disk tier is mapped and pinned until detach: its
 * segment, or its routed experts (units). */
WSRV_EXPORT int wsrv_model_wait(struct wsrv_model *m, int32_t layer, int timeout_ms)
{
	struct wsrv_layer l;
	int r;

	CL_NEED(m);
	if (layer != WSRV_LAYER_ALL && (r = cl_layer_nowait(m, layer, &l)) < 0)
		return r;
	if (!__atomic_load_n(&m->loading, __ATOMIC_ACQUIRE))
		return 0;
	if (layer == WSRV_LAYER_ALL)
		return cl_ready_wait_all(m, timeout_ms);
	if ((r = cl_piece_wait_for(m, l.segment, timeout_ms)) < 0)
		return r;
	if (cl_tiered(m, l.segment) && (r = tier_need(m, l.segment, true, true)) < 0)
		return r;
	/* The layer's routed experts too, each kept until detach. */
	for (uint32_t k = 0; k < m->nunits && r >= 0; k++)
		if (m->units[k].layer == layer)
			r = tier_need(m, m->nseg + k, true, true);
	return r < 0 ? r : 0;
}
