// SPDX-License-Identifier: MIT
/* srv_early.h - serving while loading (wsrvd --serve-while-loading): the
 * models are laid out before the loop starts, read on one thread while the
 * loop serves, and published one by one. A client that says it can
 * (Attach.while_loading) attaches to a loading model and gets its layout
 * manifest, its readiness page and the segments ready so far; it asks for
 * the others (AttachSegments, srv_pieces.h) as the page says they are
 * ready. */
#ifndef WSRV_SRV_EARLY_H
#define WSRV_SRV_EARLY_H

#include "core_door.h"

/* Starts the thread that finishes every loading entry of srv, in order,
 * signalling srv->reload_efd after each. 0 or -errno. */
int early_start(struct server *srv);
/* On the loop, when reload_efd fired: publishes the entries the thread has
 * finished. A failed load is logged and stops the server (status 1), as a
 * failed load at start always has. */
void early_poll(struct server *srv);
/* Stops the thread (the server is stopping) and joins it. */
void early_stop(struct server *srv);
/* Whether a model is still loading. */
bool early_any(const struct server *srv);

#endif
