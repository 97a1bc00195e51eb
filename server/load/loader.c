// SPDX-License-Identifier: MIT
/* loader.c - the io_uring read loop and in-order placement.
 *
 * Each shard's data region is read as aligned blocks; completions arrive in
 * any order, but a shard's blocks are placed strictly in file order so each
 * tensor's checksum can be computed in one streaming pass over its bytes.
 */
#include "loader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "format_door.h"
#include "loader_pool.h"
#include "log.h"
#include "page_cached.h"
#include "progress.h"
#include "test_seam.h"
#include "xxh3_stream.h"

#define DIO_ALIGN 4096u
#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080
#endif
#define LOADER_BUFS_PER_READ 4u

int (*loader_open_hook)(const char *path, int flags);
void (*loader_cqe_hook)(const char *path, uint64_t off, int *res);

struct piece {
	uint32_t key;               /* read order: by key, then by file offset */
	uint64_t file_off, size;
	uint32_t seg;               /* where it goes in the arena */
	uint64_t off;
	struct model_tensor *t;
};

struct block;

struct shard {
	const struct st_file *sf;
	int fd;
	bool direct;
	bool dontcache;             /* buffered reads with RWF_DONTCACHE */
	bool cached;                /* READ_AUTO found it in the page cache */
	struct piece *pieces;
	size_t npieces, cur;
	uint64_t cur_done;          /* bytes of pieces[cur] placed */
	size_t rp;                  /* the first piece not wholly submitted for reading */
	uint64_t run_end;           /* where the current run of close pieces ends */
	uint32_t key;               /* the current run's pieces' key */
	struct xxh3_stream *xs;
	uint64_t next_read, end;    /* submission cursor and end of file */
	struct block *head, *tail;  /* submitted blocks, in file order */
};

struct block {
	struct shard *sh;
	uint64_t off;
	uint32_t len, need, got;
	int buf;
	bool done;
	bool direct;                /* submitted on the shard's O_DIRECT fd */
	bool dontcache;             /* submitted with RWF_DONTCACHE */
	struct block *next;
};

struct loader {
	struct loader_pool own;     /* the run's own ring and buffers ... */
	struct loader_pool *p;      /* ... or the caller's (loader_opts.pool) */
	size_t bs;
	unsigned qd, inflight;
	unsigned nbufs;             /* > qd: finished blocks wait for their turn
	                             * to be placed without stopping new reads */
	struct block *blocks;
	int *free_bufs;
	unsigned nfree;
	struct shard *shards;
	size_t nshards, rr;
	unsigned max_shards;
	bool layer_order;
	bool verify;                /* loader_opts.verify */
	uint64_t read_rate;
	double t0;
	uint64_t placed, read;
	struct progress prog;
	struct arena *arena;
	bool (*stop)(void);
	struct loader_stats *st;
	void (*on_tensor)(void *arg, uint32_t idx);
	void (*on_tensor_start)(void *arg, uint32_t idx);
	void *on_tensor_arg;
	uint64_t *placed_out;       /* o->placed_bytes */
	struct model *m;
};

static uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static int do_open(const char *path, int flags)
{
	int fd;

	if (loader_open_hook)
		return loader_open_hook(path, flags);
	fd = file_open_regular(path, flags, NULL, NULL);
	return fd;
}

static int cmp_piece(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->file_off < y->file_off ? -1 : x->file_off > y->file_off;
}

static uint32_t order_key(const struct model_tensor *t, bool layer_order)
{
	return layer_order ? loader_order_key(t->layer) : 0;
}

/* Builds each shard's list of non-empty tensors in file order; empty tensors
 * get their checksum here. */
static int plan_pieces(struct loader *L, struct model *m, const uint8_t *want,
		       struct errinfo *e)
{
	static const uint8_t none[1];

