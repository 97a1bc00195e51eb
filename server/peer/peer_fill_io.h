// SPDX-License-Identifier: MIT
/* peer_fill_io.h - the filling side's UCX: one worker, a connection per
 * peer, Hello and Status exchanges, and Gets landing in the arena. The
 * scheduler (peer_fill.c) reads the state these leave after each progress.
 * Everything here runs on the filling thread. */
#ifndef WSRV_PEER_FILL_IO_H
#define WSRV_PEER_FILL_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "errinfo.h"
#include "loaded_door.h"
#include "peer_bounce.h"
#include "peer_proto.h"

#define FIO_MAX_SLOTS 2048
#define FIO_SLOTS_PER_PEER 4       /* Gets in flight per peer, under PEER_MAX_SENDS */
#define FIO_REPLY_TIMEOUT 10.0     /* seconds a Hello or Status may take */
#define FIO_PIECE_TIMEOUT 10.0     /* seconds a piece may take, asked to landed */

/* A peer's life on the filling side. FP_IDLE -> FP_HELLO (connected, our
 * Hello sent) -> FP_PROVED (its Challenge came, our Proof went) ->
 * FP_READY (its table came, with its proof checked; a later table keeps
 * it there); from any of them to FP_IDLE again (not up yet: tried again
 * until --fill-wait is up) or to FP_DEAD (for good). Its moves: fpeer_to
 * (lifecycle.h). */
enum fpeer_state { FP_IDLE, FP_HELLO, FP_PROVED, FP_READY, FP_DEAD, FPEER_STATE_MAX };

struct fpeer {
	char name[64];
	struct sockaddr_storage ss;
	socklen_t sl;
	ucp_ep_h ep;
	enum fpeer_state st;
	double next_try;            /* FP_IDLE: when to connect again */
	double connect_until;       /* failing to connect before this: try again */
	double asked;               /* when the pending Hello/Status was sent */
	bool asking;                /* a Hello or Status is unanswered */
	bool close_pending;         /* dead, its endpoint still to close */
	struct peer_hello hello;    /* sent to it, with its own nonce */
	struct peer_auth_ctx auth;  /* what the proofs cover */
	struct peer_proof proof;    /* alive while sent */
	struct peer_tstate *tab;    /* owned: its last table */
	uint32_t slots;             /* Gets in flight */
	uint64_t assigned;          /* bytes of tensors being fetched from it */
	struct load_source *src;    /* its counters, in the loaded model */
	char why[160];              /* why it is dead */
};

/* A Get's slot: FS_FREE -> FS_WAIT (asked) -> FS_RECV (its piece
 * arriving) -> FS_FREE, or FS_WAIT -> FS_FREE (landed at once, or failed).
 * Its moves: fslot_to (lifecycle.h). */
enum fslot_state { FS_FREE, FS_WAIT, FS_RECV, FSLOT_STATE_MAX };

struct fio;

struct fslot {
	struct fio *f;
	uint64_t id;                /* slot index + generation << 16 */
	enum fslot_state st;
	uint32_t tensor;
	uint64_t off;
	uint32_t len;
	int peer;
	uint32_t seg;               /* where it lands in the arena */
	uint64_t seg_off;
	uint8_t *dst;               /* what it is received into: the arena's
	                             * fill mapping, or a landing buffer */
	int buf;                    /* the landing buffer's index, or -1 */
	int status;                 /* 0, or why the piece failed */
	double sent;                /* when it was asked for */
	bool done;                  /* landed (or failed): for the scheduler */
	struct peer_get get;        /* the request, alive while it is sent */
};

/* Where pieces land. Filling by write (4 KiB shared memory), a piece is
 * received into a reused buffer (FIO_SLOTS_PER_PEER per peer) and written
 * into the memfd: received straight into the mapping, every page would be
 * faulted in and zeroed first, at a fifth of the rate. Few buffers, reused
 * while still in the cache, beat many: with 32 pieces of 4 MiB in flight
 * per peer the fill ran at 5.7 Gbit/s, with 4 of 1 MiB at 9-10
 * (docs/benchmarks.md). */
struct fio_dest {
	struct arena *arena;        /* not owned */
	uint8_t *const *map;        /* not owned: the writable mapping per segment */
	uint32_t chunk;             /* the piece size asked for */
};

struct fio {
	ucp_context_h ctx;
	ucp_worker_h worker;
	int efd;                    /* the worker's event fd (UCX's) */
	struct fpeer *peers;        /* not owned */
	size_t npeers;
	struct fslot slots[FIO_MAX_SLOTS];
	uint32_t free_slots[FIO_MAX_SLOTS], nfree;
	uint32_t done_slots[FIO_MAX_SLOTS], ndone; /* landed, for the scheduler */
	const struct peer_hello *hello; /* the Hello's model and layout */
	const struct peer_trust *trust; /* the token proven, and asked of peers */
	struct fio_dest dest;
	struct bounce_pool bounce;  /* landing buffers (4 KiB arenas) */
	uint32_t ntensors;
	bool changed;               /* a table arrived or a peer died */
};

int fio_init(struct fio *f, struct fpeer *peers, size_t npeers, const struct peer_hello *hello,
	     const struct peer_trust *trust, const struct fio_dest *dest, struct errinfo *e);
void fio_fini(struct fio *f);

/* Starts connecting to peer i and sends Hello (with a new nonce); its
 * Challenge is answered with a Proof, and its first table must carry its
 * own proof, or it is refused. */
void fio_connect(struct fio *f, size_t i);
/* Asks peer i for its current table. */
void fio_status(struct fio *f, size_t i);
/* Marks peer i dead (why); its unanswered Gets fail now, landing ones once
 * the next fio_progress has closed its endpoint. Safe in UCX callbacks. */
void fio_kill(struct fio *f, size_t i, const char *why);

/* Asks peer for len bytes of tensor at off, to land
 * in segment seg at seg_off. -EBUSY: no slot or landing buffer free. */
int fio_get(struct fio *f, int peer, uint32_t tensor, uint64_t off, uint32_t len, uint32_t seg,
	    uint64_t seg_off);
/* Returns a landed slot to the free list. */
void fio_release(struct fio *f, struct fslot *s);

/* Waits up to ms for the network, without spinning. */
void fio_wait(struct fio *f, int ms);
/* Progresses; returns whether anything happened. */
bool fio_progress(struct fio *f);

#endif
