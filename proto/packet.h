// SPDX-License-Identifier: MIT
/* packet.h - one protocol packet over a SOCK_SEQPACKET socket, with fds
 * (blocking; the client's side and the tests'). */
#ifndef WSRV_PACKET_H
#define WSRV_PACKET_H

#include <stddef.h>
#include <sys/socket.h>

#define WSRV_PROTOCOL_VERSION 1u
/* The disk tier's rules a client takes (Hello.disk_tier, wsrv.proto). */
#define WSRV_DISK_TIER 1u
#define WSRV_MAX_PACKET 65536u
#define WSRV_MAX_FDS 64          /* fds in one packet: manifest + segments */

/* Sends len bytes and nfds fds (may be 0) as one packet. Returns 0 or a
 * negative errno. The fds stay owned by the caller. */
int pkt_send(int sock, const void *buf, size_t len, const int *fds, int nfds);

/* Receives one packet into buf (cap bytes) and up to maxfds fds (CLOEXEC).
 * Returns the packet length (0 for a zero-length packet; -ECONNRESET when
 * the peer closed), or a negative errno: -EMSGSIZE when the packet or its
 * fds did not fit, with every received fd closed. On success the caller
 * owns *nfds fds in fds. */
long pkt_recv(int sock, void *buf, size_t cap, int *fds, int maxfds, int *nfds);

/* Collects the SCM_RIGHTS fds of a received message into fds (up to max);
 * fds beyond max are closed. Returns how many were found in all. */
int pkt_take_fds(struct msghdr *msg, int *fds, int max, int *n);

/* Closes n fds, skipping -1s; fds may be NULL when n is 0. */
void pkt_close_fds(const int *fds, int n);

/* A refused connection's end, for both daemons after their Error packet:
 * reads and drops the few packets the client sent already (closing any
 * fds they carry; PKT_DRAIN_MAX at most, without waiting: a peer cannot
 * keep the caller here), so that closing does not reset the connection
 * and lose the reason, then shuts fd down and closes it (owned from the
 * call on). */
#define PKT_DRAIN_MAX 4
void pkt_drain_close(int fd);

#endif
