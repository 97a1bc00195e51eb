// SPDX-License-Identifier: MIT
/* srv_access.h - who may reach the socket: the allow lists' users and
 * groups by name or number, the socket's mode, a check, once the socket
 * exists, that everyone the lists let in can open it (the kernel checks
 * the file's mode before wsrvd sees a connection), and the decision for
 * each peer that connects. */
#ifndef WSRV_SRV_ACCESS_H
#define WSRV_SRV_ACCESS_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "srv.h"

/* A user (or group) option's argument: a name, or a number below
 * UINT32_MAX. 0, or -EINVAL with a log line naming --opt. */
int srv_uid_arg(const char *opt, const char *arg, uid_t *out);
int srv_gid_arg(const char *opt, const char *arg, gid_t *out);

/* --socket-mode: octal, the owner's read and write and, for the group
 * and others, both or neither (0600, 0660, 0666). 0 or -EINVAL, logged. */
int srv_mode_arg(const char *arg, mode_t *out);

/* Warns, once per entry, of an allowed user the socket at path keeps out
 * by its mode (not root, not its owner, no "other" access, and not in
 * its group) and of an allowed group the socket's group and mode do not
 * let in as such. */
void srv_reach_check(const char *path, const struct srv_config *cfg);

/* Whether c is of the server's own user (not root) and --refuse-own-uid
 * refuses it. */
bool srv_own_uid_refused(const struct server *srv, const struct ucred *c);

/* Is the peer on fd (credentials c) allowed? Root, the server's own user
 * (unless refused), the listed uids, and members of the listed gids
 * (primary or supplementary: SO_PEERGROUPS). */
bool srv_peer_allowed(const struct server *srv, int fd, const struct ucred *c);

#endif
