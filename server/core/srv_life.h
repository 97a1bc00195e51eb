// SPDX-License-Identifier: MIT
/* srv_life.h - the life of the server and of each of its sessions, as
 * state machines in the one pattern of every lifecycle (lifecycle.h):
 * a table of moves and of names each, one setter each (srv_life.c).
 *
 * The server:
 *   SRV_SERVING        -> SRV_STOP_ASKED, SRV_HANDED_OVER, SRV_STOPPING
 *   SRV_STOP_ASKED     a signal or a failed load: stops at the loop's next
 *                      turn, or once a take-over under way ends
 *                      -> SRV_HANDED_OVER, SRV_STOPPING
 *   SRV_HANDED_OVER    a successor serves now (wsrvd --take-over): stop,
 *                      leaving it the socket  -> SRV_STOPPING_HANDED
 *   SRV_STOPPING       goodbyes said, the socket removed; final
 *   SRV_STOPPING_HANDED  the same, the socket left to the successor; final
 *
 * A session:
 *   SS_GREETING  connected, no Hello yet   -> SS_SERVING, SS_CLOSING
 *   SS_SERVING   Hello done                -> SS_CLOSING
 *   SS_CLOSING   no more requests; freed when idle; final
 *
 * The loop's thread only. */
#ifndef WSRV_SRV_LIFE_H
#define WSRV_SRV_LIFE_H

#include <stdbool.h>

enum srv_life { SRV_SERVING, SRV_STOP_ASKED, SRV_HANDED_OVER, SRV_STOPPING, SRV_STOPPING_HANDED, SRV_LIFE_MAX };
enum session_state { SS_GREETING, SS_SERVING, SS_CLOSING, SESSION_STATE_MAX };

struct server;
struct session;

/* The one place the server's life changes: a move its table refuses is
 * logged and asserted, and not made; each move is logged at debug level. */
void srv_life_to(struct server *srv, enum srv_life to);
/* A stop is asked (a signal, a failed load): from SRV_SERVING only; later
 * it is one already. */
void srv_ask_stop(struct server *srv);

/* The one place a session's state changes, checked the same way. */
void session_to(struct session *s, enum session_state to);
/* s takes no more requests (idempotent). */
void session_close(struct session *s);

#endif
