// SPDX-License-Identifier: MIT
/* peer_table.h - what one host offers its peers of one model: where each
 * tensor lies, whether it is loaded yet, and its checksum; with read-only
 * mappings of the arena's segments of its own, so that it outlives the
 * generation it was made from. */
#ifndef WSRV_PEER_TABLE_H
#define WSRV_PEER_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "errinfo.h"
#include "model.h"
#include "peer_proto.h"

/* What a peer may ask for of one tensor: its held part (all of it unless
 * only some ranks are loaded); Get offsets count from the part's start. */
struct peer_tensor {
	uint32_t seg;
	uint64_t off, size;
};

struct peer_table {
	char name[128];
	uint64_t layout;
	uint32_t ntensors;
	struct peer_tensor *t;      /* owned */
	uint64_t *xxh3;             /* owned; valid once PEER_READY */
	uint8_t *state;             /* owned: enum peer_tensor_state, set with release order */
	uint32_t nseg;
	const uint8_t **map;        /* owned read-only mappings */
	size_t *map_len;
	int *fd;                    /* owned: the memfds again (4 KiB arenas), or NULL */
};

/* An xxh3 over what the bytes are (m->content_id: the files' headers and
 * sizes, or a published generation's checksums) and everything that
 * places them: each tensor's name, dtype, shape, segment, offset, size
 * and held part, and the segments' sizes. Two hosts with equal hashes put
 * the same generation's bytes at the same places. */
uint64_t peer_layout_hash(const struct model *m);

/* The table of m laid out in a (its memfds are mapped read-only here, and
 * for 4 KiB arenas held open, so a may be freed before the table). Nothing is ready. On success *out is
 * owned by the caller (peer_table_free). */
int peer_table_create(const struct model *m, const struct arena *a, struct peer_table **out,
		      struct errinfo *e);
void peer_table_free(struct peer_table *t);

/* Tensor i is in the arena with checksum xxh3: peers may have it now. */
void peer_table_set_ready(struct peer_table *t, uint32_t i, uint64_t xxh3);
/* Tensor i is being read from this host's files: peers may wait for it. */
void peer_table_set_coming(struct peer_table *t, uint32_t i);
/* enum peer_tensor_state of tensor i. */
unsigned peer_table_state(const struct peer_table *t, uint32_t i);

/* Address of tensor i's byte off in the read-only mapping. */
static inline const uint8_t *peer_table_ptr(const struct peer_table *t, uint32_t i, uint64_t off)
{
	return t->map[t->t[i].seg] + t->t[i].off + off;
}

/* Copies len bytes of tensor i at off into dst: with pread where the table
 * holds the memfds (each 4 KiB page touched first through a mapping is a
 * fault, which cost more than the transfer: docs/benchmarks.md, issue 23),
 * else from the mapping. 0 or -errno. */
int peer_table_read(const struct peer_table *t, uint32_t i, uint64_t off, void *dst, size_t len);

#endif
