// SPDX-License-Identifier: MIT
/* peer_serve.h - wsrvd --peer-listen: serving loaded (and loading) models
 * to other hosts, read-only, from a process of its own.
 *
 * Every byte a peer sends is parsed by UCX, and UCX 1.13 aborts the whole
 * process on some malformed ones. So the UCX side runs in the peer process (peer_child.h:
 * wsrvd itself again, exec'd), which wsrvd starts, feeds with the tables
 * it offers (each a memfd the loader writes the readiness into, with the
 * arena's memfds) and starts again when it dies. Its death costs the
 * fills in flight from this host (their fillers go on with other peers
 * or the files) and nothing else: wsrvd's clients do not notice.
 *
 * In the peer process, before UCX reads a byte, every TCP connection UCX
 * accepts, on the named port and on the port UCX's data lanes listen on,
 * is checked against --peer-allow (peer_accept.h), and UCX uses only the
 * network device that carries the named address.
 */
#ifndef WSRV_PEER_SERVE_H
#define WSRV_PEER_SERVE_H

#include <stdint.h>

#include "load_door.h"
#include "errinfo.h"
#include "format_door.h"
#include "peer_trust.h"

#define PEER_MAX_TABLES 64

struct peer_serve;
struct peer_table;

struct peer_serve_counters {
	uint64_t bytes_served;      /* tensor bytes sent to peers */
	uint64_t gets;              /* pieces served */
	uint64_t refused;           /* connections refused: address, token, model, limits */
	uint32_t conns;             /* open now */
	uint32_t restarts;          /* times the peer process was started again */
};

/* Starts the peer process listening on addr ("ADDR:PORT"), and waits for
 * it to say so. trust is copied. An address in use fails, unless
 * busy_wait_s > 0 (taking over from a server that still holds it until
 * it exits): then it listens as soon as it is free, giving up (logged)
 * after busy_wait_s seconds, and offers are taken meanwhile. On success
 * *out is owned by the caller (peer_serve_stop). */
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

/* Model name is offered no more (connections bound to it finish with the
 * table they have). */
void peer_serve_withdraw(struct peer_serve *ps, const char *name);

/* The models this server is about to load (names copied; at most
 * PEER_MAX_TABLES; n = 0 forgets them). A Hello for one of them that is
 * not offered yet is answered "not loaded yet" (-EAGAIN), which a filler
 * takes as "try again" until its --fill-wait is up, rather than "no such
 * model here", which it takes as final. */
void peer_serve_expect(struct peer_serve *ps, const char *const *names, size_t n);

void peer_serve_counters(struct peer_serve *ps, struct peer_serve_counters *out);

/* Stops the peer process, frees every table. NULL ok. */
void peer_serve_stop(struct peer_serve *ps);

#endif
