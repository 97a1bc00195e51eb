// SPDX-License-Identifier: MIT
/* srv_pieces.c - AttachSegments: taking a loading model's pieces, taking
 * and releasing a disk tier's (srv_pieces.h). */
#include "srv_pieces.h"

#include <errno.h>

#include "srv_attachments.h"
#include "srv_identity.h"
#include "core_door.h"
#include "tier_door.h"
#include "wsrv.pb-c.h"

/* The pieces of lm: its segments, then a disk tier's units. */
static uint32_t piece_count(const struct loaded_model *lm)
{
	return lm->tier ? tier_count(lm->tier) : arena_nseg(lm->arena);
}

/* The segment piece g lies in. */
static uint32_t piece_segment(const struct loaded_model *lm, uint32_t g)
{
	return lm->tier ? tier_segment_of(lm->tier, g) : g;
}

static bool segment_ready(const struct srv_model *sm, uint32_t seg)
{
	return !srv_model_loading(sm) || ready_page_segment_ready(&sm->lm->ready, seg);
}

/* What every request must be: 1 to WSRV_MAX_FDS - 2 pieces, each once and
 * in range; to take, no more than the client may have unread, and each
 * piece's segment loaded. Letting go needs nothing loaded: a client of
 * the server before this one lets go of what that one held (ENOENT). 0,
 * or the error replied. */
static int pieces_check(const struct server *srv, const struct session *s, const struct srv_model *sm,
			const Wsrv__AttachSegments *q, uint64_t seq, struct reply *r)
{
	const struct loaded_model *lm = sm->lm;

	if (q->n_segments == 0 || q->n_segments > WSRV_MAX_FDS - 2)
		return srv_reply_error(r, seq, EINVAL, "ask for 1 to %u segments at a time", WSRV_MAX_FDS - 2);
	/* More than the client may ever have unread: asking again never
	 * helps, so not EAGAIN. */
	if (!q->release && !q->partial && q->n_segments > srv->fd_budget)
		return srv_reply_error(r, seq, E2BIG, "%zu segments asked for at once, and this client may have at most "
				       "%u file descriptors unread: ask for fewer at a time, or with partial",
				       q->n_segments, srv->fd_budget);
	if (!q->release && (q->partial ? r->fd_room == 0 : q->n_segments > r->fd_room))
		return srv_reply_error(r, seq, EAGAIN,
				       "%u file descriptors sent to this client are still unread; read the replies first",
				       s->fds_unread);
	for (size_t i = 0; i < q->n_segments; i++) {
		uint32_t g = q->segments[i];
		if (g >= piece_count(lm))
			return srv_reply_error(r, seq, EINVAL, "model '%s' has no segment %u", lm->model->name, g);
		for (size_t k = 0; k < i; k++)
			if (q->segments[k] == g)
				return srv_reply_error(r, seq, EINVAL, "segment %u asked for twice", g);
		if (!q->release && !segment_ready(sm, piece_segment(lm, g)))
			return srv_reply_error(r, seq, EAGAIN, "segment %u of '%s' is not loaded yet", g,
					       lm->model->name);
	}
	return 0;
}

/* Release: every piece held goes, whatever comes after one that is not;
 * one not held (nor on the tier) is ENOENT. 0, or the error replied. */
static int pieces_release(const struct loaded_model *lm, uint64_t holder, const Wsrv__AttachSegments *q,
			  uint64_t seq, struct reply *r)
{
	size_t missing = SIZE_MAX;

	for (size_t i = 0; lm->tier && i < q->n_segments; i++)
		if (tier_on_disk(lm->tier, q->segments[i]) && tier_release(lm->tier, holder, q->segments[i]) < 0 &&
		    missing == SIZE_MAX)
			missing = i;
	if (missing != SIZE_MAX)
		return srv_reply_error(r, seq, ENOENT, "segment %u of '%s' is not held by this attachment",
				       q->segments[missing], lm->model->name);
	return 0;
}