	for (size_t i = 0; i < m->ntensors; i++) {
		struct model_tensor *t = &m->tensors[i];
		struct shard *sh = &L->shards[t->file];
		if (want && !want[i])
			continue;
		if (t->part_len == 0) { /* empty, or not held (a partial load) */
			t->xxh3 = XXH3_64bits(none, 0);
			continue;
		}
		/* The held part only: all of it unless only some ranks are loaded. */
		sh->pieces[sh->npieces++] = (struct piece){ order_key(t, L->layer_order),
			t->file_off + t->part_off, t->part_len, t->segment, t->offset + t->part_off, t };
	}
	for (size_t f = 0; f < L->nshards; f++) {
		struct shard *sh = &L->shards[f];
		qsort(sh->pieces, sh->npieces, sizeof(*sh->pieces), cmp_piece);
		sh->next_read = align_down(sh->sf->data_start, DIO_ALIGN);
		sh->end = sh->npieces ? sh->sf->file_size : sh->next_read;
		if (!(sh->xs = xxh3_stream_new()))
			return err_set(e, -ENOMEM, "out of memory");
	}
	return 0;
}

/* The file is the one whose header was read: the same inode, size,
 * mtime and ctime. Verifying (loader_opts.verify), the same size is enough: every
 * tensor read is checked against its checksum, so a file put back with
 * the same bytes is read again, and any changed byte fails. */
static int check_same(const struct shard *sh, const char *when, bool verify, struct errinfo *e)
{
	const struct st_file *sf = sh->sf;
	struct stat st;

	if (fstat(sh->fd, &st) < 0)
		return err_set(e, -errno, "%s: cannot stat: %s", sf->path, strerror(errno));
	if ((uint64_t)st.st_size != sf->file_size ||
	    (!verify && (st.st_dev != sf->dev || st.st_ino != sf->ino ||
			 st.st_mtim.tv_sec != sf->mtime.tv_sec || st.st_mtim.tv_nsec != sf->mtime.tv_nsec ||
			 st.st_ctim.tv_sec != sf->ctime.tv_sec || st.st_ctim.tv_nsec != sf->ctime.tv_nsec)))
		return err_set(e, -ESTALE, "%s: the file changed %s (size %" PRIu64 " -> %" PRIu64 ")",
			       sf->path, when, sf->file_size, (uint64_t)st.st_size);
	return 0;
}

/* READ_AUTO's choice for the file open as fd (O_DIRECT): read through
 * the page cache (its O_DIRECT flag cleared) when the cache holds nearly
 * all of it. */
static void auto_mode(struct shard *sh, int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (page_cached_share(fd, sh->sf->file_size) < READ_CACHED_SHARE || fl < 0 ||
	    fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0)
		return;
	sh->direct = false;
	sh->dontcache = sh->cached = true;
}

static int open_shard(struct shard *sh, enum read_mode mode, bool verify, struct errinfo *e)
{
	const char *path = sh->sf->path;
	bool buffered = mode == READ_DONTCACHE || mode == READ_BUFFERED;
	int fd = -EINVAL;

	sh->dontcache = mode == READ_DONTCACHE;
	if (!buffered)
		fd = do_open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	sh->direct = fd >= 0;
	if (fd == -EINVAL) {
		if (!buffered)
			log_info("%s: O_DIRECT refused by the file system; reading it buffered", path);
		fd = do_open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		return err_set(e, fd, "%s: cannot open: %s", path, strerror(-fd));
	sh->fd = fd;
	if (mode == READ_AUTO && sh->direct)
		auto_mode(sh, fd);
	return check_same(sh, "since its header was read", verify, e);
}

/* Switches a shard whose O_DIRECT reads were refused to buffered reads. */
static int fall_back(struct loader *L, struct shard *sh, struct errinfo *e)
{
	int fd = do_open(sh->sf->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return err_set(e, fd, "%s: cannot open: %s", sh->sf->path, strerror(-fd));
	log_info("%s: O_DIRECT reads refused; reading it buffered", sh->sf->path);
	close(sh->fd);
	sh->fd = fd;
	sh->direct = false;
	L->st->buffered_files++;
	return 0;
}

/* The run's ring and buffers: the caller's pool, or its own. */
static int setup_ring(struct loader *L, struct loader_pool *pool, struct errinfo *e)
{
	if (pool) {
		L->p = pool;
		return 0;
	}
	L->p = &L->own;
	return loader_pool_init(&L->own, L->qd, L->nbufs, L->bs, e);
}

static void submit_block(struct loader *L, struct block *b)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&L->p->ring);
	uint8_t *dst = L->p->bufs + (size_t)b->buf * L->bs + b->got;
	uint64_t off = b->off + b->got;
	unsigned len = b->len - b->got;

	/* Never fails: at most qd reads are in flight and the ring has qd
	 * entries. */
	if (loader_pool_fixed(L->p, (unsigned)b->buf, &L->st->pinned_bytes))
		io_uring_prep_read_fixed(sqe, b->sh->fd, dst, len, off, b->buf);
	else
		io_uring_prep_read(sqe, b->sh->fd, dst, len, off);
	b->direct = b->sh->direct;
	b->dontcache = b->sh->dontcache && !b->direct;
	if (b->dontcache)
		sqe->rw_flags = RWF_DONTCACHE;
	io_uring_sqe_set_data(sqe, b);
	L->inflight++;
}

