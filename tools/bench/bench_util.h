// SPDX-License-Identifier: MIT
/* bench_util.h - what the serving benchmarks share: a wsrvd of their own,
 * PSS readings, percentiles. */
#ifndef WSRV_BENCH_UTIL_H
#define WSRV_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc_mem.h"

struct wsrv_client;

struct bench_server {
	pid_t pid;
	char dir[128];
	char sock[200];
	const char *extra[4];       /* more wsrvd arguments, NULL-terminated (or none) */
	bool at_ready;              /* start returns at ready, its folios maybe still to come */
	char log[160];              /* wsrvd's stderr, in dir; its warnings said at the stop */
};

/* Waits (at most 120 s) until the server has settled: every model in the
 * pages it will keep (its 2 MiB folios made). 0 or a negative errno. */
int bench_server_settle(const struct bench_server *bs);
/* The server's CPU time so far, all threads, user + system (from
 * /proc): -1 when it cannot be read. */
double bench_server_cpu(const struct bench_server *bs);

/* Starts wsrvd (next to this program in the build tree, else $WSRVD, else
 * "wsrvd" on PATH) serving specs[0..n) ("NAME=PATH"), waits until it
 * answers and every model is in the pages it keeps (2 MiB folios are made
 * after a load). 0 or a negative errno. */
int bench_server_start(struct bench_server *bs, const char *const *specs, size_t n);
/* bench_server_start in two steps, so that clients can be started on the
 * socket's path before the server: reserve picks the directory and path,
 * launch starts wsrvd there and waits until it answers. */
int bench_server_reserve(struct bench_server *bs);
int bench_server_launch(struct bench_server *bs, const char *const *specs, size_t n);
void bench_server_stop(struct bench_server *bs);

/* wsrvd next to this program in the build tree, else $WSRVD, else "wsrvd". */
const char *bench_wsrvd_path(void);

/* Drops the page cache (as root; else nothing) for a cold start. */
void bench_drop_caches(void);

/* Reads one byte of every 4 KiB page of [p, p + n): a worker's pass over
 * weights it maps. Returns their sum, so that the reads are kept. */
unsigned touch_pages(const volatile uint8_t *p, uint64_t n);

/* qsort's comparator for doubles, ascending. */
int cmp_double(const void *a, const void *b);
/* The p-th percentile (0..100) of v[0..n), sorting v. */
double percentile(double *v, size_t n, double p);

struct wsrv_model;
/* The largest layer's bytes, the global group (position 0) aside. */
uint64_t bench_max_layer(struct wsrv_model *m);

struct wsrv_device;
struct wsrv_plan;
/* The host device, or the first CUDA device (cuda): NULL when it cannot
 * be opened. The caller owns it. */
struct wsrv_device *bench_open_device(bool cuda);
/* A plan that keeps every tensor resident, into *out (the caller's to
 * free): 0 or a negative errno. */
int bench_resident_plan(struct wsrv_plan **out);

struct wsrv_tier_info;
/* The first model's disk tier counters on the server at sock: 0 or -errno. */
int tier_now(const char *sock, struct wsrv_tier_info *t);

/* A figure against its bar: "OK" or "SHORT" (at most bar; at least bar),
 * "n/a" when the figure could not be made (NaN or infinite). */
const char *bench_at_most(double v, double bar);
const char *bench_at_least(double v, double bar);

#endif
