// SPDX-License-Identifier: MIT
/* bench_load.c - `wsrv-bench load`: how close the loader comes to the disk.
 *
 * For the same files in the same run: (1) a raw O_DIRECT io_uring read with
 * the loader's queue depth, block size and shard concurrency and no
 * placement, (2) the full
 * server load (model_load: headers, arena, read, place, checksum, seal), and
 * (3) a plain buffered read() loop. The page cache is dropped for the files
 * (posix_fadvise DONTNEED) before each, and what stayed cached is measured
 * with mincore and reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cliarg.h"
#include "bench.h"
#include "load_args.h"
#include "progress.h"

#define MAX_REPEAT 20

/* CPU time of this process, all threads, user + system. */
static double cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

struct files {
	size_t n;
	char **path;
	uint64_t bytes;
};

static int drop_cache(const struct files *f)
{
	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		/* Dirty pages (a model just written) are not dropped: flush first. */
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

/* Fraction of the files' pages in the page cache. */
static double cached_fraction(const struct files *f)
{
	uint64_t in = 0, total = 0;
	long pg = sysconf(_SC_PAGESIZE);

	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		size_t pages = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		unsigned char *v = malloc(pages);
		if (m != MAP_FAILED && v && mincore(m, (size_t)st.st_size, v) == 0)
			for (size_t p = 0; p < pages; p++)
				in += v[p] & 1;
		total += pages;
		free(v);
		if (m != MAP_FAILED)
			munmap(m, (size_t)st.st_size);
		close(fd);
	}
	return total ? (double)in / (double)total : 0;
}

/* Baseline 1: read every byte of every file with O_DIRECT through io_uring,
 * qd reads of bs bytes in flight, round-robin over up to `streams` files at
 * once as the loader does, into registered buffers that are each in at most
 * one read at a time; nothing placed, nothing hashed. Returns seconds or -1. */
static double raw_odirect(const struct files *f, unsigned qd, size_t bs, unsigned streams)
{
	struct io_uring ring;
	uint8_t *bufs = aligned_alloc(4096, (size_t)qd * bs);
	uint64_t *next = calloc(f->n, sizeof(uint64_t)), *size = calloc(f->n, sizeof(uint64_t));
	unsigned *slots = calloc(qd, sizeof(unsigned)), nfree = 0;
	struct iovec *iov = calloc(qd, sizeof(*iov));
	int *fds = calloc(f->n, sizeof(int));
	size_t rr = 0, inflight = 0;
	bool ring_ok = false, fixed;
	double t0, t = -1;

	if (!bufs || !fds || !next || !size || !slots || !iov ||
	    io_uring_queue_init(qd, &ring, 0) < 0)
		goto out;
	ring_ok = true;
	memset(bufs, 0, (size_t)qd * bs); /* fault the buffers in before timing */
	for (unsigned k = 0; k < qd; k++) {
		iov[k] = (struct iovec){ bufs + (size_t)k * bs, bs };
		slots[nfree++] = k;
	}
	/* Registered, as the loader's are: no page pinning per read. */
	fixed = io_uring_register_buffers(&ring, iov, qd) == 0;
	for (size_t i = 0; i < f->n; i++) {
		struct stat st;
		fds[i] = open(f->path[i], O_RDONLY | O_DIRECT | O_CLOEXEC);
		size[i] = fds[i] >= 0 && fstat(fds[i], &st) == 0 ? (uint64_t)st.st_size : 0;
	}
	t0 = mono_now();
	for (;;) {
		while (nfree) {
			/* The next file with bytes left among the first `streams` such. */
			size_t i = f->n, seen = 0;
			for (size_t k = 0; k < f->n && seen < streams; k++) {
				size_t c = (rr + k) % f->n;
				if (next[c] >= size[c])
					continue;
				seen++;
				i = c;
				rr = c + 1;
				break;
			}
			if (i == f->n)
				break;
			unsigned s = slots[--nfree];
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			if (fixed)
				io_uring_prep_read_fixed(sqe, fds[i], iov[s].iov_base, (unsigned)bs, next[i], (int)s);
			else
				io_uring_prep_read(sqe, fds[i], iov[s].iov_base, (unsigned)bs, next[i]);
			io_uring_sqe_set_data64(sqe, s);
			next[i] += bs;
			inflight++;
		}
		if (!inflight)
			break;
		struct io_uring_cqe *cqe;
		io_uring_submit_and_wait(&ring, 1);
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			slots[nfree++] = (unsigned)io_uring_cqe_get_data64(cqe);
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
		}
	}
	t = mono_now() - t0;
	for (size_t i = 0; i < f->n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
out:
	if (ring_ok)
		io_uring_queue_exit(&ring);
	free(fds);
	free(next);
	free(size);
	free(slots);
	free(iov);
	free(bufs);
	return t;
}

