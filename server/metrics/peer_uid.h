// SPDX-License-Identifier: MIT
/* peer_uid.h - whose a local TCP connection is: the uid that owns the
 * socket at its other end, from the kernel's socket diagnostics
 * (NETLINK_SOCK_DIAG), so that local users sharing an address (127.0.0.1,
 * or the host's own address when the listener is bound to 0.0.0.0) are
 * told apart (peer_uid.c). */
#ifndef WSRV_PEER_UID_H
#define WSRV_PEER_UID_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The uid owning the TCP socket at peer (an address and port of this
 * host, loopback or not, IPv4 or IPv6) connected to this host's port
 * local_port: 0 with *uid; -ENOENT when there is none (a remote peer,
 * whose socket is not in this host's table, or a local one its process
 * has closed already: an orphan tells no user), -ENOTUNIQ when two users'
 * match, or another negative errno. Blocking, bounded: one netlink dump
 * filtered to the two ports. */
int local_peer_uid(const struct sockaddr *peer, uint16_t local_port, uid_t *uid);

#endif
