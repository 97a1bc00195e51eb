// SPDX-License-Identifier: MIT
/* peer_engine.h - serving loaded (and loading) models to other hosts over
 * UCX, read-only: the engine that runs in the peer process (peer_child.h),
 * never in wsrvd itself, so that nothing a peer sends can stop wsrvd.
 *
 * One thread with its own UCX context, worker and listener. A connection is
 * accepted only from an address in the allow list, must say Hello and prove
 * it knows the token (peer_auth.h) within PEER_HELLO_TIMEOUT seconds, and
 * is bound to one model whose layout and generation match the filler's. It
 * may then ask for tables and for pieces of tensors the table says are
 * ready; each piece is read from this host's arena (peer_table_read) and
 * sent.
 *
 * Why active messages, not RMA: over TCP and shared memory UCX emulates
 * RMA in software, and its emulated put writes wherever the remote side
 * says, with no check against registered memory. A context without
 * UCP_FEATURE_RMA installs no such handler, so nothing a peer sends can
 * write into this process; on RDMA fabrics the rendezvous protocol under
 * the active messages still moves the bytes zero-copy.
 */
#ifndef WSRV_PEER_ENGINE_H
#define WSRV_PEER_ENGINE_H

#include "errinfo.h"
#include "peer_serve.h"
#include "peer_table.h"
#include "peer_trust.h"

#define PEER_MAX_CONNS 64
#define PEER_MAX_SENDS 64          /* replies in flight per connection */
#define PEER_HELLO_TIMEOUT 10.0
#define PEER_REFUSE_GRACE 1.0     /* seconds a refused peer has to read why before the close */

struct peer_engine;

/* Listens on addr ("ADDR:PORT") on its own thread; trust is copied, cnt
 * (shared with wsrvd) is written with atomic adds. An address in
 * use fails, unless busy_wait_s > 0: then the thread listens as soon as
 * it is free, giving up (logged) after busy_wait_s seconds. On success
 * *out is the caller's (peer_engine_stop). */
int peer_engine_start(const char *addr, const struct peer_trust *trust, double busy_wait_s,
		      struct peer_serve_counters *cnt, struct peer_engine **out, struct errinfo *e);
/* Offers a table (owned from now on, freed on failure too); it replaces
 * one of the same name. */
int peer_engine_offer(struct peer_engine *ps, struct peer_table *t, struct errinfo *e);
/* Model name is offered no more. */
void peer_engine_withdraw(struct peer_engine *ps, const char *name);
/* The models about to be offered (see peer_serve_expect). */
void peer_engine_expect(struct peer_engine *ps, const char *const *names, size_t n);
/* Stops the thread, closes every connection, frees every table. NULL ok. */
void peer_engine_stop(struct peer_engine *ps);

#endif
