// SPDX-License-Identifier: MIT
/* ready_map.h - inside the model room: what ready_wait.c (segments mapped
 * as the server loads them) lends tier_take.c (a disk tier's segments and
 * units taken and let go, and wsrv_model_wait, which pins them), which
 * stands on it. */
#ifndef WSRV_CLIENT_READY_MAP_H
#define WSRV_CLIENT_READY_MAP_H

#include "attached.h"

#define WAIT_SLICE_MS 200   /* between checks that the server is still there */

/* Maps piece g (a segment, or a unit: its range of a memfd of its
 * segment's size) from fd over its reserved range. Under map_lock. */
int cl_map_over(struct wsrv_model *m, uint32_t g, int fd);
/* Piece p of a resumed attachment (ready_verify.c): 0 when each of its
 * tensors has the checksum it was attached with (or one page does not
 * know it), else -ESTALE naming the tensor. 0 at once when not resumed.
 * Under map_lock. */
int cl_resume_check(struct wsrv_model *m, uint32_t p);
/* Waits for segment seg's word to leave RD_LOADING, up to timeout_ms
 * (< 0: for ever): 0, or the load's failure. */
int cl_wait_word(struct wsrv_model *m, uint32_t seg, int timeout_ms);
/* Segment seg's word now (enum rd_state). */
uint32_t cl_word_now(const struct wsrv_model *m, uint32_t seg);
/* The load's failure as an error naming its tensor: -EIO. */
int cl_load_failed(const struct wsrv_model *m);
/* Waits until segment seg is ready and mapped, up to timeout_ms (a disk
 * tier's: only for its first load). */
int cl_ready_need_for(struct wsrv_model *m, uint32_t seg, int timeout_ms);
/* Waits until every segment of a model loading is mapped (a disk tier's
 * model: until it is loaded). */
int cl_ready_wait_all(struct wsrv_model *m, int timeout_ms);

#endif
