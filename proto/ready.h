// SPDX-License-Identifier: MIT
/* ready.h - the readiness page: how far a model's load has come, in a
 * small memfd the server writes through its own mapping and every client
 * attached while the model loads maps read-only (protocol.md, "Serving
 * while loading").
 *
 * The model's state and each segment's state are 32-bit futex words: a
 * client waits on them with FUTEX_WAIT (shared, not private) and the server
 * wakes every waiter when one changes. A segment is READY once every tensor
 * in it is placed and its checksum set, and the segment's memfd is sealed;
 * only then does the server hand out its fd. Each tensor's xxh3 is stored
 * as it is placed (the manifest a loading model is attached with has 0
 * there). A state never goes back: LOADING -> READY or LOADING -> FAILED.
 */
#ifndef WSRV_READY_H
#define WSRV_READY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RD_MAGIC "WSRVRDY"         /* 8 bytes with the NUL */
#define RD_VERSION 1u
#define RD_MESSAGE_MAX 256u

enum rd_state { RD_LOADING = 0, RD_READY = 1, RD_FAILED = 2 };

struct rd_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;       /* sizeof(struct rd_header) */
	uint32_t nsegments, ntensors;
	uint32_t state;             /* the whole model; a futex word */
	int32_t error;              /* FAILED: a negative errno */
	uint32_t failed_tensor;     /* FAILED: the tensor it names, or UINT32_MAX */
	uint32_t reserved0;
	uint64_t manifest_hash;     /* READY: the loaded model's manifest hash */
	uint64_t total_bytes;       /* tensor bytes to place */
	uint64_t placed_bytes;      /* placed so far */
	uint64_t segments_off;      /* uint32_t state[nsegments], futex words */
	uint64_t xxh3_off;          /* uint64_t xxh3[ntensors], 0 until placed */
	uint64_t total_size;        /* bytes of the page(s) */
	char message[RD_MESSAGE_MAX]; /* FAILED: the load's error, NUL-terminated */
	uint64_t tier_off;          /* a model with a disk tier (--memory-budget):
	                             * uint32_t tier[nsegments], futex words; else 0 */
	uint64_t reserved[1];
};

_Static_assert(sizeof(struct rd_header) == 360, "rd_header is 360 bytes");
_Static_assert(offsetof(struct rd_header, state) == 24, "rd_header.state at 24");
_Static_assert(offsetof(struct rd_header, message) == 88, "rd_header.message at 88");

/* A disk tier's word for a segment that always stays in memory; a
 * segment on the tier has a count instead, raised (and its waiters woken)
 * each time the server has read it in, or failed to. */
#define RD_TIER_RESIDENT UINT32_MAX

/* A validated view; pointers are into the mapping. */
struct rd_view {
	const struct rd_header *h;
	const uint32_t *segments;
	const uint64_t *xxh3;
	const uint32_t *tier;       /* NULL: no disk tier */
};

/* Bytes of the readiness page for nseg segments and nt tensors. */
uint64_t ready_size(uint32_t nseg, uint32_t nt);
/* The same with a disk tier's words after the checksums. */
uint64_t ready_size_tiered(uint32_t nseg, uint32_t nt);

/* Checks the page at buf (len bytes) against the manifest's counts: magic,
 * version, sizes and offsets in range. 0 or -EBADMSG with a sentence. */
int ready_check(const void *buf, size_t len, uint32_t nseg, uint32_t nt, struct rd_view *v,
		char *err, size_t errlen);

/* Fills a new page's header (buf holds ready_size bytes, zeroed; with
 * tiered, ready_size_tiered bytes, every tier word RD_TIER_RESIDENT). */
void ready_init(void *buf, uint32_t nseg, uint32_t nt, uint64_t total_bytes, bool tiered);

#endif
