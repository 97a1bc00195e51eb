// SPDX-License-Identifier: MIT
/* srv_takeover.c - the serving side of a live hand-over (wsrvd
 * --take-over): a successor of the same user asks for the listening
 * socket, its lock, the state record and every model's memfds; this
 * server keeps serving until the successor says it serves (TakeOverDone),
 * then says Goodbye to its clients and exits without removing the socket,
 * which is the successor's now. A successor that leaves before that
 * changes nothing. */
#include "srv_takeover.h"
#include "srv_early.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "core_door.h"
#include "srv_handover.h"
#include "wsrv.pb-c.h"
#include "test_seam.h"

/* SRV_TAKEOVER_DEADLINE, or WSRV_TEST_TAKEOVER_DEADLINE_S (tests only). */
static double takeover_limit(void)
{
	const char *t = test_seam("WSRV_TEST_TAKEOVER_DEADLINE_S");

	return t && atof(t) > 0 ? atof(t) : SRV_TAKEOVER_DEADLINE;
}

/* Names and fds of everything handed over, into r (the state memfd as
 * r->owned_fd). names has WSRV_MAX_FDS entries of 32 bytes. */
static int takeover_fill(struct server *srv, struct reply *r, char names[][32])
{
	int n = 0, sfd = handover_state_fd(srv, srv->started_wall);

	if (sfd < 0)
		return sfd;
	r->owned_fd = sfd;
	snprintf(names[n], 32, "listen");
	r->fds[n++] = srv->lfd;
	snprintf(names[n], 32, "lock");
	r->fds[n++] = srv->lock;
	snprintf(names[n], 32, "wsrv-state");
	r->fds[n++] = sfd;
	size_t j = 0; /* the state record lists the current generations */
	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct loaded_model *lm = srv->models[i].lm;
		if (!srv_model_handed(&srv->models[i]))
			continue; /* the successor reads a tiered model again */
		snprintf(names[n], 32, "m%zu-manifest", j);
		r->fds[n++] = lm->manifest_fd;
		for (uint32_t k = 0; k < arena_nseg(lm->arena); k++) {
			snprintf(names[n], 32, "m%zu-seg%u", j, k);
			r->fds[n++] = arena_seg_fd(lm->arena, k);
		}
		j++;
	}
	r->nfds = n;
	return n;
}

static int takeover_refuse(struct server *srv, struct session *s, uint64_t seq, struct reply *r)
{
	uint32_t need = 3;

	for (size_t i = 0; i < srv->nmodels; i++)
		if (srv_model_handed(&srv->models[i]))
			need += 1 + arena_nseg(srv->models[i].lm->arena);
	if (s->cred.uid != 0 && s->cred.uid != geteuid())
		return srv_reply_error(r, seq, EPERM, "only root or the server's own user can take it over");
	/* EBUSY is final (the successor gives up); EAGAIN asks it to come
	 * back: after the load, or to start on its own once this one is gone. */
	if (srv->takeover)
		return srv_reply_error(r, seq, EBUSY, "another wsrvd is taking this server over already");
	if (srv_stopping(srv) || srv->lfd < 0)
		return srv_reply_error(r, seq, EAGAIN, "the server is stopping");
	if (early_any(srv))
		return srv_reply_error(r, seq, EAGAIN, "a model is still loading; take the server over once it is loaded");
	/* A publish or reload under way would be lost (its client left
	 * waiting for ever): the successor asks again. */
	if (srv->reload)
		return srv_reply_error(r, seq, EAGAIN, "a %s is under way; take the server over once it is done",
				       srv->publish ? "publish" : "reload");
	if (srv->publish)
		return srv_reply_error(r, seq, EAGAIN, "a producer is publishing; take the server over once it has committed or aborted");
	if (need > WSRV_MAX_FDS)
		return srv_reply_error(r, seq, E2BIG, "a take-over carries at most %d fds; this server holds %u (restart through systemd's fd store instead)",
				       WSRV_MAX_FDS, need);
	return 0;
}

int takeover_offer(struct server *srv, struct session *s, uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__TakeOverReply tr = WSRV__TAKE_OVER_REPLY__INIT;
	char names[WSRV_MAX_FDS][32], *ptrs[WSRV_MAX_FDS];
	int n, ret;

	if ((ret = takeover_refuse(srv, s, seq, r)) < 0)
		return ret;
	if (srv_tiered_model(srv))
		log_info("model %s has a disk tier: not handed over; the successor reads it again (its clients keep what they map)",
			 srv_tiered_model(srv));
	if ((n = takeover_fill(srv, r, names)) < 0) {
		srv_reply_error(r, seq, ENOMEM, "cannot write the state record");
		return n;
	}
	for (int i = 0; i < n; i++)
		ptrs[i] = names[i];
	tr.n_fd_names = (size_t)n;
	tr.fd_names = ptrs;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_TAKE_OVER;
	resp.take_over = &tr;
	srv_pack(r, &resp);
	srv->takeover = s->id;
	srv->takeover_deadline = mono_now() + takeover_limit();
	log_info("client %llu (pid %d) is taking the server over: %d fds handed to it",
		 (unsigned long long)s->id, (int)s->cred.pid, n);
	return 0;
}

int takeover_done(struct server *srv, struct session *s, uint64_t seq, struct reply *r)
{

	if (srv->takeover_expired && srv->takeover_expired == s->id)
		return srv_reply_error(r, seq, ETIMEDOUT, "the take-over took more than %.0f s; this server serves on",
				       takeover_limit());
	if (srv->takeover != s->id)
		return srv_reply_error(r, seq, EPERM, "this client is not taking the server over");
	srv_life_to(srv, SRV_HANDED_OVER);
	srv->successor_pid = s->cred.pid;
	log_info("pid %d serves now; leaving it the socket", (int)s->cred.pid);
	srv_reply_ok(r, seq);
	return 0;
}

bool takeover_pending(const struct server *srv)
{
	return srv->takeover && !srv_handed_over(srv);
}

void takeover_tick(struct server *srv)
{
	if (!takeover_pending(srv) || mono_now() < srv->takeover_deadline)
		return;
	log_warn("the take-over by client %llu did not finish within %.0f s; serving on (it is told so if it asks)",
		 (unsigned long long)srv->takeover, takeover_limit());
	srv->takeover_expired = srv->takeover;
	srv->takeover = 0;
}

void takeover_session_gone(struct server *srv, const struct session *s)
{
	if (srv->takeover_expired == s->id)
		srv->takeover_expired = 0;
	if (srv->takeover != s->id || srv_handed_over(srv))
		return;
	srv->takeover = 0;
	log_warn("the take-over by pid %d was abandoned; serving on", (int)s->cred.pid);
}
