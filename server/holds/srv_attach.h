// SPDX-License-Identifier: MIT
/* srv_attach.h - the Attach reply, built in one place for a model that is
 * loaded and for one still loading (they must agree: the client checks
 * one against the other across a restart, client/model/ready_resume.c). */
#ifndef WSRV_SRV_ATTACH_H
#define WSRV_SRV_ATTACH_H

#include <stdint.h>

#include "core_door.h"

/* The reply to an Attach of entry mi (the session's slot attach_id is
 * taken): loaded, the manifest and every segment; loading, the layout and
 * the readiness page with the segments ready now, as many as r->fd_room
 * lets go. 0. */
int srv_attach_reply(struct server *srv, uint32_t mi, uint32_t attach_id, uint64_t seq, struct reply *r);

#endif
