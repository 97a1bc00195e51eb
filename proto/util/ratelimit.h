// SPDX-License-Identifier: MIT
/* ratelimit.h - a log line per event, up to a rate: what a stranger can
 * make the server write (refused clients, refused peers) is bounded. */
#ifndef WSRV_RATELIMIT_H
#define WSRV_RATELIMIT_H

#include <stdbool.h>

/* At most `burst` events per `window` seconds pass; the rest are counted
 * and reported with the next one that passes. Not thread-safe: one
 * thread's, or under its owner's lock. */
struct ratelimit {
	double window, start;
	unsigned burst, passed, suppressed;
};

/* True when the event passes the limit. */
bool ratelimit_pass(struct ratelimit *rl, double now);

#endif
