// SPDX-License-Identifier: MIT
/* srv_stats.h - the Stats reply: counters of the server and its models. */
#ifndef WSRV_SRV_STATS_H
#define WSRV_SRV_STATS_H

#include "core_door.h"


int srv_stats_reply(struct server *srv, uint64_t seq, struct reply *r);

/* Open fds of this process; -1 when unknown. */
int srv_count_fds(void);

/* wsrvd's resident bytes (/proc/self/statm). */
uint64_t srv_rss_bytes(void);

#endif
