// SPDX-License-Identifier: MIT
/* peer_child.c - the peer process's main (peer_child.h). */
#include "peer_child.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "packet.h"
#include "peer_accept.h"
#include "peer_engine.h"
#include "peer_ucx.h"

/* What one packet from wsrvd held; fds the caller's. */
struct pc_msg {
	union {
		uint32_t kind;
		struct pc_config config;
		struct pc_offer offer;
		struct pc_name name;
		struct pc_expect expect;
	} u;
	long len;
	int fds[WSRV_MAX_FDS];
	int nfds;
};

static int recv_msg(int sock, struct pc_msg *m)
{
	m->nfds = 0;
	m->len = pkt_recv(sock, &m->u, sizeof(m->u), m->fds, WSRV_MAX_FDS, &m->nfds);
	if (m->len < (long)sizeof(uint32_t)) {
		pkt_close_fds(m->fds, m->nfds);
		return m->len < 0 ? (int)m->len : -ENOTCONN;
	}
	return 0;
}

static void say_started(int sock, int status, const char *msg)
{
	struct pc_started s = { .kind = PC_STARTED, .status = status };

	snprintf(s.msg, sizeof(s.msg), "%.*s", (int)sizeof(s.msg) - 1, msg); /* cut to fit */
	(void)pkt_send(sock, &s, sizeof(s), NULL, 0);
}

/* The counters wsrvd reads, mapped from its memfd (closed here). */
static struct peer_serve_counters *map_counters(int fd)
{
	void *p = mmap(NULL, sizeof(struct peer_serve_counters), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* An offer: the table's memfd and nseg segments' memfds, the first in
 * this packet, the rest in the packets after it. */
static int take_offer(int sock, struct peer_engine *eng, struct pc_msg *m)
{
	uint32_t nseg = m->u.offer.nseg, got = 0;
	int *segs = malloc((nseg + 1) * sizeof(int)), tfd = m->nfds > 0 ? m->fds[0] : -1, r;
	bool huge = m->u.offer.hugetlb != 0;
	struct peer_table *t;
	struct errinfo e;

	if (!segs || tfd < 0 || m->len != sizeof(m->u.offer) || nseg > 1u << 20) {
		free(segs);
		pkt_close_fds(m->fds, m->nfds);
		return -EBADMSG;
	}
	for (int i = 1; i < m->nfds && got < nseg; i++)
		segs[got++] = m->fds[i];
	while (got < nseg && recv_msg(sock, m) == 0) {
		for (int i = 0; i < m->nfds && got < nseg; i++)
			segs[got++] = m->fds[i];
	}
	if (got < nseg) {
		pkt_close_fds(segs, (int)got);
		close(tfd);
		free(segs);
		return -EBADMSG;
	}
	r = peer_table_import(tfd, segs, nseg, huge, &t, &e);
	free(segs);
	if (r == 0)
		r = peer_engine_offer(eng, t, &e);
	if (r < 0)
		log_warn("%s", e.msg);
	return r;
}

static void take_expect(struct peer_engine *eng, const struct pc_expect *x)
{
	const char *names[PEER_MAX_TABLES];
	uint32_t n = x->n < PEER_MAX_TABLES ? x->n : PEER_MAX_TABLES;

	for (uint32_t i = 0; i < n; i++)
		names[i] = x->names[i];
	peer_engine_expect(eng, names, n);
}

/* Serves wsrvd's requests until PC_STOP or its end. */
static void serve_requests(int sock, struct peer_engine *eng)
{
	struct pc_msg *m = malloc(sizeof(*m));

	while (m && recv_msg(sock, m) == 0) {
		if (m->u.kind == PC_STOP)
			break;
		if (m->u.kind == PC_OFFER) {
			take_offer(sock, eng, m);
			continue;
		}
		pkt_close_fds(m->fds, m->nfds);
		if (m->u.kind == PC_WITHDRAW && m->len == sizeof(m->u.name) &&
		    memchr(m->u.name.name, 0, sizeof(m->u.name.name)))
			peer_engine_withdraw(eng, m->u.name.name);
		else if (m->u.kind == PC_EXPECT && m->len == sizeof(m->u.expect))
			take_expect(eng, &m->u.expect);
	}
	free(m);
}

int peer_child_main(int sock)
{
	static struct pc_msg cfg; /* the trust lives as long as the process */
	struct peer_serve_counters *cnt;
	struct peer_engine *eng;
	struct errinfo e;

	prctl(PR_SET_NAME, "wsrvd-peers");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1; /* wsrvd went before PDEATHSIG was set */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	log_set_ident("wsrvd-peers");
	if (recv_msg(sock, &cfg) < 0 || cfg.u.kind != PC_CONFIG || cfg.len != sizeof(cfg.u.config) ||
	    cfg.nfds != 1 || !memchr(cfg.u.config.addr, 0, sizeof(cfg.u.config.addr)) ||
	    !(cnt = map_counters(cfg.fds[0]))) {
		say_started(sock, -EPROTO, "peers: the peer process got no configuration");
		return 1;
	}
	cnt->conns = 0;
	peer_accept_filter(&cfg.u.config.trust, &cnt->refused);
	peer_ucx_only_device_of(cfg.u.config.addr);
	/* The listener with SO_REUSEADDR, and so its connections: one left in
	 * TIME_WAIT by a peer process that died kept the next one from
	 * listening for a minute. */
	setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
	if (peer_engine_start(cfg.u.config.addr, &cfg.u.config.trust, cfg.u.config.busy_wait_s, cnt, &eng,
			      &e) < 0) {
		say_started(sock, -EIO, e.msg);
		return 1;
	}
	say_started(sock, 0, "");
	serve_requests(sock, eng);
	peer_engine_stop(eng);
	explicit_bzero(&cfg, sizeof(cfg));
	return 0;
}
