// SPDX-License-Identifier: MIT
/* bench_files.h - a model's files as the disk benchmarks see them: the
 * baselines (a raw O_DIRECT read, a buffered read), the page cache dropped
 * and measured, CPU time, and a CPU burner for runs under contention. */
#ifndef WSRV_BENCH_FILES_H
#define WSRV_BENCH_FILES_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "loaded_door.h"

struct files {
	size_t n;
	char **path;   /* owned */
	uint64_t bytes;
	uint64_t tensor_bytes;
	struct model_held held; /* a partial load (--ranks); world 0: the whole model */
};

/* The files of the model at path, opened as lo (NULL: defaults) would.
 * 0 or -errno. */
int model_files(const char *path, const struct load_opts *lo, struct files *f);
void files_free(struct files *f);
/* Flushes and drops the files' pages from the page cache. */
int drop_cache(const struct files *f);
/* Fraction of the files' pages in the page cache. */
double cached_fraction(const struct files *f);
/* Every byte with O_DIRECT through io_uring, qd reads of bs bytes in flight
 * over up to `streams` files at once, as the loader reads. Seconds or -1. */
double raw_odirect(const struct files *f, unsigned qd, size_t bs, unsigned streams);
/* A plain read() loop over each file, bs bytes at a time. Seconds. */
double buffered_read(const struct files *f, size_t bs);
/* CPU time of this process, all threads, user + system, in seconds. */
double cpu_now(void);
/* The median of v[0..n), sorting v. */
double median(double *v, int n);
/* Every file mapped, each of its pages read once (sums into *sum, so
 * the reads are kept), and unmapped: what safe_open's reader does. 0 or
 * -1. */
int files_touch_all(const struct files *f, unsigned *sum);
/* The pause before each timed side of `wsrv-bench load`: memory freed by
 * the step before has gone back to the host. */
void load_settle(void);
/* A process that keeps one core busy (the last one) until burner_stop:
 * "a loaded host". Returns its pid or -errno. */
pid_t burner_start(void);
void burner_stop(pid_t pid);

#endif
