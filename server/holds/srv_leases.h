// SPDX-License-Identifier: MIT
/* srv_leases.h - a session's layer leases (FetchLayer, Release): the one
 * owner of session.leases[]. Leases are kept in order
 * of id; each counts in its attachment's model's `leases`. The loop's
 * thread only. */
#ifndef WSRV_SRV_LEASES_H
#define WSRV_SRV_LEASES_H

#include <stdint.h>

#include "core_door.h"

/* A new lease of layer on s's attachment attach_id (to model mi): its id
 * in *id; 0, or -ENOSPC (the client's --max-leases) or -ENOMEM, with
 * nothing changed. */
int lease_add(struct server *srv, struct session *s, uint32_t mi, uint32_t attach_id, int32_t layer,
	      uint64_t *id);

/* s lets lease id go: 0, or -ENOENT when it is none of s's. */
int lease_release(struct server *srv, struct session *s, uint64_t id);

/* Every lease of s's attachment attach_id goes (a detach). */
void lease_drop_attachment(struct server *srv, struct session *s, uint32_t attach_id);

/* Every lease of s goes (its session is ending). */
void lease_release_all(struct server *srv, struct session *s);

#endif
