// SPDX-License-Identifier: MIT
/* ready_wait.h - a model attached while the server loads it: its setup,
 * and the gates every lookup and stream passes. A model mapped whole
 * takes none of the loading branches: each sits behind one call, taken
 * only while cl_loading says so. (ready_wait.c) */
#ifndef WSRV_CLIENT_READY_WAIT_H
#define WSRV_CLIENT_READY_WAIT_H

#include "attached.h"

/* Attach with a readiness page: fds[0] the manifest (mapped by the
 * caller), fds[1] the page, then ar->ready_segments' fds. */
int cl_ready_setup(struct wsrv_model *m, const int *fds, int nfds, const Wsrv__AttachReply *ar);
/* Frees what cl_ready_setup made (the segments' mappings are the
 * caller's). */
void cl_ready_free(struct wsrv_model *m);

/* Whether some segment of m is not mapped here yet. */
static inline bool cl_loading(const struct wsrv_model *m)
{
	return __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE);
}

/* The loading branches (ready_wait.c), each behind one call: a model
 * loaded before it was attached, or mapped whole since, never takes them. */
int cl_ready_need(struct wsrv_model *m, uint32_t seg);
int cl_ready_check(struct wsrv_model *m, uint32_t seg);
bool cl_ready_mapped(struct wsrv_model *m, uint32_t seg);

/* A model with a disk tier (--memory-budget): whether segment seg lives
 * on it (seg may be a piece, attached.h: a unit always does). Such a segment is mapped only while something uses it:
 * wsrv_model_wait on its layer pins it until detach (a lookup only waits
 * for its first load, and gives data NULL while it is not mapped,
 * cl_data_here); a stream takes it with
 * cl_tier_use (1: mapped; 0: not yet, without wait, its read started) and
 * lets it go with cl_tier_drop, which unmaps it and tells the server once
 * no stream uses it and no lookup pinned it. */
bool cl_tiered(const struct wsrv_model *m, uint32_t seg);
int cl_tier_use(struct wsrv_model *m, uint32_t seg, bool wait);
int cl_tier_drop(struct wsrv_model *m, uint32_t seg);
/* The same for many pieces at once (tier_take.c), in one request per
 * ASK_MAX: the server sends what it has in memory and reads the rest side
 * by side, where one at a time would wait for each read in turn. p[0..n)
 * distinct; got[i] says whether p[i] is mapped now and counted as used
 * (with wait, every one is, or an error comes back; those got before it
 * are counted all the same, for the caller to drop). 0 or <0. */
int cl_tier_use_many(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, bool *got);
/* One use of each of p[0..n) ends; those nothing uses any more are
 * unmapped and given back in one request. 0 or <0. */
int cl_tier_drop_many(struct wsrv_model *m, const uint32_t *p, size_t n);

/* Waits until segment seg is ready and mapped; -EIO (naming the tensor)
 * when the load failed. A no-op once the whole model is mapped. */
static inline int cl_need_segment(struct wsrv_model *m, uint32_t seg)
{
	return cl_loading(m) ? cl_ready_need(m, seg) : 0;
}

/* Whether segment seg is mapped here, without waiting: 1 yes (mapping it
 * first when the server says it is ready), 0 not yet, or -EIO (naming the
 * tensor) when the load failed. */
static inline int cl_segment_ready(struct wsrv_model *m, uint32_t seg)
{
	return cl_loading(m) ? cl_ready_check(m, seg) : 1;
}

/* Whether segment seg is mapped here now (always, once the model is). */
static inline bool cl_segment_mapped(struct wsrv_model *m, uint32_t seg)
{
	return !cl_loading(m) || cl_ready_mapped(m, seg);
}

/* A lookup's data pointer: NULL for a disk tier's segment or unit (the
 * piece, attached.h) not mapped now. */
static inline const void *cl_data_here(struct wsrv_model *m, uint32_t piece, const void *data)
{
	return cl_segment_mapped(m, piece) ? data : NULL;
}

#endif
