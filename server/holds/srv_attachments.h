// SPDX-License-Identifier: MIT
/* srv_attachments.h - a session's attachments: the one owner of
 * session.attach_model[].
 * An attach id is 1 + its slot; a slot holds its model's index + 1, or 0
 * once detached (the slot is reused). Each attachment counts in its
 * model's `attached`, and holds its disk tier pieces as holder
 * srv_tier_holder(s, id). The loop's thread only. */
#ifndef WSRV_SRV_ATTACHMENTS_H
#define WSRV_SRV_ATTACHMENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "core_door.h"

/* A new attachment of s to model mi: its id in *id; 0, or -EMFILE (the
 * client's --max-attach) or -ENOMEM, with nothing changed. */
int attach_add(struct server *srv, struct session *s, uint32_t mi, uint32_t *id);

/* The model index of s's attachment id, or -EBADF when id is none of
 * s's (0, past its slots, or detached). */
int attach_model(const struct session *s, uint32_t id);

/* The model behind s's attach id, or NULL with an EBADF reply in r. */
struct srv_model *srv_attached_model(struct server *srv, struct session *s, uint32_t id, uint64_t seq,
				     struct reply *r);

/* Whether s has an attachment to model mi. */
bool attach_has(const struct session *s, uint32_t mi);

/* How many attachments s has. */
uint32_t attach_count(const struct session *s);

/* Ends s's attachment id (which attach_model found): its tier holds go,
 * its model counts one fewer, and a retired generation nobody holds is
 * freed. Its leases are the caller's to drop first (srv_leases.h). */
void attach_drop(struct server *srv, struct session *s, uint32_t id);

/* Ends every attachment of s (its session is ending) and frees the table. */
void attach_release_all(struct server *srv, struct session *s);

#endif
