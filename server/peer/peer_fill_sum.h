// SPDX-License-Identifier: MIT
/* peer_fill_sum.h - a fetched tensor's xxh3, summed as its pieces land.
 * Pieces that land in order are summed where they were received (the
 * warm landing buffer); what landed out of order is read back from the
 * arena once every piece is in. Nothing here maps the arena: on a
 * 4 KiB arena each page's first touch through a mapping is a fault,
 * which costs more than the transfer (docs/benchmarks.md). */
#ifndef WSRV_PEER_FILL_SUM_H
#define WSRV_PEER_FILL_SUM_H

#include <stddef.h>
#include <stdint.h>

#include "load_door.h"
#include "errinfo.h"

struct fill_sum {
	struct xxh3_stream *st;     /* owned while the tensor is fetched */
	uint64_t done;              /* bytes summed, from its start */
};

struct fill_sums {
	struct arena *arena;        /* not owned */
	struct fill_sum *t;         /* owned: one per tensor */
	size_t ntensors;
	uint8_t *buf;               /* owned: read-back buffer */
};

int fill_sums_init(struct fill_sums *s, size_t ntensors, struct arena *a, struct errinfo *e);
void fill_sums_fini(struct fill_sums *s);

/* Tensor i is fetched (again) from its start. */
int fill_sums_start(struct fill_sums *s, uint32_t i);
/* A piece of tensor i at off (from the held part's start) landed; p is
 * where it was received. */
void fill_sums_piece(struct fill_sums *s, uint32_t i, uint64_t off, const void *p, size_t len);
/* Every piece of tensor i (len bytes, at (seg, seg_off)) landed: its
 * xxh3 in *out, reading back what was not summed yet. */
int fill_sums_end(struct fill_sums *s, uint32_t i, uint32_t seg, uint64_t seg_off, uint64_t len,
		  uint64_t *out, struct errinfo *e);

#endif