/* Waits until memory freed by the step before has gone back to the host.
 * On a VM with free page reporting (as here: page_reporting's min_free_ms
 * is 0), freed memory returns to the hypervisor at once, and the next first
 * touch of it costs the guest up to 1 CPU-second per GB; memory freed a
 * moment ago may not have gone yet and is cheap. Both the load and its CPU
 * floor are measured after this pause, so they start from the same state:
 * the state of a server started on a machine that was idle. */
static void settle(void)
{
	usleep(1500 * 1000);
}

/* Baseline 3, for CPU: what putting the same bytes into fresh shared memory
 * costs at the least, with no disk and no checksum: write() from one hot
 * buffer into a memfd, then (when the load locks) map and lock the pages as
 * the arena does. On a VM whose host reclaims freed memory this alone can
 * cost more than the rest of the load. Returns CPU seconds or -1. */
static double fresh_memory_cpu(uint64_t bytes, bool lock)
{
	size_t bs = 1 << 20, len = (size_t)(bytes + 4095) / 4096 * 4096;
	uint8_t *buf = malloc(bs);
	int fd = memfd_create("wsrv-bench-floor", MFD_CLOEXEC);
	void *p = MAP_FAILED;
	double c0 = cpu_now(), c = -1;

	if (!buf || fd < 0 || ftruncate(fd, (off_t)len) < 0)
		goto out;
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED || (lock && mlock2(p, len, MLOCK_ONFAULT) < 0))
		goto out;
	memset(buf, 0x5a, bs);
	c0 = cpu_now();
	for (size_t off = 0; off < len; off += bs)
		if (pwrite(fd, buf, len - off < bs ? len - off : bs, (off_t)off) < 0)
			goto out;
	if (lock && madvise(p, len, MADV_POPULATE_READ) < 0)
		goto out;
	c = cpu_now() - c0;
out:
	if (p != MAP_FAILED)
		munmap(p, len);
	if (fd >= 0)
		close(fd);
	free(buf);
	return c;
}

/* Baseline 2: a plain read() loop over each file, bs bytes at a time. */
static double buffered_read(const struct files *f, size_t bs)
{
	uint8_t *buf = malloc(bs);
	double t0 = mono_now();

	for (size_t i = 0; buf && i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		while (fd >= 0 && read(fd, buf, bs) > 0)
			;
		if (fd >= 0)
			close(fd);
	}
	free(buf);
	return mono_now() - t0;
}

