// SPDX-License-Identifier: MIT
/* loader_pool.h - a loader's io_uring and read buffers. A load makes its
 * own and frees them at its end; a thread that loads again and again (a
 * disk tier's reader, one segment at a time) makes one and passes it in
 * loader_opts.pool, so that each read does not fault, zero and pin fresh
 * buffers again (docs/benchmarks.md has what that costs). One thread at
 * a time uses a pool. */
#ifndef WSRV_LOADER_POOL_H
#define WSRV_LOADER_POOL_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errinfo.h"

struct loader_pool {
	struct io_uring ring;
	bool ring_ok;
	bool sparse;                /* the buffer table is registered empty */
	uint8_t *buf_fixed;         /* per buffer: 1 registered (pinned), 2 refused */
	uint8_t *bufs;              /* nbufs buffers of bs bytes */
	size_t bufs_len, bs;
	unsigned qd, nbufs;
};

/* nbufs buffers of bs bytes and a ring of qd entries into *p: 0, or a
 * negative errno with e set (p then needs loader_pool_fini). */
int loader_pool_init(struct loader_pool *p, unsigned qd, unsigned nbufs, size_t bs, struct errinfo *e);

/* Whether buffer i is registered, registering it at its first use (its
 * pages pinned: the bytes added to *pinned). */
bool loader_pool_fixed(struct loader_pool *p, unsigned i, uint64_t *pinned);

/* The ring and the buffers go; reads in flight must have completed.
 * Zeroed pools are fine. */
void loader_pool_fini(struct loader_pool *p);

#endif
