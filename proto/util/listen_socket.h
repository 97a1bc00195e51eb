// SPDX-License-Identifier: MIT
/* listen_socket.h - a daemon's listening socket, claimed safely: the one
 * way wsrvd and wsrv-copyd bind theirs. */
#ifndef WSRV_LISTEN_SOCKET_H
#define WSRV_LISTEN_SOCKET_H

#include <sys/types.h>

#include "errinfo.h"

/* Listens on path (AF_UNIX, SOCK_SEQPACKET, mode mode, 0: 0660; group
 * gid, (gid_t)-1: the daemon's own; a backlog of 512). A lock file (path
 * + ".lock", held for the daemon's life) keeps two daemons apart (who
 * names them in the refusal: "wsrvd", "wsrv-copyd"); a socket file left by
 * a dead daemon is replaced, a live one is refused. A missing folder
 * directly under /run is made (0755). On success *sock and *lock are owned
 * by the caller. */
int listen_claim(const char *path, const char *who, mode_t mode, gid_t gid, int *sock, int *lock,
		 struct errinfo *e);

/* Removes the socket file, then the lock file, and closes both fds; then
 * the folder directly under /run the socket was in, when it is empty. */
void listen_release(const char *path, int sock, int lock);

#endif
