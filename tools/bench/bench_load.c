// SPDX-License-Identifier: MIT
/* bench_load.c - `wsrv-bench load`: how close the loader comes to the disk.
 *
 * For the same files in the same run: (1) a raw O_DIRECT io_uring read with
 * the loader's queue depth, block size and shard concurrency and no
 * placement, (2) the full
 * server load (model_load: headers, arena, read, place, checksum, seal), and
 * (3) a plain buffered read() loop. The page cache is dropped for the files
 * (posix_fadvise DONTNEED) before each, and what stayed cached is measured
 * with mincore and reported. The load's CPU time (all threads) is measured
 * beside a fresh-memory fill of the same bytes. --contend keeps one core
 * busy during (1) and (2).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cliarg.h"
#include "bench.h"
#include "loaded_door.h"
#include "progress.h"
#include "load_door.h"
#include "bench_files.h"
#include "bench_load_warm.h"
#include "hugemap.h"

#define MAX_REPEAT WARM_MAX_REPEAT


/* A reference for the CPU figure: putting the same bytes into fresh shared
 * memory with no disk and no checksum, write() from one hot buffer into a
 * new memfd, then (when the load locked) mapping and locking the pages as
 * the arena does. On a VM whose host takes freed memory back at once (as
 * here) this alone costs about as much as the whole load: the cost is the
 * hypervisor's, paid at each page's first touch. With folios, each 2 MiB
 * chunk is made one folio first, as the arena does (arena_folio.c): the
 * same bytes in the kind of memory the load put them in. CPU seconds or -1. */
static double fresh_memory_cpu(uint64_t bytes, bool lock, bool folios)
{
	size_t bs = 1 << 20, len = (size_t)(bytes + 4095) / 4096 * 4096;
	uint8_t *buf = malloc(bs);
	int fd = memfd_create("wsrv-bench-fill", MFD_CLOEXEC);
	void *p = MAP_FAILED;
	double c0 = cpu_now(), c = -1;

	if (folios)
		len = (len + HUGEMAP_ALIGN - 1) / HUGEMAP_ALIGN * HUGEMAP_ALIGN;
	if (!buf || fd < 0 || ftruncate(fd, (off_t)len) < 0)
		goto out;
	p = folios ? hugemap_shared(fd, len, PROT_READ) : mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED || (lock && mlock2(p, len, MLOCK_ONFAULT) < 0))
		goto out;
	memset(buf, 0x5a, bs);
	c0 = cpu_now();
	for (size_t off = 0; off < len; off += bs) {
		if (folios && off % HUGEMAP_ALIGN == 0 && arena_folio_collapse(fd, p, off) < 0)
			goto out;
		if (pwrite(fd, buf, len - off < bs ? len - off : bs, (off_t)off) < 0)
			goto out;
	}
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

struct result {
	double raw[MAX_REPEAT], wsrv[MAX_REPEAT], loader[MAX_REPEAT], buf[MAX_REPEAT];
	double cpu[MAX_REPEAT], fill[MAX_REPEAT], folio_fill[MAX_REPEAT];
	double cached_max;
	bool contend;
	bool warm;                  /* --warm: also from the page cache */
	struct warm w;
	bool locked;                /* whether the last load locked its arena */
	bool folios;                /* whether it made 2 MiB folios */
};

/* The full load, as wsrvd does it, in this process: seconds into *s, CPU
 * seconds per GB into *cpu, and whether the arena was locked and made
 * folios. */
static int timed_load(const char *path, const struct load_opts *lo, const struct files *f,
		      double *s, double *loop_s, double *cpu, bool *locked, bool *folios)
{
	struct loaded_model *lm;
	struct errinfo e;
	double c0 = cpu_now();

	if (model_load("bench", path, lo, &lm, &e) < 0) {
		fprintf(stderr, "wsrv-bench load: %s\n", e.msg);
		return -EINVAL;
	}
	*cpu = (cpu_now() - c0) / ((double)f->bytes / 1e9);
	*s = lm->total_seconds;
	*loop_s = lm->stats.seconds;
	*locked = arena_locked(lm->arena);
	*folios = arena_folios_made(lm->arena) > 0;
	loaded_model_free(lm);
	return 0;
}

