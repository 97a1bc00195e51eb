// SPDX-License-Identifier: MIT
/* attached.h - the model room: a model attached through a session, its
 * manifest and segments mapped, its names indexed, and (attached while
 * the server loads it) its readiness. The model room's own: the stream
 * room reads a model through model_door.h and piece_door.h. */
#ifndef WSRV_CLIENT_ATTACHED_H
#define WSRV_CLIENT_ATTACHED_H

#include "manifest.h"
#include "model_door.h"
#include "name_index.h"
#include "ready.h"
#include "wire.h"

/* Where one piece (a segment, or a disk tier's unit) of a model attached
 * while loading stands in this process. Its moves are made in one place,
 * cl_piece_to (pieces.c), which asserts them:
 *
 *   PS_RESERVED  its range reserved, unreadable      -> MAPPED
 *   PS_MAPPED    mapped over its range from its memfd -> PINNED, or
 *                RESERVED (a disk tier's, given back once unused)
 *   PS_PINNED    a disk tier's, waited on by a lookup: its pointers stay
 *                valid, so it stays mapped and held until detach; final */
enum cl_piece_state { PS_RESERVED, PS_MAPPED, PS_PINNED, CL_PIECE_STATE_MAX };

/* Under the model's map_lock. */
struct cl_piece_st {
	enum cl_piece_state st;
	uint32_t use;  /* a disk tier's: the streams' uses (piece_door.h);
	                * never above 0 while PS_RESERVED */
};

/* Whether piece state p has the piece mapped here. */
static inline bool cl_piece_here(const struct cl_piece_st *p)
{
	return p->st != PS_RESERVED;
}

struct wsrv_model {
	struct wsrv_client *c;       /* holds a reference */
	unsigned refs;               /* atomic: the caller's (until wsrv_detach)
	                              * and each open stream's; the last detaches */
	struct wsrv_model *next;     /* in c->models, under c->lock */
	uint32_t attach_id;          /* the current server's id for m, under c->lock */
	uint64_t generation, manifest_hash; /* what was attached (the hash 0
	                                     * while it loads) */
	uint64_t identity;                  /* manifest_identity, made on first
	                                     * use (cl_model_identity; atomic):
	                                     * hashing a 139,583-tensor manifest
	                                     * costs an attach 1 ms */
	uint64_t latest;             /* the newest generation announced (Event) */
	bool stale;                  /* the server has another generation now */
	char *name;
	const uint8_t *manifest;     /* read-only mapping */
	size_t manifest_len;
	struct mf_view v;
	uint32_t nseg;
	const uint8_t **seg;         /* read-only mappings */
	size_t *seg_len;
	/* The name index (model_index.c), built at the first lookup by name,
	 * not at attach: a worker that goes by index never pays for it. */
	struct name_index names;     /* owned */
	int hash_err;                /* its build's failure (a name listed twice) */
	bool hash_built;             /* atomic */
	pthread_mutex_t hash_lock;
	/* Attached while the server loads it (ready_wait.c): every segment's
	 * address range is reserved (PROT_NONE) at attach and mapped over
	 * once the readiness page says it is ready. */
	bool loading;                /* atomic: some segment not mapped yet */
	struct ready_gen *ready;     /* atomic: the newest server's page, or NULL */
	struct cl_piece_st *pst;     /* per piece, owned, under map_lock */
	pthread_mutex_t map_lock;
	/* A disk tier's units (units.c): each routed expert of a layer,
	 * mapped alone over its range of its segment while used. A piece is
	 * a segment (below nseg) or unit k (nseg + k). */
	uint32_t nunits;
	struct rd_unit *units;       /* owned, checked, in (segment, offset) order */
	uint32_t *piece;             /* per tensor, owned; NULL without units */
};

/* The segment piece p lies in. */
static inline uint32_t cl_piece_seg(const struct wsrv_model *m, uint32_t p)
{
	return p < m->nseg ? p : m->units[p - m->nseg].segment;
}

/* The units of the readiness page v checked against the segments and
 * copied, the per-piece arrays grown, each tensor's piece found: 0 or
 * -errno. Before any segment is mapped. */
int cl_units_setup(struct wsrv_model *m, const struct rd_view *v);
/* Where piece p lies here, and the offset in its memfd it maps from (0
 * for a unit, whose memfd holds its bytes alone). */
void cl_piece_range(const struct wsrv_model *m, uint32_t p, uint8_t **addr, size_t *len, uint64_t *off);
/* The bytes of segment g's units, which its memfd leaves out. */
uint64_t cl_units_left_out(const struct wsrv_model *m, uint32_t g);
/* Maps segment g from fd around its units (their ranges stay reserved,
 * unreadable until a unit is mapped over its own): the memfd holds each
 * run between them moved down by the units before it. Under map_lock. */
int cl_units_map_around(struct wsrv_model *m, uint32_t g, int fd);
void cl_units_free(struct wsrv_model *m);

/* One server's readiness page for a model attached while it loads. A
 * reconnect during the load (ready_resume.c) puts a newer one in front;
 * the older ones stay mapped until the model is freed, because a waiter
 * may still be reading their words. */
struct ready_gen {
	struct ready_gen *older;     /* owned */
	const uint8_t *page;         /* read-only mapping (owned) */
	size_t len;
	struct rd_view rv;
	int *fds;                    /* per segment: an fd the attach reply
	                              * carried and not mapped yet, or -1;
	                              * owned, under map_lock; may be NULL */
	/* A resumed one's (ready_verify.c), made at its first check, owned,
	 * under map_lock: each piece's tensors, and whether the piece's
	 * checksums were found to be the attached ones. */
	uint32_t *piece_first, *piece_tensors;
	bool *checked;
};

/* Maps a readiness page of len bytes from fd and checks it against m's
 * manifest: a new generation of it, owned by the caller, or NULL. */
struct ready_gen *cl_ready_gen_map(struct wsrv_model *m, int fd, uint64_t len);
void cl_ready_gen_free(struct ready_gen *g);
/* Under c->lock, on a new connection: m, still loading here, attached
 * again (with while_loading) and answered with ar and its n fds. When the
 * new server lays m out as the old one did, its page (or, for a model it
 * has loaded, one made here) becomes m's newest, taking the fds it keeps
 * (-1 left in fds), and the segments already mapped stay: 0. Otherwise
 * -ESTALE, or -EBADMSG for a reply that does not add up. (ready_resume.c) */
int cl_ready_resume(struct wsrv_model *m, const Wsrv__AttachReply *ar, int *fds, int n);

/* Adds m to / removes m from c's models (takes c->lock); the first sets
 * the session's hooks (cl_replay, cl_note_event). (model_call.c) */
void cl_model_link(struct wsrv_client *c, struct wsrv_model *m);
void cl_model_unlink(struct wsrv_client *c, struct wsrv_model *m);
/* The transport's callback, user the client, under c->lock: a generation
 * the server announced. (events.c) */
void cl_note_event(void *user, const Wsrv__Event *ev);

/* -ESTALE with a sentence when m's generation was replaced; else 0.
 * (model_call.c) */
int cl_model_fresh(const struct wsrv_model *m);
/* c->replay: under c->lock, on a new connection, attaches every model of
 * c again; a model whose generation changed is marked stale. 0 or a
 * negative errno with a sentence. (replay.c) */
int cl_replay(struct wsrv_client *c);


#endif