/* Once the current run is submitted, starts the next: from the block
 * holding the next piece (in piece order), through the pieces that follow
 * it in the file less than a block apart and of the same key (read gap and
 * all). With every tensor wanted and no layer order this is one run. */
static void skip_gap(struct loader *L, struct shard *sh)
{
	const struct piece *p;
	uint64_t end;
	size_t j;

	if (sh->next_read < sh->run_end)
		return;
	if (sh->rp == sh->npieces) {
		sh->next_read = sh->run_end = sh->end;
		return;
	}
	p = &sh->pieces[sh->rp];
	sh->next_read = align_down(p->file_off, DIO_ALIGN);
	sh->key = p->key;
	end = p->file_off + p->size;
	for (j = sh->rp + 1; j < sh->npieces && sh->pieces[j].key == p->key &&
	     sh->pieces[j].file_off >= end && sh->pieces[j].file_off <= end + L->bs; j++)
		end = sh->pieces[j].file_off + sh->pieces[j].size;
	sh->rp = j;
	end = align_up(end, DIO_ALIGN);
	sh->run_end = end < sh->end ? end : sh->end;
}

/* The next shard with reads left, round-robin over the first max_shards
 * such shards. */
static struct shard *next_shard(struct loader *L)
{
	struct shard *best = NULL;
	size_t seen = 0, at = 0;

	/* Layer order: the shard whose next run comes first, whatever
	 * max_shards says. */
	for (size_t k = 0; L->layer_order && k < L->nshards; k++) {
		struct shard *sh = &L->shards[(L->rr + k) % L->nshards];
		skip_gap(L, sh);
		if (sh->next_read >= sh->end || (best && sh->key >= best->key))
			continue;
		best = sh;
		at = k;
	}
	if (best)
		L->rr = (L->rr + at + 1) % L->nshards;
	if (L->layer_order)
		return best;

	for (size_t k = 0; k < L->nshards && seen < L->max_shards; k++) {
		struct shard *sh = &L->shards[(L->rr + k) % L->nshards];
		skip_gap(L, sh);
		if (sh->next_read >= sh->end)
			continue;
		seen++;
		L->rr = (L->rr + k + 1) % L->nshards;
		return sh;
	}
	return NULL;
}

static void loader_fill(struct loader *L)
{
	struct shard *sh;

	while (L->nfree && L->inflight < L->qd && (sh = next_shard(L))) {
		int buf = L->free_bufs[--L->nfree];
		struct block *b = &L->blocks[buf];
		uint64_t left = sh->run_end - sh->next_read;

		*b = (struct block){ .sh = sh, .off = sh->next_read, .buf = buf };
		b->need = (uint32_t)(left < L->bs ? left : L->bs);
		b->len = (uint32_t)align_up(b->need, DIO_ALIGN);
		sh->next_read += b->need;
		if (sh->tail)
			sh->tail->next = b;
		else
			sh->head = b;
		sh->tail = b;
		submit_block(L, b);
	}
}

/* Feeds the checksum, then copies into the arena: the bytes are hashed
 * while the copy is still to come, and copied while still in the cache. */
static int loader_place(struct loader *L, const struct piece *p, uint64_t done,
		 const uint8_t *src, uint64_t n, struct xxh3_stream *xs, struct errinfo *e)
{
	double t0 = mono_now(), t1;
	int r;

	xxh3_stream_update(xs, src, n);
	t1 = mono_now();
	r = arena_write(L->arena, p->seg, p->off + done, src, n, e);
	L->st->hash_seconds += t1 - t0;
	L->st->copy_seconds += mono_now() - t1;
	return r;
}

