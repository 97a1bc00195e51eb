// SPDX-License-Identifier: MIT
/* peer_serve.h - wsrvd --peer-listen: serving loaded (and loading) models
 * to other hosts over UCX, read-only.
 *
 * One thread with its own UCX context, worker and listener. A connection is
 * accepted only from an address in the allow list, must say Hello and prove
 * it knows the token (peer_auth.h) within PEER_HELLO_TIMEOUT seconds, and
 * is bound to one model whose layout matches the filler's. It may then ask
 * for tables and for pieces of tensors the table says are ready; each
 * piece is read from this host's arena (peer_table_read) and sent.
 *
 * Why active messages, not RMA: over TCP and shared memory UCX emulates
 * RMA in software, and its emulated put writes wherever the remote side
 * says, with no check against registered memory. A context without
 * UCP_FEATURE_RMA installs no such handler, so nothing a peer sends can
 * write into this process; on RDMA fabrics the rendezvous protocol under
 * the active messages still moves the bytes zero-copy.
 */
#ifndef WSRV_PEER_SERVE_H
#define WSRV_PEER_SERVE_H

#include <stdint.h>

#include "errinfo.h"
#include "peer_table.h"
#include "peer_trust.h"

#define PEER_MAX_CONNS 64
#define PEER_MAX_TABLES 64
#define PEER_MAX_SENDS 64          /* replies in flight per connection */
#define PEER_HELLO_TIMEOUT 10.0
#define PEER_REFUSE_GRACE 1.0     /* seconds a refused peer has to read why before the close */

struct peer_serve;

struct peer_serve_counters {
	uint64_t bytes_served;      /* tensor bytes sent to peers */
	uint64_t gets;              /* pieces served */
	uint64_t refused;           /* connections refused: address, token, model, limits */
	uint32_t conns;             /* open now */
};

/* Listens on addr ("ADDR:PORT") on its own thread. trust is copied. An
 * address in use fails, unless busy_wait_s > 0 (taking over from a server
 * that still holds it until it exits): then the thread listens as soon as
 * it is free, giving up (logged) after busy_wait_s seconds, and offers
 * are taken meanwhile. On success *out is owned by the caller
 * (peer_serve_stop). */
int peer_serve_start(const char *addr, const struct peer_trust *trust, double busy_wait_s,
		     struct peer_serve **out, struct errinfo *e);

/* Offers a model: the table is owned by the server from now on (freed by
 * peer_serve_stop; also on failure). A table of the same name replaces
 * the one offered before. */
int peer_serve_offer(struct peer_serve *ps, struct peer_table *t, struct errinfo *e);

/* Offers a model that is whole already (adopted from a predecessor):
 * every tensor ready, with the checksum m has for it. */
int peer_serve_offer_loaded(struct peer_serve *ps, const struct model *m, const struct arena *a,
			    struct errinfo *e);

/* Model name is offered no more (its pending offer dropped too);
 * connections bound to it finish with the table they have. */
void peer_serve_withdraw(struct peer_serve *ps, const char *name);

/* The models this server is about to load (names copied; at most
 * PEER_MAX_TABLES; n = 0 forgets them). A Hello for one of them that is
 * not offered yet is answered "not loaded yet" (-EAGAIN), which a filler
 * takes as "try again" until its --fill-wait is up, rather than "no such
 * model here", which it takes as final. */
void peer_serve_expect(struct peer_serve *ps, const char *const *names, size_t n);

void peer_serve_counters(struct peer_serve *ps, struct peer_serve_counters *out);

/* Stops the thread, closes every connection, frees every table. NULL ok. */
void peer_serve_stop(struct peer_serve *ps);

#endif
