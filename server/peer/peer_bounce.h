// SPDX-License-Identifier: MIT
/* peer_bounce.h - reused buffers that pieces pass through on their way
 * between a 4 KiB arena and the network. Each first touch of a 4 KiB
 * shared-memory page through a mapping is a fault (and, for a new page, a
 * zeroing); pread and pwrite on the memfd touch no mapping, and a buffer
 * used again is already faulted in (and still in the cache). On this VM a
 * host filled from another at 1.3-1.5 Gbit/s receiving into and sending
 * from mappings, and at 9-10 Gbit/s through these (wsrv-bench fleet's
 * peer_gbps; docs/benchmarks.md). Single-threaded: each user has
 * its own. */
#ifndef WSRV_PEER_BOUNCE_H
#define WSRV_PEER_BOUNCE_H

#include <stddef.h>
#include <stdint.h>

#define BOUNCE_MAX 64               /* buffers in one pool */
#define PEER_BOUNCE_BYTES (32u << 20) /* a serving host's pool */
#define PEER_BOUNCE_IDLE_S 2.0      /* idle this long, its buffers are freed */

struct bounce_pool {
	uint8_t *buf[BOUNCE_MAX];   /* owned */
	size_t cap[BOUNCE_MAX];
	uint8_t busy[BOUNCE_MAX];
	size_t unit;                /* the smallest buffer made */
	size_t bytes, limit;        /* allocated, and at most */
};

/* An empty pool that makes buffers of unit bytes or more, at most limit
 * bytes in all. */
void bounce_init(struct bounce_pool *p, size_t unit, size_t limit);
/* A free buffer of at least len bytes in *out: its index, or -EBUSY when
 * every buffer is busy and no more fit the limit (or memory is short). */
int bounce_get(struct bounce_pool *p, size_t len, uint8_t **out);
void bounce_put(struct bounce_pool *p, int i);
/* Frees the buffers not in use (an idle pool holds no memory). */
void bounce_trim(struct bounce_pool *p);
/* Frees every buffer; none may be in use. */
void bounce_fini(struct bounce_pool *p);

#endif
