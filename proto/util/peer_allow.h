// SPDX-License-Identifier: MIT
/* peer_allow.h - who may use a daemon's Unix socket, one rule for wsrvd
 * and wsrv-copyd: root, the daemon's own user, the listed users, and
 * members of the listed groups (primary, or supplementary by
 * SO_PEERGROUPS); and the allow options' arguments, by name or number. */
#ifndef WSRV_PEER_ALLOW_H
#define WSRV_PEER_ALLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* A user (or group) option's argument: a name, or a number below
 * UINT32_MAX. 0, or -EINVAL with a sentence naming --opt in err. */
int peer_uid_arg(const char *opt, const char *arg, uid_t *out, char *err, size_t errlen);
int peer_gid_arg(const char *opt, const char *arg, gid_t *out, char *err, size_t errlen);

/* Is the peer on fd (credentials c) allowed: root, the listed uids (a
 * daemon lists its own), the listed gids as c's primary group or as one
 * of the peer's first 256 supplementary groups? */
bool peer_allowed(int fd, const struct ucred *c, const uid_t *uids, size_t nuids, const gid_t *gids,
		  size_t ngids);

/* The pidfd of the process that connected the peer on fd (SO_PEERPIDFD;
 * the caller's to close), with its pidfs inode, unique for the boot and
 * in any pid namespace, in *ino: >= 0; or -ESRCH when that process has
 * exited or is gone, -ENOPROTOOPT on a kernel without SO_PEERPIDFD (before
 * 6.5), or another negative errno. */
int peer_pidfd(int fd, uint64_t *ino);

/* Whether pidfd's process has exited (its pidfd is readable then). */
bool pidfd_exited(int pidfd);

/* The process that connected the peer on fd, as an identity a reused pid
 * or another pid namespace cannot confuse: its pidfs inode (SO_PEERPIDFD,
 * Linux 6.5+), with bit 62 set; its pid (c->pid) where the kernel has no
 * SO_PEERPIDFD; or, for a process gone already or invisible, its user's
 * (bit 63 and the uid): what a per-process limit counts. */
uint64_t peer_process_id(int fd, const struct ucred *c);
/* The same, and in *pidfd the process's pidfd (the caller's to close),
 * or -1 where there is none, for peer_account to ask again later. */
uint64_t peer_process_held(int fd, const struct ucred *c, int *pidfd);
/* The account a connection's shares are charged to now: its process
 * (process, from peer_process_held) while that lives, else its user's
 * orphans, one account for all of them (a child that connected and left
 * makes no new process), as wsrvd's shares are (srv_identity.c). */
uint64_t peer_account(int pidfd, uint64_t process, uid_t uid);

#endif
