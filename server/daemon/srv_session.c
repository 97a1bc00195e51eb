// SPDX-License-Identifier: MIT
/* srv_session.c - a client's session: its attachments and leases. */
#include "srv.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

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
	s->numa_node = -1;
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
	for (uint32_t i = 0; i < s->nattach; i++)
		if (s->attach_model[i])
			srv->models[s->attach_model[i] - 1].attached--;
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
	session_release_all(srv, s);
	free(s->leases);
	free(s->rbuf);
	close(s->fd);
	free(s);
}

bool srv_peer_allowed(const struct server *srv, const struct ucred *c)
{
	if (c->uid == 0)
		return true;
	for (size_t i = 0; i < srv->cfg.n_allow_uid; i++)
		if (srv->cfg.allow_uid[i] == c->uid)
			return true;
	for (size_t i = 0; i < srv->cfg.n_allow_gid; i++)
		if (srv->cfg.allow_gid[i] == c->gid)
			return true;
	return false;
}
