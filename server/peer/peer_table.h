// SPDX-License-Identifier: MIT
/* peer_table.h - what one host offers its peers of one model: where each
 * tensor lies, whether it is loaded yet, and its checksum, in a memfd
 * shared with the process that serves peers; with the arena's memfds of
 * its own, so that it outlives the generation it was made from. */
#ifndef WSRV_PEER_TABLE_H
#define WSRV_PEER_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "load_door.h"
#include "errinfo.h"
#include "format_door.h"
#include "peer_proto.h"

/* What a peer may ask for of one tensor: its held part (all of it unless
 * only some ranks are loaded); Get offsets count from the part's start. */
struct peer_tensor {
	uint32_t seg;
	uint64_t off, size;
};

/* At the start of a table's memfd, then t[], xxh3[] and state[] at their
 * offsets: the loader (and a fill's process) write the state, the peer
 * serving process (peer_child.h) reads it from the same pages. */
struct peer_table_head {
	uint64_t magic;             /* PEER_TABLE_MAGIC */
	char name[128];
	uint64_t layout;
	uint32_t ntensors, nseg;
	uint64_t t_off, xxh3_off, state_off, size;
};
#define PEER_TABLE_MAGIC 0x3162617472656570ull /* "peertab1" */

struct peer_table {
	char name[128];
	uint64_t layout;
	uint32_t ntensors;
	struct peer_tensor *t;      /* in the memfd */
	uint64_t *xxh3;             /* in the memfd; valid once PEER_READY */
	uint8_t *state;             /* in the memfd: enum peer_tensor_state, set with release order */
	int tfd;                    /* owned: the table's memfd */
	void *tmap;                 /* its mapping: read-write where made, read-only where imported */
	size_t tlen;
	uint32_t nseg;
	int *fd;                    /* owned: the arena's memfds again */
	bool hugetlb;               /* the memfds have no read(): from the mapping */
	const uint8_t **map;        /* owned read-only mappings (imported tables only) */
	size_t *map_len;
};

/* An xxh3 over what the bytes are (m->content_id: the files' headers and
 * sizes, or a published generation's checksums) and everything that
 * places them: each tensor's name, dtype, shape, segment, offset, size
 * and held part, and the segments' sizes. Two hosts with equal hashes put
 * the same generation's bytes at the same places. */
uint64_t peer_layout_hash(const struct model *m);

/* The table of m laid out in a, in a memfd of its own, with a's memfds
 * held open (so a may be freed before the table). Nothing is ready. On
 * success *out is owned by the caller (peer_table_free). */
int peer_table_create(const struct model *m, const struct arena *a, struct peer_table **out,
		      struct errinfo *e);
/* Where a table is served from (the peer process): its memfd tfd and the
 * segments' memfds (nseg of them, hugetlb or not), all owned from now on
 * (closed on failure too); the table is checked against the memfds'
 * sizes and the segments mapped read-only. */
int peer_table_import(int tfd, int *seg_fds, uint32_t nseg, bool hugetlb, struct peer_table **out,
		      struct errinfo *e);
void peer_table_free(struct peer_table *t);

/* Tensor i is in the arena with checksum xxh3: peers may have it now. */
void peer_table_set_ready(struct peer_table *t, uint32_t i, uint64_t xxh3);
/* Tensor i is being read from this host's files: peers may wait for it. */
void peer_table_set_coming(struct peer_table *t, uint32_t i);
/* enum peer_tensor_state of tensor i. */
unsigned peer_table_state(const struct peer_table *t, uint32_t i);

/* Address of tensor i's byte off in the read-only mapping (imported
 * tables). */
static inline const uint8_t *peer_table_ptr(const struct peer_table *t, uint32_t i, uint64_t off)
{
	return t->map[t->t[i].seg] + t->t[i].off + off;
}

/* Copies len bytes of tensor i at off into dst (imported tables): with
 * pread where the memfds have read() (each 4 KiB page touched first
 * through a mapping is a fault, which costs more than the transfer:
 * docs/benchmarks.md), else from the mapping. 0 or -errno. */
int peer_table_read(const struct peer_table *t, uint32_t i, uint64_t off, void *dst, size_t len);

#endif
