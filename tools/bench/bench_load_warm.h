// SPDX-License-Identifier: MIT
/* bench_load_warm.h - `wsrv-bench load --warm`: the load from files the
 * page cache holds, against one mmap pass over them. */
#ifndef WSRV_BENCH_LOAD_WARM_H
#define WSRV_BENCH_LOAD_WARM_H

#include <jansson.h>

#include "bench_files.h"

#define WARM_MAX_REPEAT 20

struct warm {
	double mmap_s[WARM_MAX_REPEAT];   /* one mmap pass over the cached files */
	double auto_s[WARM_MAX_REPEAT];   /* the load as wsrvd's default reads */
	double direct_s[WARM_MAX_REPEAT]; /* the load with --read direct */
	unsigned cached_files;            /* files the default read from the cache */
	double cached_min;                /* the least share cached before a side */
};

/* Round i: the files read into the page cache, then one mmap pass over
 * them, the load as lo says (--read auto unless given) and the load with
 * --read direct, in an order that alternates between rounds. 0 or <0. */
int load_warm_round(const char *path, const struct load_opts *lo, const struct files *f, struct warm *w, int i);

/* The medians of n rounds: printed, or added to o (JSON). */
void load_warm_print(const struct files *f, int n, struct warm *w, json_t *o);

#endif
