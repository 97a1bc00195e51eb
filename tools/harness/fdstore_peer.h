// SPDX-License-Identifier: MIT
/* fdstore_peer.h - systemd's side of the fd store, played by the tests and
 * the restart benchmark: a notify socket that keeps what a service pushes
 * (FDSTORE=1, FDSTOREREMOVE=1, FDNAME=), and starting the next instance
 * with those fds as LISTEN_FDS / LISTEN_FDNAMES, as systemd does on a
 * restart. */
#ifndef WSRV_FDSTORE_PEER_H
#define WSRV_FDSTORE_PEER_H

#include <stdbool.h>
#include <sys/types.h>

#define FDSTORE_MAX 256

struct fdstore {
	int sock;
	char path[200];
	char names[FDSTORE_MAX][64];
	int fds[FDSTORE_MAX];       /* owned */
	int n;
	bool ready, stopping;       /* READY=1, STOPPING=1 seen */
};

/* Binds the notify socket at dir/notify.sock. 0 or a negative errno. */
int fdstore_open(struct fdstore *s, const char *dir);
/* Reads messages for up to ms milliseconds (until READY=1 if asked). */
void fdstore_drain(struct fdstore *s, int ms, bool until_ready);
/* Takes every message already queued, without waiting. */
void fdstore_drain_queued(struct fdstore *s);
/* Drops (closes) every fd called name. */
void fdstore_remove(struct fdstore *s, const char *name);
/* The names colon-joined, as LISTEN_FDNAMES (a static buffer). */
const char *fdstore_names(const struct fdstore *s);
/* In a child about to exec: NOTIFY_SOCKET, and s's fds at 3, 4, ... with
 * LISTEN_FDS, LISTEN_PID (this process) and LISTEN_FDNAMES. */
int fdstore_pass(const struct fdstore *s);
void fdstore_close(struct fdstore *s);

#endif
