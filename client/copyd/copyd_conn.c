// SPDX-License-Identifier: MIT
/* copyd_conn.c - the copy service's workers: a connection is let in by
 * wsrvd's trust rules (peer credentials, the allow lists, peer_allow.h)
 * and the limits on connections; each request is answered in turn, an
 * error with its errno and a sentence, and a malformed one closes the
 * connection. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "copyd.h"
#include "log.h"
#include "packet.h"
#include "peer_allow.h"
#include "wire.h"

static unsigned conns_of(const struct copyd *cd, uid_t uid)
{
	unsigned n = 0;

	for (const struct cd_conn *c = cd->conns; c; c = c->next)
		n += c->cred.uid == uid;
	return n;
}

/* Why the peer is refused, or NULL. */
static const char *refusal(const struct copyd *cd, int fd, const struct ucred *cr)
{
	if (!peer_allowed(fd, cr, cd->cfg.allow_uid, cd->cfg.n_allow_uid, cd->cfg.allow_gid, cd->cfg.n_allow_gid))
		return "this user is not allowed (--allow-uid, --allow-gid)";
	if (cd->nconns >= cd->cfg.max_clients)
		return "too many connections (--max-clients)";
	if (conns_of(cd, cr->uid) >= cd->cfg.max_conns_per_uid)
		return "this user has too many connections (--max-connections-per-uid)";
	return NULL;
}

/* A refused peer gets one Error packet, then the close that drains. */
static void refuse(struct copyd *cd, int fd, const struct ucred *cr, int err, const char *why)
{
	Wsrv__CopyError e = WSRV__COPY_ERROR__INIT;
	Wsrv__CopyResponse rs = WSRV__COPY_RESPONSE__INIT;
	uint8_t buf[512];

	e.code = err;
	e.message = (char *)why;
	rs.body_case = WSRV__COPY_RESPONSE__BODY_ERROR;
	rs.error = &e;
	if (wsrv__copy_response__get_packed_size(&rs) <= sizeof(buf)) {
		wsrv__copy_response__pack(&rs, buf);
		pkt_send(fd, buf, wsrv__copy_response__get_packed_size(&rs), NULL, 0);
	}
	log_info("refused process %d (uid %u): %s", (int)cr->pid, (unsigned)cr->uid, why);
	cd->refused++;
	pkt_drain_close(fd); /* as wsrvd's: the client reads the reason, not a reset */
}

/* One waiting connection, let in or turned away: false when none waits. */
static bool accept_one(struct copyd *cd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct cd_conn *c;
	const char *why;
	int fd = accept4(cd->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return errno != EAGAIN && errno != EWOULDBLOCK && errno != EMFILE && errno != ENFILE;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
		close(fd);
		return true;
	}
	if ((why = refusal(cd, fd, &cr))) {
		refuse(cd, fd, &cr, EACCES, why);
		return true;
	}
	if (!(c = calloc(1, sizeof(*c)))) {
		refuse(cd, fd, &cr, ENOMEM, "out of memory");
		return true;
	}
	c->fd = fd;
	c->cred = cr;
	c->process = peer_process_held(fd, &cr, &c->pidfd);
	c->next = cd->conns;
	cd->conns = c;
	cd->nconns++;
	log_debug("process %d (uid %u) connected", (int)cr.pid, (unsigned)cr.uid);
	return true;
}

void cd_accept(struct copyd *cd)
{
	/* Every connection waiting, not one a round: a crowd queued in the
	 * backlog is let in (or turned away, with its reason) at once. */
	for (int i = 0; i < 1024 && accept_one(cd); i++)
		;
}