/* Both fresh-memory references (the folio one when the load made folios;
 * round 0 learns that before its fills), each after a settle. */
static void fills(struct result *res, uint64_t bytes, int i)
{
	double gb = (double)bytes / 1e9;

	load_settle();
	res->fill[i] = fresh_memory_cpu(bytes, res->locked, false) / gb;
	res->folio_fill[i] = -1;
	if (res->folios) {
		load_settle();
		res->folio_fill[i] = fresh_memory_cpu(bytes, res->locked, true) / gb;
	}
}

/* One round: raw O_DIRECT and the wsrv load (both under the burner with
 * --contend), the fresh-memory reference (after the load in even rounds,
 * before it in odd ones), and a buffered read. */
static int load_one_round(const char *path, const struct load_opts *lo, const struct files *f,
		     struct result *res, int i)
{
	unsigned qd = lo->loader.queue_depth ? lo->loader.queue_depth : LOADER_DEFAULT_QD;
	unsigned streams = lo->loader.max_shards ? lo->loader.max_shards : LOADER_DEFAULT_SHARDS;
	size_t bs = lo->loader.block_size ? lo->loader.block_size : LOADER_DEFAULT_BLOCK;
	double gb = (double)f->bytes / 1e9, c;
	pid_t burner = res->contend ? burner_start() : 0;
	int r;

	drop_cache(f);
	c = cached_fraction(f);
	res->raw[i] = raw_odirect(f, qd, bs, streams);
	drop_cache(f);
	c = c > cached_fraction(f) ? c : cached_fraction(f);
	/* The fills go first in odd rounds: whichever runs second may reuse
	 * memory the first freed that the host has not taken back yet. */
	if (i % 2)
		fills(res, f->bytes, i); /* as round 0 */
	load_settle();
	r = timed_load(path, lo, f, &res->wsrv[i], &res->loader[i], &res->cpu[i], &res->locked,
		       &res->folios);
	burner_stop(burner);
	if (r < 0)
		return r;
	if (i % 2 == 0)
		fills(res, f->bytes, i);
	drop_cache(f);
	c = c > cached_fraction(f) ? c : cached_fraction(f);
	res->buf[i] = buffered_read(f, bs);
	/* Per-run figures on stderr: the spread says how noisy the disk is. */
	fprintf(stderr, "run %d: raw O_DIRECT %.2f GB/s, wsrv %.2f GB/s (%.3f CPU-s/GB; fresh-memory fill %.3f, in 2 MiB folios %.3f), buffered %.2f GB/s\n",
		i, gb / res->raw[i], gb / res->wsrv[i], res->cpu[i], res->fill[i], res->folio_fill[i],
		gb / res->buf[i]);
	res->cached_max = c > res->cached_max ? c : res->cached_max;
	return res->raw[i] < 0 ? -EIO : 0;
}

