// SPDX-License-Identifier: MIT
/* peer_child.h - the peer process: wsrvd exec'd again with
 * PEER_CHILD_ARG and one end of a SOCK_SEQPACKET pair as fd 3, running
 * the UCX serving engine (peer_engine.h) for the wsrvd that started it
 * (peer_serve.c). What they say to each other, one packet each:
 *
 *   wsrvd -> child   PC_CONFIG  + the counters' memfd
 *   child -> wsrvd   PC_STARTED (status 0, or why not)
 *   wsrvd -> child   PC_OFFER   + the table's memfd and the segments'
 *                    PC_WITHDRAW, PC_EXPECT, PC_STOP
 *
 * The child ignores SIGTERM and SIGINT (a stop comes from wsrvd, which
 * may still be serving its clients) and dies with wsrvd (PDEATHSIG).
 */
#ifndef WSRV_PEER_CHILD_H
#define WSRV_PEER_CHILD_H

#include <stdbool.h>
#include <stdint.h>

#include "peer_serve.h"
#include "peer_trust.h"

#define PEER_CHILD_ARG "--peer-process"
#define PEER_CHILD_FD 3

enum pc_kind { PC_CONFIG = 1, PC_STARTED, PC_OFFER, PC_WITHDRAW, PC_EXPECT, PC_STOP };

struct pc_config {
	uint32_t kind;
	uint32_t reserved;
	double busy_wait_s;
	char addr[64];
	struct peer_trust trust;
};

struct pc_started {
	uint32_t kind;
	int32_t status;
	char msg[256];
};

struct pc_offer {
	uint32_t kind;
	uint32_t nseg;              /* segment fds after the table's */
	uint32_t hugetlb;
};

struct pc_name {
	uint32_t kind;
	char name[128];
};

struct pc_expect {
	uint32_t kind;
	uint32_t n;
	char names[PEER_MAX_TABLES][128];
};

/* The child's main (wsrvd's main calls it for PEER_CHILD_ARG): serves
 * until PC_STOP or until wsrvd goes. Its exit status. */
int peer_child_main(int sock);

#endif
