// SPDX-License-Identifier: MIT
/* ready_wait.c - a model attached while the server loads it: reserved
 * address ranges, the readiness page's futex words, and the segments
 * fetched and mapped over their reservations (pieces.h) as they become
 * ready. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "attached.h"
#include "ready_wait.h"
#include "ready_read.h"
#include "pieces.h"
#include "clock.h"
#include "hugemap.h"
#include "packet.h"

static int reserve(struct wsrv_model *m, const Wsrv__AttachReply *ar)
{
	for (uint32_t i = 0; i < m->nseg; i++) {
		void *p;
		if (ar->segment_sizes[i] == 0 || ar->segment_sizes[i] > (1ull << 46))
			return cl_err(-EBADMSG, "the server announced a segment of %llu bytes",
				      (unsigned long long)ar->segment_sizes[i]);
		m->seg_len[i] = (size_t)ar->segment_sizes[i];
		p = hugemap_reserve(m->seg_len[i]); /* 2 MiB folios map whole */
		if (p == MAP_FAILED)
			return cl_err(-errno, "cannot reserve %zu bytes for segment %u: %s", m->seg_len[i], i,
				      strerror(errno));
		m->seg[i] = p;
	}
	return 0;
}

/* The per-piece state cl_ready_setup allocates (the lock aside). */
static void seg_state_free(struct wsrv_model *m)
{
	free(m->pst);
	cl_units_free(m);
	m->pst = NULL;
}

int cl_ready_setup(struct wsrv_model *m, const int *fds, int nfds, const Wsrv__AttachReply *ar)
{
	uint64_t sizes[WSRV_MAX_FDS];
	char err[256];
	int r;

	if ((size_t)nfds != 2 + ar->n_ready_segments)
		return cl_err(-EBADMSG, "the server sent %d fds for a loading model with %zu segments ready",
			      nfds, ar->n_ready_segments);
	m->pst = calloc(m->nseg + 1, sizeof(*m->pst));
	if (!m->pst || pthread_mutex_init(&m->map_lock, NULL) != 0) {
		seg_state_free(m);
		return cl_err(-ENOMEM, "out of memory");
	}
	if ((r = reserve(m, ar)) < 0)
		return r;
	for (uint32_t i = 0; i < m->nseg; i++)
		sizes[i] = m->seg_len[i];
	if (manifest_check(m->manifest, m->manifest_len, sizes, m->nseg, &m->v, err, sizeof(err)) < 0)
		return cl_err(-EBADMSG, "the server sent a bad manifest: %s", err);
	if (!(m->ready = cl_ready_gen_map(m, fds[1], ar->ready_size)))
		return -EBADMSG;
	/* The units first: a segment with them is mapped around them. */
	if ((r = cl_units_setup(m, &m->ready->rv)) < 0)
		return r;
	for (size_t k = 0; k < ar->n_ready_segments; k++) {
		uint32_t g = ar->ready_segments[k];
		if (g >= m->nseg || cl_piece_here(&m->pst[g]))
			return cl_err(-EBADMSG, "the server sent segment %u twice or out of range", g);
		if ((r = cl_map_over(m, g, fds[2 + k])) < 0)
			return r;
	}
	__atomic_store_n(&m->loading, true, __ATOMIC_RELEASE);
	return 0;
}

void cl_ready_free(struct wsrv_model *m)
{
	cl_ready_gen_free(m->ready);
	m->ready = NULL;
	if (m->pst)
		pthread_mutex_destroy(&m->map_lock);
	seg_state_free(m);
}


int cl_load_failed(const struct wsrv_model *m)
{
	const struct rd_header *h = cl_rv(m)->h;
	char msg[RD_MESSAGE_MAX];
	uint32_t t = h->failed_tensor;
	const char *name = t < m->v.h->ntensors ? m->v.strings + m->v.tensors[t].name_off : "(none named)";

	memcpy(msg, h->message, sizeof(msg));
	msg[sizeof(msg) - 1] = 0;
	return cl_err(-EIO, "model %s failed to load at tensor %s: %s", m->name, name, msg);
}




uint32_t cl_word_now(const struct wsrv_model *m, uint32_t seg)
{
	return cl_load_word(cl_page_word(m, seg));
}

