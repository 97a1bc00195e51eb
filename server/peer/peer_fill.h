// SPDX-License-Identifier: MIT
/* peer_fill.h - filling a model's arena from peers, the files for the rest.
 *
 * Used as model_load's fill step (load_opts.fill = peer_fill_run). Every
 * tensor a peer holds is fetched from one, in pieces, pipelined and spread
 * over the peers by bytes in flight; its xxh3 is checked against the one
 * the peer reports, which was computed where the bytes were first read
 * from disk. A mismatch or a lost peer costs a retry elsewhere; what no
 * peer has, or what failed everywhere, is read from the files.
 *
 * In a fleet (fleet_index >= 0, peers the fleet in order, this host among
 * them) host I reads from the files only its 1/N of the bytes (a contiguous
 * stretch of the layout, cut by bytes) and fetches the rest from the host
 * that reads it, waiting for it while that host says it is coming. A dead
 * host's share is read from the files.
 *
 * With serve set the model is offered to peers from the start: tensors as
 * they are placed, and tensors coming from this host's own reads.
 */
#ifndef WSRV_PEER_FILL_H
#define WSRV_PEER_FILL_H

#include "loaded_door.h"
#include "peer_serve.h"
#include "peer_trust.h"

#define PEER_MAX_PEERS 32

struct peer_fill_cfg {
	const char *peers[PEER_MAX_PEERS];  /* ADDR:PORT: --fill-from or --fleet */
	size_t npeers;
	int fleet_index;                    /* -1: not a fleet */
	const struct peer_trust *trust;     /* the token to present */
	struct peer_serve *serve;           /* NULL: do not offer the model */
	double connect_wait_s;              /* how long a peer may take to come up */
	uint32_t chunk;                     /* bytes per Get; 0: 1 MiB */
	uint64_t window;                    /* bytes in flight per peer; 0: 64 MiB */
};

/* load_fill_fn: arg is a struct peer_fill_cfg. */
int peer_fill_run(void *arg, struct loaded_model *lm, const struct load_opts *o,
		  struct errinfo *e);

#endif