static int place_block(struct loader *L, struct block *b, struct errinfo *e)
{
	struct shard *sh = b->sh;
	const uint8_t *buf = L->p->bufs + (size_t)b->buf * L->bs;
	uint64_t endb = b->off + b->need;

	while (sh->cur < sh->npieces) {
		struct piece *p = &sh->pieces[sh->cur];
		uint64_t start = p->file_off + sh->cur_done;
		uint64_t stop = p->file_off + p->size < endb ? p->file_off + p->size : endb;

		if (start >= endb || start < b->off) /* the piece lies in a later run */
			break;
		if (sh->cur_done == 0) {
			xxh3_stream_reset(sh->xs);
			if (L->on_tensor_start)
				L->on_tensor_start(L->on_tensor_arg, (uint32_t)(p->t - L->m->tensors));
		}
		int r = loader_place(L, p, sh->cur_done, buf + (start - b->off), stop - start, sh->xs, e);
		if (r < 0)
			return r;
		sh->cur_done += stop - start;
		L->placed += stop - start;
		if (sh->cur_done == p->size) {
			uint64_t h = xxh3_stream_digest(sh->xs);
			if (L->verify && h != p->t->xxh3)
				return err_set(e, -EIO, "tensor %s: its bytes in %s no longer match the checksum of the first load (the file changed on disk?)",
					       p->t->name, sh->sf->path);
			p->t->xxh3 = h;
			if (L->on_tensor)
				L->on_tensor(L->on_tensor_arg, (uint32_t)(p->t - L->m->tensors));
			sh->cur++;
			sh->cur_done = 0;
		}
	}
	return 0;
}

/* Places every finished block at the head of each shard's queue. After each
 * block its buffer is reused for a new read, submitted before the next copy
 * starts, so the disk is never idle while this thread copies and hashes. */
static int drain(struct loader *L, struct errinfo *e)
{
	for (size_t f = 0; f < L->nshards; f++) {
		struct shard *sh = &L->shards[f];
		while (sh->head && sh->head->done) {
			struct block *b = sh->head;
			int r = place_block(L, b, e);
			if (r < 0)
				return r;
			sh->head = b->next;
			if (!sh->head)
				sh->tail = NULL;
			L->free_bufs[L->nfree++] = b->buf;
			loader_fill(L);
			io_uring_submit(&L->p->ring);
		}
	}
	progress_update(&L->prog, L->placed);
	if (L->placed_out)
		__atomic_store_n(L->placed_out, L->placed, __ATOMIC_RELAXED);
	return 0;
}

static int complete(struct loader *L, struct block *b, int res, struct errinfo *e)
{
	struct shard *sh = b->sh;
	uint64_t off = b->off + b->got;

	if (loader_cqe_hook)
		loader_cqe_hook(sh->sf->path, off, &res);
	/* Every block in flight on the O_DIRECT fd may come back refused; the
	 * first switches the shard to buffered reads, all are read again. */
	if (res == -EINVAL && b->direct) {
		int r = sh->direct ? fall_back(L, sh, e) : 0;
		if (r < 0)
			return r;
		submit_block(L, b);
		return 0;
	}
	/* RWF_DONTCACHE unknown to the kernel or the file system: every block
	 * in flight with it may come back refused; the first switches the
	 * shard to plain buffered reads, all are read again. */
	if ((res == -EOPNOTSUPP || res == -EINVAL) && b->dontcache) {
		if (sh->dontcache)
			log_info("%s: RWF_DONTCACHE not supported here; reading it buffered", sh->sf->path);
		sh->dontcache = false;
		submit_block(L, b);
		return 0;
	}
	if (res == -EAGAIN || res == -EINTR) {
		submit_block(L, b);
		return 0;
	}
	if (res < 0)
		return err_set(e, res, "%s: read error at offset %" PRIu64 ": %s",
			       sh->sf->path, off, strerror(-res));
	b->got += (uint32_t)res;
	L->read += (uint64_t)res;
	if (b->got >= b->need) {
		b->done = true;
		return 0;
	}
	if (res == 0 || (sh->direct && b->got % DIO_ALIGN))
		return err_set(e, -EIO,
			       "%s: short read at offset %" PRIu64 ": the file ends before its %" PRIu64 " bytes (changed while loading?)",
			       sh->sf->path, off + (uint64_t)res, sh->sf->file_size);
	submit_block(L, b);
	return 0;
}

