// SPDX-License-Identifier: MIT
/* peer_trust.h - who may fill from this host: an allow list of networks
 * (--peer-allow CIDR) and a shared token (--peer-token FILE), and the
 * ADDR:PORT peers are named by. */
#ifndef WSRV_PEER_TRUST_H
#define WSRV_PEER_TRUST_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "errinfo.h"

#define PEER_MAX_ALLOW 32
#define PEER_TOKEN_MIN 16
#define PEER_TOKEN_MAX 256

struct peer_net {
	int family;                 /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned bits;              /* prefix length */
};

struct peer_trust {
	struct peer_net allow[PEER_MAX_ALLOW];
	size_t nallow;
	uint8_t token[PEER_TOKEN_MAX];
	size_t token_len;           /* 0: none read */
};

/* Adds "10.0.0.0/8", "fd00::/8" or a single address (a full-length
 * prefix). -EINVAL with a sentence when malformed, -E2BIG past the limit. */
int peer_trust_allow(struct peer_trust *t, const char *cidr, struct errinfo *e);

/* Reads the token from path: its first line, 16 to 256 bytes. The file
 * must be a regular file that only its owner can read or write (as ssh
 * insists for keys), or -EPERM says so. */
int peer_trust_token(struct peer_trust *t, const char *path, struct errinfo *e);

/* Whether addr is in one of the allowed networks. IPv4-mapped IPv6
 * addresses match IPv4 networks. */
bool peer_trust_allowed(const struct peer_trust *t, const struct sockaddr *addr);

/* Logs that a connection from who was refused (how: at which step),
 * at most 5 lines in 10 s from any thread; the lines kept out are counted
 * in the next one, so that strangers cannot fill the log.
 * The refusal itself is counted by the caller (wsrv_peer_refused_total). */
void peer_refusal_log(const char *who, const char *how);

/* Parses "ADDR:PORT" or "[ADDR6]:PORT" into ss (port 1..65535). */
int peer_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len,
		    struct errinfo *e);

/* "ADDR:PORT" of a socket address, for logs and stats. */
void peer_addr_str(const struct sockaddr *sa, char *buf, size_t len);

#endif