/* A server that died mid-load never finishes the page: when m's went
 * away, the session connects again, which re-attaches m to the new
 * server's load (ready_resume.c). 0 when m waits on a live server now. */
static int still_served(struct wsrv_model *m)
{
	int r = cl_revive(m->c);

	if (r < 0)
		return cl_err(-ENOTCONN, "the server went away while model %s was loading, and connecting again failed: %s",
			      m->name, wsrv_last_error());
	return r == 1 ? cl_model_fresh(m) : 0;
}

/* Waits for a word (seg, or RD_WORD_MODEL) to leave RD_LOADING, up to
 * timeout_ms (< 0: for ever). */
int cl_wait_word(struct wsrv_model *m, uint32_t seg, int timeout_ms)
{
	double left = timeout_ms < 0 ? -1 : timeout_ms / 1e3, t0 = mono_now();

	for (;;) {
		const uint32_t *w = cl_page_word(m, seg);
		uint32_t v = cl_load_word(w);
		double slice = WAIT_SLICE_MS / 1e3;
		int r;
		if (v == RD_READY)
			return 0;
		if (v == RD_FAILED)
			return cl_load_failed(m);
		if (left >= 0) {
			double rem = left - (mono_now() - t0);
			if (rem <= 0)
				return cl_err(-ETIMEDOUT, "model %s is still loading", m->name);
			slice = rem < slice ? rem : slice;
		}
		struct timespec ts = { (time_t)slice, (long)((slice - (double)(time_t)slice) * 1e9) };
		syscall(SYS_futex, w, FUTEX_WAIT, RD_LOADING, &ts, NULL, 0);
		if (cl_load_word(w) == RD_LOADING && w == cl_page_word(m, seg) && (r = still_served(m)) < 0)
			return r;
	}
}

/* Maps the segments whose fds a re-attach brought (ready_resume.c). Under
 * map_lock. */
static int map_carried(struct wsrv_model *m)
{
	struct ready_gen *g = __atomic_load_n(&m->ready, __ATOMIC_ACQUIRE);
	int r = 0;

	for (uint32_t i = 0; g->fds && i < m->nseg; i++) {
		if (g->fds[i] < 0)
			continue;
		if (r == 0 && !cl_piece_here(&m->pst[i]))
			r = cl_map_over(m, i, g->fds[i]);
		close(g->fds[i]);
		g->fds[i] = -1;
	}
	return r;
}

/* Asks for the fds of segments ready and not mapped (at most one reply's
 * worth), and maps them. Under map_lock. A server that says "not loaded
 * yet" is one that took over after a restart, later than the page this
 * client read: nothing is mapped, and the caller waits again. */
static int fetch_ready(struct wsrv_model *m)
{
	uint32_t want[WSRV_MAX_FDS], got[WSRV_MAX_FDS];
	int fds[WSRV_MAX_FDS], r;
	size_t n = 0, ngot = 0;

	if ((r = map_carried(m)) < 0)
		return r;
	for (uint32_t i = 0; i < m->nseg && n < WSRV_MAX_FDS - 2; i++)
		if (!cl_piece_here(&m->pst[i]) && cl_load_word(cl_page_word(m, i)) == RD_READY && !cl_tiered(m, i))
			want[n++] = i;
	if (n == 0)
		return 0;
	if ((r = cl_pieces_ask(m, want, n, PIECES_ALL, got, fds, &ngot)) < 0)
		return r == -EAGAIN ? 0 : r;
	for (size_t k = 0; k < ngot; k++) {
		if (r == 0)
			r = cl_map_over(m, got[k], fds[k]);
		close(fds[k]);
	}
	return r;
}


