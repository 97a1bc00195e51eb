// SPDX-License-Identifier: MIT
/* loader.h - reads a model's files into its arena with io_uring.
 *
 * Many large O_DIRECT reads are in flight at once into registered bounce
 * buffers; each block is placed, in file order per shard, at its tensors'
 * arena offsets while the tensors' xxh3-64 checksums are computed in the same
 * pass. Several shards are read concurrently. Where O_DIRECT is refused the
 * shard is read buffered, and a log line says so.
 */
#ifndef WSRV_LOADER_H
#define WSRV_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "errinfo.h"
#include "progress.h"
#include "format_door.h"

#define LOADER_DEFAULT_QD 64u
#define LOADER_DEFAULT_BLOCK (1u << 20)
#define LOADER_DEFAULT_SHARDS 4u

/* How files are read. Auto: each file as Dontcache when the page cache
 * holds nearly all of it (READ_CACHED_SHARE: its bytes come from memory,
 * not the disk), else as Direct. Direct: O_DIRECT, buffered where the file
 * system refuses it. Dontcache: buffered reads that drop the pages they
 * bring in as they complete (RWF_DONTCACHE, Linux 6.14 and later; plain
 * buffered where the file system lacks it), for disks where O_DIRECT is the
 * slower path. Buffered: plain reads through the page cache. */
enum read_mode { READ_AUTO = 0, READ_DIRECT, READ_DONTCACHE, READ_BUFFERED };
#define READ_CACHED_SHARE 0.9

struct loader_pool;

struct loader_opts {
	unsigned queue_depth;   /* reads in flight; 0: default */
	size_t block_size;      /* bytes per read, a multiple of 4096; 0: default */
	unsigned max_shards;    /* shards read at once; 0: default */
	enum read_mode read;
	enum progress_mode progress; /* a bar on a terminal, or log lines (progress.h) */
	bool (*stop)(void);     /* when set and true, the load stops (-ECANCELED) */
	const uint8_t *want;    /* per tensor, nonzero: read it; NULL: every tensor */
	/* Check each tensor's xxh3 against the one the model has (a disk
	 * tier's read again) instead of setting it: a mismatch fails with -EIO
	 * naming the tensor. */
	bool verify;
	/* Read in layer order (layer 0, the global group, then layers 1, 2,
	 * ...) across every shard, rather than each shard in file order:
	 * serving while loading, layer 0 is ready first. */
	bool layer_order;
	uint64_t read_rate;     /* bytes a second at most; 0: no limit */
	/* When set, called (on the loader's thread) as each tensor is placed
	 * and its xxh3 set; idx indexes model.tensors. */
	void (*on_tensor)(void *arg, uint32_t idx);
	void *on_tensor_arg;
	/* When set, called (on the loader's thread, with on_tensor_arg)
	 * before the first byte of tensor idx is placed: the pages it fills
	 * are not there yet. */
	void (*on_tensor_start)(void *arg, uint32_t idx);
	/* When set, the bytes to place and those placed so far, stored
	 * atomically as the load goes (another thread reads them). */
	uint64_t *total_bytes, *placed_bytes;
	/* When set, the ring and read buffers to use (its queue depth and
	 * block size override those above), kept for the caller's next
	 * load; NULL: the load makes its own (loader_pool.h). */
	struct loader_pool *pool;
};

struct loader_stats {
	uint64_t bytes_read;    /* from the files, block padding included */
	uint64_t tensor_bytes;  /* placed into the arena */
	double seconds;         /* opening the files through the last placement */
	double hash_seconds;    /* of which computing checksums */
	double copy_seconds;    /* of which copying into the arena */
	unsigned buffered_files;/* files read through the page cache */
	unsigned cached_files;  /* of which READ_AUTO found in it */
	uint64_t pool_bytes;    /* read buffers allocated */
	uint64_t pinned_bytes;  /* of which registered with io_uring (pinned) */
};

/* Where a tensor of this layer comes in layer order (loader_opts.
 * layer_order): layer 0 first (a worker starts there), then the global
 * group (embeddings, the head), then the other layers in order. */
static inline uint32_t loader_order_key(int32_t layer)
{
	if (layer == 0)
		return 0;
	return layer < 0 ? 1 : (uint32_t)layer + 1;
}

/* Fills every tensor of m (or those o->want names; only their byte ranges
 * are read, give or take a block at each gap) into a (laid out by m) and sets each tensor's
 * xxh3. Fails, naming the file and offset, on a read error, a short read or a
 * file that changed since its header was read; a failed load leaves the
 * arena's contents undefined, and the caller must not serve it. */
int loader_run(struct model *m, struct arena *a, const struct loader_opts *o,
	       struct loader_stats *st, struct errinfo *e);

/* Test seams: when set, called for every open of a model file (returns an fd
 * or a negative errno) and with every read completion's result, which the
 * hook may change to inject an error or a short read. */
extern int (*loader_open_hook)(const char *path, int flags);
extern void (*loader_cqe_hook)(const char *path, uint64_t off, int *res);

#endif
