// SPDX-License-Identifier: MIT
/* srv_identity.h - whom a client's holds count against: its process,
 * known by an identity that a fork, an exit or a reused pid cannot forge,
 * and its user, whose processes are bounded together (srv_identity.c). */
#ifndef WSRV_SRV_IDENTITY_H
#define WSRV_SRV_IDENTITY_H

#include <stdint.h>

struct server;
struct session;

/* At accept, after s->cred: the process that called connect() is known
 * by its pidfs inode (SO_PEERPIDFD: unique for the boot, in any pid
 * namespace). Its pidfd is kept only when the server cannot see the
 * process's pid (pid 0: another pid namespace), to tell when it is gone;
 * a visible one is looked up again by pid and inode when asked. When the
 * process is gone already (or the kernel is older than 6.5), the
 * connection is its user's alone (below). */
void srv_identity_init(struct session *s);

/* Closes the pidfd s keeps, if any. */
void srv_identity_free(struct session *s);

/* Whose share s's holds count against (a disk tier's cache, device
 * regions): the process that made its connection, over all that
 * process's connections, while that process lives; once it is gone (a
 * child that connected and exited, a pid reused since), the connection is
 * charged to its user's account of orphans, one for all of them. The
 * first call that finds the process gone moves every tier hold of the
 * process's account to the user's. */
uint64_t srv_account(struct server *srv, struct session *s);

/* The users (distinct uids) with a session attached to model mi, at
 * least 1: what a user's part of a shared budget is divided by. */
uint32_t srv_users_of(const struct server *srv, uint32_t mi);

/* The users with any session, at least 1. */
uint32_t srv_users(const struct server *srv);

#endif
