// SPDX-License-Identifier: MIT
/* srv_attach.c - the Attach reply (srv_attach.h). */
#include "srv_attach.h"

#include "core_door.h"
#include "tier_door.h"
#include "wsrv.pb-c.h"

/* Loading: the layout and the readiness page, then the ready segments
 * that fit the client's room. */
static void loading_fds(const struct srv_model *sm, struct reply *r, Wsrv__AttachReply *ar, uint32_t *ready)
{
	const struct loaded_model *lm = sm->lm;
	uint32_t room = r->fd_room < WSRV_MAX_FDS ? r->fd_room : WSRV_MAX_FDS;

	r->fds[0] = lm->layout_fd;
	r->fds[1] = lm->ready.fd;
	r->nfds = 2;
	for (uint32_t i = 0; i < arena_nseg(lm->arena); i++)
		if ((uint32_t)r->nfds < room && ready_page_segment_ready(&lm->ready, i) && !tier_on_disk(lm->tier, i)) {
			ready[ar->n_ready_segments++] = i;
			r->fds[r->nfds++] = arena_seg_fd(lm->arena, i);
		}
	ar->manifest_size = lm->layout_size;
	ar->loading = true;
	ar->ready_size = lm->ready.size;
	ar->ready_segments = ready;
}

/* Loaded: the manifest, then every segment. */
static void loaded_fds(const struct loaded_model *lm, struct reply *r, Wsrv__AttachReply *ar)
{
	r->fds[0] = lm->manifest_fd;
	for (uint32_t i = 0; i < arena_nseg(lm->arena); i++)
		r->fds[i + 1] = arena_seg_fd(lm->arena, i);
	r->nfds = (int)arena_nseg(lm->arena) + 1;
	ar->manifest_size = lm->manifest_size;
	ar->manifest_hash = lm->manifest_hash;
}

int srv_attach_reply(struct server *srv, uint32_t mi, uint32_t attach_id, uint64_t seq, struct reply *r)
{
	const struct srv_model *sm = &srv->models[mi];
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__AttachReply ar = WSRV__ATTACH_REPLY__INIT;
	uint64_t sizes[WSRV_MAX_FDS];
	uint32_t ready[WSRV_MAX_FDS];

	for (uint32_t i = 0; i < arena_nseg(sm->lm->arena); i++)
		sizes[i] = arena_seg_size(sm->lm->arena, i);
	/* A disk tier's model stays a loading one to its clients: they ask
	 * for each tiered segment as they need it. */
	if (srv_model_loading(sm) || sm->lm->tier)
		loading_fds(sm, r, &ar, ready);
	else
		loaded_fds(sm->lm, r, &ar);
	ar.attach_id = attach_id;
	ar.generation = sm->generation;
	ar.n_segment_sizes = arena_nseg(sm->lm->arena);
	ar.segment_sizes = sizes;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_ATTACH;
	resp.attach = &ar;
	srv_pack(r, &resp);
	return 0;
}
