// SPDX-License-Identifier: MIT
/* ready_wait.h - a model attached while the server loads it: its setup,
 * and the gates every lookup and stream passes. A model mapped whole
 * takes none of the loading branches: each sits behind one call, taken
 * only while cl_loading says so. (ready_wait.c) */
#ifndef WSRV_CLIENT_READY_WAIT_H
#define WSRV_CLIENT_READY_WAIT_H

#include "attached.h"
#include "pieces.h"
#include "ready_read.h"

/* Attach with a readiness page: fds[0] the manifest (mapped by the
 * caller), fds[1] the page, then ar->ready_segments' fds. */
int cl_ready_setup(struct wsrv_model *m, const int *fds, int nfds, const Wsrv__AttachReply *ar);
/* Frees what cl_ready_setup made (the segments' mappings are the
 * caller's). */
void cl_ready_free(struct wsrv_model *m);

/* Waiting on the readiness page's words: what tier_take.c stands on too. */
#define WAIT_SLICE_MS 200   /* between checks that the server is still there */

/* Waits for segment seg's word to leave RD_LOADING, up to timeout_ms
 * (< 0: for ever): 0, or the load's failure. */
int cl_wait_word(struct wsrv_model *m, uint32_t seg, int timeout_ms);
/* Segment seg's word now (enum rd_state). */
uint32_t cl_word_now(const struct wsrv_model *m, uint32_t seg);
/* The load's failure as an error naming its tensor: -EIO. */
int cl_load_failed(const struct wsrv_model *m);
/* Waits until segment seg is ready and mapped, up to timeout_ms (a disk
 * tier's: only for its first load). */
int cl_piece_wait_for(struct wsrv_model *m, uint32_t seg, int timeout_ms);
/* Waits until every segment of a model loading is mapped (a disk tier's
 * model: until it is loaded). */
int cl_ready_wait_all(struct wsrv_model *m, int timeout_ms);

/* Whether some segment of m is not mapped here yet. */
static inline bool cl_loading(const struct wsrv_model *m)
{
	return __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE);
}

/* The loading branches (ready_wait.c), each behind one call: a model
 * loaded before it was attached, or mapped whole since, never takes them. */
int cl_piece_wait_loading(struct wsrv_model *m, uint32_t seg);
int cl_piece_try_loading(struct wsrv_model *m, uint32_t seg);
bool cl_piece_mapped_loading(struct wsrv_model *m, uint32_t seg);


/* Waits until segment seg is ready and mapped; -EIO (naming the tensor)
 * when the load failed. A no-op once the whole model is mapped. */
static inline int cl_piece_wait(struct wsrv_model *m, uint32_t seg)
{
	return cl_loading(m) ? cl_piece_wait_loading(m, seg) : 0;
}

/* Whether segment seg is mapped here, without waiting: 1 yes (mapping it
 * first when the server says it is ready), 0 not yet, or -EIO (naming the
 * tensor) when the load failed. */
static inline int cl_piece_try(struct wsrv_model *m, uint32_t seg)
{
	return cl_loading(m) ? cl_piece_try_loading(m, seg) : 1;
}

/* Whether segment seg is mapped here now (always, once the model is). */
static inline bool cl_piece_mapped(struct wsrv_model *m, uint32_t seg)
{
	return !cl_loading(m) || cl_piece_mapped_loading(m, seg);
}

/* A lookup's data pointer: NULL for a disk tier's segment or unit (the
 * piece, attached.h) not mapped now. */
static inline const void *cl_data_here(struct wsrv_model *m, uint32_t piece, const void *data)
{
	return cl_piece_mapped(m, piece) ? data : NULL;
}

#endif