/* Maps what is ready; once every segment is, the model is loaded here. */
static int map_ready(struct wsrv_model *m)
{
	bool all = true;
	int r;

	pthread_mutex_lock(&m->map_lock);
	r = fetch_ready(m);
	for (uint32_t i = 0; i < m->nseg; i++)
		all = all && cl_piece_here(&m->pst[i]);
	/* Units come and go: a model with them is never mapped whole. */
	if (r == 0 && all && !m->nunits && cl_load_word(cl_page_word(m, RD_WORD_MODEL)) == RD_READY) {
		m->manifest_hash = cl_rv(m)->h->manifest_hash; /* the loaded model's identity */
		__atomic_store_n(&m->loading, false, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&m->map_lock);
	return r;
}

static bool seg_mapped(struct wsrv_model *m, uint32_t seg)
{
	bool v;

	pthread_mutex_lock(&m->map_lock);
	v = cl_piece_here(&m->pst[seg]);
	pthread_mutex_unlock(&m->map_lock);
	return v;
}

/* Waits until segment seg is ready and mapped, up to timeout_ms; a disk
 * tier's only for its first load (a lookup: its bytes are there while a
 * stream holds the layer, its pointer NULL else). */
int cl_piece_wait_for(struct wsrv_model *m, uint32_t seg, int timeout_ms)
{
	int r;

	if (seg >= m->nseg)
		return cl_err(-EINVAL, "no segment %u", seg);
	if (cl_tiered(m, seg))
		return cl_wait_word(m, seg, timeout_ms);
	/* More than one round only when the server changed under the wait
	 * (a restart mid-load): the new one's word is waited on. */
	for (int round = 0; !seg_mapped(m, seg); round++) {
		if (round == 16)
			return cl_err(-EBADMSG, "the server says segment %u of model %s is loaded but does not give it",
				      seg, m->name);
		if ((r = cl_wait_word(m, seg, timeout_ms)) < 0 || (r = map_ready(m)) < 0)
			return r;
	}
	return 0;
}

int cl_piece_wait_loading(struct wsrv_model *m, uint32_t seg)
{
	return cl_piece_wait_for(m, seg, -1);
}

bool cl_piece_mapped_loading(struct wsrv_model *m, uint32_t seg)
{
	return seg < cl_npieces(m) && seg_mapped(m, seg);
}

int cl_piece_try_loading(struct wsrv_model *m, uint32_t seg)
{
	uint32_t v;
	int r;

	if (cl_piece_mapped(m, seg))
		return 1;
	if (seg >= m->nseg)
		return cl_err(-EINVAL, "no segment %u", seg);
	v = cl_load_word(cl_page_word(m, seg));
	if (v == RD_FAILED)
		return cl_load_failed(m);
	if (v != RD_READY || cl_tiered(m, seg)) /* a tier's: asked for by its user */
		return 0;
	if ((r = map_ready(m)) < 0)
		return r;
	return seg_mapped(m, seg) ? 1 : 0;
}

static uint32_t count_mapped(struct wsrv_model *m)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->nseg; i++)
		n += seg_mapped(m, i);
	return n;
}

int cl_ready_wait_all(struct wsrv_model *m, int timeout_ms)
{
	double t0 = mono_now();
	int r = 0;

	while (r == 0 && __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE)) {
		uint32_t before;
		if ((r = cl_wait_word(m, RD_WORD_MODEL, timeout_ms)) < 0)
			break;
		before = count_mapped(m);
		r = map_ready(m);
		/* A disk tier's model is whole once loaded: its tiered segments
		 * are mapped as they are needed, not now. */
		if (r == 0 && cl_rv(m)->tier && cl_load_word(cl_page_word(m, RD_WORD_MODEL)) == RD_READY)
			return 0;
		/* READY, yet nothing new mapped: a broken page. (A model word
		 * back to LOADING is a new server's, after a restart.) */
		if (r == 0 && __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE) && count_mapped(m) == before &&
		    cl_load_word(cl_page_word(m, RD_WORD_MODEL)) == RD_READY)
			return cl_err(-EBADMSG, "the server says model %s is loaded but a segment is not ready",
				      m->name);
		if (timeout_ms >= 0 && mono_now() - t0 > timeout_ms / 1e3 + 60)
			return cl_err(-ETIMEDOUT, "model %s: segments still not mapped", m->name);
	}
	return r;
}

WSRV_EXPORT int wsrv_model_progress(const struct wsrv_model *m, uint64_t *placed, uint64_t *total)
{
	CL_NEED(m);
	if (placed)
		*placed = m->ready ? __atomic_load_n(&cl_rv(m)->h->placed_bytes, __ATOMIC_RELAXED) : m->v.h->tensor_bytes;
	if (total)
		*total = m->ready ? cl_rv(m)->h->total_bytes : m->v.h->tensor_bytes;
	return __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE) ? 1 : 0;
}
