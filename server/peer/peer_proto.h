// SPDX-License-Identifier: MIT
/* peer_proto.h - what wsrvd hosts say to each other over UCX active
 * messages (docs/protocol.md#peers).
 *
 * A filling host connects to a serving one and says Hello: its nonce, the
 * model's name and its layout hash (both hosts must lay the model out the
 * same way, byte for byte). The server answers with a Challenge (its
 * nonce), the filler with its Proof of the token (peer_auth.h), and the
 * server with the table, which carries the server's proof and, for each
 * tensor, whether the server holds it and its xxh3 from where it was
 * first read from disk. The token itself never travels; a protocol 1
 * Hello (which carried it) is refused with a sentence. Get
 * asks for a piece of one held tensor; Data answers it with the bytes. The
 * serving side only ever sends from its read-only mappings: it enables no
 * RMA at all (see peer_serve.h for why).
 *
 * Records are little-endian host structs; both ends are wsrvd of the same
 * protocol version on x86-64 or another little-endian machine.
 */
#ifndef WSRV_PEER_PROTO_H
#define WSRV_PEER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "peer_auth.h"
#include "peer_trust.h"

#define PEER_MAGIC 0x3172656570727377ull /* "wsrpeer1" */
#define PEER_VERSION 2u
#define PEER_MAX_CHUNK (16u << 20)   /* bytes one Get may ask for */
#define PEER_MAX_TENSORS (1u << 22)  /* a status table is at most 64 MiB */

enum peer_am {
	/* Small records go in the message's header, larger ones in its data
	 * (a UCX header may be small). */
	PEER_AM_HELLO = 1,          /* filler -> server: data struct peer_hello */
	PEER_AM_STATUS = 2,         /* filler -> server: header struct peer_status_req */
	PEER_AM_TABLE = 3,          /* server -> filler: data peer_table_hdr + peer_tstate[] */
	PEER_AM_GET = 4,            /* filler -> server: header struct peer_get */
	PEER_AM_DATA = 5,           /* server -> filler: header peer_data, data the bytes */
	PEER_AM_CHALLENGE = 6,      /* server -> filler: data struct peer_challenge */
	PEER_AM_PROOF = 7,          /* filler -> server: data struct peer_proof */
};

/* What every Hello starts with, of any version. */
struct peer_hello_start {
	uint64_t magic;
	uint32_t version;
};

struct peer_hello {
	uint64_t magic;
	uint32_t version;
	uint32_t reserved0;
	uint8_t nonce[PEER_NONCE_LEN]; /* the filler's */
	char model[128];            /* NUL-terminated */
	uint64_t layout;            /* peer_layout_hash of the filler's model */
	uint32_t ntensors;
	uint32_t reserved;
};

struct peer_challenge {
	uint64_t magic;
	uint8_t nonce[PEER_NONCE_LEN]; /* the server's */
};

struct peer_proof {
	uint64_t magic;
	uint8_t mac[PEER_MAC_LEN];  /* peer_auth_mac(PEER_SIDE_FILLER) */
};

struct peer_status_req {
	uint64_t magic;
};

/* The reply to Proof and to Status (and a refusal of Hello). status < 0:
 * refused (msg says why); the connection is closed after a refusal. The
 * fields before mac are protocol 1's, so that a protocol 1 filler reads
 * the sentence refusing it. */
struct peer_table_hdr {
	uint64_t magic;
	int32_t status;
	uint32_t ntensors;          /* entries that follow, when status is 0 */
	char msg[160];
	uint8_t mac[PEER_MAC_LEN];  /* peer_auth_mac(PEER_SIDE_SERVER), once proven */
};

enum peer_tensor_state {
	PEER_ABSENT = 0,            /* not here, and not being read here */
	PEER_READY = 1,             /* here, with its checksum */
	PEER_COMING = 2,            /* being read from this host's files */
};

struct peer_tstate {
	uint64_t xxh3;              /* valid when PEER_READY */
	uint64_t ready;             /* enum peer_tensor_state */
};

struct peer_get {
	uint64_t req;               /* the filler's, echoed in Data */
	uint32_t tensor;            /* index in the layout */
	uint32_t len;               /* at most PEER_MAX_CHUNK */
	uint64_t off;               /* from the tensor's first byte */
};

/* status < 0: nothing follows (not held, out of range, too many asked). */
struct peer_data {
	uint64_t req;
	int32_t status;
	uint32_t len;
};

#endif
