// SPDX-License-Identifier: MIT
/* srv_loop.h - wsrvd's one io_uring event loop. */
#ifndef WSRV_SRV_LOOP_H
#define WSRV_SRV_LOOP_H

#include "errinfo.h"
#include "core_door.h"

/* Serves srv on the listening socket lfd (from listen_claim, with its lock
 * fd; both are owned by srv_run from here on) until SIGINT or SIGTERM: then
 * stops accepting, says Goodbye to every client, and returns 0 once they are
 * gone (or after two seconds). SIGINT and SIGTERM are blocked in the calling
 * thread and read through a signalfd. */
int srv_run(struct server *srv, int lfd, int lock, struct errinfo *e);

#endif