/* Taking from a disk tier: each held for the attachment, its fd into r,
 * its number into given[*ngiven]. Partial: as many as this client may
 * have unread, the others left for its next request. Otherwise all or
 * none: a piece still to be read answers EAGAIN (replied, 1: the answer a
 * client waits on, not its error) and the holds taken before it are let
 * go again. 0, 1, or the error replied. */
static int pieces_take_tier(const struct loaded_model *lm, uint64_t holder, const struct tier_who *who,
			    const Wsrv__AttachSegments *q, uint64_t seq, struct reply *r, uint32_t *given, size_t *ngiven)
{
	char msg[1024] = "";

	if (q->partial) {
		int rc = tier_take_some(lm->tier, holder, who, q->segments, q->n_segments, r->fd_room, r->fds,
					given, ngiven, msg, sizeof(msg));
		return rc < 0 ? srv_reply_error(r, seq, -rc, "model %s: %s", lm->model->name, msg) : 0;
	}
	for (size_t i = 0; i < q->n_segments; i++) {
		int rc = tier_take(lm->tier, holder, who, q->segments[i], &r->fds[*ngiven], msg, sizeof(msg));
		if (rc == 0) {
			given[(*ngiven)++] = q->segments[i];
			continue;
		}
		for (size_t k = 0; k < *ngiven; k++)
			tier_release(lm->tier, holder, given[k]);
		if (rc != -EAGAIN)
			return srv_reply_error(r, seq, -rc, "model %s: %s", lm->model->name, msg);
		srv_reply_error(r, seq, EAGAIN, "segment %u of '%s' is being read from disk", q->segments[i],
				lm->model->name);
		return 1;
	}
	return 0;
}

/* Taking from a model without a tier (loading, or loaded: the checks
 * said each is ready): the arena's own fds, nothing held. Partial: at
 * most the client's room of unread fds, which bounds what is in flight;
 * the rest are for its next request. */
static void pieces_take_loading(const struct loaded_model *lm, const Wsrv__AttachSegments *q, struct reply *r,
				uint32_t *given, size_t *ngiven)
{
	size_t n = q->partial && q->n_segments > r->fd_room ? r->fd_room : q->n_segments;

	for (size_t i = 0; i < n; i++) {
		r->fds[i] = arena_seg_fd(lm->arena, q->segments[i]);
		given[(*ngiven)++] = q->segments[i];
	}
}

int pieces_handle(struct server *srv, struct session *s, const Wsrv__AttachSegments *q, uint64_t seq,
		  struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__SegmentsReply sr = WSRV__SEGMENTS_REPLY__INIT;
	const struct srv_model *sm;
	struct tier_who who = { 0 };
	uint32_t given[WSRV_MAX_FDS];
	size_t ngiven = 0;
	int rc;

	if (!(sm = srv_attached_model(srv, s, q->attach_id, seq, r)))
		return -EBADF;
	if ((rc = pieces_check(srv, s, sm, q, seq, r)) != 0)
		return rc;
	if (sm->lm->tier && !q->release)
		who = (struct tier_who){ srv_account(srv, s), s->cred.uid, srv_users_of(srv, (uint32_t)(sm - srv->models)) };
	if (q->release)
		rc = pieces_release(sm->lm, srv_tier_holder(s, q->attach_id), q, seq, r);
	else if (sm->lm->tier)
		rc = pieces_take_tier(sm->lm, srv_tier_holder(s, q->attach_id), &who, q, seq, r, given, &ngiven);
	else
		pieces_take_loading(sm->lm, q, r, given, &ngiven);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	/* A release carries no fds back. */
	r->nfds = (int)ngiven;
	sr.n_segments = q->release ? q->n_segments : ngiven;
	sr.segments = q->release ? q->segments : given;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_SEGMENTS;
	resp.segments = &sr;
	srv_pack(r, &resp);
	return 0;
}
