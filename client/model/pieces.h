// SPDX-License-Identifier: MIT
/* pieces.h - a model's pieces (attached.h: its segments, and a disk
 * tier's units) reaching this process: the one AttachSegments caller and
 * the one check of its reply, and a piece's memfd mapped over its
 * reserved range (whether a piece lives on a disk tier: cl_tiered,
 * attached.h). Readiness (ready_wait.h) and a disk tier's use counts
 * (tier_take.c) stand on these. (pieces.c) */
#ifndef WSRV_CLIENT_PIECES_H
#define WSRV_CLIENT_PIECES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attached.h"

enum piece_ask {
	PIECES_ALL,     /* every one comes, or an error (-EAGAIN: being read) */
	PIECES_SOME,    /* those in memory come, the rest are read meanwhile */
	PIECES_RELEASE, /* let go: nothing comes back */
};

/* Asks for pieces ids[0..n) (distinct; at most WSRV_MAX_FDS - 2) with
 * AttachSegments, as how says. Those that come: their ids into
 * got[0..*ngot), in the order asked, and their fds, the caller's, into
 * fds. A reply that is not a subset of what was asked, in order, with one
 * fd each (all of them for PIECES_ALL; none for a release) is -EBADMSG.
 * 0, or the server's error. */
int cl_pieces_ask(struct wsrv_model *m, const uint32_t *ids, size_t n, enum piece_ask how, uint32_t *got,
		  int *fds, size_t *ngot);

/* Piece g of m moves to state to (attached.h), as its table allows
 * (asserted in debug and sanitizer builds, with its use count). Under
 * map_lock. */
void cl_piece_to(struct wsrv_model *m, uint32_t g, enum cl_piece_state to);

/* Maps piece g from fd over its reserved range, after the checks of the
 * fd (its size, its seals) and of a resumed attachment's bytes
 * (ready_verify.h). Under map_lock. */
int cl_map_over(struct wsrv_model *m, uint32_t g, int fd);

#endif