void cd_conn_close(struct copyd *cd, struct cd_conn *c)
{
	for (struct cd_conn **p = &cd->conns; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	cd_jobs_free(cd, c); /* before the buffers they copy into */
	cd_buffers_free(cd, c);
	cd_model_use(cd, &c->model, NULL);
	if (c->pidfd >= 0)
		close(c->pidfd);
	close(c->fd);
	cd->nconns--;
	free(c);
}

static void fill_stats(struct copyd *cd, Wsrv__CopyStatsReply *s, Wsrv__CopyModel *mv, Wsrv__CopyModel **mp,
		       size_t cap, char **devs)
{
	size_t n = 0;

	s->copies = cd->copies;
	s->copied_bytes = cd->copied_bytes;
	s->requests = cd->requests;
	s->refused = cd->refused;
	s->clients = cd->nconns;
	s->import_seconds = cd->import_seconds;
	s->imports = cd->imports;
	s->slices = cd->slices;
	s->side_by_side = cd->side_by_side;
	for (const struct cd_conn *c = cd->conns; c; c = c->next)
		s->buffers += c->nbufs;
	for (struct cd_model *e = cd->models; e && n < cap; e = e->next, n++) {
		wsrv__copy_model__init(&mv[n]);
		mv[n].name = e->name;
		mv[n].generation = e->generation;
		mv[n].registered_bytes = e->registered_bytes;
		mv[n].bytes = e->bytes;
		mv[n].users = e->users;
		mv[n].identity = e->identity;
		s->registered_bytes += e->registered_bytes;
		mp[n] = &mv[n];
	}
	s->n_models = n;
	s->models = mp;
	for (int k = 0; k < cd->ndev; k++)
		devs[k] = cd->dev[k].info.id;
	s->n_devices = (size_t)cd->ndev;
	s->devices = devs;
}

#define CD_STATS_MODELS 64

/* Answers rq (fd: its one fd, or -1; taken): false to close. */
static bool answer(struct copyd *cd, struct cd_conn *c, const Wsrv__CopyRequest *rq, int fd)
{
	Wsrv__CopyResponse rs = WSRV__COPY_RESPONSE__INIT;
	Wsrv__CopyMapReply mr = WSRV__COPY_MAP_REPLY__INIT;
	Wsrv__CopyOk ok = WSRV__COPY_OK__INIT;
	Wsrv__CopyStatsReply st = WSRV__COPY_STATS_REPLY__INIT;
	Wsrv__CopyModel mv[CD_STATS_MODELS], *mp[CD_STATS_MODELS];
	char *devs[CD_MAX_DEVICES];
	struct errinfo err;
	int r = 0;

	rs.seq = rq->seq;
	switch (rq->body_case) {
	case WSRV__COPY_REQUEST__BODY_MAP:
		if ((r = cd_map(cd, c, rq->map, fd, &mr.buffer, &err)) == 0)
			rs.body_case = WSRV__COPY_RESPONSE__BODY_MAP, rs.map = &mr;
		break;
	case WSRV__COPY_REQUEST__BODY_RUNS:
		/* Queued: answered once its bytes have landed (cd_schedule). */
		if ((r = cd_copy(cd, c, rq->runs, rq->seq, &err)) == 0) {
			if (fd >= 0)
				close(fd);
			return true;
		}
		break;
	case WSRV__COPY_REQUEST__BODY_UNMAP:
		if ((r = cd_unmap(cd, c, rq->unmap->buffer, &err)) == 0)
			rs.body_case = WSRV__COPY_RESPONSE__BODY_OK, rs.ok = &ok;
		break;
	case WSRV__COPY_REQUEST__BODY_STATS:
		fill_stats(cd, &st, mv, mp, CD_STATS_MODELS, devs);
		rs.body_case = WSRV__COPY_RESPONSE__BODY_STATS, rs.stats = &st;
		break;
	default:
		r = err_set(&err, -EPROTO, "an empty request");
	}
	if (fd >= 0)
		close(fd); /* imported, or refused: the service keeps no worker's fd */
	if (r < 0)
		return cd_reply_error(cd, c, rq->seq, r, &err);
	return cd_reply(c, &rs);
}

bool cd_serve(struct copyd *cd, struct cd_conn *c)
{
	uint8_t buf[WSRV_MAX_PACKET];
	int fds[2], nfds = 0;
	Wsrv__CopyRequest *rq;
	long n = pkt_recv(c->fd, buf, sizeof(buf), fds, 2, &nfds);
	bool keep;

	if (n == -EAGAIN)
		return true;
	if (n <= 0 || nfds > 1 || !(rq = wsrv__copy_request__unpack(NULL, (size_t)n, buf))) {
		/* Gone, or malformed (a packet too large, two fds, not a
		 * request): nothing is answered. */
		pkt_close_fds(fds, nfds);
		if (n > 0)
			log_info("process %d sent a malformed request: closed", (int)c->cred.pid);
		return false;
	}
	cd->requests++;
	keep = answer(cd, c, rq, nfds ? fds[0] : -1);
	wsrv__copy_request__free_unpacked(rq, NULL);
	return keep;
}