static bool finished(const struct loader *L)
{
	for (size_t f = 0; f < L->nshards; f++)
		if (L->shards[f].cur < L->shards[f].npieces)
			return false;
	return true;
}

/* --read-rate: sleeps until the bytes read so far are within the rate. */
static void pace(const struct loader *L)
{
	double ahead;

	if (!L->read_rate)
		return;
	ahead = (double)L->read / (double)L->read_rate - (mono_now() - L->t0);
	if (ahead > 0.0005) {
		struct timespec ts = { (time_t)ahead, (long)((ahead - (double)(time_t)ahead) * 1e9) };
		nanosleep(&ts, NULL);
	}
}

/* Tests only: once half the bytes are read, the load waits while the
 * file named by $WSRV_TEST_LOAD_HOLD exists, so that a test sees a load
 * in progress for as long as it needs (not for as long as a rate lasts
 * on a busy machine). Never in a packager's build (test_seam.h). */
static void seam_hold(const struct loader *L)
{
	const char *flag = test_seam("WSRV_TEST_LOAD_HOLD");

	if (!flag || L->read < L->prog.total / 2)
		return;
	while (access(flag, F_OK) == 0 && !(L->stop && L->stop())) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static int run_loop(struct loader *L, struct errinfo *e)
{
	while (!finished(L)) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		int r;

		if (L->stop && L->stop())
			return err_set(e, -ECANCELED, "the load was stopped");
		loader_fill(L);
		if (L->inflight == 0)
			return err_set(e, -EIO, "loader stalled with tensors left to place");
		r = io_uring_submit_and_wait(&L->p->ring, 1);
		if (r < 0 && r != -EINTR)
			return err_set(e, r, "io_uring_submit_and_wait: %s", strerror(-r));
		io_uring_for_each_cqe(&L->p->ring, head, cqe) {
			r = complete(L, io_uring_cqe_get_data(cqe), cqe->res, e);
			n++;
			L->inflight--;
			if (r < 0) {
				io_uring_cq_advance(&L->p->ring, n);
				return r;
			}
		}
		io_uring_cq_advance(&L->p->ring, n);
		r = drain(L, e);
		if (r < 0)
			return r;
		pace(L);
		seam_hold(L);
	}
	return 0;
}

/* The pool of read buffers: LOADER_BUFS_PER_READ per read in flight, so
 * finished blocks can wait for their turn without stopping the disk, but
 * never more than the model's blocks (a 64 MiB model does not pay for a
 * 256 MiB pool, its allocation and its registration); with a caller's
 * pool, no more than it has (have). */
static void size_pool(struct loader *L, const struct model *m, unsigned have)
{
	uint64_t blocks = 0, most = have ? have : (uint64_t)L->qd * LOADER_BUFS_PER_READ;

	for (size_t f = 0; f < m->nfiles; f++) {
		uint64_t from = align_down(m->files[f]->data_start, DIO_ALIGN);
		blocks += (m->files[f]->file_size - from + L->bs - 1) / L->bs;
	}
	L->nbufs = (unsigned)(blocks < most ? blocks : most);
	if (L->nbufs == 0)
		L->nbufs = 1;
	if (L->qd > L->nbufs)
		L->qd = L->nbufs;
}

static int init(struct loader *L, struct model *m, struct arena *a,
		const struct loader_opts *o, struct errinfo *e)
{
	L->qd = o->pool ? o->pool->qd : o->queue_depth ? o->queue_depth : LOADER_DEFAULT_QD;
	L->bs = o->pool ? o->pool->bs : o->block_size ? o->block_size : LOADER_DEFAULT_BLOCK;
	L->max_shards = o->max_shards ? o->max_shards : LOADER_DEFAULT_SHARDS;
	L->layer_order = o->layer_order;
	L->verify = o->verify;
	L->read_rate = o->read_rate;
	L->t0 = mono_now();
	if (L->bs % DIO_ALIGN || L->bs > (64u << 20) || L->qd > 1024)
		return err_set(e, -EINVAL, "block size must be a multiple of 4096 up to 64 MiB, queue depth at most 1024");
	L->arena = a;
	L->stop = o->stop;
	L->m = m;
	L->on_tensor = o->on_tensor;
	L->on_tensor_start = o->on_tensor_start;
	L->on_tensor_arg = o->on_tensor_arg;
	L->placed_out = o->placed_bytes;
	L->nshards = m->nfiles;
	L->shards = calloc(L->nshards, sizeof(*L->shards));
	size_pool(L, m, o->pool ? o->pool->nbufs : 0);
	L->blocks = calloc(L->nbufs, sizeof(*L->blocks));
	L->free_bufs = calloc(L->nbufs, sizeof(*L->free_bufs));
	if (!L->shards || !L->blocks || !L->free_bufs)
		return err_set(e, -ENOMEM, "out of memory");
	for (unsigned i = 0; i < L->nbufs; i++)
		L->free_bufs[L->nfree++] = (int)i;
	for (size_t f = 0; f < L->nshards; f++) {
		L->shards[f].sf = m->files[f];
		L->shards[f].fd = -1;
		L->shards[f].pieces = calloc(m->files[f]->ntensors + 1, sizeof(struct piece));
		if (!L->shards[f].pieces)
			return err_set(e, -ENOMEM, "out of memory");
	}
	return plan_pieces(L, m, o->want, e);
}

