// SPDX-License-Identifier: MIT
/* srv_peers.h - wsrvd's options for hosts that fill from each other
 * (--peer-listen, --peer-allow, --peer-token, --fill-from, --fleet,
 * --fleet-index, --fill-wait) and starting what they ask for. */
#ifndef WSRV_SRV_PEERS_H
#define WSRV_SRV_PEERS_H

#include <getopt.h>
#include <stdbool.h>

#include "loaded_door.h"
#include "peer_door.h"

#define PEER_OPT_BASE 0x2000
#define PEER_OPTIONS_COUNT 7
extern const struct option peer_long_options[];
extern const char peer_options_help[];

struct srv_peers {
	const char *listen;         /* --peer-listen, or the fleet's own address */
	struct peer_trust trust;
	char *lists;                /* owned: the --fill-from / --fleet lists, cut up */
	bool fleet;
	long fleet_index;           /* -1 until given */
	double wait_s;              /* -1 until given */
	struct peer_fill_cfg fill;
	struct peer_serve *serve;   /* owned, once started */
};

void srv_peers_init(struct srv_peers *p);

/* Handles one getopt_long option: 1 if it was one of these, 0 if not, a
 * negative errno (logged) when its argument is bad. */
int srv_peers_option(struct srv_peers *p, int opt, const char *arg);

/* Checks the options together (logged); load_only: no serving. */
int srv_peers_check(struct srv_peers *p, bool load_only);

/* Starts serving peers when asked (serve: false for --load-only) and makes
 * lo fill through peers when they are in use. taking_over: the server
 * taken over may hold the address until it exits; listen once it lets go. */
int srv_peers_start(struct srv_peers *p, bool serve, bool taking_over, struct load_opts *lo);

/* Stops serving and frees what p holds. */
void srv_peers_stop(struct srv_peers *p);

#endif
