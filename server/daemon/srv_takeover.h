// SPDX-License-Identifier: MIT
/* srv_takeover.h - the serving side of a live hand-over (srv_takeover.c). */
#ifndef WSRV_SRV_TAKEOVER_H
#define WSRV_SRV_TAKEOVER_H

#include <stdint.h>

#include "srv.h"

/* TakeOver: everything, as fds, to a client of the server's user (or
 * root); the server goes on serving. 0 or the errno it replied with. */
int takeover_offer(struct server *srv, struct session *s, uint64_t seq, struct reply *r);
/* TakeOverDone from that client: the server stops once the reply is out,
 * leaving the socket to it. */
int takeover_done(struct server *srv, struct session *s, uint64_t seq, struct reply *r);
/* The session ends: a take-over it had begun is abandoned. */
void takeover_session_gone(struct server *srv, const struct session *s);

#endif
