// SPDX-License-Identifier: MIT
/* tier_take.h - a disk tier's pieces taken and let go, counted per use
 * (tier_take.c). */
#ifndef WSRV_CLIENT_TIER_TAKE_H
#define WSRV_CLIENT_TIER_TAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attached.h"

/* A disk tier's piece (cl_tiered) is mapped only while something uses it:
 * wsrv_model_wait on its layer pins it until detach (a lookup only waits
 * for its first load, and gives data NULL while it is not mapped,
 * cl_data_here); a stream takes it through the piece door (piece_door.h),
 * which counts each use here, and once no stream uses it and no lookup
 * pinned it, it is unmapped and the server told. */
/* Pieces taken, in one request per ASK_MAX: the server sends what it has
 * in memory and reads the rest side by side, where one at a time would
 * wait for each read in turn. p[0..n)
 * distinct; got[i] says whether p[i] is mapped now and counted as used
 * (with wait, every one is, or an error comes back; those got before it
 * are counted all the same, for the caller to drop). 0 or <0. */
int cl_tier_use_many(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, bool *got);
/* One use of each of p[0..n) ends; those nothing uses any more are
 * unmapped and given back in one request. 0 or <0. */
int cl_tier_drop_many(struct wsrv_model *m, const uint32_t *p, size_t n);

#endif