/* Every shard with something to read (a file none of o->want's tensors
 * lies in is neither opened nor checked: a disk tier's read of one layer
 * does not fail because another file changed). */
static int open_all(struct loader *L, const struct loader_opts *o, struct errinfo *e)
{
	for (size_t f = 0; f < L->nshards; f++) {
		if (!L->shards[f].npieces)
			continue;
		int r = open_shard(&L->shards[f], o->read, o->verify, e);
		if (r < 0)
			return r;
		if (!L->shards[f].direct)
			L->st->buffered_files++;
		L->st->cached_files += L->shards[f].cached;
	}
	return 0;
}

static int check_all(struct loader *L, struct errinfo *e)
{
	for (size_t f = 0; f < L->nshards; f++) {
		if (L->shards[f].fd < 0)
			continue;
		int r = check_same(&L->shards[f], "while it was being loaded", L->verify, e);
		if (r < 0)
			return r;
	}
	return 0;
}

/* After an error, waits for the reads still in flight so that none lands in
 * a buffer after it is unmapped. Reads prepared in the same batch as the
 * error (resubmissions) are submitted first, or they would never complete. */
static void quiesce(struct loader *L)
{
	struct io_uring_cqe *cqe;

	io_uring_submit(&L->p->ring);
	while (L->inflight) {
		if (io_uring_wait_cqe(&L->p->ring, &cqe) < 0)
			break;
		io_uring_cqe_seen(&L->p->ring, cqe);
		L->inflight--;
	}
}

static void cleanup(struct loader *L)
{
	if (L->p && L->p->ring_ok)
		quiesce(L);
	loader_pool_fini(&L->own);
	for (size_t f = 0; L->shards && f < L->nshards; f++) {
		if (L->shards[f].fd >= 0)
			close(L->shards[f].fd);
		xxh3_stream_free(L->shards[f].xs);
		free(L->shards[f].pieces);
	}
	free(L->shards);
	free(L->blocks);
	free(L->free_bufs);
}

int loader_run(struct model *m, struct arena *a, const struct loader_opts *o,
	       struct loader_stats *st, struct errinfo *e)
{
	static const struct loader_opts defaults = { 0 };
	struct loader_stats dummy;
	struct loader L = { 0 };
	double t0 = mono_now();
	int r;

	if (!o)
		o = &defaults;
	L.st = st ? st : &dummy;
	memset(L.st, 0, sizeof(*L.st));
	r = init(&L, m, a, o, e);
	if (r == 0)
		r = open_all(&L, o, e);
	if (r == 0)
		r = setup_ring(&L, o->pool, e);
	if (r == 0) {
		char what[96];

		snprintf(what, sizeof(what), "model %s", m->name);
		progress_begin(&L.prog, o->progress, what, m->data_bytes);
		if (o->total_bytes)
			__atomic_store_n(o->total_bytes, m->data_bytes, __ATOMIC_RELAXED);
		r = run_loop(&L, e);
		progress_end(&L.prog);
	}
	if (r == 0)
		r = check_all(&L, e);
	L.st->bytes_read = L.read;
	L.st->pool_bytes = L.p ? L.p->bufs_len : 0;
	L.st->tensor_bytes = L.placed;
	L.st->seconds = mono_now() - t0;
	cleanup(&L);
	return r;
}
