// SPDX-License-Identifier: MIT
/* netlab.h - hosts on one machine for the peer tests and wsrv-bench fleet:
 * a network namespace per host, each joined by a veth pair to a bridge in
 * a switch namespace (10.99.0.0/24), all removed by netlab_down. Where
 * namespaces cannot be made (not root, no ip), the hosts share loopback. */
#ifndef WSRV_NETLAB_H
#define WSRV_NETLAB_H

#include <stdbool.h>

#define NETLAB_MAX 8

struct netlab {
	bool ns;                    /* namespaces, else loopback */
	int n;
	char sw[32];
	char host[NETLAB_MAX][32];  /* namespace names */
	char ip[NETLAB_MAX][32];
	char net[32];               /* the hosts' network, for --peer-allow */
	int port;                   /* the next fresh port block (netlab_ports) */
	char addr[NETLAB_MAX][64];  /* ADDR:PORT for each host, after netlab_ports */
};

/* Sets up n hosts named after tag and this process. Never fails: falls
 * back to loopback (nl->ns false). */
void netlab_up(struct netlab *nl, int n, const char *tag);
void netlab_down(struct netlab *nl);

/* Fresh ports for every host (ports linger in TIME_WAIT after a server). */
void netlab_ports(struct netlab *nl);

/* Enters host i's namespace (in a child, before exec). 0 or -errno. */
int netlab_enter(const struct netlab *nl, int i);

#endif
