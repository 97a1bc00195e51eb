// SPDX-License-Identifier: MIT
/* peer_auth.c - the peer token's challenge and response, on libsodium. */
#include "peer_auth.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

static int ready(void)
{
	/* Idempotent and thread-safe; 1 when already done. */
	return sodium_init() < 0 ? -EIO : 0;
}

int peer_auth_nonce(uint8_t out[PEER_NONCE_LEN])
{
	if (ready() < 0)
		return -EIO;
	randombytes_buf(out, PEER_NONCE_LEN);
	return 0;
}

int peer_auth_mac(const struct peer_trust *t, enum peer_side side, const struct peer_auth_ctx *c,
		  uint8_t out[PEER_MAC_LEN])
{
	static const char *const label[] = { "wsrv peer filler v2", "wsrv peer server v2" };
	crypto_auth_hmacsha256_state st;
	uint8_t layout[8];

	if (!t || t->token_len == 0)
		return -EINVAL;
	if (ready() < 0)
		return -EIO;
	for (int i = 0; i < 8; i++)
		layout[i] = (uint8_t)(c->layout >> (8 * i));
	crypto_auth_hmacsha256_init(&st, t->token, t->token_len);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label[side], strlen(label[side]) + 1);
	crypto_auth_hmacsha256_update(&st, c->filler_nonce, PEER_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, c->server_nonce, PEER_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)c->model, strnlen(c->model, sizeof(c->model)));
	crypto_auth_hmacsha256_update(&st, layout, sizeof(layout));
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
	return 0;
}

bool peer_auth_ok(const struct peer_trust *t, enum peer_side side, const struct peer_auth_ctx *c,
		  const uint8_t mac[PEER_MAC_LEN])
{
	uint8_t want[PEER_MAC_LEN];
	bool ok = peer_auth_mac(t, side, c, want) == 0 && crypto_verify_32(want, mac) == 0;

	sodium_memzero(want, sizeof(want));
	return ok;
}
