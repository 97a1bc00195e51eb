// SPDX-License-Identifier: MIT
/* srv_pieces.h - AttachSegments, the one door for a model's pieces after
 * its Attach. A piece is a segment of the arena, or, with a disk tier, a
 * routed expert's unit, numbered on from the segments (tier.h). The
 * request means one of three things:
 * - take pieces of a model still loading, once each is ready (the arena's
 *   own fds);
 * - take pieces of a disk tier, each held for the attachment until let go
 *   (a piece still to be read answers EAGAIN, or is left out when partial);
 * - release: let go of pieces taken from the tier. */
#ifndef WSRV_SRV_PIECES_H
#define WSRV_SRV_PIECES_H

#include "core_door.h"

/* AttachSegments: one of the three, after the checks every one shares. 0,
 * or the error replied (-EBADF: no such attachment). */
int pieces_handle(struct server *srv, struct session *s, const Wsrv__AttachSegments *q, uint64_t seq,
		  struct reply *r);

#endif
