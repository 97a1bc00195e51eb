// SPDX-License-Identifier: MIT
/* srv_socket.h - the server's listening socket. */
#ifndef WSRV_SRV_SOCKET_H
#define WSRV_SRV_SOCKET_H

#include <sys/types.h>

#include "errinfo.h"

/* Listens on path (AF_UNIX, SOCK_SEQPACKET, mode mode, 0: 0660; group
 * gid, (gid_t)-1: the server's own). A lock file (path + ".lock", held
 * for the server's life) keeps two servers apart; a socket file left by a
 * dead server is replaced, a live one is refused. On success *sock and
 * *lock are owned by the caller. */
int srv_listen(const char *path, mode_t mode, gid_t gid, int *sock, int *lock, struct errinfo *e);

/* Removes the socket file, then the lock file, and closes both fds. */
void srv_unlisten(const char *path, int sock, int lock);

#endif
