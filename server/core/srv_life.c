// SPDX-License-Identifier: MIT
/* srv_life.c - the server's and its sessions' moves (srv_life.h). */
#include "srv_life.h"

#include <assert.h>

#include "srv.h"

static const char *const life_names[SRV_LIFE_MAX] = {
	[SRV_SERVING] = "serving", [SRV_STOP_ASKED] = "stop asked", [SRV_HANDED_OVER] = "handed over",
	[SRV_STOPPING] = "stopping", [SRV_STOPPING_HANDED] = "stopping (handed over)",
};

/* (The move tables are read by assert alone: unused in a release build.) */
__attribute__((unused)) static const bool life_moves[SRV_LIFE_MAX][SRV_LIFE_MAX] = {
	[SRV_SERVING] = { [SRV_STOP_ASKED] = true, [SRV_HANDED_OVER] = true, [SRV_STOPPING] = true },
	[SRV_STOP_ASKED] = { [SRV_HANDED_OVER] = true, [SRV_STOPPING] = true },
	[SRV_HANDED_OVER] = { [SRV_STOPPING_HANDED] = true },
};

static const char *const session_names[SS_STATE_MAX] = {
	[SS_GREETING] = "greeting", [SS_SERVING] = "serving", [SS_CLOSING] = "closing",
};

__attribute__((unused)) static const bool session_moves[SS_STATE_MAX][SS_STATE_MAX] = {
	[SS_GREETING] = { [SS_SERVING] = true, [SS_CLOSING] = true },
	[SS_SERVING] = { [SS_CLOSING] = true },
};

const char *srv_life_name(enum srv_life s)
{
	return (unsigned)s < SRV_LIFE_MAX ? life_names[s] : "(unknown)";
}

const char *session_state_name(enum session_state s)
{
	return (unsigned)s < SS_STATE_MAX ? session_names[s] : "(unknown)";
}

void srv_life_to(struct server *srv, enum srv_life to)
{
	assert((unsigned)srv->life < SRV_LIFE_MAX && (unsigned)to < SRV_LIFE_MAX);
	assert(life_moves[srv->life][to]);
	srv->life = to;
}

void srv_ask_stop(struct server *srv)
{
	if (srv->life == SRV_SERVING)
		srv_life_to(srv, SRV_STOP_ASKED);
}

void session_to(struct session *s, enum session_state to)
{
	assert((unsigned)s->state < SS_STATE_MAX && (unsigned)to < SS_STATE_MAX);
	assert(session_moves[s->state][to]);
	s->state = to;
}

void session_close(struct session *s)
{
	if (s->state != SS_CLOSING)
		session_to(s, SS_CLOSING);
}
