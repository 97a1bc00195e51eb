// SPDX-License-Identifier: MIT
/* piece_door.h - the one door through which a stream has a model's pieces
 * (attached.h: its segments, and a disk tier's units). A stream asks for
 * the pieces of a layer or of its experts and is told, for each, whether
 * it is here for good or lent until it gives it back; whether the piece
 * was loading, on a disk tier or mapped already stays the model room's
 * business. (piece_door.c) */
#ifndef WSRV_CLIENT_PIECE_DOOR_H
#define WSRV_CLIENT_PIECE_DOOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_door.h"

enum cl_piece_got {
	PIECE_NOT_YET, /* not here (without wait: its load or read goes on) */
	PIECE_KEPT,    /* mapped here for good: nothing to give back */
	PIECE_LENT,    /* mapped until cl_pieces_done gives it back */
};

/* Pieces p[0..n) (distinct), each mapped here when got[i] says so. With
 * wait, every one comes, or an error does; without, those not here yet are
 * started (a loading segment's load, a disk tier's read) and come with a
 * later call. Even after an error, the pieces got LENT are the caller's to
 * give back. 0 or <0 (the load failed, the server refused). */
int cl_pieces_need(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, enum cl_piece_got *got);
/* The caller is done with pieces p[0..n) it got LENT: each is unmapped
 * and given back once nothing here uses it. 0 or <0. */
int cl_pieces_done(struct wsrv_model *m, const uint32_t *p, size_t n);
/* Piece g, when it is here for good now (mapping it if the server has it
 * ready): 1; 0 when it is not, or is lent only (nothing is started); <0
 * when its load failed. */
int cl_piece_kept_now(struct wsrv_model *m, uint32_t g);

#endif