static int model_files(const char *path, const struct load_opts *lo, struct files *f)
{
	struct model *m;
	struct errinfo e;

	if (model_open("bench", path, &lo->model, &m, &e) < 0) {
		fprintf(stderr, "wsrv-bench load: %s\n", e.msg);
		return -EINVAL;
	}
	f->n = m->nfiles;
	f->path = calloc(m->nfiles, sizeof(char *));
	for (size_t i = 0; f->path && i < m->nfiles; i++) {
		f->path[i] = strdup(m->files[i]->path);
		f->bytes += m->files[i]->file_size;
	}
	model_free(m);
	return f->path ? 0 : -ENOMEM;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct result {
	double raw[MAX_REPEAT], wsrv[MAX_REPEAT], loader[MAX_REPEAT], buf[MAX_REPEAT];
	double cpu[MAX_REPEAT], floor[MAX_REPEAT];
	double cached_max;
};

static int one_round(const char *path, const struct load_opts *lo, const struct files *f,
		     struct result *res, int i)
{
	unsigned qd = lo->loader.queue_depth ? lo->loader.queue_depth : LOADER_DEFAULT_QD;
	unsigned streams = lo->loader.max_shards ? lo->loader.max_shards : LOADER_DEFAULT_SHARDS;
	size_t bs = lo->loader.block_size ? lo->loader.block_size : LOADER_DEFAULT_BLOCK;
	struct loaded_model *lm;
	struct errinfo e;
	bool locked = false;
	double c;

	drop_cache(f);
	c = cached_fraction(f);
	res->raw[i] = raw_odirect(f, qd, bs, streams);
	drop_cache(f);
	c = c > cached_fraction(f) ? c : cached_fraction(f);
	settle();
	double c0 = cpu_now();
	if (model_load("bench", path, lo, &lm, &e) < 0) {
		fprintf(stderr, "wsrv-bench load: %s\n", e.msg);
		return -EINVAL;
	}
	res->wsrv[i] = lm->total_seconds;
	res->cpu[i] = (cpu_now() - c0) / ((double)f->bytes / 1e9);
	settle();
	res->floor[i] = fresh_memory_cpu(f->bytes, locked) / ((double)f->bytes / 1e9);
	res->loader[i] = lm->stats.seconds;
	locked = lm->arena->locked;
	loaded_model_free(lm);
	drop_cache(f);
	c = c > cached_fraction(f) ? c : cached_fraction(f);
	res->buf[i] = buffered_read(f, bs);
	/* Per-run figures on stderr: the spread says how noisy the disk is. */
	fprintf(stderr, "run %d: raw O_DIRECT %.2f GB/s, wsrv %.2f GB/s (%.3f cpu-s/GB, floor %.3f), buffered %.2f GB/s\n", i,
		(double)f->bytes / 1e9 / res->raw[i], (double)f->bytes / 1e9 / res->wsrv[i], res->cpu[i], res->floor[i],
		(double)f->bytes / 1e9 / res->buf[i]);
	res->cached_max = c > res->cached_max ? c : res->cached_max;
	return res->raw[i] < 0 ? -EIO : 0;
}

static void print(const struct files *f, int n, struct result *r, int json)
{
	double gb = (double)f->bytes / 1e9;
	double raw = gb / median(r->raw, n), ws = gb / median(r->wsrv, n);
	double ld = gb / median(r->loader, n), bu = gb / median(r->buf, n);

	if (json) {
		json_t *o = json_pack("{s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"model_bytes", (json_int_t)f->bytes, "repeat", n, "wsrv_gbps", ws,
			"loader_only_gbps", ld, "odirect_gbps", raw, "buffered_gbps", bu,
			"wsrv_vs_odirect", ws / raw, "wsrv_vs_buffered", ws / bu,
			"cached_fraction_max", r->cached_max);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("files: %zu, %.3f GB; median of %d runs; page cache dropped before each (max %.1f%% still cached)\n",
	       f->n, gb, n, 100 * r->cached_max);
	printf("  raw O_DIRECT io_uring read   %6.2f GB/s   (baseline)\n", raw);
	printf("  wsrv load (full, as wsrvd)   %6.2f GB/s   %.2fx of raw O_DIRECT\n", ws, ws / raw);
	printf("    of which the read loop     %6.2f GB/s   %.2fx of raw O_DIRECT\n", ld, ld / raw);
	printf("  buffered read() loop, cold   %6.2f GB/s   wsrv is %.2fx this\n", bu, ws / bu);
}

int bench_load(int argc, char **argv)
{
	enum { O_MODEL = 1, O_REPEAT, O_JSON };
	struct option opts[LOAD_OPTIONS_COUNT + 4] = {
		{ "model", required_argument, NULL, O_MODEL },
		{ "repeat", required_argument, NULL, O_REPEAT },
		{ "json", no_argument, NULL, O_JSON },
	};
	struct load_opts lo = { 0 };
	struct result res = { 0 };
	struct files f = { 0 };
	const char *path = NULL;
	int repeat = 3, json = 0, c, r;
	struct errinfo e;

	memcpy(opts + 3, load_long_options, (LOAD_OPTIONS_COUNT + 1) * sizeof(struct option));
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		r = load_args_handle(c, optarg, &lo, &e);
		if (r < 0) {
			fprintf(stderr, "wsrv-bench load: %s\n", e.msg);
			return 2;
		}
		if (r == 1)
			continue;
		if (c == O_MODEL)
			path = optarg;
		else if (c == O_REPEAT)
			repeat = (int)cliarg_long("wsrv-bench load", "--repeat", optarg, 1, MAX_REPEAT);
		else if (c == O_JSON)
			json = 1;
		else
			return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench load --model DIR [--repeat 1..%d] [--json]\n", MAX_REPEAT);
		return 2;
	}
	if (model_files(path, &lo, &f) < 0)
		return 1;
	for (int i = 0; i < repeat; i++)
		if (one_round(path, &lo, &f, &res, i) < 0)
			return 1;
	print(&f, repeat, &res, json);
	for (size_t i = 0; i < f.n; i++)
		free(f.path[i]);
	free(f.path);
	free((void *)lo.model.layer_patterns);
	return 0;
}
