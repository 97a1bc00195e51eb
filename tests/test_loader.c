// SPDX-License-Identifier: MIT
/* test_loader.c - the io_uring loader: every tensor's bytes in the arena
 * equal the file's bytes and its checksum matches an independent one; the
 * buffered fallback; and failures mid-load (read errors, short reads, a file
 * changed under it) name the file and offset. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <xxhash.h>

#include "fixture.h"
#include "xxh3_stream.h"
#include "manifest.h"
#include "arena_struct.h"
#include "model_load.h"
#include "page_cached.h"

/* dir[0]: llama-mini in 3 shards; dir[1]: deepseek-v3-mini in 2. */
static struct fixture F = { .tag = "loader", .models = {
	{ "llama-mini", 24 << 20, .layers = 3, .shards = 3, .seed = 42 },
	{ "deepseek-v3-mini", 24 << 20, .layers = 2, .shards = 2, .seed = 7 } } };

static struct load_opts opts(void)
{
	struct load_opts o = { 0 };

	o.arena.lock = geteuid() != 0 ? LOCK_OFF : LOCK_ON;
	/* Huge pages are test_hugepages' business; tests run in parallel and
	 * must not race for the few reserved. */
	o.arena.hugepages = HUGEPAGES_OFF;
	/* The reads these tests shape are O_DIRECT's; auto's choice has its
	 * own test (auto_reads_what_the_cache_holds). */
	o.loader.read = READ_DIRECT;
	return o;
}

/* Compares every tensor of lm with an independent pread of its file. */
static void loader_check_bytes(const struct loaded_model *lm)
{
	const struct model *m = lm->model;

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		uint8_t *want = malloc(t->size + 1);
		int fd = open(m->files[t->file]->path, O_RDONLY | O_CLOEXEC);

		assert_true(fd >= 0);
		assert_int_equal(pread(fd, want, t->size, (off_t)t->file_off), (ssize_t)t->size);
		close(fd);
		if (memcmp(arena_ptr(lm->arena, t->segment, t->offset), want, t->size))
			fail_msg("tensor %s: arena bytes differ from the file", t->name);
		if (XXH3_64bits(want, t->size) != t->xxh3)
			fail_msg("tensor %s: checksum differs", t->name);
		free(want);
	}
}

static struct loaded_model *load(const char *path, const struct load_opts *o)
{
	struct loaded_model *lm = NULL;
	struct errinfo e;

