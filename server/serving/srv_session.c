// SPDX-License-Identifier: MIT
/* srv_session.c - a client's session: its attachments and leases. */
#include "holds_door.h"
#include "core_door.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "log.h"
#include "tier_door.h"
#include "generations_door.h"

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
	s->pidfd = -1;
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
	lease_release_all(srv, s);
	region_release_session(srv, s);
	takeover_session_gone(srv, s);
	publish_session_gone(srv, s);
	attach_release_all(srv, s);
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
	srv_identity_free(s);
	free(s->leases);
	free(s->rbuf);
	close(s->fd);
	free(s);
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

