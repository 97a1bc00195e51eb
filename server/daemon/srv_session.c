// SPDX-License-Identifier: MIT
/* srv_session.c - a client's session: its attachments and leases. */
#include "srv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "log.h"
#include "tier.h"
#include "srv_publish.h"
#include "srv_models.h"
#include "srv_takeover.h"

struct session *session_new(struct server *srv, int fd)
{
	struct session *s = calloc(1, sizeof(*s));

	if (s)
		s->rbuf = malloc((size_t)srv->cfg.max_message + 1);
	if (!s || !s->rbuf) {
		if (s)
			free(s);
		close(fd);
		return NULL;
	}
	s->id = ++srv->next_session;
	s->fd = fd;
	s->connected_at = mono_now();
	s->next_lease = 1;
	s->next = srv->sessions;
	srv->sessions = s;
	srv->nsessions++;
	srv->clients_total++;
	return s;
}

void session_release_all(struct server *srv, struct session *s)
{
	for (uint32_t i = 0; i < s->nleases; i++) {
		uint32_t m = s->attach_model[s->leases[i].attach_id - 1];
		if (m)
			srv->models[m - 1].leases--;
	}
	s->nleases = 0;
	region_release_session(srv, s);
	takeover_session_gone(srv, s);
	publish_session_gone(srv, s);
	for (uint32_t i = 0; i < s->nattach; i++)
		if (s->attach_model[i]) {
			struct tier *t = srv->models[s->attach_model[i] - 1].lm->tier;
			if (t)
				tier_release_all(t, srv_tier_holder(s, i + 1));
			srv->models[s->attach_model[i] - 1].attached--;
			srv_retired_check(srv, &srv->models[s->attach_model[i] - 1]);
		}
	free(s->attach_model);
	s->attach_model = NULL;
	s->nattach = 0;
}

void session_free(struct server *srv, struct session *s)
{
	struct session **p = &srv->sessions;

	while (*p && *p != s)
		p = &(*p)->next;
	if (*p)
		*p = s->next;
	srv->nsessions--;
	for (uint32_t i = 0; i < s->nstreams; i++)
		srv_stream_fold(srv, &s->streams[i]); /* the counters keep them */
	session_release_all(srv, s);
	free(s->leases);
	free(s->rbuf);
	close(s->fd);
	free(s);
}

/* Is one of the peer's supplementary groups listed? */
static bool groups_allowed(const struct server *srv, int fd)
{
	gid_t groups[256];
	socklen_t len = sizeof(groups);

	/* A peer in more than 256 groups is checked on its first 256 only:
	 * the kernel then answers ERANGE, and we refuse rather than guess. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t g = 0; g < len / sizeof(gid_t); g++)
		for (size_t i = 0; i < srv->cfg.n_allow_gid; i++)
			if (srv->cfg.allow_gid[i] == groups[g])
				return true;
	return false;
}

bool srv_own_uid_refused(const struct server *srv, const struct ucred *c)
{
	return srv->cfg.refuse_own_uid && c->uid != 0 && c->uid == geteuid();
}

bool srv_peer_allowed(const struct server *srv, int fd, const struct ucred *c)
{
	if (c->uid == 0)
		return true;
	if (srv_own_uid_refused(srv, c))
		return false;
	for (size_t i = 0; i < srv->cfg.n_allow_uid; i++)
		if (srv->cfg.allow_uid[i] == c->uid)
			return true;
	for (size_t i = 0; i < srv->cfg.n_allow_gid; i++)
		if (srv->cfg.allow_gid[i] == c->gid)
			return true;
	return srv->cfg.n_allow_gid > 0 && groups_allowed(srv, fd);
}

uint32_t srv_fd_room(const struct server *srv, struct session *s)
{
	int queued = 0;

	/* Every byte of every reply sent is read once the socket's send queue
	 * is empty (a SEQPACKET skb stays charged to us until then), and so
	 * is every fd that travelled with them. */
	if (s->fds_unread && s->pending_sends == 0 &&
	    ioctl(s->fd, SIOCOUTQ, &queued) == 0 && queued == 0)
		s->fds_unread = 0;
	return s->fds_unread >= srv->fd_budget ? 0 : srv->fd_budget - s->fds_unread;
}

