// SPDX-License-Identifier: MIT
/* srv_region.h - device regions: wsrvd as the broker of the workers' shared
 * device memory (docs/design/streams.md, "Device regions").
 *
 * A region is one device copy of a rank's resident tensors. It is keyed by
 * the model and its generation, the device's identity, the handle kind, the
 * fingerprint of the resident layout and the size. The first worker to ask
 * fills it (the writer) and commits it with its exported handle, an fd the
 * server then holds and hands to every later worker with the same key. The
 * server never touches the memory: it counts holders, drops a region whose
 * writer gives up or dies before committing, and closes the handle when the
 * last holder lets go (unless regions are kept). */
#ifndef WSRV_SRV_REGION_H
#define WSRV_SRV_REGION_H

#include <stdbool.h>
#include <stdint.h>

#include "core_door.h"
#include "wsrv.pb-c.h"

struct server;
struct session;
struct reply;

/* The requests; each fills r (an Error on refusal) and returns 0 or the
 * negative errno it replied with. commit_fd is the fd that came with the
 * request (or -1); RegionCommit takes it (it is -1 afterwards). */
int region_open(struct server *srv, struct session *s, const Wsrv__RegionOpen *q,
		uint64_t seq, struct reply *r);
int region_commit(struct server *srv, struct session *s, const Wsrv__RegionCommit *q,
		  int *commit_fd, uint64_t seq, struct reply *r);
int region_close(struct server *srv, struct session *s, const Wsrv__RegionClose *q,
		 uint64_t seq, struct reply *r);

/* Once a second: a region still being filled after cfg.region_fill_timeout
 * seconds is dropped, and its slot goes back; the writer's commit is
 * refused from then on. */
void region_tick(struct server *srv, double now);

/* Lets go of every region s holds (its session is ending). */
void region_release_session(struct server *srv, struct session *s);

/* Fills st's regions (allocated; region_stats_free frees them). */
int region_stats(const struct server *srv, Wsrv__StatsReply *st);
void region_stats_free(Wsrv__StatsReply *st);

/* Closes every handle (the server is stopping). */
void region_free_all(struct server *srv);

#endif
