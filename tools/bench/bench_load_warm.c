// SPDX-License-Identifier: MIT
/* bench_load_warm.c - `wsrv-bench load --warm`: the load with its files
 * already in the page cache (a model just downloaded, or read by another
 * process), against one process mapping the same files and touching every
 * page (safetensors' safe_open over a warm cache). The load runs as
 * wsrvd's default reads (--read auto: a file the cache holds is read from
 * it) and with --read direct (from the disk, as before auto), each after
 * the same settle. */
#include "bench_load_warm.h"

#include <errno.h>
#include <stdio.h>

#include "clock.h"

/* Every file mapped and each of its pages read once. Seconds or -1. */
static double mmap_pass(const struct files *f)
{
	double t0 = mono_now();
	unsigned sum = 0;

	return files_touch_all(f, &sum) < 0 ? -1 : mono_now() - t0;
}

/* The load read as mode: seconds, or -1; the files it read from the
 * cache into *cached. */
static double load_as(const char *path, const struct load_opts *lo, enum read_mode mode, unsigned *cached)
{
	struct load_opts o = *lo;
	struct loaded_model *lm;
	struct errinfo e;
	double s;

	o.loader.read = mode;
	load_settle();
	if (model_load("bench", path, &o, &lm, &e) < 0) {
		fprintf(stderr, "wsrv-bench load --warm: %s\n", e.msg);
		return -1;
	}
	s = lm->total_seconds;
	*cached = lm->stats.cached_files;
	loaded_model_free(lm);
	return s;
}

/* The files back in the page cache, and the least share of them cached
 * seen so far into w. */
static void warm_up(const struct files *f, struct warm *w)
{
	double c;

	buffered_read(f, 1 << 20);
	c = cached_fraction(f);
	w->cached_min = w->cached_min < 0 || c < w->cached_min ? c : w->cached_min;
}

int load_warm_round(const char *path, const struct load_opts *lo, const struct files *f, struct warm *w, int i)
{
	unsigned cached = 0, none;

	if (i == 0)
		w->cached_min = -1;
	warm_up(f, w);
	if (i % 2) {
		w->direct_s[i] = load_as(path, lo, READ_DIRECT, &none);
		warm_up(f, w);
	}
	w->auto_s[i] = load_as(path, lo, lo->loader.read, &cached);
	if (i % 2 == 0) {
		warm_up(f, w);
		w->direct_s[i] = load_as(path, lo, READ_DIRECT, &none);
	}
	warm_up(f, w);
	w->mmap_s[i] = mmap_pass(f);
	w->cached_files = cached;
	fprintf(stderr, "warm run %d: one mmap pass %.3f s, wsrv %.3f s (%u files from the cache), wsrv --read direct %.3f s\n",
		i, w->mmap_s[i], w->auto_s[i], cached, w->direct_s[i]);
	return w->mmap_s[i] < 0 || w->auto_s[i] < 0 || w->direct_s[i] < 0 ? -EIO : 0;
}

void load_warm_print(const struct files *f, int n, struct warm *w, json_t *o)
{
	double mm = median(w->mmap_s, n), au = median(w->auto_s, n), di = median(w->direct_s, n);

	if (o) {
		json_object_set_new(o, "warm", json_pack("{s:f, s:f, s:f, s:f, s:f, s:i, s:f}",
			"mmap_pass_s", mm, "wsrv_s", au, "wsrv_direct_s", di, "wsrv_vs_mmap", au / mm,
			"direct_vs_mmap", di / mm, "cached_files", (int)w->cached_files, "cached_min", w->cached_min));
		return;
	}
	printf("files in the page cache (at least %.1f%% cached before each side); median of %d runs\n",
	       100 * w->cached_min, n);
	printf("  one mmap pass, every page     %.3f s   (baseline)\n", mm);
	printf("  wsrv load (%u of %zu files from the cache)  %.3f s   %.2fx the mmap pass\n", w->cached_files, f->n, au,
	       au / mm);
	printf("  wsrv load, --read direct      %.3f s   %.2fx the mmap pass\n", di, di / mm);
}