	if (model_load("m", path, o, &lm, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(lm->arena->sealed);
	return lm;
}

static void bytes_equal_files(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm = load(F.dir[0], &o);

	loader_check_bytes(lm);
	assert_int_equal(lm->stats.tensor_bytes, lm->model->data_bytes);
	loaded_model_free(lm);
	lm = load(F.dir[1], &o);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	/* The reference fixture, whose tensors sit at unaligned offsets. */
	lm = load(pjoin(fixtures_dir(), "overall.safetensors"), &o);
	loader_check_bytes(lm);
	assert_int_equal(lm->model->ntensors, 9);
	loaded_model_free(lm);
}

/* One read in flight and 4 KiB blocks: tensors span many blocks, blocks hold
 * many tensors; and many small reads in flight, completing out of order. */
static void small_blocks_and_deep_queues(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm;

	o.loader.queue_depth = 1;
	o.loader.block_size = 4096;
	o.loader.max_shards = 1;
	lm = load(F.dir[0], &o);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	o.loader.queue_depth = 256;
	o.loader.max_shards = 8;
	lm = load(F.dir[1], &o);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	o.model.max_segment = 1 << 20;
	lm = load(F.dir[0], &o);
	assert_true(lm->arena->nseg > 1);
	loader_check_bytes(lm);
	loaded_model_free(lm);
}

static void empty_and_scalar_tensors(void **s)
{
	char *d = test_tmpdir("loader-empty");
	struct load_opts o = opts();
	struct loaded_model *lm;
	const char *p = pjoin(d, "x.safetensors");

	assert_int_equal(st_write(p,
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
		"\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
		"\"f\":{\"dtype\":\"F4\",\"shape\":[6],\"data_offsets\":[4,7]}}", 7, NULL), 0);
	lm = load(p, &o);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	assert_int_equal(st_write(p, "{}", 0, NULL), 0);
	lm = load(p, &o);
	assert_int_equal(lm->model->ntensors, 0);
	loaded_model_free(lm);
	rm_rf(d);
	free(d);
}

static int refuse_direct(const char *path, int flags)
{
	int fd;

	if (flags & O_DIRECT)
		return -EINVAL;
	fd = open(path, flags);
	return fd < 0 ? -errno : fd;
}

static void buffered_fallback(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm;

	loader_open_hook = refuse_direct;
	lm = load(F.dir[0], &o);
	loader_open_hook = NULL;
	assert_int_equal(lm->stats.buffered_files, lm->model->nfiles);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	o.loader.read = READ_BUFFERED;
	lm = load(F.dir[0], &o);
	loader_check_bytes(lm);
	loaded_model_free(lm);
}

static int eopnotsupp_left;

static char refused_path[4096];

/* Refuses the next eopnotsupp_left reads of one file: as a kernel without
 * RWF_DONTCACHE refuses every read in flight with it, not only the first. */
static void refuse_dontcache(const char *path, uint64_t off, int *res)
{
	if (!refused_path[0])
		snprintf(refused_path, sizeof(refused_path), "%s", path);
	if (eopnotsupp_left && *res > 0 && strcmp(path, refused_path) == 0) {
		eopnotsupp_left--;
		*res = -EOPNOTSUPP;
	}
}

/* Issue 12: buffered reads that leave nothing cached (RWF_DONTCACHE), and a
 * kernel or file system without it: the read is done again plainly. */
static void dontcache_reads(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm;

	o.loader.read = READ_DONTCACHE;
	lm = load(F.dir[0], &o);
	assert_int_equal(lm->stats.buffered_files, lm->model->nfiles);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	/* Three refused: the second used to fail the load, the shard having
	 * already switched to plain reads when it came back. */
	eopnotsupp_left = 3;
	o.loader.block_size = 64 << 10; /* many blocks of one shard in flight */
	loader_cqe_hook = refuse_dontcache;
	lm = load(F.dir[0], &o);
	loader_cqe_hook = NULL;
	assert_int_equal(eopnotsupp_left, 0);
	loader_check_bytes(lm);
	loaded_model_free(lm);
}

/* Every file of the model at dir read into the page cache (warm), or
 * written back and dropped from it. */
static void cache_files(const char *dir, bool warm)
{
	struct load_opts o = opts();
	struct loaded_model *lm = load(dir, &o);
	char buf[1 << 16];

	for (size_t f = 0; f < lm->model->nfiles; f++) {
		int fd = open(lm->model->files[f]->path, O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		while (warm && read(fd, buf, sizeof(buf)) > 0)
			;
		if (!warm) {
			assert_int_equal(fdatasync(fd), 0);
			assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
		}
		close(fd);
	}
	loaded_model_free(lm);
}

/* The share of file f of lm in the page cache, both ways. */
static void cached_share(const struct loaded_model *lm, size_t f, double *kernel, double *mincore)
{
	int fd = open(lm->model->files[f]->path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	*kernel = page_cached_share(fd, lm->model->files[f]->file_size);
	*mincore = page_cached_share_mincore(fd, lm->model->files[f]->file_size);
	close(fd);
}

/* --read auto (wsrvd's default): a file the page cache holds is read
 * through it, one it does not with O_DIRECT; the same bytes either way.
 * The share cached, by the kernel's count and by mincore, agrees. */
static void auto_reads_what_the_cache_holds(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm = load(F.dir[0], &o);
	double k, mc;

	if (lm->stats.buffered_files) { /* no O_DIRECT here (tmpfs): nothing to choose */
		loaded_model_free(lm);
		skip();
	}
	loaded_model_free(lm);
	o.loader.read = READ_AUTO;
	cache_files(F.dir[0], true);
	lm = load(F.dir[0], &o);
	assert_int_equal(lm->stats.cached_files, lm->model->nfiles);
	assert_int_equal(lm->stats.buffered_files, lm->model->nfiles);
	loader_check_bytes(lm);
	cached_share(lm, 0, &k, &mc);
	assert_true(k >= 0.9 && mc >= 0.9);
	loaded_model_free(lm);

	cache_files(F.dir[0], false);
	lm = load(F.dir[0], &o);
	assert_int_equal(lm->stats.cached_files, 0);
	assert_int_equal(lm->stats.buffered_files, 0);
	loader_check_bytes(lm); /* reads the files: only after the load's choice */
	cache_files(F.dir[0], false);
	cached_share(lm, 0, &k, &mc);
	assert_true(k < 0.1 && mc < 0.1);
	loaded_model_free(lm);
}

/* This process from now on: cachestat (451) fails with EPERM, as under
 * the shipped unit (SystemCallFilter=@system-service with
 * SystemCallErrorNumber=EPERM: Debian 12's systemd does not know it). */
static void deny_cachestat(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 451, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	assert_int_equal(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	assert_int_equal(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
}

/* Issue 60 item 10: under the unit's filter cachestat is EPERM, not
 * ENOSYS, and --read auto took every file for uncached (a restart read
 * cached files from the disk again). It falls back to mincore on any
 * error, and sees the cache as well. (This case's own process: the filter
 * goes with it.) */
static void auto_sees_the_cache_under_the_units_filter(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm;
	double k, mc;
	bool direct;

	cache_files(F.dir[0], true);
	deny_cachestat();
	lm = load(F.dir[0], &o);
	direct = lm->stats.buffered_files == 0; /* else tmpfs: auto has no choice */
	cached_share(lm, 0, &k, &mc);
	assert_true(mc >= 0.9);
	assert_true(k >= 0.9);
	loaded_model_free(lm);
	o.loader.read = READ_AUTO;
	lm = load(F.dir[0], &o);
	if (direct)
		assert_int_equal(lm->stats.cached_files, lm->model->nfiles);
	loader_check_bytes(lm);
	loaded_model_free(lm);
}

/* Issue 12: a small model paid for a 256 MiB pool of read buffers. The pool
 * is sized from the model: no more buffers than it has blocks. */
static void pool_sized_from_model(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm = load(F.dir[0], &o);
	uint64_t blocks = 0;

	for (size_t f = 0; f < lm->model->nfiles; f++)
		blocks += lm->model->files[f]->file_size / LOADER_DEFAULT_BLOCK + 2;
	assert_true(lm->stats.pool_bytes > 0);
	assert_true(lm->stats.pool_bytes <= blocks * LOADER_DEFAULT_BLOCK);
	assert_true(lm->stats.pool_bytes < (uint64_t)LOADER_DEFAULT_QD * LOADER_DEFAULT_BLOCK);
	loaded_model_free(lm);
}

/* Registering the whole pool up front pinned (faulted in) every buffer
 * before the first read: 0.2-0.4 s for 256 MiB on a VM. Buffers are now
 * registered at first use, off a stack: a load with 2 reads in flight and
 * a pool of 8 pins only what it has in use at once. */
static void buffers_pinned_as_used(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm;

	o.loader.queue_depth = 2;
	o.loader.max_shards = 1;
	lm = load(F.dir[0], &o);
	loader_check_bytes(lm);
	assert_int_equal(lm->stats.pool_bytes, 8 * LOADER_DEFAULT_BLOCK);
	assert_true(lm->stats.pinned_bytes > 0);
	assert_true(lm->stats.pinned_bytes <= 3 * LOADER_DEFAULT_BLOCK);
	loaded_model_free(lm);
}

/* The AVX2 xxh3 (where the CPU has it) gives libxxhash's value, however the
 * bytes are split between updates. */
static void streaming_hash_matches_libxxhash(void **s)
{
	static uint8_t buf[300000];
	static const size_t cuts[] = { 0, 1, 63, 64, 65, 240, 241, 1024, 4095, 65536, 100001 };
	struct xxh3_stream *h = xxh3_stream_new();

	assert_non_null(h);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
		size_t n = sizeof(buf) - c * 7, at = cuts[c] < n ? cuts[c] : n;
		xxh3_stream_reset(h);
		xxh3_stream_update(h, buf, at);
		xxh3_stream_update(h, buf + at, n - at);
		assert_true(xxh3_stream_digest(h) == XXH3_64bits(buf, n));
	}
	xxh3_stream_reset(h);
	assert_true(xxh3_stream_digest(h) == XXH3_64bits(buf, 0));
	xxh3_stream_free(h);
}

static int hook_calls;
static int hook_res;
static int hook_after;

/* Replaces the result of the hook_after-th completion with hook_res. */
static void cqe_inject(const char *path, uint64_t off, int *res)
{
	if (hook_calls++ == hook_after)
		*res = hook_res;
}

static void expect_failure(const char *path, int res, int after, int err, const char *needle)
{
	struct load_opts o = opts();
	struct loaded_model *lm = NULL;
	struct errinfo e;
	int r;

	hook_calls = 0;
	hook_res = res;
	hook_after = after;
	loader_cqe_hook = cqe_inject;
	r = model_load("m", path, &o, &lm, &e);
	loader_cqe_hook = NULL;
	if (r == 0)
		fail_msg("load succeeded; expected: %s", needle);
	assert_int_equal(r, err);
	assert_null(lm);
	if (!strstr(e.msg, needle) || !strstr(e.msg, "offset") || !strstr(e.msg, ".safetensors"))
		fail_msg("unexpected message: %s", e.msg);
}

static void read_errors_fail_the_load(void **s)
{
	expect_failure(F.dir[0], -EIO, 3, -EIO, "read error");
	expect_failure(F.dir[0], 0, 5, -EIO, "short read");
	expect_failure(F.dir[1], -ENOSPC, 0, -ENOSPC, "read error");
}

/* A read refused with EINVAL (O_DIRECT not supported at read time) falls
 * back to buffered reads for that file and still loads every byte. */
static void einval_read_falls_back(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm = NULL;
	struct errinfo e;

	hook_calls = 0;
	hook_res = -EINVAL;
	hook_after = 0;
	loader_cqe_hook = cqe_inject;
	assert_int_equal(model_load("m", F.dir[0], &o, &lm, &e), 0);
	loader_cqe_hook = NULL;
	assert_true(lm->stats.buffered_files >= 1);
	loader_check_bytes(lm);
	loaded_model_free(lm);
}

static void cqe_refuse_all(const char *path, uint64_t off, int *res)
{
	if (hook_calls++ < hook_after)
		*res = -EINVAL;
}

/* Does the file system under dir take O_DIRECT opens? (The GPU machine's
 * /tmp does not: its files are read buffered from the start.) */
static bool direct_opens(const char *dir)
{
	char *p = NULL;
	int fd;

	if (asprintf(&p, "%s/model-00001-of-00003.safetensors", dir) < 0)
		return false;
	fd = open(p, O_RDONLY | O_DIRECT | O_CLOEXEC);
	free(p);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Regression: with several O_DIRECT reads in flight all refused, only the
 * first switched the file to buffered reads and the second failed the load
 * as a read error. Needs a file system that opens with O_DIRECT: on one
 * that refuses it the reads are buffered, and an EINVAL is a read error. */
static void einval_on_many_reads_in_flight(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm = NULL;
	struct errinfo e;

	if (!direct_opens(F.dir[0])) {
		fprintf(stderr, "einval_on_many_reads_in_flight: %s refuses O_DIRECT opens: nothing to fall back from\n",
			F.dir[0]);
		skip();
	}

	o.loader.block_size = 4096;
	o.loader.max_shards = 1;
	hook_calls = 0;
	hook_after = 16;
	loader_cqe_hook = cqe_refuse_all;
	if (model_load("m", F.dir[0], &o, &lm, &e) < 0)
		fail_msg("%s", e.msg);
	loader_cqe_hook = NULL;
	loader_check_bytes(lm);
	loaded_model_free(lm);
}

static void cqe_again_then_fail(const char *path, uint64_t off, int *res)
{
	int k = hook_calls++;

	if (k == hook_after)
		*res = -EAGAIN;
	else if (k == hook_after + 1)
		*res = -EIO;
}

/* Regression: a read resubmitted (EAGAIN) in the same batch of completions
 * as a fatal error was prepared but never submitted, and the error path
 * waited for it forever. */
static void error_with_resubmission_pending(void **s)
{
	struct load_opts o = opts();
	struct loaded_model *lm = NULL;
	struct errinfo e;

	o.loader.block_size = 4096;
	o.loader.queue_depth = 128;
	hook_calls = 0;
	hook_after = 8;
	loader_cqe_hook = cqe_again_then_fail;
	assert_int_equal(model_load("m", F.dir[0], &o, &lm, &e), -EIO);
	loader_cqe_hook = NULL;
	assert_non_null(strstr(e.msg, "read error"));
}

static void file_changed_under_it(void **s)
{
	char *d = test_tmpdir("loader-changed");
	struct load_opts o = opts();
	struct model *m;
	struct arena *a;
	struct errinfo e;
	int fd;

	assert_int_equal(make_model(d, "tiny", 2 << 20, 2, 2, 9), 0);
	assert_int_equal(model_open("m", d, &o.model, &m, &e), 0);
	assert_int_equal(arena_create("m", m->nsegments, m->seg_size, &o.arena, &a, &e), 0);
	/* Truncated after its header was read. */
	assert_int_equal(truncate(m->files[1]->path, (off_t)m->files[1]->file_size - 100), 0);
	assert_int_equal(loader_run(m, a, &o.loader, NULL, &e), -ESTALE);
	assert_non_null(strstr(e.msg, "changed"));
	assert_non_null(strstr(e.msg, "model-00002-of-00002.safetensors"));
	/* Rewritten in place with the same size. */
	assert_int_equal(truncate(m->files[1]->path, (off_t)m->files[1]->file_size), 0);
	fd = open(m->files[0]->path, O_WRONLY | O_CLOEXEC);
	assert_int_equal(pwrite(fd, "zz", 2, (off_t)m->files[0]->data_start), 2);
	close(fd);
	assert_int_equal(loader_run(m, a, &o.loader, NULL, &e), -ESTALE);
	arena_free(a);
	model_free(m);
	rm_rf(d);
	free(d);
}

static uint32_t placed_count;
static void count_placed(void *arg, uint32_t idx)
{
	(void)arg;
	(void)idx;
	placed_count++;
}

/* A subset (every third tensor, and with small blocks so that gaps are
 * skipped): only its tensors are placed, each exactly, and the reads cover
 * less than the files. The regression for the read cursor that skips
 * bytes nobody wants. */
static void subset_reads_its_ranges(void **s)
{
	struct load_opts o = opts();
	struct loader_stats st;
	struct model *m;
	struct arena *a;
	struct errinfo e;
	uint8_t *want;
	uint64_t bytes = 0, files = 0;
	uint32_t n = 0;

	assert_int_equal(model_open("m", F.dir[0], &o.model, &m, &e), 0);
	assert_int_equal(arena_create("m", m->nsegments, m->seg_size, &o.arena, &a, &e), 0);
	want = calloc(m->ntensors, 1);
	for (size_t i = 0; i < m->ntensors; i += 3) {
		want[i] = 1;
		bytes += m->tensors[i].size;
		n += m->tensors[i].size > 0;
	}
	for (size_t f = 0; f < m->nfiles; f++)
		files += m->files[f]->file_size;
	o.loader.want = want;
	o.loader.block_size = 64 << 10;
	o.loader.on_tensor = count_placed;
	placed_count = 0;
	assert_int_equal(loader_run(m, a, &o.loader, &st, &e), 0);
	assert_int_equal(st.tensor_bytes, bytes);
	assert_int_equal(placed_count, n);
	assert_true(st.bytes_read < files * 2 / 3);
	assert_int_equal(arena_seal(a, &e), 0);
	for (size_t i = 0; i < m->ntensors; i += 3) {
		const struct model_tensor *t = &m->tensors[i];
		uint8_t *buf = malloc(t->size + 1);
		int fd = open(m->files[t->file]->path, O_RDONLY | O_CLOEXEC);
		assert_int_equal(pread(fd, buf, t->size, (off_t)t->file_off), (ssize_t)t->size);
		close(fd);
		assert_memory_equal(arena_ptr(a, t->segment, t->offset), buf, t->size);
		assert_true(XXH3_64bits(buf, t->size) == t->xxh3);
		free(buf);
	}
	free(want);
	arena_free(a);
	model_free(m);
}

static int32_t order_seen[4096];
static uint32_t order_file[4096];
static uint32_t order_n;
static const struct model *order_m;
static void record_order(void *arg, uint32_t idx)
{
	(void)arg;
	if (order_n < 4096) {
		order_file[order_n] = order_m->tensors[idx].file;
		order_seen[order_n++] = order_m->tensors[idx].layer;
	}
}

/* Loads m in layer order with qd reads in flight; with strict, the
 * placements across shards are in layer order too (one read in flight),
 * else within each shard. */
static void check_order(struct model *m, unsigned qd, bool strict)
{
	struct load_opts o = opts();
	struct arena *a;
	struct errinfo e;

	assert_int_equal(arena_create("m", m->nsegments, m->seg_size, &o.arena, &a, &e), 0);
	o.loader.layer_order = true;
	o.loader.block_size = 64 << 10;
	o.loader.queue_depth = qd;
	o.loader.on_tensor = record_order;
	order_m = m;
	order_n = 0;
	assert_int_equal(loader_run(m, a, &o.loader, NULL, &e), 0);
	assert_int_equal(order_n, m->ntensors);
	for (uint32_t i = 0; i < order_n; i++)
		for (uint32_t k = i + 1; k < order_n; k++)
			if ((strict || order_file[k] == order_file[i]) &&
			    loader_order_key(order_seen[k]) < loader_order_key(order_seen[i]))
				fail_msg("qd %u: a tensor of layer %d placed after one of layer %d", qd,
					 order_seen[k], order_seen[i]);
	arena_free(a);
}

/* Serving while loading: 12 layers in 2 shards, whose files hold them in
 * name order (layers.1, layers.10, layers.11, layers.2, ...). Read in
 * layer order, tensors are placed layer 0 first, then the global group,
 * then 1, 2, ... 11 (each shard in that order; across shards too with one
 * read in flight, which the reads' order decides); begin + finish seal every
 * segment, mark each ready with every checksum, and the bytes are the
 * files'. */
static void layer_order_and_segments_while_loading(void **s)
{
	char *d = test_tmpdir("lorder");
	struct load_opts o = opts();
	struct loaded_model *lm;
	struct model *m;
	struct errinfo e;

	assert_int_equal(make_model(d, "llama-mini", 12 << 20, 12, 2, 11), 0);
	assert_int_equal(model_open("m", d, &o.model, &m, &e), 0);
	check_order(m, 1, true);
	check_order(m, 64, false);
	model_free(m);

	o = opts();
	o.loading_segments = 5;
	assert_int_equal(model_load_begin("m", d, &o, &lm, &e), 0);
	assert_true(lm->arena->nseg >= 4 && lm->arena->nseg <= 5);
	assert_true(lm->ready.fd >= 0 && lm->layout_fd >= 0);
	for (uint32_t i = 0; i < lm->arena->nseg; i++)
		assert_false(ready_page_segment_ready(&lm->ready, i));
	if (model_load_finish(lm, &o, &e) < 0)
		fail_msg("%s", e.msg);
	for (uint32_t i = 0; i < lm->arena->nseg; i++)
		assert_true(ready_page_segment_ready(&lm->ready, i));
	assert_int_equal(lm->ready.h->state, RD_READY);
	assert_true(lm->ready.h->manifest_hash == lm->manifest_hash);
	assert_true(lm->ready.h->placed_bytes == lm->model->data_bytes);
	for (size_t i = 0; i < lm->model->ntensors; i++)
		assert_true(lm->ready.xxh3[i] == lm->model->tensors[i].xxh3);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	rm_rf(d);
	free(d);
}

/* The identity of the manifest in fd (size bytes, over lm's segments). */
static uint64_t identity_of(const struct loaded_model *lm, int fd, uint64_t size)
{
	uint64_t sizes[MF_MAX_SEGMENTS];
	struct mf_view v;
	char err[200];
	uint64_t id;
	void *p;

	for (uint32_t i = 0; i < lm->arena->nseg; i++)
		sizes[i] = lm->arena->seg[i].size;
	assert_true((p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)) != MAP_FAILED);
	if (manifest_check(p, size, sizes, lm->arena->nseg, &v, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	id = manifest_identity(&v);
	munmap(p, size);
	return id;
}

/* A generation's identity is known from the attach on: the layout a
 * client attached while loading maps (checksums 0) and the manifest of
 * the model loaded (checksums set) name it alike; another load of other
 * files of the same shape names another (before, a loading model named
 * itself by a manifest hash of 0, and the copy service took a previous
 * wsrvd's bytes for the new one's). */
static void identity_from_the_attach_on(void **s)
{
	char *a = test_tmpdir("lident-a"), *b = test_tmpdir("lident-b");
	struct load_opts o = opts();
	struct loaded_model *la, *lb;
	struct errinfo e;
	uint64_t ida, idb;

	assert_int_equal(make_model(a, "llama-mini", 4 << 20, 2, 1, 1), 0);
	assert_int_equal(make_model(b, "llama-mini", 4 << 20, 2, 1, 2), 0);
	o.loading_segments = 3;
	assert_int_equal(model_load_begin("m", a, &o, &la, &e), 0);
	ida = identity_of(la, la->layout_fd, la->layout_size);
	assert_true(ida != 0);
	if (model_load_finish(la, &o, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(identity_of(la, la->manifest_fd, la->manifest_size) == ida);
	o = opts();
	o.loading_segments = 3;
	assert_int_equal(model_load_begin("m", b, &o, &lb, &e), 0);
	idb = identity_of(lb, lb->layout_fd, lb->layout_size);
	assert_true(idb != 0 && idb != ida);
	loaded_model_free(lb);
	loaded_model_free(la);
	rm_rf(a);
	rm_rf(b);
	free(a);
	free(b);
}

/* tmpfs takes O_DIRECT on some kernels and refuses it on others; either way
 * the bytes arrive. */
static void loads_from_tmpfs(void **s)
{
	char *d = NULL;
	struct load_opts o = opts();
	struct loaded_model *lm;

	if (asprintf(&d, "/dev/shm/wsrv-test-%d", getpid()) < 0 || mkdir(d, 0755) < 0)
		skip();
	assert_int_equal(make_model(d, "tiny", 2 << 20, 2, 1, 3), 0);
	lm = load(d, &o);
	loader_check_bytes(lm);
	loaded_model_free(lm);
	rm_rf(d);
	free(d);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(bytes_equal_files),
	cmocka_unit_test(small_blocks_and_deep_queues),
	cmocka_unit_test(subset_reads_its_ranges),
	cmocka_unit_test(empty_and_scalar_tensors),
	cmocka_unit_test(buffered_fallback),
	cmocka_unit_test(dontcache_reads),
	cmocka_unit_test(auto_reads_what_the_cache_holds),
	cmocka_unit_test(auto_sees_the_cache_under_the_units_filter),
	cmocka_unit_test(pool_sized_from_model),
	cmocka_unit_test(buffers_pinned_as_used),
	cmocka_unit_test(streaming_hash_matches_libxxhash),
	cmocka_unit_test(read_errors_fail_the_load),
	cmocka_unit_test(einval_read_falls_back),
	cmocka_unit_test(einval_on_many_reads_in_flight),
	cmocka_unit_test(error_with_resubmission_pending),
	cmocka_unit_test(file_changed_under_it),
	cmocka_unit_test(loads_from_tmpfs),
	cmocka_unit_test(layer_order_and_segments_while_loading),
	cmocka_unit_test(identity_from_the_attach_on),
)
