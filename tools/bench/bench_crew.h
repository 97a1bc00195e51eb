// SPDX-License-Identifier: MIT
/* bench_crew.h - N worker processes started at once, each reporting a
 * fixed-size record when it is ready, then held until stopped: the
 * serving benchmarks' workers (serve, cold). */
#ifndef WSRV_BENCH_CREW_H
#define WSRV_BENCH_CREW_H

#include <stddef.h>
#include <sys/types.h>

#define CREW_MAX 32

struct crew {
	pid_t pid[CREW_MAX];
	int n, out[2];              /* out: the workers' reports (pipe) */
};

/* A worker's body, in its own process: writes one report to out (a
 * failure may write a short one, or none) and pauses until killed.
 * Returns its exit status. */
typedef int (*crew_fn)(void *arg, int out);

/* Starts n (at most CREW_MAX) workers running fn(arg), killed with their
 * parent. 0 or a negative errno (the ones started are w's to stop). */
int crew_start(struct crew *w, int n, crew_fn fn, void *arg);
/* One report of len bytes from each worker, into reports (n records):
 * 0, or -EIO when one ended without a whole one. */
int crew_collect(struct crew *w, void *reports, size_t len);
/* Kills and reaps the workers, closes the pipe. */
void crew_stop(struct crew *w);

#endif
