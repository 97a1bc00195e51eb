// SPDX-License-Identifier: MIT
/* srv_fdlimit.h - fitting the client limit and the device regions to
 * RLIMIT_NOFILE: what the server's own fds and, unless privileged, the fds
 * in flight to clients that have not read their replies may use. */
#ifndef WSRV_SRV_FDLIMIT_H
#define WSRV_SRV_FDLIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fewer clients than this is no server: the fit refuses instead. */
#define FD_FIT_MIN_CLIENTS 8u
/* What a default start should serve under any limit: models served while
 * loading get fewer, larger segments where fds are scarce so that this
 * many clients fit (fd_fit_segments). */
#define FD_FIT_WANT_CLIENTS 64u
/* Attach replies a client may have unread (each 1 + segments fds). */
#define FD_FIT_REPLIES 4u

/* The most segments a model may have so that FD_FIT_WANT_CLIENTS clients
 * fit under limit (RLIMIT_NOFILE; UINT64_MAX: none), unprivileged: at
 * least 2, at most want. */
uint32_t fd_fit_segments(uint64_t limit, uint32_t want);

struct fd_fit_in {
	uint64_t limit;             /* RLIMIT_NOFILE (UINT64_MAX: none) */
	uint64_t own;               /* the server's fds before any client: the
	                             * models' memfds, sockets, io_uring, logs */
	uint32_t fd_budget;         /* unread fds one client may hold */
	bool privileged;            /* root: in-flight fds are not charged */
	uint32_t clients;           /* --max-clients, or the default */
	bool clients_asked;         /* --max-clients was given: never lowered */
	uint32_t regions;           /* --max-regions */
	uint64_t units;             /* the disk tiers' units (one memfd each when cached) */
};

struct fd_fit {
	uint32_t clients;           /* sessions at once */
	uint32_t regions;           /* device regions (one fd each) */
	bool clients_fitted;        /* lowered from the default to fit */
	uint32_t unit_fds;          /* units' memfds the tiers may keep open
	                             * (tier_unit_fd_limit): what is left after the
	                             * clients, the regions and FD_FIT_RESERVE */
};

/* fds kept free beside everything counted: the metrics' and peers'
 * connections, a take-over's, a reload's files. */
#define FD_FIT_RESERVE 64u
/* Routed experts a disk tier must be able to keep at once, at least (or
 * all it has): a layer's take carries up to 62. */
#define FD_FIT_MIN_UNITS 64u

/* Fits in to the limit. Each client costs one fd of the server's own and,
 * unless privileged, fd_budget charged to the user for fds in flight (a
 * separate count against the same limit). Without an asked client limit,
 * the default is lowered to what fits, keeping up to a quarter of the room
 * for device regions; regions then take what the clients leave. Returns 0,
 * or -EMFILE with a sentence in why when the asked limit does not fit or
 * fewer than FD_FIT_MIN_CLIENTS would. */
int fd_fit(const struct fd_fit_in *in, struct fd_fit *out, char *why, size_t n);

#endif
