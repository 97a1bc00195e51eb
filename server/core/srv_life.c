// SPDX-License-Identifier: MIT
/* srv_life.c - the server's and its sessions' moves (srv_life.h). */
#include "srv_life.h"

#include "lifecycle.h"
#include "srv.h"

static const char *const life_names[SRV_LIFE_MAX] = {
	[SRV_SERVING] = "serving", [SRV_STOP_ASKED] = "stop asked", [SRV_HANDED_OVER] = "handed over",
	[SRV_STOPPING] = "stopping", [SRV_STOPPING_HANDED] = "stopping (handed over)",
};

static const unsigned life_moves[SRV_LIFE_MAX] = {
	[SRV_SERVING] = LIFE_BIT(SRV_STOP_ASKED) | LIFE_BIT(SRV_HANDED_OVER) | LIFE_BIT(SRV_STOPPING),
	[SRV_STOP_ASKED] = LIFE_BIT(SRV_HANDED_OVER) | LIFE_BIT(SRV_STOPPING),
	[SRV_HANDED_OVER] = LIFE_BIT(SRV_STOPPING_HANDED),
};

static const struct lifecycle server_life = { "server", SRV_LIFE_MAX, life_names, life_moves };

static const char *const session_names[SESSION_STATE_MAX] = {
	[SS_GREETING] = "greeting", [SS_SERVING] = "serving", [SS_CLOSING] = "closing",
};

static const unsigned session_moves[SESSION_STATE_MAX] = {
	[SS_GREETING] = LIFE_BIT(SS_SERVING) | LIFE_BIT(SS_CLOSING),
	[SS_SERVING] = LIFE_BIT(SS_CLOSING),
};

static const struct lifecycle session_life = { "client", SESSION_STATE_MAX, session_names, session_moves };

void srv_life_to(struct server *srv, enum srv_life to)
{
	if (life_check(&server_life, 0, srv->life, to) == 0)
		srv->life = to;
}

void srv_ask_stop(struct server *srv)
{
	if (srv->life == SRV_SERVING)
		srv_life_to(srv, SRV_STOP_ASKED);
}

void session_to(struct session *s, enum session_state to)
{
	if (life_check(&session_life, s->id, s->state, to) == 0)
		s->state = to;
}

void session_close(struct session *s)
{
	if (s->state != SS_CLOSING)
		session_to(s, SS_CLOSING);
}
