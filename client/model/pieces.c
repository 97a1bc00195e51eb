// SPDX-License-Identifier: MIT
/* pieces.c - AttachSegments and the mapping of what it sends (pieces.h). */
#include "pieces.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "lifecycle.h"
#include "packet.h"
#include "ready_verify.h"
#include "ready_read.h"
#include "ready_wait.h"

/* Whether the reply's ids are some of ids[0..n), in order, each once. */
static bool some_of(const uint32_t *got, size_t ngot, const uint32_t *ids, size_t n)
{
	size_t j = 0;

	for (size_t i = 0; i < ngot; i++, j++) {
		while (j < n && ids[j] != got[i])
			j++;
		if (j == n)
			return false;
	}
	return true;
}

int cl_pieces_ask(struct wsrv_model *m, const uint32_t *ids, size_t n, enum piece_ask how, uint32_t *got,
		  int *fds, size_t *ngot)
{
	bool release = how == PIECES_RELEASE, partial = how == PIECES_SOME;
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__AttachSegments as = WSRV__ATTACH_SEGMENTS__INIT;
	int rfds[WSRV_MAX_FDS], nfds = 0, r;
	const Wsrv__SegmentsReply *sr;
	Wsrv__Response *resp;

	as.segments = (uint32_t *)ids;
	as.n_segments = n;
	as.release = release;
	as.partial = partial;
	q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
	q.attach_segments = &as;
	*ngot = 0;
	if ((r = cl_call_model(m, &as.attach_id, &q, &resp, rfds, WSRV_MAX_FDS, &nfds)) < 0)
		return r;
	sr = resp->body_case == WSRV__RESPONSE__BODY_SEGMENTS ? resp->segments : NULL;
	if (!sr || (release ? nfds != 0 : (size_t)nfds != sr->n_segments || (!partial && sr->n_segments != n) ||
					    !some_of(sr->segments, sr->n_segments, ids, n)))
		r = cl_err(-EBADMSG, "the server sent the wrong reply to AttachSegments");
	if (r == 0 && !release && sr->n_segments) {
		memcpy(got, sr->segments, sr->n_segments * sizeof(*got));
		memcpy(fds, rfds, (size_t)nfds * sizeof(*fds));
		*ngot = sr->n_segments;
		nfds = 0;
	}
	pkt_close_fds(rfds, nfds);
	wsrv__response__free_unpacked(resp, NULL);
	return r;
}

static const char *const names[CL_PIECE_STATE_MAX] = {
	[PS_RESERVED] = "reserved", [PS_MAPPED] = "mapped", [PS_PINNED] = "pinned",
};

static const unsigned moves[CL_PIECE_STATE_MAX] = {
	[PS_RESERVED] = LIFE_BIT(PS_MAPPED),
	[PS_MAPPED] = LIFE_BIT(PS_PINNED) | LIFE_BIT(PS_RESERVED),
	[PS_PINNED] = 0,
};

static const struct lifecycle piece_life = { "piece", CL_PIECE_STATE_MAX, names, moves };

void cl_piece_to(struct wsrv_model *m, uint32_t g, enum cl_piece_state to)
{
	struct cl_piece_st *p = &m->pst[g];

	assert(to != PS_RESERVED || p->use == 0);
	if (life_check(&piece_life, g, p->st, to) == 0)
		p->st = to;
}

int cl_map_over(struct wsrv_model *m, uint32_t g, int fd)
{
	uint64_t size, off, out = g < m->nseg ? cl_units_left_out(m, g) : 0;
	uint8_t *at;
	size_t len;
	int r;

	/* A segment's memfd holds it but for its units; a unit's, its bytes
	 * alone. A disk tier's piece may be cut once every holder let it go
	 * (memfd_check_cuttable): this one holds it until it unmaps it. */
	cl_piece_range(m, g, &at, &len, &off);
	r = g >= m->nseg || cl_tiered(m, g) ? cl_check_piece_fd(fd, len, &size)
					    : cl_check_fd(fd, "segment", len - out, &size);
	if (r < 0 || (r = cl_resume_check(m, g)) < 0)
		return r;
	if (out)
		r = cl_units_map_around(m, g, fd);
	else if (mmap(at, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, (off_t)off) == MAP_FAILED)
		r = cl_err(-errno, "cannot map segment %u: %s", g, strerror(errno));
	if (r == 0)
		cl_piece_to(m, g, PS_MAPPED);
	return r;
}
