// SPDX-License-Identifier: MIT
/* srv_successor.h - the taking side of a live hand-over (srv_successor.c). */
#ifndef WSRV_SRV_SUCCESSOR_H
#define WSRV_SRV_SUCCESSOR_H

#include "errinfo.h"

struct handover;

/* Asks the server at path for everything: h gets its fds by name
 * ("listen", "lock", the models') and its state record; *conn is the
 * connection, kept for successor_finish. -ENOENT or -ECONNREFUSED: no
 * server there. */
int successor_take(const char *path, struct handover *h, int *conn, struct errinfo *e);
/* Tells it this process serves now (it then leaves); closes conn. */
int successor_finish(int conn, struct errinfo *e);

#endif
