// SPDX-License-Identifier: MIT
/* ready_resume.c - a model attached while its server loads it, when that
 * server goes away mid-load (a crash, a restart): the next connection
 * attaches it again, and when the new server lays the model out the same
 * way (the same generation, segments and layout, checksums aside), its
 * readiness page takes over from the old one. Segments already mapped stay
 * mapped: each was sealed whole before its fd was handed out, and the new
 * server reads the same files into the same places. The rest arrive from
 * the new server as it loads them. A new server that has the model loaded
 * already hands every segment over at once, with a page made here that
 * says so. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attached.h"

/* Whether the manifest at b (len bytes, m's length) lays the model out as
 * m's does: every byte equal but the tensors' checksums, which a layout
 * sent while loading leaves 0. */
static bool same_layout(const struct wsrv_model *m, const uint8_t *b)
{
	const uint8_t *a = m->manifest;
	size_t t0 = m->v.h->tensors_off, rec = sizeof(struct mf_tensor);
	size_t tn = t0 + m->v.h->ntensors * rec, len = m->manifest_len;

	if (memcmp(a, b, t0) != 0 || memcmp(a + tn, b + tn, len - tn) != 0)
		return false;
	for (size_t i = 0; i < m->v.h->ntensors; i++)
		if (memcmp(a + t0 + i * rec, b + t0 + i * rec, offsetof(struct mf_tensor, xxh3)) != 0)
			return false;
	return true;
}

/* The reply's generation and segments are m's. */
static bool same_shape(const struct wsrv_model *m, const Wsrv__AttachReply *ar)
{
	if (ar->generation != m->generation || ar->manifest_size != m->manifest_len ||
	    ar->n_segment_sizes != m->nseg)
		return false;
	for (uint32_t i = 0; i < m->nseg; i++)
		if (ar->segment_sizes[i] != m->seg_len[i])
			return false;
	return true;
}

/* The reply's manifest (fd), checked and mapped read-only (m's length),
 * or NULL. */
static const uint8_t *map_manifest(const struct wsrv_model *m, int fd)
{
	uint64_t size;
	void *b;

	if (cl_check_fd(fd, "manifest", m->manifest_len, &size) < 0)
		return NULL;
	b = mmap(NULL, m->manifest_len, PROT_READ, MAP_SHARED, fd, 0);
	return b == MAP_FAILED ? NULL : b;
}

/* A page for a model the new server has loaded: every word READY, the
 * checksums from its manifest (mapped at b, already found to be m's
 * layout). */
static struct ready_gen *loaded_page(const struct wsrv_model *m, const Wsrv__AttachReply *ar,
				     const uint8_t *b)
{
	uint32_t nt = m->v.h->ntensors;
	size_t len = (size_t)ready_size(m->nseg, nt), t0 = m->v.h->tensors_off;
	struct ready_gen *g = calloc(1, sizeof(*g));
	struct rd_header *h;
	uint8_t *p;
	char err[128];

	if (!g)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(g);
		return NULL;
	}
	g->page = p;
	g->len = len;
	h = (struct rd_header *)p;
	ready_init(p, m->nseg, nt, m->v.h->tensor_bytes, false, 0);
	h->manifest_hash = ar->manifest_hash;
	h->placed_bytes = h->total_bytes;
	for (uint32_t i = 0; i < m->nseg; i++)
		((uint32_t *)(p + h->segments_off))[i] = RD_READY;
	for (uint32_t i = 0; i < nt; i++)
		memcpy(p + h->xxh3_off + i * sizeof(uint64_t),
		       b + t0 + i * sizeof(struct mf_tensor) + offsetof(struct mf_tensor, xxh3), sizeof(uint64_t));
	h->state = RD_READY;
	if (mprotect(p, len, PROT_READ) < 0 || ready_check(p, len, m->nseg, nt, &g->rv, err, sizeof(err)) < 0)
		goto fail;
	return g;
fail:
	cl_ready_gen_free(g);
	return NULL;
}

/* Moves the fds of the reply's segments (ready ones, or all of them) into
 * g, leaving -1 in fds. */
static int carry_fds(struct ready_gen *g, const struct wsrv_model *m, const Wsrv__AttachReply *ar,
		     int *fds, int n)
{
	size_t k, count = ar->loading ? ar->n_ready_segments : m->nseg;

	if ((size_t)n != count + (ar->loading ? 2 : 1) || !(g->fds = malloc(m->nseg * sizeof(int))))
		return -EBADMSG;
	for (uint32_t i = 0; i < m->nseg; i++)
		g->fds[i] = -1;
	for (k = 0; k < count; k++) {
		uint32_t seg = ar->loading ? ar->ready_segments[k] : (uint32_t)k;
		int *from = &fds[k + (ar->loading ? 2 : 1)];
		if (seg >= m->nseg || g->fds[seg] >= 0)
			return -EBADMSG;
		g->fds[seg] = *from;
		*from = -1;
	}
	return 0;
}

int cl_ready_resume(struct wsrv_model *m, const Wsrv__AttachReply *ar, int *fds, int n)
{
	struct ready_gen *g = NULL;
	const uint8_t *b;
	bool same;

	if (n < 1 || (ar->loading && n < 2) || !m->ready || !same_shape(m, ar) || !(b = map_manifest(m, fds[0])))
		return -ESTALE;
	same = same_layout(m, b);
	if (same)
		g = ar->loading ? cl_ready_gen_map(m, fds[1], ar->ready_size) : loaded_page(m, ar, b);
	munmap((void *)b, m->manifest_len);
	if (!same)
		return -ESTALE;
	if (!g)
		return -EBADMSG;
	if (carry_fds(g, m, ar, fds, n) < 0) {
		cl_ready_gen_free(g);
		return cl_err(-EBADMSG, "the server sent %d fds for model %s's segments", n, m->name);
	}
	g->older = m->ready;
	__atomic_store_n(&m->ready, g, __ATOMIC_RELEASE);
	cl_debug("model %s: its load goes on at the new server (%s there)", m->name,
		 ar->loading ? "loading" : "loaded");
	return 0;
}
