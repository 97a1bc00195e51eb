// SPDX-License-Identifier: MIT
/* srv_takeover.h - the serving side of a live hand-over (srv_takeover.c). */
#ifndef WSRV_SRV_TAKEOVER_H
#define WSRV_SRV_TAKEOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "core_door.h"

/* TakeOver: everything, as fds, to a client of the server's user (or
 * root); the server goes on serving. 0 or the errno it replied with. */
int takeover_offer(struct server *srv, struct session *s, uint64_t seq, struct reply *r);
/* TakeOverDone from that client: the server stops once the reply is out,
 * leaving the socket to it. */
int takeover_done(struct server *srv, struct session *s, uint64_t seq, struct reply *r);
/* Seconds a successor has, from TakeOver, to say TakeOverDone; past
 * them the take-over is abandoned and this server serves on (a stopped
 * successor must not keep new clients waiting). */
#define SRV_TAKEOVER_DEADLINE 30.0

/* The loop's tick: a take-over past its deadline is abandoned, said why. */
void takeover_tick(struct server *srv);
/* Whether a take-over is under way: a stop waits for its end, so that
 * the old server never unlinks the socket under a successor that has its
 * fds. */
bool takeover_pending(const struct server *srv);
/* The session ends: a take-over it had begun is abandoned. */
void takeover_session_gone(struct server *srv, const struct session *s);

#endif
