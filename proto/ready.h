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
	uint32_t nunits;            /* a disk tier's units (routed experts read one by
	                             * one), 0 when none */
	uint64_t manifest_hash;     /* READY: the loaded model's manifest hash */
	uint64_t total_bytes;       /* tensor bytes to place */
	uint64_t placed_bytes;      /* placed so far */
	uint64_t segments_off;      /* uint32_t state[nsegments], futex words */
	uint64_t xxh3_off;          /* uint64_t xxh3[ntensors], 0 until placed */
	uint64_t total_size;        /* bytes of the page(s) */
	char message[RD_MESSAGE_MAX]; /* FAILED: the load's error, NUL-terminated */
	uint64_t tier_off;          /* a model with a disk tier (--memory-budget):
	                             * uint32_t tier[nsegments + nunits], futex words;
	                             * else 0 */
	uint64_t units_off;         /* nunits: struct rd_unit units[nunits]; else 0 */
};

_Static_assert(sizeof(struct rd_header) == 360, "rd_header is 360 bytes");
_Static_assert(offsetof(struct rd_header, state) == 24, "rd_header.state at 24");
_Static_assert(offsetof(struct rd_header, message) == 88, "rd_header.message at 88");

/* A disk tier's word for a segment that always stays in memory; a
 * segment on the tier has a count instead, raised (and its waiters woken)
 * each time the server has read it in, or failed to. */
#define RD_TIER_RESIDENT UINT32_MAX
/* A disk tier's word for a segment that stays in memory but for its
 * units (each routed expert's pages), which live on the tier: mapped
 * whole, every unit's range left unreadable until the unit is taken. */
#define RD_TIER_PARTS (UINT32_MAX - 1)

/* A unit of a disk tier: a routed expert of one layer, its tensors'
 * pages [offset, offset + length) of segment segment (page-aligned).
 * Its tier word is tier[nsegments + its index], a count as a tiered
 * segment's. The server reads it into a fresh sealed memfd of the
 * segment's size holding only these pages; a client maps that memfd's
 * range over the same range of the segment. */
struct rd_unit {
	uint32_t segment;
	int32_t layer;
	uint32_t expert;
	uint32_t reserved;
	uint64_t offset, length;
};

_Static_assert(sizeof(struct rd_unit) == 32, "rd_unit is 32 bytes");

/* A validated view; pointers are into the mapping. */
struct rd_view {
	const struct rd_header *h; /* its live words (state, placed_bytes) only:
	                            * the server may write it at any time */
	uint32_t nsegments, nunits; /* as checked: use these, never h's */
	const uint32_t *segments;
	const uint64_t *xxh3;
	const uint32_t *tier;       /* NULL: no disk tier */
	const struct rd_unit *units; /* h->nunits of them, or NULL */
};

/* Bytes of the readiness page for nseg segments and nt tensors. */
uint64_t ready_size(uint32_t nseg, uint32_t nt);
/* The same with a disk tier's words after the checksums (one per segment
 * and unit), then its units. */
uint64_t ready_size_tiered(uint32_t nseg, uint32_t nt, uint32_t nunits);

/* Checks the page at buf (len bytes) against the manifest's counts: magic,
 * version, sizes and offsets in range (a unit's range is the reader's to
 * check against its segment). 0 or -EBADMSG with a sentence. */
int ready_check(const void *buf, size_t len, uint32_t nseg, uint32_t nt, struct rd_view *v,
		char *err, size_t errlen);

/* Fills a new page's header (buf holds ready_size bytes, zeroed; with
 * tiered, ready_size_tiered bytes, every segment's tier word
 * RD_TIER_RESIDENT, every unit's 0, the units themselves left to the
 * writer). */
void ready_init(void *buf, uint32_t nseg, uint32_t nt, uint64_t total_bytes, bool tiered, uint32_t nunits);

#endif
