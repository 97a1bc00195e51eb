// SPDX-License-Identifier: MIT
/* peer_auth.h - hosts prove they know the peer token without sending it
 * (libsodium's HMAC-SHA-256 keyed with the token, over nonces from both
 * sides). The filler says Hello with its nonce; the server answers with
 * a Challenge, its own nonce; the filler sends its Proof; the server
 * checks it and answers with the table, which carries the server's proof.
 * Each proof covers both nonces, the model's name and layout, and which
 * side made it, so none can be replayed on another connection or
 * reflected back. Nothing here sees the network. */
#ifndef WSRV_PEER_AUTH_H
#define WSRV_PEER_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "peer_trust.h"

#define PEER_NONCE_LEN 32
#define PEER_MAC_LEN 32

enum peer_side { PEER_SIDE_FILLER, PEER_SIDE_SERVER };

/* What both proofs cover. */
struct peer_auth_ctx {
	uint8_t filler_nonce[PEER_NONCE_LEN];
	uint8_t server_nonce[PEER_NONCE_LEN];
	char model[128];            /* NUL-terminated */
	uint64_t layout;
};

/* PEER_NONCE_LEN random bytes (the system's CSPRNG). 0 or -EIO. */
int peer_auth_nonce(uint8_t out[PEER_NONCE_LEN]);

/* side's proof of t's token over c. 0, or -EINVAL without a token, or
 * -EIO when libsodium cannot start. */
int peer_auth_mac(const struct peer_trust *t, enum peer_side side, const struct peer_auth_ctx *c,
		  uint8_t out[PEER_MAC_LEN]);

/* Whether mac is side's proof of t's token over c (in constant time). */
bool peer_auth_ok(const struct peer_trust *t, enum peer_side side, const struct peer_auth_ctx *c,
		  const uint8_t mac[PEER_MAC_LEN]);

#endif