static void load_print(const struct files *f, int n, struct result *r, int json)
{
	double gb = (double)f->bytes / 1e9;
	double raw = gb / median(r->raw, n), ws = gb / median(r->wsrv, n);
	double ld = gb / median(r->loader, n), bu = gb / median(r->buf, n);
	double cpu = median(r->cpu, n), fill = median(r->fill, n);
	double ffill = r->folios ? median(r->folio_fill, n) : -1;

	if (json) {
		json_t *o = json_pack("{s:I, s:i, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"model_bytes", (json_int_t)f->bytes, "repeat", n, "contend", r->contend,
			"wsrv_gbps", ws, "loader_only_gbps", ld, "odirect_gbps", raw,
			"buffered_gbps", bu, "wsrv_vs_odirect", ws / raw, "wsrv_vs_buffered", ws / bu,
			"cpu_s_per_gb", cpu, "fresh_fill_cpu_s_per_gb", fill);
		json_object_set_new(o, "cached_fraction_max", json_real(r->cached_max));
		if (r->warm)
			load_warm_print(f, n, &r->w, o);
		if (r->folios)
			json_object_set_new(o, "fresh_folio_fill_cpu_s_per_gb", json_real(ffill));
		if (f->held.world)
			json_object_set_new(o, "held_bytes", json_integer((json_int_t)f->held.bytes));
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("files: %zu, %.3f GB; median of %d runs; page cache dropped before each (max %.1f%% still cached)%s\n",
	       f->n, gb, n, 100 * r->cached_max, r->contend ? "; one core kept busy (--contend)" : "");
	printf("  raw O_DIRECT io_uring read   %6.2f GB/s   (baseline)\n", raw);
	if (f->held.world)
		printf("  partial load: ranks %u-%u of %u hold %.3f of %.3f GB of tensors (%.1f%%); every rate here is the\n"
		       "  whole files' bytes over its time, so wsrv against raw is the partial load's time\n"
		       "  against reading every file\n", f->held.first, f->held.last, f->held.world,
		       f->held.bytes / 1e9, f->tensor_bytes / 1e9,
		       100.0 * (double)f->held.bytes / (double)f->tensor_bytes);
	printf("  %-26s   %6.2f GB/s   %.2fx of raw O_DIRECT\n",
	       f->held.world ? "wsrv load (partial)" : "wsrv load (full, as wsrvd)", ws, ws / raw);
	printf("    of which the read loop     %6.2f GB/s   %.2fx of raw O_DIRECT\n", ld, ld / raw);
	printf("  buffered read() loop, cold   %6.2f GB/s   wsrv is %.2fx this\n", bu, ws / bu);
	printf("  wsrv load CPU                %6.3f CPU-s/GB (all threads, user + system)\n", cpu);
	printf("  fresh-memory fill, no disk   %6.3f CPU-s/GB (write() of the same bytes into a new memfd; wsrv is %.2fx this)\n",
	       fill, cpu / fill);
	if (r->folios)
		printf("    the same in 2 MiB folios   %6.3f CPU-s/GB (each chunk collapsed first, as the arena does; wsrv is %.2fx this)\n",
		       ffill, cpu / ffill);
	if (r->warm)
		load_warm_print(f, n, &r->w, NULL);
}

int bench_load(int argc, char **argv)
{
	enum { O_MODEL = 1, O_REPEAT, O_JSON, O_CONTEND, O_WARM };
	struct option opts[LOAD_OPTIONS_COUNT + 6] = {
		{ "model", required_argument, NULL, O_MODEL },
		{ "repeat", required_argument, NULL, O_REPEAT },
		{ "json", no_argument, NULL, O_JSON },
		{ "contend", no_argument, NULL, O_CONTEND },
		{ "warm", no_argument, NULL, O_WARM },
	};
	struct load_opts lo = { 0 };
	struct result res = { 0 };
	struct files f = { 0 };
	const char *path = NULL;
	int repeat = 3, json = 0, c, r;
	struct errinfo e;

	memcpy(opts + 5, load_long_options, (LOAD_OPTIONS_COUNT + 1) * sizeof(struct option));
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
		else if (c == O_CONTEND)
			res.contend = true;
		else if (c == O_WARM)
			res.warm = true;
		else
			return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench load --model DIR [--repeat 1..%d] [--contend] [--warm] [--json]\n", MAX_REPEAT);
		return 2;
	}
	if (load_args_check(&lo, &e) < 0) {
		fprintf(stderr, "wsrv-bench load: %s\n", e.msg);
		return 2;
	}
	if (model_files(path, &lo, &f) < 0)
		return 1;
	for (int i = 0; i < repeat; i++)
		if (load_one_round(path, &lo, &f, &res, i) < 0 ||
		    (res.warm && load_warm_round(path, &lo, &f, &res.w, i) < 0))
			return 1;
	load_print(&f, repeat, &res, json);
	files_free(&f);
	load_args_free(&lo);
	return 0;
}
