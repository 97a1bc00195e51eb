// SPDX-License-Identifier: MIT
/* piece_read.h - what the arena and the loader offer a disk tier: parts
 * of a segment read again from the model's files into memfds of their
 * own, and such a memfd put in (or taken out of) a segment's place. The
 * tier never writes an arena's fields itself. */
#ifndef WSRV_PIECE_READ_H
#define WSRV_PIECE_READ_H

#include <stdint.h>

#include "arena.h"
#include "errinfo.h"
#include "loader.h"
#include "format_door.h"

/* One piece: [off, off + len) of the segment, read into fd (the caller's
 * fresh memfd of size bytes, mapped read-only at ro) from its offset 0. */
struct piece {
	uint64_t off, len, size;
	int fd;
	const uint8_t *ro;
};

/* Reads the tensors lo->want marks, all of segment g of a's layout, into
 * p[0..n) with the loader: by write, into 4 KiB pages, whatever the first
 * load used, every tensor checked as lo says; then seals each piece
 * without F_SEAL_SHRINK (arena_seg.cuttable), p[i].fd becoming its sealed
 * read-only description. a is only read: the loader works on a copy whose
 * segment g is the pieces. 0, or a negative errno with e. */
int piece_read(struct model *m, const struct arena *a, uint32_t g, struct piece *p, uint32_t n,
	       const struct loader_opts *lo, struct loader_stats *st, struct errinfo *e);

/* Segment g's memfd and mapping are a disk tier's: sealed without
 * F_SEAL_SHRINK from now on, so that an eviction can cut it. */
void arena_piece_cuttable(struct arena *a, uint32_t g);
/* Puts fd and its read-only mapping ro (now the arena's) in segment g's
 * place, which must be empty. */
void arena_piece_put(struct arena *a, uint32_t g, int fd, const uint8_t *ro);
/* Takes segment g's memfd and mapping out (*fd, *ro: the caller's, -1
 * and NULL when empty); the segment is left empty. */
void arena_piece_take(struct arena *a, uint32_t g, int *fd, const uint8_t **ro);
/* No 2 MiB folios from now on (pieces read again fill 4 KiB pages, and a
 * sweep would walk segments being dropped); why goes in the page note
 * where the arena has no huge-page pool. */
void arena_folios_off(struct arena *a, const char *why);

#endif
